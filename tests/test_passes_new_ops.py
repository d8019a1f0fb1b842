"""The interval, precision and quantization passes on the ops of the models people bring (issue 18).

A float CNN (Conv -> ScaleShift -> LeakyReLU -> max Pool -> Reshape -> Dense -> sigmoid Table) and a softmax MLP
are quantized at 8 and at w8/a16 bits; the fixed graphs must track the float ones within an error bound derived
from the chosen types (see :func:`error_bounds`), contain their golden values in their interval bounds, and hold
accumulators that cannot overflow. The interval rules themselves are checked for exactness where they claim it
(element-wise ops over every code of an 8-bit input) and for soundness on random geometries and functions.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bitforge.toolchain import emulate, ir, tables
from bitforge.toolchain.fixed import FixedType, parse_type, quantize, to_float
from bitforge.toolchain.passes.intervals import analyze
from bitforge.toolchain.passes.precision import check_precision, infer_precision
from bitforge.toolchain.passes.quantize import (PrecisionSpecError, QuantizeError, parse_precision,
                                                quantize_graph)
from bitforge.toolchain.windows import output_spatial

T = parse_type
SPECS = ["8", "w8a16"]


# -- the float models ---------------------------------------------------------------------------------------

def _normal(rng, *shape, scale=0.5) -> np.ndarray:
    return (rng.normal(size=shape) * scale).astype(np.float32)


def float_cnn(seed: int = 0) -> ir.Graph:
    rng = np.random.default_rng(seed)
    g = ir.sequential("cnn", ir.TensorSpec("x", (1, 8, 8)), [
        (ir.Conv("conv", ("x",), ("c",), weight=_normal(rng, 4, 1, 3, 3), bias=_normal(rng, 4, scale=0.1),
                 stride=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1)), ir.TensorSpec("c", (4, 8, 8))),
        (ir.ScaleShift("bn", ("c",), ("s",), scale=1 + _normal(rng, 4, scale=0.2), shift=_normal(rng, 4, scale=0.1)),
         ir.TensorSpec("s", (4, 8, 8))),
        (ir.LeakyReLU("leaky", ("s",), ("l",), alpha=np.array([0.1], np.float32)), ir.TensorSpec("l", (4, 8, 8))),
        (ir.Pool("pool", ("l",), ("p",), mode="max", kernel=(2, 2), stride=(2, 2), padding=(0, 0, 0, 0)),
         ir.TensorSpec("p", (4, 4, 4))),
        (ir.Reshape("flat", ("p",), ("r",)), ir.TensorSpec("r", (64,))),
        (ir.Dense("fc", ("r",), ("z",), weight=_normal(rng, 3, 64, scale=0.2), bias=_normal(rng, 3, scale=0.1)),
         ir.TensorSpec("z", (3,))),
        (ir.Table("sig", ("z",), ("y",), function="sigmoid"), ir.TensorSpec("y", (3,)))])
    g.metadata["input_range"] = [-1.0, 1.0]
    return ir.validate(g)


def softmax_mlp(seed: int = 0) -> ir.Graph:
    rng = np.random.default_rng(seed)
    g = ir.sequential("mlp", ir.TensorSpec("x", (6,)), [
        (ir.Dense("fc1", ("x",), ("h",), weight=_normal(rng, 12, 6), bias=_normal(rng, 12, scale=0.2)),
         ir.TensorSpec("h", (12,))),
        (ir.ReLU("relu", ("h",), ("a",)), ir.TensorSpec("a", (12,))),
        (ir.Dense("fc2", ("a",), ("z",), weight=_normal(rng, 4, 12), bias=_normal(rng, 4, scale=0.2)),
         ir.TensorSpec("z", (4,))),
        (ir.Softmax("softmax", ("z",), ("y",)), ir.TensorSpec("y", (4,)))])
    g.metadata["input_range"] = [-2.0, 2.0]
    return ir.validate(g)


def _inputs(g: ir.Graph, n: int = 300, seed: int = 1) -> np.ndarray:
    """Random inputs inside the declared range, plus its two corners (where the extremes of a layer often are)."""
    lo, hi = g.metadata["input_range"]
    x = np.random.default_rng(seed).uniform(lo, hi, (n, *g.tensors[g.inputs[0]].shape)).astype(np.float32)
    x[0], x[1] = lo, hi
    return x


# -- the error bound ----------------------------------------------------------------------------------------

def _half(q: ir.Graph, t: str) -> float:
    return q.tensors[t].dtype.lsb / 2


def _conv_of(n: ir.Conv, x: np.ndarray, weight: np.ndarray, out_shape) -> np.ndarray:
    """The float Conv of ``x`` with other weights and no bias (a window sum of bound maps, or of weight errors)."""
    return emulate.conv_float(dataclasses.replace(n, weight=weight.astype(np.float32), bias=None),
                              x.astype(np.float32), out_shape).astype(np.float64)


def _off(float_node: ir.Node, q_node: ir.Node, field: str, type_field: str) -> np.ndarray:
    """How far the quantized array's real values are from the float ones (0 when the layer has no such array)."""
    a = getattr(float_node, field)
    if a is None:
        return np.zeros(1)
    return to_float(getattr(q_node, field), getattr(q_node, type_field)) - a.astype(np.float64)


def sigmoid_table_error(q: ir.Graph, name: str) -> float:
    """max |table(c) - sigmoid(c)| over every code c of the table's input type: measured exhaustively."""
    n = q.node(name)
    xt, yt = q.tensors[n.input].dtype, q.tensors[n.output].dtype
    codes = np.arange(xt.min_code, xt.max_code + 1, dtype=np.int64)
    got = to_float(tables.lookup(codes, n.table, n.index_lo, n.index_shift), yt)
    return float(np.abs(got - tables.function("sigmoid")(to_float(codes, xt))).max())


def softmax_table_error(q: ir.Graph, name: str) -> float:
    """A first-order bound on |fixed softmax(z) - softmax(z)| for z on the input type's grid, from the tables.

    exp(-d) is read at its bucket's middle, at most h_e = (2**exp_shift - 1) / 2 input LSBs away: a relative error
    of e**h_e - 1 per term (and the sum), plus half an exp LSB per term (n of them in the sum); 1/S is read at most
    h_r = (2**recip_shift - 1) / 2 exp LSBs from S >= 1: a relative error of h_r, plus half a reciprocal LSB; the
    product is rounded to the output type (half an LSB). A quarter more covers the products of these first-order
    terms (each below 1 %).
    """
    n = q.node(name)
    xt, yt = q.tensors[n.input].dtype, q.tensors[n.output].dtype
    count = q.tensors[n.input].shape[-1]
    rel_e = np.expm1((2 ** n.exp_shift - 1) / 2 * xt.lsb)
    h_r = (2 ** n.recip_shift - 1) / 2 * n.exp_type.lsb
    first_order = 2 * rel_e + h_r + count * n.exp_type.lsb / 2
    return 1.25 * first_order + n.exp_type.lsb / 2 + n.recip_type.lsb / 2 + yt.lsb / 2


def error_bounds(q: ir.Graph, g: ir.Graph, x: np.ndarray) -> dict[str, np.ndarray]:
    """Worst case of |fixed - float| for every tensor, per sample and element.

    With x' = x + e the fixed input (|e| <= d) and W' = W + E the quantized weights, ``W'x' + b' - (W x + b) =
    W' e + E x + (b' - b)``: the first term is at most ``|W'| d``, the other two are computed exactly from the
    float input and the weights' real values. Every cast rounds to nearest (RND_CONV: half an LSB); a tensor
    saturates only towards its float value's range (the types hold the calibration or proven range), which shrinks
    the error. Per op: Dense/Conv as above, ScaleShift ``|s'| d + |(s' - s) x + (t' - t)|``, LeakyReLU
    ``max(1, |a'|) d + |(a' - a) x|`` (x < 0), ReLU and max pooling are 1-Lipschitz (the window max of d), a
    reshape moves d; then half the output LSB. The sigmoid table adds its exhaustively measured error to 0.25 d
    (sigmoid's slope is at most 1/4); a softmax moves by at most max(d) / 2 (sum_j |dy_i/dz_j| = 2 y_i (1 - y_i)
    <= 1/2) plus :func:`softmax_table_error`.
    """
    env = emulate.run(g, x, keep=True)
    d = {q.nodes[0].output: np.full(x.shape, _half(q, q.nodes[0].output))}
    for n in q.nodes[1:]:
        f = g.node(n.name)
        x_f, d_in = env[f.input].astype(np.float64), d[n.input]
        out = n.output
        if isinstance(n, ir.Dense):
            w = to_float(n.weight, n.weight_type)
            e = d_in @ np.abs(w).T + np.abs(x_f @ _off(f, n, "weight", "weight_type").T
                                            + _off(f, n, "bias", "bias_type"))
        elif isinstance(n, ir.Conv):
            w, shape = to_float(n.weight, n.weight_type), q.tensors[out].shape
            e = _conv_of(n, d_in, np.abs(w), shape) + np.abs(
                _conv_of(n, x_f, _off(f, n, "weight", "weight_type"), shape)
                + _off(f, n, "bias", "bias_type").reshape(-1, 1, 1))
        elif isinstance(n, ir.ScaleShift):
            s = to_float(n.scale, n.scale_type).reshape(-1, 1, 1)
            e = np.abs(s) * d_in + np.abs(_off(f, n, "scale", "scale_type").reshape(-1, 1, 1) * x_f
                                          + _off(f, n, "shift", "shift_type").reshape(-1, 1, 1))
        elif isinstance(n, ir.LeakyReLU):
            a = to_float(n.alpha, n.alpha_type).reshape(-1, 1, 1)
            e = np.maximum(1.0, np.abs(a)) * d_in + np.abs(_off(f, n, "alpha", "alpha_type").reshape(-1, 1, 1)
                                                          * np.minimum(x_f, 0.0))
        elif isinstance(n, ir.ReLU):
            e = d_in
        elif isinstance(n, ir.Pool):
            assert n.mode == "max"
            e = emulate.pool_float(n, d_in.astype(np.float32), q.tensors[out].shape).astype(np.float64)
        elif isinstance(n, ir.Reshape):
            d[out] = d_in.reshape(len(d_in), *q.tensors[out].shape)
            continue
        elif isinstance(n, ir.Table):
            assert n.function == "sigmoid"
            d[out] = 0.25 * d_in + sigmoid_table_error(q, n.name)
            continue
        elif isinstance(n, ir.Softmax):
            d[out] = d_in.max(axis=-1, keepdims=True) / 2 + softmax_table_error(q, n.name)
            continue
        else:
            raise AssertionError(f"no error rule for {n.describe()}")
        d[out] = e + _half(q, out)
    return d


# -- quantizing the models ----------------------------------------------------------------------------------

@pytest.mark.parametrize("model", [float_cnn, softmax_mlp])
@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("calibrate", [False, True])
def test_the_quantized_model_tracks_the_float_one_within_the_lsb_error_bound(model, spec, calibrate):
    g = model()
    x = _inputs(g)
    q = quantize_graph(g, spec, calibration=x if calibrate else None)
    ir.validate(q)
    assert q.is_fixed and all(not isinstance(n, ir.Quantize) for n in q.nodes[1:])
    width = 8 if spec == "8" else 16
    assert all(q.tensors[t].dtype.width == width for t in q.tensors if t not in ("x", q.outputs[0]))
    got, want = emulate.run(q, x, keep=True), emulate.run(g, x, keep=True)
    bound = error_bounds(q, g, x)
    margin = 1e-4  # the float32 reference's own rounding
    for name, b in bound.items():
        float_name = "x" if name == q.nodes[0].output else name
        err = np.abs(to_float(got[name], q.tensors[name].dtype) - want[float_name])
        assert np.all(err <= b + margin), f"{spec}: tensor '{name}' is {err.max():.4g} off, bound {b.max():.4g}"
    # The bound is a worst case: the activations' rounding errors add up linearly in it over the last Dense's
    # inputs (at 16 bits the CNN's chain up to that Dense is within 3 % of the observed error). It still says
    # something about outputs in [0, 1]: under 0.5 at 8 bits, under 0.1 at 16.
    assert bound[q.outputs[0]].max() < (0.5 if width == 8 else 0.1)


@pytest.mark.parametrize("model", [float_cnn, softmax_mlp])
@pytest.mark.parametrize("spec", SPECS)
def test_quantized_bounds_contain_the_golden_values_and_nothing_can_saturate(model, spec):
    g = model()
    q = quantize_graph(g, spec)  # types from the interval analysis: proven wide enough
    x = _inputs(g, seed=7)
    env = emulate.run(q, x, keep=True)
    bounds = analyze(q).tensors
    for name, values in env.items():
        assert np.all(bounds[name].contains(values)), f"{spec}: tensor '{name}' leaves its bounds"
    assert check_precision(q) == []


@pytest.mark.parametrize("model", [float_cnn, softmax_mlp])
def test_calibrated_types_never_leave_an_accumulator_able_to_overflow(model):
    g = model()
    q = quantize_graph(g, "8", calibration=_inputs(g, n=50))
    assert [w for w in check_precision(q) if w.where == "accumulator"] == []
    assert all(q.node(name).accum_type is not None for name in (("conv", "bn", "fc") if model is float_cnn
                                                                 else ("fc1", "fc2")))


def test_the_conv_accumulator_is_the_narrowest_one_a_corner_input_needs():
    """The Conv follows the quantizer, so each window's taps are independent inputs and its bound is attained: the
    input that puts every tap at the end its weight favours reaches the accumulator's extreme code."""
    q = quantize_graph(float_cnn(), "8")
    conv, xb = q.node("conv"), analyze(q).tensors["x_q"]  # the codes of the declared input range
    x_lo, x_hi = int(min(xb.lo.ravel())), int(max(xb.hi.ravel()))
    exact = {s.tensor: s for s in analyze(q).stages}["conv.accum"].exact
    lo, hi = exact.lo.astype(np.int64), exact.hi.astype(np.int64)
    acc = conv.accum_type
    assert int(max(hi.max(), -lo.min() - 1)).bit_length() + 1 == acc.width  # the narrowest type holding the bounds
    c, i, j = np.unravel_index(np.argmax(np.maximum(hi, -lo - 1)), hi.shape)
    up = hi[c, i, j] >= -lo[c, i, j] - 1
    w = conv.weight[c, 0]
    image = np.zeros((1, 1, 8, 8), dtype=np.int64)
    for di in range(3):
        for dj in range(3):
            r, s = i - 1 + di, j - 1 + dj
            if 0 <= r < 8 and 0 <= s < 8:
                image[0, 0, r, s] = x_hi if (w[di, dj] > 0) == up else x_lo
    wide = dataclasses.replace(conv, accum_type=FixedType(48, 48 - acc.frac))
    got = emulate.conv_fixed(wide, image, (4, 8, 8), wide.accum_type)[0, c, i, j]
    assert got == (hi if up else lo)[c, i, j]


def test_table_size_bounds_every_table_and_reaches_the_grammar():
    g = softmax_mlp()
    q = quantize_graph(g, "w8a16,table_size=64")
    sm = q.node("softmax")
    assert len(sm.exp_table) <= 64 and len(sm.recip_table) <= 64
    assert q.metadata["quantization"]["spec"] == "w8a16,table_size=64"
    q = quantize_graph(float_cnn(), "w8a16,table_size=32")
    assert len(q.node("sig").table) <= 32
    spec = parse_precision("8,fc.act=12,table_size=256")
    assert spec.table_size == 256 and parse_precision(str(spec)) == spec
    assert parse_precision("8").table_size is None and parse_precision("8").entries == tables.TABLE_SIZE


@pytest.mark.parametrize("text, problem", [("8,table_size=1", "from 2 to 65536"), ("8,table_size=big", "count"),
                                           ("8,table_size=64,table_size=32", "table_size is given twice")])
def test_bad_table_sizes_are_refused_with_the_grammar(text, problem):
    with pytest.raises(PrecisionSpecError, match=problem) as e:
        parse_precision(text)
    assert "table_size=256" in str(e.value)  # the grammar is shown


def test_a_sigmoid_table_spends_its_entries_where_the_function_still_changes():
    """The proven range of the table's input is wide; the entries cover only the codes where sigmoid, rounded to
    the output type, still changes, so the table is both short and exact to within its own rounding."""
    q = quantize_graph(float_cnn(), "8")
    sig = q.node("sig")
    proven = analyze(q).tensors["z"]
    assert sig.index_shift == 0  # one entry per input code
    assert sig.index_lo > int(min(proven.lo)) and sig.index_lo + len(sig.table) - 1 < int(max(proven.hi))
    # One entry per code: every code reads sigmoid rounded once (or, beyond the table, a code that rounds alike;
    # 1.0 saturates to 1 - LSB in ufixed<8,0>): at most one output LSB off.
    assert sigmoid_table_error(q, "sig") <= q.tensors["y"].dtype.lsb


def test_leaky_relu_slopes_and_hard_sigmoid_constants_are_quantized_as_documented():
    rng = np.random.default_rng(3)
    g = ir.sequential("acts", ir.TensorSpec("x", (2, 5)), [
        (ir.LeakyReLU("prelu", ("x",), ("a",), alpha=np.array([0.125, 0.01], np.float32)), ir.TensorSpec("a", (2, 5))),
        (ir.HardSigmoid("hswish", ("a",), ("y",), alpha=1 / 6, beta=0.5, swish=True), ir.TensorSpec("y", (2, 5)))])
    g.metadata["input_range"] = [-4.0, 4.0]
    q = quantize_graph(ir.validate(g), "8")
    prelu, hs = q.node("prelu"), q.node("hswish")
    slopes = to_float(prelu.alpha, prelu.alpha_type)
    assert slopes[0] == 0.125 and abs(slopes[1] - 0.01) <= prelu.alpha_type.lsb / 2  # a power of two is exact
    assert hs.alpha_type.width == 16 and hs.beta_code == 2 ** (hs.alpha_type.frac - 1)
    assert abs(hs.alpha_code * hs.alpha_type.lsb - 1 / 6) <= 2.0 ** -16
    x = rng.uniform(-4, 4, (200, 2, 5)).astype(np.float32)
    err = np.abs(emulate.run_values(q, x)["y"] - emulate.run(g, x)["y"]).max()
    # x_q is fixed<8,4> (LSB 2**-4: +-1/32), the PReLU output and the slope 0.01 add about 1/64, HardSwish's slope is
    # at most 1.5 over [-4, 4], its output rounds by at most 2**-6: about 0.09 in all.
    assert err < 0.1


def test_data_movement_keeps_types_and_argmax_gets_an_index_type():
    g = ir.sequential("head", ir.TensorSpec("x", (2, 3)), [
        (ir.Transpose("t", ("x",), ("xt",), perm=(1, 0)), ir.TensorSpec("xt", (3, 2))),
        (ir.Reshape("flat", ("xt",), ("f",)), ir.TensorSpec("f", (6,))),
        (ir.Clip("relu6", ("f",), ("c",), lo=0.0, hi=6.0), ir.TensorSpec("c", (6,))),
        (ir.ArgMax("argmax", ("c",), ("y",)), ir.TensorSpec("y", (1,)))])
    g.metadata["input_range"] = [-8.0, 8.0]
    q = quantize_graph(ir.validate(g), "8")
    assert q.tensors["xt"].dtype == q.tensors["f"].dtype == q.tensors["x_q"].dtype
    assert q.tensors["c"].dtype == T("ufixed<8,3,RND_CONV,SAT>")  # proven in [0, 6]: unsigned, 3 integer bits
    assert q.tensors["y"].dtype == FixedType(3, 3, False)
    x = np.random.default_rng(0).uniform(-8, 8, (100, 2, 3)).astype(np.float32)
    # On inputs already on x_q's grid every op is exact (0 and 6 are codes), so the index is the float model's.
    x_grid = to_float(quantize(x, q.tensors["x_q"].dtype), q.tensors["x_q"].dtype).astype(np.float32)
    assert np.array_equal(emulate.run(q, x)["y"], emulate.run(g, x_grid)["y"].astype(np.int64))
    for override, what in (("flat.act=8", "moves data only"), ("argmax.act=4", "integer indices")):
        with pytest.raises(QuantizeError, match=f"'{override.split('=')[0]}'.*{what}"):
            quantize_graph(g, f"8,{override}")


@pytest.mark.parametrize("model, node", [(float_cnn, "Table 'sig'"), (softmax_mlp, "Softmax 'softmax'")])
def test_a_table_whose_input_nothing_bounds_is_refused_by_name(model, node):
    g = model()
    g.metadata.pop("input_range")
    with pytest.raises(QuantizeError, match=f"{node}: its input .* no known range.*--input-range LO,HI.*x.act="):
        quantize_graph(g, "8")
    q = quantize_graph(g, "8,x.act=fixed<8,1,RND_CONV,SAT>")  # an explicit input type bounds everything after it
    assert check_precision(q) == []


# -- the interval rules on their own ------------------------------------------------------------------------

X8 = T("fixed<8,3,TRN,WRAP>")


def _one_op(node: ir.Node, out_type, shape=(2, 3)) -> ir.Graph:
    g = ir.Graph("op", ["x"], ["y"], {"x": ir.TensorSpec("x", shape, X8), "y": ir.TensorSpec("y", shape, out_type)},
                 [node])
    return ir.validate(infer_precision(ir.validate(g)))


ELEMENTWISE = {
    "leaky_relu": lambda: ir.LeakyReLU("op", ("x",), ("y",), alpha=np.array([5, -3]), alpha_type=T("fixed<6,0>")),
    "clip": lambda: ir.Clip("op", ("x",), ("y",), lo=-1.3, hi=2.0),
    "hard_sigmoid": lambda: ir.HardSigmoid("op", ("x",), ("y",), alpha=0.2, beta=0.5, alpha_type=T("fixed<16,1>"),
                                           alpha_code=6554, beta_code=2 ** 14),
    "hard_swish": lambda: ir.HardSigmoid("op", ("x",), ("y",), alpha=1 / 6, beta=0.5, swish=True,
                                         alpha_type=T("fixed<14,2>"), alpha_code=683, beta_code=2 ** 11),
    "table": lambda: _gelu_table(tables.build_table("gelu", X8, -77, 60, T("fixed<8,3,RND_CONV,SAT>"), 32)),
}


def _gelu_table(spec: tables.TableSpec) -> ir.Table:
    return ir.Table("op", ("x",), ("y",), function="gelu", table=spec.table, index_lo=spec.index_lo,
                    index_shift=spec.index_shift)


@pytest.mark.parametrize("op", sorted(ELEMENTWISE))
@pytest.mark.parametrize("seed", range(4))
def test_elementwise_bounds_are_exact_over_every_code_of_the_interval(op, seed):
    """Per element, the bounds are the smallest and largest output the golden model gives over the input codes of
    the declared range: nothing outside (sound) and both ends reached (exact)."""
    out = T("fixed<24,8,RND_CONV,SAT>") if op != "table" else T("fixed<8,3,RND_CONV,SAT>")
    g = _one_op(ELEMENTWISE[op](), out)
    rng = np.random.default_rng(seed)
    lo = rng.uniform(-4, 3, (2, 3))
    hi = np.minimum(lo + rng.uniform(0.1, 5, (2, 3)), 3.9)  # at least 3 codes
    b = analyze(g, input_range=[lo.tolist(), hi.tolist()]).tensors["y"]
    xb = analyze(g, input_range=[lo.tolist(), hi.tolist()]).tensors["x"]
    codes = np.arange(X8.min_code, X8.max_code + 1)
    ys = emulate.run(g, np.broadcast_to(codes[:, None, None], (len(codes), 2, 3)).copy())["y"]
    for idx in np.ndindex(2, 3):
        inside = (codes >= xb.lo[idx]) & (codes <= xb.hi[idx])
        reach = ys[(slice(None),) + idx][inside]
        assert (int(b.lo[idx]), int(b.hi[idx])) == (reach.min(), reach.max()), f"{op}: element {idx}"


def _random_window_graph(rng, op: str) -> ir.Graph:
    """A Conv or Pool with random geometry (1-D or 2-D, stride, padding, dilation, groups) and random types."""
    nd = int(rng.integers(1, 3))
    kernel = tuple(int(k) for k in rng.integers(1, 4, nd))
    stride = tuple(int(s) for s in rng.integers(1, 3, nd))
    pads = tuple(int(rng.integers(0, k)) for k in kernel * 2)
    spatial = tuple(int(s) for s in rng.integers(5, 8, nd))  # a dilated kernel spans at most 5
    xt = FixedType(int(rng.integers(4, 10)), int(rng.integers(1, 4)), bool(rng.integers(0, 2)))
    if op == "conv":
        groups = int(rng.choice([1, 2]))
        dilation = tuple(int(d) for d in rng.integers(1, 3, nd))
        c_in, c_out = 2 * groups, 2 * groups
        wt = FixedType(int(rng.integers(3, 8)), 1)
        bt = FixedType(10, 10 - min(6, xt.frac + wt.frac))  # no finer than the accumulator
        node = ir.Conv("op", ("x",), ("y",), weight=rng.integers(wt.min_code, wt.max_code + 1,
                                                                  (c_out, c_in // groups, *kernel)),
                       bias=rng.integers(bt.min_code, bt.max_code + 1, c_out), stride=stride, padding=pads,
                       dilation=dilation, groups=groups, weight_type=wt, bias_type=bt)
    else:
        dilation, c_out, c_in = (1,) * nd, 3, 3
        node = ir.Pool("op", ("x",), ("y",), mode=str(rng.choice(["max", "avg"])), kernel=kernel, stride=stride,
                       padding=pads, count_include_pad=bool(rng.integers(0, 2)), recip_frac=int(rng.integers(4, 17)))
    out_spatial = output_spatial(spatial, kernel, stride, pads, dilation)
    g = ir.Graph("w", ["x"], ["y"], {"x": ir.TensorSpec("x", (c_in, *spatial), xt),
                                     "y": ir.TensorSpec("y", (c_out, *out_spatial), T("fixed<12,5,RND,SAT>"))}, [node])
    return ir.validate(infer_precision(ir.validate(g)))


@pytest.mark.parametrize("op", ["conv", "pool"])
@pytest.mark.parametrize("seed", range(6))
def test_window_bounds_hold_for_random_geometries_and_types(op, seed):
    rng = np.random.default_rng(seed)
    g = _random_window_graph(rng, op)
    xt = g.tensors["x"].dtype
    x = rng.integers(xt.min_code, xt.max_code + 1, (300, *g.tensors["x"].shape))
    x[0], x[1] = xt.min_code, xt.max_code
    env = emulate.run(g, x, keep=True)
    analysis = analyze(g)
    for name in ("y",):
        assert np.all(analysis.tensors[name].contains(env[name]))
    if op == "conv":  # the inferred accumulator held every sum: a wider one gives the same outputs
        wide = dataclasses.replace(g.nodes[0], accum_type=FixedType(40, 40 - g.nodes[0].accum_type.frac))
        g2 = dataclasses.replace(g, nodes=[wide])
        assert np.array_equal(emulate.run(g2, x)["y"], env["y"])


@pytest.mark.parametrize("function", sorted(tables.FUNCTIONS))
def test_float_table_bounds_contain_the_function_over_random_intervals(function):
    g = ir.Graph("f", ["x"], ["y"], {"x": ir.TensorSpec("x", (40,)), "y": ir.TensorSpec("y", (40,))},
                 [ir.Table("op", ("x",), ("y",), function=function)])
    rng = np.random.default_rng(5)
    lo = rng.uniform(-6, 3, 40)
    hi = lo + rng.uniform(0, 4, 40) * (np.arange(40) % 4 > 0)  # a quarter of them points
    b = analyze(g, input_range=[lo.tolist(), hi.tolist()]).tensors["y"]
    grid = lo + (hi - lo) * np.linspace(0, 1, 2001)[:, None]
    y = emulate.run(g, grid.astype(np.float32))["y"]
    assert np.all(b.contains(y))
    assert np.all(b.hi - b.lo <= (y.max(axis=0) - y.min(axis=0)) + 2e-3 * (1 + np.abs(y).max(axis=0)))  # not loose


def test_check_precision_names_the_new_ops_whose_types_are_too_narrow():
    """One bit less than the quantizer chose, in one place at a time (a wrapped accumulator upstream would narrow
    what reaches the next one), is reported at that place."""
    q = quantize_graph(float_cnn(), "8")
    assert check_precision(q) == []

    def narrower(t: FixedType) -> FixedType:
        return t.with_(width=t.width - 1, integer=t.integer - 1)

    for i, name in ((1, "conv"), (2, "bn")):
        g = q.copy()
        g.nodes[i] = dataclasses.replace(g.nodes[i], accum_type=narrower(g.nodes[i].accum_type))
        assert [(w.node, w.where) for w in check_precision(ir.validate(g))] == [(name, "accumulator")]
    g = q.copy()
    g.tensors["l"] = dataclasses.replace(g.tensors["l"], dtype=narrower(g.tensors["l"].dtype))
    assert ("leaky", "output") in {(w.node, w.where) for w in check_precision(ir.validate(g))}


#: The largest slope of each table function over [-4, 4] (the test's input range): how far an input error moves it.
SLOPE = {"sigmoid": 0.25, "tanh": 1.0, "gelu": 1.13, "gelu_tanh": 1.13, "silu": 1.1, "elu": 1.0, "softplus": 1.0,
         "exp": float(np.exp(4.0))}


@pytest.mark.parametrize("function", sorted(tables.FUNCTIONS))
def test_every_table_function_quantizes_to_a_table_that_tracks_it(function):
    """x -> Dense -> Table(function) at w8a16: the table's type holds the function's range over the proven input
    range (signed exactly when the function goes below 0 there), nothing can saturate, and the output is off by at
    most the table's own error (measured over every input code) plus the slope times the input's error."""
    rng = np.random.default_rng(11)
    g = ir.sequential("f", ir.TensorSpec("x", (3,)), [
        (ir.Dense("fc", ("x",), ("z",), weight=_normal(rng, 4, 3, scale=0.4), bias=_normal(rng, 4, scale=0.2)),
         ir.TensorSpec("z", (4,))),
        (ir.Table("f", ("z",), ("y",), function=function), ir.TensorSpec("y", (4,)))])
    g.metadata["input_range"] = [-2.0, 2.0]
    q = quantize_graph(ir.validate(g), "w8a16")
    assert check_precision(q) == []
    n, zt, yt = q.node("f"), q.tensors["z"].dtype, q.tensors["y"].dtype
    zb = analyze(q).tensors["z"]
    codes = np.arange(int(min(zb.lo)), int(max(zb.hi)) + 1)  # every code z can take
    f = tables.function(function)
    table_err = np.abs(to_float(tables.lookup(codes, n.table, n.index_lo, n.index_shift), yt)
                       - f(to_float(codes, zt))).max()
    z_lo, z_hi = zb.span()
    assert yt.signed == bool(f(np.linspace(z_lo, z_hi, 4001)).min() < 0) or function in ("sigmoid", "tanh")
    x = _inputs(g)
    got, want = emulate.run(q, x, keep=True), emulate.run(g, x, keep=True)
    z_err = np.abs(to_float(got["z"], zt) - want["z"])
    err = np.abs(to_float(got["y"], yt) - want["y"])
    assert np.all(err <= table_err + SLOPE[function] * z_err + 1e-4)
    assert table_err < 0.01 * max(1.0, float(np.abs(want["y"]).max()))  # 16-bit tables: under 1 % of the scale
