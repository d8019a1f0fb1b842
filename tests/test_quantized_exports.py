"""Every quantized export compiles: Brevitas with its default float scales (QONNX and QCDQ, an MLP and a CNN) and
ONNX Runtime's ``quantize_static`` (QDQ, asymmetric zero points, int32 biases, a Softmax head), through integer-only
requantization (docs/quantized-models.md).

For each: the golden model and ONNX Runtime agree bit for bit on the compiled model; the fidelity report's reference
is the source file run by onnxruntime; the compiled model's outputs lie within one output step of the source's on
at least 99 % of the fixture's own inputs (drawn like its calibration data). One fixture also goes through the RTL
on Icarus, bit-exact. ``--strict`` refuses them with the old message, and a wider multiplier comes closer to the
source.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import quantized_exports as Q
from bitforge.toolchain import emulate, ir
from bitforge.toolchain.compiler import CompileOptions, compile_model
from bitforge.toolchain.frontends.onnx_frontend import OnnxFrontendError
from bitforge.toolchain.verify.fidelity import real_values
from bitforge.toolchain.verify.source_reference import onnx_reference

FIXTURES = {
    "brevitas_mlp_qonnx": lambda d: Q.brevitas_mlp(d, "qonnx"),
    "brevitas_mlp_qcdq": lambda d: Q.brevitas_mlp(d, "qcdq"),
    "brevitas_cnn_qonnx": lambda d: Q.brevitas_cnn(d, "qonnx"),
    "brevitas_cnn_qcdq": lambda d: Q.brevitas_cnn(d, "qcdq"),
    "ort_static_cnn": Q.ort_static_cnn,
}


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """Each fixture's (ONNX path, inputs), built once (Brevitas calibration and export take seconds)."""
    folder = tmp_path_factory.mktemp("exports")
    return {}, folder


def _export(exports, name):
    built, folder = exports
    if name not in built:
        sub = folder / name
        sub.mkdir()
        built[name] = FIXTURES[name](sub)
    return built[name]


def _compile(path, out, **options) -> dict:
    return compile_model(str(path), out, CompileOptions(to=("onnx",), vectors=2000, **options))


def _output_step(path) -> float:
    """The source's own resolution at its output: the scale of the DequantizeLinear that produces it (ORT); for a
    float output (Brevitas' last QuantLinear), the most one step of one input code moves an output, the last
    activation quantizer's scale times the largest quantized weight."""
    m = onnx.load(str(path))
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    producer = {o: n for n in m.graph.node for o in n.output}
    last = producer[m.graph.output[0].name]
    if last.op_type == "DequantizeLinear":
        return float(inits[last.input[1]].max())

    def quantizer(tensor: str):
        n = producer[tensor]
        while n.op_type not in ("Quant", "QuantizeLinear"):
            n = producer[n.input[0]]  # through Reshape/Flatten, and DequantizeLinear/Clip of QCDQ
        return n

    w = quantizer(last.input[1])
    s_w = float(inits[w.input[1]].max())
    w_max = float(np.abs(np.round(inits[w.input[0]] / s_w)).max()) * s_w
    return float(inits[quantizer(last.input[0]).input[1]].max()) * w_max


def _deviation_in_steps(path, out, x) -> np.ndarray:
    """Per input row: the largest |compiled - source| over the outputs, in output steps."""
    g = ir.load(out)
    got = real_values(g, emulate.run(g, {g.inputs[0]: x}, keep=True))[g.outputs[0]]
    ref = onnx_reference(path)
    want = ref.run({g.inputs[0]: x})[ref.graph.outputs[0]].astype(np.float64)
    return np.abs(got - want).reshape(len(x), -1).max(axis=1) / _output_step(path)


@pytest.mark.parametrize("name", FIXTURES)
def test_export_compiles_bit_exact_and_within_one_step_of_its_source(name, exports, tmp_path):
    """Measured (seed 0, 512 inputs each): the Brevitas models agree with their source to float32 rounding on all
    but a few rows, where an input lies within 2**-12 steps of its quantizer's tie (one input code moves); the ORT
    CNN differs by at most 1 step of its 1/255 output quantizer on ~6 % of rows (its Softmax tables round near a
    step's edge) plus the 2**-16 of the real output type. So: >= 99 % of rows within 1.01 output steps, every row
    within 4."""
    path, x = _export(exports, name)
    report = _compile(path, tmp_path / "out")
    assert report["verification"]["golden_vs_onnxruntime"]["mismatches"] == 0
    fidelity = report["fidelity"]
    assert fidelity["reference"]["kind"] == "source"
    assert "onnxruntime" in fidelity["reference"]["what"]
    verification = fidelity["sets"]["verification"]
    assert verification["vectors"] > 1000
    assert next(iter(verification["outputs"].values()))["max_abs_error"] < 4 * _output_step(path)
    steps = _deviation_in_steps(path, tmp_path / "out", x)
    assert np.mean(steps <= 1.01) >= 0.99, np.sort(steps)[-10:]
    assert steps.max() <= 4.0


def test_tensor_scales_pair_codes_with_their_real_values(exports, tmp_path):
    """An integer-code tensor of the compiled model, times its recorded scale, is the source's dequantized tensor of
    the same name (ORT's MaxPool output: a grid value, equal on all but the rare rows an input rounding moved)."""
    path, x = _export(exports, "ort_static_cnn")
    _compile(path, tmp_path / "out")
    g = ir.load(tmp_path / "out")
    name = "/2/MaxPool_output_0"
    assert g.metadata["tensor_scales"][name] == pytest.approx(0.0112760216, rel=1e-6)
    got = real_values(g, emulate.run(g, {g.inputs[0]: x}, keep=True))[name]
    want = onnx_reference(path).run({g.inputs[0]: x})[name]
    assert np.mean(np.abs(got - want) < 1e-6) > 0.999


@pytest.mark.parametrize("name", ["brevitas_mlp_qonnx", "ort_static_cnn"])
def test_strict_refuses_non_power_of_two_scales_with_the_old_message(name, exports, tmp_path):
    path, _ = _export(exports, name)
    with pytest.raises(OnnxFrontendError) as e:
        _compile(path, tmp_path / "out", strict=True)
    assert "is not a power of two" in str(e.value) and "power-of-two scales" in str(e.value)
    assert not (tmp_path / "out").exists()


def test_a_wider_multiplier_comes_closer_to_the_source(exports, tmp_path):
    """Brevitas' MLP ends in a float output, so the multiplier's rounding shows there directly: a 16-bit M0 keeps
    15 significant bits (relative error up to 2**-16), a 32-bit one 31, below float32's own 24."""
    path, x = _export(exports, "brevitas_mlp_qonnx")
    errors = {}
    for bits in (16, 32):
        report = _compile(path, tmp_path / f"b{bits}", multiplier_bits=bits)
        assert report["options"]["multiplier_bits"] == bits
        errors[bits] = next(iter(report["fidelity"]["sets"]["verification"]["outputs"].values()))["mean_abs_error"]
    assert errors[16] > 8 * errors[32], errors


@pytest.mark.slow
def test_brevitas_mlp_through_the_rtl_on_icarus_is_bit_exact(exports, tmp_path):
    from bitforge.toolchain.verify.simulate import simulate

    path, _ = _export(exports, "brevitas_mlp_qcdq")
    out = tmp_path / "out"
    compile_model(str(path), out, CompileOptions(to=("onnx", "rtl"), vectors=500))
    result = simulate(out, "icarus", 300, 0)
    assert result["icarus"]["mismatches"] == 0 and result["icarus"]["vectors"] == 300
