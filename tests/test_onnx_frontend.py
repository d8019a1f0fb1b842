"""ONNX frontend: float, QDQ and QONNX models -> IR, checked against onnxruntime and a QONNX oracle.

* Float graphs: the IR's float emulation against onnxruntime, within a float32 rounding bound (the two
  sum dot products in different orders; see :func:`float32_error_bound`).
* QDQ graphs: the golden model against onnxruntime running the *original* QDQ model, bit for bit. This is
  provably exact here: every tensor is a small integer times a power of two, each dot product's partial sums
  stay below 2**24 units of its grid (asserted), so float32 computes them exactly in any order, and
  QuantizeLinear's ``x / 2**-F`` is an exact shift followed by round-half-even and saturation = RND_CONV, SAT.
* QONNX graphs: the golden model against the numpy oracle in ``qonnx_builders`` (written from the QONNX
  spec), exactly.
* Bad input: every failure is an ``OnnxFrontendError`` naming the file/node, the expectation and a fix.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import qonnx_builders as B
from bitforge.toolchain import emulate, ir
from bitforge.toolchain.fixed import FixedType, Overflow, Rounding
from bitforge.toolchain.frontends.onnx_frontend import (
    QuantOptions, SUPPORTED_OPS, OnnxFrontendError, from_onnx_model, load_onnx,
)
from bitforge.toolchain.passes.precision import infer_precision

RC, SAT, SYM = Rounding.RND_CONV, Overflow.SAT, Overflow.SAT_SYM


def T(width: int, integer: int, signed: bool = True, rounding=RC, overflow=SAT) -> FixedType:
    return FixedType(width, integer, signed, rounding, overflow)


def nodes_of(g: ir.Graph, op: type) -> list:
    return [n for n in g.nodes if isinstance(n, op)]


def golden(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """Frontend -> accumulators sized by the precision pass -> golden model, as real values."""
    g = infer_precision(from_onnx_model(model, "test.onnx"))
    return emulate.run_values(g, x)[g.outputs[0]]


def grid_inputs(features: int, frac: int, bits: int = 8, n: int = 512, seed: int = 0) -> np.ndarray:
    """Values on a grid twice as fine as 2**-frac (exact half-LSB ties) over 1.5x the type's range."""
    rng = np.random.default_rng(seed)
    codes = rng.integers(-3 << (bits - 1), 3 << (bits - 1), size=(n, features))
    return np.ldexp(codes, -(frac + 1)).astype(np.float32)


def assert_float32_exact(g: ir.Graph) -> None:
    """The precondition of bit-exact comparison with onnxruntime's float kernels: every partial sum of
    every dot product (bias included) is below 2**24 units of the accumulator's grid."""
    for n in nodes_of(g, ir.Dense):
        xt = g.tensors[n.input].dtype
        xmax = max(-xt.min_code, xt.max_code)
        rows = np.abs(n.weight).sum(axis=1) * xmax
        if n.bias is not None:
            rows = rows + np.abs(n.bias) * 2 ** (xt.frac + n.weight_type.frac - n.bias_type.frac)
        assert rows.max() < 2 ** 24, f"{n.name}: float32 would round; the exactness argument does not hold"


# -- (a) float graphs ------------------------------------------------------------------------------------

def float32_error_bound(g: ir.Graph, x: np.ndarray) -> np.ndarray:
    """First-order bound on |emulate - onnxruntime| for a float MLP: each side's n-term float32 dot product
    errs by at most n*u*sum|x_i w_i| (Higham, Accuracy and Stability, eq. 3.5), and errors of earlier layers
    pass through later ones at most amplified by |W|; so 2 * (sum of fan-ins) * u * (the same network run on
    |x| with |W|, |b|) bounds the difference of the two."""
    a = np.abs(x.astype(np.float64))
    fan_in = 0
    for n in g.nodes:
        if isinstance(n, ir.Dense):
            a = a @ np.abs(n.weight.astype(np.float64)).T + (np.abs(n.bias) if n.bias is not None else 0)
            fan_in += n.in_features
    return 2 * fan_in * 2.0 ** -24 * a + 1e-30


@pytest.mark.parametrize("build", [B.float_mlp_gemm, B.float_mlp_matmul], ids=["gemm", "matmul_add"])
def test_float_mlp_matches_onnxruntime_within_float32_rounding(build):
    model = build()
    g = from_onnx_model(model, "float.onnx")
    assert [n.OP for n in g.nodes] == ["Dense", "ReLU", "Dense"]  # bias Adds folded, no-op reshapes gone
    assert all(g.tensors[t].is_float for t in g.tensors)
    x = np.random.default_rng(5).normal(size=(300, 6)).astype(np.float32) * 3
    got = emulate.run(g, x)["y"]
    ref = B.ort_run(model, x)
    err = np.abs(got.astype(np.float64) - ref)
    assert np.all(err <= float32_error_bound(g, x)), f"max error {err.max()}"


def test_matmul_add_folds_initializers_into_dense_weight_and_bias():
    model = B.float_mlp_matmul()
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    g = from_onnx_model(model, "float.onnx")
    d0, d1 = nodes_of(g, ir.Dense)
    np.testing.assert_array_equal(d0.weight, inits["W0"].T)  # ONNX MatMul weight is (in, out)
    np.testing.assert_array_equal(d0.bias, inits["b0"])
    np.testing.assert_array_equal(d1.bias, inits["b1"])
    assert g.outputs == ["y"] and d1.output == "y"


def test_graph_input_with_symbolic_batch_becomes_per_sample_float_spec():
    g = from_onnx_model(B.float_mlp_gemm((5, 3)), "m.onnx")
    assert g.inputs == ["x"]
    assert g.tensors["x"] == ir.TensorSpec("x", (5,), None)


def test_gemm_alpha_beta_and_untransposed_weight_match_onnxruntime():
    rng = np.random.default_rng(2)
    W, b = rng.normal(size=(4, 3)).astype(np.float32), rng.normal(size=3).astype(np.float32)
    model = B.make_model([helper.make_node("Gemm", ["x", "W", "b"], ["y"], name="g", alpha=0.5, beta=2.0)],
                         [B.batch_io("x", 4)], [B.batch_io("y", 3)], [B.init("W", W), B.init("b", b)])
    g = from_onnx_model(model, "m.onnx")
    (d,) = nodes_of(g, ir.Dense)
    # alpha, beta are powers of two here, so folding them into W and b is exact and the bound stays valid
    np.testing.assert_array_equal(d.weight, W.T * 0.5)
    np.testing.assert_array_equal(d.bias, b * 2.0)
    x = rng.normal(size=(50, 4)).astype(np.float32)
    err = np.abs(emulate.run(g, x)["y"] - B.ort_run(model, x))
    assert np.all(err <= float32_error_bound(g, x))


def test_matmul_without_bias_matches_onnxruntime():
    W = np.random.default_rng(3).normal(size=(5, 2)).astype(np.float32)
    model = B.make_model([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")],
                         [B.batch_io("x", 5)], [B.batch_io("y", 2)], [B.init("W", W)])
    g = from_onnx_model(model, "m.onnx")
    (d,) = g.nodes
    assert isinstance(d, ir.Dense) and d.bias is None
    x = np.random.default_rng(4).normal(size=(40, 5)).astype(np.float32)
    err = np.abs(emulate.run(g, x)["y"] - B.ort_run(model, x))
    assert np.all(err <= float32_error_bound(g, x))


def test_weights_from_constant_nodes():
    W = np.arange(6, dtype=np.float32).reshape(3, 2) / 4
    nodes = [helper.make_node("Constant", [], ["W"], name="cw", value=B.init("v", W)),
             helper.make_node("Constant", [], ["b"], name="cb", value_floats=[1.0, -1.0]),
             helper.make_node("MatMul", ["x", "W"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "b"], ["y"], name="add")]
    g = from_onnx_model(B.make_model(nodes, [B.batch_io("x", 3)], [B.batch_io("y", 2)], []), "m.onnx")
    (d,) = nodes_of(g, ir.Dense)
    np.testing.assert_array_equal(d.weight, W.T)
    np.testing.assert_array_equal(d.bias, [1.0, -1.0])


def test_load_onnx_reads_a_file_and_records_its_source(tmp_path):
    p = tmp_path / "mlp.onnx"
    onnx.save(B.float_mlp_gemm(), str(p))
    g = load_onnx(p)
    assert g.metadata["source"] == str(p) and g.metadata["frontend"] == "onnx"
    assert g.metadata["opsets"]["ai.onnx"] == B.OPSET


# -- (b) QDQ graphs --------------------------------------------------------------------------------------

def test_qdq_types_and_codes_follow_scales_and_integer_types():
    model = B.qdq_mlp()
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    g = from_onnx_model(model, "qdq.onnx")
    assert [n.OP for n in g.nodes] == ["Quantize", "Dense", "ReLU", "Dense"]
    q, d0, relu, d1 = g.nodes
    assert g.tensors[q.output].dtype == T(8, 4)  # int8, scale 2**-4
    # Dense -> Relu -> Q(uint8, 2**-4): both typed with Q's type (exact, see the frontend's docstring)
    assert g.tensors[d0.output].dtype == T(8, 4, signed=False)
    assert g.tensors[relu.output].dtype == T(8, 4, signed=False)
    assert g.tensors[d1.output].dtype == T(8, 5)  # int8, scale 2**-3
    assert d0.weight_type == T(8, 2)  # int8 weight, scale 2**-6
    np.testing.assert_array_equal(d0.weight, inits["W0_q"])
    assert d0.bias_type == T(32, 22)  # int32 bias at scale 2**-(4+6)
    np.testing.assert_array_equal(d0.bias, inits["b0_q"])
    # per-channel weight fracs (5, 6, 7, 5) share frac 7: codes shifted left by 7 - frac
    shift = np.array([2, 1, 0, 2])
    np.testing.assert_array_equal(d1.weight, inits["W1_q"].T.astype(np.int64) << shift[:, None])
    assert d1.weight_type.frac == 7 and d1.weight_type.width == 10
    np.testing.assert_array_equal(d1.bias, inits["b1_q"].astype(np.int64) << shift)
    assert d1.bias_type.frac == 4 + 7


@pytest.mark.parametrize("optimize", [False, True], ids=["ort-as-written", "ort-qdq-fused"])
def test_qdq_mlp_golden_equals_onnxruntime_bit_for_bit(optimize):
    model = B.qdq_mlp()
    g = infer_precision(from_onnx_model(model, "qdq.onnx"))
    assert_float32_exact(g)
    x = grid_inputs(8, 4)
    got = emulate.run_values(g, x)["y"]
    ref = B.ort_run(model, x, optimize=optimize).astype(np.float64)
    bad = np.argwhere(got != ref)
    assert bad.size == 0, f"first mismatch at {bad[0]}: golden {got[tuple(bad[0])]}, onnxruntime {ref[tuple(bad[0])]}"


def test_qdq_inputs_exercise_ties_and_saturation():
    """Guards the previous test's inputs: it only proves RND_CONV and SAT if ties and overflow occur."""
    x = grid_inputs(8, 4)
    scaled = x * 16
    assert np.any(scaled - np.floor(scaled) == 0.5)
    assert np.any(scaled > 127) and np.any(scaled < -128)


def test_qdq_add_of_two_activations_golden_equals_onnxruntime():
    model = B.qdq_residual()
    g = infer_precision(from_onnx_model(model, "res.onnx"))
    (add,) = nodes_of(g, ir.Add)
    assert g.tensors[add.output].dtype == T(8, 5)
    assert_float32_exact(g)
    x = grid_inputs(6, 4)
    np.testing.assert_array_equal(emulate.run_values(g, x)["y"], B.ort_run(model, x))


#: Float weights in units of their LSB (scale 2**-5): ties and values beyond int8, and the int8 codes
#: ONNX's QuantizeLinear gives them (round half to even, then saturate), worked out by hand.
WF_LSBS = np.array([[-200, 200, 0.5, 1.5, 2.5], [-0.5, -1.5, -2.5, 3.25, 100.75], [127.5, -128.5, 126.5, -127.5, 7]])
WF_CODES = np.array([[-128, 127, 0, 2, 2], [0, -2, -2, 3, 101], [127, -128, 126, -128, 7]])


def _single_qdq_layer(zp_dtype=np.uint8, zp: int = 128, w_float: bool = False) -> onnx.ModelProto:
    """x -> Q/DQ(given zero point, scale 2**-4) -> Gemm with weight W (int8 DQ, or float Q->DQ in graph)."""
    rng = np.random.default_rng(4)
    inits = [B.init("s", np.float32(1 / 16)), B.init("z", zp_dtype(zp)), B.init("ws", np.float32(1 / 32)),
             B.init("wz", np.int8(0))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="q_in"),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], name="dq_in")]
    if w_float:
        inits.append(B.init("Wf", (WF_LSBS / 32).astype(np.float32)))
        nodes += [helper.make_node("QuantizeLinear", ["Wf", "ws", "wz"], ["Wq"], name="q_w")]
    else:
        inits.append(B.init("Wq", rng.integers(-128, 128, size=(3, 5)).astype(np.int8)))
    nodes += [helper.make_node("DequantizeLinear", ["Wq", "ws", "wz"], ["W"], name="dq_w"),
              helper.make_node("Gemm", ["xd", "W"], ["y"], name="fc", transB=1)]
    return B.make_model(nodes, [B.batch_io("x", 5)], [B.batch_io("y", 3)], inits)


def test_uint8_with_zero_point_128_is_exactly_int8():
    model = _single_qdq_layer(np.uint8, 128)
    g = infer_precision(from_onnx_model(model, "zp.onnx"))
    assert g.tensors[g.nodes[0].output].dtype == T(8, 4)
    x = grid_inputs(5, 4)
    np.testing.assert_array_equal(emulate.run_values(g, x)["y"], B.ort_run(model, x))


def test_weights_quantized_inside_the_graph_match_onnxruntime():
    """Float weight -> QuantizeLinear -> DequantizeLinear: the frontend evaluates ONNX's rounding (half to
    even, saturation: the weights include ties at +-x.5 LSB and values beyond int8)."""
    model = _single_qdq_layer(np.int8, 0, w_float=True)
    g = infer_precision(from_onnx_model(model, "wq.onnx"))
    (d,) = nodes_of(g, ir.Dense)
    np.testing.assert_array_equal(d.weight, WF_CODES)
    x = grid_inputs(5, 4)
    np.testing.assert_array_equal(emulate.run_values(g, x)["y"], B.ort_run(model, x))


# -- (c) QONNX graphs --------------------------------------------------------------------------------------

@pytest.mark.parametrize("bits", [4, 8, 16])
def test_brevitas_style_mlp_golden_equals_qonnx_oracle(bits):
    model = B.brevitas_style_mlp(bits)
    x = B.qonnx_input(model)
    np.testing.assert_array_equal(golden(model, x), B.run_qonnx_reference(model, x))


def test_brevitas_style_mlp_types():
    g = from_onnx_model(B.brevitas_style_mlp(8), "brevitas.onnx")
    assert g.tensors[g.nodes[0].output].dtype == T(8, 3)  # signed input, scale 2**-5
    dense = nodes_of(g, ir.Dense)
    assert all(d.weight_type == T(8, 1, overflow=SYM) for d in dense)  # narrow: [-127, 127] * 2**-7
    assert all(np.abs(d.weight).max() <= 127 for d in dense)
    assert all(d.bias_type == T(32, 32 - 12) for d in dense[:1])
    hidden = [g.tensors[d.output].dtype for d in dense[:2]]
    assert hidden == [T(8, 3, signed=False)] * 2
    assert g.tensors["y"].dtype == T(8, 4)


def test_mixed_bits_matmul_form_with_float_bias_equals_oracle():
    """8-bit narrow input (SAT_SYM: saturates at -127), 4-bit narrow and 8-bit weights, unsigned and signed
    activations, MatMul + Add with a float bias that lies on the accumulator grid."""
    model = B.qonnx_mlp((10, 12, 6, 3), in_q=B.QSpec(8, 5, narrow=True),
                        weight_q=[B.QSpec(4, 3, narrow=True), B.QSpec(8, 6), B.QSpec(4, 2, narrow=True)],
                        act_q=[B.QSpec(8, 4, signed=False), B.QSpec(6, 3), B.QSpec(8, 4)],
                        bias_bits=None, seed=3, form="matmul")
    g = from_onnx_model(model, "mixed.onnx")
    assert g.tensors[g.nodes[0].output].dtype == T(8, 3, overflow=SYM)
    assert [d.weight_type for d in nodes_of(g, ir.Dense)] == [T(4, 1, overflow=SYM), T(8, 2), T(4, 2, overflow=SYM)]
    x = B.qonnx_input(model, seed=1)
    np.testing.assert_array_equal(golden(model, x), B.run_qonnx_reference(model, x))


@pytest.mark.parametrize("mode,rounding", [("ROUND", Rounding.RND_CONV), ("FLOOR", Rounding.TRN),
                                           ("ROUND_TO_ZERO", Rounding.TRN_ZERO), ("DOWN", Rounding.TRN_ZERO),
                                           ("HALF_UP", Rounding.RND_INF), ("HALF_DOWN", Rounding.RND_ZERO)])
def test_qonnx_rounding_modes_map_to_fixed_roundings_exactly(mode, rounding):
    q = B.QSpec(6, 2, rounding=mode)
    model = B.qonnx_mlp((4, 5), in_q=q, weight_q=[B.QSpec(5, 3, rounding=mode)], act_q=[B.QSpec(6, 1, rounding=mode)])
    g = from_onnx_model(model, "modes.onnx")
    assert g.tensors[g.nodes[0].output].dtype.rounding == rounding
    assert g.tensors["y"].dtype.rounding == rounding
    x = B.qonnx_input(model, seed=2)
    np.testing.assert_array_equal(golden(model, x), B.run_qonnx_reference(model, x))


def test_ceil_rounding_is_exact_on_weights():
    """CEIL has no ap_fixed mode, but weights are evaluated once by the frontend, so it is still exact."""
    model = B.qonnx_mlp((4, 3), in_q=B.QSpec(8, 4), weight_q=[B.QSpec(6, 4, rounding="CEIL")],
                        act_q=[B.QSpec(8, 2)])
    x = B.qonnx_input(model)
    np.testing.assert_array_equal(golden(model, x), B.run_qonnx_reference(model, x))


@pytest.mark.parametrize("domain", ["finn.custom_op.general", "onnx.brevitas"])
def test_older_quant_domains_without_opset_import_are_accepted(domain):
    model = B.brevitas_style_mlp(8)
    for n in model.graph.node:
        if n.op_type == "Quant":
            n.domain = domain
    del model.opset_import[1:]  # Brevitas exports sometimes omit the custom domain's import
    x = B.qonnx_input(model)
    np.testing.assert_array_equal(golden(model, x), B.run_qonnx_reference(model, x))


def test_oracle_rounding_matches_the_qonnx_spec_table():
    """The oracle is only as good as its reading of the spec: check it against quant_op.md's table."""
    values = [5.5, 2.5, 1.6, 1.1, 1.0, -1.0, -1.1, -1.6, -2.5, -5.5]
    table = {"ROUND": [6, 2, 2, 1, 1, -1, -1, -2, -2, -6], "CEIL": [6, 3, 2, 2, 1, -1, -1, -1, -2, -5],
             "FLOOR": [5, 2, 1, 1, 1, -1, -2, -2, -3, -6], "UP": [6, 3, 2, 2, 1, -1, -2, -2, -3, -6],
             "DOWN": [5, 2, 1, 1, 1, -1, -1, -1, -2, -5], "HALF_UP": [6, 3, 2, 1, 1, -1, -1, -2, -3, -6],
             "HALF_DOWN": [5, 2, 2, 1, 1, -1, -1, -2, -2, -5]}
    for mode, want in table.items():
        got = B.oracle_quant(np.array(values), 1.0, 0.0, 8, True, False, mode)
        np.testing.assert_array_equal(got, want, err_msg=mode)


# -- (d) bad input ---------------------------------------------------------------------------------------

def raises(model: onnx.ModelProto, *fragments: str, source: str = "bad.onnx", strict: bool = False) -> str:
    """Translate ``model`` (``strict``: as ``--strict`` does, refusing every approximation); assert an
    OnnxFrontendError mentioning the source and every fragment."""
    with pytest.raises(OnnxFrontendError) as info:
        from_onnx_model(model, source, QuantOptions(strict=True) if strict else None)
    msg = str(info.value)
    for f in (source, *fragments):
        assert f in msg, f"{f!r} missing from: {msg}"
    return msg


def test_missing_file(tmp_path):
    with pytest.raises(OnnxFrontendError, match="no such file.*expected an ONNX model"):
        load_onnx(tmp_path / "nope.onnx")


@pytest.mark.parametrize("content", ["truncated", "garbage"])
def test_corrupt_file_gives_a_clear_error_without_onnx_traceback(tmp_path, content):
    data = B.float_mlp_gemm().SerializeToString()
    p = tmp_path / "m.onnx"
    p.write_bytes(data[: len(data) // 2] if content == "truncated" else b"\x0fnot an onnx model at all")
    with pytest.raises(OnnxFrontendError) as info:
        load_onnx(p)
    assert str(p) in str(info.value) and "export it again" in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_empty_file_fails_the_checker(tmp_path):
    p = tmp_path / "empty.onnx"
    p.write_bytes(b"")
    with pytest.raises(OnnxFrontendError, match="onnx.checker rejects the model"):
        load_onnx(p)


def test_checker_failure_is_reported():
    model = B.float_mlp_gemm()
    model.graph.node[0].input[1] = "undefined_weight"
    raises(model, "onnx.checker rejects", "undefined_weight", "re-export")


def test_unsupported_op_names_node_op_and_supported_list():
    model = B.make_model([helper.make_node("Sin", ["x"], ["y"], name="act7")],
                         [B.batch_io("x", 3)], [B.batch_io("y", 3)], [])
    msg = raises(model, "node 'act7' (Sin)", "'Sin' is not supported")
    assert ", ".join(SUPPORTED_OPS) in msg and list(SUPPORTED_OPS) == sorted(SUPPORTED_OPS)


def test_bipolar_quant_is_rejected_clearly():
    model = B.make_model([helper.make_node("BipolarQuant", ["x", "s"], ["y"], name="bq", domain=B.QONNX_DOMAIN)],
                         [B.batch_io("x", 3)], [B.batch_io("y", 3)], [B.init("s", np.float32(1.0))], qonnx=True)
    raises(model, "node 'bq' (BipolarQuant)", "bitwidth >= 2")


def test_weight_shape_mismatch():
    W = np.ones((5, 2), np.float32)  # expects 5 input features; the graph input has 4
    model = B.make_model([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")],
                         [B.batch_io("x", 4)], [B.batch_io("y", 2)], [B.init("W", W)])
    raises(model, "node 'mm' (MatMul)", "4 features", "(*, 4)", "found (2, 5)")


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_initializer_is_named(bad):
    model = B.float_mlp_gemm()
    W = onnx.numpy_helper.to_array(model.graph.initializer[2]).copy()
    W[1, 2] = bad
    model.graph.initializer[2].CopyFrom(B.init(model.graph.initializer[2].name, W))
    raises(model, "initializer 'W1'", "NaN or Inf", "index (1, 2)")


def test_non_finite_constant_node_is_named():
    nodes = [helper.make_node("Constant", [], ["W"], name="cw", value=B.init("v", np.array([[np.inf]], np.float32))),
             helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")]
    raises(B.make_model(nodes, [B.batch_io("x", 1)], [B.batch_io("y", 1)], []), "constant 'W'", "NaN or Inf")


def test_old_opset_is_rejected_with_a_conversion_hint():
    model = B.make_model([helper.make_node("Relu", ["x"], ["y"], name="r")], [B.batch_io("x", 2)],
                         [B.batch_io("y", 2)], [], opset=9)
    raises(model, "opset 9", "supported range 11..", "onnx.version_converter.convert_version(model, 13)")


@pytest.mark.parametrize("where", ["activation", "weight"])
def test_qdq_non_power_of_two_scale_is_rejected(where):
    model = B.qdq_mlp()
    name = "in_s" if where == "activation" else "W0_s"
    t = next(t for t in model.graph.initializer if t.name == name)
    t.CopyFrom(B.init(name, np.float32(0.1)))
    node = "in_Q" if where == "activation" else "W0_DQ"
    raises(model, f"node '{node}'", "scale 0.1", "not a power of two", "power-of-two scales", "QONNX", strict=True)


def test_qonnx_non_power_of_two_scale_is_rejected():
    model = B.brevitas_style_mlp(8)
    t = next(t for t in model.graph.initializer if t.name == "quant_act0_scale")
    t.CopyFrom(B.init(t.name, np.float32(0.03)))
    raises(model, "node 'quant_act0' (Quant)", "not a power of two", strict=True)


def test_activation_zero_point_without_fixed_range_is_rejected():
    raises(_single_qdq_layer(np.int8, 3), "node 'q_in' (QuantizeLinear)", "zero point 3", "[-131, 124]",
           "zero point 0", strict=True)


def test_qonnx_unsigned_narrow_activation_is_rejected():
    model = B.qonnx_mlp((4, 3), in_q=B.QSpec(8, 4, signed=False, narrow=True), weight_q=[B.QSpec(8, 6)],
                        act_q=[B.QSpec(8, 4)])
    raises(model, "node 'quant_in' (Quant)", "[0, 254]", strict=True)


def test_qonnx_ceil_on_activation_is_rejected():
    model = B.qonnx_mlp((4, 3), in_q=B.QSpec(8, 4), weight_q=[B.QSpec(8, 6)], act_q=[B.QSpec(8, 4, rounding="CEIL")])
    raises(model, "node 'quant_act0' (Quant)", "'CEIL'", "no fixed-point", "ROUND")


def test_qonnx_signed_one_bit_is_rejected():
    model = B.qonnx_mlp((4, 3), in_q=B.QSpec(8, 4), weight_q=[B.QSpec(1, 0)], act_q=[B.QSpec(8, 4)])
    raises(model, "node 'quant_w0' (Quant)", "bipolar")


def test_gemm_trans_a_is_rejected():
    model = B.make_model([helper.make_node("Gemm", ["x", "W"], ["y"], name="g", transA=1)],
                         [B.batch_io("x", 2)], [B.batch_io("y", 2)], [B.init("W", np.eye(2, dtype=np.float32))])
    raises(model, "node 'g' (Gemm)", "transA=1", "expected transA=0")


def test_gemm_alpha_on_quantized_operands_is_rejected():
    model = _single_qdq_layer(np.int8, 0)
    next(n for n in model.graph.node if n.op_type == "Gemm").attribute.append(helper.make_attribute("alpha", 0.5))
    raises(model, "node 'fc' (Gemm)", "alpha=0.5", "expected 1.0")


def test_qdq_pair_with_different_parameters_is_rejected():
    model = B.qdq_mlp()
    dq = next(n for n in model.graph.node if n.name == "in_DQ")
    model.graph.initializer.append(B.init("other_s", np.float32(0.5)))
    dq.input[1] = "other_s"
    raises(model, "node 'in_DQ' (DequantizeLinear)", "[0.5]", "[0.0625]", "same parameters")


def test_float_bias_off_the_accumulator_grid_is_rejected():
    model = B.qonnx_mlp((4, 3), in_q=B.QSpec(8, 4), weight_q=[B.QSpec(8, 6)], act_q=[B.QSpec(8, 4)],
                        bias_bits=None)
    t = next(t for t in model.graph.initializer if t.name == "fc0_bias")
    t.CopyFrom(B.init(t.name, np.array([0.1, 0.0, 0.0], np.float32)))
    raises(model, "node 'fc0' (Gemm)", "not a multiple of 2**-10", "Quantize the bias", strict=True)


def test_float_weights_on_a_quantized_input_are_rejected():
    model = B.qonnx_mlp((4, 3), in_q=B.QSpec(8, 4), weight_q=[B.QSpec(8, 6)], act_q=[B.QSpec(8, 4)])
    gemm = next(n for n in model.graph.node if n.op_type == "Gemm")
    gemm.input[1] = "fc0_weight"  # bypass the weight's Quant
    raises(model, "node 'fc0' (Gemm)", "weight is float", "quantize the weight")


def test_per_channel_activation_scale_is_rejected():
    model = B.qonnx_mlp((4, 3), in_q=B.QSpec(8, 4), weight_q=[B.QSpec(8, 6)], act_q=[B.QSpec(8, 4)])
    t = next(t for t in model.graph.initializer if t.name == "quant_in_scale")
    t.CopyFrom(B.init(t.name, np.full((1, 4), 1 / 16, np.float32)))
    raises(model, "node 'quant_in' (Quant)", "per-channel", "per-tensor")


@pytest.mark.parametrize("shape,elem,fragment", [(["batch", "n"], TensorProto.FLOAT, "fixed sizes after the batch"),
                                                 (["batch", 4], TensorProto.INT8, "expected float32, found INT8")])
def test_unsupported_graph_inputs_are_rejected(shape, elem, fragment):
    io = [helper.make_tensor_value_info(name, elem, shape) for name in ("x", "y")]
    model = B.make_model([helper.make_node("Relu", ["x"], ["y"], name="r")], io[:1], io[1:], [])
    raises(model, "graph input 'x'", fragment)


def test_reshape_that_moves_elements_between_samples_is_rejected():
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="rs")]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])
    model = B.make_model(nodes, [B.batch_io("x", 4)], [y], [B.init("shape", np.array([-1, 8], np.int64))])
    raises(model, "node 'rs' (Reshape)", "[-1, 8]", "moves elements between samples")


def test_add_of_a_constant_away_from_a_matmul_is_rejected():
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="r"), helper.make_node("Add", ["r", "c"], ["y"], name="add")]
    model = B.make_model(nodes, [B.batch_io("x", 2)], [B.batch_io("y", 2)], [B.init("c", np.ones(2, np.float32))])
    raises(model, "node 'add' (Add)", "bias of the MatMul")
