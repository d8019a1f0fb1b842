"""Interval analysis and precision inference, checked against the golden model.

Soundness: every value the golden model produces for inputs inside the declared range lies inside the
computed bounds (random inputs plus the range's corners). Tightness and minimality: where the analysis
is exact (a Dense layer fed by its quantizer, or KAN edges with constant coefficients) a corner input
reaches the bound, and an accumulator one bit narrower than the inferred one wraps on it.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bitforge.toolchain import emulate, ir
from bitforge.toolchain.bspline import basis_table, index_params
from bitforge.toolchain.fixed import FixedType, Overflow, Rounding, parse_type, quantize, to_float
from bitforge.toolchain.passes.intervals import IntervalError, analyze
from bitforge.toolchain.passes.precision import SaturationWarning, check_precision, infer_precision

from conftest import small_graph

ROUNDINGS, OVERFLOWS = list(Rounding), list(Overflow)


def inputs_in_range(rng, lo, hi, n_features: int, n: int = 300) -> np.ndarray:
    """Uniform samples, the two all-endpoint corners and random endpoint mixes, as float32 in [lo, hi]."""
    lo, hi = np.broadcast_to(lo, n_features), np.broadcast_to(hi, n_features)
    uniform = rng.uniform(lo, hi, size=(n, n_features))
    mixes = np.where(rng.random((n, n_features)) < 0.5, lo, hi)
    x = np.vstack([uniform, mixes, lo[None], hi[None]]).astype(np.float32)
    # float32 rounding may step just outside a bound that float32 cannot represent: keep the samples inside.
    return np.clip(x, lo.astype(np.float32), hi.astype(np.float32)).astype(np.float32)


def assert_sound(g: ir.Graph, x: np.ndarray, input_range=None) -> None:
    env = emulate.run(g, x, keep=True)
    bounds = analyze(g, input_range).tensors
    for name, b in bounds.items():
        inside = b.contains(env[name])
        assert inside.all(), (f"tensor '{name}': sample {np.argmin(inside)} value {env[name][np.argmin(inside)]} "
                              f"outside bounds [{b.lo}, {b.hi}]")


def dense_after_quantizer(rng, x_type: FixedType, w_type: FixedType, n_in=5, n_out=4, out=None) -> ir.Graph:
    w = quantize(rng.normal(size=(n_out, n_in)) * 2, w_type)
    b = quantize(rng.normal(size=n_out), w_type)
    out = out or FixedType(40, 20)
    tensors = {"in": ir.TensorSpec("in", (n_in,)), "x": ir.TensorSpec("x", (n_in,), x_type),
               "y": ir.TensorSpec("y", (n_out,), out)}
    nodes = [ir.Quantize("q", ("in",), ("x",)),
             ir.Dense("fc", ("x",), ("y",), weight=w, bias=b, weight_type=w_type, bias_type=w_type)]
    return ir.Graph("dense", ["in"], ["y"], tensors, nodes)


# -- soundness ---------------------------------------------------------------------------------------

def test_bounds_contain_every_value_of_the_small_graph_for_inputs_in_range():
    rng = np.random.default_rng(1)
    for seed in range(3):
        g = infer_precision(small_graph(seed))
        assert_sound(g, inputs_in_range(rng, -3.0, 3.0, 4))


def test_bounds_hold_for_per_feature_input_ranges():
    lo, hi = [-1.0, 0.0, -3.0, 0.5], [1.0, 2.5, -1.0, 0.75]
    g = infer_precision(small_graph(4), input_range=[lo, hi])
    b = analyze(g, [lo, hi]).tensors["x"]
    np.testing.assert_array_equal(to_float(b.lo.astype(np.int64), g.tensors["x"].dtype), lo)
    np.testing.assert_array_equal(to_float(b.hi.astype(np.int64), g.tensors["x"].dtype), hi)
    assert_sound(g, inputs_in_range(np.random.default_rng(2), np.array(lo), np.array(hi), 4), [lo, hi])


def random_type(rng, max_width: int = 12, signed=None) -> FixedType:
    return FixedType(int(rng.integers(2, max_width + 1)), int(rng.integers(-2, 8)),
                     bool(rng.random() < 0.8) if signed is None else signed,
                     ROUNDINGS[rng.integers(len(ROUNDINGS))], OVERFLOWS[rng.integers(len(OVERFLOWS))])


def random_dense(rng, name: str, x_type: FixedType, n_in: int, n_out: int, src: str, dst: str) -> ir.Dense:
    wt = random_type(rng, 8, signed=True)
    w = rng.integers(wt.min_code, wt.max_code + 1, size=(n_out, n_in))
    frac = x_type.frac + wt.frac
    bias_width = int(rng.integers(3, 10))
    bt = FixedType(bias_width, bias_width - (frac - int(rng.integers(0, 4))), True)  # frac(b) <= frac(acc)
    acc = None
    if rng.random() < 0.5:  # a user accumulator, often too narrow: exercises the overflow rules
        width = int(rng.integers(4, 24))
        acc = FixedType(width, width - frac, True, Rounding.TRN, OVERFLOWS[rng.integers(len(OVERFLOWS))])
    return ir.Dense(name, (src,), (dst,), weight=w, bias=rng.integers(bt.min_code, bt.max_code + 1, size=n_out),
                    weight_type=wt, bias_type=bt, accum_type=acc)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1))
def test_bounds_are_sound_for_random_types_and_every_overflow_mode(seed):
    """Quantize -> Dense -> ReLU -> Dense -> Add(skip) -> Requantize with random types, narrow ones included."""
    rng = np.random.default_rng(seed)
    n = 4
    lo = float(rng.uniform(-6, 2))
    hi = lo + float(rng.uniform(0.01, 6))
    types = {t: random_type(rng) for t in ("x", "h", "r", "z", "s", "y")}
    tensors = {"in": ir.TensorSpec("in", (n,))} | {t: ir.TensorSpec(t, (n,), types[t]) for t in types}
    nodes = [ir.Quantize("q", ("in",), ("x",)), random_dense(rng, "fc1", types["x"], n, n, "x", "h"),
             ir.ReLU("relu", ("h",), ("r",)), random_dense(rng, "fc2", types["r"], n, n, "r", "z"),
             ir.Add("skip", ("z", "x"), ("s",)), ir.Requantize("rq", ("s",), ("y",))]
    g = infer_precision(ir.Graph("rand", ["in"], ["y"], tensors, nodes), input_range=[lo, hi])
    ir.validate(g)
    assert_sound(g, inputs_in_range(rng, lo, hi, n, 200), [lo, hi])


def kan_graph(rng, order: int, grid_size: int, x_type: FixedType, basis: FixedType, coeffs=None,
              n_in=3, n_out=2) -> ir.Graph:
    ct = FixedType(10, 3, True)
    if coeffs is None:
        coeffs = rng.integers(ct.min_code, ct.max_code + 1, size=(n_out, n_in, grid_size + order))
    lo_code, mult, shift, u_bits = index_params(-2.0, 2.0, grid_size, x_type)
    kan = ir.KANLayer("kan", ("x",), ("y",), coeffs=coeffs, grid_lo=-2.0, grid_hi=2.0, grid_size=grid_size,
                      order=order, coeff_type=ct, basis_type=basis, u_bits=u_bits, index_lo=lo_code,
                      index_mult=mult, index_shift=shift)
    tensors = {"in": ir.TensorSpec("in", (n_in,)), "x": ir.TensorSpec("x", (n_in,), x_type),
               "y": ir.TensorSpec("y", (n_out,), FixedType(40, 20))}
    return ir.Graph("kan", ["in"], ["y"], tensors, [ir.Quantize("q", ("in",), ("x",)), kan])


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), order=st.integers(1, 5), grid_size=st.integers(2, 6),
       basis_frac=st.integers(2, 10))
def test_kan_bounds_are_sound_for_random_coefficients_and_ranges(seed, order, grid_size, basis_frac):
    rng = np.random.default_rng(seed)
    g = infer_precision(kan_graph(rng, order, grid_size, parse_type("fixed<12,3,RND_CONV,SAT>"),
                                  FixedType(basis_frac + 1, 1, False)))
    lo = float(rng.uniform(-3, 2))
    hi = lo + float(rng.uniform(0, 3))
    assert_sound(g, inputs_in_range(rng, lo, hi, 3, 200), [lo, hi])


def test_kan_bounds_stay_sound_for_high_order_coarse_tables():
    """Order-5 tables at 8 fractional bits: many weights round to 0 or 1 LSB; the table stays non-negative."""
    basis = FixedType(9, 1, False)
    x_type = parse_type("fixed<12,3,RND_CONV,SAT>")
    g = kan_graph(np.random.default_rng(5), 5, 3, x_type, basis)
    assert basis_table(5, g.nodes[1].u_bits, basis).min() >= 0
    g = infer_precision(g)
    assert_sound(g, inputs_in_range(np.random.default_rng(6), -2.5, 2.5, 3, 2000), [-2.5, 2.5])


def test_kan_output_never_exceeds_the_largest_coefficient():
    """Cubic table, u_bits 8, 8 fractional bits, coefficients [-100, 100, ...]: with a non-negative table that sums
    to one, phi stays within [min c, max c] at every input code (completing b_0 alone would reach 25800 > 100 * 256)."""
    basis = FixedType(9, 1, False)
    x_type = parse_type("fixed<12,3,RND_CONV,SAT>")
    coeffs = np.array([[[-100] + [100] * 7]])
    g = infer_precision(kan_graph(np.random.default_rng(0), 3, 5, x_type, basis, coeffs=coeffs, n_in=1, n_out=1))
    kan = g.node("kan")
    assert kan.u_bits == 8
    codes = np.arange(x_type.min_code, x_type.max_code + 1)
    x = to_float(codes, x_type).astype(np.float32)[:, None]
    acc = emulate.run(g, x)["y"][:, 0] >> (g.tensors["y"].dtype.frac - kan.accum_type.frac)  # y is finer: exact
    assert acc.max() <= 100 * 256 and acc.min() >= -100 * 256
    assert_sound(g, x)


def test_float_graph_bounds_contain_the_float32_golden_values():
    rng = np.random.default_rng(7)
    g = ir.sequential("f", ir.TensorSpec("x", (6,)), [
        (ir.Dense("fc1", ("x",), ("h",), weight=rng.normal(size=(5, 6)).astype(np.float32),
                  bias=rng.normal(size=5).astype(np.float32)), ir.TensorSpec("h", (5,))),
        (ir.ReLU("relu", ("h",), ("r",)), ir.TensorSpec("r", (5,))),
        (ir.LowRankDense("lr", ("r",), ("y",), u=rng.normal(size=(4, 2)).astype(np.float32),
                         v=rng.normal(size=(2, 5)).astype(np.float32), bias=None), ir.TensorSpec("y", (4,)))])
    assert_sound(g, inputs_in_range(rng, -0.3, 0.7, 6), [-0.3, 0.7])


# -- tightness and minimal accumulators --------------------------------------------------------------

def corner_inputs(g: ir.Graph, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """For every output o, the inputs that maximise and minimise sum_i x_i W_oi (x_i at lo or hi by sign)."""
    w = g.node("fc").weight
    up = np.where(w > 0, hi, lo)
    down = np.where(w > 0, lo, hi)
    return up.astype(np.float32), down.astype(np.float32)


def exact_accumulator(g: ir.Graph, x: np.ndarray) -> np.ndarray:
    """sum_i x_i W_oi + b_o on codes, in Python ints (independent of the interval code)."""
    fc, xt = g.node("fc"), g.tensors["x"].dtype
    xq = quantize(x, xt).astype(object)
    shift = xt.frac + fc.weight_type.frac - fc.bias_type.frac
    return xq @ fc.weight.astype(object).T + fc.bias.astype(object) * (1 << shift)


def test_dense_bounds_after_a_quantizer_are_attained_at_the_corners():
    g = infer_precision(dense_after_quantizer(np.random.default_rng(8), parse_type("fixed<10,3,RND_CONV,SAT>"),
                                              parse_type("fixed<8,2,RND_CONV,SAT>")), input_range=[-2.5, 1.75])
    acc = next(s for s in analyze(g, [-2.5, 1.75]).stages if s.where == "accumulator").exact
    up, down = corner_inputs(g, -2.5, 1.75)
    reached_hi = [exact_accumulator(g, up[o][None])[0, o] for o in range(len(up))]
    reached_lo = [exact_accumulator(g, down[o][None])[0, o] for o in range(len(down))]
    assert list(acc.hi) == reached_hi
    assert list(acc.lo) == reached_lo


@pytest.mark.parametrize("seed", range(4))
def test_inferred_dense_accumulator_never_wraps_and_one_bit_less_would(seed):
    rng = np.random.default_rng(seed)
    lo, hi = -4.0, 3.5
    # The output type is wide and has the accumulator's LSB, so the output shows the accumulator's code.
    x_t, w_t = parse_type("fixed<9,4,RND_CONV,SAT>"), parse_type("fixed<7,2,RND_CONV,SAT>")
    g = dense_after_quantizer(rng, x_t, w_t, out=FixedType(60, 60 - x_t.frac - w_t.frac))
    g = infer_precision(g, input_range=[lo, hi])
    acc = g.node("fc").accum_type
    assert (acc.frac, acc.overflow, acc.rounding, acc.signed) == (x_t.frac + w_t.frac, Overflow.WRAP, Rounding.TRN,
                                                                   True)
    up, down = corner_inputs(g, lo, hi)
    x = np.vstack([up, down, inputs_in_range(rng, lo, hi, 5, 100)])
    exact = exact_accumulator(g, x)
    np.testing.assert_array_equal(emulate.run(g, x)["y"].astype(object), exact)
    narrow = g.copy()
    narrow.nodes[1] = dataclasses.replace(narrow.node("fc"), accum_type=acc.with_(width=acc.width - 1,
                                                                                 integer=acc.integer - 1))
    wrapped = emulate.run(narrow, np.vstack([up, down]))["y"].astype(object)
    assert (wrapped != exact[:len(up) * 2]).any(), "an accumulator one bit narrower held every corner sum"


def test_inferred_low_rank_accumulators_give_the_same_outputs_as_wide_ones():
    rng = np.random.default_rng(11)
    g = infer_precision(small_graph(2), overwrite=True)
    node = g.node("lr")
    assert node.accum_v_type.frac == g.tensors["r1"].dtype.frac + node.v_type.frac
    assert node.accum_type.frac == node.mid_type.frac + node.u_type.frac
    wide = small_graph(2)  # the fixture's accumulators are 8 bits wider than the exact products need
    x = inputs_in_range(rng, -3.0, 3.0, 4, 500)
    for t in ("h2", "y"):
        np.testing.assert_array_equal(emulate.run(g, x, keep=True)[t], emulate.run(wide, x, keep=True)[t])
    assert node.accum_v_type.width < wide.node("lr").accum_v_type.width


def test_kan_accumulator_is_minimal_when_each_edge_is_constant():
    """With c[o, i, :] constant, phi_oi is that constant for every input: the bound is attained everywhere."""
    rng = np.random.default_rng(12)
    const = rng.integers(-500, 500, size=(2, 3, 1))
    coeffs = np.repeat(const, 5 + 3, axis=2)
    basis = FixedType(9, 1, False)
    g = kan_graph(rng, 3, 5, parse_type("fixed<12,3,RND_CONV,SAT>"), basis, coeffs=coeffs)
    acc_frac = 7 + basis.frac
    g.tensors["y"] = ir.TensorSpec("y", (2,), FixedType(60, 60 - acc_frac))
    g = infer_precision(g)
    acc = g.node("kan").accum_type
    sums = const[:, :, 0].sum(axis=1) * (1 << basis.frac)
    x = inputs_in_range(rng, -2.0, 2.0, 3, 50)
    np.testing.assert_array_equal(emulate.run(g, x)["y"], np.broadcast_to(sums, (len(x), 2)))
    narrow = g.copy()
    narrow.nodes[1] = dataclasses.replace(narrow.node("kan"), accum_type=acc.with_(width=acc.width - 1,
                                                                                 integer=acc.integer - 1))
    assert (emulate.run(narrow, x)["y"] != sums).any()


# -- the pass itself -----------------------------------------------------------------------------------

def test_infer_precision_returns_a_new_graph_and_keeps_user_types():
    g = small_graph(0)
    before = {n.name: getattr(n, "accum_type", None) for n in g.nodes}
    kept = infer_precision(g)
    assert {n.name: getattr(n, "accum_type", None) for n in g.nodes} == before  # input untouched
    assert kept.node("fc1").accum_type == g.node("fc1").accum_type  # user-given, not overwritten
    redone = infer_precision(g, overwrite=True)
    assert redone.node("fc1").accum_type.width < g.node("fc1").accum_type.width
    assert {t: s.dtype for t, s in redone.tensors.items()} == {t: s.dtype for t, s in g.tensors.items()}
    summary = redone.metadata["precision"]
    assert summary["fc1"]["accum_type"] == redone.node("fc1").accum_type.to_short()
    assert summary["lr"]["output_can_saturate"] is True  # values reach +-64 in a fixed<16,6> output
    assert summary["fc1"]["output_can_saturate"] is False


def test_infer_precision_fills_unset_accumulators_so_the_golden_model_runs():
    g = small_graph(0)
    for i, n in enumerate(g.nodes):
        if hasattr(n, "accum_type"):
            g.nodes[i] = dataclasses.replace(n, accum_type=None, **({"accum_v_type": None}
                                                                    if isinstance(n, ir.LowRankDense) else {}))
    with pytest.raises(emulate.EmulationError, match="accum_type"):
        emulate.run(g, np.zeros((1, 4), np.float32))
    done = ir.validate(infer_precision(g))
    emulate.run(done, np.zeros((1, 4), np.float32))


# -- check_precision --------------------------------------------------------------------------------

def test_check_precision_flags_an_output_type_too_narrow_for_its_values():
    g = infer_precision(dense_after_quantizer(np.random.default_rng(3), parse_type("fixed<10,3,RND_CONV,SAT>"),
                                              parse_type("fixed<8,2,RND_CONV,SAT>"),
                                              out=parse_type("fixed<8,2,RND_CONV,SAT>")), input_range=[-3, 3])
    warnings = check_precision(g, [-3, 3])
    assert [(w.node, w.tensor, w.where) for w in warnings] == [("fc", "y", "output")]
    w = warnings[0]
    assert isinstance(w, SaturationWarning) and w.type == parse_type("fixed<8,2,RND_CONV,SAT>")
    assert w.interval[1] > w.type.max_value or w.interval[0] < w.type.min_value
    assert "Dense 'fc'" in w.message and "saturate" in w.message


def test_check_precision_is_silent_for_types_wide_enough():
    g = infer_precision(dense_after_quantizer(np.random.default_rng(3), parse_type("fixed<10,3,RND_CONV,SAT>"),
                                              parse_type("fixed<8,2,RND_CONV,SAT>"),
                                              out=parse_type("fixed<16,8,RND_CONV,SAT>")), input_range=[-3, 3])
    assert check_precision(g, [-3, 3]) == []


def test_check_precision_flags_a_user_accumulator_that_can_wrap():
    g = small_graph(0)
    acc = g.node("fc1").accum_type
    g.nodes[1] = dataclasses.replace(g.node("fc1"), accum_type=acc.with_(width=acc.frac + 2, integer=2))
    flagged = {(w.node, w.where) for w in check_precision(g)}
    assert ("fc1", "accumulator") in flagged
    assert "wrap" in next(w.message for w in check_precision(g) if w.where == "accumulator")
    redone = infer_precision(g, overwrite=True)
    assert ("fc1", "accumulator") not in {(w.node, w.where) for w in check_precision(redone)}


def test_applying_the_suggested_wider_types_removes_every_output_warning():
    g = small_graph(0)
    for _ in range(len(g.nodes)):  # widening one output can raise the values downstream: re-check each time
        outputs = [w for w in check_precision(g) if w.where == "output"]
        if not outputs:
            break
        wider = parse_type(outputs[0].message.split("widen it to ")[1].split(" ")[0])
        assert wider.frac == outputs[0].type.frac and wider.width > outputs[0].type.width
        g.tensors[outputs[0].tensor] = ir.TensorSpec(outputs[0].tensor, g.tensors[outputs[0].tensor].shape, wider)
    assert [w for w in check_precision(g) if w.where == "output"] == []


# -- input ranges ----------------------------------------------------------------------------------

@pytest.mark.parametrize("bad, match", [([1.0, -1.0], "lower bound above"), ([[0, 1], [1, 2]], "broadcast"),
                                        ([0.0], r"\[lo, hi\]"), ([0.0, float("nan")], "finite")])
def test_bad_input_ranges_are_rejected_with_the_input_named(bad, match):
    with pytest.raises(IntervalError, match=match) as e:
        analyze(small_graph(0), bad)
    assert "'in'" in str(e.value)


def test_without_an_input_range_a_quantizer_spans_its_whole_type():
    g = small_graph(0)
    g.metadata.pop("input_range")
    b = analyze(g).tensors["x"]
    t = g.tensors["x"].dtype
    assert set(b.lo) == {t.min_code} and set(b.hi) == {t.max_code}
    assert not any(s.overflow for s in analyze(g).stages if s.node == "q")


def test_an_input_range_beyond_the_quantizer_is_reported():
    g = small_graph(0)  # x is fixed<16,6>: [-32, 32)
    warnings = check_precision(g, [-100.0, 100.0])
    assert ("q", "output") in {(w.node, w.where) for w in warnings}
    b = analyze(g, [-100.0, 100.0]).tensors["x"]
    assert set(b.hi) == {g.tensors["x"].dtype.max_code}
