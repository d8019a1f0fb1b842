"""Interval rules of the ops of the models people bring: windows (Conv, Pool), per-channel arithmetic (ScaleShift,
LeakyReLU), the exact activations (Clip, HardSigmoid/HardSwish), the tables (Table, Softmax), ArgMax and data
movement (Reshape, Transpose, Concat).

:mod:`.bounds` owns the bounds, the casts and the stages; this module computes, per op, the bounds of the exact
values a cast receives, mirroring the golden model's rule in ``toolchain/emulate.py`` step by step: fixed-point
bounds are exact integer codes (Python ints), float bounds are widened outward by float32's rounding as in
:func:`.bounds.dense_float`. Window ops gather their bounds through ``windows.window_indices``, the one table of
taps every executor uses, so a tap on the padding is bounded by exactly what the golden model reads there.
"""
from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache
from typing import Callable, Optional

import numpy as np

from .. import tables
from ..emulate import clip_codes, pool_divisors, pool_reciprocals
from ..ir import (
    ArgMax,
    Clip,
    Concat,
    Conv,
    Graph,
    HardSigmoid,
    LeakyReLU,
    Node,
    Pool,
    Reshape,
    ScaleShift,
    Softmax,
    Table,
    Transpose,
)
from ..windows import gather_windows, window_indices
from .bounds import (
    F32_ABS,
    F32_REL,
    Bounds,
    IntervalError,
    Stage,
    accumulator_rows,
    accumulator_stage,
    aligned_codes,
    dense_float,
    finite,
    objects,
    typed,
)

__all__ = ["fixed_stages", "float_bounds", "INCREASING", "DIP", "dip_bracket", "function_range"]


# -- shared plumbing ------------------------------------------------------------------------------------------

def _windows(a: np.ndarray, n: Node, pad) -> tuple[np.ndarray, np.ndarray]:
    """(C, positions, taps) windows of a (C, *spatial) bound array (padding read as ``pad``), and the tap table."""
    kernel = tuple(n.kernel)
    dilation = tuple(getattr(n, "dilation", (1,) * len(kernel)))  # Pool has none
    idx = window_indices(a.shape[1:], kernel, tuple(n.stride), tuple(n.padding), dilation)
    return gather_windows(a[None], idx, pad)[0], idx


def _per_channel(a: np.ndarray, ndim: int) -> np.ndarray:
    """A (C,) or (1,) array shaped to broadcast over a per-sample (C, ...) tensor of ``ndim`` axes."""
    return np.asarray(a).reshape((-1,) + (1,) * (ndim - 1))


def _elementwise(x: Bounds, bound: Callable[[int, int], tuple[int, int]], frac: int,
                 extra: Optional[np.ndarray] = None) -> Bounds:
    """Apply ``bound(lo, hi[, extra])`` -> (lo, hi) to every element; elements often share their bounds, so each
    distinct case is worked out once."""
    lo, hi = np.empty(x.lo.shape, dtype=object), np.empty(x.lo.shape, dtype=object)
    seen: dict[tuple, tuple[int, int]] = {}
    for idx in np.ndindex(x.lo.shape):
        key = (int(x.lo[idx]), int(x.hi[idx])) + (() if extra is None else (int(extra[idx]),))
        if key not in seen:
            seen[key] = bound(*key)
        lo[idx], hi[idx] = seen[key]
    return Bounds(lo, hi, frac)


def _widen(lo: np.ndarray, hi: np.ndarray, err) -> Bounds:
    return Bounds(np.asarray(lo - err, dtype=np.float64), np.asarray(hi + err, dtype=np.float64), None)


def _rounding_error(*values: np.ndarray) -> np.ndarray:
    """What one float32 rounding can move a result of magnitude up to max |values| (with the slack of F32_REL)."""
    return F32_REL * np.max([np.abs(v) for v in values], axis=0) + F32_ABS


# -- fixed point ----------------------------------------------------------------------------------------------

def fixed_stages(g: Graph, n: Node, xs: list[Bounds], out: Callable[[Bounds], Stage]) -> list[Stage]:
    """The stages of ``n`` on fixed-point inputs ``xs``; ``out`` casts exact bounds into the output tensor's type."""
    x = xs[0]
    if isinstance(n, Conv):
        acc = _conv_accumulator(g, n, x)
        return [acc, out(acc.result)]
    if isinstance(n, ScaleShift):
        acc = accumulator_stage(n, f"{n.name}.accum", _scale_shift_exact(n, x), n.accum_type)
        return [acc, out(acc.result)]
    rule = _FIXED.get(n.OP)
    if rule is None:
        raise IntervalError(f"{n.describe()}: no interval rule for op {n.OP}")
    return [out(rule(g, n, xs))]


def _conv_accumulator(g: Graph, n: Conv, x: Bounds) -> Stage:
    """Every output position is a Dense stage over its window (a padding tap reads code 0 exactly), its taps in
    the C order of (C_in / groups, *kernel) as the accumulation rule adds them (:func:`.bounds.accumulator_rows`)."""
    wt = typed(n, n.weight_type, "weight_type")
    lo_w, idx = _windows(x.lo, n, 0)
    hi_w, _ = _windows(x.hi, n, 0)
    positions, taps = idx.shape
    cg, og = n.weight.shape[1], n.out_channels // n.groups
    parts = []
    for grp in range(n.groups):
        rows = lambda a: a[grp * cg:(grp + 1) * cg].transpose(1, 0, 2).reshape(positions, cg * taps)  # noqa: E731
        w = np.asarray(n.weight[grp * og:(grp + 1) * og], dtype=np.int64).reshape(og, cg * taps)
        bias = None if n.bias is None else np.asarray(n.bias)[grp * og:(grp + 1) * og]
        parts.append(accumulator_rows(n, rows(lo_w), rows(hi_w), x.frac, w, wt, bias, n.bias_type, n.accum_type))
    shape = g.tensors[n.output].shape
    join = lambda k, j: np.concatenate([getattr(p, k)[j] for p in parts], axis=1).T.reshape(shape)  # noqa: E731
    frac = parts[0].frac
    exact = Bounds(join("exact", 0), join("exact", 1), frac)
    result = Bounds(join("result", 0), join("result", 1), frac)
    return Stage(n.name, f"{n.name}.accum", "accumulator", n.accum_type, exact, result,
                 any(p.overflow for p in parts))


def _pool_exact(g: Graph, n: Pool, xs: list[Bounds]) -> Bounds:
    x = xs[0]
    shape = g.tensors[n.output].shape
    if n.mode == "max":
        # The max of values each in [lo_i, hi_i] lies in [max lo_i, max hi_i]. Padding never wins in the golden
        # model (every window has a real element), so it is read as a code below every bound.
        lo_w, _ = _windows(x.lo, n, min(x.lo.ravel()) - 1)
        hi_w, _ = _windows(x.hi, n, min(x.hi.ravel()) - 1)
        return Bounds(lo_w.max(axis=2).reshape(shape), hi_w.max(axis=2).reshape(shape), x.frac)
    lo_w, _ = _windows(x.lo, n, 0)
    hi_w, _ = _windows(x.hi, n, 0)
    r = objects(pool_reciprocals(n, x.lo.shape[1:]))[None, :]  # positive: the order of the bounds stays
    lo, hi = lo_w.sum(axis=2) * r, hi_w.sum(axis=2) * r
    return Bounds(lo.reshape(shape), hi.reshape(shape), x.frac + n.recip_frac)


def _scale_shift_exact(n: ScaleShift, x: Bounds) -> Bounds:
    """x * scale[c] (a negative scale swaps the ends), plus the shift aligned to frac(x) + frac(scale)."""
    st = typed(n, n.scale_type, "scale_type")
    s = _per_channel(objects(n.scale), x.lo.ndim)
    a, b = x.lo * s, x.hi * s
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    frac = x.frac + st.frac
    if n.shift is not None:
        sh = _per_channel(aligned_codes(n, n.shift, n.shift_type, frac, "shift"), x.lo.ndim)
        lo, hi = lo + sh, hi + sh
    return Bounds(np.asarray(lo, dtype=object), np.asarray(hi, dtype=object), frac)


def _leaky_relu_exact(g: Graph, n: LeakyReLU, xs: list[Bounds]) -> Bounds:
    """Both branches at frac(x) + frac(alpha): ``x << frac(alpha)`` over the codes >= 0, ``x * alpha[c]`` over the
    codes < 0 (linear in x, so extreme at the ends of that part; any sign of alpha)."""
    x = xs[0]
    fa = typed(n, n.alpha_type, "alpha_type").frac
    alpha = np.broadcast_to(_per_channel(objects(n.alpha), x.lo.ndim), x.lo.shape)

    def bound(lo: int, hi: int, a: int) -> tuple[int, int]:
        values = []
        if hi >= 0:
            values += [max(lo, 0) << fa, hi << fa]
        if lo < 0:
            values += [lo * a, min(hi, -1) * a]
        return min(values), max(values)

    return _elementwise(x, bound, x.frac + fa, alpha)


def _clip_exact(g: Graph, n: Clip, xs: list[Bounds]) -> Bounds:
    """min(max(x, lo), hi) on codes is monotone: the bounds' own images."""
    x = xs[0]
    lo_c, hi_c = clip_codes(n, g.tensors[n.input].dtype)

    def f(v: int) -> int:
        v = v if lo_c is None else max(v, lo_c)
        return v if hi_c is None else min(v, hi_c)

    return _elementwise(x, lambda lo, hi: (f(lo), f(hi)), x.frac)


def _hard_sigmoid_exact(g: Graph, n: HardSigmoid, xs: list[Bounds]) -> Bounds:
    """``t = clamp(x A + B, 0, 2**F)`` and, for HardSwish, ``x t``, exactly over the codes of each interval.

    On the integers, t is constant below and above its two breakpoints and linear between, so ``x t`` is linear or
    quadratic on each piece: its extremes over [lo, hi] are at lo, hi, the integers either side of each breakpoint
    and of the quadratic's vertex. Evaluating those few codes gives the exact range.
    """
    x = xs[0]
    at = typed(n, n.alpha_type, "alpha_type")
    f = x.frac + at.frac
    a, b, one = int(n.alpha_code), int(n.beta_code) << x.frac, 1 << f

    def value(c: int) -> int:
        t = min(max(c * a + b, 0), one)
        return c * t if n.swish else t

    turns = [] if a == 0 else [Fraction(-b, a), Fraction(one - b, a), Fraction(-b, 2 * a)]
    near = sorted({v for r in turns for v in (math.floor(r), math.ceil(r))})

    def bound(lo: int, hi: int) -> tuple[int, int]:
        values = [value(c) for c in (lo, hi, *(c for c in near if lo < c < hi))]
        return min(values), max(values)

    return _elementwise(x, bound, x.frac + f if n.swish else f)


def _table_exact(g: Graph, n: Table, xs: list[Bounds]) -> Bounds:
    """The smallest and largest entry the input's index range can reach (the index is monotone in x)."""
    x = xs[0]
    out_t = g.tensors[n.output].dtype
    if out_t is None or n.table is None:
        raise IntervalError(f"{n.describe()}: a fixed-point Table needs its table and output type; build them with "
                            "the quantization pass (bitforge.toolchain.passes.quantize) first")
    table = [int(v) for v in np.asarray(n.table).ravel()]
    last = len(table) - 1
    index = lambda v: min(max((v - n.index_lo) >> n.index_shift, 0), last)  # noqa: E731

    def bound(lo: int, hi: int) -> tuple[int, int]:
        reach = table[index(lo):index(hi) + 1]
        return min(reach), max(reach)

    return _elementwise(x, bound, out_t.frac)


def _softmax_exact(g: Graph, n: Softmax, xs: list[Bounds]) -> Bounds:
    """Per row: every ``d_c = max - x_c`` lies in [0, D] with D = max(hi) - min(lo), so every term is an exp entry
    of index <= D >> exp_shift; the largest element's own term is entry 0. The sum S then lies in
    ``[e0 + (n-1) e_min, e0 + (n-1) e_max]`` and r among the reciprocal entries that range reaches; every table
    holds codes >= 0, so ``e_c r`` lies in [e_min r_min, e_max r_max]."""
    x = xs[0]
    if n.exp_table is None or n.recip_table is None or n.exp_type is None or n.recip_type is None:
        raise IntervalError(f"{n.describe()}: a fixed-point Softmax needs its exp and reciprocal tables; build them "
                            "with the quantization pass (bitforge.toolchain.passes.quantize) first")
    exp = [int(v) for v in np.asarray(n.exp_table).ravel()]
    recip = np.asarray(n.recip_table, dtype=np.int64)
    lo, hi = np.empty(x.lo.shape, dtype=object), np.empty(x.lo.shape, dtype=object)
    count = x.lo.shape[-1]
    for row in np.ndindex(x.lo.shape[:-1]):
        d_max = max(int(v) for v in x.hi[row]) - min(int(v) for v in x.lo[row])
        reach = exp[:min(d_max >> n.exp_shift, len(exp) - 1) + 1]
        e_min, e_max = min(reach), max(reach)
        s = np.array([exp[0] + (count - 1) * e_min, exp[0] + (count - 1) * e_max], dtype=object)
        i = np.clip((s - n.recip_lo) >> n.recip_shift, 0, len(recip) - 1).astype(np.int64)
        r = recip[i[0]:i[1] + 1]
        lo[row], hi[row] = e_min * int(r.min()), e_max * int(r.max())
    return Bounds(lo, hi, n.exp_type.frac + n.recip_type.frac)


def _argmax_candidates(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the first and last index that can hold the maximum: the winner's value is >= every element's lower
    bound, so its upper bound is too."""
    out_shape = lo.shape[:-1] + (1,)
    first, last = np.empty(out_shape, dtype=object), np.empty(out_shape, dtype=object)
    for row in np.ndindex(lo.shape[:-1]):
        floor = max(lo[row])
        can = [i for i, h in enumerate(hi[row]) if h >= floor]
        first[row + (0,)], last[row + (0,)] = can[0], can[-1]
    return first, last


def _argmax_exact(g: Graph, n: ArgMax, xs: list[Bounds]) -> Bounds:
    first, last = _argmax_candidates(xs[0].lo, xs[0].hi)
    return Bounds(first, last, 0)  # the index is the output code itself (an integer type)


def _reshape(g: Graph, n: Reshape, xs: list[Bounds]) -> Bounds:
    shape = g.tensors[n.output].shape
    return Bounds(xs[0].lo.reshape(shape), xs[0].hi.reshape(shape), xs[0].frac)


def _transpose(g: Graph, n: Transpose, xs: list[Bounds]) -> Bounds:
    perm = tuple(n.perm)
    return Bounds(xs[0].lo.transpose(perm), xs[0].hi.transpose(perm), xs[0].frac)


def _concat_exact(g: Graph, n: Concat, xs: list[Bounds]) -> Bounds:
    """Both operands at the finer frac (a left shift is exact, and rounding a value into the output type does not
    depend on which grid it came from), joined along the axis; the output cast then rounds each as the golden
    model does."""
    frac = max(b.frac for b in xs)
    up = lambda a, f: a * (1 << (frac - f))  # noqa: E731
    lo = np.concatenate([up(b.lo, b.frac) for b in xs], axis=n.axis)
    hi = np.concatenate([up(b.hi, b.frac) for b in xs], axis=n.axis)
    return Bounds(lo, hi, frac)


_FIXED: dict[str, Callable[[Graph, Node, list[Bounds]], Bounds]] = {
    "Pool": _pool_exact, "LeakyReLU": _leaky_relu_exact, "Clip": _clip_exact, "HardSigmoid": _hard_sigmoid_exact,
    "Table": _table_exact, "Softmax": _softmax_exact, "ArgMax": _argmax_exact, "Reshape": _reshape,
    "Transpose": _transpose, "Concat": _concat_exact,
}


# -- float ----------------------------------------------------------------------------------------------------

def float_bounds(g: Graph, n: Node, xs: list[Bounds]) -> Bounds:
    """Bounds of ``n``'s float output: the real result's range widened by the float32 golden model's rounding."""
    rule = _FLOAT.get(n.OP)
    if rule is None:
        raise IntervalError(f"{n.describe()}: op {n.OP} has no float interval rule")
    with np.errstate(over="ignore", invalid="ignore"):  # an unbounded input may reach float64's infinities
        return rule(g, n, xs)


def _conv_float(g: Graph, n: Conv, xs: list[Bounds]) -> Bounds:
    """Per group, the windows are rows of a Dense bound (gamma_n summation error included); padding is 0.0."""
    x = xs[0]
    lo_w, idx = _windows(finite(x.lo), n, 0.0)
    hi_w, _ = _windows(finite(x.hi), n, 0.0)
    positions, taps = idx.shape
    cg, og = n.weight.shape[1], n.out_channels // n.groups
    los, his = [], []
    for grp in range(n.groups):
        rows = lambda a: a[grp * cg:(grp + 1) * cg].transpose(1, 0, 2).reshape(positions, cg * taps)  # noqa: E731
        w = np.asarray(n.weight[grp * og:(grp + 1) * og]).reshape(og, cg * taps)
        bias = None if n.bias is None else np.asarray(n.bias)[grp * og:(grp + 1) * og]
        b = dense_float(Bounds(rows(lo_w), rows(hi_w), None), w, bias)  # (positions, og)
        los.append(b.lo)
        his.append(b.hi)
    shape = g.tensors[n.output].shape
    return Bounds(np.concatenate(los, axis=1).T.reshape(shape), np.concatenate(his, axis=1).T.reshape(shape), None)


def _pool_float(g: Graph, n: Pool, xs: list[Bounds]) -> Bounds:
    x = xs[0]
    shape = g.tensors[n.output].shape
    if n.mode == "max":  # exact in float: the bounds' window maxima (padding reads -inf, never the max)
        lo_w, _ = _windows(np.asarray(x.lo, dtype=np.float64), n, -np.inf)
        hi_w, _ = _windows(np.asarray(x.hi, dtype=np.float64), n, -np.inf)
        return Bounds(lo_w.max(axis=2).reshape(shape), hi_w.max(axis=2).reshape(shape), None)
    lo_w, idx = _windows(finite(x.lo), n, 0.0)
    hi_w, _ = _windows(finite(x.hi), n, 0.0)
    taps = idx.shape[1]
    # A float32 sum of ``taps`` terms errs by at most gamma_taps * sum |x_i|; the division rounds once more.
    sum_err = (taps + 1) * (F32_REL * np.maximum(np.abs(lo_w), np.abs(hi_w)).sum(axis=2) + F32_ABS)
    d = pool_divisors(n, x.lo.shape[1:]).astype(np.float64)[None, :]
    lo, hi = (lo_w.sum(axis=2) - sum_err) / d, (hi_w.sum(axis=2) + sum_err) / d
    b = _widen(lo, hi, _rounding_error(lo, hi))
    return Bounds(b.lo.reshape(shape), b.hi.reshape(shape), None)


def _scale_shift_float(g: Graph, n: ScaleShift, xs: list[Bounds]) -> Bounds:
    """x * s + t in float32: two roundings."""
    x = xs[0]
    s = _per_channel(np.asarray(n.scale, dtype=np.float32).astype(np.float64), x.lo.ndim)
    t = 0.0 if n.shift is None else _per_channel(np.asarray(n.shift, dtype=np.float32).astype(np.float64),
                                                 x.lo.ndim)
    xl, xh = finite(x.lo), finite(x.hi)
    a, b = xl * s, xh * s
    lo, hi = np.minimum(a, b) + t, np.maximum(a, b) + t
    mag = np.maximum(np.abs(xl), np.abs(xh)) * np.abs(s) + np.abs(t)
    return _widen(lo, hi, 2 * (F32_REL * mag + F32_ABS))


def _leaky_relu_float(g: Graph, n: LeakyReLU, xs: list[Bounds]) -> Bounds:
    """x where x >= 0 (exact), else x * alpha (one rounding); the hull of the branches the interval reaches."""
    x = xs[0]
    xl, xh = finite(x.lo), finite(x.hi)
    a = _per_channel(np.asarray(n.alpha, dtype=np.float32).astype(np.float64), xl.ndim)
    n1, n2 = xl * a, np.minimum(xh, 0.0) * a
    err = _rounding_error(n1, n2)
    neg_lo, neg_hi = np.minimum(n1, n2) - err, np.maximum(n1, n2) + err
    pos_lo, pos_hi = np.maximum(xl, 0.0), xh
    has_pos, has_neg = xh >= 0, xl < 0
    lo = np.where(has_pos & has_neg, np.minimum(pos_lo, neg_lo), np.where(has_pos, pos_lo, neg_lo))
    hi = np.where(has_pos & has_neg, np.maximum(pos_hi, neg_hi), np.where(has_pos, pos_hi, neg_hi))
    return Bounds(lo, hi, None)


def _clip_float(g: Graph, n: Clip, xs: list[Bounds]) -> Bounds:
    """np.clip with the float32 bounds the golden model uses: monotone and exact."""
    lo = -np.inf if n.lo is None else float(np.float32(n.lo))
    hi = np.inf if n.hi is None else float(np.float32(n.hi))
    return Bounds(np.clip(xs[0].lo, lo, hi), np.clip(xs[0].hi, lo, hi), None)


def _hard_sigmoid_float(g: Graph, n: HardSigmoid, xs: list[Bounds]) -> Bounds:
    """The real ``t = clip(a x + b, 0, 1)`` (and ``x t``) over each interval from the same candidate points as the
    fixed rule (ends, breakpoints, vertex), widened by the float32 error: ``a x + b`` errs by at most
    E = F32_REL (|a| M + |b|) + F32_ABS (clip does not add to it), and ``x t`` by M E plus its own rounding."""
    x = xs[0]
    a, b = float(np.float32(n.alpha)), float(np.float32(n.beta))
    xl, xh = finite(x.lo), finite(x.hi)
    m = np.maximum(np.abs(xl), np.abs(xh))
    t_err = F32_REL * (abs(a) * m + abs(b)) + F32_ABS
    t = lambda v: np.clip(a * v + b, 0.0, 1.0)  # noqa: E731
    if not n.swish:
        lo, hi = np.minimum(t(xl), t(xh)), np.maximum(t(xl), t(xh))
        return Bounds(np.clip(lo - t_err, 0.0, 1.0), np.clip(hi + t_err, 0.0, 1.0), None)
    turns = [] if a == 0 else [-b / a, (1.0 - b) / a, -b / (2 * a)]
    points = np.stack([xl, xh] + [np.clip(np.full_like(xl, r), xl, xh) for r in turns])
    values = points * t(points)
    err = m * t_err + F32_REL * m + F32_ABS
    return _widen(values.min(axis=0), values.max(axis=0), err)


#: Table functions increasing everywhere: their range over an interval is the image of its ends.
INCREASING = frozenset({"sigmoid", "tanh", "elu", "softplus", "exp"})
#: Table functions that fall to one minimum and then rise (quasi-convex): the ends bound the maximum, and an interval
#: holding the minimum reaches down to it.
DIP = frozenset({"gelu", "gelu_tanh", "silu"})
#: Where every value of a function lies (after the float32 cast too); the ends' image is clipped into it.
_RANGE = {"sigmoid": (0.0, 1.0), "tanh": (-1.0, 1.0), "elu": (-1.0, np.inf), "softplus": (0.0, np.inf),
          "exp": (0.0, np.inf)}


@lru_cache(maxsize=None)
def dip_bracket(name: str) -> tuple[float, float, float]:
    """(left, right, floor) of a :data:`DIP` function: an interval that holds its minimiser, and a value below its
    minimum.

    The function is sampled on a grid of step h over [-4, 0] (every dip function here has its minimum there); for a
    function with one minimum the true minimiser lies within one step of the best sample, and the minimum is within
    L * h of that sample's value (L = 1.5 bounds |f'| of gelu, gelu_tanh and silu everywhere), so 3 h below it is
    a safe floor.
    """
    h = 2.0 ** -12
    grid = np.arange(-4.0, 0.0 + h, h)
    values = tables.function(name)(grid)
    i = int(np.argmin(values))
    assert 0 < i < len(grid) - 1, f"{name}: its minimum is not inside the sampled grid"
    return float(grid[i - 1]), float(grid[i + 1]), float(values[i]) - 3.0 * h


def function_range(name: str, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bounds of table function ``name``'s real values over ``[lo, hi]`` (element-wise float64; not yet widened
    for rounding), from its shape; a function of no known shape is refused (its range cannot be bounded)."""
    f = tables.function(name)
    fl, fh = f(lo), f(hi)
    if name in INCREASING:
        return fl, fh
    if name in DIP:
        left, right, floor = dip_bracket(name)
        low = np.where(hi <= left, fh, np.where(lo >= right, fl, np.minimum(np.minimum(fl, fh), floor)))
        return low, np.maximum(fl, fh)
    raise IntervalError(f"no interval rule for table function '{name}': say whether it is increasing or has one "
                        "minimum in toolchain/passes/op_intervals.py (INCREASING, DIP)")


def _table_float(g: Graph, n: Table, xs: list[Bounds]) -> Bounds:
    """The function's range over each interval from its shape (increasing, or one dip), widened by the float32 cast
    of its float64 value (F32_REL also covers the float64 evaluation's own error)."""
    x = xs[0]
    try:
        lo, hi = function_range(n.function, finite(x.lo), finite(x.hi))
    except IntervalError as e:
        raise IntervalError(f"{n.describe()}: {e}") from None
    err = _rounding_error(np.nan_to_num(lo, posinf=0.0, neginf=0.0), np.nan_to_num(hi, posinf=0.0, neginf=0.0))
    lo, hi = lo - err, hi + err
    if n.function in _RANGE:
        r_lo, r_hi = _RANGE[n.function]
        lo, hi = np.clip(lo, r_lo, r_hi), np.clip(hi, r_lo, r_hi)
    return Bounds(np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64), None)


def _softmax_float(g: Graph, n: Softmax, xs: list[Bounds]) -> Bounds:
    """Every quotient lies in [0, 1]: the terms exp(x_c - max) are >= 0 and their float32 sum is >= each of them
    (rounding is monotone), however accurate float32's exp is, so rounding e_c / S cannot pass 1 either."""
    shape = xs[0].lo.shape
    return Bounds(np.zeros(shape), np.ones(shape), None)


def _argmax_float(g: Graph, n: ArgMax, xs: list[Bounds]) -> Bounds:
    first, last = _argmax_candidates(xs[0].lo, xs[0].hi)
    return Bounds(first.astype(np.float64), last.astype(np.float64), None)


def _concat_float(g: Graph, n: Concat, xs: list[Bounds]) -> Bounds:
    return Bounds(np.concatenate([b.lo for b in xs], axis=n.axis), np.concatenate([b.hi for b in xs], axis=n.axis),
                  None)


_FLOAT: dict[str, Callable[[Graph, Node, list[Bounds]], Bounds]] = {
    "Conv": _conv_float, "Pool": _pool_float, "ScaleShift": _scale_shift_float, "LeakyReLU": _leaky_relu_float,
    "Clip": _clip_float, "HardSigmoid": _hard_sigmoid_float, "Table": _table_float, "Softmax": _softmax_float,
    "ArgMax": _argmax_float, "Reshape": _reshape, "Transpose": _transpose, "Concat": _concat_float,
}
