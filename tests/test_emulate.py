"""Golden model: each op against an independent exact reference written with Python Fractions."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from bitforge.toolchain import emulate, ir
from bitforge.toolchain.bspline import basis_table, cardinal_bspline
from bitforge.toolchain.fixed import FixedType, Overflow, Rounding, parse_type, quantize, requantize

from conftest import small_graph


def ref_round(v: Fraction, mode: Rounding) -> int:
    """Round an exact rational to an integer, written from the mode definitions (not from fixed.py)."""
    fl = math.floor(v)
    d = v - fl
    if d == 0:
        return fl
    if mode == Rounding.TRN:
        return fl
    if mode == Rounding.TRN_ZERO:
        return fl if v > 0 else fl + 1
    if d != Fraction(1, 2):
        return fl + 1 if d > Fraction(1, 2) else fl
    return {Rounding.RND: fl + 1, Rounding.RND_ZERO: fl if v > 0 else fl + 1,
            Rounding.RND_INF: fl + 1 if v > 0 else fl, Rounding.RND_MIN_INF: fl,
            Rounding.RND_CONV: fl + (fl % 2)}[mode]


def ref_cast(v: Fraction, t: FixedType) -> int:
    """Real value -> code of t: round, then overflow (SAT/WRAP only here)."""
    q = ref_round(v * 2 ** t.frac, t.rounding)
    if t.overflow == Overflow.SAT:
        return min(max(q, t.min_code), t.max_code)
    q %= 2 ** t.width
    return q - 2 ** t.width if t.signed and q > t.max_code else q


def F(code, t: FixedType) -> Fraction:
    return Fraction(int(code), 2 ** t.frac) if t.frac >= 0 else Fraction(int(code) * 2 ** -t.frac)


def test_dense_matches_exact_rational_reference():
    rng = np.random.default_rng(3)
    X, W = parse_type("fixed<12,4,RND,SAT>"), parse_type("fixed<8,1,RND_CONV,SAT>")
    acc = FixedType(12 + 8 + 5, 4 + 1 + 5)
    out = parse_type("fixed<10,4,RND_CONV,SAT>")
    w = quantize(rng.normal(size=(5, 7)), W)
    b = quantize(rng.normal(size=5), W)
    g = ir.sequential("d", ir.TensorSpec("x", (7,), X),
                      [(ir.Dense("d", ("x",), ("y",), weight=w, bias=b, weight_type=W, bias_type=W, accum_type=acc),
                        ir.TensorSpec("y", (5,), out))])
    ir.validate(g)
    xq = rng.integers(X.min_code, X.max_code + 1, size=(40, 7))
    got = emulate.run(g, xq)["y"]
    for n in range(40):
        for o in range(5):
            v = sum(F(xq[n, i], X) * F(w[o, i], W) for i in range(7)) + F(b[o], W)
            assert got[n, o] == ref_cast(v, out), (n, o)


def test_accumulator_overflow_applies_to_the_final_sum():
    X = parse_type("fixed<8,4>")
    W = parse_type("fixed<8,4>")
    acc_wrap = FixedType(12, 4)  # frac 8 = 4 + 4, deliberately too narrow
    acc_sat = FixedType(12, 4, overflow="SAT")
    w = np.full((1, 4), 127, dtype=np.int64)
    xq = np.full((1, 4), 127, dtype=np.int64)  # sum = 4 * 127 * 127 = 64516 codes, > 2047
    for acc, expect in ((acc_wrap, ((64516 + 2048) % 4096) - 2048), (acc_sat, 2047)):
        g = ir.sequential("a", ir.TensorSpec("x", (4,), X),
                          [(ir.Dense("d", ("x",), ("y",), weight=w, weight_type=W, accum_type=acc),
                            ir.TensorSpec("y", (1,), acc))])
        assert emulate.run(g, xq)["y"][0, 0] == expect


def test_exact_matmul_float_path_equals_integer_path():
    rng = np.random.default_rng(0)
    x = rng.integers(-2 ** 15, 2 ** 15, size=(100, 64))
    w = rng.integers(-2 ** 7, 2 ** 7, size=(32, 64))
    assert np.array_equal(emulate.exact_matmul(x, w), x @ w.T)


def test_exact_matmul_is_exact_beyond_float64_precision():
    x = np.array([[2 ** 40 + 1, 3]], dtype=np.int64)
    w = np.array([[2 ** 20 + 1, -1]], dtype=np.int64)
    assert emulate.exact_matmul(x, w)[0, 0] == (2 ** 40 + 1) * (2 ** 20 + 1) - 3


def test_basis_table_rows_sum_to_one_and_track_the_exact_spline():
    bt = parse_type("ufixed<13,1,RND_CONV,SAT>")
    for k in (1, 2, 3):
        tab = basis_table(k, 5, bt)
        assert np.all(tab.sum(axis=1) == 2 ** bt.frac)
        assert tab.min() >= 0  # non-negative weights keep |phi| <= max|c|
        for uc in range(32):
            for m in range(k + 1):
                exact = cardinal_bspline(Fraction(uc, 32) + k - m, k) * 2 ** bt.frac
                assert abs(tab[uc, m] - exact) <= (k + 1) / 2, (k, uc, m)  # the largest absorbs the others' rounding


def test_kan_layer_matches_rational_reference():
    g = small_graph(seed=5)
    n = g.node("kan")
    X = g.tensors["s"].dtype
    rng = np.random.default_rng(9)
    s = rng.integers(X.min_code, X.max_code + 1, size=(30, 6))
    s[0] = X.min_code  # far below the grid: clamps to cell 0, u = 0
    s[1] = X.max_code  # far above: clamps to the last position
    sub = ir.Graph("k", ["s"], ["y"], {k: g.tensors[k] for k in ("s", "y")}, [n])
    got = emulate.run(sub, s)["y"]
    table = basis_table(n.order, n.u_bits, n.basis_type)
    G, U = n.grid_size, n.u_bits
    for r in range(30):
        for o in range(3):
            total = Fraction(0)
            for i in range(6):
                pos = Fraction((int(s[r, i]) - n.index_lo) * n.index_mult, 2 ** n.index_shift)
                sc = min(max(math.floor(pos), 0), G * 2 ** U - 1)
                cell, u = sc // 2 ** U, sc % 2 ** U
                for m in range(n.order + 1):
                    total += F(n.coeffs[o, i, cell + m], n.coeff_type) * F(table[u, m], n.basis_type)
            assert got[r, o] == ref_cast(total, g.tensors["y"].dtype), (r, o)


def test_kan_index_map_is_a_bit_slice_for_power_of_two_cells():
    from bitforge.toolchain.bspline import index_params
    lo, mult, shift, ub = index_params(-2.0, 2.0, 4, parse_type("fixed<16,6>"))
    assert (mult, shift, ub) == (1, 0, 10)  # one cell = 1.0 = 2**10 LSBs: s is x - lo itself


def test_whole_graph_runs_batched_and_rowwise_identically(graph):
    x = np.random.default_rng(2).uniform(-5, 5, size=(50, 4)).astype(np.float32)
    full = emulate.run(graph, x)["y"]
    rows = np.concatenate([emulate.run(graph, x[i:i + 1])["y"] for i in range(50)])
    assert np.array_equal(full, rows)


def test_missing_accumulator_type_names_the_pass_to_run(graph):
    import dataclasses
    g = graph.copy()
    g.nodes = [dataclasses.replace(n, accum_type=None) if n.name == "fc1" else n for n in g.nodes]
    with pytest.raises(emulate.EmulationError, match=r"Dense 'fc1'.*accum_type.*precision"):
        emulate.run(g, np.zeros((1, 4), dtype=np.float32))


def test_wrong_input_shape_is_reported(graph):
    with pytest.raises(emulate.EmulationError, match=r"expected shape \(batch, 4\)"):
        emulate.run(graph, np.zeros((3, 5), dtype=np.float32))


def test_clip_bounds_beyond_the_type_do_not_act_even_at_float_max():
    """ONNX exporters write FLT_MAX for a missing Clip bound: its code (about 2**136) cannot act on an 8-bit input and
    must not overflow the golden model's int64 codes; ONNX Runtime agrees. A lower bound above the type's range
    still acts (every output is that bound, here saturated by the output type)."""
    from bitforge.toolchain.backends.onnx_backend import run_onnxruntime, to_onnx
    from bitforge.toolchain.verify.compare import compare_outputs

    xt, yt = parse_type("fixed<8,3>"), parse_type("fixed<10,5,RND,SAT>")
    for lo, hi, expect in ((-3.4e38, 3.4e38, None), (None, 3.4e38, None), (100.0, 3.4e38, yt.max_code)):
        g = ir.Graph("clip", ["x"], ["y"],
                     {"x": ir.TensorSpec("x", (4,)), "xq": ir.TensorSpec("xq", (4,), xt),
                      "y": ir.TensorSpec("y", (4,), yt)},
                     [ir.Quantize("q", ("x",), ("xq",)), ir.Clip("c", ("xq",), ("y",), lo=lo, hi=hi)])
        x = np.linspace(-20, 20, 64, dtype=np.float32).reshape(16, 4)
        y = emulate.run(g, {"x": x})["y"]
        if expect is None:  # the identity, then the output type's rounding and saturation
            assert np.array_equal(y, requantize(quantize(x.astype(np.float64), xt), xt, yt))
        else:
            assert (y == expect).all()
        assert compare_outputs(g, {"x": x}, run_onnxruntime(to_onnx(g), {"x": x}), "onnxruntime").mismatches == 0
