"""The accumulation rule of ``Dense``, both ``LowRankDense`` stages and ``Conv``: hls4ml's (docs/ir.md).

hls4ml's dense (``nnet_utils/nnet_dense_latency.h``) converts every exact product ``x_i * w_oi`` to ``accum_t``
(its rounding, then its overflow), starts each accumulator at the bias converted to ``accum_t`` and adds the
products in input order, each partial sum converted to ``accum_t`` again (same LSB: only the overflow acts).
The IR takes that as its rule, so a model typed the way an hls4ml configuration types it (``ap_fixed<16,6>``
everywhere: an accumulator with 10 fractional bits under products with 20) runs bit for bit in the golden model.

Most accumulators need none of that machinery. When the accumulator has at least frac(x) + frac(W) fractional
bits (and at least frac(b)), no product and no bias is rounded; when its overflow is WRAP (arithmetic modulo
2**W, in any order) or no partial sum can leave its range, the rule is the exact sum with the accumulator's
overflow applied once: one matrix product. Every accumulator the precision pass infers is of that kind, and so
is everything the RTL backend builds. :func:`accumulation_plan` says which case a stage is in (and, when it is
not the exact sum, why, in words a backend puts in its refusal); :func:`dense_accumulator` computes the rule
for a batch, through the matrix product whenever the plan allows.

This module sits below ``emulate`` (which imports it) and the backends, and imports nothing of theirs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence, Union

import numpy as np

from . import fixed
from .fixed import FixedType, Overflow, clog2, signed_bits

__all__ = ["EXACT_F64", "CHUNK_ELEMENTS", "AccumulationPlan", "exact_matmul", "product_shift", "multiple_of",
           "round_to_accumulator", "rounded_bias", "convert_bias", "partial_sum_range", "accumulation_plan",
           "exact_accumulation", "dense_accumulator"]

EXACT_F64 = float(2 ** 53)
#: Products held at once by the per-product rounding (int64: 32 MB; the rounding makes a few temporaries of the
#: same size), so a large batch costs time, not memory.
CHUNK_ELEMENTS = 1 << 22

#: ``(lo, hi)`` codes of a stage's inputs: scalars, or one per input (the last axis).
InputBounds = tuple[Union[int, Sequence[int], np.ndarray], Union[int, Sequence[int], np.ndarray]]


def exact_matmul(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``x @ w.T`` for integer codes, exact. ``x`` is ``(N, in)``, ``w`` is ``(out, in)``.

    A float64 BLAS product whenever every partial sum is provably an integer below 2**53 (then float64 is exact
    whatever order the library sums in), else int64 below 2**62, else Python ints.
    """
    if x.dtype == object or w.dtype == object:
        return np.dot(x.astype(object), w.astype(object).T)
    xmax = float(np.abs(x).max()) if x.size else 0.0
    wsum = float(np.abs(w).sum(axis=1).max()) if w.size else 0.0
    if xmax * wsum < EXACT_F64:
        return (x.astype(np.float64) @ w.astype(np.float64).T).astype(np.int64)
    if xmax * wsum < 2.0 ** 62:
        return x @ w.T
    return np.dot(x.astype(object), w.astype(object).T)


def product_shift(x_type: FixedType, w_type: FixedType, accum: FixedType) -> int:
    """``d = frac(x) + frac(W) - frac(accum)``: a product loses ``d`` bits to the accumulator's rounding when
    ``d > 0``, and is shifted left by ``-d`` (exactly) when ``d < 0``."""
    return x_type.frac + w_type.frac - accum.frac


def multiple_of(codes, d: int) -> bool:
    """Whether every code is a multiple of ``2**d`` (``d >= 1``): then dropping ``d`` bits rounds nothing."""
    a = np.asarray(codes)
    if a.size == 0:
        return True
    if a.dtype == object or d >= fixed.INT64_SAFE_BITS:
        mask = (1 << d) - 1
        return all(int(v) & mask == 0 for v in a.ravel())
    return not np.any(a.astype(np.int64) & np.int64((1 << d) - 1))


def convert_bias(bias, bias_type: FixedType, accum: FixedType) -> np.ndarray:
    """``(accum_t)bias``: the accumulator's starting value (its rounding, then its overflow)."""
    return fixed.requantize(np.asarray(bias), bias_type, accum)


def round_to_accumulator(codes: np.ndarray, d: int, accum: FixedType) -> np.ndarray:
    """Codes with ``d`` more fractional bits than the accumulator (``d < 0``: fewer) -> codes at its LSB, rounded
    with its rounding mode: the first half of a conversion to ``accum_t``, before its overflow step."""
    if d > 0:
        return fixed.shift_round(codes, d, accum.rounding)
    return codes << (-d) if d < 0 else codes


def rounded_bias(bias, bias_type: FixedType, accum: FixedType) -> np.ndarray:
    """The bias at the accumulator's LSB, rounded as ``(accum_t)bias`` rounds it, before the overflow step."""
    d = bias_type.frac - accum.frac
    return round_to_accumulator(fixed.int_array(bias, bias_type.width - min(d, 0) + 1), d, accum)


def _int_dtype_for(bits: int) -> bool:
    """Whether values of ``bits`` signed bits (spare bit included by the caller) may live in int64."""
    return bits <= fixed.INT64_SAFE_BITS


def _magnitude_bits(a) -> int:
    a = np.asarray(a)
    if a.size == 0:
        return 1
    return max(signed_bits(int(a.min())), signed_bits(int(a.max())))


def partial_sum_range(x_lo, x_hi, w: np.ndarray, shift: int, accum: FixedType,
                      bias_rounded: Optional[np.ndarray] = None) -> tuple[np.ndarray, np.ndarray]:
    """``(lo, hi)``, per output (over the leading axes of ``x_lo``): bounds of every converted product and every
    partial sum before the accumulator's overflow, for inputs in ``[x_lo, x_hi]`` (codes, last axis = inputs).

    Each product lies between its values at the ends of its input's interval, and so does its rounding (rounding
    is monotone); a partial sum then lies between the bias plus the sum of the products' negative lower ends and
    the bias plus the sum of their positive upper ends, whatever prefix it is, and so does each product alone.
    ``bias_rounded`` is the bias at the accumulator's LSB (rounded, not yet overflowed). Sufficient, not tight:
    a partial sum reaches the bound only when every product takes the same sign.
    """
    w = np.asarray(w)
    x_lo, x_hi = np.asarray(x_lo), np.asarray(x_hi)
    n_in = w.shape[1]
    b_bits = 0 if bias_rounded is None else _magnitude_bits(bias_rounded)
    bits = max(_magnitude_bits(x_lo), _magnitude_bits(x_hi)) + _magnitude_bits(w) + max(-shift, 0) + clog2(n_in)
    dtype = np.int64 if _int_dtype_for(max(bits, b_bits) + 2) else object
    wi = w.astype(dtype)
    lo_end = x_lo.astype(dtype)[..., None, :] * wi
    hi_end = x_hi.astype(dtype)[..., None, :] * wi
    p_lo = round_to_accumulator(np.minimum(lo_end, hi_end), shift, accum)
    p_hi = round_to_accumulator(np.maximum(lo_end, hi_end), shift, accum)
    zero = 0 if dtype is object else np.int64(0)
    lo = np.where(p_lo < 0, p_lo, zero).sum(axis=-1)
    hi = np.where(p_hi > 0, p_hi, zero).sum(axis=-1)
    if bias_rounded is not None:
        b = np.asarray(bias_rounded).astype(dtype)
        lo = lo + np.where(b < 0, b, zero)
        hi = hi + np.where(b > 0, b, zero)
    return lo, hi


@dataclass(frozen=True)
class AccumulationPlan:
    """How a stage's accumulation relates to the exact sum.

    ``shift`` is :func:`product_shift`; ``rounds_products`` / ``rounds_bias``: the conversion to the accumulator
    rounds some product / bias (its LSB is coarser and the codes are not all multiples of the step);
    ``saturates``: a non-WRAP overflow may act on a product or a partial sum for some input in the bounds.
    ``reason`` is None when the rule is the exact sum with the accumulator's overflow applied once, else why not.
    """

    shift: int
    rounds_products: bool
    rounds_bias: bool
    saturates: bool
    reason: Optional[str]

    @property
    def exact(self) -> bool:
        return self.reason is None


def _input_bounds(x_type: FixedType, x_bounds: Optional[InputBounds], n_in: int) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = (x_type.min_code, x_type.max_code) if x_bounds is None else x_bounds
    as_codes = lambda v: np.broadcast_to(np.asarray(v, dtype=object), (n_in,))  # noqa: E731
    return as_codes(lo), as_codes(hi)


def _value(code: int, frac: int) -> str:
    """A code's value for a message: exact (shortest repr) up to 2**53, so a range end never looks rounded."""
    return repr(math.ldexp(float(code), -frac))


def accumulation_plan(x_type: FixedType, w: np.ndarray, w_type: FixedType, bias: Optional[np.ndarray],
                      bias_type: Optional[FixedType], accum: FixedType,
                      x_bounds: Optional[InputBounds] = None) -> AccumulationPlan:
    """The plan of one ``W x + b`` stage (``w`` is ``(out, in)`` codes) for inputs in ``x_bounds`` (codes: scalars
    or one per input; None: the whole range of ``x_type``)."""
    w = np.asarray(w)
    d = product_shift(x_type, w_type, accum)
    reasons = []
    rounds_products = d > 0 and not multiple_of(w, d)
    if rounds_products:
        reasons.append(f"rounds each product: accum frac {accum.frac} < frac(x) + frac(W) = "
                       f"{x_type.frac + w_type.frac}")
    db = bias_type.frac - accum.frac if bias is not None else 0
    rounds_bias = db > 0 and not multiple_of(bias, db)
    if rounds_bias:
        reasons.append(f"rounds the bias: accum frac {accum.frac} < frac(b) = {bias_type.frac}")
    saturates = False
    if accum.overflow != Overflow.WRAP and w.size:
        x_lo, x_hi = _input_bounds(x_type, x_bounds, w.shape[1])
        b = None if bias is None else rounded_bias(bias, bias_type, accum)
        lo, hi = partial_sum_range(x_lo, x_hi, w, d, accum, b)
        lo, hi = int(np.min(lo)), int(np.max(hi))
        saturates = lo < accum.sat_min_code or hi > accum.max_code
        if saturates:
            what = "zeroes" if accum.overflow == Overflow.SAT_ZERO else "saturates"
            reasons.append(f"{what} partial sums ({accum.overflow.value}): for inputs in "
                           f"[{_value(int(np.min(x_lo)), x_type.frac)}, {_value(int(np.max(x_hi)), x_type.frac)}] "
                           f"they can reach [{_value(lo, accum.frac)}, {_value(hi, accum.frac)}], beyond its range "
                           f"[{_value(accum.sat_min_code, accum.frac)}, {_value(accum.max_code, accum.frac)}]")
    return AccumulationPlan(d, rounds_products, rounds_bias, saturates, "; ".join(reasons) or None)


def exact_accumulation(x_type: FixedType, w: np.ndarray, w_type: FixedType, bias: Optional[np.ndarray],
                       bias_type: Optional[FixedType], accum: FixedType,
                       x_bounds: Optional[InputBounds] = None) -> Optional[str]:
    """None when the stage's accumulation is the exact sum with the accumulator's overflow applied once (for
    inputs in ``x_bounds``, default the input type's range), else a short reason for a backend's refusal."""
    return accumulation_plan(x_type, w, w_type, bias, bias_type, accum, x_bounds).reason


# -- the rule on a batch -------------------------------------------------------------------------------------------

def dense_accumulator(x: np.ndarray, x_type: FixedType, w: np.ndarray, w_type: FixedType, bias: Optional[np.ndarray],
                      bias_type: Optional[FixedType], accum: FixedType) -> np.ndarray:
    """``(N, out)`` accumulator codes of the rule for a batch ``x`` ``(N, in)`` of codes and ``w`` ``(out, in)``.

    Exact products and no possible saturation (WRAP, or the batch's own input range rules it out): one exact
    matrix product plus the converted bias, one overflow step. Rounded products: each ``(N, out, in)`` product
    rounded, chunked over N, then summed. A saturation that may act: the sum in input order, one overflow per
    partial sum, vectorised over batch and outputs.
    """
    x, w = np.asarray(x), np.asarray(w)
    n_out, n_in = w.shape
    if x.shape[0] == 0:
        return np.zeros((0, n_out), dtype=np.int64)
    d = product_shift(x_type, w_type, accum)
    b = None if bias is None else convert_bias(bias, bias_type, accum)
    exact_products = d <= 0 or multiple_of(w, d)
    sequential = accum.overflow != Overflow.WRAP and _may_saturate(x, w, d, bias, bias_type, accum)
    if exact_products and not sequential:
        if d > 0:
            w = w.astype(np.int64) >> d if w.dtype != object else w // (1 << d)
        elif d < 0:
            w = fixed.int_array(w, _magnitude_bits(w) - d + 1) << (-d)
        acc = exact_matmul(x, w)  # a new array: adding the bias in place saves a (N, out) allocation
        if b is not None:
            if acc.dtype == np.int64 and b.dtype == np.int64:
                acc += b
            else:
                acc = acc + b
        return fixed.apply_overflow(acc, accum)
    bits = _magnitude_bits(x) + _magnitude_bits(w) + max(-d, 0) + 1
    if sequential:
        return _sequential(x, w, d, b, accum, max(bits, accum.width) + 2)
    acc = _rounded_sum(x, w, d, accum, max(bits + clog2(n_in), accum.width) + 2)
    if b is not None:
        acc = acc + fixed.int_array(b, 64 if acc.dtype == object else 0)
    return fixed.apply_overflow(acc, accum)


def _may_saturate(x: np.ndarray, w: np.ndarray, d: int, bias, bias_type, accum: FixedType) -> bool:
    """Whether a saturating accumulator can act for the inputs of this batch (their range per input)."""
    b = None if bias is None else rounded_bias(bias, bias_type, accum)
    lo, hi = partial_sum_range(x.min(axis=0), x.max(axis=0), w, d, accum, b)
    return int(np.min(lo)) < accum.sat_min_code or int(np.max(hi)) > accum.max_code


def _rounded_sum(x: np.ndarray, w: np.ndarray, d: int, accum: FixedType, bits: int) -> np.ndarray:
    """Sum over inputs of every product rounded to the accumulator's LSB (no overflow: WRAP is modular, and a
    saturating accumulator only comes here when nothing can saturate)."""
    n_out, n_in = w.shape
    wide = not _int_dtype_for(bits)
    xi, wi = fixed.int_array(x, 64 if wide else 0), fixed.int_array(w, 64 if wide else 0)
    rows = max(1, CHUNK_ELEMENTS // max(1, n_out * n_in))
    parts = []
    for s in range(0, len(xi), rows):
        p = xi[s:s + rows, None, :] * wi[None, :, :]
        parts.append(round_to_accumulator(p, d, accum).sum(axis=2))
    return np.concatenate(parts, axis=0)


def _sequential(x: np.ndarray, w: np.ndarray, d: int, b: Optional[np.ndarray], accum: FixedType,
                bits: int) -> np.ndarray:
    """hls4ml's loop as written: ``acc = (accum_t)b; for i: acc = (accum_t)(acc + (accum_t)(x_i w_oi))``."""
    wide = not _int_dtype_for(bits)
    xi, wi = fixed.int_array(x, 64 if wide else 0), fixed.int_array(w, 64 if wide else 0)
    n_out = w.shape[0]
    acc = np.zeros((len(xi), n_out), dtype=object if wide else np.int64)
    if b is not None:
        acc = acc + fixed.int_array(b, 64 if wide else 0)[None, :]
    for i in range(w.shape[1]):
        p = fixed.apply_overflow(round_to_accumulator(xi[:, i:i + 1] * wi[None, :, i], d, accum), accum)
        acc = fixed.apply_overflow(acc + p, accum)
    return acc
