"""The RTL online KAN learner: generated text, lint, and whole trajectories bit for bit on Icarus and Verilator.

Every simulation compares every prediction and the coefficient memory (read back half way and at the end
through the read-back port) with ``learn.emulate.run``. The default-run cases are short; the slow ones run
the issue's >= 10,000-sample trajectories and the ecp5-85f implementation.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from bitforge.models.online_tasks import make_task
from bitforge.toolchain.backends.rtl import learner_kan
from bitforge.toolchain.backends.rtl.learner_kan import basis_choice, generate_kan_learner
from bitforge.toolchain.fixed import quantize
from bitforge.toolchain.learn.spec import LearnerError, LearnerFormats, LearnerSpec, UpdateRule, build_learner
from bitforge.toolchain.verify import simulate_learner as sim_mod
from bitforge.toolchain.verify.simulate_learner import simulate_learner, write_sources
from bitforge.toolchain.verify.simulators import SimulationFailed, simulator_env


def kan_learner(sizes=(1, 1), order=3, rounding="nearest", lr=1, grid=(-2.25, 2.25), G=5, datapath="fixed<16,6>",
                guard=8, init="normal", seed=0) -> "object":
    fm = LearnerFormats.make(datapath, guard_bits=guard)
    return build_learner(LearnerSpec("kan", sizes, grid, G, order, "closed_form", fm,
                                     UpdateRule(lr, rounding, lfsr_seed=seed + 3), seed=seed, init=init))


def t1_reference():
    """The benchmark's T1 learner: KAN [1,1], G=5, k=3 on [-2.25, 2.25], eta 2**-1, <16,6>, 8 guard bits."""
    return kan_learner(init="linear")


def task_codes(L, task):
    f = L.formats
    return quantize(task.x, f.input), quantize(task.target, f.datapath)


def random_stream(L, n, seed=0, spread=1.3):
    """Inputs beyond the grid on both sides (the clamp), targets over the datapath, learn-enable mostly on."""
    rng = np.random.default_rng(seed)
    f, (lo, hi) = L.formats, L.spec.grid_range
    mid, half = (lo + hi) / 2, (hi - lo) / 2 * spread
    x = quantize(rng.uniform(mid - half, mid + half, (n, L.spec.sizes[0])), f.input)
    t = quantize(rng.uniform(-1.5, 1.5, (n, L.spec.sizes[-1])), f.datapath)
    return x, t, rng.random(n) > 0.15


def check(results: dict, n: int) -> None:
    for sim, r in results.items():
        assert r.samples == n and r.mismatches == 0, (sim, r)
        assert set(r.readback) == {str(n // 2), str(n)}
        assert all(c["mismatches"] == 0 and c["words"] > 0 for c in r.readback.values()), (sim, r.readback)


# -- generated text ----------------------------------------------------------------------------------------

def test_generation_is_deterministic_and_reports_ii_1():
    a, b = generate_kan_learner(t1_reference()), generate_kan_learner(t1_reference())
    assert a.files == b.files and a.ii == 1
    assert a.latency_cycles == 2  # ROM basis: one front cycle (index, ROM, rotation) + the learn cycle
    assert a.resources["multipliers"] == 2 * 4 + 1  # k+1 forward and k+1 update products, the index multiply
    assert generate_kan_learner(kan_learner(order=2, init="zeros"), basis="circuit").latency_cycles == 1 + 2 + 1 + 1


def test_basis_choice():
    assert basis_choice(t1_reference()) is False  # u_bits 8: the ROM
    assert basis_choice(t1_reference(), "circuit") is True
    with pytest.raises(LearnerError, match="basis option"):
        basis_choice(t1_reference(), "lut")


def test_banks_deeper_than_lut_ram_ask_for_block_ram():
    attr = '(* ram_style = "block", no_rw_check *) reg'
    shallow = generate_kan_learner(kan_learner(G=61, init="zeros"))  # 64 coefficients: banks of 16 words
    deep = generate_kan_learner(kan_learner(sizes=(2, 2, 1), G=62, init="zeros"))  # 65: banks of 17 words
    assert attr not in next(iter(shallow.files.values()))
    assert shallow.resources["coefficient_banks"] == "LUT RAM"
    text = next(iter(deep.files.values()))
    # the first layer's 2 inputs x (k + 1) banks; the hidden layer reads combinationally: no block RAM there
    assert text.count(attr) == 2 * 4 and "L1_mem_0_0 [0:16]" in text
    assert deep.resources["coefficient_banks"] == "block RAM, hidden layers LUT RAM"


def test_an_mlp_is_a_clear_error_for_the_kan_generator():
    fm = LearnerFormats.make("fixed<16,6>")
    mlp = build_learner(LearnerSpec("mlp", (2, 4, 1), formats=fm))
    with pytest.raises(LearnerError, match="is a mlp"):
        generate_kan_learner(mlp)


LINT_CASES = {
    "rom-k3-nearest": dict(),
    "rom-k2-stochastic-3x2": dict(sizes=(3, 2), order=2, rounding="stochastic", init="zeros"),
    "circuit-k1-stochastic-2x3": dict(sizes=(2, 3), order=1, rounding="stochastic", basis="circuit"),
    "circuit-k3-8bit": dict(sizes=(2, 1), datapath="fixed<8,4>", grid=(-2.0, 2.0), G=4, basis="circuit", lr=0),
    "deep-2-3-1": dict(sizes=(2, 3, 1)),
    "deep-1-2-2-2-stochastic": dict(sizes=(1, 2, 2, 2), order=2, rounding="stochastic"),
    "deep-block-ram-banks": dict(sizes=(2, 2, 1), G=62, init="zeros"),
}


def _case(name):
    kw = dict(LINT_CASES[name])
    basis = kw.pop("basis", "auto")
    return kan_learner(**kw), basis


@pytest.mark.parametrize("case", sorted(LINT_CASES))
def test_verilator_lint_is_clean_and_icarus_accepts_it(tmp_path, case):
    L, basis = _case(case)
    srcs = write_sources(generate_kan_learner(L, "dut", basis=basis), tmp_path)
    env = simulator_env("verilator")
    lint = subprocess.run(["verilator", "--lint-only", "-Wall", "-Wno-DECLFILENAME", "--top-module", "dut_board",
                           *map(str, srcs)], capture_output=True, text=True, env={**__import__("os").environ, **env})
    assert lint.returncode == 0, lint.stderr[-3000:]
    ivl = subprocess.run(["iverilog", "-g2005", "-o", str(tmp_path / "a.vvp"), "-s", "dut_board", *map(str, srcs)],
                         capture_output=True, text=True)
    assert ivl.returncode == 0, ivl.stderr[-3000:]


# -- trajectories ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
def test_t1_reference_learner_is_bit_exact(tmp_path, simulator):
    L = t1_reference()
    x, t = task_codes(L, make_task("t1", 0))
    check(simulate_learner(L, x, t, work=tmp_path, simulator=simulator, seed=1), len(x))


SIM_CASES = {
    "rom-k3-stochastic-clamped": dict(rounding="stochastic"),
    "rom-k2-3x2": dict(sizes=(3, 2), order=2, lr=2),
    "rom-k1-2x2-stochastic": dict(sizes=(2, 2), order=1, rounding="stochastic"),
    "circuit-k3-2x2": dict(sizes=(2, 2), basis="circuit"),
    "circuit-k2-stochastic-8bit": dict(sizes=(2, 1), order=2, rounding="stochastic", datapath="fixed<8,4>",
                                       grid=(-2.0, 2.0), G=4, basis="circuit", lr=0),
    "deep-2-3-1-k3": dict(sizes=(2, 3, 1)),
    "deep-3-2-2-k2-stochastic": dict(sizes=(3, 2, 2), order=2, rounding="stochastic"),
    "deep-2-2-1-k1-circuit": dict(sizes=(2, 2, 1), order=1, basis="circuit"),
    "deep-block-ram-banks": dict(sizes=(2, 2, 1), G=62),
}


@pytest.mark.parametrize("case", sorted(SIM_CASES))
def test_learner_variants_on_icarus(tmp_path, case):
    kw = dict(SIM_CASES[case])
    basis = kw.pop("basis", "auto")
    L = kan_learner(**kw)
    x, t, le = random_stream(L, 500, seed=len(case))
    check(simulate_learner(L, x, t, le, work=tmp_path, simulator="icarus", basis=basis, seed=2), 500)


def test_hidden_layers_learn_through_the_spline_derivatives(tmp_path):
    """A 3-layer KAN: every layer's coefficients move (the gradient reaches the first layer through two layers
    of spline derivatives), and the RTL follows the golden trajectory and state bit for bit."""
    from bitforge.toolchain.learn import emulate as emulate_learn

    L = kan_learner(sizes=(2, 3, 2, 1))
    x, t, le = random_stream(L, 400, seed=9)
    final = emulate_learn.run(L, x, t, le).final
    for before, after in zip(L.state(), final):
        assert (before["coeffs"] != after["coeffs"]).sum() > 10
    design = generate_kan_learner(L)
    assert design.ii == 1 and design.latency_cycles == 2
    check(simulate_learner(L, x, t, le, work=tmp_path, simulator="verilator", seed=8), 400)


def test_a_new_sample_enters_every_clock(tmp_path):
    """No gaps, no stalls: the bench's cycle count is the samples plus the pipeline fill and the read-back."""
    L = t1_reference()
    x, t = task_codes(L, make_task("t1", 0, n=600))
    r = simulate_learner(L, x, t, work=tmp_path, simulator="icarus", p_gap=0.0, p_stall=0.0)["icarus"]
    check({"icarus": r}, 600)
    readback_cycles = 2 * (8 + 4)  # 8 coefficients per checkpoint, plus drain and return
    assert r.cycles <= 600 + 2 * readback_cycles + 10


def test_the_bench_catches_a_design_that_learns_differently(tmp_path, monkeypatch):
    """The RTL of a learner with another learning rate must fail against this learner's golden trajectory."""
    L = t1_reference()
    real = learner_kan.generate_kan_learner
    monkeypatch.setattr(sim_mod, "generate_kan_learner", lambda learner, **kw: real(learner.with_rule(lr_shift=2), **kw))
    x, t = task_codes(L, make_task("t1", 0, n=300))
    with pytest.raises(SimulationFailed, match="differ from the golden model"):
        simulate_learner(L, x, t, work=tmp_path, simulator="icarus")


# -- the long trajectories and hardware ------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
def test_t1_10000_samples_with_stalls(tmp_path, simulator):
    L = t1_reference()
    x, t = task_codes(L, make_task("t1", 3, n=10_000))
    check(simulate_learner(L, x, t, work=tmp_path, simulator=simulator, seed=5), 10_000)


@pytest.mark.slow
def test_the_65536_parameter_learner_is_bit_exact(tmp_path):
    """The benchmark's >50k-parameter learner (``learn.bench.BIG_KAN``: [16, 1], G = 4093, 1k-word block-RAM
    banks) on T4, every prediction and all 65,536 coefficients read back, on Verilator."""
    from bitforge.toolchain.learn.bench import big_kan_learner

    L = big_kan_learner()
    assert L.n_params == 65_536
    x, t = task_codes(L, make_task("t4", 0, 2000))
    results = simulate_learner(L, x, t, work=tmp_path, simulator="verilator", seed=10)
    check(results, 2000)
    assert results["verilator"].readback["2000"]["words"] == 16 * 4096


@pytest.mark.slow
@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
def test_t4_kan_10000_samples_stochastic(tmp_path, simulator):
    """T4's reference KAN [16, 1], G=8 on [-1, 1] (cell index by bit slicing), eta 2**-7, stochastic updates."""
    L = kan_learner(sizes=(16, 1), G=8, grid=(-1.0, 1.0), lr=7, rounding="stochastic", init="linear")
    x, t = task_codes(L, make_task("t4", 0))
    check(simulate_learner(L, x, t, work=tmp_path, simulator=simulator, seed=6), 10_000)


@pytest.mark.slow
def test_t1_learner_on_ecp5_steps_in_under_100_ns(tmp_path):
    """The issue's hardware target: II 1 and forward + update under 100 ns after place and route on ecp5-85f."""
    from bitforge.toolchain.flows.implement import implement

    L = t1_reference()
    design = generate_kan_learner(L)
    out = Path(__file__).resolve().parents[2] / "build" / "test_learner_ecp5"
    write_sources(design, out / "rtl")
    import json
    (out / "rtl" / "manifest.json").write_text(json.dumps(design.manifest()))
    r = implement(out, "ecp5-85f")
    assert r["ii"] == 1 and r["latency_cycles"] == 2
    assert r["fmax_mhz"] is not None and r["latency_ns"] < 100, r
    assert r["dsp"] == 9 and r["bitstream"]


# -- the MLP baseline ----------------------------------------------------------------------------------------

def mlp_learner(sizes=(2, 3, 1), rounding="nearest", lr=4, datapath="fixed<16,6>", seed=0):
    fm = LearnerFormats.make(datapath, guard_bits=8)
    return build_learner(LearnerSpec("mlp", sizes, formats=fm, rule=UpdateRule(lr, rounding, lfsr_seed=seed + 1),
                                     seed=seed))


MLP_CASES = {
    "2-3-1-nearest": dict(),
    "1-4-2-stochastic": dict(sizes=(1, 4, 2), rounding="stochastic"),
    "2-3-3-1-8bit": dict(sizes=(2, 3, 3, 1), datapath="fixed<8,4>", lr=2),
    "3-2-stochastic-10bit": dict(sizes=(3, 2), rounding="stochastic", datapath="fixed<10,4>", lr=3),
}


@pytest.mark.parametrize("case", sorted(MLP_CASES))
def test_mlp_learner_lint_and_trajectory(tmp_path, case):
    from bitforge.toolchain.backends.rtl.learner_mlp import generate_mlp_learner

    L = mlp_learner(**MLP_CASES[case])
    design = generate_mlp_learner(L, "dut")
    assert design.ii == 1 and design.latency_cycles == 1
    srcs = write_sources(design, tmp_path / "lint")
    lint = subprocess.run(["verilator", "--lint-only", "-Wall", "-Wno-DECLFILENAME", "--top-module", "dut_board",
                           *map(str, srcs)], capture_output=True, text=True,
                          env={**__import__("os").environ, **simulator_env("verilator")})
    assert lint.returncode == 0, lint.stderr[-3000:]
    x, t, le = random_stream_mlp(L, 500, seed=len(case))
    check(simulate_learner(L, x, t, le, work=tmp_path / "sim", simulator="icarus", seed=3), 500)


def random_stream_mlp(L, n, seed=0):
    rng = np.random.default_rng(seed)
    f = L.formats
    x = quantize(rng.uniform(-3, 3, (n, L.spec.sizes[0])), f.input)
    t = quantize(rng.uniform(-1.5, 1.5, (n, L.spec.sizes[-1])), f.datapath)
    return x, t, rng.random(n) > 0.15


def test_mlp_t1_reference_on_verilator(tmp_path):
    from bitforge.models.online_learners import reference_spec

    L = build_learner(reference_spec("t1", "mlp"))
    x, t = task_codes(L, make_task("t1", 0, n=800))
    check(simulate_learner(L, x, t, work=tmp_path, simulator="verilator", seed=4), 800)


@pytest.mark.slow
@pytest.mark.parametrize("simulator", ["verilator"])  # Icarus runs this 560-multiplier design for minutes
def test_mlp_t4_reference_10000_samples(tmp_path, simulator):
    from bitforge.models.online_learners import reference_spec

    L = build_learner(reference_spec("t4", "mlp", rounding="stochastic"))
    x, t = task_codes(L, make_task("t4", 1))
    check(simulate_learner(L, x, t, work=tmp_path, simulator=simulator, seed=7), 10_000)


# -- the time-multiplexed MLP ----------------------------------------------------------------------------

@pytest.mark.parametrize("sizes,lanes", [((2, 5, 2), 2), ((1, 4, 1), 1), ((3, 6, 2), 4), ((2, 3, 1), 3)])
def test_time_multiplexed_mlp_is_bit_exact(tmp_path, sizes, lanes):
    from bitforge.toolchain.backends.rtl.learner_mlp import generate_mlp_folded

    L = mlp_learner(sizes=sizes, lr=3)
    d = generate_mlp_folded(L, lanes)
    rounds = -(-sizes[1] // lanes)
    assert d.ii == 2 * rounds + 2 and d.latency_cycles == rounds + 1
    srcs = write_sources(d, tmp_path / "lint")
    lint = subprocess.run(["verilator", "--lint-only", "-Wall", "-Wno-DECLFILENAME", "--top-module", f"{d.name}_board",
                           *map(str, srcs)], capture_output=True, text=True,
                          env={**__import__("os").environ, **simulator_env("verilator")})
    assert lint.returncode == 0, lint.stderr[-3000:]
    x, t, le = random_stream_mlp(L, 300, seed=sum(sizes) + lanes)
    check(simulate_learner(L, x, t, le, work=tmp_path / "sim", simulator="icarus", mlp_lanes=lanes, seed=5), 300)


def test_mlp_lanes_are_chosen_from_the_dsp_budget():
    from bitforge.toolchain.backends.rtl.learner_mlp import choose_lanes, folded_multipliers, lanes_for
    from bitforge.models.online_learners import reference_spec

    t4 = build_learner(reference_spec("t4", "mlp"))
    assert choose_lanes(t4, 6840) is None  # 560 multipliers fit an xcvu9p: fully parallel
    lanes = choose_lanes(t4, 156)  # an ECP5-85F has 156; half of them are kept as routing headroom
    assert lanes == 2 and folded_multipliers((16, 16, 1), lanes) <= 78
    assert lanes_for((1, 32, 1), 156) == 16  # 2 rounds of 16 rather than 31 + 1
    assert lanes_for((1, 32, 1), 78) == 11  # 3 rounds of 11 rather than 15 + 15 + 2
    from bitforge.toolchain.backends.rtl.learner_mlp import generate_mlp_folded
    with pytest.raises(LearnerError, match="nearest"):
        generate_mlp_folded(mlp_learner(rounding="stochastic"), 1)
    with pytest.raises(LearnerError, match="one hidden layer"):
        generate_mlp_folded(mlp_learner(sizes=(2, 3, 3, 1)), 1)


@pytest.mark.slow
def test_mlp_t1_reference_10000_samples_on_icarus(tmp_path):
    from bitforge.models.online_learners import reference_spec

    L = build_learner(reference_spec("t1", "mlp"))
    x, t = task_codes(L, make_task("t1", 2, n=10_000))
    check(simulate_learner(L, x, t, work=tmp_path, simulator="icarus", seed=9), 10_000)
