"""PyTorch frontend, the layers of the models people bring (issue 18): each maps to its IR op, and the float IR run
by the golden model gives the torch module's output.

Tolerance: the golden model's float rules compute in float32 like torch, but sum in a different order (windows
gathered, then one einsum) and fold BatchNorm into one scale and shift, so results differ by float32 rounding
only: ``RTOL = ATOL = 1e-5`` for values of order 1 and sums of at most ~150 terms. The smooth functions come
from float64 definitions (``toolchain/tables.py``) rounded to float32: within the same tolerance.

Every mapping is checked twice: on the program ``torch.export.export`` gives (what ``from_torch`` and a saved
``.pt2`` hold) and on its ``run_decompositions()`` form (core ATen: ``aten.convolution``,
``aten._native_batch_norm_legit_no_training``, ``aten.max_pool2d_with_indices``, ``aten.mean.dim``, ...), as far as
that form is supported.
"""
from __future__ import annotations

import re
import warnings

import numpy as np
import onnx
import pytest
import torch
from torch import nn

from bitforge.toolchain import emulate, ir
from bitforge.toolchain.frontends.torch_frontend import (SUPPORTED_MODULES, FrontendError, from_exported,
                                                         from_torch, load_pt2)

RTOL = ATOL = 1e-5


class Fn(nn.Module):
    """A module around a function (a view, a permute, a cat): what people write in their ``forward``."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def with_stats(bn: nn.Module, seed: int = 0) -> nn.Module:
    """A BatchNorm with trained-looking statistics and affine parameters (the defaults make it an identity)."""
    g = torch.Generator().manual_seed(seed)
    c = bn.num_features
    with torch.no_grad():
        bn.running_mean.copy_(torch.randn(c, generator=g))
        bn.running_var.copy_(torch.rand(c, generator=g) * 2 + 0.1)
        if bn.affine:
            bn.weight.copy_(torch.randn(c, generator=g))
            bn.bias.copy_(torch.randn(c, generator=g))
    return bn.eval()


def inputs(shape: tuple[int, ...], seed: int = 0, scale: float = 2.0) -> np.ndarray:
    return (np.random.default_rng(seed).normal(size=shape) * scale).astype(np.float32)


def torch_out(module: nn.Module, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return module.eval()(torch.from_numpy(x)).numpy()


def emulated(g: ir.Graph, x: np.ndarray) -> np.ndarray:
    return emulate.run(g, x)[g.outputs[0]]


def convert(module: nn.Module, x: np.ndarray, form: str) -> ir.Graph:
    module.eval()
    if form == "export":
        return from_torch(module, torch.from_numpy(x))
    ep = torch.export.export(module, (torch.from_numpy(x),)).run_decompositions()
    return from_exported(ep, "decomposed")


def ops(g: ir.Graph) -> list[str]:
    return [n.OP for n in g.nodes]


# (id, module factory, per-batch input shape, the IR ops it becomes)
CASES = [
    ("conv1d-stride-pad-dilation-groups", lambda: nn.Conv1d(4, 6, 3, stride=2, padding=2, dilation=2, groups=2),
     (4, 17), ["Conv"]),
    ("conv1d-no-bias", lambda: nn.Conv1d(3, 5, 4, bias=False), (3, 12), ["Conv"]),
    ("conv1d-same-even-kernel", lambda: nn.Conv1d(2, 3, 4, padding="same"), (2, 11), ["Conv"]),
    ("conv2d-stride-pad", lambda: nn.Conv2d(3, 4, (3, 2), stride=(2, 1), padding=(1, 0)), (3, 9, 7), ["Conv"]),
    ("conv2d-same-odd", lambda: nn.Conv2d(2, 4, 3, padding="same"), (2, 6, 5), ["Conv"]),
    ("conv2d-same-even-dilated", lambda: nn.Conv2d(2, 3, 4, padding="same", dilation=2), (2, 9, 8), ["Conv"]),
    ("conv2d-valid-depthwise", lambda: nn.Conv2d(4, 8, 3, padding="valid", groups=4), (4, 6, 6), ["Conv"]),
    ("batchnorm1d-features", lambda: with_stats(nn.BatchNorm1d(5)), (5,), ["ScaleShift"]),
    ("batchnorm1d-sequence", lambda: with_stats(nn.BatchNorm1d(3, eps=1e-3)), (3, 7), ["ScaleShift"]),
    ("batchnorm2d", lambda: with_stats(nn.BatchNorm2d(3)), (3, 4, 5), ["ScaleShift"]),
    ("batchnorm2d-no-affine", lambda: with_stats(nn.BatchNorm2d(2, affine=False)), (2, 3, 3), ["ScaleShift"]),
    ("maxpool1d", lambda: nn.MaxPool1d(3, stride=2, padding=1), (2, 10), ["Pool"]),
    ("maxpool2d", lambda: nn.MaxPool2d(2), (3, 8, 6), ["Pool"]),
    ("maxpool2d-pad-stride", lambda: nn.MaxPool2d((3, 2), stride=(2, 1), padding=(1, 1)), (2, 7, 5), ["Pool"]),
    ("avgpool1d-include-pad", lambda: nn.AvgPool1d(3, stride=2, padding=1), (2, 9), ["Pool"]),
    ("avgpool1d-exclude-pad", lambda: nn.AvgPool1d(3, stride=2, padding=1, count_include_pad=False), (2, 9),
     ["Pool"]),
    ("avgpool2d", lambda: nn.AvgPool2d(3, stride=3), (2, 9, 6), ["Pool"]),
    ("avgpool2d-exclude-pad", lambda: nn.AvgPool2d(2, padding=1, count_include_pad=False), (2, 5, 5), ["Pool"]),
    ("adaptive1d-global", lambda: nn.AdaptiveAvgPool1d(1), (3, 10), ["Pool"]),
    ("adaptive2d-global", lambda: nn.AdaptiveAvgPool2d(1), (3, 5, 7), ["Pool"]),
    ("adaptive2d-divides", lambda: nn.AdaptiveAvgPool2d((2, 3)), (3, 8, 9), ["Pool"]),
    ("global-mean-keepdim", lambda: Fn(lambda x: x.mean(dim=(2, 3), keepdim=True)), (3, 4, 5), ["Pool"]),
    ("global-mean", lambda: Fn(lambda x: x.mean(dim=(-1, -2))), (3, 4, 5), ["Pool", "Reshape"]),
    ("flatten", lambda: nn.Flatten(), (3, 4, 2), ["Reshape"]),
    ("view-reshape", lambda: Fn(lambda x: x.view(x.size(0), -1).reshape(-1, 4, 6)), (2, 3, 4), ["Reshape"] * 2),
    ("permute", lambda: Fn(lambda x: x.permute(0, 2, 3, 1)), (2, 3, 4), ["Transpose"]),
    ("transpose", lambda: Fn(lambda x: x.transpose(1, 2)), (3, 5), ["Transpose"]),
    ("cat-two", lambda: Fn(lambda x: torch.cat([x, x.transpose(1, 2)], dim=1)), (4, 4), ["Transpose", "Concat"]),
    ("cat-three-last-axis", lambda: Fn(lambda x: torch.cat([x, torch.relu(x), x], dim=-1)), (2, 3),
     ["ReLU", "Concat", "Concat"]),
    ("leaky-relu", lambda: nn.LeakyReLU(0.1), (6,), ["LeakyReLU"]),
    ("prelu-one-slope", lambda: nn.PReLU(init=0.3), (3, 4), ["LeakyReLU"]),
    ("prelu-per-channel", lambda: prelu_per_channel(), (3, 4), ["LeakyReLU"]),
    ("relu6", lambda: nn.ReLU6(), (6,), ["Clip"]),
    ("hardtanh", lambda: nn.Hardtanh(-0.5, 1.5), (6,), ["Clip"]),
    ("clamp", lambda: Fn(lambda x: torch.clamp(x, min=-1.25)), (6,), ["Clip"]),
    ("hardsigmoid", lambda: nn.Hardsigmoid(), (8,), ["HardSigmoid"]),
    ("hardswish", lambda: nn.Hardswish(), (8,), ["HardSigmoid"]),
    ("sigmoid", lambda: nn.Sigmoid(), (8,), ["Table"]),
    ("tanh", lambda: nn.Tanh(), (8,), ["Table"]),
    ("gelu", lambda: nn.GELU(), (8,), ["Table"]),
    ("gelu-tanh", lambda: nn.GELU(approximate="tanh"), (8,), ["Table"]),
    ("silu", lambda: nn.SiLU(), (8,), ["Table"]),
    ("elu", lambda: nn.ELU(), (8,), ["Table"]),
    ("softplus", lambda: nn.Softplus(), (8,), ["Table"]),
    ("softmax", lambda: nn.Softmax(dim=-1), (3, 5), ["Softmax"]),
    ("argmax-keepdim", lambda: Fn(lambda x: torch.argmax(x, dim=-1, keepdim=True)), (3, 5), ["ArgMax"]),
    ("argmax", lambda: Fn(lambda x: torch.argmax(x, dim=-1)), (7,), ["ArgMax", "Reshape"]),
]
#: Activations that run_decompositions() spreads over several arithmetic ops (mul, where, div...), which are not
#: layers of their own: the frontend takes them as torch.export gives them, undecomposed, and refuses the
#: decomposed form naming the module.
DECOMPOSED_INTO_ARITHMETIC = {"prelu-one-slope", "prelu-per-channel", "hardsigmoid", "hardswish", "silu", "softplus"}
TABLE_FUNCTION = {"sigmoid": "sigmoid", "tanh": "tanh", "gelu": "gelu", "gelu-tanh": "gelu_tanh", "silu": "silu",
                  "elu": "elu", "softplus": "softplus"}


def prelu_per_channel() -> nn.Module:
    m = nn.PReLU(3)
    with torch.no_grad():
        m.weight.copy_(torch.tensor([0.1, -0.5, 2.0]))
    return m


@pytest.mark.parametrize("form", ["export", "decomposed"])
@pytest.mark.parametrize("case,make,shape,want", CASES, ids=[c[0] for c in CASES])
def test_layer_becomes_its_ir_op_and_the_golden_model_equals_torch(case, make, shape, want, form):
    torch.manual_seed(0)
    module = make()
    x = inputs((5, *shape), seed=1)
    if form == "decomposed" and case in DECOMPOSED_INTO_ARITHMETIC:
        # No layer is left to map: the refusal must name the module the arithmetic came from.
        with pytest.raises(FrontendError, match=rf"torch\.nn\.modules\.activation\.{type(module).__name__}"):
            convert(module, x, form)
        return
    g = convert(module, x, form)
    assert ops(g) == want
    assert all(g.tensors[t].is_float for t in g.tensors)
    ref = torch_out(module, x)
    out = emulated(g, x)
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)


def test_conv_attributes_reach_the_ir():
    conv = nn.Conv2d(4, 6, (3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2)
    g = from_torch(nn.Sequential(conv), torch.randn(2, 4, 9, 9))
    n = g.nodes[0]
    assert (n.stride, n.padding, n.dilation, n.groups) == ((2, 1), (1, 0, 1, 0), (1, 2), 2)
    np.testing.assert_array_equal(n.weight, conv.weight.detach().numpy())
    np.testing.assert_array_equal(n.bias, conv.bias.detach().numpy())


def test_same_padding_of_an_even_kernel_puts_the_odd_pad_at_the_end_in_both_forms():
    module = nn.Conv2d(1, 1, 4, padding="same", dilation=1)
    x = inputs((1, 1, 6, 6))
    for form in ("export", "decomposed"):  # conv2d.padding 'same' / constant_pad_nd + convolution
        assert convert(module, x, form).nodes[0].padding == (1, 1, 2, 2)


def test_batchnorm_becomes_scale_and_shift_from_its_running_statistics():
    bn = with_stats(nn.BatchNorm1d(4, eps=1e-3))
    n = from_torch(bn, torch.randn(2, 4)).nodes[0]
    var, mean = bn.running_var.numpy().astype(np.float64), bn.running_mean.numpy().astype(np.float64)
    scale = bn.weight.detach().numpy() / np.sqrt(var + 1e-3)
    np.testing.assert_allclose(n.scale, scale, rtol=1e-7)
    np.testing.assert_allclose(n.shift, bn.bias.detach().numpy() - mean * scale, rtol=1e-6, atol=1e-7)


def test_table_nodes_name_their_function_and_carry_no_table():
    for case, make, shape, _ in CASES:
        if case in TABLE_FUNCTION:
            n = from_torch(make(), torch.randn(2, *shape)).nodes[0]
            assert (n.function, n.table) == (TABLE_FUNCTION[case], None)


def test_hardsigmoid_and_hardswish_use_pytorchs_slope_and_offset():
    sig, swish = (from_torch(m, torch.randn(2, 4)).nodes[0] for m in (nn.Hardsigmoid(), nn.Hardswish()))
    assert (sig.alpha, sig.beta, sig.swish) == (1 / 6, 0.5, False)
    assert (swish.alpha, swish.beta, swish.swish) == (1 / 6, 0.5, True)


def test_leaky_relu_and_prelu_slopes():
    assert from_torch(nn.LeakyReLU(0.2), torch.randn(2, 4)).nodes[0].alpha.tolist() == pytest.approx([0.2])
    assert from_torch(prelu_per_channel(), torch.randn(2, 3, 4)).nodes[0].alpha.tolist() == \
        pytest.approx([0.1, -0.5, 2.0])


# -- the done-when models, as float graphs ------------------------------------------------------------------

class CNN1d(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(2, 8, 5, padding=2), nn.BatchNorm1d(8), nn.ReLU(), nn.MaxPool1d(2),
            nn.Conv1d(8, 8, 3, padding=1, groups=2), nn.BatchNorm1d(8), nn.ReLU(), nn.AdaptiveAvgPool1d(1))
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


class CNN2d(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                  nn.Conv2d(4, 8, 3), nn.ReLU(), nn.AvgPool2d(2), nn.Flatten(),
                                  nn.Linear(8 * 2 * 2, 10))

    def forward(self, x):
        return self.body(x)


def done_when_models():
    torch.manual_seed(3)
    cnn1d = CNN1d()
    for i in (1, 5):
        with_stats(cnn1d.features[i], seed=i)
    mlp_bn = nn.Sequential(nn.Linear(6, 16), with_stats(nn.BatchNorm1d(16)), nn.LeakyReLU(0.1), nn.Linear(16, 4))
    return {
        "sigmoid-softmax-mlp": (nn.Sequential(nn.Linear(6, 12), nn.Sigmoid(), nn.Linear(12, 4), nn.Softmax(dim=-1)),
                                (6,), ["Dense", "Table", "Dense", "Softmax"]),
        "cnn1d-batchnorm": (cnn1d, (2, 32), ["Conv", "ScaleShift", "ReLU", "Pool", "Conv", "ScaleShift", "ReLU",
                                             "Pool", "Reshape", "Dense"]),
        "cnn2d-pooling": (CNN2d(), (1, 12, 12), ["Conv", "ReLU", "Pool", "Conv", "ReLU", "Pool", "Reshape", "Dense"]),
        "mlp-batchnorm-leaky-relu": (mlp_bn, (6,), ["Dense", "ScaleShift", "LeakyReLU", "Dense"]),
    }


@pytest.mark.parametrize("which", ["sigmoid-softmax-mlp", "cnn1d-batchnorm", "cnn2d-pooling",
                                   "mlp-batchnorm-leaky-relu"])
def test_done_when_model_as_a_float_graph_equals_torch_live_and_from_its_archive(which, tmp_path):
    module, shape, want = done_when_models()[which]
    module.eval()
    x = inputs((64, *shape), seed=2)
    g = from_torch(module, torch.from_numpy(x[:4]), which)
    assert ops(g) == want
    ref = torch_out(module, x)
    np.testing.assert_allclose(emulated(g, x), ref, rtol=RTOL, atol=ATOL)
    path = tmp_path / f"{which}.pt2"
    torch.export.save(torch.export.export(module, (torch.from_numpy(x[:4]),)), str(path))
    np.testing.assert_allclose(emulated(load_pt2(path, which), x), ref, rtol=RTOL, atol=ATOL)


def test_the_batchnorm_of_the_1d_cnn_folds_into_its_convolutions_and_still_equals_torch():
    from bitforge.toolchain.passes.batchnorm import fold_batchnorm

    module, shape, _ = done_when_models()["cnn1d-batchnorm"]
    x = inputs((32, *shape), seed=4)
    folded = fold_batchnorm(from_torch(module, torch.from_numpy(x[:2])))
    assert "ScaleShift" not in ops(folded)
    np.testing.assert_allclose(emulated(folded, x), torch_out(module, x), rtol=1e-4, atol=1e-5)


def test_a_batch_of_one_example_input_still_keeps_the_batch_axis_out_of_reshapes():
    module, shape, want = done_when_models()["cnn2d-pooling"]
    g = from_torch(module.eval(), torch.randn(1, *shape))
    assert ops(g) == want and g.tensors[g.nodes[-2].output].shape == (32,)


# -- refusals: named, with the layer, all at once --------------------------------------------------------------

@pytest.mark.parametrize("module,shape,words", [
    (nn.Conv1d(2, 2, 3, padding=1, padding_mode="reflect"), (2, 8), ["padding_mode 'reflect'", "zeros"]),
    (nn.Conv2d(2, 2, 3, padding=1, padding_mode="circular"), (2, 6, 6), ["padding_mode 'circular'"]),
    (nn.MaxPool2d(2, ceil_mode=True), (2, 5, 5), ["ceil_mode=True"]),
    (nn.AvgPool1d(2, ceil_mode=True), (2, 5), ["ceil_mode=True"]),
    (nn.AvgPool2d(2, divisor_override=3), (2, 4, 4), ["divisor_override=3"]),
    (nn.AdaptiveAvgPool1d(3), (2, 8), ["(8,) to (3,)", "divide"]),
    (nn.Softmax(dim=1), (3, 4), ["softmax over dim 1", "dim=-1"]),
    (nn.ELU(alpha=0.5), (4,), ["ELU", "alpha=1"]),
    (nn.Softplus(beta=2), (4,), ["Softplus(beta=2"]),
    (Fn(lambda x: torch.argmax(x, dim=1)), (3, 4), ["argmax over dim 1"]),
    (Fn(lambda x: x.mean(dim=1)), (3, 4), ["mean over dims [1]"]),
    (Fn(lambda x: x.reshape(-1)), (3,), ["mixes the batch"]),
    (Fn(lambda x: x.permute(1, 0)), (3,), ["moves the batch axis"]),
    (Fn(lambda x: torch.cat([x, x], dim=0)), (3,), ["along the batch axis"]),
])
def test_an_unsupported_setting_is_refused_naming_the_layer_and_the_setting(module, shape, words):
    with pytest.raises(FrontendError) as e:
        from_torch(module, torch.randn(2, *shape))
    msg = str(e.value)
    assert msg.startswith("node '") and all(w in msg for w in words), msg


def test_batchnorm_without_running_statistics_is_refused():
    with pytest.raises(FrontendError, match="BatchNorm in training mode or without running statistics"):
        from_torch(nn.BatchNorm1d(3, track_running_stats=False), torch.randn(4, 3))


def test_transposed_convolution_in_a_decomposed_program_is_named():
    ep = torch.export.export(nn.ConvTranspose1d(2, 2, 3).eval(), (torch.randn(1, 2, 5),)).run_decompositions()
    with pytest.raises(FrontendError, match="transposed convolution"):
        from_exported(ep)


class ManyUnsupported(nn.Module):
    """A CNN with three layers bitforge lacks and supported layers after each."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1, padding_mode="reflect")
        self.norm = nn.GroupNorm(2, 4)
        self.up = nn.Upsample(scale_factor=2)
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Linear(4 * 4 * 4, 3)

    def forward(self, x):
        y = self.pool(torch.relu(self.up(self.norm(self.conv(x)))))
        return self.head(torch.cumsum(y, dim=1).flatten(1))


def test_every_unsupported_node_is_listed_at_once_with_module_and_source_line():
    with pytest.raises(FrontendError) as e:
        from_torch(ManyUnsupported(), torch.randn(2, 1, 4, 4))
    msg = str(e.value)
    lines = msg.splitlines()
    assert lines[0] == "4 nodes cannot be converted:"
    problems = [line for line in lines if line.startswith("  - ")]
    assert len(problems) == 4
    assert "module 'conv'" in problems[0] and "padding_mode 'reflect'" in problems[0]
    assert "module 'norm'" in problems[1] and "aten::group_norm" in problems[1]
    assert "module 'up'" in problems[2] and "aten::upsample_nearest2d" in problems[2]
    assert "aten::cumsum" in problems[3] and f"{__file__}:" in problems[3]  # the line of ManyUnsupported.forward
    assert lines[-1].startswith("supported modules: ") and ", ".join(SUPPORTED_MODULES) in lines[-1]
    # the supported layers after the failed ones are skipped, not blamed for their inputs
    assert not re.search(r"\bshape\b", msg) and "module 'head'" not in msg and "module 'pool'" not in msg


def test_the_message_about_a_cnn_is_about_the_layer_not_the_input_shape(tmp_path):
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.LocalResponseNorm(2), nn.Flatten(), nn.Linear(4 * 6 * 6, 2)).eval()
    path = tmp_path / "cnn.pt2"
    torch.export.save(torch.export.export(model, (torch.randn(1, 1, 8, 8),)), str(path))
    with pytest.raises(FrontendError) as e:
        load_pt2(path)
    msg = str(e.value)
    assert "module '1', torch.nn.modules.normalization.LocalResponseNorm" in msg
    assert not re.search(r"\bshape\b|features", msg) and "module '3'" not in msg


@pytest.mark.parametrize("kind", ["GRU", "LSTM"])
def test_a_decomposed_recurrent_archive_names_the_recurrent_layer(kind, tmp_path):
    class Recurrent(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = getattr(nn, kind)(4, 3, batch_first=True)
            self.head = nn.Linear(3, 2)

        def forward(self, x):
            return self.head(self.rnn(x)[0][:, -1])

    ep = torch.export.export(Recurrent().eval(), (torch.randn(1, 5, 4),)).run_decompositions()
    assert not any("gru" in str(n.target) or "lstm" in str(n.target) for n in ep.graph.nodes)  # only its parts
    path = tmp_path / f"{kind}.pt2"
    torch.export.save(ep, str(path))
    with pytest.raises(FrontendError) as e:
        load_pt2(path)
    msg = str(e.value)
    assert f"nn.{kind} is a recurrent layer" in msg and "module 'rnn'" in msg
    assert "aten::zeros" not in msg and "aten::full" not in msg


def test_fixed_point_input_to_a_layer_the_quantization_pass_types_asks_for_a_float_model():
    from bitforge.models import InputQuant
    from bitforge.toolchain.fixed import FixedType

    model = nn.Sequential(InputQuant(FixedType(16, 6, True, "RND_CONV", "SAT")), nn.Conv1d(2, 2, 3))
    with pytest.raises(FrontendError, match="convolution of the fixed-point tensor .* keep the tensors before it"):
        from_torch(model, torch.randn(2, 2, 8))


def test_data_movement_and_max_pool_keep_a_fixed_point_type():
    from bitforge.models import InputQuant
    from bitforge.toolchain.fixed import FixedType

    t = FixedType(12, 4, True, "RND_CONV", "SAT")
    model = nn.Sequential(InputQuant(t), nn.MaxPool1d(2), nn.ReLU6(), nn.Flatten()).eval()
    g = from_torch(model, torch.randn(2, 3, 8))
    assert ops(g) == ["Quantize", "Pool", "Clip", "Reshape"]
    assert {g.tensors[n.output].dtype for n in g.nodes} == {t}
    x = inputs((20, 3, 8), seed=5)
    np.testing.assert_array_equal(emulate.run_values(g, x)[g.outputs[0]], torch_out(model.double(),
                                                                                     x.astype(np.float64)))


# -- ONNX export of the same models (torch.onnx.export's default exporter needs onnxscript) ---------------------

def test_torch_onnx_export_with_default_settings_works_on_a_small_cnn(tmp_path):
    import onnxruntime as ort

    module, shape, _ = done_when_models()["cnn2d-pooling"]
    module.eval()
    x = torch.from_numpy(inputs((2, *shape), seed=6))
    path = tmp_path / "cnn.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), str(path))  # defaults: the dynamo exporter, which imports onnxscript
    onnx.checker.check_model(onnx.load(str(path)))
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
    np.testing.assert_allclose(got, torch_out(module, x.numpy()), rtol=RTOL, atol=ATOL)


# -- end to end: bitforge compile of the saved 2-D CNN -----------------------------------------------------------

def test_compile_of_the_2d_cnn_archive_at_8_bits_to_onnx_has_no_mismatch(tmp_path):
    import json

    from bitforge.toolchain.cli import main

    module, shape, want = done_when_models()["cnn2d-pooling"]
    path = tmp_path / "cnn2d.pt2"
    torch.export.save(torch.export.export(module.eval(), (torch.randn(2, *shape),)), str(path))
    out = tmp_path / "out"
    assert main(["compile", str(path), "-o", str(out), "--precision", "8", "--to", "onnx", "--input-range=-2,2",
                 "--vectors", "2000"]) == 0
    report = json.loads((out / "report.json").read_text())
    check = report["verification"]["golden_vs_onnxruntime"]
    assert (check["vectors"], check["mismatches"], check["exact"]) == (2000, 0, True)
    assert (out / "model.onnx").is_file()
    layers = [op for op in ops(ir.load(out)) if op not in ("Quantize", "Requantize")]
    assert layers == want  # the layers as the frontend made them, typed


def test_a_decomposed_reflect_padded_conv_is_one_problem_naming_its_module():
    model = nn.Sequential(nn.Conv2d(2, 2, 3, padding=1, padding_mode="reflect"), nn.ReLU()).eval()
    ep = torch.export.export(model, (torch.randn(1, 2, 6, 6),)).run_decompositions()  # arange/abs/index, no pad op
    with pytest.raises(FrontendError) as e:
        from_exported(ep)
    msg = str(e.value)
    assert msg.count("module '0'") == 1 and "in the same module" in msg and "aten::index" in msg


def test_zero_padding_before_a_convolution_becomes_its_padding():
    model = nn.Sequential(Fn(lambda x: nn.functional.pad(x, (2, 1))), nn.Conv1d(2, 3, 3))
    x = inputs((4, 2, 9))
    g = from_torch(model, torch.from_numpy(x))
    assert ops(g) == ["Conv"] and g.nodes[0].padding == (2, 1)
    np.testing.assert_allclose(emulated(g, x), torch_out(model, x), rtol=RTOL, atol=ATOL)
    with pytest.raises(FrontendError, match="only zeros, before a convolution"):
        from_torch(Fn(lambda x: nn.functional.pad(x, (1, 1), mode="replicate")), torch.randn(2, 2, 5))
