"""The fidelity report (docs/fidelity.md): the compiled fixed-point model against its float reference.

Each measure is checked against a direct computation: errors and top-1 agreement from the two models' outputs,
ranges from the golden values, overflow counts from an independent float64 oracle of the exact result, the
tensor pairing through the quantize pass's and the BatchNorm fold's renames, the trace against the golden model.
"""
from __future__ import annotations

import json
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from bitforge.toolchain import emulate, fixed, ir
from bitforge.toolchain.cli import main
from bitforge.toolchain.compiler import CompileError, CompileOptions, LoadedModel, compile_model, load_model, prepare
from bitforge.toolchain.errors import BitforgeError
from bitforge.toolchain.fixed import parse_type
from bitforge.toolchain.ir import Dense, Graph, ReLU, ScaleShift, TensorSpec
from bitforge.toolchain.passes.dequantize import dequantize_graph
from bitforge.toolchain.passes.quantize import quantize_graph
from bitforge.toolchain.verify import fidelity
from bitforge.toolchain.verify.fidelity import (calibration_batch, measure, reference_for, tensor_map,
                                                verification_batch, write_fidelity)
from bitforge.toolchain.verify.trace import npz_bytes
from bitforge.toolchain.verify.vectors import input_range, make_vectors
from qonnx_builders import float_mlp


def _report(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())


def _float_mlp(hidden: int = 6, seed: int = 0, bn: bool = False) -> Graph:
    """x (4) -> fc1 -> [bn ->] relu -> fc2 (3): a float graph as a frontend gives it."""
    rng = np.random.default_rng(seed)
    t = {"x": TensorSpec("x", (4,)), "h": TensorSpec("h", (hidden,)), "r": TensorSpec("r", (hidden,)),
         "y": TensorSpec("y", (3,))}
    nodes = [Dense("fc1", ("x",), ("h",), weight=rng.normal(size=(hidden, 4)).astype(np.float32),
                   bias=rng.normal(size=hidden).astype(np.float32))]
    act_in = "h"
    if bn:
        t["b"] = TensorSpec("b", (hidden,))
        nodes.append(ScaleShift("bn", ("h",), ("b",), scale=rng.uniform(0.5, 2, hidden).astype(np.float32),
                                shift=rng.normal(size=hidden).astype(np.float32)))
        act_in = "b"
    nodes += [ReLU("relu", (act_in,), ("r",)),
              Dense("fc2", ("r",), ("y",), weight=rng.normal(size=(3, hidden)).astype(np.float32),
                    bias=rng.normal(size=3).astype(np.float32))]
    return ir.validate(Graph("mlp", ["x"], ["y"], t, nodes, {"input_range": [-2.0, 2.0]}))


def _layer(section: dict, node: str, set_name: str = "verification") -> dict:
    return next(la for la in section["sets"][set_name]["layers"] if la["node"] == node)


# -- the reference and the pairing of tensors ----------------------------------------------------------------

def test_a_float_source_is_its_own_reference_and_a_quantized_one_is_dequantized():
    g = _float_mlp()
    assert reference_for(g).kind == "float" and reference_for(g).graph is g
    fixed_g = load_model("kan-tracker").graph
    ref = reference_for(fixed_g)
    assert ref.kind == "dequantized" and all(t.is_float for t in ref.graph.tensors.values())
    assert not any(n.OP in ("Quantize", "Requantize") for n in ref.graph.nodes)


def test_tensors_pair_through_the_quantize_pass_renames():
    g = _float_mlp()
    q = quantize_graph(g, "8")
    mapping = tensor_map(q, g)
    # The inserted input quantizer stands for the input; every other node keeps its name.
    assert mapping == {"x_q": "x", "h": "h", "r": "r", "y": "y"}


def test_a_folded_batchnorm_pairs_with_the_batchnorm_output_and_stays_close():
    """fold_batchnorm gives the folded Dense the BatchNorm's output tensor: the pair compares post-BN values."""
    g = _float_mlp(bn=True)
    fixed_g, _ = prepare(LoadedModel(g, {"kind": "test"}), "16")
    assert "h" not in fixed_g.tensors, "the fold removes the pre-BatchNorm tensor"
    mapping = tensor_map(fixed_g, g)
    assert mapping["b"] == "b" and "h" not in mapping
    batch = verification_batch(fixed_g, 500, 0)
    result = measure(fixed_g, reference_for(g), batch).to_json()
    b = next(la for la in result["layers"] if la["tensor"] == "b")
    lsb = parse_type(b["type"]).lsb
    # 16-bit activations: each layer adds a few LSBs of rounding, nothing more (no overflow on in-range rows).
    assert b["overflowed"] == 0 and 0 < b["max_abs_error"] < 8 * lsb
    assert result["outputs"]["y"]["max_abs_error"] < 0.05


def test_the_dequantized_reference_holds_real_weights_for_conv_scale_shift_and_leaky_relu():
    import test_every_op as every

    for op, field, type_field in (("Conv", "weight", "weight_type"), ("ScaleShift", "scale", "scale_type"),
                                  ("LeakyReLU", "alpha", "alpha_type")):
        g = every.FIXED[op](np.random.default_rng(0))
        n = next(n for n in g.nodes if n.OP == op)
        d = dequantize_graph(g).node(n.name)
        assert np.array_equal(getattr(d, field), fixed.to_float(getattr(n, field), getattr(n, type_field))), op


# -- the measures against direct computations ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def quantized():
    """The float MLP at 8 bits, its verification batch and measures."""
    g = _float_mlp()
    q = quantize_graph(g, "8")
    from bitforge.toolchain.passes.precision import infer_precision
    q = infer_precision(q)
    batch = verification_batch(q, 3000, 5)
    return g, q, batch, measure(q, reference_for(g), batch).to_json()


def test_edge_rows_beyond_the_input_range_are_left_out(quantized):
    _, q, batch, result = quantized
    x = make_vectors(q, 3000, 5)["x"].astype(np.float64)
    lo, hi = input_range(q, "x")
    beyond = ((x < lo) | (x > hi)).any(axis=1)
    assert beyond.sum() > 0 and result["left_out"] == int(beyond.sum())
    assert result["vectors"] == 3000 - int(beyond.sum()) == batch.rows
    assert np.array_equal(batch.real["x"], x[~beyond].astype(np.float32))


def test_output_errors_and_top1_match_a_direct_computation(quantized):
    g, q, batch, result = quantized
    y_fixed = emulate.run_values(q, batch.fixed)["y"]
    y_float = emulate.run(g, batch.real)["y"].astype(np.float64)
    d = np.abs(y_fixed - y_float)
    o = result["outputs"]["y"]
    assert o["max_abs_error"] == pytest.approx(d.max(), rel=1e-5) and o["max_abs_error"] > 0
    assert o["mean_abs_error"] == pytest.approx(d.mean(), rel=1e-5)
    assert o["worst_row"] == int(d.max(axis=1).argmax())
    agree = y_fixed.argmax(axis=1) == y_float.argmax(axis=1)
    assert (o["top1_agreeing"], o["top1_compared"]) == (int(agree.sum()), batch.rows)
    assert o["top1_agreement"] == pytest.approx(agree.mean(), rel=1e-5)
    assert o["reference_range"] == [pytest.approx(y_float.min(), rel=1e-5), pytest.approx(y_float.max(), rel=1e-5)]


def test_layer_ranges_are_the_golden_values_and_errors_the_paired_tensors(quantized):
    g, q, batch, result = quantized
    golden = emulate.run(q, batch.fixed, keep=True)
    ref = emulate.run(g, batch.real, keep=True)
    for layer in result["layers"]:
        t = q.tensors[layer["tensor"]].dtype
        v = fixed.to_float(golden[layer["tensor"]], t)
        assert layer["observed"] == [v.min(), v.max()], layer["node"]
        assert layer["type_range"] == [t.min_value, t.max_value] and layer["lsb"] == t.lsb
        assert layer["values"] == v.size and layer["zeros"] == int((v == 0).sum())
        r = ref[layer["reference"]].astype(np.float64)
        d = np.abs(v - r)
        assert layer["max_abs_error"] == pytest.approx(d.max(), rel=1e-5), layer["node"]
        assert layer["reference_observed"] == [pytest.approx(r.min(), rel=1e-5), pytest.approx(r.max(), rel=1e-5)]


def _narrow(overflow: str) -> tuple[Graph, Graph]:
    """The float MLP with 6-bit activations of one integer bit (range [-1, 1)): its inputs in [-2, 2] and the
    layers' sums overflow."""
    g = _float_mlp(hidden=8, seed=3)
    act = f"fixed<6,1,RND_CONV,{overflow}>"
    from bitforge.toolchain.passes.precision import infer_precision
    return g, infer_precision(quantize_graph(g, f"weight=8,act={act}"))


@pytest.mark.parametrize("overflow", ["SAT", "WRAP"])
def test_overflow_counts_are_the_exact_results_beyond_the_type(overflow):
    """Oracle: the exact value of each layer (float64 arithmetic on the codes' real values: exact at these sizes),
    rounded half to even at the type's LSB, compared with the type's range."""
    g, q = _narrow(overflow)
    batch = verification_batch(q, 2000, 1)
    result = measure(q, reference_for(g), batch).to_json()
    env = emulate.run(q, batch.fixed, keep=True)
    t_in = q.tensors["x_q"].dtype
    real = lambda name: fixed.to_float(env[name], q.tensors[name].dtype)  # noqa: E731

    def beyond(exact: np.ndarray, t) -> int:
        code = np.round(exact * 2.0 ** t.frac)  # RND_CONV: half to even, as np.round
        return int(((code < t.min_code) | (code > t.max_code)).sum())

    fc1 = q.node("fc1")
    exact_fc1 = real("x_q") @ fixed.to_float(fc1.weight, fc1.weight_type).T + fixed.to_float(fc1.bias, fc1.bias_type)
    expected = {"x_quantize": beyond(batch.real["x"].astype(np.float64), t_in),
                "fc1": beyond(exact_fc1, q.tensors["h"].dtype)}
    for node, count in expected.items():
        assert _layer({"sets": {"verification": result}}, node)["overflowed"] == count, node
    assert expected["fc1"] > 0 and expected["x_quantize"] > 0
    if overflow == "SAT":
        # Every overflowed value of a saturating type sits on an end code, but not every end code overflowed.
        codes = env["h"]
        t = q.tensors["h"].dtype
        at_ends = int(((codes == t.min_code) | (codes == t.max_code)).sum())
        assert expected["fc1"] <= at_ends


def test_every_op_runs_through_the_fidelity_report(tmp_path):
    """Nothing is op-specific: every IR op's fixed test graph, against its own dequantized graph."""
    import test_every_op as every

    for op, build in every.FIXED.items():
        g = build(np.random.default_rng(0))
        section = write_fidelity(tmp_path, g, g, 200, 0)
        s = section["sets"]["verification"]
        assert [la["node"] for la in s["layers"]] == [n.name for n in g.nodes], op
        assert set(s["outputs"]) == set(g.outputs) and s["vectors"] + s["left_out"] == 200, op
        for out in s["outputs"].values():
            assert np.isfinite(out["max_abs_error"]), op


# -- the compile: report.json, report.md, the plot, the trace ---------------------------------------------------

@pytest.fixture(scope="module")
def jet(tmp_path_factory):
    root = tmp_path_factory.mktemp("fid")
    x = np.random.default_rng(7).uniform(-3, 3, size=(300, 16))
    np.save(root / "x.npy", x)
    out = root / "jet"
    assert main(["compile", "jet-mlp", "-o", str(out), "--vectors", "2000", "--calibration", str(root / "x.npy"),
                 "--trace", "5"]) == 0
    return root, out, x


def test_compile_reports_both_sets_and_links_the_plot(jet):
    root, out, x = jet
    f = _report(out)["fidelity"]
    assert f["reference"]["kind"] == "dequantized"
    assert set(f["sets"]) == {"verification", "calibration"}
    assert f["sets"]["calibration"]["vectors"] == 300 and "left_out" not in f["sets"]["calibration"]
    assert f["sets"]["verification"]["vectors"] + f["sets"]["verification"]["left_out"] == 2000
    assert f["plot"] == "fidelity.png" and (out / "fidelity.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "report.md").read_text()
    assert "## Fidelity against the float model" in md and "](fidelity.png)" in md and "trace.npz" in md
    y = f["sets"]["calibration"]["outputs"]["dense_7"]
    assert f"{y['max_abs_error']:.4g}" in md


def test_calibration_rows_are_measured_as_given(jet):
    root, out, x = jet
    g = ir.load(out)
    ref = reference_for(load_model("jet-mlp").graph)
    direct = measure(g, ref, calibration_batch(g, x.astype(np.float32))).to_json()
    assert _report(out)["fidelity"]["sets"]["calibration"] == json.loads(json.dumps(direct))


def test_trace_holds_every_tensor_of_both_models(jet):
    root, out, x = jet
    g = ir.load(out)
    ref = reference_for(load_model("jet-mlp").graph).graph
    z = np.load(out / "trace.npz", allow_pickle=False)
    assert str(z["set"]) == "calibration" and _report(out)["fidelity"]["trace"]["vectors"] == 5
    golden = emulate.run(g, x[:5].astype(np.float32), keep=True)
    floats = emulate.run(ref, x[:5].astype(np.float32), keep=True)
    for name, v in golden.items():
        t = g.tensors[name].dtype
        expect = fixed.to_float(v, t) if t is not None else v.astype(np.float64)
        assert np.array_equal(z[f"fixed/{name}"], expect), name
    for name, v in floats.items():
        assert np.array_equal(z[f"float/{name}"], v), name
    layers = z["layers"]
    assert [tuple(r) for r in layers[:, :3]] == [(n.name, n.OP, n.output) for n in g.nodes]
    assert dict(zip(layers[:, 2], layers[:, 3])) == {k: tensor_map(g, ref).get(k, "") for k in layers[:, 2]}


def test_compile_is_byte_identical_in_another_process(jet, tmp_path):
    root, out, _ = jet
    again = tmp_path / "again"
    subprocess.run([sys.executable, "-m", "bitforge.toolchain.cli", "compile", "jet-mlp", "-o", str(again),
                    "--vectors", "2000", "--calibration", str(root / "x.npy"), "--trace", "5"], check=True,
                   capture_output=True)
    for f in ("report.json", "report.md", "fidelity.png", "trace.npz"):
        assert (again / f).read_bytes() == (out / f).read_bytes(), f


def _png_text_keys(data: bytes) -> list[str]:
    keys, pos = [], 8
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind in (b"tEXt", b"iTXt", b"zTXt"):
            keys.append(data[pos + 8:pos + 8 + length].split(b"\0", 1)[0].decode())
        assert zlib.crc32(data[pos + 4:pos + 8 + length]) == struct.unpack(">I", data[pos + 8 + length:pos + 12 +
                                                                                         length])[0]
        pos += 12 + length
    return keys


def test_the_plot_carries_no_software_or_date_stamp(jet):
    keys = _png_text_keys((jet[1] / "fidelity.png").read_bytes())
    assert "Software" not in keys and "Creation Time" not in keys


def test_npz_bytes_are_deterministic_and_keep_slashed_names():
    arrays = {"fixed//fc1/Gemm_output_0": np.arange(6.0).reshape(2, 3), "layers": np.array([["a", "b"]])}
    data = npz_bytes(arrays)
    assert data == npz_bytes(dict(reversed(arrays.items())))
    import io
    z = np.load(io.BytesIO(data), allow_pickle=False)
    assert np.array_equal(z["fixed//fc1/Gemm_output_0"], arrays["fixed//fc1/Gemm_output_0"])


# -- what it refuses, and when it has nothing to say ---------------------------------------------------------------

def test_a_float_compile_skips_fidelity_and_refuses_calibration(tmp_path):
    float_mlp(tmp_path / "m.onnx")
    out = tmp_path / "out"
    compile_model(str(tmp_path / "m.onnx"), out, CompileOptions(vectors=50))
    assert "skipped" in _report(out)["fidelity"] and not (out / "fidelity.png").exists()
    np.save(tmp_path / "x.npy", np.zeros((4, 4)))
    with pytest.raises(CompileError, match="--calibration.*--precision"):
        compile_model(str(tmp_path / "m.onnx"), tmp_path / "o2",
                      CompileOptions(vectors=50, calibration=str(tmp_path / "x.npy")))
    assert not (tmp_path / "o2").exists()


@pytest.mark.parametrize("array, says", [(np.zeros((5, 3)), "shape"), (np.zeros((0, 4)), "shape"),
                                         (np.array([[0.0, np.nan, 0, 0]]), "NaN")])
def test_calibration_that_does_not_fit_names_the_file(tmp_path, array, says):
    float_mlp(tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", array)
    with pytest.raises(BitforgeError, match=says) as e:
        compile_model(str(tmp_path / "m.onnx"), tmp_path / "out",
                      CompileOptions(vectors=50, precision="8", calibration=str(tmp_path / "x.npy")))
    assert "x.npy" in str(e.value) and not (tmp_path / "out").exists()


def test_one_sample_is_a_batch_of_one():
    g = _float_mlp()
    assert fidelity.fit_calibration(np.ones(4), "x.npy", g).shape == (1, 4)


def test_calibration_chooses_the_activation_ranges_and_is_measured(tmp_path):
    float_mlp(tmp_path / "m.onnx")
    x = np.random.default_rng(3).normal(size=(300, 4)) * 0.5
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out"
    compile_model(str(tmp_path / "m.onnx"), out, CompileOptions(vectors=200, precision="8",
                                                                calibration=str(tmp_path / "x.npy")))
    g = ir.load(out)
    assert g.metadata["quantization"]["activation_ranges"] == "calibration (300 samples)"
    # The input quantizer's integer bits come from the data: the fewest that hold its largest value.
    t = g.tensors["x_q"].dtype
    assert t.min_value <= x.min() and x.max() <= t.max_value
    assert not (t.min_value / 2 <= x.min() and x.max() <= t.max_value / 2)
    f = _report(out)["fidelity"]
    assert f["reference"]["kind"] == "float" and f["sets"]["calibration"]["vectors"] == 300
    assert _report(out)["options"]["calibration"] == str(tmp_path / "x.npy")
