"""The host runtime (``bitforge.runtime.device``) against the reference device of ``tests/device_model.py``:
answers equal the golden model, every retry path recovers, nothing hangs, wrong models and weights are refused
before they can do harm."""
import time

import numpy as np
import pytest

from bitforge.runtime import deployed, device as device_mod
from bitforge.runtime.device import Device, DeviceMismatch, InputError, WeightsMismatch
from bitforge.runtime.protocol import FrameDecoder, FrameType
from bitforge.runtime.session import DeviceRefused, DeviceTimeout
from bitforge.toolchain import emulate, fixed, ir
from bitforge.toolchain.fixed import parse_type
from bitforge.toolchain.learn import emulate as learn_emulate
from bitforge.toolchain.learn.spec import LearnerFormats, LearnerSpec, UpdateRule, build_learner
from bitforge.toolchain.passes.precision import infer_precision

from device_model import REFERENCE_LAYOUT, MemoryLink, PtyDevice, ReferenceDevice, flip, reference_weight_words


def dense_graph(seed: int = 1, weight_type: str = "fixed<6,1,RND_CONV,SAT>") -> ir.Graph:
    rng = np.random.default_rng(seed)
    d1 = ir.Dense("d1", ("xq",), ("h",), weight=rng.integers(-32, 32, (6, 4)), bias=rng.integers(-100, 100, 6),
                  weight_type=parse_type(weight_type), bias_type=parse_type("fixed<10,4,RND_CONV,SAT>"))
    d2 = ir.Dense("d2", ("r",), ("y",), weight=rng.integers(-32, 32, (3, 6)), bias=rng.integers(-100, 100, 3),
                  weight_type=parse_type(weight_type), bias_type=parse_type("fixed<10,4,RND_CONV,SAT>"))
    g = ir.sequential(f"tiny{seed}", ir.TensorSpec("x", (4,), None), [
        (ir.Quantize("q", ("x",), ("xq",)), ir.TensorSpec("xq", (4,), parse_type("fixed<8,3,RND_CONV,SAT>"))),
        (d1, ir.TensorSpec("h", (6,), parse_type("fixed<12,5,RND_CONV,SAT>"))),
        (ir.ReLU("relu", ("h",), ("r",)), ir.TensorSpec("r", (6,), parse_type("fixed<12,5,RND_CONV,SAT>"))),
        (d2, ir.TensorSpec("y", (3,), parse_type("fixed<10,4,RND_CONV,SAT>")))])
    return ir.validate(infer_precision(g))


def kan_learner(seed: int = 0):
    spec = LearnerSpec("kan", (2, 2), grid_size=4, order=2, formats=LearnerFormats.make("fixed<12,4>", guard_bits=6),
                       rule=UpdateRule(4), seed=seed)
    return build_learner(spec)


def mlp_learner(seed: int = 0):
    spec = LearnerSpec("mlp", (2, 3, 1), formats=LearnerFormats.make("fixed<12,4>", guard_bits=6),
                       rule=UpdateRule(4), seed=seed)
    return build_learner(spec)


def open_ref(model, **kw):
    dev = ReferenceDevice(model, **{k: v for k, v in kw.items() if k in ("max_payload", "weights_ram", "model_id",
                                                                         "arch_id")})
    link = MemoryLink(dev, **{k: v for k, v in kw.items() if k in ("on_write", "on_answer", "silent")})
    return Device.open(model, link, retries=kw.get("retries", 4)), dev, link


def golden(g, x):
    return emulate.run_values(g, x)[g.outputs[0]]


def sent_types(link):
    return [f.type for f in link.frames_sent()]


# -- inference ---------------------------------------------------------------------------------------------------

def test_predict_equals_the_golden_model_on_random_inputs():
    g = dense_graph(1)
    model = deployed.from_graph(g, latency_cycles=5, ii=1)
    x = np.random.default_rng(0).normal(0, 3, (500, 4))
    x[:4] = [[100, -100, 0.0625, -0.03125], [1e-9, 2**-20, 7.96875, -8], [3.5, 3.49, -3.51, 0], [1e6, -1e6, 1, -1]]
    dev, ref, link = open_ref(model)
    with dev:
        y = dev.predict(x)
        np.testing.assert_array_equal(y, golden(g, x))
        np.testing.assert_array_equal(dev.predict(x[7]), golden(g, x[7:8])[0])  # one sample in, one out
        np.testing.assert_array_equal(dev.predict_codes(dev.quantize_inputs(x[:10])),
                                      emulate.run(g, x[:10])[g.outputs[0]])
    assert link.closed
    types = sent_types(link)
    assert types[0] == FrameType.HELLO and FrameType.INFER_BATCH in types and FrameType.INFER in types
    assert dev.stats.retries == 0


def test_batches_are_as_large_as_max_payload_allows():
    model = deployed.from_graph(dense_graph(1))
    dev, ref, link = open_ref(model, max_payload=20)  # 1-byte inputs of 4 x 8 bits: 4 bytes in, 4 bytes out
    dev.predict(np.zeros((12, 4)))
    batches = [len(f.payload) for f in link.frames_sent() if f.type == FrameType.INFER_BATCH]
    assert batches == [20, 20, 8]  # 5 + 5 + 2 words


def test_quantization_is_the_golden_models_float32_then_quantize():
    g = dense_graph(1)
    dev, *_ = open_ref(deployed.from_graph(g))
    x = np.array([[0.1 + 2**-40, 1 / 3, -0.0625 - 1e-12, 3.0999999]])  # float64 values that float32 rounds
    expected = fixed.quantize(x.astype(np.float32), g.tensors["xq"].dtype)
    np.testing.assert_array_equal(dev.quantize_inputs(x), expected)


@pytest.mark.parametrize("x, match", [
    (np.zeros((3, 5)), r"expected shape \(n, 4\)"),
    (np.array([[0, np.nan, 0, 0]]), "NaN or infinite"),
    (np.array([[0, 0, np.inf, 0]]), "NaN or infinite"),
    (np.array([[0, 0, 1e39, 0]]), "beyond float32"),
    (np.array([["a", "b", "c", "d"]]), "real numbers"),
])
def test_bad_inputs_are_refused_before_anything_is_sent(x, match):
    dev, ref, link = open_ref(deployed.from_graph(dense_graph(1)))
    before = len(link.writes)
    with pytest.raises(InputError, match=match):
        dev.predict(x)
    assert len(link.writes) == before


def test_codes_outside_the_input_type_are_refused():
    dev, *_ = open_ref(deployed.from_graph(dense_graph(1)))
    with pytest.raises(InputError, match=r"outside fixed<8,3"):
        dev.predict_codes(np.array([[0, 128, 0, 0]]))


# -- retries -----------------------------------------------------------------------------------------------------

def infer_writes(link):
    return [i for i, w in enumerate(link.writes) if len(w) > 1 and w[1] != 0]


@pytest.mark.parametrize("where", ["request", "answer"])
@pytest.mark.parametrize("byte", [0, 1, 3, 5, -2, -1])
def test_a_corrupted_byte_costs_one_retry(where, byte):
    g = dense_graph(2)
    model = deployed.from_graph(g)
    x = np.random.default_rng(1).normal(0, 2, (40, 4))
    hit = {"done": False}

    def corrupt(i, data):
        if not hit["done"] and len(data) > 20:  # the first infer_batch request (or its answer)
            hit["done"] = True
            return flip(data, byte, 3)
        return data

    dev, ref, link = open_ref(model, max_payload=64, **({"on_write": corrupt} if where == "request"
                                                       else {"on_answer": corrupt}))
    np.testing.assert_array_equal(dev.predict(x), golden(g, x))
    assert hit["done"] and dev.stats.retries == 1


def test_a_lost_answer_is_asked_for_again_and_a_learn_is_applied_once():
    learner = kan_learner()
    model = deployed.from_learner(learner)
    rng = np.random.default_rng(3)
    x, t = rng.uniform(-1, 1, (60, 2)), rng.uniform(-1, 1, (60, 2))
    f = learner.formats
    xq, tq = fixed.quantize(x, f.input), fixed.quantize(t, f.datapath)
    traj = learn_emulate.run(learner, xq, tq)
    lost = {"n": 0}

    def drop_learn_answers(j, data):
        # every third learn answer never arrives: the host repeats the request with its seq
        lost["n"] += 1
        return b"" if lost["n"] % 3 == 0 else data

    dev, ref, link = open_ref(model, max_payload=32)
    link.on_answer = drop_learn_answers
    pred = dev.learn_codes(xq, tq)
    np.testing.assert_array_equal(pred, traj.predictions)
    learn_frames = [f for f in link.frames_sent() if f.type == FrameType.LEARN]
    executed = [e for e in ref.executed if e[0] == FrameType.LEARN]
    assert len(learn_frames) > len(executed) == len({f.seq for f in learn_frames})  # repeats were not executed
    state = dev.read_state()
    for got, want in zip(state.codes, traj.final):
        np.testing.assert_array_equal(got["coeffs"], want["coeffs"])
    assert dev.stats.retries >= 1 and dev.stats.timeouts >= 1


def test_a_duplicated_request_is_answered_twice_and_applied_once():
    learner = mlp_learner()
    model = deployed.from_learner(learner)
    rng = np.random.default_rng(4)
    f = learner.formats
    xq = fixed.quantize(rng.uniform(-1, 1, (30, 2)), f.input)
    tq = fixed.quantize(rng.uniform(-1, 1, (30, 1)), f.datapath)
    traj = learn_emulate.run(learner, xq, tq)
    dev, ref, link = open_ref(model, max_payload=16)
    original = ref.receive
    ref.receive = lambda data: original(data) + original(data)  # the line delivers every byte twice
    pred = dev.learn_codes(xq, tq)
    np.testing.assert_array_equal(pred, traj.predictions)
    state = dev.read_state()
    for got, want in zip(state.codes, traj.final):
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])
    np.testing.assert_array_equal(state.values[0]["weight"], fixed.to_float(traj.final[0]["weight"], f.storage))


def test_a_device_that_never_answers_times_out_in_bounded_time():
    model = deployed.from_graph(dense_graph(1))
    link = MemoryLink(None, silent=True, margin_s=0.05)
    t0 = time.monotonic()
    with pytest.raises(DeviceTimeout, match=r"no answer to hello \(seq 1, 0 payload bytes\) after 3 tries.*last seen: "
                                            r"nothing"):
        Device.open(model, link, retries=2)
    assert time.monotonic() - t0 < 3.0
    assert link.closed


def test_a_device_that_stops_answering_mid_session_times_out():
    g = dense_graph(1)
    dev, ref, link = open_ref(deployed.from_graph(g))
    link.silent = True
    t0 = time.monotonic()
    with pytest.raises(DeviceTimeout, match="no answer to infer"):
        dev.predict(np.zeros((5, 4)))
    assert time.monotonic() - t0 < 5.0


def test_refusals_raise_at_once_with_the_devices_detail():
    g = dense_graph(1)
    dev, ref, link = open_ref(deployed.from_graph(g))
    with pytest.raises(DeviceRefused, match="unsupported"):
        dev._backend.session.request(FrameType.LEARN, b"\x01\x02\x03\x04")
    with pytest.raises(DeviceRefused, match=r"wrong_shape .*detail 4\)"):
        dev._backend.session.request(FrameType.INFER_BATCH, b"\x01\x02\x03")
    assert dev.stats.retries == 0


# -- identity ----------------------------------------------------------------------------------------------------

def test_a_device_running_another_model_is_refused_naming_both():
    a, b = deployed.from_graph(dense_graph(1)), deployed.from_graph(dense_graph(2))
    with pytest.raises(DeviceMismatch, match=rf"other weights of the same architecture: model_id "
                                             rf"{b.model_id[:32]}.*model_id {a.model_id[:32]}"):
        open_ref(a, model_id=b.model_id16)
    c = deployed.from_graph(dense_graph(1, weight_type="fixed<7,1,RND_CONV,SAT>"))
    with pytest.raises(DeviceMismatch, match="another architecture.*program the board"):
        open_ref(a, model_id=c.model_id16, arch_id=c.arch_id16)


def test_a_device_whose_weight_load_was_interrupted_says_so():
    a = deployed.from_graph(dense_graph(1))
    with pytest.raises(DeviceMismatch, match="model_id 0 .*load did not finish"):
        open_ref(a, model_id=bytes(16))


# -- weights -----------------------------------------------------------------------------------------------------

@pytest.fixture
def reference_packer(monkeypatch):
    monkeypatch.setattr(device_mod, "weight_words", reference_weight_words)


def ram_model(seed):
    m = deployed.from_graph(dense_graph(seed))
    return deployed.DeployedModel(m.name, m.model_id, m.arch_id, m.graph, m.in_type, m.out_type, m.in_shape,
                                  m.out_shape, weights=REFERENCE_LAYOUT, source=m.source)


def test_weight_reload_turns_model_a_into_model_b(reference_packer):
    a, b = ram_model(1), ram_model(2)
    dev, ref, link = open_ref(a, weights_ram=True, max_payload=24)
    x = np.random.default_rng(5).normal(0, 2, (200, 4))
    np.testing.assert_array_equal(dev.predict(x), golden(a.graph, x))
    dev.load_weights(b.graph)
    assert dev.hello.model_id == b.model_id16 and dev.model.model_id == b.model_id
    yb = golden(b.graph, x)
    assert not np.array_equal(yb, golden(a.graph, x))
    np.testing.assert_array_equal(dev.predict(x), yb)
    assert sum(t == FrameType.WRITE_WEIGHTS for t in sent_types(link)) > 1  # in chunks
    assert sent_types(link).count(FrameType.COMMIT_WEIGHTS) == 1


def test_weights_of_another_architecture_are_refused_before_a_byte_is_sent(reference_packer):
    dev, ref, link = open_ref(ram_model(1), weights_ram=True)
    other = dense_graph(1, weight_type="fixed<7,1,RND_CONV,SAT>")
    before = len(link.writes)
    with pytest.raises(WeightsMismatch, match=r"architecture [0-9a-f]{16}\.\.\. differs from the device's "
                                              r"[0-9a-f]{16}\.\.\."):
        dev.load_weights(other)
    assert len(link.writes) == before
    assert FrameType.WRITE_WEIGHTS not in sent_types(link)


def test_weights_cannot_be_loaded_into_a_constant_weight_build():
    dev, ref, link = open_ref(deployed.from_graph(dense_graph(1)))
    with pytest.raises(WeightsMismatch, match="--weights ram"):
        dev.load_weights(dense_graph(2))
    assert FrameType.WRITE_WEIGHTS not in sent_types(link)


def test_an_interrupted_load_leaves_model_id_zero(reference_packer):
    a, b = ram_model(1), ram_model(2)

    def lose_commits(i, data):
        frames = FrameDecoder().feed(data)
        return b"" if any(getattr(f, "type", None) == FrameType.COMMIT_WEIGHTS for f in frames) else data

    dev, ref, link = open_ref(a, weights_ram=True, max_payload=24, retries=1, on_write=lose_commits)
    with pytest.raises(DeviceTimeout, match=r"no answer to commit_weights .* after 2 tries"):
        dev.load_weights(b.graph)
    assert ref.model_id == bytes(16)
    with pytest.raises(DeviceMismatch, match="model_id 0"):
        Device.open(a, MemoryLink(ref))


# -- learners ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("make", [kan_learner, mlp_learner])
def test_a_learners_trajectory_and_state_equal_the_golden_learner(make):
    learner = make(1)
    model = deployed.from_learner(learner)
    f = learner.formats
    rng = np.random.default_rng(6)
    n = 150
    x = rng.uniform(-1.2, 1.2, (n, learner.spec.sizes[0]))
    y = rng.uniform(-1, 1, (n, learner.spec.sizes[-1]))
    le = rng.random(n) < 0.8
    traj = learn_emulate.run(learner, fixed.quantize(x, f.input), fixed.quantize(y, f.datapath), le)
    dev, ref, link = open_ref(model, max_payload=40)
    pred = dev.learn(x, y, le)
    np.testing.assert_array_equal(pred, fixed.to_float(traj.predictions, f.datapath))
    state = dev.read_state()
    for got, want in zip(state.codes, traj.final):
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])
    # predictions after learning use the learned state, as the golden learner's predict does
    after = learner.with_state(traj.final)
    xp = rng.uniform(-1, 1, (20, learner.spec.sizes[0]))
    np.testing.assert_array_equal(dev.predict(xp), golden(after.inference_graph(float_input=True), xp))


def test_learn_on_a_compiled_model_is_refused():
    dev, *_ = open_ref(deployed.from_graph(dense_graph(1)))
    with pytest.raises(Exception, match="not an online learner"):
        dev.learn(np.zeros((2, 4)), np.zeros((2, 3)))


# -- the serial path on a real pseudo-terminal -------------------------------------------------------------------

def test_serial_transport_on_a_pseudo_terminal():
    g = dense_graph(3)
    model = deployed.from_graph(g)
    x = np.random.default_rng(7).normal(0, 2, (300, 4))
    with PtyDevice(ReferenceDevice(model, max_payload=64)) as pty:
        with Device.open(model, pty.port, baud=115200) as dev:
            np.testing.assert_array_equal(dev.predict(x), golden(g, x))


def test_a_missing_serial_port_names_the_ports_there_are():
    from bitforge.runtime.transports import TransportError
    with pytest.raises(TransportError, match=r"/dev/ttyNOPE0 does not exist.*(serial ports on this machine|no serial "
                                             r"ports found)"):
        Device.open(deployed.from_graph(dense_graph(1)), "/dev/ttyNOPE0")


# -- the CPU path ------------------------------------------------------------------------------------------------

def test_cpu_transport_equals_the_golden_model():
    g = dense_graph(4)
    x = np.random.default_rng(8).normal(0, 3, (1000, 4))
    with Device.open(g, "cpu") as dev:
        np.testing.assert_array_equal(dev.predict(x), golden(g, x))
        dev.load_weights(dense_graph(5))
        np.testing.assert_array_equal(dev.predict(x), golden(dense_graph(5), x))
        with pytest.raises(WeightsMismatch):
            dev.load_weights(dense_graph(5, weight_type="fixed<7,1,RND_CONV,SAT>"))


def test_cpu_transport_runs_the_golden_learner():
    learner = kan_learner(2)
    f = learner.formats
    rng = np.random.default_rng(9)
    x, y = rng.uniform(-1, 1, (80, 2)), rng.uniform(-1, 1, (80, 2))
    traj = learn_emulate.run(learner, fixed.quantize(x, f.input), fixed.quantize(y, f.datapath))
    with Device.open(learner, "cpu") as dev:
        np.testing.assert_array_equal(dev.learn(x, y), fixed.to_float(traj.predictions, f.datapath))
        np.testing.assert_array_equal(dev.read_state().codes[0]["coeffs"], traj.final[0]["coeffs"])
