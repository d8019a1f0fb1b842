"""The host runtime on the real pieces: bundles from 'bitforge compile' + 'bitforge deploy', the device wrapper's
RTL on the simulated board (Verilator behind a pseudo-terminal), the CPU path, and 'bitforge run'. Every answer
must equal the golden model bit for bit."""
import json
from pathlib import Path

import numpy as np
import pytest

from bitforge.runtime import deployed
from bitforge.runtime.device import Device
from bitforge.runtime.transports import SimTransport
from bitforge.toolchain import emulate, fixed, ir
from bitforge.toolchain.backends.rtl.device import device_for_learner, device_for_model, write_device
from bitforge.toolchain.backends.rtl.learner_kan import generate_kan_learner
from bitforge.toolchain.backends.rtl.learner_mlp import generate_mlp_learner
from bitforge.toolchain.cli import main
from bitforge.toolchain.compiler import CompileOptions, compile_model
from bitforge.toolchain.deploy import write_bundle
from bitforge.toolchain.learn import emulate as learn_emulate
from bitforge.toolchain.verify.simulate_learner import write_sources

from test_device import dense_graph, kan_learner, mlp_learner


def compiled(tmp: Path, g: ir.Graph, weights: str = "rom") -> Path:
    """``g`` through 'bitforge compile --to onnx --to rtl' with its device wrapper."""
    src = tmp / f"{g.name}-ir"
    src.mkdir()
    ir.save(g, src)
    out = tmp / f"{g.name}-{weights}"
    compile_model(str(src), str(out), CompileOptions(to=("onnx", "rtl"), vectors=100, weights=weights))
    path = out / "rtl" / "manifest.json"
    man = json.loads(path.read_text())
    if "device" not in man:  # a compile that does not write the device wrapper yet: the wrapper's own writer
        man["device"] = write_device(out / "rtl", device_for_model(ir.load(out), man))
        path.write_text(json.dumps(man, indent=1))
    return out


def bundle_of(tmp: Path, g: ir.Graph, weights: str = "rom") -> Path:
    return write_bundle(compiled(tmp, g, weights), None, tmp / f"{g.name}-{weights}.bfb").path


def golden(g, x):
    return emulate.run_values(g, x)[g.outputs[0]]


@pytest.fixture(scope="module")
def tiny_bundle(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sim")
    return bundle_of(tmp, dense_graph(11))


def test_1000_samples_through_the_simulated_board_equal_the_golden_model(tiny_bundle):
    g = dense_graph(11)
    x = np.random.default_rng(0).normal(0, 3, (1000, 4))
    x[:3] = [[1e3, -1e3, 0, 2**-12], [7.9, -8.1, 3.99, -3.99], [0.5, -0.5, 0.25, -0.25]]  # saturation, ties
    with Device.open(tiny_bundle, "sim") as dev:
        assert dev.hello.version and dev.hello.model_id == deployed.load(tiny_bundle).model_id16
        y = dev.predict(x)
        requests = dev.stats.requests
        codes = dev.predict_codes(dev.quantize_inputs(x[:7]))
    np.testing.assert_array_equal(y, golden(g, x))
    np.testing.assert_array_equal(codes, emulate.run(g, x[:7])[g.outputs[0]])
    assert requests < 1000 // 10  # batched: many words per frame
    assert dev.stats.retries == 0


def test_bit_errors_on_the_wire_cost_retries_not_results(tiny_bundle):
    g = dense_graph(11)
    x = np.random.default_rng(1).normal(0, 3, (500, 4))
    with Device.open(tiny_bundle, "sim", flip_rate=0.003, seed=7) as dev:
        y = dev.predict(x)
        link = dev.session.link
    np.testing.assert_array_equal(y, golden(g, x))
    assert link.stats.flipped_to_device + link.stats.flipped_from_device > 0
    assert dev.stats.retries > 0


def test_the_cpu_path_equals_the_golden_model(tiny_bundle):
    g = dense_graph(11)
    x = np.random.default_rng(2).normal(0, 3, (2000, 4))
    with Device.open(tiny_bundle, "cpu") as dev:
        np.testing.assert_array_equal(dev.predict(x), golden(g, x))


def test_a_weight_reload_turns_model_a_into_model_b(tmp_path):
    a, b = dense_graph(21), dense_graph(22)
    bundle = bundle_of(tmp_path, a, "ram")
    x = np.random.default_rng(3).normal(0, 3, (300, 4))
    yb = golden(b, x)
    assert not np.array_equal(yb, golden(a, x))
    with Device.open(bundle, "sim") as dev:
        np.testing.assert_array_equal(dev.predict(x), golden(a, x))
        dev.load_weights(b)
        assert dev.hello.model_id == deployed.from_graph(b).model_id16
        np.testing.assert_array_equal(dev.predict(x), yb)
        dev.load_weights(bundle)  # and back, from the bundle itself
        np.testing.assert_array_equal(dev.predict(x), golden(a, x))


def learner_device(tmp: Path, learner) -> tuple[list[Path], str]:
    """A learner's core and its device wrapper, written as a compile writes them; (files, device top)."""
    design = generate_kan_learner(learner) if learner.spec.kind == "kan" else generate_mlp_learner(learner)
    folder = tmp / "rtl"
    write_sources(design, folder)
    dev = write_device(folder, device_for_learner(learner, design))
    return [tmp / f for f in dev["files"]], dev["top"]


@pytest.mark.parametrize("make", [kan_learner, mlp_learner])
def test_an_online_learners_trajectory_through_the_simulated_board(tmp_path, make):
    learner = make(3)
    f = learner.formats
    rng = np.random.default_rng(4)
    n = 400
    x = rng.uniform(-1.2, 1.2, (n, learner.spec.sizes[0]))
    y = np.sin(2 * x[:, :1]) * np.ones((1, learner.spec.sizes[-1])) + rng.normal(0, 0.05, (n, learner.spec.sizes[-1]))
    le = rng.random(n) < 0.9
    traj = learn_emulate.run(learner, fixed.quantize(x, f.input), fixed.quantize(y, f.datapath), le,
                             snapshot_every=n // 2)
    files, top = learner_device(tmp_path, learner)
    link = SimTransport(files, top)
    with Device.open(learner, link) as dev:
        first = dev.learn(x[:n // 2], y[:n // 2], le[:n // 2])
        half = dev.read_state()
        second = dev.learn(x[n // 2:], y[n // 2:], le[n // 2:])
        final = dev.read_state()
    pred = np.concatenate([first, second])
    np.testing.assert_array_equal(pred, fixed.to_float(traj.predictions, f.datapath))
    for got, want in ((half, traj.snapshots[n // 2]), (final, traj.final)):
        for layer_got, layer_want in zip(got.codes, want):
            for k in layer_want:
                np.testing.assert_array_equal(layer_got[k], layer_want[k])


def test_bitforge_run_on_the_simulated_board_and_the_cpu(tiny_bundle, tmp_path, capsys):
    g = dense_graph(11)
    x = np.random.default_rng(5).normal(0, 3, (257, 4))
    np.save(tmp_path / "x.npy", x)
    for device in ("sim", "cpu"):
        out = tmp_path / f"y-{device}.npy"
        assert main(["run", str(tiny_bundle), "--input", str(tmp_path / "x.npy"), "--device", device,
                     "-o", str(out)]) == 0
        np.testing.assert_array_equal(np.load(out), golden(g, x))
    assert main(["run", str(tiny_bundle), "--input", str(tmp_path / "x.npy"), "--codes", "-o",
                 str(tmp_path / "c.npy")]) == 2  # real values are not codes
    assert "integer codes" in capsys.readouterr().err
    codes = fixed.quantize(x.astype(np.float32), g.tensors["xq"].dtype)
    np.save(tmp_path / "codes.npy", codes)
    assert main(["run", str(tiny_bundle), "--input", str(tmp_path / "codes.npy"), "--codes", "--device", "cpu",
                 "-o", str(tmp_path / "c.npy")]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), emulate.run(g, x)[g.outputs[0]])


@pytest.mark.parametrize("args, match", [
    (["--device", "/dev/ttyNOPE3"], "does not exist"),
    (["--expect-sha256", "0" * 64], "SHA-256"),
    (["--input", "missing.npy"], "no such file"),
])
def test_bitforge_run_errors_name_the_problem(tiny_bundle, tmp_path, capsys, args, match):
    np.save(tmp_path / "x.npy", np.zeros((3, 4)))
    argv = ["run", str(tiny_bundle), "--input", str(tmp_path / "x.npy"), "-o", str(tmp_path / "y.npy")] + args
    assert main(argv) == 2
    assert match in capsys.readouterr().err
    assert not (tmp_path / "y.npy").exists()


def test_bitforge_run_refuses_a_wrong_input_shape(tiny_bundle, tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.zeros((3, 5)))
    assert main(["run", str(tiny_bundle), "--input", str(tmp_path / "x.npy"), "--device", "cpu", "-o",
                 str(tmp_path / "y.npy")]) == 2
    assert "expected shape (n, 4)" in capsys.readouterr().err


@pytest.mark.slow
def test_soak_10000_samples_at_flip_rate_one_percent(tiny_bundle):
    g = dense_graph(11)
    x = np.random.default_rng(6).normal(0, 3, (10_000, 4))
    # At 1 % of bytes flipped a one-word request and its answer (about 20 bytes) arrive whole 82 % of the time, so
    # four retries run out about once in 5,000 requests: this link gets ten.
    with Device.open(tiny_bundle, "sim", flip_rate=0.01, seed=1, retries=10) as dev:
        y = dev.predict(x)
        stats, link = dev.stats, dev.session.link
    np.testing.assert_array_equal(y, golden(g, x))
    print(f"\nsoak: 10,000 samples, {stats.requests} requests, {stats.retries} retries, {stats.timeouts} timeouts; "
          f"flipped bytes {link.stats.flipped_to_device} to the device, {link.stats.flipped_from_device} back; "
          f"{stats.by_reason}")
    assert stats.retries > 0
