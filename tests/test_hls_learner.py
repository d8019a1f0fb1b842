"""The online learners as HLS C++ (``toolchain/backends/hls/learner.py``, ``hls/bitforge_learner_*.h``): the g++ C
simulation against the golden learner over whole trajectories, every prediction, the final state and the LFSR
lanes code for code; ``bitforge learn --to hls``; the refusals when g++ or hls4ml is missing.

Each learner is one g++ build (4-8 s on a 2-core machine; the deep KAN's about 15 s, marked slow). A missing g++
or hls4ml is a failure, not a skip (as in tests/test_fixed_apfixed.py): the C simulation is what is tested.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

from bitforge.toolchain.backends.hls.gxx import HlsToolError, ap_types_dir, require_gxx
from bitforge.toolchain.backends.hls.learner import csim_vs_golden, generate_hls_learner, run_csim, write_hls_learner
from bitforge.toolchain.cli import main
from bitforge.toolchain.fixed import quantize
from bitforge.toolchain.learn import emulate as golden
from bitforge.toolchain.learn.commands import LearnOptions, resolve
from bitforge.toolchain.learn.spec import LearnerFormats, LearnerSpec, UpdateRule, build_learner, lane_seeds

pytestmark = pytest.mark.usefixtures("one_thread")


def task_learner(task: str, model: str = "kan", rounding: str = "nearest", samples: int = 1500):
    """The benchmark's reference learner of ``task`` and its stream as codes."""
    spec, stream = resolve(LearnOptions(task, model=model, rounding=rounding, samples=samples))
    learner = build_learner(spec, name=f"{task}-{model}")
    f = spec.formats
    return learner, quantize(stream.x, f.input), quantize(stream.target, f.datapath)


def assert_bit_exact(r: dict, samples: int) -> None:
    assert r["vectors"] == samples
    assert (r["mismatches"], r["state_mismatches"], r["lane_mismatches"]) == (0, 0, 0), r
    assert r["first_mismatch"] is None


def test_t1_kan_csim_built_by_its_own_script_equals_the_golden_trajectory(tmp_path):
    """The project as a user gets it: ``sh build_csim.sh`` builds and runs the testbench, which compares with the
    golden files itself; then bitforge's own runner reads predictions and the final state back from the same
    executable on a stream with a stretch of learn_enable = 0."""
    learner, x, t = task_learner("t1")
    le = np.ones(len(x), dtype=bool)
    le[700:760] = False  # a stretch without learning: the state must hold still
    traj = golden.run(learner, x, t, le)
    write_hls_learner(learner, tmp_path, x_codes=x, target_codes=t, learn_enable=le, golden=traj)
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run(["sh", str(tmp_path / "build_csim.sh")], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 of 1500 predictions differ, 0 of 8 state codes" in done.stdout
    exe = tmp_path / "build" / "t1_kan_csim"
    run = run_csim(learner, exe, x, t, le, data=tmp_path / "run")
    assert run.predictions.dtype == np.int64 and run.predictions.shape == (1500, 1)
    np.testing.assert_array_equal(run.predictions, traj.predictions)
    np.testing.assert_array_equal(run.state[0]["coeffs"], traj.final[0]["coeffs"])
    assert (run.state[0]["coeffs"] != learner.state()[0]["coeffs"]).any()  # it learned
    assert run.seconds > 0 and run.wall_seconds >= run.seconds
    # a golden file that differs in one code: the testbench says so and fails
    p = np.fromfile(tmp_path / "tb_data" / "golden_predictions.bin", dtype="<i8")
    p[123] += 1
    p.astype("<i8").tofile(tmp_path / "tb_data" / "golden_predictions.bin")
    done = subprocess.run([str(exe), str(tmp_path / "tb_data")], capture_output=True, text=True)
    assert done.returncode == 1 and "1 of 1500 predictions differ, 0 of 8 state codes" in done.stdout


def test_t1_kan_stochastic_rounding_matches_with_the_same_lfsr_lanes(tmp_path):
    learner, x, t = task_learner("t1", rounding="stochastic")
    r = csim_vs_golden(learner, x, t, work=tmp_path)
    assert_bit_exact(r, 1500)
    lanes = np.fromfile(tmp_path / "tb_data" / "csim_lanes.bin", dtype="<i8")
    seeds = np.concatenate([a.ravel() for layer in lane_seeds(learner.spec) for a in layer]).astype(np.int64)
    assert lanes.shape == seeds.shape and (lanes != seeds).all()  # every lane stepped, as the golden lanes did


def test_t4_kan_16_inputs_is_bit_exact(tmp_path):
    learner, x, t = task_learner("t4", samples=1000)
    r = csim_vs_golden(learner, x, t, work=tmp_path)
    assert_bit_exact(r, 1000)
    assert r["state_codes"] == learner.n_params == 16 * 11


@pytest.mark.parametrize("task,rounding", [("t1", "nearest"), ("t4", "stochastic")])
def test_mlp_learner_is_bit_exact(tmp_path, task, rounding):
    learner, x, t = task_learner(task, model="mlp", rounding=rounding, samples=800)
    r = csim_vs_golden(learner, x, t, work=tmp_path)
    assert_bit_exact(r, 800)
    assert r["state_codes"] == learner.n_params


@pytest.mark.slow  # two builds of about 12 s each
@pytest.mark.parametrize("rounding", ["nearest", "stochastic"])
def test_deep_kan_back_propagates_through_spline_derivatives_bit_exactly(tmp_path, rounding):
    """Hidden KAN layers: g_x = (1/h) sum_o g_o sum_m c_m D_m(u), a grid step that is not a power of two (an index
    multiplier and its 1/h), clamped inputs (zero gradient), learn_enable off now and then."""
    spec = LearnerSpec("kan", (3, 4, 2), grid_size=5, order=3, grid_range=(-1.5, 1.5),
                       rule=UpdateRule(3, rounding, lfsr_seed=7), init="normal", init_scale=0.5)
    learner = build_learner(spec, name="deep")
    f, rng = spec.formats, np.random.default_rng(1)
    x = rng.integers(f.input.min_code, f.input.max_code + 1, size=(600, 3))  # many beyond the grid: clamped
    t = rng.integers(f.datapath.min_code // 2, f.datapath.max_code // 2, size=(600, 2))
    r = csim_vs_golden(learner, x, t, rng.random(600) > 0.1, work=tmp_path)
    assert_bit_exact(r, 600)


def test_narrow_formats_saturate_alike(tmp_path):
    """An 8-bit MLP with SAT_SYM everywhere and an error type of its own rounding (RND): saturation and every
    rounding mode go through ap_fixed's assignment as in bitforge.toolchain.fixed."""
    spec = LearnerSpec("mlp", (2, 6, 1), rule=UpdateRule(1),
                       formats=LearnerFormats.make("fixed<8,3,RND_CONV,SAT_SYM>", guard_bits=3,
                                                   error="fixed<9,4,RND,SAT_SYM>"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        learner = build_learner(spec, name="narrow")
    f, rng = spec.formats, np.random.default_rng(2)
    x = rng.integers(f.input.min_code, f.input.max_code + 1, size=(500, 2))
    t = rng.integers(f.datapath.min_code, f.datapath.max_code + 1, size=(500, 1))
    traj = golden.run(learner, x, t)
    assert (np.abs(traj.final[0]["weight"]) == f.storage.max_code).any()  # the state did saturate
    assert_bit_exact(csim_vs_golden(learner, x, t, work=tmp_path, golden=traj), 500)


def test_the_check_sees_a_one_step_change_of_the_learning_rate(tmp_path):
    """The C simulation of a learner with lr_shift 2 against the golden trajectory of the same learner at
    lr_shift 1: the comparison must report it (a check that cannot fail proves nothing)."""
    learner, x, t = task_learner("t1", samples=400)
    other = learner.with_rule(lr_shift=learner.rule.lr_shift + 1)
    r = csim_vs_golden(other, x, t, work=tmp_path, golden=golden.run(learner, x, t))
    assert r["mismatches"] > 100 and r["state_mismatches"] > 0
    assert r["first_mismatch"]["sample"] >= 1  # sample 0 predicts with the initial state: equal


def test_the_project_has_every_file_and_the_vitis_script_sets_part_and_clock():
    learner, _, _ = task_learner("t1", samples=300)
    design = generate_hls_learner(learner, part="xc7a35tcpg236-1", clock_ns=8)
    assert set(design.files) == {"firmware/t1_kan.h", "firmware/t1_kan.cpp", "firmware/bitforge_learner_kan.h",
                                 "tb/t1_kan_tb.cpp", "build_csim.sh", "build_vitis.tcl", "README.md"}
    tcl = design.files["build_vitis.tcl"]
    for needle in ("set_top t1_kan", "set_part {xc7a35tcpg236-1}", "create_clock -period 8", "csim_design",
                   "csynth_design"):
        assert needle in tcl
    source = design.files["firmware/t1_kan.cpp"]
    assert "#pragma HLS PIPELINE II=1" in source and "ARRAY_PARTITION variable=coeffs0" in source
    assert "did not run Vitis HLS" in design.files["README.md"]
    assert generate_hls_learner(learner, part="xc7a35tcpg236-1", clock_ns=8).files == design.files  # deterministic
    mlp, _, _ = task_learner("t1", model="mlp", samples=300)
    assert "firmware/bitforge_learner_mlp.h" in generate_hls_learner(mlp).files


def test_learn_to_hls_records_the_c_simulation_in_the_report(tmp_path):
    out = tmp_path / "t1-hls"
    assert main(["learn", "t1", "--samples", "400", "--to", "hls", "-o", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    v = report["verification"]["golden_vs_hls_csim"]
    assert (v["vectors"], v["mismatches"], v["state_mismatches"]) == (400, 0, 0)
    assert v["seconds"] >= v["build_seconds"] > 0 and v["csim_samples_per_s"] > 0 and v["golden_samples_per_s"] > 0
    assert json.loads((out / "metrics.json").read_text())["hls"]["mismatches"] == 0
    assert "HLS C++" in (out / "report.md").read_text()
    for rel in ("hls/firmware/t1_kan.cpp", "hls/tb/t1_kan_tb.cpp", "hls/build_vitis.tcl", "hls/build_csim.sh",
                "hls/tb_data/stimulus.bin", "hls/tb_data/golden_state.bin"):
        assert (out / rel).is_file(), rel


def test_missing_gxx_or_hls4ml_is_a_clear_refusal_before_any_work(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no g++ on it
    with pytest.raises(HlsToolError, match=r"'g\+\+' not found on PATH.*apt-get install -y g\+\+"):
        require_gxx()
    out = tmp_path / "out"
    assert main(["learn", "t1", "--samples", "300", "--to", "hls", "-o", str(out)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "'g++' not found on PATH" in err and "apt-get install -y g++" in err
    assert "golden model" not in err and not out.exists()  # refused before the golden run, nothing written
    monkeypatch.setitem(sys.modules, "hls4ml", None)  # import hls4ml raises ImportError
    with pytest.raises(HlsToolError, match=r"hls4ml is not installed.*pip install"):
        ap_types_dir()
