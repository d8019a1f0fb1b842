"""``bitforge learn --data``: a user's own stream, from the file loader to the learned model's predictions."""
from __future__ import annotations

import json

import numpy as np
import pytest
from bitforge.models.online_tasks import TaskError, prequential_metrics, stream_task
from bitforge.models.streams import load_stream, parse_data_argument
from bitforge.toolchain import emulate
from bitforge.toolchain.cli import main
from bitforge.toolchain.errors import BitforgeError
from bitforge.toolchain.fixed import quantize
from bitforge.toolchain.learn import LearnerFormats, LearnerSpec, UpdateRule, learn
from bitforge.toolchain.learn.run import check_run_options
from bitforge.toolchain.learn.spec import LearnerWarning, load_learner

pytestmark = pytest.mark.usefixtures("one_thread")


def stream(n: int = 600, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two inputs in [-1.5, 1.5), one smooth target: a KAN [2, 1] learns it within a few hundred samples."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.5, 1.5, size=(n, 2))
    return x, (np.sin(2 * x[:, 0]) + 0.5 * x[:, 1] ** 2)[:, None]


@pytest.fixture
def npz(tmp_path):
    x, y = stream()
    path = tmp_path / "stream.npz"
    np.savez(path, X=x, Y=y)
    return path


# -- the loader ----------------------------------------------------------------------------------------

def test_npz_npy_pair_and_csv_give_the_same_stream(tmp_path, npz):
    x, y = stream()
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y[:, 0])  # 1-D targets: one output
    lines = ["a,b,target"] + [",".join(repr(float(v)) for v in row) for row in np.hstack([x, y])]
    (tmp_path / "s.csv").write_text("\n".join(lines) + "\n")
    a = load_stream(npz)
    b = load_stream(*parse_data_argument(f"{tmp_path / 'x.npy'},{tmp_path / 'y.npy'}"))
    c = load_stream(tmp_path / "s.csv")
    for t in (a, b, c):
        np.testing.assert_array_equal(t.x, x)
        np.testing.assert_array_equal(t.target, y)
        assert (t.d_in, t.d_out, t.n, t.metric) == (2, 1, 600, "tail_mse")
        assert t.segments == {"warmup": (0, 450), "eval": (450, 600)}
    assert a.name == "stream" and c.name == "s"
    assert a.input_range == (-1.5, 1.5)  # the inputs' range widened to quarters: a grid exact in binary
    assert load_stream(npz, samples=100).n == 100


def test_csv_splits_targets_by_the_output_width(tmp_path):
    (tmp_path / "s.csv").write_text("\n".join(f"{i},{i + 1},{i + 2},{i + 3}" for i in range(10)) + "\n")
    t = load_stream(tmp_path / "s.csv", d_out=2)
    assert (t.d_in, t.d_out) == (2, 2) and t.target[3].tolist() == [5.0, 6.0]


def test_input_range_covers_every_input():
    t = stream_task("s", np.linspace(-0.3, 2.1, 20), np.zeros(20))
    assert t.input_range == (-0.5, 2.25) and t.x.shape == (20, 1)
    assert not t.x.flags.writeable


def bad_npz(tmp_path, **arrays):
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize("arrays,match", [
    (dict(inputs=np.zeros((20, 2)), Y=np.zeros(20)), r"holds Y, inputs; expected arrays X .* and Y"),
    (dict(X=np.zeros((20, 2, 2)), Y=np.zeros(20)), r"X \(inputs\) have shape \(20, 2, 2\); expected \(n, features\)"),
    (dict(X=np.zeros((20, 2)), Y=np.zeros(19)), "20 input rows but 19 target rows"),
    (dict(X=np.zeros((5, 2)), Y=np.zeros(5)), "5 samples; a stream needs at least 8"),
    (dict(X=np.array(["a"] * 20), Y=np.zeros(20)), "dtype <U1; expected numbers"),
])
def test_bad_arrays_are_refused_with_what_to_do(tmp_path, arrays, match):
    with pytest.raises(TaskError, match=match):
        load_stream(bad_npz(tmp_path, **arrays))


def test_nan_and_inf_name_the_first_bad_row(tmp_path):
    x, y = stream(30)
    x[7, 1], x[12, 0] = np.nan, np.inf
    with pytest.raises(TaskError, match=r"2 sample\(s\) with NaN or Inf inputs, the first at row 7"):
        load_stream(bad_npz(tmp_path, X=x, Y=y))
    y[3, 0] = np.nan
    with pytest.raises(TaskError, match="NaN or Inf targets, the first at row 3"):
        load_stream(bad_npz(tmp_path, X=stream(30)[0], Y=y))


def test_file_forms_that_are_not_streams(tmp_path, npz):
    np.save(tmp_path / "x.npy", np.zeros((20, 2)))
    (tmp_path / "s.txt").write_text("1,2\n")
    (tmp_path / "r.csv").write_text("1,2,3\n4,5\n")
    (tmp_path / "w.csv").write_text("1,2\n3,four\n")
    for args, match in [((tmp_path / "x.npy",), "holds one array; give the inputs and the targets as a pair"),
                        ((tmp_path / "s.txt",), "unknown stream file type '.txt'"),
                        ((tmp_path / "none.npz",), "no such file"),
                        ((tmp_path / "r.csv",), "data row 2 has 2 columns, the first row 3"),
                        ((tmp_path / "w.csv",), "data row 2 holds a value that is not a number")]:
        with pytest.raises(TaskError, match=match):
            load_stream(*args)
    with pytest.raises(TaskError, match="targets have 1 columns, the learner 3 outputs"):
        load_stream(npz, d_out=3)
    with pytest.raises(TaskError, match="--samples 601, but the stream has 600 samples"):
        load_stream(npz, samples=601)


def test_spec_must_fit_the_stream_and_hardware_options_are_checked_first(npz):
    s = load_stream(npz)
    with pytest.raises(BitforgeError, match=r"do not fit the stream 'stream' \(2 inputs -> 1 outputs\); use --layers"):
        check_run_options(LearnerSpec("kan", (3, 1)), s)
    with pytest.raises(BitforgeError, match="unknown target 'foo'"):
        check_run_options(LearnerSpec("kan", (2, 1)), s, target="foo")
    with pytest.raises(BitforgeError, match="--mlp-lanes 0: expected a number of lanes >= 1"):
        check_run_options(LearnerSpec("mlp", (2, 4, 1)), s, mlp_lanes=0)
    with pytest.raises(BitforgeError, match="only an MLP learner is time-multiplexed"):
        check_run_options(LearnerSpec("kan", (2, 1)), s, mlp_lanes=2)


# -- end to end ----------------------------------------------------------------------------------------

def test_learn_data_writes_golden_float_plot_and_metrics_and_emulate_predicts_with_it(tmp_path, npz, capsys):
    out = tmp_path / "mine"
    assert main(["learn", "--data", str(npz), "--layers", "2,1", "--grid-size", "8", "--lr", "0.1",
                 "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "--lr 0.1 is not a power of two; using the nearest, 2^-3 = 0.125" in err
    assert "KAN grid on [-1.5, 1.5]" in err
    m = json.loads((out / "metrics.json").read_text())
    assert m["task"] == "stream" and m["samples"] == 600 and m["spec"]["rule"]["lr_shift"] == 3
    assert m["spec"]["grid_range"] == [-1.5, 1.5] and m["saturated"] == {"inputs": 0, "targets": 0}
    # <16,6> with 8 guard bits tracks the float reference closely, and both learn the function
    assert abs(m["fixed"]["tail_mse"] / m["float"]["tail_mse"] - 1) < 0.05
    assert m["fixed"]["tail_mse"] < 0.5 * m["fixed"]["mean_mse"] and m["fixed"]["tail_mse"] < 0.02
    assert (out / "learn.png").stat().st_size > 10_000 and "| tail_mse |" in (out / "report.md").read_text()
    assert [r["format"] for r in json.loads((out / "report.json").read_text())["accuracy"]] == ["<16,6>", "float"]
    assert not list(tmp_path.glob(".mine.*"))

    # the learned model predicts from float inputs, as a compiled model does: quantized into the input format
    x_new = np.random.default_rng(9).uniform(-1.5, 1.5, size=(200, 2))
    np.save(tmp_path / "x_new.npy", x_new)
    assert main(["emulate", str(out), "--input", str(tmp_path / "x_new.npy"), "-o", str(tmp_path / "y.npy")]) == 0
    assert "predicting with its learned state" in capsys.readouterr().err
    y = np.load(tmp_path / "y.npy")
    final = load_learner(out / "final")
    codes = emulate.run(final.inference_graph(), quantize(x_new.astype(np.float32), final.formats.input))["y"]
    np.testing.assert_array_equal(y, codes * final.formats.datapath.lsb)
    truth = np.sin(2 * x_new[:, :1]) + 0.5 * x_new[:, 1:] ** 2
    assert np.mean((y - truth) ** 2) < 0.02 < np.mean(truth ** 2)  # it learned the function
    assert main(["emulate", str(out / "final"), "--input", str(tmp_path / "x_new.npy"), "--codes",
                 "-o", str(tmp_path / "c.npy")]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), codes)


def test_python_api_writes_what_the_command_writes(tmp_path, npz):
    """One spec, one function: the API run and the CLI run of the same stream give byte-identical metrics."""
    assert main(["learn", "--data", str(npz), "--layers", "2,3,1", "--lr-shift", "4", "--seed", "2",
                 "-o", str(tmp_path / "cli")]) == 0
    s = load_stream(npz)
    spec = LearnerSpec("kan", (2, 3, 1), grid_range=s.input_range, rule=UpdateRule(4), seed=2,
                       formats=LearnerFormats.make("fixed<16,6>", guard_bits=8))
    r = learn(spec, s, tmp_path / "api")
    assert r.out == tmp_path / "api" and r.target is None
    for f in ("metrics.json", "report.json", "report.md", "final/model.json", "final/weights.safetensors"):
        assert (tmp_path / "api" / f).read_bytes() == (tmp_path / "cli" / f).read_bytes(), f
    assert r.metrics["fixed"] == prequential_metrics(s, _final_predictions(tmp_path / "cli"))


def _final_predictions(out):
    """The golden trajectory's predictions, recomputed from the saved initial state."""
    from bitforge.toolchain.learn import emulate as emulate_learn

    L = load_learner(out / "learner")
    m = json.loads((out / "metrics.json").read_text())
    s = load_stream(out.parent / "stream.npz", samples=m["samples"])
    f = L.formats
    traj = emulate_learn.run(L, quantize(s.x, f.input), quantize(s.target, f.datapath))
    return traj.predictions * f.datapath.lsb


def test_targets_outside_the_datapath_saturate_with_a_warning(tmp_path, capsys):
    x, y = stream(200)
    y[:13] = 40.0  # <16,6> holds [-32, 32)
    np.savez(tmp_path / "big.npz", X=x, Y=y)
    assert main(["learn", "--data", str(tmp_path / "big.npz"), "-o", str(tmp_path / "o")]) == 0
    err = capsys.readouterr().err
    assert "warning: 13 of 200 targets of 'big' lie outside fixed<16,6,RND_CONV,SAT> [-32, 31.999] and saturate" in err
    assert json.loads((tmp_path / "o" / "metrics.json").read_text())["saturated"] == {"inputs": 0, "targets": 13}
    with pytest.warns(LearnerWarning, match="13 of 200 targets"):
        learn(LearnerSpec("kan", (2, 1), grid_range=(-1.5, 1.5)), load_stream(tmp_path / "big.npz"), tmp_path / "p")


def learn_exit(*argv) -> int:
    """``bitforge learn ARGV``'s exit status, whether argparse (SystemExit) or the command refused it."""
    try:
        return main(["learn", *argv])
    except SystemExit as e:
        return e.code


def test_bad_options_fail_before_any_work(tmp_path, npz, capsys):
    assert learn_exit("--data", str(npz), "--target", "foo", "-o", str(tmp_path / "a")) == 2
    err = capsys.readouterr().err
    assert "unknown target 'foo'" in err and "golden model" not in err
    assert learn_exit("--data", str(npz), "--model", "mlp", "--mlp-lanes", "0", "-o", str(tmp_path / "b")) == 2
    assert "argument --mlp-lanes: expected a whole number >= 1, got 0" in capsys.readouterr().err
    assert learn_exit("t1", "--data", str(npz), "-o", str(tmp_path / "c")) == 2
    assert "a task (t1, t2, t4) or --data FILE, not both" in capsys.readouterr().err
    assert learn_exit("-o", str(tmp_path / "d")) == 2
    assert "not neither" in capsys.readouterr().err
    assert learn_exit("--data", str(npz), "--layers", "3,1", "-o", str(tmp_path / "e")) == 2
    assert "use --layers 2,...,1" in capsys.readouterr().err
    assert learn_exit("--data", str(npz), "--lr", "4", "-o", str(tmp_path / "f")) == 2
    assert "learning rate 4.0 is outside 2**-40..1" in capsys.readouterr().err
    assert not any((tmp_path / d).exists() for d in "abcdef")


def test_learn_data_rtl_replays_a_short_stream_bit_for_bit(tmp_path, npz):
    out = tmp_path / "rtl"
    assert main(["learn", "--data", str(npz), "--samples", "120", "--rtl", "--simulator", "icarus",
                 "-o", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    r = report["verification"]["golden_vs_rtl"]["icarus"]
    assert r["samples"] == 120 and r["mismatches"] == 0
    assert all(c["mismatches"] == 0 for c in r["readback"].values())
    manifest = json.loads((out / "rtl" / "manifest.json").read_text())
    assert manifest["ii"] == 1 and all((out / f).is_file() for f in manifest["files"])


@pytest.mark.slow
def test_learn_data_reaches_a_bitstream(tmp_path, npz):
    """Done when: a small --data stream goes through golden, RTL and place and route to a bitstream."""
    out = tmp_path / "hw"
    assert main(["learn", "--data", str(npz), "--samples", "200", "--grid-size", "4", "--order", "1",
                 "--target", TARGET, "--simulator", "icarus", "-o", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["verification"]["golden_vs_rtl"]["icarus"]["mismatches"] == 0
    t = report["targets"][TARGET]
    assert t["status"] == "ok" and t["bitstream"] and (out / t["bitstream"]).stat().st_size > 10_000
    (hw,) = report["hardware"]
    assert hw["task"] == "stream" and hw["target"] == TARGET and hw["params"] == 2 * 5


TARGET = "ecp5-25f"
