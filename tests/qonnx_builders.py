"""Small ONNX models for tests, built with onnx.helper: float MLPs, QDQ MLPs, Brevitas-style QONNX MLPs.

Also a TEST ORACLE: :func:`run_qonnx_reference`, a numpy executor of QONNX graphs written from the QONNX
spec (docs/qonnx-custom-ops/quant_op.md), independent of bitforge's frontend and golden model. It computes
in float64 and checks, operation by operation, that float64 is exact (every value a small integer times a
power of two, every sum below 2**53 units of the finest grid), so its outputs are the exact real values.

Every quantizer here uses power-of-two scales (``scale = 2**-frac``) and zero point 0: the models bitforge
translates exactly.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13  # first opset with per-axis QuantizeLinear/DequantizeLinear
IR_VERSION = 8  # old enough for every onnxruntime this project meets
QONNX_DOMAIN = "qonnx.custom_op.general"


# -- plumbing -----------------------------------------------------------------------------------------------

def make_model(nodes, inputs, outputs, initializers, name: str = "g", opset: int = OPSET,
               qonnx: bool = False) -> onnx.ModelProto:
    opsets = [helper.make_opsetid("", opset)]
    if qonnx:
        opsets.append(helper.make_opsetid(QONNX_DOMAIN, 1))
    model = helper.make_model(helper.make_graph(nodes, name, inputs, outputs, initializers),
                              opset_imports=opsets, producer_name="bitforge-tests")
    model.ir_version = IR_VERSION
    return model


def batch_io(name: str, features: int, elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    """A (batch, features) tensor with a symbolic batch dimension."""
    return helper.make_tensor_value_info(name, elem, ["batch", features])


def init(name: str, array) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def ort_run(model: onnx.ModelProto, x: np.ndarray, optimize: bool = False) -> np.ndarray:
    """First output of ``model`` under onnxruntime (graph optimisations off unless ``optimize``)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x.astype(np.float32)})[0]


# -- float models ---------------------------------------------------------------------------------------

def float_mlp(path, w1=None, op2: str = "Relu", nan: bool = False):
    """A float ONNX MLP 4 -> H -> 2 (MatMul, ``op2``, MatMul) saved at ``path``: the CLI tests' small model. ``w1``
    (4 x H) replaces the first layer's seeded weights; ``nan`` plants a NaN weight."""
    rng = np.random.default_rng(0)
    w1 = rng.normal(size=(4, 3)).astype(np.float32) if w1 is None else w1
    if nan:
        w1 = w1.copy()
        w1[0, 0] = np.nan
    w2 = rng.normal(size=(w1.shape[1], 2)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
             helper.make_node(op2, ["h"], ["r"], name="act1"),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name="mm2")]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])],
                              [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def float_mlp_gemm(sizes: Sequence[int] = (6, 12, 4), seed: int = 0) -> onnx.ModelProto:
    """Gemm(transB=1) + Relu layers, as torch.onnx exports nn.Linear on 2-D inputs; no Relu after the last."""
    rng = np.random.default_rng(seed)
    nodes, inits, prev = [], [], "x"
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        inits += [init(f"W{i}", rng.normal(size=(b, a)).astype(np.float32)),
                  init(f"b{i}", rng.normal(size=b).astype(np.float32))]
        out = "y" if i == len(sizes) - 2 else f"g{i}"
        nodes.append(helper.make_node("Gemm", [prev, f"W{i}", f"b{i}"], [out], name=f"fc{i}", transB=1))
        if out != "y":
            nodes.append(helper.make_node("Relu", [out], [f"r{i}"], name=f"relu{i}"))
            prev = f"r{i}"
    return make_model(nodes, [batch_io("x", sizes[0])], [batch_io("y", sizes[-1])], inits, "float_gemm")


def float_mlp_matmul(sizes: Sequence[int] = (6, 12, 4), seed: int = 1) -> onnx.ModelProto:
    """MatMul + Add(bias) + Relu layers, with the no-op Identity/Flatten/Reshape exporters leave behind."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Identity", ["x"], ["x_id"], name="id_in"),
             helper.make_node("Flatten", ["x_id"], ["x_flat"], name="flatten", axis=1)]
    inits, prev = [init("shape", np.array([-1, sizes[0]], np.int64))], "x_flat"
    nodes.append(helper.make_node("Reshape", [prev, "shape"], ["x_rs"], name="reshape"))
    prev = "x_rs"
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        inits += [init(f"W{i}", rng.normal(size=(a, b)).astype(np.float32)),
                  init(f"b{i}", rng.normal(size=b).astype(np.float32))]
        out = "y" if i == len(sizes) - 2 else f"a{i}"
        nodes += [helper.make_node("MatMul", [prev, f"W{i}"], [f"m{i}"], name=f"mm{i}"),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [out], name=f"bias{i}")]
        if out != "y":
            nodes.append(helper.make_node("Relu", [out], [f"r{i}"], name=f"relu{i}"))
            prev = f"r{i}"
    return make_model(nodes, [batch_io("x", sizes[0])], [batch_io("y", sizes[-1])], inits, "float_matmul")


# -- QDQ models (onnxruntime quantizer layout) ----------------------------------------------------------------

@dataclass(frozen=True)
class QDQLayer:
    """One Dense layer of a QDQ MLP: weight codes int8 with per-output-channel fracs (scale 2**-frac)."""

    w_fracs: tuple[int, ...]
    out_frac: int
    out_signed: bool = True
    relu: bool = True
    form: str = "gemm"  # "gemm" (Gemm with int32 bias DQ) or "matmul" (MatMul + Add of int32 bias DQ)


def _qdq_pair(nodes, inits, src: str, name: str, frac: int, signed: bool) -> str:
    """Q -> DQ on an activation, zero point 0 of int8/uint8, scale 2**-frac."""
    inits += [init(f"{name}_s", np.float32(2.0 ** -frac)), init(f"{name}_z", np.int8(0) if signed else np.uint8(0))]
    nodes += [helper.make_node("QuantizeLinear", [src, f"{name}_s", f"{name}_z"], [f"{name}_q"], name=f"{name}_Q"),
              helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_z"], [f"{name}_dq"],
                               name=f"{name}_DQ")]
    return f"{name}_dq"


def qdq_mlp(sizes: Sequence[int] = (8, 16, 4), in_frac: int = 4,
            layers: Sequence[QDQLayer] = (QDQLayer((6,), 4, out_signed=False),
                                          QDQLayer((5, 6, 7, 5), 3, relu=False, form="matmul")),
            seed: int = 0, bias_bound: int = 1 << 9) -> onnx.ModelProto:
    """x -> Q/DQ(int8) -> per layer: Gemm or MatMul+Add with DequantizeLinear'd int8 weights (per-tensor or
    per-channel) and int32 biases (scale = scale_x * scale_w, as onnxruntime writes them) -> [Relu] -> Q/DQ.

    Weight codes are drawn uniformly from int8; bias codes from [-bias_bound, bias_bound).
    """
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    prev, x_frac = _qdq_pair(nodes, inits, "x", "in", in_frac, True), in_frac
    for i, (lay, (a, b)) in enumerate(zip(layers, zip(sizes[:-1], sizes[1:]))):
        fr = np.array(lay.w_fracs)
        w = rng.integers(-128, 128, size=(b, a)).astype(np.int8)  # (out, in) codes
        bq = rng.integers(-bias_bound, bias_bound, size=b).astype(np.int32)
        w_scale = (2.0 ** -fr).astype(np.float32)
        b_scale = (2.0 ** -(x_frac + fr)).astype(np.float32)
        per_channel = w_scale.size > 1
        w_init = w if lay.form == "gemm" else w.T.copy()  # Gemm transB=1 takes (out, in); MatMul takes (in, out)
        axis = 0 if lay.form == "gemm" else 1
        inits += [init(f"W{i}_q", w_init), init(f"W{i}_s", w_scale if per_channel else w_scale[0]),
                  init(f"W{i}_z", np.zeros(b, np.int8) if per_channel else np.int8(0)),
                  init(f"b{i}_q", bq), init(f"b{i}_s", b_scale if per_channel else b_scale[0]),
                  init(f"b{i}_z", np.zeros(b, np.int32) if per_channel else np.int32(0))]
        nodes += [helper.make_node("DequantizeLinear", [f"W{i}_q", f"W{i}_s", f"W{i}_z"], [f"W{i}"],
                                   name=f"W{i}_DQ", axis=axis),
                  helper.make_node("DequantizeLinear", [f"b{i}_q", f"b{i}_s", f"b{i}_z"], [f"b{i}"],
                                   name=f"b{i}_DQ", axis=0)]
        if lay.form == "gemm":
            nodes.append(helper.make_node("Gemm", [prev, f"W{i}", f"b{i}"], [f"acc{i}"], name=f"fc{i}", transB=1))
        else:
            nodes += [helper.make_node("MatMul", [prev, f"W{i}"], [f"mm{i}"], name=f"fc{i}"),
                      helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"acc{i}"], name=f"bias{i}")]
        pre = f"acc{i}"
        if lay.relu:
            nodes.append(helper.make_node("Relu", [pre], [f"relu{i}"], name=f"relu{i}"))
            pre = f"relu{i}"
        prev, x_frac = _qdq_pair(nodes, inits, pre, f"h{i}", lay.out_frac, lay.out_signed), lay.out_frac
    nodes.append(helper.make_node("Identity", [prev], ["y"], name="out"))
    return make_model(nodes, [batch_io("x", sizes[0])], [batch_io("y", sizes[-1])], inits, "qdq_mlp")


def qdq_residual(features: int = 6, frac: int = 4, w_frac: int = 6, seed: int = 0) -> onnx.ModelProto:
    """Add of two quantized activations: y = Q(x) + Q(Relu(Gemm(Q(x)))), then Q/DQ."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    a = _qdq_pair(nodes, inits, "x", "in", frac, True)
    inits += [init("W_q", rng.integers(-128, 128, size=(features, features)).astype(np.int8)),
              init("W_s", np.float32(2.0 ** -w_frac)), init("W_z", np.int8(0))]
    nodes += [helper.make_node("DequantizeLinear", ["W_q", "W_s", "W_z"], ["W"], name="W_DQ"),
              helper.make_node("Gemm", [a, "W"], ["acc"], name="fc", transB=1),
              helper.make_node("Relu", ["acc"], ["r"], name="relu")]
    h = _qdq_pair(nodes, inits, "r", "h", frac, True)
    nodes.append(helper.make_node("Add", [a, h], ["s"], name="skip"))
    y = _qdq_pair(nodes, inits, "s", "out", frac - 1, True)
    nodes.append(helper.make_node("Identity", [y], ["y"], name="out"))
    return make_model(nodes, [batch_io("x", features)], [batch_io("y", features)], inits, "qdq_residual")


# -- QONNX models (Brevitas export layout) -------------------------------------------------------------------

@dataclass(frozen=True)
class QSpec:
    """A QONNX Quant node's parameters with a power-of-two scale 2**-frac and zero point 0."""

    bits: int
    frac: int
    signed: bool = True
    narrow: bool = False
    rounding: str = "ROUND"

    @property
    def scale(self) -> float:
        return 2.0 ** -self.frac

    @property
    def min_int(self) -> int:
        return (-(1 << (self.bits - 1)) + int(self.narrow)) if self.signed else 0

    @property
    def max_int(self) -> int:
        return (1 << (self.bits - 1)) - 1 if self.signed else (1 << self.bits) - 1 - int(self.narrow)


def quant_node(nodes, inits, src: str, name: str, q: QSpec, domain: str = QONNX_DOMAIN) -> str:
    inits += [init(f"{name}_scale", np.float32(q.scale)), init(f"{name}_zeropt", np.float32(0.0)),
              init(f"{name}_bitwidth", np.float32(q.bits))]
    nodes.append(helper.make_node("Quant", [src, f"{name}_scale", f"{name}_zeropt", f"{name}_bitwidth"],
                                  [f"{name}_out"], name=name, domain=domain, signed=int(q.signed),
                                  narrow=int(q.narrow), rounding_mode=q.rounding))
    return f"{name}_out"


def _float_weights(rng, shape, q: QSpec) -> np.ndarray:
    """Float weights spread over (and a little beyond) the quantizer's range, with some exact half-LSB ties
    so that the rounding mode matters."""
    w = rng.uniform(q.min_int - 1.5, q.max_int + 1.5, size=shape) * q.scale
    ties = rng.random(shape) < 0.2
    w = np.where(ties, (np.floor(w / q.scale) + 0.5) * q.scale, w)
    return w.astype(np.float32)


def qonnx_mlp(sizes: Sequence[int], in_q: QSpec, weight_q: Sequence[QSpec], act_q: Sequence[QSpec],
              bias_bits: Optional[int] = 32, seed: int = 0, form: str = "gemm") -> onnx.ModelProto:
    """Brevitas-style QONNX MLP: Quant on the input, on every weight and bias initializer, and after every
    layer (after its Relu, except the last layer, which has none).

    Biases are quantized with scale = scale_x * scale_w (Brevitas Int32Bias) when ``bias_bits`` is set,
    else left float. ``form``: "gemm" (Gemm transB=1, as torch exports nn.Linear) or "matmul" (MatMul + Add).
    """
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    prev, xq = quant_node(nodes, inits, "x", "quant_in", in_q), in_q
    n_layers = len(sizes) - 1
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        wq, aq = weight_q[i], act_q[i]
        w = _float_weights(rng, (b, a), wq)  # (out, in)
        inits.append(init(f"fc{i}_weight", w if form == "gemm" else w.T.copy()))
        wn = quant_node(nodes, inits, f"fc{i}_weight", f"quant_w{i}", wq)
        bias_frac = xq.frac + wq.frac
        if bias_bits:
            inits.append(init(f"fc{i}_bias", rng.uniform(-0.5, 0.5, size=b).astype(np.float32)))
            bn = quant_node(nodes, inits, f"fc{i}_bias", f"quant_b{i}", QSpec(bias_bits, bias_frac))
        else:  # a float bias already on the accumulator grid, so it still adds exactly
            codes = rng.integers(-(1 << 8), 1 << 8, size=b)
            inits.append(init(f"fc{i}_bias", np.ldexp(codes, -bias_frac).astype(np.float32)))
            bn = f"fc{i}_bias"
        if form == "gemm":
            nodes.append(helper.make_node("Gemm", [prev, wn, bn], [f"fc{i}_out"], name=f"fc{i}", transB=1))
        else:
            nodes += [helper.make_node("MatMul", [prev, wn], [f"fc{i}_mm"], name=f"fc{i}"),
                      helper.make_node("Add", [f"fc{i}_mm", bn], [f"fc{i}_out"], name=f"fc{i}_bias_add")]
        pre = f"fc{i}_out"
        if i < n_layers - 1:
            nodes.append(helper.make_node("Relu", [pre], [f"relu{i}"], name=f"relu{i}"))
            pre = f"relu{i}"
        prev, xq = quant_node(nodes, inits, pre, f"quant_act{i}", aq), aq
    nodes.append(helper.make_node("Identity", [prev], ["y"], name="output"))
    return make_model(nodes, [batch_io("x", sizes[0])], [batch_io("y", sizes[-1])], inits, "qonnx_mlp",
                      qonnx=True)


def brevitas_style_mlp(bits: int = 8, seed: int = 0) -> onnx.ModelProto:
    """A 16-32-16-5 MLP as Brevitas exports it to QONNX with power-of-two (FixedPoint) quantizers at ``bits``
    bits (2..16): signed input (range +-4), signed narrow weights (range +-1), unsigned hidden activations
    after Relu (range [0, 8)), signed output (range +-8), 32-bit biases at scale_x * scale_w, rounding ROUND.
    """
    if not 2 <= bits <= 16:
        raise ValueError(f"bits must be in 2..16, got {bits}")
    w = QSpec(bits, bits - 1, signed=True, narrow=True)
    return qonnx_mlp((16, 32, 16, 5), in_q=QSpec(bits, bits - 3), weight_q=[w, w, w],
                     act_q=[QSpec(bits, bits - 3, signed=False)] * 2 + [QSpec(bits, bits - 4)], seed=seed)


def qonnx_cnn(spatial: int = 2, seed: int = 0) -> onnx.ModelProto:
    """Brevitas-style QONNX CNN with power-of-two quantizers on a (2, 8, 8) image (``spatial`` 2) or a (2, 16)
    sequence (1): Quant(x) -> Conv 3, pads 1, per-channel weight scales, 16-bit bias -> Relu -> Quant(unsigned)
    -> MaxPool 2 -> Conv 3, stride 2, pads 1, group 2 -> Relu -> Quant -> AveragePool 2 -> Flatten -> Gemm ->
    Quant."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    size = (8, 8) if spatial == 2 else (16,)
    in_q = QSpec(8, 5)
    prev = quant_node(nodes, inits, "x", "quant_in", in_q)

    def conv(i: int, src: str, c_in: int, fracs, group: int, stride: int, bias_frac: int) -> str:
        k = (3,) * spatial
        w = np.concatenate([_float_weights(rng, (1, c_in // group, *k), QSpec(6, f, narrow=True)) for f in fracs])
        inits.append(init(f"conv{i}_weight", w))
        scale = np.array([2.0 ** -f for f in fracs], np.float32).reshape((-1,) + (1,) * (spatial + 1))
        inits.extend([init(f"quant_w{i}_scale", scale), init(f"quant_w{i}_zeropt", np.float32(0.0)),
                      init(f"quant_w{i}_bitwidth", np.float32(6))])
        nodes.append(helper.make_node("Quant", [f"conv{i}_weight", f"quant_w{i}_scale", f"quant_w{i}_zeropt",
                                                f"quant_w{i}_bitwidth"], [f"quant_w{i}_out"], name=f"quant_w{i}",
                                      domain=QONNX_DOMAIN, signed=1, narrow=1, rounding_mode="ROUND"))
        inits.append(init(f"conv{i}_bias", rng.uniform(-0.5, 0.5, size=len(fracs)).astype(np.float32)))
        bn = quant_node(nodes, inits, f"conv{i}_bias", f"quant_b{i}", QSpec(16, bias_frac))
        nodes.append(helper.make_node("Conv", [src, f"quant_w{i}_out", bn], [f"conv{i}_out"], name=f"conv{i}",
                                      kernel_shape=list(k), pads=[1] * 2 * spatial, strides=[stride] * spatial,
                                      group=group))
        nodes.append(helper.make_node("Relu", [f"conv{i}_out"], [f"relu{i}"], name=f"relu{i}"))
        return quant_node(nodes, inits, f"relu{i}", f"quant_act{i}", QSpec(8, 4, signed=False))

    prev = conv(0, prev, 2, (6, 7, 6, 5), 1, 1, 8)
    nodes.append(helper.make_node("MaxPool", [prev], ["pool0"], name="pool0", kernel_shape=[2] * spatial,
                                  strides=[2] * spatial))
    prev = conv(1, "pool0", 4, (5, 6, 6, 7), 2, 2, 9)
    nodes.append(helper.make_node("AveragePool", [prev], ["pool1"], name="pool1", kernel_shape=[2] * spatial,
                                  strides=[2] * spatial))
    nodes.append(helper.make_node("Flatten", ["pool1"], ["flat"], name="flatten", axis=1))
    feats = 4 * (1 if spatial == 2 else 2)
    w = _float_weights(rng, (3, feats), QSpec(8, 6))
    inits.append(init("fc_weight", w))
    wn = quant_node(nodes, inits, "fc_weight", "quant_fc_w", QSpec(8, 6))
    inits.append(init("fc_bias", rng.uniform(-0.5, 0.5, size=3).astype(np.float32)))
    bn = quant_node(nodes, inits, "fc_bias", "quant_fc_b", QSpec(16, 10))
    nodes.append(helper.make_node("Gemm", ["flat", wn, bn], ["fc_out"], name="fc", transB=1))
    prev = quant_node(nodes, inits, "fc_out", "quant_out", QSpec(8, 4))
    nodes.append(helper.make_node("Identity", [prev], ["y"], name="output"))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2, *size])
    return make_model(nodes, [x], [batch_io("y", 3)], inits, f"qonnx_cnn{spatial}d", qonnx=True)


def qonnx_input(model: onnx.ModelProto, n: int = 256, seed: int = 0) -> np.ndarray:
    """Inputs for a QONNX model: a grid twice as fine as the input quantizer's (so exact ties occur), spanning
    1.5x its range (so saturation occurs)."""
    q = next(n_ for n_ in model.graph.node if n_.op_type == "Quant" and n_.input[0] == model.graph.input[0].name)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    scale, bits = float(inits[q.input[1]]), int(inits[q.input[3]])
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim[1:]]
    half_range = 1 << bits  # codes of the doubled grid
    rng = np.random.default_rng(seed)
    codes = rng.integers(-int(1.5 * half_range), int(1.5 * half_range), size=(n, *shape))
    return (codes * (scale / 2)).astype(np.float32)


# -- TEST ORACLE: QONNX reference executor -------------------------------------------------------------------

#: The spec's rounding table (quant_op.md), written as numpy functions; ROUND_TO_ZERO is Brevitas' DOWN.
ORACLE_ROUNDING = {
    "ROUND": np.round,  # half to even
    "HALF_EVEN": np.round,
    "CEIL": np.ceil,
    "FLOOR": np.floor,
    "UP": lambda v: np.sign(v) * np.ceil(np.abs(v)),
    "DOWN": np.trunc,
    "ROUND_TO_ZERO": np.trunc,
    "HALF_UP": lambda v: np.sign(v) * np.floor(np.abs(v) + 0.5),
    "HALF_DOWN": lambda v: np.sign(v) * np.ceil(np.abs(v) - 0.5),
}


def oracle_quant(x, scale, zeropt, bitwidth, signed: bool, narrow: bool, rounding_mode: str) -> np.ndarray:
    """The QONNX spec's Quant, step by step: scale, add zero point, clamp, round, rescale (float64)."""
    b = int(bitwidth)
    lo = (-(2 ** (b - 1)) + (1 if narrow else 0)) if signed else 0
    hi = (2 ** (b - 1) - 1) if signed else (2 ** b - 1 - (1 if narrow else 0))
    y = np.asarray(x, np.float64) / np.float64(scale) + np.float64(zeropt)
    y = np.where(y > hi, hi, np.where(y < lo, lo, y))
    y = ORACLE_ROUNDING[rounding_mode.upper()](y)
    return (y - zeropt) * np.float64(scale)


def _grid_exponent(a: np.ndarray) -> int:
    """Smallest k >= 0 with a * 2**k integral (the array's finest binary grid)."""
    for k in range(0, 200):
        if np.all(np.ldexp(a, k) == np.round(np.ldexp(a, k))):
            return k
    raise AssertionError("oracle: value not on any binary grid")


def _exact_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b in float64, after checking every partial sum is an integer below 2**53 on the common grid."""
    ka, kb = _grid_exponent(a), _grid_exponent(b)
    ia, ib = np.ldexp(a, ka), np.ldexp(b, kb)
    assert float((np.abs(ia) @ np.abs(ib)).max(initial=0)) < 2.0 ** 53, "oracle: float64 would round"
    return np.ldexp(ia @ ib, -(ka + kb))


def _exact_add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    k = max(_grid_exponent(a), _grid_exponent(b))
    assert float(np.abs(np.ldexp(a, k)).max(initial=0) + np.abs(np.ldexp(b, k)).max(initial=0)) < 2.0 ** 53
    return a + b


def _oracle_windows(x: np.ndarray, kernel, strides, pads, dilations, pad_value: float):
    """Yield (output index tuple, window values (N, C, taps)) of a 1-D/2-D window op, straight from the ONNX
    definition: pad the input, then slice with the stride and dilation (no shared geometry code with bitforge)."""
    nd = len(kernel)
    width = [(0, 0), (0, 0)] + [(pads[a], pads[nd + a]) for a in range(nd)]
    xp = np.pad(x, width, constant_values=pad_value)
    out = [(xp.shape[2 + a] - dilations[a] * (kernel[a] - 1) - 1) // strides[a] + 1 for a in range(nd)]
    for pos in np.ndindex(*out):
        taps = []
        for k in np.ndindex(*kernel):
            idx = tuple(pos[a] * strides[a] + k[a] * dilations[a] for a in range(nd))
            taps.append(xp[(slice(None), slice(None)) + idx])
        yield pos, out, np.stack(taps, axis=-1)


def _oracle_conv(x, w, b, at) -> np.ndarray:
    """ONNX Conv (explicit pads, groups) computed exactly window by window."""
    nd = w.ndim - 2
    assert at.get("auto_pad", b"NOTSET") in (b"NOTSET", "NOTSET")
    strides, dil = at.get("strides", [1] * nd), at.get("dilations", [1] * nd)
    pads, groups = at.get("pads", [0] * 2 * nd), at.get("group", 1)
    cg, og = w.shape[1], w.shape[0] // groups
    result = None
    for pos, out, win in _oracle_windows(x, w.shape[2:], strides, pads, dil, 0.0):
        if result is None:
            result = np.zeros((len(x), w.shape[0], *out))
        for g in range(groups):
            xs = win[:, g * cg:(g + 1) * cg].reshape(len(x), -1)
            ws = w[g * og:(g + 1) * og].reshape(og, -1)
            y = _exact_matmul(xs, ws.T)
            if b is not None:
                y = _exact_add(y, np.broadcast_to(b[g * og:(g + 1) * og], y.shape))
            result[(slice(None), slice(g * og, (g + 1) * og)) + pos] = y
    return result


def _oracle_pool(x, at, op: str) -> np.ndarray:
    """ONNX MaxPool / AveragePool (floor mode); an average only where it is exact (a power-of-two divisor)."""
    kernel = at["kernel_shape"]
    nd = len(kernel)
    assert not at.get("ceil_mode", 0)
    strides, pads = at.get("strides", [1] * nd), at.get("pads", [0] * 2 * nd)
    result = None
    pad = -np.inf if op == "MaxPool" else np.nan
    for pos, out, win in _oracle_windows(x, kernel, strides, pads, [1] * nd, pad):
        if result is None:
            result = np.zeros((*x.shape[:2], *out))
        if op == "MaxPool":
            v = win.max(axis=-1)
        else:
            real = ~np.isnan(win)
            count = win.shape[-1] if at.get("count_include_pad", 0) else int(real[0, 0].sum())
            assert count & (count - 1) == 0, "oracle: only power-of-two divisors are exact"
            v = _exact_sum(np.where(real, win, 0.0)) / count
        result[(slice(None), slice(None)) + pos] = v
    return result


def _exact_sum(a: np.ndarray) -> np.ndarray:
    k = _grid_exponent(a)
    assert float(np.abs(np.ldexp(a, k)).sum(axis=-1).max(initial=0)) < 2.0 ** 53
    return a.sum(axis=-1)


def run_qonnx_reference(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """TEST ORACLE: run a QONNX MLP or CNN (Quant, Gemm, MatMul, Add, Relu, Identity, Conv, MaxPool,
    AveragePool, Flatten) exactly; returns the first output as float64 real values."""
    env = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    env[model.graph.input[0].name] = np.asarray(x, np.float64)
    for n in model.graph.node:
        at = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        ins = [env[i] for i in n.input if i]
        if n.op_type == "Quant":
            mode = at.get("rounding_mode", b"ROUND")
            out = oracle_quant(*ins, bool(at.get("signed", 1)), bool(at.get("narrow", 0)),
                               mode.decode() if isinstance(mode, bytes) else mode)
        elif n.op_type == "Gemm":
            assert at.get("alpha", 1.0) == 1.0 and at.get("beta", 1.0) == 1.0 and not at.get("transA", 0)
            w = ins[1].T if at.get("transB", 0) else ins[1]
            out = _exact_matmul(ins[0], w)
            if len(ins) > 2:
                out = _exact_add(out, np.broadcast_to(ins[2], out.shape))
        elif n.op_type == "MatMul":
            out = _exact_matmul(ins[0], ins[1])
        elif n.op_type == "Add":
            out = _exact_add(ins[0], np.broadcast_to(ins[1], ins[0].shape) if ins[1].ndim < ins[0].ndim else ins[1])
        elif n.op_type == "Relu":
            out = np.maximum(ins[0], 0.0)
        elif n.op_type == "Identity":
            out = ins[0]
        elif n.op_type == "Conv":
            out = _oracle_conv(ins[0], ins[1], ins[2] if len(ins) > 2 else None, at)
        elif n.op_type in ("MaxPool", "AveragePool"):
            out = _oracle_pool(ins[0], at, n.op_type)
        elif n.op_type == "Flatten":
            assert at.get("axis", 1) == 1
            out = ins[0].reshape(len(ins[0]), -1)
        else:
            raise NotImplementedError(f"oracle: op {n.op_type}")
        env[n.output[0]] = out
    return env[model.graph.output[0].name]
