"""Online learners deployed end to end: 'bitforge learn --rtl' -> 'bitforge deploy' -> a bundle that
Device.open runs on the simulated board (the learner's device RTL in Verilator) and on the CPU (the golden
learner), whose whole trajectory (every prediction, the state read back half way and at the end) must equal the
golden run's; the ids that tell learners apart; what deploy and the host refuse."""
import dataclasses
import hashlib
import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from bitforge.models.online_tasks import make_task
from bitforge.runtime import deployed
from bitforge.runtime.bundle import LEARNER_REQUIRED, Bundle, pack
from bitforge.runtime.device import Device, DeviceMismatch
from bitforge.runtime.transports import SimTransport
from bitforge.toolchain import emulate, fixed, identity
from bitforge.toolchain.cli import main
from bitforge.toolchain.deploy import DeployError, write_bundle
from bitforge.toolchain.errors import BitforgeError
from bitforge.toolchain.learn import emulate as learn_emulate
from bitforge.toolchain.learn.spec import (
    LearnerFormats, LearnerSpec, LearnerWarning, UpdateRule, build_learner, load_learner, save_learner)

from test_device_sim import bundle_of, learner_device
from test_device import dense_graph, kan_learner

SAMPLES = 1000


@pytest.fixture(scope="module")
def t1_out(tmp_path_factory) -> Path:
    """'bitforge learn t1 --rtl' on a 1,000-sample stream (the reference KAN learner, its core checked on Icarus)."""
    out = tmp_path_factory.mktemp("t1") / "out"
    assert main(["learn", "t1", "--rtl", "--simulator", "icarus", "--samples", str(SAMPLES), "-o", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def t1_bundle(t1_out, tmp_path_factory) -> Path:
    return write_bundle(t1_out, None, tmp_path_factory.mktemp("bundle") / "t1.bfb").path


@pytest.fixture(scope="module")
def stream():
    """The stream 'bitforge learn t1 --samples 1000' learned: (x, targets)."""
    task = make_task("t1", 0, SAMPLES)
    return task.x, task.target


def golden(learner, x, t, snapshot_every=None):
    f = learner.formats
    return learn_emulate.run(learner, fixed.quantize(x, f.input), fixed.quantize(t, f.datapath),
                             snapshot_every=snapshot_every)


def assert_state(got_codes, want):
    assert len(got_codes) == len(want)
    for layer_got, layer_want in zip(got_codes, want):
        assert set(layer_got) == set(layer_want)
        for k in layer_want:
            np.testing.assert_array_equal(layer_got[k], layer_want[k])


# -- the bundle ---------------------------------------------------------------------------------------------------

def test_a_learner_bundle_carries_the_initial_state_the_device_and_its_description(t1_out, t1_bundle, tmp_path):
    b = Bundle.open(t1_bundle, expect_sha256=hashlib.sha256(t1_bundle.read_bytes()).hexdigest())
    m = b.manifest
    learner = load_learner(t1_out / "learner")
    rtl = json.loads((t1_out / "rtl/manifest.json").read_text())
    assert {x.path for x in m.members} == {*LEARNER_REQUIRED, *rtl["files"], *rtl["device"]["files"]}
    assert "model.onnx" not in b.names and not any(n.startswith("final/") for n in b.names)
    for member in ("learner/model.json", "learner/weights.safetensors", "rtl/t1_kan_device.v"):
        assert b.read(member) == (t1_out / member).read_bytes()
    # the ids are the learner's own (rule and formats included) and the ones the device's hello carries
    assert (m.model_id, m.arch_id) == (identity.learner_model_id(learner), identity.learner_arch_id(learner))
    assert (rtl["device"]["hello"]["model_id"], rtl["device"]["hello"]["arch_id"]) == (m.model_id[:32], m.arch_id[:32])
    f, ln = learner.formats, m.learner
    assert (ln.kind, ln.sizes, ln.rule) == ("kan", (1, 1), learner.rule.to_json())
    for fmt, t, name in ((ln.x, f.input, "x"), (ln.t, f.datapath, "t"), (ln.y, f.datapath, "y")):
        assert (fmt.name, fmt.shape, fmt.width, fmt.integer, fmt.signed) == (name, (1,), t.width, t.integer, True)
    assert ln.state["word_bits"] == rtl["rb_data_width"] and ln.state["words"] == 1 << rtl["rb_addr_width"]
    assert ln.state["arrays"] == [{"layer": 0, "array": "coeffs", "shape": [1, 1, 8], "first": 0, "strides": [0, 8, 1],
                                   "packed": 0}]
    # deterministic, and an extracted bundle is a learner's folder again
    assert write_bundle(t1_out, None, tmp_path / "again.bfb").sha256 == b.sha256
    b.extract(tmp_path / "x")
    again = load_learner(tmp_path / "x" / "learner")
    assert identity.learner_model_id(again) == m.model_id
    assert deployed.from_folder(tmp_path / "x").model_id == m.model_id


def test_the_cli_deploys_and_inspects_a_learner(t1_out, tmp_path, capsys):
    assert main(["deploy", str(t1_out), "-o", str(tmp_path / "l.bfb")]) == 0
    assert main(["inspect", str(tmp_path / "l.bfb")]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "online learner kan [1, 1]" in text and "eta 2^-1, nearest updates" in text
    assert "state 16 words of 24 bits" in text


# -- trajectories -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("transport", ["sim", "cpu"])
def test_the_t1_trajectory_through_the_bundle_equals_the_golden_run(t1_out, t1_bundle, stream, transport):
    x, t = stream
    learner = load_learner(t1_out / "learner")
    half = SAMPLES // 2
    traj = golden(learner, x, t, snapshot_every=half)
    f = learner.formats
    with Device.open(t1_bundle, transport) as dev:
        assert dev.model.learner is not None and dev.hello.model_id == bytes.fromhex(dev.model.model_id)[:16]
        first = dev.learn(x[:half], t[:half])
        at_half = dev.read_state()
        second = dev.learn(x[half:], t[half:])
        final = dev.read_state()
        probe = np.linspace(-2, 2, 37)[:, None]
        predicted = dev.predict(probe)  # no update: the state stays where learning left it
        after = dev.read_state()
    np.testing.assert_array_equal(np.concatenate([first, second]), fixed.to_float(traj.predictions, f.datapath))
    assert_state(at_half.codes, traj.snapshots[half])
    assert_state(final.codes, traj.final)
    assert_state(after.codes, traj.final)
    np.testing.assert_array_equal(final.values[0]["coeffs"], fixed.to_float(traj.final[0]["coeffs"], f.storage))
    g = learner.with_state(traj.final).inference_graph(float_input=True)
    np.testing.assert_array_equal(predicted, emulate.run_values(g, probe)[g.outputs[0]])
    # 'bitforge learn' ran the same stream: its final state is the device's
    assert_state(final.codes, load_learner(t1_out / "final").state())


def test_an_mlp_learner_from_your_own_stream_deploys_too(tmp_path):
    """'bitforge learn --data' with an MLP (one parameter per state word, the layout's other form): the bundle's
    trajectory on the simulated board and the CPU equals the golden run, the state read back included."""
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, (300, 2))
    y = np.sin(3 * x[:, :1]) * x[:, 1:2]
    np.savez(tmp_path / "stream.npz", X=x, Y=y)
    out = tmp_path / "mlp"
    assert main(["learn", "--data", str(tmp_path / "stream.npz"), "--model", "mlp", "--layers", "2,3,1",
                 "--datapath", "fixed<12,4>", "--guard-bits", "6", "--rtl", "--simulator", "icarus",
                 "-o", str(out)]) == 0
    bundle = write_bundle(out, None, tmp_path / "mlp.bfb").path
    layout = Bundle.open(bundle).manifest.learner.state
    assert [(a["array"], a["first"], a["strides"], a["packed"]) for a in layout["arrays"]] == [
        ("weight", 0, [2, 1], None), ("bias", 6, [1], None), ("weight", 9, [3, 1], None), ("bias", 12, [1], None)]
    learner = load_learner(out / "learner")
    traj = golden(learner, x, y)
    for transport in ("sim", "cpu"):
        with Device.open(bundle, transport) as dev:
            pred = dev.learn(x, y)
            state = dev.read_state()
        np.testing.assert_array_equal(pred, fixed.to_float(traj.predictions, learner.formats.datapath))
        assert_state(state.codes, traj.final)


def test_bitforge_run_learns_a_stream_and_writes_the_state(t1_out, t1_bundle, stream, tmp_path, capsys):
    x, t = stream
    learner = load_learner(t1_out / "learner")
    traj = golden(learner, x, t)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "t.npy", t)
    for device in ("sim", "cpu"):
        p, s = tmp_path / f"p-{device}.npy", tmp_path / f"s-{device}.npz"
        assert main(["run", str(t1_bundle), "--input", str(tmp_path / "x.npy"), "--targets", str(tmp_path / "t.npy"),
                     "--state", str(s), "--device", device, "-o", str(p)]) == 0
        np.testing.assert_array_equal(np.load(p), fixed.to_float(traj.predictions, learner.formats.datapath))
        with np.load(s) as state:
            assert sorted(state) == ["layer0.coeffs", "layer0.coeffs.codes"]
            np.testing.assert_array_equal(state["layer0.coeffs.codes"], traj.final[0]["coeffs"])
            np.testing.assert_array_equal(state["layer0.coeffs"],
                                          fixed.to_float(traj.final[0]["coeffs"], learner.formats.storage))
    assert "learned (predictions before each update)" in capsys.readouterr().out
    # codes in and out give the same trajectory as codes
    f = learner.formats
    np.save(tmp_path / "xc.npy", fixed.quantize(x, f.input))
    np.save(tmp_path / "tc.npy", fixed.quantize(t, f.datapath))
    assert main(["run", str(t1_bundle), "--input", str(tmp_path / "xc.npy"), "--targets", str(tmp_path / "tc.npy"),
                 "--codes", "--device", "cpu", "-o", str(tmp_path / "pc.npy")]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "pc.npy"), traj.predictions)
    # without targets a learner predicts from its initial state and learns nothing
    assert main(["run", str(t1_bundle), "--input", str(tmp_path / "x.npy"), "--state", str(tmp_path / "s0.npz"),
                 "--device", "cpu", "-o", str(tmp_path / "p0.npy")]) == 0
    g = learner.inference_graph(float_input=True)
    np.testing.assert_array_equal(np.load(tmp_path / "p0.npy"), emulate.run_values(g, x)[g.outputs[0]])
    with np.load(tmp_path / "s0.npz") as state:
        np.testing.assert_array_equal(state["layer0.coeffs.codes"], learner.state()[0]["coeffs"])


def test_bitforge_run_refuses_what_a_learner_stream_cannot_be(t1_bundle, tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.zeros((10, 1)))
    np.save(tmp_path / "t9.npy", np.zeros((9, 1)))
    bad = np.zeros((10, 1))
    bad[3] = np.nan
    np.save(tmp_path / "tnan.npy", bad)
    base = ["run", str(t1_bundle), "--input", str(tmp_path / "x.npy"), "--device", "cpu", "-o", str(tmp_path / "p.npy")]
    for targets, says in (("t9.npy", "10 input rows but 9 target rows"), ("tnan.npy", "NaN"),
                          ("missing.npy", "--targets takes a .npy array")):
        assert main(base + ["--targets", str(tmp_path / targets)]) == 2
        err = capsys.readouterr().err
        assert says in err and err.count("\n") == 1, err
        assert not (tmp_path / "p.npy").exists()


def test_targets_and_state_are_refused_for_a_compiled_model(tmp_path, capsys):
    bundle = bundle_of(tmp_path, dense_graph(11))
    np.save(tmp_path / "x.npy", np.zeros((3, 4)))
    assert main(["run", str(bundle), "--input", str(tmp_path / "x.npy"), "--targets", str(tmp_path / "x.npy"),
                 "--device", "cpu", "-o", str(tmp_path / "y.npy")]) == 2
    assert "is a compiled model, not an online learner" in capsys.readouterr().err
    assert not (tmp_path / "y.npy").exists()


# -- identity -----------------------------------------------------------------------------------------------------

def _spec(**changes) -> LearnerSpec:
    base = dict(kind="kan", sizes=(2, 1), grid_size=4, order=2, formats=LearnerFormats.make("fixed<12,4>", guard_bits=6),
                rule=UpdateRule(4), seed=0)
    return LearnerSpec(**{**base, **changes})


def _ids(spec: LearnerSpec):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LearnerWarning)
        learner = build_learner(spec)
    return identity.learner_arch_id(learner), identity.learner_model_id(learner), identity.arch_id(learner.graph)


STOCHASTIC = UpdateRule(4, "stochastic")


@pytest.mark.parametrize("a, b, graph_sees_it", [
    ({}, {"rule": UpdateRule(5)}, False),                                              # the learning-rate shift
    ({}, {"rule": STOCHASTIC}, False),                                                 # the update rounding
    ({"rule": STOCHASTIC}, {"rule": dataclasses.replace(STOCHASTIC, lfsr_seed=2)}, False),  # the lanes' seeds
    ({"rule": STOCHASTIC}, {"rule": dataclasses.replace(STOCHASTIC, rand_bits=12)}, False),  # and bits per sample
    ({}, {"formats": LearnerFormats.make("fixed<12,4>", guard_bits=6, coeff="fixed<12,4,RND_CONV,SAT>")}, False),
    ({}, {"formats": LearnerFormats.make("fixed<12,4>", guard_bits=6, error="fixed<14,6>")}, False),
    ({}, {"formats": LearnerFormats.make("fixed<12,4>", guard_bits=6, basis="ufixed<12,1>")}, True),
    ({}, {"formats": LearnerFormats.make("fixed<12,4>", guard_bits=7)}, True),         # guard bits: the storage
])
def test_a_learner_that_differs_in_its_rule_or_formats_is_another_architecture(a, b, graph_sees_it):
    a_arch, a_model, a_graph = _ids(_spec(**a))
    b_arch, b_model, b_graph = _ids(_spec(**b))
    assert b_arch != a_arch and b_model != a_model
    assert (b_graph != a_graph) == graph_sees_it  # False: the hole the graph's own arch_id leaves


def test_only_the_initial_codes_make_two_learners_of_one_architecture_differ():
    zeros = [_ids(_spec(init="zeros", seed=s)) for s in (0, 1)]
    assert zeros[0] == zeros[1]  # the seed drew nothing: the same codes, the same model
    a, b = _ids(_spec(init="normal", seed=0)), _ids(_spec(init="normal", seed=1))
    assert a[0] == b[0] and a[1] != b[1]


def test_a_device_built_for_another_learning_rate_is_refused_at_hello(tmp_path):
    a = kan_learner(3)
    b = a.with_rule(lr_shift=a.rule.lr_shift + 1)
    files, top = learner_device(tmp_path, a)
    with pytest.raises(DeviceMismatch, match="another architecture"):
        Device.open(b, SimTransport(files, top))
    with Device.open(a, SimTransport(files, top)) as dev:  # its own learner opens
        assert dev.hello.arch_id == bytes.fromhex(identity.learner_arch_id(a))[:16]


# -- refusals -----------------------------------------------------------------------------------------------------

def _copy(t1_out: Path, tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(t1_out, out)
    return out


def test_deploy_refuses_a_learner_folder_whose_device_is_another_learners(t1_out, tmp_path):
    out = _copy(t1_out, tmp_path)
    learner = load_learner(out / "learner")
    shutil.rmtree(out / "learner")
    save_learner(learner.with_rule(lr_shift=learner.rule.lr_shift + 2), out / "learner")
    with pytest.raises(DeployError, match="generated for another learner or by an older bitforge"):
        write_bundle(out, None, tmp_path / "x.bfb")
    assert not (tmp_path / "x.bfb").exists()


@pytest.mark.parametrize("case, says", [
    ("ir-folder", "an online learner's IR folder, not the output folder of 'bitforge learn'"),
    ("no-initial", "learner/model.json is missing"),
    ("device-file", "t1_kan_device.v (named by"),
    ("board", "no bitstream for board 'icebreaker' (built for: no board); run 'bitforge learn ... --board "
              "icebreaker"),
])
def test_deploy_refuses_an_incomplete_learner_output(t1_out, tmp_path, case, says):
    out = _copy(t1_out, tmp_path)
    source, board = out, None
    if case == "ir-folder":
        source = out / "final"
    elif case == "no-initial":
        (out / "learner" / "model.json").unlink()
    elif case == "device-file":
        (out / "rtl" / "t1_kan_device.v").unlink()
    else:
        board = "icebreaker"
    with pytest.raises(DeployError) as e:
        write_bundle(source, board, tmp_path / "x.bfb")
    assert says in str(e.value), str(e.value)
    assert not (tmp_path / "x.bfb").exists()


@pytest.mark.parametrize("edit, field", [
    (lambda ln: dataclasses.replace(ln, rule={**ln.rule, "lr_shift": ln.rule["lr_shift"] + 1}), "rule"),
    (lambda ln: dataclasses.replace(ln, state={**ln.state, "arrays": [
        {**ln.state["arrays"][0], "strides": [0, 8, 2]}]}), "state"),
    (lambda ln: dataclasses.replace(ln, t=dataclasses.replace(ln.t, integer=5)), "t"),
    (lambda ln: dataclasses.replace(ln, state={**ln.state, "word_bits": 48}), "state"),
])
def test_a_consistently_rewritten_learner_section_is_refused_by_the_host(t1_bundle, tmp_path, edit, field):
    b = Bundle.open(t1_bundle)
    files = {name: b.read(name) for name in b.names if name != "bundle.json"}
    data, forged = pack(dataclasses.replace(b.manifest, learner=edit(b.manifest.learner)), files)
    (tmp_path / "forged.bfb").write_bytes(data)  # every hash matches: only the host's own check can catch it
    with pytest.raises(BitforgeError, match=f"learner.{field} is not what its learner/model.json describes"):
        Device.open(tmp_path / "forged.bfb", "cpu")


# -- boards -------------------------------------------------------------------------------------------------------

def test_flow_learn_with_a_board_builds_the_learners_device(tmp_path, monkeypatch, capsys):
    """'bitforge flow learn:t1 --board B' no longer refuses: it runs the learner and hands its output folder (with
    the device section) to the board flow, whose verdict a learner gets in a learner's terms."""
    from bitforge.toolchain.flows import board_flow
    from bitforge.toolchain.flows.targets import DoesNotFit

    seen = []

    def fake(out, board, *, baud, seed, progress):
        seen.append((board, baud, json.loads((Path(out) / "rtl/manifest.json").read_text())["device"]["top"]))
        raise DoesNotFit("design 't1_kan_device_icebreaker' does not fit ice40-up5k: needs 18 DSP", "ice40-up5k",
                         {"dsp": (18, 8)})

    monkeypatch.setattr(board_flow, "implement_board", fake)
    out = tmp_path / "t1"
    assert main(["flow", "learn:t1", "--board", "icebreaker", "--baud", "57600", "--simulator", "icarus",
                 "-o", str(out)]) == 2
    assert seen == [("icebreaker", 57600, "t1_kan_device")]
    err = " ".join(capsys.readouterr().err.split())
    assert "UART device does not fit the icebreaker: needs 18 DSP, ice40-up5k has 8" in err
    assert "--order 2 --datapath fixed<12,4> --board icebreaker" in err
    assert (out / "learner" / "model.json").is_file()  # the verified learner is kept, as after a failed target


@pytest.mark.slow
def test_a_t1_learner_on_the_icebreaker_deployed_and_run(tmp_path, stream, capsys):
    """The smallest change of T1's learner that fits the iCEBreaker's 8 DSP blocks, built by the board flow,
    bundled with its bitstream and run on the simulated board from the bundle (the same Verilog)."""
    out = tmp_path / "t1-ib"
    assert main(["learn", "t1", "--order", "2", "--datapath", "fixed<12,4>", "--board", "icebreaker", "--simulator",
                 "icarus", "--samples", str(SAMPLES), "-o", str(out)]) == 0
    entry = json.loads((out / "report.json").read_text())["boards"]["icebreaker"]
    print(f"\nT1 KAN k=2 <12,4> learner device on the iCEBreaker: {entry['resources']}, Fmax {entry['fmax_mhz']} MHz "
          f"at {entry['core_clock_hz']} Hz, {entry['seconds']} s")
    assert entry["status"] == "ok" and entry["resources"]["dsp"] <= 8 and entry["timing_met"]
    done = write_bundle(out, "icebreaker", tmp_path / "t1-ib.bfb")
    b = Bundle.open(done.path)
    assert b.manifest.board.bitstream == entry["bitstream"] and b.manifest.learner is not None
    assert hashlib.sha256(b.bitstream).hexdigest() == entry["sha256"]
    x, t = stream
    learner = load_learner(out / "learner")
    traj = golden(learner, x, t)
    with Device.open(done.path, "sim") as dev:
        pred = dev.learn(x, t)
        state = dev.read_state()
    np.testing.assert_array_equal(pred, fixed.to_float(traj.predictions, learner.formats.datapath))
    assert_state(state.codes, traj.final)
