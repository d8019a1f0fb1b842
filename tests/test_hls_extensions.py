"""hls4ml extension layers (toolchain/backends/hls/extensions.py, hls/bitforge_*.h) against the golden model.

Each test builds a small IR graph by hand (float input -> Quantize -> several ops reading the quantized input, each
one a graph output), converts it to an hls4ml model with a minimal layer list (an InputLayer typed as the
Quantize's output, then the extension layers), builds hls4ml's C simulation (g++ only) and runs it on a few
thousand float vectors: every code of the input type at every position, the half-way points between codes (the
input rounding's ties), values far outside the type (saturation) and random ones. Every output code must equal
``emulate.run``'s: 0 mismatches. One compile takes about 5 s, so each model carries several nodes.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from bitforge.toolchain import emulate, fixed, ir, tables
from bitforge.toolchain.bspline import index_params
from bitforge.toolchain.fixed import FixedType, parse_type
from bitforge.toolchain.windows import output_spatial

import hls4ml  # noqa: E402 - a dependency of bitforge

from bitforge.toolchain.backends.hls.extensions import (  # noqa: E402
    EXTENSION_OPS,
    HEADERS,
    ExtensionError,
    extension_layer,
    register_extensions,
)
from bitforge.toolchain.backends.hls.types import ap_type_string, hls_precision  # noqa: E402

T = parse_type


def _graph(x_type: FixedType, shape: tuple[int, ...], nodes: list[tuple[ir.Node, ir.TensorSpec]]) -> ir.Graph:
    """x (float) -> Quantize -> xq, and every node of ``nodes`` reading xq; the nodes' outputs are the graph's."""
    tensors = {"x": ir.TensorSpec("x", shape, None), "xq": ir.TensorSpec("xq", shape, x_type)}
    body = []
    for node, out in nodes:
        tensors[out.name] = out
        body.append(node)
    return ir.validate(ir.Graph("ext", ["x"], [out.name for _, out in nodes], tensors,
                                [ir.Quantize("q", ("x",), ("xq",)), *body]))


def _hls_model(tmp_path, g: ir.Graph, backend: str = "Vitis"):
    from hls4ml.converters import create_config
    from hls4ml.model import ModelGraph

    register_extensions()
    xq = g.tensors["xq"]
    layers = [{"class_name": "InputLayer", "name": "xq", "input_shape": list(xq.shape)}]
    layers += [extension_layer(g, n, ["xq"]) for n in g.nodes[1:]]
    cfg = create_config(output_dir=str(tmp_path / "prj"), project_name="bf", backend=backend, io_type="io_parallel")
    cfg["HLSConfig"] = {"Model": {"Precision": "ap_fixed<16,6>", "ReuseFactor": 1, "Strategy": "Latency"},
                        "LayerName": {"xq": {"Precision": {"result": ap_type_string(xq.dtype)}}}}
    model = ModelGraph.from_layer_list(cfg, layers, inputs=["xq"], outputs=[n.name for n in g.nodes[1:]])
    model.compile()
    return model


def _vectors(t: FixedType, shape: tuple[int, ...], seed: int, extra: int = 800, ties: bool = False) -> np.ndarray:
    """Float32 inputs: every code of ``t`` at every position, the midpoints between codes, ``extra`` values up to
    twice the type's range, ``extra`` inside it, and (``ties``) rows drawn from three codes only."""
    rng = np.random.default_rng(seed)
    per = math.prod(shape)
    codes = np.arange(t.min_code, t.max_code + 1)
    rows = codes[(np.arange(len(codes))[:, None] + 7919 * np.arange(per)[None, :]) % len(codes)]
    grid = np.ldexp(rows.astype(np.float64), -t.frac)
    parts = [grid, grid + t.lsb / 2,
             rng.uniform(2 * t.min_value, 2 * t.max_value, (extra, per)),
             rng.uniform(t.min_value, t.max_value, (extra, per))]
    if ties:
        parts.append(np.ldexp(rng.choice(rng.choice(codes, 3), (extra, per)).astype(np.float64), -t.frac))
    exact = np.concatenate(parts[:2])
    assert np.array_equal(exact.astype(np.float32), exact), "codes and midpoints must be exact in float32"
    x = np.concatenate(parts).astype(np.float32)  # the graph's input is float32; hls4ml gets the same values
    return x.reshape(len(x), *shape)


def _assert_bit_exact(model, g: ir.Graph, x: np.ndarray) -> dict[str, np.ndarray]:
    """hls4ml's C simulation == the golden model, code for code, for every graph output; returns the codes."""
    gold = emulate.run(g, x)
    pred = model.predict(x.reshape(len(x), -1).astype(np.float64))
    pred = pred if isinstance(pred, list) else [pred]
    assert len(pred) == len(g.outputs)
    for name, y in zip(g.outputs, pred):
        t = g.tensors[name].dtype
        scaled = np.ldexp(np.asarray(y, dtype=np.float64), t.frac)
        assert np.array_equal(scaled, np.round(scaled)), f"{name}: C simulation gave values off the {t} grid"
        codes = scaled.astype(np.int64)
        want = gold[name].reshape(len(x), -1)
        bad = np.flatnonzero((codes != want).any(axis=1))
        assert bad.size == 0, (f"{name}: {bad.size} of {len(x)} vectors differ from the golden model; first: input "
                               f"{x[bad[0]].ravel().tolist()} gave {codes[bad[0]].tolist()}, expected "
                               f"{want[bad[0]].tolist()}")
    return gold


# -- KAN --------------------------------------------------------------------------------------------------------

def _kan(name: str, x: FixedType, rng, n_in: int, n_out: int, grid: tuple[float, float], G: int, k: int, impl: str,
         coeff: str, basis: str, out: str, accum: str | None = None, u_bits: int | None = None):
    ct, bt = T(coeff), T(basis)
    lo, mult, shift, ub = index_params(grid[0], grid[1], G, x, u_bits=u_bits)
    coeffs = rng.integers(ct.min_code, ct.max_code + 1, (n_out, n_in, G + k))
    frac = ct.frac + bt.frac
    acc = T(accum) if accum else FixedType(ct.width + bt.width + 4, ct.width + bt.width + 4 - frac)
    node = ir.KANLayer(name, ("xq",), (f"{name}_y",), coeffs=coeffs, grid_lo=grid[0], grid_hi=grid[1], grid_size=G,
                       order=k, coeff_type=ct, basis_type=bt, u_bits=ub, index_lo=lo, index_mult=mult,
                       index_shift=shift, accum_type=acc, basis_impl=impl)
    return node, ir.TensorSpec(f"{name}_y", (n_out,), T(out))


def test_kan_layers_bit_exact(tmp_path):
    """Orders 1..4, both basis_impl values, bit-slice and multiplier index maps, inputs beyond the grid on both
    sides (clamped), several inputs and outputs, accumulators that saturate or wrap, every output rounding."""
    rng = np.random.default_rng(1)
    x = T("fixed<10,3,RND_CONV,SAT>")  # [-4, 4): wider than every grid below
    c12, c9 = "fixed<12,3,RND_CONV,SAT>", "fixed<9,2,RND_CONV,SAT>"
    nodes = [
        _kan("k1t", x, rng, 3, 2, (-2.0, 2.0), 4, 1, "table", c12, "ufixed<10,1,RND_CONV,SAT>",
             "fixed<12,4,RND_CONV,SAT>"),
        _kan("k1c", x, rng, 3, 3, (-1.5, 2.5), 5, 1, "closed_form", c9, "ufixed<12,1,RND_CONV,SAT>",
             "fixed<10,3,RND,SAT_SYM>"),
        _kan("k2t", x, rng, 3, 2, (-3.0, 1.0), 3, 2, "table", c12, "ufixed<14,1,RND_CONV,SAT>",
             "fixed<11,4,RND_INF,WRAP>"),
        _kan("k2c", x, rng, 3, 2, (-2.0, 2.0), 8, 2, "closed_form", c9, "ufixed<11,1,RND_CONV,SAT>",
             "fixed<8,2,TRN,SAT_ZERO>"),
        _kan("k3t", x, rng, 3, 4, (-2.5, 3.0), 6, 3, "table", c12, "ufixed<17,1,RND_CONV,SAT>",
             "fixed<12,4,RND_ZERO,SAT>", accum="fixed<27,2,TRN,SAT>"),  # [-2, 2): saturates
        _kan("k3c", x, rng, 3, 2, (-2.0, 2.0), 4, 3, "closed_form", c12, "ufixed<13,1,RND_CONV,SAT>",
             "fixed<10,3,RND_MIN_INF,SAT>", accum="fixed<23,2,TRN,WRAP>", u_bits=4),  # wraps; shift 3
        _kan("k4t", x, rng, 3, 2, (-1.0, 3.0), 5, 4, "table", c9, "ufixed<12,1,RND_CONV,SAT>",
             "fixed<10,3,TRN_ZERO,SAT>"),
    ]
    g = _graph(x, (3,), nodes)
    xs = _vectors(x, (3,), seed=2)
    # the inputs reach below and above every grid, and both index maps (slice: mult 1, shift 0; multiplier) occur
    codes = fixed.quantize(xs.reshape(len(xs), -1), x)
    for n in g.nodes[1:]:
        s = ((codes - n.index_lo) * n.index_mult) >> n.index_shift
        assert s.min() < 0 and s.max() > (n.grid_size << n.u_bits) - 1, n.name
    assert {(n.index_mult == 1 and n.index_shift == 0) for n in g.nodes[1:]} == {True, False}
    gold = _assert_bit_exact(_hls_model(tmp_path, g), g, xs)
    for name in ("k3t", "k3c"):  # the narrow accumulators did overflow (the C simulation matched that too)
        n = g.node(name)
        wide = dataclasses.replace(n, accum_type=FixedType(40, 40 - n.accum_type.frac))
        assert (emulate.kan_fixed(wide, codes, g.tensors[n.output].dtype) != gold[n.output]).any(), name


# -- Table ------------------------------------------------------------------------------------------------------

def _table(name: str, function: str, x: FixedType, lo: float, hi: float, out: str, size: int,
           shape: tuple[int, ...] = (3, 4)):
    o = T(out)
    spec = tables.build_table(function, x, int(lo * 2 ** x.frac), int(hi * 2 ** x.frac), o, size=size)
    node = ir.Table(name, ("xq",), (f"{name}_y",), function=function, table=spec.table, index_lo=spec.index_lo,
                    index_shift=spec.index_shift)
    return node, ir.TensorSpec(f"{name}_y", shape, o)


def test_table_bit_exact(tmp_path):
    """Tables with and without an index shift, ranges narrower than the input (both ends clamp), on Vivado."""
    x = T("fixed<10,4,RND_CONV,SAT>")
    nodes = [_table("tanh", "tanh", x, -4.0, 4.0, "fixed<9,2,RND_CONV,SAT>", 64),
             _table("sig", "sigmoid", x, -3.0, 2.0, "ufixed<8,0,RND,SAT>", 1024),
             _table("gelu", "gelu", x, -2.5, 6.0, "fixed<10,3,TRN,WRAP>", 100),
             _table("exp", "exp", x, -5.0, 1.5, "ufixed<12,3,RND_CONV,SAT>", 32)]
    g = _graph(x, (3, 4), nodes)
    xs = _vectors(x, (3, 4), seed=3)
    codes = fixed.quantize(xs.reshape(len(xs), -1), x)
    for n in g.nodes[1:]:
        i = (codes - n.index_lo) >> n.index_shift
        assert i.min() < 0 and i.max() > len(n.table) - 1, n.name  # both ends clamp
    assert {n.index_shift > 0 for n in g.nodes[1:]} == {True, False}
    _assert_bit_exact(_hls_model(tmp_path, g, backend="Vivado"), g, xs)


# -- element-wise ops -------------------------------------------------------------------------------------------

def _out(name: str, shape, t: str) -> ir.TensorSpec:
    return ir.TensorSpec(name, shape, T(t))


@pytest.mark.slow
def test_elementwise_ops_bit_exact(tmp_path):
    """Clip (bounds between codes, one-sided, beyond the type), HardSigmoid (ONNX's and PyTorch's slopes),
    HardSwish, LeakyReLU (one slope) and PReLU (one per channel), ScaleShift with and without a shift and with a
    saturating accumulator."""
    x = T("fixed<9,4,RND_CONV,SAT>")
    shape = (3, 5)
    a = T("fixed<16,1,RND_CONV,SAT>")
    sl = T("fixed<8,1,RND_CONV,SAT>")
    st, sh = T("fixed<8,3,RND_CONV,SAT>"), T("fixed<10,4,RND_CONV,SAT>")
    code = lambda v, t: int(fixed.quantize(np.array([v]), t)[0])  # noqa: E731
    hs = lambda name, al, be, sw, out: (  # noqa: E731
        ir.HardSigmoid(name, ("xq",), (f"{name}_y",), alpha=al, beta=be, swish=sw, alpha_type=a,
                       alpha_code=code(al, a), beta_code=code(be, a)), _out(f"{name}_y", shape, out))
    nodes = [
        (ir.Clip("relu6", ("xq",), ("relu6_y",), lo=0.0, hi=6.0), _out("relu6_y", shape, "ufixed<6,3,RND_CONV,SAT>")),
        (ir.Clip("clip_mid", ("xq",), ("clip_mid_y",), lo=-1.03, hi=2.71), _out("clip_mid_y", shape,
                                                                                "fixed<7,3,RND_INF,SAT>")),
        (ir.Clip("clip_lo", ("xq",), ("clip_lo_y",), lo=-0.5), _out("clip_lo_y", shape, "fixed<9,4,TRN,WRAP>")),
        (ir.Clip("clip_hi", ("xq",), ("clip_hi_y",), hi=3.3), _out("clip_hi_y", shape, "fixed<12,5,RND_CONV,SAT>")),
        (ir.Clip("clip_far", ("xq",), ("clip_far_y",), lo=-1e3, hi=40.0), _out("clip_far_y", shape,
                                                                                "fixed<9,4,RND_CONV,SAT>")),
        (ir.Clip("clip_above", ("xq",), ("clip_above_y",), lo=20.0, hi=25.0),  # every code is below lo
         _out("clip_above_y", shape, "fixed<8,6,RND_CONV,SAT>")),
        (ir.Clip("clip_empty", ("xq",), ("clip_empty_y",), lo=1.01, hi=1.02),  # codes lo 33 > hi 32: hi wins
         _out("clip_empty_y", shape, "fixed<9,4,RND_CONV,SAT>")),
        hs("hsig_onnx", 0.2, 0.5, False, "ufixed<8,1,RND_CONV,SAT>"),
        hs("hsig_torch", 1 / 6, 0.5, False, "fixed<10,2,TRN,SAT>"),
        hs("hswish", 1 / 6, 0.5, True, "fixed<10,4,RND_CONV,SAT>"),
        (ir.LeakyReLU("leaky", ("xq",), ("leaky_y",), alpha=fixed.quantize(np.array([0.01]), sl), alpha_type=sl),
         _out("leaky_y", shape, "fixed<10,4,RND_CONV,SAT>")),
        (ir.LeakyReLU("prelu", ("xq",), ("prelu_y",), alpha=fixed.quantize(np.array([0.25, -0.6, 0.9]), sl),
                      alpha_type=sl), _out("prelu_y", shape, "fixed<8,3,RND_ZERO,SAT_SYM>")),
        (ir.ScaleShift("bn", ("xq",), ("bn_y",), scale=fixed.quantize(np.array([1.7, -0.4, 3.9]), st),
                       shift=fixed.quantize(np.array([0.3, -2.1, 5.6]), sh), scale_type=st, shift_type=sh,
                       accum_type=FixedType(22, 22 - (x.frac + st.frac))), _out("bn_y", shape, "fixed<10,4,RND,SAT>")),
        (ir.ScaleShift("bn_sat", ("xq",), ("bn_sat_y",), scale=fixed.quantize(np.array([1.7, -0.4, 3.9]), st),
                       shift=fixed.quantize(np.array([0.3, -2.1, 5.6]), sh), scale_type=st, shift_type=sh,
                       accum_type=FixedType(14, 14 - (x.frac + st.frac), True, "TRN", "SAT")),  # [-8, 8): saturates
         _out("bn_sat_y", shape, "fixed<12,5,RND_CONV,SAT>")),
        (ir.ScaleShift("mult", ("xq",), ("mult_y",), scale=fixed.quantize(np.array([0.75, 0.5, 1.25]), st),
                       scale_type=st, accum_type=FixedType(20, 20 - (x.frac + st.frac))),
         _out("mult_y", shape, "fixed<8,3,RND_CONV,WRAP>")),
    ]
    g = _graph(x, shape, nodes)
    xs = _vectors(x, shape, seed=4)
    gold = _assert_bit_exact(_hls_model(tmp_path, g), g, xs)
    n = g.node("bn_sat")  # its accumulator did saturate (and the C simulation matched that)
    wide = dataclasses.replace(n, accum_type=FixedType(30, 30 - n.accum_type.frac))
    codes = fixed.quantize(xs, x)
    assert (emulate.scale_shift_fixed(wide, codes, x, g.tensors[n.output].dtype) != gold[n.output]).any()


# -- Softmax, ArgMax, 1-D pooling --------------------------------------------------------------------------------

def _pool(name: str, mode: str, in_shape, kernel, stride, pads, recip_frac: int, include_pad: bool, out: str):
    spatial = output_spatial(in_shape[1:], kernel, stride, pads, (1,) * len(kernel))
    node = ir.Pool(name, ("xq",), (f"{name}_y",), mode=mode, kernel=kernel, stride=stride, padding=pads,
                   count_include_pad=include_pad, recip_frac=recip_frac)
    return node, _out(f"{name}_y", (in_shape[0], *spatial), out)


@pytest.mark.slow
def test_softmax_argmax_pool1d_bit_exact(tmp_path):
    """Softmax with the default tables and with small ones (index shifts > 0), ArgMax on rows full of ties (the
    first index wins), max and average 1-D pools with padding, both divisor rules and inexact reciprocals."""
    x = T("fixed<8,3,RND_CONV,SAT>")
    shape = (4, 6)
    st1 = tables.softmax_tables(x, 6)
    st2 = tables.softmax_tables(x, 6, exp_type=T("ufixed<10,1,RND_CONV,SAT>"), recip_type=T("ufixed<9,1,RND,SAT>"),
                                size=16)
    sm = lambda name, s, out: (  # noqa: E731
        ir.Softmax(name, ("xq",), (f"{name}_y",), exp_table=s.exp_table, exp_type=s.exp_type, exp_shift=s.exp_shift,
                   recip_table=s.recip_table, recip_type=s.recip_type, recip_lo=s.recip_lo,
                   recip_shift=s.recip_shift), _out(f"{name}_y", shape, out))
    nodes = [
        sm("sm", st1, "ufixed<16,1,RND_CONV,SAT>"),
        sm("sm_small", st2, "fixed<8,1,TRN,SAT>"),
        (ir.ArgMax("am", ("xq",), ("am_y",)), _out("am_y", (4, 1), "ufixed<3,3>")),
        _pool("max1", "max", shape, (3,), (2,), (1, 1), 16, False, "fixed<8,3,RND_CONV,SAT>"),
        _pool("avg1", "avg", shape, (3,), (2,), (1, 1), 8, False, "fixed<10,3,RND_CONV,SAT>"),
        _pool("avg1_pow2", "avg", shape, (2,), (2,), (0, 0), 16, False, "fixed<9,3,TRN,SAT>"),
        _pool("avg1_inc", "avg", shape, (4,), (1,), (2, 1), 5, True, "fixed<9,3,RND_INF,SAT>"),
    ]
    g = _graph(x, shape, nodes)
    assert st2.exp_shift > 0 and st2.recip_shift > 0
    xs = _vectors(x, shape, seed=5, ties=True)
    gold = _assert_bit_exact(_hls_model(tmp_path, g), g, xs)
    codes = fixed.quantize(xs.reshape(len(xs), *shape), x)
    tied = (codes == codes.max(axis=-1, keepdims=True)).sum(axis=-1) > 1
    assert tied.sum() > 100 and (gold["am_y"][..., 0][tied] > 0).any()  # ties at later positions too


# -- 2-D pooling, and input types with I > W -----------------------------------------------------------------

@pytest.mark.slow
def test_pool2d_bit_exact(tmp_path):
    """2-D max and average pools: square and rectangular kernels, strides, pads on some sides only (windows
    hanging over the end), both divisor rules."""
    x = T("fixed<8,2,RND_CONV,SAT>")
    shape = (2, 5, 6)
    nodes = [
        _pool("max2", "max", shape, (2, 2), (2, 2), (0, 0, 0, 0), 16, False, "fixed<8,2,RND_CONV,SAT>"),
        _pool("max3", "max", shape, (3, 3), (2, 2), (1, 1, 1, 1), 16, False, "fixed<6,2,RND_CONV,SAT>"),
        _pool("avg3", "avg", shape, (3, 3), (2, 2), (1, 1, 1, 1), 10, False, "fixed<10,2,RND_CONV,SAT>"),
        _pool("avg23", "avg", shape, (2, 3), (1, 2), (1, 0, 0, 2), 7, True, "fixed<9,2,RND_MIN_INF,SAT>"),
    ]
    g = _graph(x, shape, nodes)
    _assert_bit_exact(_hls_model(tmp_path, g), g, _vectors(x, shape, seed=6, extra=500))


@pytest.mark.slow
def test_unusual_types_bit_exact(tmp_path):
    """An input type with more integer bits than bits (I > W: an LSB of 4), output types with I < 0 or I > W, and
    an output LSB so coarse that rounding drops every bit of the code (ap_fixed's C simulation aborts on such a
    conversion unless the source is widened, as bitforge_common.h's from_code does)."""
    x = T("fixed<6,8,RND_CONV,SAT>")  # codes -32..31, LSB 4: values -128..124
    shape = (2, 4)
    nodes = [
        (ir.Clip("clip", ("xq",), ("clip_y",), lo=-50.0, hi=70.0), _out("clip_y", shape, "fixed<5,9,RND_CONV,SAT>")),
        _pool("avg", "avg", shape, (3,), (1,), (1, 1), 6, False, "fixed<8,8,RND_CONV,SAT>"),
        _pool("max", "max", shape, (2,), (2,), (0, 0), 16, False, "fixed<4,8,RND_INF,SAT>"),
        # an LSB of 2**11 (frac -11) drops every bit of the 7-bit code (frac -2): 0, without an abort
        _pool("max_coarse", "max", shape, (2,), (1,), (0, 0), 16, False, "fixed<3,14,RND_CONV,SAT>"),
        (ir.LeakyReLU("leaky", ("xq",), ("leaky_y",), alpha=fixed.quantize(np.array([0.1, 0.3]), T("fixed<6,0>")),
                      alpha_type=T("fixed<6,0>")), _out("leaky_y", shape, "fixed<8,9,RND_CONV,SAT>")),
        _table("tanh", "tanh", x, -100.0, 60.0, "fixed<6,-1,RND_CONV,SAT>", 16, shape),
        (ir.ArgMax("am", ("xq",), ("am_y",)), _out("am_y", (2, 1), "ufixed<2,2>")),
    ]
    g = _graph(x, shape, nodes)
    _assert_bit_exact(_hls_model(tmp_path, g), g, _vectors(x, shape, seed=7, extra=400, ties=True))


# -- the contract: precisions, registration, refusals ---------------------------------------------------------

def test_hls_precision_matches_hls4mls_own_parsing():
    """hls_precision(t) and hls4ml's parse of ap_type_string(t) agree for every rounding and overflow mode."""
    backend = hls4ml.backends.get_backend("Vitis")
    for signed in (True, False):
        for r in fixed.Rounding:
            for o in fixed.Overflow:
                t = FixedType(11, 3, signed, r, o)
                mine, theirs = hls_precision(t), backend.convert_precision_string(ap_type_string(t))
                assert (mine.width, mine.integer, mine.signed, mine.rounding_mode, mine.saturation_mode) == \
                       (theirs.width, theirs.integer, theirs.signed, theirs.rounding_mode, theirs.saturation_mode)
                assert (mine.rounding_mode.name, mine.saturation_mode.name) == (r.value, o.value)
    assert ap_type_string(T("ufixed<18,1,RND_CONV,SAT>")) == "ap_ufixed<18,1,AP_RND_CONV,AP_SAT>"
    assert ap_type_string(T("fixed<8,3>")) == "ap_fixed<8,3,AP_TRN,AP_WRAP>"


def test_register_extensions_is_idempotent_and_registers_both_backends():
    register_extensions()
    register_extensions()
    for name in ("Vivado", "Vitis"):
        backend = hls4ml.backends.get_backend(name)
        sources = backend.get_custom_source()
        for h in HEADERS:
            assert f"nnet_utils/{h}" in sources and sources[f"nnet_utils/{h}"].is_file()
        passes = hls4ml.model.optimizer.get_backend_passes(name)
        assert sum("bitforge" in p and p.endswith("_config_template") for p in passes) == 1
        assert sum("bitforge" in p and p.endswith("_function_template") for p in passes) == 1
    assert EXTENSION_OPS == {"KANLayer", "Table", "Softmax", "ArgMax", "Clip", "HardSigmoid", "LeakyReLU",
                             "ScaleShift", "Pool"}


def _small_kan_graph(**changes) -> tuple[ir.Graph, ir.Node]:
    x = T("fixed<10,3,RND_CONV,SAT>")
    node, out = _kan("kan", x, np.random.default_rng(0), 2, 2, (-2.0, 2.0), 4, 3, "table",
                     "fixed<12,3,RND_CONV,SAT>", "ufixed<10,1,RND_CONV,SAT>", "fixed<12,4,RND_CONV,SAT>")
    for k, v in changes.items():
        setattr(node, k, v)
    tensors = {"x": ir.TensorSpec("x", (2,), None), "xq": ir.TensorSpec("xq", (2,), x), out.name: out}
    return ir.Graph("g", ["x"], [out.name], tensors, [ir.Quantize("q", ("x",), ("xq",)), node]), node


def test_refusals_name_the_node_and_the_problem():
    g, kan = _small_kan_graph(accum_type=None)
    with pytest.raises(ExtensionError, match=r"KANLayer 'kan': accum_type is not set.*precision pass"):
        extension_layer(g, kan, ["xq"])
    g, kan = _small_kan_graph(accum_type=T("fixed<30,10>"))
    with pytest.raises(ExtensionError, match=r"KANLayer 'kan': accum_type .* fractional bits"):
        extension_layer(g, kan, ["xq"])
    wide = T("fixed<60,8,RND_CONV,SAT>")
    g, kan = _small_kan_graph(coeff_type=wide, accum_type=FixedType(90, 90 - wide.frac - 9))
    with pytest.raises(ExtensionError, match=r"KANLayer 'kan': array 'coeffs' has type fixed<60,8.*53 bits"):
        extension_layer(g, kan, ["xq"])
    g, _ = _small_kan_graph()
    quantize = g.nodes[0]
    with pytest.raises(ExtensionError, match=r"Quantize 'q': no HLS extension layer for op Quantize"):
        extension_layer(g, quantize, ["xq"])


def test_io_stream_is_refused_naming_the_layer(tmp_path):
    from hls4ml.converters import create_config
    from hls4ml.model import ModelGraph

    register_extensions()
    g, kan = _small_kan_graph()
    layers = [{"class_name": "InputLayer", "name": "xq", "input_shape": [2]}, extension_layer(g, kan, ["xq"])]
    cfg = create_config(output_dir=str(tmp_path / "prj"), project_name="bf", backend="Vitis", io_type="io_stream")
    cfg["HLSConfig"] = {"Model": {"Precision": "ap_fixed<16,6>", "ReuseFactor": 1, "Strategy": "Latency"}}
    with pytest.raises(ExtensionError, match=r"layer 'kan' \(KANLayer\).*io_parallel only, not io_stream"):
        ModelGraph.from_layer_list(cfg, layers)


def test_kan_layer_entry_carries_the_golden_tables():
    """The layer entry's arrays are the IR's codes at their IR types (hls4ml writes them as decimal text)."""
    from bitforge.toolchain.bspline import basis_table

    g, kan = _small_kan_graph()
    layer = extension_layer(g, kan, ["xq"])
    assert layer["class_name"] == "BitforgeKANLayer" and layer["name"] == "kan" and layer["inputs"] == ["xq"]
    ct, bt = kan.coeff_type, kan.basis_type
    assert np.array_equal(np.ldexp(layer["coeffs_data"], ct.frac), kan.coeffs.ravel())
    want = basis_table(kan.order, kan.u_bits, bt, kan.basis_impl)
    assert np.array_equal(np.ldexp(layer["basis_data"], bt.frac), want.ravel())
    p = layer["bf_precisions"]
    assert (p["result"].width, p["result"].integer) == (12, 4) and (p["basis"].width, p["basis"].signed) == (10, False)
    assert layer["bf_typedefs"] == {"accum_t": ap_type_string(kan.accum_type)}
