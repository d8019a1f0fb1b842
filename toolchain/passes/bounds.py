"""The interval primitives: bounds of a tensor, the cast of bounds into a type, and the stages of a layer.

``intervals`` walks a graph with these; ``op_intervals`` (the ops of the models people bring) builds on them as
well. They live apart so that both can import them without importing each other (``intervals`` dispatches to
``op_intervals``). The analysis itself is described in ``intervals``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Mapping, Optional, Sequence, Union

import numpy as np

from .. import fixed
from ..accumulate import exact_matmul, multiple_of, round_to_accumulator, rounded_bias
from ..bspline import basis_table, cell_and_u
from ..fixed import FixedType, Overflow, clog2, signed_bits
from ..ir import IRError, KANLayer, Node

__all__ = ["Bounds", "Stage", "IntervalError", "InputRange", "signed_bits", "round_to_code", "FLOAT32_MAX", "F32_REL",
           "F32_ABS", "objects", "compact", "cast_stage", "accumulator_stage", "box_matmul", "aligned_codes",
           "AccumulatorRows", "accumulator_rows", "dense_accumulator_stage", "kan_exact", "finite",
           "dense_float", "kan_float", "add_float", "typed"]

#: Largest finite float32: the golden model casts float inputs to float32, so nothing finite lies beyond.
FLOAT32_MAX = float(np.finfo(np.float32).max)
#: float32 unit roundoff 2**-24, doubled so the float64 arithmetic of the bounds themselves is covered too.
F32_REL = 2.0 ** -23
#: Absolute error one float32 rounding can make in the subnormal range (spacing 2**-149), with slack.
F32_ABS = 2.0 ** -140

#: ``[lo, hi]`` for every graph input (scalars or per-feature lists), or ``{input name: [lo, hi]}``.
InputRange = Union[Sequence, Mapping[str, Sequence]]


class IntervalError(IRError):
    """An input range that cannot be used, or a node the analysis cannot bound; names what and where."""


# -- bounds ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Bounds:
    """Element-wise ``lo <= value <= hi`` over a tensor's per-sample shape.

    ``frac`` set: ``lo``/``hi`` are exact integer codes (object arrays of Python ints) of values
    ``code * 2**-frac``. ``frac`` None: ``lo``/``hi`` are float64 real values (a float tensor).
    """

    lo: np.ndarray
    hi: np.ndarray
    frac: Optional[int]

    @property
    def is_float(self) -> bool:
        return self.frac is None

    def real(self) -> tuple[np.ndarray, np.ndarray]:
        """The bounds as float64 values (rounded to nearest: for reports, not for proofs)."""
        if self.frac is None:
            return self.lo, self.hi
        return _codes_as_float(self.lo, self.frac), _codes_as_float(self.hi, self.frac)

    def span(self) -> tuple[float, float]:
        """Smallest lower and largest upper bound over all elements, as floats."""
        lo, hi = self.real()
        return float(np.min(lo)), float(np.max(hi))

    def exact_span(self) -> tuple[Fraction, Fraction]:
        """Smallest lower and largest upper bound over all elements, exactly (finite bounds only)."""
        if self.frac is None:
            lo, hi = self.span()
            if not (math.isfinite(lo) and math.isfinite(hi)):
                raise IntervalError(f"bounds [{lo}, {hi}] are not finite (no input range declared?)")
            return Fraction(lo), Fraction(hi)
        scale = Fraction(2) ** self.frac
        return Fraction(int(min(self.lo.ravel()))) / scale, Fraction(int(max(self.hi.ravel()))) / scale

    def contains(self, values: np.ndarray) -> np.ndarray:
        """Which samples of a batch ``(N, *shape)`` lie inside the bounds (codes for fixed, floats for float)."""
        v = np.asarray(values)
        if self.frac is None:
            inside = (v >= self.lo) & (v <= self.hi)
        else:
            v = v.astype(object)
            inside = (v >= self.lo) & (v <= self.hi)
        return np.asarray(inside, dtype=bool).reshape(len(v), -1).all(axis=1)


def _codes_as_float(codes: np.ndarray, frac: int) -> np.ndarray:
    flat = [math.ldexp(float(int(c)), -frac) for c in codes.ravel()]
    return np.array(flat, dtype=np.float64).reshape(codes.shape)


def objects(a) -> np.ndarray:
    """Integer array -> object array of Python ints (exact for any later arithmetic)."""
    a = np.asarray(a)
    out = np.empty(a.shape, dtype=object)
    out.ravel()[:] = [int(v) for v in a.ravel()]
    return out


def compact(a: np.ndarray) -> np.ndarray:
    """Object codes -> int64 when they fit in 62 bits, so :func:`exact_matmul` can take its fast path."""
    if a.size == 0 or max(abs(int(v)) for v in a.ravel()) < 2 ** 62:
        return np.asarray(a).astype(np.int64)
    return a


# -- casting an interval into a type ------------------------------------------------------------------

def _round_codes(codes: np.ndarray, src_frac: int, t: FixedType) -> np.ndarray:
    """Exact codes at ``src_frac`` -> unbounded codes at ``t.frac`` with ``t``'s rounding (monotone)."""
    return fixed.shift_round(codes, src_frac - t.frac, t.rounding) if codes.size else codes


def round_to_code(v: Union[float, Fraction], t: FixedType) -> int:
    """A dyadic value (any binary float, or a Fraction with a power-of-two denominator) -> its code of
    ``t`` with ``t``'s rounding and no overflow step, exactly as ``fixed.quantize`` rounds."""
    scaled = Fraction(v) * (Fraction(2) ** t.frac)
    den = scaled.denominator
    if den & (den - 1):
        raise ValueError(f"{v!r} is not a dyadic rational; only binary floats and fixed-point values round exactly")
    shift = den.bit_length() - 1
    q = np.array([scaled.numerator], dtype=object)
    return int(fixed.shift_round(q, shift, t.rounding)[0])


def _overflow_one(lo: int, hi: int, t: FixedType) -> tuple[int, int, bool]:
    """Image of the integer interval [lo, hi] under ``t``'s overflow mode, and whether the mode is triggered."""
    mn, mx = t.sat_min_code, t.max_code
    o = t.overflow
    if mn <= lo and hi <= mx:
        return lo, hi, False
    if o in (Overflow.SAT, Overflow.SAT_SYM):
        return min(max(lo, mn), mx), min(max(hi, mn), mx), True
    if o == Overflow.SAT_ZERO:
        a, b = max(lo, mn), min(hi, mx)
        return (min(a, 0), max(b, 0), True) if a <= b else (0, 0, True)
    span = 1 << t.width
    wl, wh = lo % span, hi % span
    if t.signed:
        wl, wh = (wl - span if wl > mx else wl), (wh - span if wh > mx else wh)
    if hi - lo < span and wh - wl == hi - lo:
        return wl, wh, True  # the interval wrapped as a whole and stayed contiguous
    return t.min_code, t.max_code, True


def _overflow(lo: np.ndarray, hi: np.ndarray, t: FixedType) -> tuple[np.ndarray, np.ndarray, bool]:
    out_lo, out_hi = np.empty(lo.shape, dtype=object), np.empty(hi.shape, dtype=object)
    hit = False
    seen: dict[tuple[int, int], tuple[int, int, bool]] = {}  # features often share their bounds, too
    for idx in np.ndindex(lo.shape):
        key = int(lo[idx]), int(hi[idx])
        if key not in seen:
            seen[key] = _overflow_one(*key, t)
        out_lo[idx], out_hi[idx], h = seen[key]
        hit |= h
    return out_lo, out_hi, hit


# -- stages -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Stage:
    """One point where a node casts values into a type.

    ``where`` is ``'accumulator'``, ``'intermediate'`` (LowRankDense's ``V x`` after its accumulator) or
    ``'output'``. ``dtype`` None means the cast is not typed yet (an accumulator the precision pass has not
    sized, or an output a quantizer has not typed): values pass through exactly. ``overflow`` is True when
    some value in ``exact`` falls outside ``dtype``'s range after rounding, i.e. saturation or wrap can occur.
    """

    node: str
    tensor: str
    where: str
    dtype: Optional[FixedType]
    exact: Bounds
    result: Bounds
    overflow: bool


def cast_stage(node: str, tensor: str, where: str, exact: Bounds, t: Optional[FixedType]) -> Stage:
    if t is None:
        return Stage(node, tensor, where, None, exact, exact, False)
    if exact.is_float:
        code: dict[float, int] = {}  # one exact rounding per distinct bound: features often share their range

        def rounded(v: float) -> int:
            if v not in code:
                code[v] = _float_bound_code(v, t)
            return code[v]

        lo = objects([rounded(float(v)) for v in exact.lo.ravel()]).reshape(exact.lo.shape)
        hi = objects([rounded(float(v)) for v in exact.hi.ravel()]).reshape(exact.hi.shape)
    else:
        lo, hi = _round_codes(exact.lo, exact.frac, t), _round_codes(exact.hi, exact.frac, t)
    lo, hi, hit = _overflow(lo, hi, t)
    return Stage(node, tensor, where, t, exact, Bounds(lo, hi, t.frac), hit)


def _float_bound_code(v: float, t: FixedType) -> int:
    """Code of a float bound. An infinite one (an input with no declared range) stands for the end of
    the quantizer's own range: such an input is assumed to lie in it, so it is neither clipped nor reported."""
    if math.isinf(v):
        if v > 0:
            return t.max_code
        return t.sat_min_code
    return round_to_code(v, t)


def accumulator_stage(n: Node, tensor: str, exact: Bounds, t: Optional[FixedType]) -> Stage:
    """KANLayer and ScaleShift: the golden model applies only the accumulator's overflow (its frac equals the exact
    sum's). Dense, LowRankDense and Conv accumulate by hls4ml's rule: :func:`dense_accumulator_stage`."""
    if t is None:
        return Stage(n.name, tensor, "accumulator", None, exact, exact, False)
    if t.frac != exact.frac:
        raise IntervalError(f"{n.describe()}: accumulator {t} has {t.frac} fractional bits; the exact sum has "
                            f"{exact.frac} (frac(x) + frac(W)); fix the type or rerun infer_precision")
    lo, hi, hit = _overflow(exact.lo, exact.hi, t)
    return Stage(n.name, tensor, "accumulator", t, exact, Bounds(lo, hi, t.frac), hit)


# -- per-op exact bounds (fixed point) --------------------------------------------------------------

def box_matmul(xl: np.ndarray, xh: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact range of ``x @ w.T`` over the box ``xl <= x <= xh`` (``(rows, in)`` codes, ``w`` ``(out, in)``): each
    product takes its extreme at an endpoint of x_i, so the bounds are attained when the x_i are independent."""
    xl, xh = compact(xl), compact(xh)
    w = np.asarray(w, dtype=np.int64)
    wpos, wneg = np.maximum(w, 0), np.minimum(w, 0)
    hi = objects(exact_matmul(xh, wpos)) + objects(exact_matmul(xl, wneg))
    lo = objects(exact_matmul(xl, wpos)) + objects(exact_matmul(xh, wneg))
    return lo, hi


def aligned_codes(n: Node, codes: np.ndarray, t: Optional[FixedType], frac: int, what: str) -> np.ndarray:
    """A bias or shift (codes of ``t``) as exact codes at the accumulator's ``frac``, as the golden model aligns it."""
    if t is None:
        raise IntervalError(f"{n.describe()}: fixed-point {what} has no {what}_type")
    if t.frac > frac:
        raise IntervalError(f"{n.describe()}: {what} type {t} is finer than the accumulator's {frac} fractional bits")
    return objects(codes) * (1 << (frac - t.frac))


@dataclass(frozen=True)
class AccumulatorRows:
    """Bounds of a ``W x + b`` stage's accumulator for rows of inputs (a Dense's leading axes, a Conv's positions):
    ``exact`` what reaches its overflow step and ``result`` what comes out of it (``(rows, out)`` codes at
    ``frac``), and whether the overflow can act (see :func:`accumulator_rows`)."""

    exact: tuple[np.ndarray, np.ndarray]
    result: tuple[np.ndarray, np.ndarray]
    frac: int
    overflow: bool


def accumulator_rows(n: Node, xl: np.ndarray, xh: np.ndarray, x_frac: int, w: np.ndarray, w_type: FixedType,
                     bias: Optional[np.ndarray], bias_type: Optional[FixedType],
                     accum: Optional[FixedType]) -> AccumulatorRows:
    """The accumulator of ``W x + b`` (docs/ir.md, hls4ml's accumulation) for inputs in ``[xl, xh]`` (``(rows, in)``
    codes at ``x_frac``; ``w`` ``(out, in)`` codes of ``w_type``).

    ``accum`` None (not sized yet): the exact sum at frac(x) + frac(W), passed through. Otherwise ``exact`` is the
    sum of the products and the bias converted to the accumulator's LSB (rounded, not yet overflowed), and:
    WRAP acts on that sum once (wrapping is modular, so partial sums do not matter); a saturating mode that no
    product or partial sum can trigger leaves it as is; one that can is reported as overflowing, with ``exact``
    the hull of every partial sum (what it would have to hold) and ``result`` from the sum in input order on the
    lower and upper ends of the products (SAT and SAT_SYM clamp monotonically, so that is exact for independent
    inputs) or the whole range (SAT_ZERO). Rounded products are bounded by the rounded ends of their interval.
    """
    w = np.asarray(w, dtype=np.int64)
    if accum is None:
        frac = x_frac + w_type.frac
        lo, hi = box_matmul(xl, xh, w)
        if bias is not None:
            b = aligned_codes(n, bias, bias_type, frac, "bias")
            lo, hi = lo + b, hi + b
        return AccumulatorRows((lo, hi), (lo, hi), frac, False)
    d = x_frac + w_type.frac - accum.frac
    b = None if bias is None else objects(rounded_bias(bias, bias_type, accum))
    if d <= 0 or multiple_of(w, d):  # exact products: matrix bounds
        w_eff = w >> d if d > 0 else w
        scale = 1 << max(-d, 0)
        lo, hi = box_matmul(xl, xh, w_eff)
        lo, hi = lo * scale, hi * scale
        if b is not None:
            lo, hi = lo + b, hi + b
        if accum.overflow == Overflow.WRAP:
            r_lo, r_hi, hit = _overflow(lo, hi, accum)
            return AccumulatorRows((lo, hi), (r_lo, r_hi), accum.frac, hit)
        p_lo, p_hi = box_matmul(np.minimum(xl, 0), np.maximum(xh, 0), w_eff)  # sums of negative / positive ends
        if b is not None:
            p_lo, p_hi = p_lo + np.minimum(b, 0), p_hi + np.maximum(b, 0)
        if not _leaves(p_lo * scale, p_hi * scale, accum):
            return AccumulatorRows((lo, hi), (lo, hi), accum.frac, False)
    return _accumulate_in_order(xl, xh, w, d, b, accum)


def _leaves(lo: np.ndarray, hi: np.ndarray, t: FixedType) -> bool:
    return bool(lo.size) and (min(lo.ravel()) < t.sat_min_code or max(hi.ravel()) > t.max_code)


def _accumulate_in_order(xl: np.ndarray, xh: np.ndarray, w: np.ndarray, d: int, b: Optional[np.ndarray],
                         accum: FixedType) -> AccumulatorRows:
    """Bounds of the rule input by input, vectorised over rows and outputs (see :func:`accumulator_rows`)."""
    xl, xh = compact(xl), compact(xh)
    n_in = w.shape[1]
    mags = [signed_bits(int(v)) for a in (xl, xh, w) if a.size for v in (a.min(), a.max())]
    bits = max(mags, default=1) * 2 + max(-d, 0) + clog2(max(n_in, 1)) + 2
    if b is not None and b.size:
        bits = max(bits, max(signed_bits(int(v)) for v in b) + 2)
    wide = max(bits, accum.width + 2) > fixed.INT64_SAFE_BITS
    as_int = (lambda a: objects(a)) if wide else (lambda a: np.asarray(a).astype(np.int64))  # noqa: E731
    xl, xh, w = as_int(xl), as_int(xh), as_int(w)
    shape = (xl.shape[0], w.shape[0])
    zero = as_int(np.zeros(shape, dtype=np.int64))
    ex_lo, ex_hi, part_lo, part_hi = zero, zero, zero, zero
    seq_lo = seq_hi = zero
    if b is not None:
        bb = as_int(b)[None, :]
        ex_lo, ex_hi = ex_lo + bb, ex_hi + bb
        part_lo, part_hi = part_lo + np.minimum(bb, 0), part_hi + np.maximum(bb, 0)
        seq_lo = seq_hi = fixed.apply_overflow(zero + bb, accum)
    clamps = accum.overflow in (Overflow.SAT, Overflow.SAT_SYM)
    for i in range(n_in):
        a, c = xl[:, i:i + 1] * w[None, :, i], xh[:, i:i + 1] * w[None, :, i]
        p_lo = round_to_accumulator(np.minimum(a, c), d, accum)
        p_hi = round_to_accumulator(np.maximum(a, c), d, accum)
        ex_lo, ex_hi = ex_lo + p_lo, ex_hi + p_hi
        part_lo, part_hi = part_lo + np.minimum(p_lo, 0), part_hi + np.maximum(p_hi, 0)
        if clamps:
            seq_lo = fixed.apply_overflow(seq_lo + fixed.apply_overflow(p_lo, accum), accum)
            seq_hi = fixed.apply_overflow(seq_hi + fixed.apply_overflow(p_hi, accum), accum)
    ex_lo, ex_hi = objects(ex_lo), objects(ex_hi)
    if accum.overflow == Overflow.WRAP:
        r_lo, r_hi, hit = _overflow(ex_lo, ex_hi, accum)
        return AccumulatorRows((ex_lo, ex_hi), (r_lo, r_hi), accum.frac, hit)
    part_lo, part_hi = objects(part_lo), objects(part_hi)
    if not _leaves(part_lo, part_hi, accum):
        return AccumulatorRows((ex_lo, ex_hi), (ex_lo, ex_hi), accum.frac, False)
    if clamps:
        result = objects(seq_lo), objects(seq_hi)
    else:  # SAT_ZERO: a zeroed partial sum is not monotone in the products; the whole range holds every result
        result = (objects(np.full(shape, accum.min_code)), objects(np.full(shape, accum.max_code)))
    return AccumulatorRows((part_lo, part_hi), result, accum.frac, True)


def dense_accumulator_stage(n: Node, tensor: str, x: Bounds, w: np.ndarray, bias: Optional[np.ndarray],
                            bias_type: Optional[FixedType], w_type: FixedType, accum: Optional[FixedType]) -> Stage:
    """The accumulator stage of a Dense (or a LowRankDense half) on inputs ``x`` (:func:`accumulator_rows`)."""
    n_in = w.shape[1]
    rows = accumulator_rows(n, x.lo.reshape(-1, n_in), x.hi.reshape(-1, n_in), x.frac, w, w_type, bias, bias_type,
                            accum)
    shape = x.lo.shape[:-1] + (w.shape[0],)
    bounds = lambda pair: Bounds(pair[0].reshape(shape), pair[1].reshape(shape), rows.frac)  # noqa: E731
    return Stage(n.name, tensor, "accumulator", accum, bounds(rows.exact), bounds(rows.result), rows.overflow)


def kan_exact(n: KANLayer, x: Bounds) -> Bounds:
    """Per edge, phi = sum_m c[cell + m] b_m(u) over the cells the input interval reaches.

    Each table row sums to exactly ``one`` and every weight is >= 0 (``bspline.basis_table`` guarantees
    both), so phi is a convex combination of the active coefficients: one * [min c, max c] over the
    reachable ones.
    """
    k = n.order
    table = basis_table(k, n.u_bits, n.basis_type, n.basis_impl)
    one = 1 << n.basis_type.frac
    assert table.min() >= 0, "basis_table must be non-negative for the convex bound"
    c_lo, _ = cell_and_u(compact(x.lo).astype(np.int64), n.grid_size, n.u_bits, n.index_lo, n.index_mult,
                         n.index_shift)
    c_hi, _ = cell_and_u(compact(x.hi).astype(np.int64), n.grid_size, n.u_bits, n.index_lo, n.index_mult,
                         n.index_shift)
    coeffs = np.asarray(n.coeffs, dtype=np.int64)
    n_out, n_in = coeffs.shape[:2]
    lo, hi = objects(np.zeros(n_out, dtype=np.int64)), objects(np.zeros(n_out, dtype=np.int64))
    for i in range(n_in):
        window = coeffs[:, i, int(c_lo[i]):int(c_hi[i]) + k + 1]
        cmin, cmax = objects(window.min(axis=1)), objects(window.max(axis=1))
        lo += cmin * one
        hi += cmax * one
    return Bounds(lo, hi, n.coeff_type.frac + n.basis_type.frac)


# -- per-op bounds (float) ----------------------------------------------------------------------------

def finite(a: np.ndarray) -> np.ndarray:
    return np.clip(np.asarray(a, dtype=np.float64), -FLOAT32_MAX, FLOAT32_MAX)


def dense_float(x: Bounds, w: np.ndarray, bias: Optional[np.ndarray]) -> Bounds:
    """Real range of ``W x + b`` widened by float32's summation error bound gamma_(n+1) * sum |x_i W_oi| + |b|."""
    w = np.asarray(w, dtype=np.float32).astype(np.float64)  # the golden model multiplies float32 weights
    n_in = w.shape[1]
    xl, xh = finite(x.lo).reshape(-1, n_in), finite(x.hi).reshape(-1, n_in)
    wpos, wneg = np.maximum(w, 0), np.minimum(w, 0)
    hi = xh @ wpos.T + xl @ wneg.T
    lo = xl @ wpos.T + xh @ wneg.T
    mag = np.maximum(np.abs(xl), np.abs(xh)) @ np.abs(w).T
    if bias is not None:
        b = np.asarray(bias, dtype=np.float32).astype(np.float64)
        lo, hi, mag = lo + b, hi + b, mag + np.abs(b)
    err = (n_in + 2) * (F32_REL * mag + F32_ABS)
    shape = x.lo.shape[:-1] + (w.shape[0],)
    return Bounds((lo - err).reshape(shape), (hi + err).reshape(shape), None)


def kan_float(n: KANLayer, x: Bounds) -> Bounds:
    """Convex-combination bound on the float Cox-de Boor basis; one extra cell each side absorbs float
    error in locating the cell, and a relative margin absorbs the basis' rounding and the float32 cast."""
    k, g = n.order, n.grid_size
    h = (n.grid_hi - n.grid_lo) / g
    coeffs = np.asarray(n.coeffs, dtype=np.float64)
    cell = lambda v: np.clip(np.floor((finite(v) - n.grid_lo) / h), 0, g - 1).astype(np.int64)  # noqa: E731
    c_lo, c_hi = np.maximum(cell(x.lo) - 1, 0), np.minimum(cell(x.hi) + 1, g - 1)
    lo, hi, mag = (np.zeros(coeffs.shape[0]) for _ in range(3))
    for i in range(coeffs.shape[1]):
        window = coeffs[:, i, c_lo[i]:c_hi[i] + k + 1]
        lo, hi = lo + window.min(axis=1), hi + window.max(axis=1)
        mag = mag + np.abs(window).max(axis=1)
    err = 2.0 ** -20 * (k + 2) * mag + F32_ABS
    return Bounds(lo - err, hi + err, None)


def add_float(a: Bounds, b: Bounds) -> Bounds:
    lo, hi = finite(a.lo) + finite(b.lo), finite(a.hi) + finite(b.hi)
    err = F32_REL * np.maximum(np.abs(lo), np.abs(hi)) + F32_ABS
    return Bounds(lo - err, hi + err, None)


# -- nodes --------------------------------------------------------------------------------------------


def typed(n: Node, t: Optional[FixedType], field: str) -> FixedType:
    if t is None:
        raise IntervalError(f"{n.describe()}: {field} is not set but the input is fixed point; "
                            "quantize the layer (bitforge.toolchain.passes.quantize) first")
    return t
