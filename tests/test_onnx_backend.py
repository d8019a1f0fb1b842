"""The ONNX backend against the golden model: codes from ONNX Runtime equal ``emulate.run`` bit for bit.

Every test builds a small IR graph by hand, runs it through ``to_onnx`` + ``run_onnxruntime`` and through
``emulate.run`` on the same seeded inputs (thousands of random vectors plus edge values), and compares
the ``*_code`` outputs with ``np.array_equal``. A mismatch names the first differing index, its input
and both codes.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bitforge.toolchain import emulate, fixed, ir
from bitforge.toolchain.backends.onnx_backend import (
    OnnxExportError, OnnxRunError, make_session, run_onnxruntime, save_onnx, to_onnx,
)
from bitforge.toolchain.bspline import index_params
from bitforge.toolchain.fixed import FixedType, Overflow, Rounding

ROUNDINGS = list(Rounding)
OVERFLOWS = list(Overflow)
MODES = [(r, o) for r in ROUNDINGS for o in OVERFLOWS]
MODE_IDS = [f"{r.value}-{o.value}" for r, o in MODES]


def T(width: int, integer: int, signed: bool = True, rounding=Rounding.TRN, overflow=Overflow.WRAP) -> FixedType:
    return FixedType(width, integer, signed, rounding, overflow)


def build_graph(name: str, inputs: list[ir.TensorSpec], layers: list[tuple[ir.Node, ir.TensorSpec]],
                outputs: list[str]) -> ir.Graph:
    tensors = {s.name: s for s in inputs}
    for _, spec in layers:
        tensors[spec.name] = spec
    return ir.validate(ir.Graph(name, [s.name for s in inputs], outputs, tensors, [n for n, _ in layers]))


def fan_out(name: str, source: ir.TensorSpec, make_node, out_types: list[FixedType]) -> ir.Graph:
    """One input feeding one node per output type (many types checked with one session)."""
    layers = []
    for i, t in enumerate(out_types):
        out = ir.TensorSpec(f"y{i}", source.shape, t)
        layers.append((make_node(f"n{i}", source.name, out.name), out))
    return build_graph(name, [source], layers, [s.name for _, s in layers])


def assert_same_codes(got: np.ndarray, want: np.ndarray, feeds: dict[str, np.ndarray], what: str) -> None:
    assert got.shape == want.shape, f"{what}: onnxruntime shape {got.shape}, golden shape {want.shape}"
    if np.array_equal(got, want):
        return
    bad = np.argwhere(got != want)
    idx = tuple(int(i) for i in bad[0])
    shown = ", ".join(f"{k}[{idx[0]}] = {np.array2string(np.asarray(v)[idx[0]], precision=17)}"
                      for k, v in feeds.items())
    raise AssertionError(f"{what}: {len(bad)} of {got.size} codes differ; first at index {idx}: input {shown}; "
                         f"onnxruntime code {got[idx]}, golden code {want[idx]}")


def check_bit_exact(g: ir.Graph, feeds: dict[str, np.ndarray], **onnx_args) -> dict[str, np.ndarray]:
    """ONNX Runtime codes and real values equal the golden model's for every fixed output."""
    got = run_onnxruntime(to_onnx(g, **onnx_args), feeds)
    gold = emulate.run(g, feeds)
    for y in g.outputs:
        t = g.tensors[y].dtype
        assert t is not None, "check_bit_exact is for fixed outputs"
        assert_same_codes(got[f"{y}_code"], gold[y], feeds, f"graph '{g.name}' output '{y}' ({t})")
        assert got[y].dtype == np.float64
        assert np.array_equal(got[y], fixed.to_float(gold[y], t)), f"output '{y}': real values differ"
    return gold


def all_codes(t: FixedType) -> np.ndarray:
    return np.arange(t.min_code, t.max_code + 1, dtype=np.int64)


def random_codes(rng: np.random.Generator, t: FixedType, shape) -> np.ndarray:
    return rng.integers(t.min_code, t.max_code, size=shape, endpoint=True, dtype=np.int64)


def code_rows(rng: np.random.Generator, t: FixedType, n_rows: int, n_features: int) -> np.ndarray:
    """Random codes plus the rows that stress accumulators: all minimum, all maximum, alternating, zero."""
    edge = np.array([[t.min_code] * n_features, [t.max_code] * n_features, [0] * n_features,
                     [t.min_code, t.max_code] * (n_features // 2) + [t.min_code] * (n_features % 2)],
                    dtype=np.int64)
    return np.concatenate([edge, random_codes(rng, t, (n_rows, n_features))])


# -- Quantize ---------------------------------------------------------------------------------------------

QUANTIZE_TYPES = [
    (8, 3, True), (8, 2, False), (16, 5, True), (16, 16, False),  # 8- and 16-bit, signed and unsigned
    (1, 1, True), (4, 8, False), (6, -3, True),  # 1-bit, negative frac, frac larger than the width
    (62, 30, True), (62, 62, False),  # the widest int64 types: floats beyond int64 must still saturate/wrap
]


def quantize_edge_values(t: FixedType, rng: np.random.Generator) -> np.ndarray:
    """Exact ties k+0.5 LSB (both signs), quarter points, the float32 neighbours of each tie, the range
    ends and beyond, +-0, subnormals, huge and maximal float32 values, then seeded random values."""
    lsb = math.ldexp(1.0, -t.frac)
    if t.width <= 10:
        ks = np.arange(t.min_code - 6, t.max_code + 7)
    else:
        ks = np.concatenate([np.arange(t.min_code - 6, t.min_code + 7), np.arange(-9, 10),
                             np.arange(t.max_code - 6, t.max_code + 7)])
    ks = ks.astype(np.float64)
    grid = np.concatenate([(ks + f) * lsb for f in (0.0, 0.25, 0.5, 0.75, -0.5)]).astype(np.float32)
    ties = ((ks + 0.5) * lsb).astype(np.float32)
    neighbours = np.concatenate([np.nextafter(ties, np.float32(np.inf)), np.nextafter(ties, np.float32(-np.inf))])
    f32 = np.finfo(np.float32)
    specials = np.array([0.0, -0.0, f32.max, -f32.max, f32.smallest_subnormal, -f32.smallest_subnormal,
                         f32.tiny, -f32.tiny, 2.0 ** 62, -2.0 ** 62, 2.0 ** 63, -2.0 ** 63, 2.0 ** 64,
                         -(2.0 ** 64), 3e38, -3e38, 1e30, -1e30, 2.0 ** 61 + 2.0 ** 40, -(2.0 ** 61) - 2.0 ** 40,
                         2.0 ** 100, -(2.0 ** 100)], dtype=np.float32)
    span = max(abs(t.min_value), abs(t.max_value), lsb)
    randoms = np.concatenate([
        rng.uniform(-2 * span, 2 * span, 2000),
        rng.normal(0, span / 3, 1000),
        rng.choice([-1.0, 1.0], 1000) * np.exp2(rng.uniform(-40, 80, 1000)),
    ]).astype(np.float32)
    return np.concatenate([grid, neighbours, specials, randoms]).reshape(-1, 1)


@pytest.mark.parametrize(("rounding", "overflow"), MODES, ids=MODE_IDS)
def test_quantize_matches_golden_model_for_every_mode_on_edge_inputs(rounding, overflow):
    rng = np.random.default_rng(1)
    types = [T(w, i, s, rounding, overflow) for w, i, s in QUANTIZE_TYPES]
    x = ir.TensorSpec("x", (1,))
    g = fan_out("quantize", x, lambda name, src, dst: ir.Quantize(name, (src,), (dst,)), types)
    xs = np.concatenate([quantize_edge_values(t, rng) for t in types])
    check_bit_exact(g, {"x": xs})


def test_quantize_edge_set_contains_exact_ties_of_both_signs():
    t = T(8, 3, rounding=Rounding.RND_CONV)
    xs = quantize_edge_values(t, np.random.default_rng(0)).ravel().astype(np.float64)
    scaled = xs * 2.0 ** t.frac
    ties = scaled[(scaled - np.floor(scaled)) == 0.5]
    assert (ties > 0).any() and (ties < 0).any(), "the edge inputs must contain k+0.5 LSB ties of both signs"


# -- Requantize ----------------------------------------------------------------------------------------------

REQUANTIZE_SOURCES = [T(12, 5), T(10, 3, False), T(16, 6)]
REQUANTIZE_TARGETS = [
    (8, 3, True), (8, 6, True), (8, 4, False), (6, 6, True),  # shift down, signed and unsigned
    (16, 2, True), (5, -2, False),  # shift up
    (8, 80, True),  # shift down by more than 62: every code rounds like its sign
    (8, -60, True), (40, -20, True), (62, 2, True),  # shift up past int64: overflow decides
    (62, 62, True),
]


@pytest.mark.parametrize(("rounding", "overflow"), MODES, ids=MODE_IDS)
def test_requantize_matches_golden_model_on_every_source_code(rounding, overflow):
    targets = [T(w, i, s, rounding, overflow) for w, i, s in REQUANTIZE_TARGETS]
    for src in REQUANTIZE_SOURCES:
        x = ir.TensorSpec("x", (1,), src)
        g = fan_out(f"requantize_{src.to_short()}", x,
                    lambda name, a, y: ir.Requantize(name, (a,), (y,)), targets)
        check_bit_exact(g, {"x": all_codes(src).reshape(-1, 1)})


@settings(max_examples=40, deadline=None)
@given(src=st.tuples(st.integers(1, 24), st.integers(-12, 30), st.booleans()),
       dst=st.tuples(st.integers(1, 24), st.integers(-12, 30), st.booleans(),
                     st.sampled_from(ROUNDINGS), st.sampled_from(OVERFLOWS)),
       seed=st.integers(0, 2 ** 32 - 1))
def test_requantize_between_random_types_matches_golden_model(src, dst, seed):
    src_t, dst_t = T(*src), T(*dst)
    x = ir.TensorSpec("x", (1,), src_t)
    g = fan_out("requantize_random", x, lambda name, a, y: ir.Requantize(name, (a,), (y,)), [dst_t])
    edge = np.clip([src_t.min_code, src_t.max_code, 0, 1, -1, src_t.min_code + 1, src_t.max_code - 1],
                   src_t.min_code, src_t.max_code)
    codes = np.concatenate([random_codes(np.random.default_rng(seed), src_t, 2000), edge])
    check_bit_exact(g, {"x": codes.reshape(-1, 1)})


# -- ReLU and Add -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("src", [T(8, 3), T(16, 6)], ids=["8bit", "16bit"])
def test_relu_matches_golden_model(src):
    targets = [T(6, 2, False, Rounding.RND_ZERO, Overflow.WRAP), T(8, 3),
               T(4, 2, True, Rounding.RND_CONV, Overflow.SAT), T(8, 1, False, Rounding.RND, Overflow.SAT_ZERO),
               T(12, 4, False, Rounding.RND_INF, Overflow.SAT_SYM)]
    x = ir.TensorSpec("x", (1,), src)
    g = fan_out("relu", x, lambda name, a, y: ir.ReLU(name, (a,), (y,)), targets)
    check_bit_exact(g, {"x": all_codes(src).reshape(-1, 1)})


@pytest.mark.parametrize(("ta", "tb"), [(T(8, 3), T(8, 1, False)), (T(16, 6), T(16, 2))], ids=["8bit", "16bit"])
def test_add_of_differently_scaled_operands_matches_golden_model(ta, tb):
    a, b = ir.TensorSpec("a", (1,), ta), ir.TensorSpec("b", (1,), tb)
    targets = [T(8, 4, True, Rounding.RND_CONV, Overflow.SAT), T(6, 2, True, Rounding.RND_MIN_INF, Overflow.WRAP),
               T(8, 3, False, Rounding.TRN_ZERO, Overflow.SAT_ZERO), T(16, 5, True, Rounding.RND, Overflow.SAT_SYM)]
    layers = []
    for i, t in enumerate(targets):
        y = ir.TensorSpec(f"y{i}", (1,), t)
        layers.append((ir.Add(f"add{i}", ("a", "b"), (y.name,)), y))
    g = build_graph("add", [a, b], layers, [s.name for _, s in layers])
    if ta.width == 8:  # every pair of codes
        qa, qb = np.meshgrid(all_codes(ta), all_codes(tb), indexing="ij")
    else:
        rng = np.random.default_rng(5)
        qa, qb = random_codes(rng, ta, 5000), random_codes(rng, tb, 5000)
    check_bit_exact(g, {"a": qa.reshape(-1, 1), "b": qb.reshape(-1, 1)})


# -- Dense and LowRankDense --------------------------------------------------------------------------------------

def exact_accumulator(x: np.ndarray, w: np.ndarray, bias, bias_type, accum: FixedType) -> np.ndarray:
    """The unbounded accumulator value, in Python ints (to show the test really overflows)."""
    acc = x.astype(object) @ w.astype(object).T
    if bias is not None:
        acc = acc + np.asarray(bias).astype(object) * (1 << (accum.frac - bias_type.frac))
    return acc


def assert_overflows_sometimes(acc: np.ndarray, accum: FixedType) -> None:
    outside = (acc < accum.min_code) | (acc > accum.max_code)
    assert outside.any() and not outside.all(), (
        f"test set-up: accumulator {accum} should overflow on some inputs and not on others "
        f"({int(outside.sum())} of {outside.size} outside)")


DENSE_CASES = {
    # name: (x type, weight type, bias type, accumulator integer bits, output type)
    "8bit": (T(8, 3), T(8, 1), T(8, 2), 4, T(8, 3, True, Rounding.RND_CONV, Overflow.SAT)),
    "16bit": (T(16, 6), T(16, 2), T(16, 5), 8, T(16, 6, True, Rounding.RND, Overflow.WRAP)),
}


@pytest.mark.parametrize("accum_overflow", OVERFLOWS, ids=[o.value for o in OVERFLOWS])
@pytest.mark.parametrize("case", list(DENSE_CASES))
def test_dense_with_bias_and_overflowing_accumulator_matches_golden_model(case, accum_overflow):
    xt, wt, bt, acc_int, out = DENSE_CASES[case]
    rng = np.random.default_rng(11)
    n_in, n_out = 10, 6
    accum = T(acc_int + xt.frac + wt.frac, acc_int, True, Rounding.TRN, accum_overflow)
    w, bias = random_codes(rng, wt, (n_out, n_in)), random_codes(rng, bt, n_out)
    x = ir.TensorSpec("x", (n_in,), xt)
    y = ir.TensorSpec("y", (n_out,), out)
    node = ir.Dense("fc", ("x",), ("y",), weight=w, bias=bias, weight_type=wt, bias_type=bt, accum_type=accum)
    g = build_graph("dense", [x], [(node, y)], ["y"])
    xs = code_rows(rng, xt, 3000, n_in)
    assert_overflows_sometimes(exact_accumulator(xs, w, bias, bt, accum), accum)
    check_bit_exact(g, {"x": xs})


@pytest.mark.parametrize("case", ["8bit", "16bit"])
def test_low_rank_dense_with_overflowing_stages_matches_golden_model(case):
    rng = np.random.default_rng(12)
    if case == "8bit":
        xt, vt, ut, bt, mid = T(8, 3), T(8, 1), T(8, 1), T(8, 2), T(8, 3, True, Rounding.RND, Overflow.SAT)
        acc_v_int, acc_int, out = 2, 2, T(8, 2, True, Rounding.RND_INF, Overflow.SAT_SYM)
    else:
        xt, vt, ut, bt, mid = T(16, 6), T(16, 2), T(12, 1), T(16, 4), T(16, 6, True, Rounding.RND_CONV, Overflow.WRAP)
        acc_v_int, acc_int, out = 7, 6, T(16, 5, True, Rounding.TRN_ZERO, Overflow.SAT_ZERO)
    n_in, rank, n_out = 10, 3, 6
    accum_v = T(acc_v_int + xt.frac + vt.frac, acc_v_int, True, Rounding.TRN, Overflow.WRAP)
    accum = T(acc_int + mid.frac + ut.frac, acc_int, True, Rounding.TRN, Overflow.SAT)
    v, u, bias = random_codes(rng, vt, (rank, n_in)), random_codes(rng, ut, (n_out, rank)), random_codes(rng, bt, n_out)
    node = ir.LowRankDense("lr", ("x",), ("y",), u=u, v=v, bias=bias, u_type=ut, v_type=vt, bias_type=bt,
                           mid_type=mid, accum_v_type=accum_v, accum_type=accum)
    g = build_graph("lowrank", [ir.TensorSpec("x", (n_in,), xt)], [(node, ir.TensorSpec("y", (n_out,), out))], ["y"])
    xs = code_rows(rng, xt, 3000, n_in)
    acc_v = exact_accumulator(xs, v, None, None, accum_v)
    assert_overflows_sometimes(acc_v, accum_v)
    h = fixed.requantize(fixed.apply_overflow(acc_v, accum_v), accum_v, mid)
    assert_overflows_sometimes(exact_accumulator(h, u, bias, bt, accum), accum)
    check_bit_exact(g, {"x": xs})


# -- KANLayer --------------------------------------------------------------------------------------------------------

KAN_GRIDS = {
    # power of two LSBs per cell: the index map is a bit slice (mult 1, shift 0)
    "pow2": (-2.0, 2.0, 4),
    # 0.68 per cell: one constant multiply and a shift
    "non_pow2": (-1.3, 2.1, 5),
}


def kan_graph(xt: FixedType, grid: str, order: int, accum_overflow: Overflow, rng) -> ir.Graph:
    lo, hi, size = KAN_GRIDS[grid]
    index_lo, mult, shift, u_bits = index_params(lo, hi, size, xt)
    assert (mult, shift) == (1, 0) if grid == "pow2" else (mult & (mult - 1)) != 0, "test set-up: grid kind"
    n_in, n_out = 3, 4
    ct, bt = T(8, 2), T(10, 1, False)
    accum = T(2 + ct.frac + bt.frac, 2, True, Rounding.TRN, accum_overflow)  # +-2, narrower than the output
    node = ir.KANLayer("kan", ("x",), ("y",), coeffs=random_codes(rng, ct, (n_out, n_in, size + order)),
                       grid_lo=lo, grid_hi=hi, grid_size=size, order=order, coeff_type=ct, basis_type=bt,
                       u_bits=u_bits, index_lo=index_lo, index_mult=mult, index_shift=shift, accum_type=accum)
    out = T(8, 3, True, Rounding.RND_CONV, Overflow.SAT)
    return build_graph("kan", [ir.TensorSpec("x", (n_in,), xt)], [(node, ir.TensorSpec("y", (n_out,), out))], ["y"])


@pytest.mark.parametrize("grid", list(KAN_GRIDS))
@pytest.mark.parametrize("order", [1, 2, 3])
@pytest.mark.parametrize("xt", [T(8, 3), T(16, 4)], ids=["8bit", "16bit"])
def test_kan_layer_matches_golden_model_inside_and_outside_the_grid(xt, order, grid):
    rng = np.random.default_rng(100 * order + len(grid))
    overflow = [Overflow.WRAP, Overflow.SAT, Overflow.SAT_ZERO][order - 1]
    g = kan_graph(xt, grid, order, overflow, rng)
    codes = all_codes(xt) if xt.width == 8 else np.linspace(xt.min_code, xt.max_code, 4001).astype(np.int64)
    sweep = np.repeat(codes[:, None], 3, axis=1)  # every input sees every code (grid edges, outside the grid)
    xs = np.concatenate([sweep, code_rows(rng, xt, 3000, 3)])
    lo_code, hi_code = g.nodes[0].grid_lo * 2.0 ** xt.frac, g.nodes[0].grid_hi * 2.0 ** xt.frac
    assert (xs < lo_code).any() and (xs >= hi_code).any(), "test set-up: inputs must leave the grid"
    gold = check_bit_exact(g, {"x": xs})
    node = g.nodes[0]
    wide = dataclasses.replace(g, nodes=[dataclasses.replace(node, accum_type=node.accum_type.with_(width=40, integer=40 - node.accum_type.frac))])
    unbounded = emulate.run(wide, {"x": xs})["y"]
    assert not np.array_equal(gold["y"], unbounded), "test set-up: the accumulator should overflow on some inputs"


# -- a whole fixed-point network from float inputs ---------------------------------------------------------------

def mixed_network(rng) -> ir.Graph:
    xt = T(10, 3, True, Rounding.RND_CONV, Overflow.SAT)
    wt, bt = T(8, 1), T(8, 3)
    h1t = T(8, 3, False, Rounding.RND, Overflow.SAT)
    lo, hi, size, k = -1.0, 3.0, 8, 3
    index_lo, mult, shift, u_bits = index_params(lo, hi, size, h1t)
    ct, basis = T(8, 2), T(9, 1, False)
    kt = T(10, 4, True, Rounding.RND_CONV, Overflow.SAT)
    layers = [
        (ir.Quantize("q", ("x",), ("xq",)), ir.TensorSpec("xq", (6,), xt)),
        (ir.Dense("fc", ("xq",), ("h",), weight=random_codes(rng, wt, (5, 6)), bias=random_codes(rng, bt, 5),
                  weight_type=wt, bias_type=bt, accum_type=T(24, 10)), ir.TensorSpec("h", (5,), T(8, 3))),
        (ir.ReLU("relu", ("h",), ("h1",)), ir.TensorSpec("h1", (5,), h1t)),
        (ir.KANLayer("kan", ("h1",), ("k",), coeffs=random_codes(rng, ct, (4, 5, size + k)), grid_lo=lo, grid_hi=hi,
                     grid_size=size, order=k, coeff_type=ct, basis_type=basis, u_bits=u_bits, index_lo=index_lo,
                     index_mult=mult, index_shift=shift, accum_type=T(20, 6)), ir.TensorSpec("k", (4,), kt)),
        (ir.LowRankDense("lr", ("k",), ("z",), u=random_codes(rng, wt, (3, 2)), v=random_codes(rng, wt, (2, 4)),
                         bias=None, u_type=wt, v_type=wt, mid_type=T(10, 4, True, Rounding.RND, Overflow.SAT),
                         accum_v_type=T(20, 20 - 13), accum_type=T(20, 20 - 13)), ir.TensorSpec("z", (3,), T(8, 4))),
        (ir.Requantize("rq", ("z",), ("y",)), ir.TensorSpec("y", (3,), T(6, 3, False, Rounding.RND_INF, Overflow.SAT_ZERO))),
    ]
    tensors = {"x": ir.TensorSpec("x", (6,))} | {s.name: s for _, s in layers}
    return ir.validate(ir.Graph("mixed", ["x"], ["y", "k"], tensors, [n for n, _ in layers]))


def test_float_input_network_is_bit_exact_end_to_end():
    rng = np.random.default_rng(21)
    g = mixed_network(rng)
    xs = np.concatenate([rng.normal(0, 2, (5000, 6)), rng.uniform(-5, 5, (1000, 6))]).astype(np.float32)
    check_bit_exact(g, {"x": xs})


# -- float graphs -------------------------------------------------------------------------------------------------

def float_network(rng) -> ir.Graph:
    f = lambda *shape: rng.normal(0, 0.5, shape).astype(np.float32)  # noqa: E731
    layers = [
        (ir.Dense("fc", ("x",), ("h",), weight=f(5, 6), bias=f(5)), ir.TensorSpec("h", (5,))),
        (ir.ReLU("relu", ("h",), ("r",)), ir.TensorSpec("r", (5,))),
        (ir.LowRankDense("lr", ("r",), ("l",), u=f(5, 2), v=f(2, 5), bias=f(5)), ir.TensorSpec("l", (5,))),
        (ir.Add("add", ("l", "h"), ("a",)), ir.TensorSpec("a", (5,))),
        (ir.KANLayer("kan", ("a",), ("y",), coeffs=f(3, 5, 7 + 3), grid_lo=-1.5, grid_hi=2.0, grid_size=7, order=3),
         ir.TensorSpec("y", (3,))),
    ]
    tensors = {"x": ir.TensorSpec("x", (6,))} | {s.name: s for _, s in layers}
    return ir.validate(ir.Graph("float", ["x"], ["y", "a"], tensors, [n for n, _ in layers]))


def test_float_graph_matches_golden_model_within_float32_tolerance():
    """Tolerance: |onnx - golden| <= 1e-5 * (1 + |golden|).

    Dense/LowRank/Add run in float32 in both, but ONNX Runtime's MatMul adds the products in another
    order (and with FMA) than numpy's BLAS: each output of a k-term dot product may differ by about
    k * 2**-24 * sum|w x|, ~1e-6 relative here, and the KAN layer passes it on (its spline is smooth, with
    |c| < 2). The KAN basis itself is the same float64 formula in both; only the final cast to float32
    may land one float32 ulp apart.
    """
    rng = np.random.default_rng(31)
    g = float_network(rng)
    xs = np.concatenate([rng.normal(0, 1.5, (4000, 6)), rng.uniform(-6, 6, (1000, 6))]).astype(np.float32)
    got = run_onnxruntime(to_onnx(g), xs)
    gold = emulate.run(g, xs)
    for y in g.outputs:
        assert got[y].dtype == np.float32 and got[y].shape == gold[y].shape
        err = np.abs(got[y].astype(np.float64) - gold[y]) / (1 + np.abs(gold[y].astype(np.float64)))
        i = np.unravel_index(int(np.argmax(err)), err.shape)
        assert err[i] <= 1e-5, f"output '{y}': worst relative error {err[i]:.3g} at {i}: input {xs[i[0]]}, " \
                               f"onnxruntime {got[y][i]!r}, golden {gold[y][i]!r}"


@pytest.mark.parametrize("order", [1, 2, 3])
def test_float_kan_layer_is_within_one_float32_ulp_of_golden_model(order):
    rng = np.random.default_rng(order)
    node = ir.KANLayer("kan", ("x",), ("y",), coeffs=rng.normal(0, 1, (4, 3, 6 + order)).astype(np.float32),
                       grid_lo=-1.0, grid_hi=2.0, grid_size=6, order=order)
    g = build_graph("kan_float", [ir.TensorSpec("x", (3,))], [(node, ir.TensorSpec("y", (4,)))], ["y"])
    xs = np.concatenate([rng.uniform(-2, 3, (4000, 3)), np.linspace(-1, 2, 3 * 301).reshape(-1, 3)]).astype(np.float32)
    got, gold = run_onnxruntime(to_onnx(g), xs)["y"], emulate.run(g, xs)["y"]
    ulps = np.abs(got.astype(np.float64) - gold) / np.spacing(np.maximum(np.abs(gold), np.float32(1e-3)))
    assert ulps.max() <= 1, f"float KAN differs by {ulps.max():.3g} float32 ulps"


# -- the model file itself -------------------------------------------------------------------------------------------

def test_same_graph_gives_byte_identical_valid_model(tmp_path):
    g = mixed_network(np.random.default_rng(41))
    ir.save(g, tmp_path)
    first = to_onnx(g).SerializeToString()
    second = to_onnx(ir.load(tmp_path)).SerializeToString()
    assert first == second
    model = onnx.load_from_string(first)
    onnx.checker.check_model(model, full_check=True)
    assert "bitforge" in model.doc_string and model.producer_name == "bitforge"
    for spec in g.tensors.values():
        assert f"{spec.name}: {spec.type_str()}" in model.doc_string
    names = [n.name for n in model.graph.node]
    assert all(names) and len(set(names)) == len(names)


def test_model_follows_the_naming_convention():
    g = mixed_network(np.random.default_rng(42))
    model = to_onnx(g)
    ins = {i.name: i.type.tensor_type.elem_type for i in model.graph.input}
    outs = {o.name: o.type.tensor_type.elem_type for o in model.graph.output}
    assert ins == {"x": onnx.TensorProto.FLOAT}
    assert outs == {"y_code": onnx.TensorProto.INT64, "y": onnx.TensorProto.DOUBLE,
                    "k_code": onnx.TensorProto.INT64, "k": onnx.TensorProto.DOUBLE}
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"


@pytest.mark.parametrize("opset", [13, 21])
def test_other_opsets_give_the_same_codes(opset):
    rng = np.random.default_rng(43)
    g = mixed_network(rng)
    check_bit_exact(g, {"x": rng.normal(0, 2, (2000, 6)).astype(np.float32)}, opset=opset)


def test_saved_model_and_reused_session_give_the_same_outputs(tmp_path):
    rng = np.random.default_rng(44)
    g = mixed_network(rng)
    path = save_onnx(to_onnx(g), tmp_path / "model.onnx")
    xs = rng.normal(0, 2, (500, 6)).astype(np.float32)
    session = make_session(path, threads=1)
    a, b = run_onnxruntime(path, xs), run_onnxruntime(session, {"x": xs})
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


# -- errors -------------------------------------------------------------------------------------------------------

def test_accumulator_beyond_int64_is_refused_naming_the_node():
    xt, wt = T(40, 10), T(40, 10)
    node = ir.Dense("huge_fc", ("x",), ("y",), weight=np.full((2, 4), wt.max_code, dtype=np.int64), weight_type=wt,
                    accum_type=T(90, 30))
    g = build_graph("huge", [ir.TensorSpec("x", (4,), xt)], [(node, ir.TensorSpec("y", (2,), T(16, 8)))], ["y"])
    with pytest.raises(OnnxExportError, match="huge_fc.*int64"):
        to_onnx(g)


def test_missing_accumulator_type_is_refused_pointing_at_the_precision_pass():
    node = ir.Dense("fc", ("x",), ("y",), weight=np.ones((2, 3), dtype=np.int64), weight_type=T(8, 1))
    g = build_graph("noacc", [ir.TensorSpec("x", (3,), T(8, 3))], [(node, ir.TensorSpec("y", (2,), T(8, 3)))], ["y"])
    with pytest.raises(OnnxExportError, match="'fc'.*accum_type.*precision pass"):
        to_onnx(g)


def test_colliding_onnx_names_are_refused():
    g = fan_out("clash", ir.TensorSpec("x", (1,), T(8, 3)), lambda name, a, y: ir.Requantize(name, (a,), (y,)),
                [T(8, 2), T(8, 1)])
    g = dataclasses.replace(g, tensors=dict(g.tensors), nodes=list(g.nodes))
    g.tensors["y0_code"] = ir.TensorSpec("y0_code", (1,), T(8, 1))
    g.tensors.pop("y1")
    g.nodes[1] = dataclasses.replace(g.nodes[1], outputs=("y0_code",))
    g.outputs = ["y0", "y0_code"]
    with pytest.raises(OnnxExportError, match="y0_code"):
        to_onnx(g)


@pytest.mark.parametrize(("feed", "message"), [
    ({"x": np.array([[200]])}, "outside"),
    ({"x": np.array([[1.5]])}, "int64 codes"),
    ({"x": np.array([1, 2])}, "shape"),
    ({"z": np.array([[1]])}, "missing"),
])
def test_run_onnxruntime_refuses_bad_fixed_inputs(feed, message):
    g = fan_out("bad", ir.TensorSpec("x", (1,), T(8, 3)), lambda name, a, y: ir.Requantize(name, (a,), (y,)), [T(8, 2)])
    with pytest.raises(OnnxRunError, match=message):
        run_onnxruntime(to_onnx(g), feed)


def test_run_onnxruntime_refuses_non_finite_float_inputs():
    g = fan_out("nan", ir.TensorSpec("x", (1,)), lambda name, a, y: ir.Quantize(name, (a,), (y,)), [T(8, 3)])
    with pytest.raises(OnnxRunError, match="NaN"):
        run_onnxruntime(to_onnx(g), np.array([[np.nan]], dtype=np.float32))
