"""The ONNX backend on the ops of the models people bring, at sizes test_every_op does not reach.

Each fixed-point graph runs through ``to_onnx`` + ONNX Runtime and through ``emulate.run`` on the same ~2,000
seeded vectors (every edge code of the input type filling whole vectors, vectors mixing edge codes element by
element, and random codes), and the int64 codes must be equal. Accumulator types are set explicitly, so these
graphs do not depend on the precision pass. Float graphs must agree within the verify tolerance. The last tests
check that what int64 cannot hold is refused with a clear error, never wrapped.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from bitforge.toolchain import emulate, fixed, ir, tables
from bitforge.toolchain.backends.onnx_backend import OnnxExportError, run_onnxruntime, to_onnx
from bitforge.toolchain.backends.onnx_layers import FIXED_RULES, FLOAT_RULES, TABLE_FLOAT
from bitforge.toolchain.fixed import FixedType, parse_type
from bitforge.toolchain.verify.compare import FLOAT_ATOL, FLOAT_RTOL

T = parse_type
VECTORS = 2000
X8 = T("fixed<8,3,TRN,WRAP>")
W6, B10 = T("fixed<6,1>"), T("fixed<10,4>")
OUT = T("fixed<10,4,RND_CONV,SAT>")


def graph(name: str, inputs: list[ir.TensorSpec], layers: list[tuple[ir.Node, ir.TensorSpec]]) -> ir.Graph:
    tensors = {s.name: s for s in inputs} | {s.name: s for _, s in layers}
    return ir.validate(ir.Graph(name, [s.name for s in inputs], [layers[-1][1].name], tensors,
                                [n for n, _ in layers]))


def codes(rng: np.random.Generator, t: FixedType, shape) -> np.ndarray:
    return rng.integers(t.min_code, t.max_code, size=shape, endpoint=True, dtype=np.int64)


def edge_codes(t: FixedType) -> np.ndarray:
    wanted = {t.min_code, t.min_code + 1, -2, -1, 0, 1, 2, t.max_code - 1, t.max_code}
    return np.array(sorted(c for c in wanted if t.min_code <= c <= t.max_code), dtype=np.int64)


def vectors(rng: np.random.Generator, t: FixedType, shape, n: int = VECTORS) -> np.ndarray:
    """Every edge code as a whole vector, then vectors of edge codes mixed element-wise, then random codes."""
    edges = edge_codes(t)
    whole = np.broadcast_to(edges.reshape(-1, *(1,) * len(shape)), (len(edges), *shape))
    mixed = rng.choice(edges, size=(n // 4, *shape))
    return np.concatenate([whole, mixed, codes(rng, t, (n - len(edges) - n // 4, *shape))])


def check_bit_exact(g: ir.Graph, feeds: dict[str, np.ndarray], opset: int = 17) -> np.ndarray:
    got = run_onnxruntime(to_onnx(g, opset=opset), feeds)
    y = g.outputs[0]
    want = emulate.run(g, feeds)[y]
    have = got[f"{y}_code"]
    assert have.dtype == np.int64 and have.shape == want.shape
    if not np.array_equal(have, want):
        bad = np.argwhere(have != want)
        i = tuple(int(v) for v in bad[0])
        raise AssertionError(f"graph '{g.name}': {len(bad)} of {have.size} codes differ; first at {i}: "
                             f"onnxruntime {have[i]}, golden {want[i]}")
    assert np.array_equal(got[y], fixed.to_float(want, g.tensors[y].dtype))
    return want


def assert_varied(y: np.ndarray) -> None:
    """Test set-up: an output stuck at one code would make a bit-exact comparison say little."""
    assert len(np.unique(y)) > 8


def conv_accum(xt: FixedType, wt: FixedType, width: int, overflow: str = "WRAP") -> FixedType:
    frac = xt.frac + wt.frac
    return T(f"fixed<{width},{width - frac},TRN,{overflow}>")


# -- convolutions ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("multiplier", [1, 2])
@pytest.mark.parametrize("accum_overflow", ["WRAP", "SAT"])
def test_depthwise_2d_conv_on_8x8x3_is_bit_exact(multiplier, accum_overflow):
    """groups = 3 on 3 channels (depthwise; multiplier 2 gives each group two output channels), 3x3 kernel,
    'same' padding; a 13-bit accumulator is too narrow for the worst case, so its overflow mode acts."""
    rng = np.random.default_rng(1)
    c_out = 3 * multiplier
    node = ir.Conv("dw", ("x",), ("y",), weight=codes(rng, W6, (c_out, 1, 3, 3)), bias=codes(rng, B10, c_out),
                   stride=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=3, weight_type=W6, bias_type=B10,
                   accum_type=conv_accum(X8, W6, 13, accum_overflow))
    g = graph("depthwise", [ir.TensorSpec("x", (3, 8, 8), X8)], [(node, ir.TensorSpec("y", (c_out, 8, 8), OUT))])
    y = check_bit_exact(g, {"x": vectors(rng, X8, (3, 8, 8))})
    assert_varied(y)


def test_strided_2d_conv_with_uneven_padding_is_bit_exact():
    rng = np.random.default_rng(2)
    wt = T("fixed<5,2>")
    node = ir.Conv("conv", ("x",), ("y",), weight=codes(rng, wt, (4, 3, 3, 2)), bias=codes(rng, B10, 4),
                   stride=(2, 3), padding=(2, 0, 1, 1), dilation=(1, 2), groups=1, weight_type=wt, bias_type=B10,
                   accum_type=conv_accum(X8, wt, 24))
    g = graph("conv2d", [ir.TensorSpec("x", (3, 7, 8), X8)], [(node, ir.TensorSpec("y", (4, 4, 3), OUT))])
    assert_varied(check_bit_exact(g, {"x": vectors(rng, X8, (3, 7, 8))}))


def test_dilated_1d_conv_with_groups_is_bit_exact():
    rng = np.random.default_rng(3)
    xt = T("fixed<12,5,RND,SAT>")
    node = ir.Conv("conv1d", ("x",), ("y",), weight=codes(rng, W6, (4, 2, 3)), bias=None, stride=(2,),
                   padding=(3, 2), dilation=(3,), groups=2, weight_type=W6, accum_type=conv_accum(xt, W6, 20))
    out_len = (16 + 3 + 2 - 3 * 2 - 1) // 2 + 1
    g = graph("conv1d", [ir.TensorSpec("x", (4, 16), xt)],
              [(node, ir.TensorSpec("y", (4, out_len), T("fixed<9,3,RND_INF,SAT_SYM>")))])
    assert_varied(check_bit_exact(g, {"x": vectors(rng, xt, (4, 16))}))


# -- pooling -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("recip_frac", [0, 7, 16, 32])
def test_global_average_pool_with_a_non_power_of_two_divisor_is_bit_exact(recip_frac):
    """15 elements per channel: R = round(2**recip_frac / 15) is no exact reciprocal, and at recip_frac 0 it is 0."""
    rng = np.random.default_rng(4)
    node = ir.Pool("gap", ("x",), ("y",), mode="avg", kernel=(5, 3), stride=(1, 1), padding=(0, 0, 0, 0),
                   recip_frac=recip_frac)
    g = graph("gap", [ir.TensorSpec("x", (4, 5, 3), X8)],
              [(node, ir.TensorSpec("y", (4, 1, 1), T("fixed<12,4,RND_CONV,SAT>")))])
    y = check_bit_exact(g, {"x": vectors(rng, X8, (4, 5, 3))})
    if recip_frac:
        assert_varied(y)


@pytest.mark.parametrize("count_include_pad", [False, True])
def test_padded_1d_average_pool_is_bit_exact(count_include_pad):
    rng = np.random.default_rng(5)
    node = ir.Pool("avg", ("x",), ("y",), mode="avg", kernel=(3,), stride=(2,), padding=(2, 1),
                   count_include_pad=count_include_pad, recip_frac=10)
    g = graph("avg1d", [ir.TensorSpec("x", (2, 9), X8)], [(node, ir.TensorSpec("y", (2, 5), OUT))])
    assert_varied(check_bit_exact(g, {"x": vectors(rng, X8, (2, 9))}))


def test_padded_max_pool_never_picks_the_padding():
    """Unsigned codes would hide a padding of 0 winning; negative-only inputs show it."""
    rng = np.random.default_rng(6)
    node = ir.Pool("max", ("x",), ("y",), mode="max", kernel=(3, 3), stride=(2, 2), padding=(1, 2, 1, 2))
    g = graph("maxpool", [ir.TensorSpec("x", (2, 6, 5), X8)],
              [(node, ir.TensorSpec("y", (2, 3, 4), T("fixed<7,2,RND,SAT>")))])
    x = vectors(rng, X8, (2, 6, 5))
    x[VECTORS // 2:] = -(np.abs(x[VECTORS // 2:]) % 128) - 1  # all-negative windows
    y = check_bit_exact(g, {"x": x})
    assert_varied(y)
    assert (y[VECTORS // 2:] < 0).all()


# -- tables ------------------------------------------------------------------------------------------------------

def test_softmax_over_10_classes_of_wide_inputs_is_bit_exact():
    rng = np.random.default_rng(7)
    xt = T("fixed<16,8,RND,SAT>")
    st = tables.softmax_tables(xt, 10)
    node = ir.Softmax("softmax", ("x",), ("y",), exp_table=st.exp_table, exp_type=st.exp_type,
                      exp_shift=st.exp_shift, recip_table=st.recip_table, recip_type=st.recip_type,
                      recip_lo=st.recip_lo, recip_shift=st.recip_shift)
    g = graph("softmax10", [ir.TensorSpec("x", (10,), xt)],
              [(node, ir.TensorSpec("y", (10,), T("ufixed<16,1,RND_CONV,SAT>")))])
    x = vectors(rng, xt, (10,))
    x[-VECTORS // 4:] //= 64  # close logits too: many terms of the sum are far from 0 and 1
    assert st.exp_shift > 0 and st.recip_shift > 0, "test set-up: both table indices should shift"
    assert_varied(check_bit_exact(g, {"x": x}))


@pytest.mark.parametrize("function", ["sigmoid", "tanh", "gelu", "silu"])
def test_table_with_a_shifted_index_is_bit_exact_inside_and_outside_its_range(function):
    rng = np.random.default_rng(8)
    xt, yt = T("fixed<12,4,TRN,SAT>"), T("fixed<10,2,RND_CONV,SAT>")
    built = tables.build_table(function, xt, -900, 700, yt, size=128)
    assert built.index_shift > 0, "test set-up: the index should shift"
    node = ir.Table(function, ("x",), ("y",), function=function, table=built.table, index_lo=built.index_lo,
                    index_shift=built.index_shift)
    g = graph(f"table_{function}", [ir.TensorSpec("x", (3,), xt)], [(node, ir.TensorSpec("y", (3,), yt))])
    every = np.arange(xt.min_code, xt.max_code + 1, dtype=np.int64)  # both clamped ends and every bucket edge
    x = np.concatenate([every, vectors(rng, xt, (3,)).ravel()])
    assert_varied(check_bit_exact(g, {"x": x[: len(x) // 3 * 3].reshape(-1, 3)}))


# -- per-channel and element-wise ops ------------------------------------------------------------------------------

@pytest.mark.parametrize("accum", ["fixed<16,3,TRN,SAT>", "fixed<17,4,TRN,WRAP>", "fixed<40,27,TRN,WRAP>"])
def test_scale_shift_per_channel_is_bit_exact(accum):
    rng = np.random.default_rng(9)
    st, ht = T("fixed<10,2>"), T("fixed<8,3>")
    node = ir.ScaleShift("bn", ("x",), ("y",), scale=codes(rng, st, 3), shift=codes(rng, ht, 3), scale_type=st,
                         shift_type=ht, accum_type=T(accum))
    g = graph("scale_shift", [ir.TensorSpec("x", (3, 4, 5), X8)], [(node, ir.TensorSpec("y", (3, 4, 5), OUT))])
    assert_varied(check_bit_exact(g, {"x": vectors(rng, X8, (3, 4, 5))}))


@pytest.mark.parametrize("alpha", [[-3], [3, -5, 13]])
def test_leaky_relu_with_one_or_per_channel_slopes_is_bit_exact(alpha):
    rng = np.random.default_rng(10)
    node = ir.LeakyReLU("prelu", ("x",), ("y",), alpha=np.array(alpha), alpha_type=T("fixed<6,1>"))
    g = graph("prelu", [ir.TensorSpec("x", (3, 7), X8)],
              [(node, ir.TensorSpec("y", (3, 7), T("fixed<8,3,RND_ZERO,SAT>")))])
    assert_varied(check_bit_exact(g, {"x": vectors(rng, X8, (3, 7))}))


@pytest.mark.parametrize(("lo", "hi"), [(0.0, 6.0), (-1.0, 1.0), (None, 2.3), (-0.3, None), (0.05, 0.06)])
def test_clip_bounds_off_the_grid_and_one_sided_are_bit_exact(lo, hi):
    """(0.05, 0.06) holds no code of the input type (LSB 1/32): the golden rule then gives floor(0.06 * 32) = 1
    everywhere."""
    rng = np.random.default_rng(11)
    node = ir.Clip("clip", ("x",), ("y",), lo=lo, hi=hi)
    g = graph("clip", [ir.TensorSpec("x", (5,), X8)], [(node, ir.TensorSpec("y", (5,), T("fixed<8,3,RND,SAT>")))])
    y = check_bit_exact(g, {"x": vectors(rng, X8, (5,))})
    if lo == 0.05:
        assert (y == 1).all()
    else:
        assert_varied(y)


@pytest.mark.parametrize("swish", [False, True])
@pytest.mark.parametrize(("alpha", "beta"), [(1 / 6, 0.5), (0.2, 0.5), (0.25, 0.375)])
def test_hard_sigmoid_and_hard_swish_are_bit_exact(swish, alpha, beta):
    rng = np.random.default_rng(12)
    at = T("fixed<16,2>")
    node = ir.HardSigmoid("hs", ("x",), ("y",), alpha=alpha, beta=beta, swish=swish, alpha_type=at,
                          alpha_code=round(alpha * 2 ** at.frac), beta_code=round(beta * 2 ** at.frac))
    g = graph("hard", [ir.TensorSpec("x", (6,), X8)], [(node, ir.TensorSpec("y", (6,), OUT))])
    assert_varied(check_bit_exact(g, {"x": vectors(rng, X8, (6,))}))


@pytest.mark.parametrize("swish", [False, True])
def test_hard_sigmoid_saturates_at_exactly_one_in_a_fine_output_type(swish):
    """An output finer than the clamp's LSB shows whether the top is 2**F itself (one) or one code below."""
    rng = np.random.default_rng(21)
    at = T("fixed<16,2>")
    yt = T("fixed<30,6,TRN,SAT>")  # frac 24 = frac(x) + frac(alpha) + frac(x): every code exact
    node = ir.HardSigmoid("hs", ("x",), ("y",), alpha=0.2, beta=0.5, swish=swish, alpha_type=at,
                          alpha_code=round(0.2 * 2 ** at.frac), beta_code=round(0.5 * 2 ** at.frac))
    g = graph("hard_fine", [ir.TensorSpec("x", (6,), X8)], [(node, ir.TensorSpec("y", (6,), yt))])
    x = vectors(rng, X8, (6,))
    y = check_bit_exact(g, {"x": x})
    big = x >= 3 << X8.frac  # h(x) = 1 from x = 2.5 on
    one = 1 << yt.frac
    assert big.sum() > 100
    assert np.array_equal(y[big], (x[big] << (yt.frac - X8.frac)) if swish else np.full(big.sum(), one))


def test_argmax_keeps_the_first_of_tied_maxima():
    rng = np.random.default_rng(13)
    xt = T("fixed<2,1>")  # 4 codes over 9 elements: ties everywhere
    g = graph("argmax", [ir.TensorSpec("x", (2, 9), xt)],
              [(ir.ArgMax("argmax", ("x",), ("y",)), ir.TensorSpec("y", (2, 1), T("ufixed<4,4>")))])
    x = vectors(rng, xt, (2, 9))
    y = check_bit_exact(g, {"x": x})
    assert np.array_equal(y[..., 0], np.argmax(x, axis=-1))  # numpy's argmax: the first maximum


# -- data movement in a chain ---------------------------------------------------------------------------------------

def test_conv_transpose_reshape_concat_chain_is_bit_exact():
    """Layouts must survive the batch axis: channels-first per sample, the batch first in ONNX."""
    rng = np.random.default_rng(14)
    conv = ir.Conv("conv", ("x",), ("c",), weight=codes(rng, W6, (2, 3, 2, 2)), stride=(1, 1), padding=(0, 0, 0, 0),
                   dilation=(1, 1), groups=1, weight_type=W6, accum_type=conv_accum(X8, W6, 20))
    layers = [
        (conv, ir.TensorSpec("c", (2, 3, 4), OUT)),
        (ir.Transpose("t", ("c",), ("t",), perm=(1, 2, 0)), ir.TensorSpec("t", (3, 4, 2), OUT)),
        (ir.Reshape("flat", ("t",), ("f",)), ir.TensorSpec("f", (3, 8), OUT)),
        (ir.Concat("cat", ("f", "z"), ("y",), axis=1), ir.TensorSpec("y", (3, 13), T("fixed<8,3,RND,SAT>"))),
    ]
    g = graph("chain", [ir.TensorSpec("x", (3, 4, 5), X8), ir.TensorSpec("z", (3, 5), X8)], layers)
    feeds = {"x": vectors(rng, X8, (3, 4, 5)), "z": vectors(rng, X8, (3, 5))}
    assert_varied(check_bit_exact(g, feeds))


@pytest.mark.parametrize("opset", [13, 18, 21])
def test_reductions_give_the_same_codes_in_every_opset(opset):
    """ReduceMax takes its axes as an input from opset 18 on (ReduceSum from 13): both forms must agree."""
    rng = np.random.default_rng(15)
    pool = ir.Pool("max", ("x",), ("p",), mode="max", kernel=(2,), stride=(2,), padding=(1, 1))
    avg = ir.Pool("avg", ("p",), ("a",), mode="avg", kernel=(3,), stride=(1,), padding=(1, 1), recip_frac=9)
    st = tables.softmax_tables(X8, 6, size=64)
    soft = ir.Softmax("softmax", ("a",), ("y",), exp_table=st.exp_table, exp_type=st.exp_type, exp_shift=st.exp_shift,
                      recip_table=st.recip_table, recip_type=st.recip_type, recip_lo=st.recip_lo,
                      recip_shift=st.recip_shift)
    g = graph("reductions", [ir.TensorSpec("x", (2, 10), X8)],
              [(pool, ir.TensorSpec("p", (2, 6), X8)), (avg, ir.TensorSpec("a", (2, 6), X8)),
               (soft, ir.TensorSpec("y", (2, 6), T("ufixed<10,1,RND_CONV,SAT>")))])
    assert_varied(check_bit_exact(g, {"x": vectors(rng, X8, (2, 10))}, opset=opset))


# -- float forms ----------------------------------------------------------------------------------------------------

def check_float(g: ir.Graph, x: np.ndarray, opset: int = 17) -> None:
    y = g.outputs[0]
    got = run_onnxruntime(to_onnx(g, opset=opset), {g.inputs[0]: x})[y]
    want = emulate.run(g, {g.inputs[0]: x})[y]
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=FLOAT_RTOL, atol=FLOAT_ATOL, err_msg=g.name)


def floats(rng, *shape) -> np.ndarray:
    return rng.uniform(-6, 6, (VECTORS, *shape)).astype(np.float32)


def test_every_table_function_has_a_float_onnx_form_within_tolerance():
    assert set(TABLE_FLOAT) == set(tables.FUNCTIONS)
    rng = np.random.default_rng(16)
    for function in sorted(tables.FUNCTIONS):
        g = graph(f"float_{function}", [ir.TensorSpec("x", (4,))],
                  [(ir.Table("f", ("x",), ("y",), function=function), ir.TensorSpec("y", (4,)))])
        check_float(g, floats(rng, 4))


@pytest.mark.parametrize("groups", [1, 2])
def test_float_1d_conv_and_padded_average_pool_are_within_tolerance(groups):
    rng = np.random.default_rng(17)
    conv = ir.Conv("conv", ("x",), ("c",), weight=rng.normal(0, 0.5, (4, 4 // groups, 3)).astype(np.float32),
                   bias=rng.normal(0, 0.5, 4).astype(np.float32), stride=(2,), padding=(2, 1), dilation=(2,),
                   groups=groups)
    pool = ir.Pool("avg", ("c",), ("y",), mode="avg", kernel=(3,), stride=(1,), padding=(1, 1), count_include_pad=True)
    g = graph("float_conv_pool", [ir.TensorSpec("x", (4, 12))],
              [(conv, ir.TensorSpec("c", (4, 6))), (pool, ir.TensorSpec("y", (4, 6)))])
    check_float(g, floats(rng, 4, 12))


@pytest.mark.parametrize(("alpha", "beta", "opset"), [(1 / 6, 0.5, 17), (1 / 6, 0.5, 13), (0.2, 0.5, 17)])
def test_float_hard_swish_is_within_tolerance(alpha, beta, opset):
    g = graph("float_hswish", [ir.TensorSpec("x", (6,))],
              [(ir.HardSigmoid("hs", ("x",), ("y",), alpha=alpha, beta=beta, swish=True), ir.TensorSpec("y", (6,)))])
    model = to_onnx(g, opset=opset)
    assert ("HardSwish" in {n.op_type for n in model.graph.node}) == (alpha == 1 / 6 and opset >= 14)
    check_float(g, floats(np.random.default_rng(18), 6), opset=opset)


def test_float_per_channel_ops_broadcast_over_channels_not_the_batch():
    rng = np.random.default_rng(19)
    f = lambda *s: rng.normal(0, 1, s).astype(np.float32)  # noqa: E731
    layers = [
        (ir.ScaleShift("bn", ("x",), ("s",), scale=f(3), shift=f(3)), ir.TensorSpec("s", (3, 5))),
        (ir.LeakyReLU("prelu", ("s",), ("p",), alpha=f(3)), ir.TensorSpec("p", (3, 5))),
        (ir.Clip("clip", ("p",), ("y",), lo=None, hi=1.5), ir.TensorSpec("y", (3, 5))),
    ]
    check_float(graph("float_channels", [ir.TensorSpec("x", (3, 5))], layers), floats(rng, 3, 5))


@pytest.mark.parametrize("opset", [13, 21])
def test_every_float_form_agrees_in_the_oldest_and_newest_opset(opset):
    """test_every_op runs the float graphs at the default opset; some float ops differ by opset (HardSwish from
    14 on, Reduce* axes as inputs from 18 on)."""
    import test_every_op as every

    rng = np.random.default_rng(22)
    for op in sorted(every.FLOAT):
        g = every.FLOAT[op](np.random.default_rng(sum(map(ord, op))))
        feeds = {name: rng.uniform(-6, 6, (500, *g.tensors[name].shape)).astype(np.float32) for name in g.inputs}
        y = g.outputs[0]
        got = run_onnxruntime(to_onnx(g, opset=opset), feeds)[y]
        np.testing.assert_allclose(got, emulate.run(g, feeds)[y], rtol=FLOAT_RTOL, atol=FLOAT_ATOL, err_msg=op)


@pytest.mark.parametrize("opset", [13, 21])
def test_every_fixed_op_graph_is_bit_exact_in_the_oldest_and_newest_opset(opset):
    import test_every_op as every

    rng = np.random.default_rng(23)
    for op in sorted(every.FIXED):
        g = every.FIXED[op](np.random.default_rng(sum(map(ord, op))))
        feeds = {name: (vectors(rng, g.tensors[name].dtype, g.tensors[name].shape, 500) if not g.tensors[name].is_float
                        else rng.uniform(-6, 6, (500, *g.tensors[name].shape)).astype(np.float32)) for name in g.inputs}
        check_bit_exact(g, feeds, opset=opset)


def test_every_new_op_has_both_lowerings():
    new_ops = {"Conv", "Pool", "ScaleShift", "LeakyReLU", "Clip", "HardSigmoid", "Table", "Softmax", "ArgMax",
               "Reshape", "Transpose", "Concat"}
    assert new_ops <= set(ir.OPS)
    assert set(FIXED_RULES) == new_ops and set(FLOAT_RULES) == new_ops


# -- the model file and int64 range ----------------------------------------------------------------------------------

def test_same_conv_graph_gives_byte_identical_model(tmp_path):
    rng = np.random.default_rng(20)
    node = ir.Conv("conv", ("x",), ("y",), weight=codes(rng, W6, (2, 1, 3)), bias=codes(rng, B10, 2), stride=(1,),
                   padding=(1, 1), dilation=(1,), groups=2, weight_type=W6, bias_type=B10,
                   accum_type=conv_accum(X8, W6, 16))
    g = graph("det", [ir.TensorSpec("x", (2, 6), X8)], [(node, ir.TensorSpec("y", (2, 6), OUT))])
    ir.save(g, tmp_path)
    first = to_onnx(g).SerializeToString()
    assert first == to_onnx(ir.load(tmp_path)).SerializeToString()
    onnx.checker.check_model(onnx.load_from_string(first), full_check=True)


def test_too_wide_conv_is_refused_naming_the_node():
    """40-bit codes times 40-bit weights over 18 taps: partial sums beyond 2**63, which ONNX Runtime would wrap."""
    xt, wt = T("fixed<40,10>"), T("fixed<40,10>")
    node = ir.Conv("wide_conv", ("x",), ("y",), weight=np.full((2, 2, 3, 3), wt.max_code, dtype=np.int64),
                   stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1, weight_type=wt,
                   accum_type=T("fixed<90,30>"))
    g = graph("wide", [ir.TensorSpec("x", (2, 4, 4), xt)], [(node, ir.TensorSpec("y", (2, 2, 2), T("fixed<16,8>")))])
    with pytest.raises(OnnxExportError, match=r"'wide_conv'.*int64"):
        to_onnx(g)


def test_too_wide_scale_shift_is_refused_naming_the_node():
    xt, st = T("fixed<40,10>"), T("fixed<30,2>")
    node = ir.ScaleShift("wide_bn", ("x",), ("y",), scale=np.array([st.max_code, st.min_code]), scale_type=st,
                         accum_type=T("fixed<80,22>"))
    g = graph("wide_bn", [ir.TensorSpec("x", (2, 3), xt)], [(node, ir.TensorSpec("y", (2, 3), T("fixed<16,8>")))])
    with pytest.raises(OnnxExportError, match=r"'wide_bn'.*int64"):
        to_onnx(g)


def test_missing_conv_accumulator_points_at_the_precision_pass():
    node = ir.Conv("conv", ("x",), ("y",), weight=np.ones((1, 1, 2), dtype=np.int64), stride=(1,), padding=(0, 0),
                   dilation=(1,), groups=1, weight_type=W6)
    g = graph("noacc", [ir.TensorSpec("x", (1, 4), X8)], [(node, ir.TensorSpec("y", (1, 3), OUT))])
    with pytest.raises(OnnxExportError, match="'conv'.*accum_type.*precision pass"):
        to_onnx(g)
