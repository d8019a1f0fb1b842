"""ONNX frontend, the ops of the models people bring (issue 18): Conv, BatchNorm, pooling, the activations,
Softmax, ArgMax and data movement, float and quantized, and the first-contact error that lists every node bitforge
cannot translate.

* Float: each op comes from a small PyTorch module exported with ``torch.onnx.export(..., dynamo=False)``; the
  IR's float golden model (``emulate.run``) must equal onnxruntime on the original ONNX within
  ``RTOL``/``ATOL`` (float32: the two sum in different orders, and the tables' functions are evaluated in
  float64 by bitforge and in float32 by onnxruntime).
* Quantized: a QONNX CNN (power-of-two scales) against the numpy oracle in ``qonnx_builders`` that executes the
  QONNX graph exactly, and a QDQ CNN against onnxruntime on the QDQ model, both bit for bit.
"""
from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper
from torch import nn

import qonnx_builders as B
from bitforge.toolchain import emulate, ir
from bitforge.toolchain.fixed import parse_type
from bitforge.toolchain.frontends.onnx_frontend import (
    QuantOptions, SUPPORTED_OPS, OnnxFrontendError, from_onnx_model,
)
from bitforge.toolchain.frontends.onnx_layers import explicit_pads
from bitforge.toolchain.passes.precision import infer_precision

#: Float tolerance of golden model vs onnxruntime: float32 sums in another order differ by a few units in the
#: last place of the largest partial sum; 1e-5 relative (plus 1e-5 absolute for results near 0) covers the
#: models here (fan-in <= 64) with a wide margin, and is 10x tighter than verify.compare's FLOAT_RTOL.
RTOL, ATOL = 1e-5, 1e-5


def export(module: nn.Module, *shape: int, opset: int = 17, **kw) -> onnx.ModelProto:
    """``module`` (eval mode) exported with the legacy TorchScript exporter, symbolic batch."""
    torch.manual_seed(0)
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), (torch.randn(2, *shape),), buf, dynamo=False, opset_version=opset,
                          input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, **kw)
    return onnx.load_from_string(buf.getvalue())


def inputs(*shape: int, n: int = 64, seed: int = 1, scale: float = 2.0) -> np.ndarray:
    return (np.random.default_rng(seed).normal(size=(n, *shape)) * scale).astype(np.float32)


def check_float(model: onnx.ModelProto, x: np.ndarray) -> ir.Graph:
    """Translate; assert the float golden model equals onnxruntime within the float tolerance."""
    g = from_onnx_model(model, "model.onnx")
    assert all(g.tensors[t].is_float for t in g.tensors)
    got = emulate.run(g, x)[g.outputs[0]]
    ref = B.ort_run(model, x)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=RTOL, atol=ATOL)
    return g


def out_info(name: str, rank: int) -> onnx.ValueInfoProto:
    """A float graph output of ``rank`` axes with symbolic sizes (the translation works the sizes out)."""
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch"] + [f"{name}{i}" for i in range(rank - 1)])


def ops(g: ir.Graph) -> list[str]:
    return [n.OP for n in g.nodes]


def randomize_bn(m: nn.Module) -> nn.Module:
    """BatchNorm layers with non-trivial statistics and affine parameters (fresh ones are the identity)."""
    gen = torch.Generator().manual_seed(3)
    for bn in m.modules():
        if isinstance(bn, nn.modules.batchnorm._BatchNorm):
            c = bn.num_features
            bn.running_mean.copy_(torch.randn(c, generator=gen))
            bn.running_var.copy_(torch.rand(c, generator=gen) + 0.5)
            bn.weight.data.copy_(torch.randn(c, generator=gen))
            bn.bias.data.copy_(torch.randn(c, generator=gen))
    return m


class Lambda(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


# -- one op at a time, float ------------------------------------------------------------------------------------

FLOAT_CASES = {
    "conv1d_stride_pad_dilation": (lambda: nn.Conv1d(3, 4, 5, stride=2, padding=2, dilation=2), (3, 17), ["Conv"]),
    "conv2d_groups_asymmetric": (lambda: nn.Conv2d(4, 6, (3, 2), stride=(2, 1), padding=(1, 0), groups=2),
                                 (4, 7, 6), ["Conv"]),
    "conv2d_depthwise_no_bias": (lambda: nn.Conv2d(3, 3, 3, padding=1, groups=3, bias=False), (3, 5, 5), ["Conv"]),
    "batchnorm_features": (lambda: randomize_bn(nn.BatchNorm1d(5)), (5,), ["ScaleShift"]),
    "batchnorm_2d": (lambda: randomize_bn(nn.BatchNorm2d(3)), (3, 4, 4), ["ScaleShift"]),
    "maxpool1d_pad": (lambda: nn.MaxPool1d(3, stride=2, padding=1), (2, 9), ["Pool"]),
    "maxpool2d": (lambda: nn.MaxPool2d(2), (3, 6, 6), ["Pool"]),
    "avgpool2d_exclude_pad": (lambda: nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False), (2, 7, 7),
                              ["Pool"]),
    "avgpool2d_include_pad": (lambda: nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=True), (2, 7, 7),
                              ["Pool"]),
    "avgpool1d": (lambda: nn.AvgPool1d(2), (3, 8), ["Pool"]),
    "global_avg": (lambda: nn.AdaptiveAvgPool2d(1), (3, 5, 4), ["Pool"]),
    "global_max": (lambda: nn.AdaptiveMaxPool2d(1), (3, 5, 4), ["Pool"]),
    "flatten": (lambda: nn.Flatten(), (3, 4, 2), ["Reshape"]),
    "view_batch_minus_one": (lambda: Lambda(lambda x: x.view(x.size(0), -1)), (3, 4), ["Reshape"]),
    "unsqueeze_squeeze": (lambda: Lambda(lambda x: torch.relu(x.unsqueeze(1)).squeeze(1)), (5,),
                          ["Reshape", "ReLU", "Reshape"]),
    "transpose": (lambda: Lambda(lambda x: x.transpose(1, 2)), (3, 4), ["Transpose"]),
    "concat_three": (lambda: Lambda(lambda x: torch.cat([x, torch.relu(x), x.transpose(1, 2)], dim=1)), (3, 3),
                     ["ReLU", "Transpose", "Concat", "Concat"]),
    "leaky_relu": (lambda: nn.LeakyReLU(0.1), (4,), ["LeakyReLU"]),
    "prelu_per_channel": (lambda: nn.PReLU(3, init=0.3), (3, 4, 4), ["LeakyReLU"]),
    "prelu_shared": (lambda: nn.PReLU(init=0.2), (3, 4), ["LeakyReLU"]),
    "relu6": (lambda: nn.ReLU6(), (6,), ["Clip"]),
    "hardtanh": (lambda: nn.Hardtanh(), (6,), ["Clip"]),
    "clamp_min_only": (lambda: Lambda(lambda x: torch.clamp(x, min=-0.5)), (6,), ["Clip"]),
    "hardsigmoid": (lambda: nn.Hardsigmoid(), (6,), ["HardSigmoid"]),
    "hardswish": (lambda: nn.Hardswish(), (6,), ["HardSigmoid"]),
    "sigmoid": (lambda: nn.Sigmoid(), (6,), ["Table"]),
    "tanh": (lambda: nn.Tanh(), (6,), ["Table"]),
    "gelu_erf_pattern": (lambda: nn.GELU(), (6,), ["Table"]),
    "silu_pattern": (lambda: nn.SiLU(), (6,), ["Table"]),
    "elu": (lambda: nn.ELU(), (6,), ["Table"]),
    "softplus": (lambda: nn.Softplus(), (6,), ["Table"]),
    "softmax": (lambda: nn.Softmax(dim=-1), (6,), ["Softmax"]),
    "softmax_last_of_2d": (lambda: nn.Softmax(dim=-1), (3, 5), ["Softmax"]),
    "argmax": (lambda: Lambda(lambda x: torch.argmax(x, dim=-1, keepdim=True)), (7,), ["ArgMax"]),
}


@pytest.mark.parametrize("case", FLOAT_CASES)
def test_op_from_torch_matches_onnxruntime(case):
    make, shape, want = FLOAT_CASES[case]
    model = export(make(), *shape)
    g = check_float(model, inputs(*shape))
    assert ops(g) == want


@pytest.mark.parametrize("module,function,opset", [(nn.Sigmoid, "sigmoid", 17), (nn.Tanh, "tanh", 17),
                                                    (nn.GELU, "gelu", 17), (nn.GELU, "gelu", 20),
                                                    (lambda: nn.GELU(approximate="tanh"), "gelu_tanh", 20),
                                                    (nn.SiLU, "silu", 17), (nn.ELU, "elu", 17),
                                                    (nn.Softplus, "softplus", 17)])
def test_smooth_functions_become_tables_with_their_function(module, function, opset):
    model = export(module(), 6, opset=opset)
    g = check_float(model, inputs(6))
    (t,) = g.nodes
    assert isinstance(t, ir.Table) and t.function == function and t.table is None


def test_hardswish_below_opset_14_is_the_mul_pattern():
    model = export(nn.Hardswish(), 6, opset=13)
    assert [n.op_type for n in model.graph.node] == ["HardSigmoid", "Mul"]
    g = check_float(model, inputs(6))
    (h,) = g.nodes
    assert isinstance(h, ir.HardSigmoid) and h.swish and h.alpha == pytest.approx(1 / 6)


def test_gelu_erf_pattern_in_another_association():
    """0.5 * x first, then times (1 + erf(x / sqrt 2)), with the division written as a Mul by 1/sqrt 2."""
    c = {"h": 0.5, "r": float(np.float32(1 / np.sqrt(2))), "one": 1.0}
    nodes = [helper.make_node("Mul", ["x", "h"], ["xh"], name="half"),
             helper.make_node("Mul", ["x", "r"], ["t"], name="scale"),
             helper.make_node("Erf", ["t"], ["e"], name="erf"),
             helper.make_node("Add", ["one", "e"], ["a"], name="plus1"),
             helper.make_node("Mul", ["xh", "a"], ["y"], name="out")]
    model = B.make_model(nodes, [B.batch_io("x", 5)], [B.batch_io("y", 5)],
                         [B.init(k, np.float32(v)) for k, v in c.items()])
    g = check_float(model, inputs(5))
    assert ops(g) == ["Table"] and g.nodes[0].function == "gelu" and g.nodes[0].name == "erf"


def test_pattern_with_a_shared_inner_tensor_is_not_fused():
    """The Sigmoid's output also leaves the graph, so x * sigmoid(x) is not SiLU alone: the Mul of two tensors
    is reported (bitforge has no element-wise product)."""
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"], name="sig"), helper.make_node("Mul", ["x", "s"], ["y"], name="m")]
    model = B.make_model(nodes, [B.batch_io("x", 3)], [B.batch_io("y", 3), B.batch_io("s", 3)], [])
    with pytest.raises(OnnxFrontendError, match=r"node 'm' \(Mul\): op type 'Mul' is not supported"):
        from_onnx_model(model, "m.onnx")


# -- auto_pad and helper-built graphs --------------------------------------------------------------------------------

@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID", "NOTSET"])
@pytest.mark.parametrize("stride", [1, 2])
def test_conv_auto_pad_matches_onnxruntime(auto_pad, stride):
    rng = np.random.default_rng(stride)
    w, b = rng.normal(size=(3, 2, 4, 3)).astype(np.float32), rng.normal(size=3).astype(np.float32)
    # onnxruntime has no dilated SAME convolution, so the dilation is exercised with explicit pads only
    attrs = dict(auto_pad=auto_pad, strides=[stride, stride],
                 dilations=[1, 1] if auto_pad.startswith("SAME") else [1, 2])
    if auto_pad == "NOTSET":
        attrs["pads"] = [2, 0, 1, 1]
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", **attrs)
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2, 7, 8])
    model = B.make_model([node], [x_info], [out_info("y", 4)], [B.init("w", w), B.init("b", b)])
    g = check_float(model, inputs(2, 7, 8))
    (conv,) = g.nodes
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        assert g.tensors["y"].shape[1:] == (-(-7 // stride), -(-8 // stride))


def test_explicit_pads_put_the_odd_pad_where_onnx_says():
    # in 6, kernel 4, stride 1: total pad 3; SAME_UPPER puts the extra one at the end, SAME_LOWER at the start
    assert explicit_pads("SAME_UPPER", None, (6,), (4,), (1,), (1,)) == (1, 2)
    assert explicit_pads("SAME_LOWER", None, (6,), (4,), (1,), (1,)) == (2, 1)
    assert explicit_pads("VALID", [5, 5], (6,), (4,), (1,), (1,)) == (0, 0)
    assert explicit_pads("NOTSET", [1, 2], (6,), (4,), (1,), (1,)) == (1, 2)


@pytest.mark.parametrize("op,bound,lo,hi", [("Min", 6.0, None, 6.0), ("Max", -1.0, -1.0, None)])
def test_min_max_with_a_constant_are_clips(op, bound, lo, hi):
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node(op, ["r", "c"], ["y"], name="bound")]
    model = B.make_model(nodes, [B.batch_io("x", 5)], [B.batch_io("y", 5)], [B.init("c", np.float32(bound))])
    g = check_float(model, inputs(5, scale=5.0))
    clip = g.nodes[1]
    assert isinstance(clip, ir.Clip) and (clip.lo, clip.hi) == (lo, hi)


def test_batchnorm_after_conv_is_a_scale_shift_and_matches_onnxruntime():
    """PyTorch folds an eval-mode BatchNorm into the Conv before it when exporting; TrainingMode.PRESERVE keeps the
    node (in inference form), which must become a float ScaleShift with scale = gamma / sqrt(var + eps) and
    shift = beta - mean * scale."""
    m = randomize_bn(nn.Sequential(nn.Conv1d(2, 3, 3), nn.BatchNorm1d(3, eps=1e-3)))
    model = export(m, 2, 10, training=torch.onnx.TrainingMode.PRESERVE)
    assert "BatchNormalization" in [n.op_type for n in model.graph.node]
    g = check_float(model, inputs(2, 10))
    conv, ss = g.nodes
    bn = m[1]
    scale = bn.weight.detach().double() / torch.sqrt(bn.running_var.double() + 1e-3)
    np.testing.assert_allclose(ss.scale, scale.numpy(), rtol=1e-6)
    np.testing.assert_allclose(ss.shift, (bn.bias.detach().double() - bn.running_mean.double() * scale).numpy(),
                               rtol=1e-6, atol=1e-6)


# -- the "done when" models ---------------------------------------------------------------------------------------

def test_sigmoid_softmax_mlp():
    m = nn.Sequential(nn.Linear(8, 16), nn.Sigmoid(), nn.Linear(16, 4), nn.Softmax(dim=-1))
    g = check_float(export(m, 8), inputs(8))
    assert ops(g) == ["Dense", "Table", "Dense", "Softmax"]


def test_cnn_1d_with_batchnorm():
    m = randomize_bn(nn.Sequential(nn.Conv1d(2, 8, 5, padding=2), nn.ReLU(), nn.BatchNorm1d(8), nn.MaxPool1d(2),
                                   nn.Conv1d(8, 8, 3, stride=2, groups=2), nn.ReLU(), nn.Flatten(),
                                   nn.Linear(8 * 7, 3)))
    g = check_float(export(m, 2, 32), inputs(2, 32))
    assert ops(g) == ["Conv", "ReLU", "ScaleShift", "Pool", "Conv", "ReLU", "Reshape", "Dense"]


def test_cnn_2d_with_pooling():
    m = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(4, 8, 3), nn.ReLU(),
                      nn.AvgPool2d(2), nn.Flatten(), nn.Linear(8 * 2 * 2, 10))
    g = check_float(export(m, 1, 12, 12), inputs(1, 12, 12))
    assert ops(g) == ["Conv", "ReLU", "Pool", "Conv", "ReLU", "Pool", "Reshape", "Dense"]
    assert [n.mode for n in g.nodes if isinstance(n, ir.Pool)] == ["max", "avg"]


def test_batchnorm_leaky_relu_mlp():
    m = randomize_bn(nn.Sequential(nn.Linear(6, 12), nn.BatchNorm1d(12), nn.LeakyReLU(0.2), nn.Linear(12, 3)))
    g = check_float(export(m, 6), inputs(6))
    assert ops(g) == ["Dense", "ScaleShift", "LeakyReLU", "Dense"]


# -- quantized ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("spatial", [1, 2])
def test_qonnx_cnn_golden_equals_the_qonnx_graph_bit_for_bit(spatial):
    model = B.qonnx_cnn(spatial)
    g = infer_precision(from_onnx_model(model, "qcnn.onnx"))
    assert g.is_fixed
    assert ops(g) == ["Quantize", "Conv", "ReLU", "Pool", "Conv", "ReLU", "Pool", "Reshape", "Dense"]
    conv0 = g.nodes[1]
    assert conv0.weight_type.frac == 7  # per-channel scales 2**-(6, 7, 6, 5) share the finest grid
    x = B.qonnx_input(model, n=128)
    np.testing.assert_array_equal(emulate.run_values(g, x)["y"], B.run_qonnx_reference(model, x))


def test_qonnx_cnn_inputs_reach_saturation_and_ties():
    """Guards the previous test: its inputs include exact half-LSB ties and values beyond the input type."""
    model = B.qonnx_cnn(2)
    x = B.qonnx_input(model, n=128) * 32  # in LSBs of the input quantizer (scale 2**-5)
    assert np.any(x - np.floor(x) == 0.5) and np.any(x > 127) and np.any(x < -128)


def qdq_cnn(leaky: float = 0.125, pool_kernel: int = 2) -> onnx.ModelProto:
    """A QDQ CNN as onnxruntime's quantizer lays it out, power-of-two scales: Q/DQ(x) -> Conv(int8 per-channel
    weights, int32 bias) -> Relu -> Q/DQ -> MaxPool -> AveragePool -> Q/DQ -> LeakyRelu -> Q/DQ -> Clip(0, 2) ->
    Transpose -> Concat with itself through a Relu -> Q/DQ -> Flatten -> Gemm -> Q/DQ."""
    rng = np.random.default_rng(7)
    nodes, inits = [], []

    def qdq(src: str, name: str, frac: int, signed: bool = True) -> str:
        inits.extend([B.init(f"{name}_s", np.float32(2.0 ** -frac)),
                      B.init(f"{name}_z", np.int8(0) if signed else np.uint8(0))])
        nodes.extend([helper.make_node("QuantizeLinear", [src, f"{name}_s", f"{name}_z"], [f"{name}_q"],
                                       name=f"{name}_Q"),
                      helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_z"], [f"{name}_dq"],
                                       name=f"{name}_DQ")])
        return f"{name}_dq"

    x = qdq("x", "in", 5)
    w_fracs = np.array([6, 7, 6, 5])
    inits += [B.init("W_q", rng.integers(-128, 128, size=(4, 2, 3, 3)).astype(np.int8)),
              B.init("W_s", (2.0 ** -w_fracs).astype(np.float32)), B.init("W_z", np.zeros(4, np.int8)),
              B.init("b_q", rng.integers(-2000, 2000, size=4).astype(np.int32)),
              B.init("b_s", (2.0 ** -(5 + w_fracs)).astype(np.float32)), B.init("b_z", np.zeros(4, np.int32))]
    nodes += [helper.make_node("DequantizeLinear", ["W_q", "W_s", "W_z"], ["W"], name="W_DQ", axis=0),
              helper.make_node("DequantizeLinear", ["b_q", "b_s", "b_z"], ["b"], name="b_DQ", axis=0),
              helper.make_node("Conv", [x, "W", "b"], ["conv"], name="conv", pads=[1, 1, 1, 1]),
              helper.make_node("Relu", ["conv"], ["relu"], name="relu")]
    h = qdq("relu", "h0", 4, signed=False)
    nodes += [helper.make_node("MaxPool", [h], ["mp"], name="maxpool", kernel_shape=[2, 2], strides=[2, 2]),
              helper.make_node("AveragePool", ["mp"], ["ap"], name="avgpool", kernel_shape=[pool_kernel] * 2,
                               strides=[1, 1], pads=[1, 1, 0, 0] if pool_kernel == 2 else [0] * 4)]
    h = qdq("ap", "h1", 5, signed=False)
    nodes.append(helper.make_node("LeakyRelu", [h], ["lr"], name="leaky", alpha=leaky))
    h = qdq("lr", "h2", 5)
    inits += [B.init("lo", np.float32(0.0)), B.init("hi", np.float32(2.0))]
    nodes += [helper.make_node("Clip", [h, "lo", "hi"], ["clip"], name="clip"),
              helper.make_node("Transpose", ["clip"], ["tr"], name="transpose", perm=[0, 1, 3, 2]),
              helper.make_node("Relu", ["tr"], ["tr_relu"], name="relu2"),
              helper.make_node("Concat", ["tr", "tr_relu"], ["cat"], name="concat", axis=1)]
    h = qdq("cat", "h3", 5)
    feats = 8 * 4 * 4
    inits += [B.init("W2_q", rng.integers(-128, 128, size=(3, feats)).astype(np.int8)),
              B.init("W2_s", np.float32(2.0 ** -7)), B.init("W2_z", np.int8(0))]
    nodes += [helper.make_node("Flatten", [h], ["flat"], name="flatten", axis=1),
              helper.make_node("DequantizeLinear", ["W2_q", "W2_s", "W2_z"], ["W2"], name="W2_DQ"),
              helper.make_node("Gemm", ["flat", "W2"], ["fc"], name="fc", transB=1)]
    y = qdq("fc", "out", 3)
    nodes.append(helper.make_node("Identity", [y], ["y"], name="output"))
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2, 8, 8])
    return B.make_model(nodes, [x_info], [B.batch_io("y", 3)], inits, "qdq_cnn")


@pytest.mark.parametrize("optimize", [False, True], ids=["ort-as-written", "ort-qdq-fused"])
def test_qdq_cnn_golden_equals_onnxruntime_bit_for_bit(optimize):
    """Every tensor is a small integer times a power of two and every partial sum stays below 2**24 units of its
    grid (int8 x int8 x 18 taps + bias < 2**21), so onnxruntime's float32 arithmetic is exact here and its
    QuantizeLinear rounds exactly as the golden model's RND_CONV, SAT."""
    model = qdq_cnn()
    g = infer_precision(from_onnx_model(model, "qdq_cnn.onnx"))
    assert g.is_fixed
    assert ops(g) == ["Quantize", "Conv", "ReLU", "Pool", "Pool", "LeakyReLU", "Clip", "Transpose", "ReLU",
                      "Concat", "Reshape", "Dense"]
    rng = np.random.default_rng(0)
    x = np.ldexp(rng.integers(-384, 384, size=(256, 2, 8, 8)), -6).astype(np.float32)  # ties, saturation
    got = emulate.run_values(g, x)["y"]
    ref = B.ort_run(model, x, optimize=optimize).astype(np.float64)
    np.testing.assert_array_equal(got, ref)


def test_qdq_data_movement_shares_its_input_type():
    g = from_onnx_model(qdq_cnn(), "qdq_cnn.onnx")
    for n in g.nodes:
        if isinstance(n, (ir.Reshape, ir.Transpose)):
            assert g.tensors[n.output].dtype == g.tensors[n.input].dtype


@pytest.mark.parametrize("change,fragments", [
    (dict(leaky=0.01), ("node 'leaky' (LeakyRelu)", "float32", "power of two")),
    (dict(pool_kernel=3), ("node 'avgpool' (AveragePool)", "windows of 9 elements", "power of two")),
])
def test_quantized_ops_that_would_round_differently_are_refused(change, fragments):
    with pytest.raises(OnnxFrontendError) as e:
        from_onnx_model(qdq_cnn(**change), "q.onnx")
    for f in fragments:
        assert f in str(e.value)


@pytest.mark.parametrize("op,attrs", [("Sigmoid", {}), ("Softmax", {}), ("HardSigmoid", {})])
def test_smooth_ops_on_a_quantized_tensor_are_refused_with_the_reason(op, attrs):
    """Under --strict (without it a Softmax gets tables on the real input values: tests/test_quantized_exports)."""
    model = B.qonnx_mlp((4, 3), in_q=B.QSpec(8, 4), weight_q=[B.QSpec(8, 6)], act_q=[B.QSpec(8, 4)])
    ident = next(n for n in model.graph.node if n.op_type == "Identity")
    ident.op_type = op
    ident.attribute.extend(helper.make_attribute(k, v) for k, v in attrs.items())
    with pytest.raises(OnnxFrontendError) as e:
        from_onnx_model(model, "q.onnx", QuantOptions(strict=True))
    assert f"node 'output' ({op})" in str(e.value) and "of a quantized tensor" in str(e.value)


def test_batchnorm_on_a_quantized_tensor_is_refused():
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q"),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], name="dq"),
             helper.make_node("BatchNormalization", ["d", "g", "b", "m", "v"], ["y"], name="bn")]
    inits = [B.init("s", np.float32(1 / 16)), B.init("z", np.int8(0))] + [
        B.init(k, np.ones(3, np.float32)) for k in "gbmv"]
    with pytest.raises(OnnxFrontendError, match=r"node 'bn' \(BatchNormalization\): .*quantized tensor.*Fold it"):
        from_onnx_model(B.make_model(nodes, [B.batch_io("x", 3)], [B.batch_io("y", 3)], inits), "bn.onnx")


# -- first contact: what cannot be translated ----------------------------------------------------------------------

def test_every_unsupported_node_is_listed_at_once():
    """A CNN with three problems in different places: an op bitforge lacks (Resize), a supported op with an
    unsupported attribute (MaxPool ceil_mode=1), and another missing op (LogSoftmax) after the first failure,
    which is still named. Each line has the node name, op type and reason; the supported ops follow once."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["c", "", "scales"], ["up"], name="upsample", mode="nearest"),
             helper.make_node("Relu", ["up"], ["r"], name="relu1"),
             helper.make_node("MaxPool", ["c"], ["p"], name="pool_ceil", kernel_shape=[2, 2], ceil_mode=1),
             helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "w2"], ["g"], name="fc", transB=1),
             helper.make_node("LogSoftmax", ["g"], ["y"], name="logits"),
             helper.make_node("Flatten", ["p"], ["pf"], name="flatten2")]
    inits = [B.init("w", rng.normal(size=(2, 1, 3, 3)).astype(np.float32)),
             B.init("scales", np.array([1, 1, 2, 2], np.float32)),
             B.init("w2", rng.normal(size=(3, 2 * 8 * 8)).astype(np.float32))]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1, 4, 4])
    outs = [out_info("y", 2), out_info("pf", 2)]
    model = B.make_model(nodes, [x], outs, inits)
    with pytest.raises(OnnxFrontendError) as e:
        from_onnx_model(model, "cnn.onnx")
    msg = str(e.value)
    lines = msg.splitlines()
    assert lines[0] == "cnn.onnx: 3 nodes cannot be translated:"
    assert lines[1] == "  - node 'upsample' (Resize): op type 'Resize' is not supported"
    assert lines[2].startswith("  - node 'pool_ceil' (MaxPool): ceil_mode=1 is not supported")
    assert lines[3] == "  - node 'logits' (LogSoftmax): op type 'LogSoftmax' is not supported"
    assert lines[4].startswith(f"Supported ops: {', '.join(SUPPORTED_OPS)}")
    assert "Conv" in SUPPORTED_OPS and "graph input" not in msg and "conv1" not in msg


def test_a_cnn_that_fails_is_told_about_its_conv_not_its_input_shape():
    w = np.ones((2, 1, 3, 3, 3), np.float32)  # a 3-D convolution
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1, 4, 4, 4])
    model = B.make_model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv3d")], [x], [out_info("y", 5)],
                         [B.init("w", w)])
    with pytest.raises(OnnxFrontendError) as e:
        from_onnx_model(model, "c3d.onnx")
    assert str(e.value).startswith("c3d.onnx: node 'conv3d' (Conv): 3-D convolution")
    assert "graph input" not in str(e.value)


def refuse(nodes, x_shape, inits, *fragments):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", *x_shape])
    model = B.make_model(nodes, [x], [out_info("y", len(x_shape) + 1)], inits)
    with pytest.raises(OnnxFrontendError) as e:
        from_onnx_model(model, "bad.onnx")
    for f in fragments:
        assert f in str(e.value), f"{f!r} missing from: {e.value}"


@pytest.mark.parametrize("node,shape,fragments", [
    (helper.make_node("MaxPool", ["x"], ["y"], name="p", kernel_shape=[2], dilations=[2]), (2, 8),
     ("node 'p' (MaxPool)", "dilated pooling")),
    (helper.make_node("AveragePool", ["x"], ["y"], name="p", kernel_shape=[2], pads=[2, 0]), (2, 8),
     ("must be smaller than the kernel",)),
    (helper.make_node("Softmax", ["x"], ["y"], name="s", axis=1), (3, 4), ("node 's' (Softmax)", "last axis")),
    (helper.make_node("ArgMax", ["x"], ["y"], name="a", axis=-1, keepdims=0), (4,), ("keepdims=1",)),
    (helper.make_node("ArgMax", ["x"], ["y"], name="a", axis=-1, select_last_index=1), (4,),
     ("select_last_index=0",)),
    (helper.make_node("ArgMax", ["x"], ["y"], name="a"), (4,), ("axis 0", "last axis")),
    (helper.make_node("Transpose", ["x"], ["y"], name="t", perm=[1, 0, 2]), (3, 4), ("moves the batch axis",)),
    (helper.make_node("Flatten", ["x"], ["y"], name="f", axis=0), (3, 4), ("merges the batch axis",)),
    (helper.make_node("Concat", ["x", "x"], ["y"], name="c", axis=0), (3,), ("batch axis",)),
    (helper.make_node("Elu", ["x"], ["y"], name="e", alpha=0.5), (3,), ("alpha=1",)),
    (helper.make_node("Gemm", ["x", "x"], ["y"], name="g"), (3, 3), ("activation", "constant weight")),
])
def test_unsupported_attributes_are_refused_clearly(node, shape, fragments):
    refuse([node], shape, [], *fragments)


def test_dense_on_a_spatial_tensor_asks_for_a_flatten():
    w = np.ones((4, 2), np.float32)
    refuse([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], (3, 4), [B.init("w", w)],
           "node 'mm' (MatMul)", "flatten it first")


def qdq_conv_then(tail: str) -> onnx.ModelProto:
    """Q/DQ(x) -> Conv(int8 DQ weight) -> Relu -> ``tail`` -> Q/DQ -> [Flatten] -> Gemm -> Q/DQ, where ``tail`` is
    "maxpool" (MaxPool 2) or "flatten" (Flatten): the quantizer after the tail types the exact Conv output."""
    rng = np.random.default_rng(11)
    inits = [B.init("s_in", np.float32(2.0 ** -4)), B.init("s_h", np.float32(2.0 ** -3)),
             B.init("s_out", np.float32(2.0 ** -2)), B.init("z", np.int8(0)), B.init("zu", np.uint8(0)),
             B.init("W_q", rng.integers(-128, 128, size=(3, 2, 3, 3)).astype(np.int8)),
             B.init("W_s", np.float32(2.0 ** -6)),
             B.init("W2_q", rng.integers(-128, 128, size=(2, 3 * (4 if tail == "maxpool" else 16))).astype(np.int8)),
             B.init("W2_s", np.float32(2.0 ** -7))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s_in", "z"], ["xq"], name="q_in"),
             helper.make_node("DequantizeLinear", ["xq", "s_in", "z"], ["xd"], name="dq_in"),
             helper.make_node("DequantizeLinear", ["W_q", "W_s", "z"], ["W"], name="dq_w"),
             helper.make_node("Conv", ["xd", "W"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu")]
    if tail == "maxpool":
        nodes += [helper.make_node("MaxPool", ["r"], ["t"], name="pool", kernel_shape=[2, 2], strides=[2, 2])]
    else:
        nodes += [helper.make_node("Flatten", ["r"], ["t"], name="flatten")]
    nodes += [helper.make_node("QuantizeLinear", ["t", "s_h", "zu"], ["hq"], name="q_h"),
              helper.make_node("DequantizeLinear", ["hq", "s_h", "zu"], ["hd"], name="dq_h")]
    flat = "hd"
    if tail == "maxpool":
        nodes.append(helper.make_node("Flatten", ["hd"], ["hf"], name="flatten"))
        flat = "hf"
    nodes += [helper.make_node("DequantizeLinear", ["W2_q", "W2_s", "z"], ["W2"], name="dq_w2"),
              helper.make_node("Gemm", [flat, "W2"], ["g"], name="fc", transB=1),
              helper.make_node("QuantizeLinear", ["g", "s_out", "z"], ["yq"], name="q_out"),
              helper.make_node("DequantizeLinear", ["yq", "s_out", "z"], ["y"], name="dq_out")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2, 4, 4])
    return B.make_model(nodes, [x], [B.batch_io("y", 2)], inits, "qdq_conv_" + tail)


@pytest.mark.parametrize("tail,want", [("maxpool", ["Quantize", "Conv", "ReLU", "Pool", "Reshape", "Dense"]),
                                       ("flatten", ["Quantize", "Conv", "ReLU", "Reshape", "Dense"])])
def test_quantizer_after_relu_and_pool_or_flatten_types_the_conv_exactly(tail, want):
    """No Requantize node: the quantizer's type reaches back through the MaxPool (rounding is monotone) or the
    Flatten (it shares its input's type) and the ReLU to the Conv, and the result is still ONNX Runtime's."""
    model = qdq_conv_then(tail)
    g = infer_precision(from_onnx_model(model, "q.onnx"))
    assert ops(g) == want
    # uint8 codes at scale 2**-3, on every tensor from the Conv to the quantizer
    assert {g.tensors[n.output].dtype for n in g.nodes[1:-1]} == {parse_type("ufixed<8,5,RND_CONV,SAT>")}
    x = np.ldexp(np.random.default_rng(2).integers(-200, 200, size=(256, 2, 4, 4)), -5).astype(np.float32)
    np.testing.assert_array_equal(emulate.run_values(g, x)["y"], B.ort_run(model, x).astype(np.float64))


def test_compile_of_the_2d_cnn_at_8_bits_end_to_end(tmp_path):
    """``bitforge compile cnn.onnx --precision 8``: the frontend's float CNN through the quantization pass, the
    precision pass, bitforge's ONNX export and the golden-vs-ONNX-Runtime verification (bit-exact)."""
    import json

    from bitforge.toolchain.cli import main

    m = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(4, 8, 3), nn.ReLU(),
                      nn.AvgPool2d(2), nn.Flatten(), nn.Linear(8 * 2 * 2, 10))
    path = tmp_path / "cnn.onnx"
    onnx.save(export(m, 1, 12, 12), str(path))
    out = tmp_path / "out"
    assert main(["compile", str(path), "-o", str(out), "--precision", "8", "--input-range=-3,3",
                 "--vectors", "500"]) == 0
    report = json.loads((out / "report.json").read_text())
    check = report["verification"]["golden_vs_onnxruntime"]
    assert check["exact"] and check["mismatches"] == 0 and check["vectors"] == 500
    g = ir.load(out)
    assert g.is_fixed
    assert [n.OP for n in g.nodes] == ["Quantize", "Conv", "ReLU", "Pool", "Conv", "ReLU", "Pool", "Reshape", "Dense"]
