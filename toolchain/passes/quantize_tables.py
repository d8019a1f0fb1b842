"""The quantization pass's choices for the table ops: a Table's input range and output type, a Softmax's tables.

A float Table holds only its function's name; quantizing it means choosing which input codes its entries cover
and which type they hold, then building them with :func:`bitforge.toolchain.tables.build_table` so every executor
reads the same codes. The range is what the input can reach (the proven interval, narrowed by calibration), less
the ends where the rounded function no longer changes: an entry there would repeat its neighbour's code, and the
index clamps inputs beyond the table onto its end entries anyway, so those entries go to resolution instead.
"""
from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import Optional

import numpy as np

from .. import fixed, tables
from ..errors import BitforgeError
from ..fixed import FixedType, Overflow, Rounding
from ..ir import IRError, Softmax, Table
from .intervals import IntervalError
from .op_intervals import DIP, INCREASING, dip_bracket, function_range

__all__ = ["TableChoiceError", "table_type", "table_span", "quantized_table", "quantized_softmax", "softmax_type",
           "calibrated_codes"]

#: Output types whose range the function fills by definition (A: the activation width).
_SIGMOID_INTEGER, _TANH_INTEGER = 0, 1


class TableChoiceError(IRError):
    """A table that cannot be built for the range or type asked (the quantization pass names the node)."""


def _sat(width: int, integer: int, signed: bool) -> FixedType:
    return FixedType(width, integer, signed, Rounding.RND_CONV, Overflow.SAT)


def table_type(function: str, width: int, x: FixedType, lo: int, hi: int, fit) -> FixedType:
    """The output type of a ``width``-bit table of ``function`` over input codes [lo, hi] of ``x``.

    sigmoid: ufixed<A,0> ([0, 1), 1.0 saturating to its largest code, as hls4ml's default); tanh: fixed<A,1>;
    others: integer bits fitted (by ``fit(width, lo, hi, signed)``) to the function's range over the input range.
    """
    if function == "sigmoid":
        return _sat(width, _SIGMOID_INTEGER, False)
    if function == "tanh":
        return _sat(width, _TANH_INTEGER, True)
    ends = (np.array([math.ldexp(lo, -x.frac)]), np.array([math.ldexp(hi, -x.frac)]))
    try:
        with np.errstate(over="ignore"):
            v_lo, v_hi = (float(v[0]) for v in function_range(function, *ends))
    except IntervalError as e:
        raise TableChoiceError(str(e)) from None
    if not (math.isfinite(v_lo) and math.isfinite(v_hi)):
        raise TableChoiceError(f"{function} overflows over its input range [{ends[0][0]:g}, {ends[1][0]:g}]; narrow "
                               "the input range or give the table an explicit output type")
    return fit(width, Fraction(v_lo), Fraction(v_hi), v_lo < 0)


def table_span(function: str, x: FixedType, lo: int, hi: int, out: FixedType) -> tuple[int, int]:
    """[lo, hi] less the ends where ``function``, rounded into ``out``, is constant (on a side where the function
    is monotone: both sides of an increasing one, the falling left side of a dip function)."""
    f = tables.function(function)

    def code(c: int) -> int:
        with np.errstate(over="ignore"):
            return int(fixed.quantize(f(np.array([math.ldexp(c, -x.frac)])), out)[0])

    if function in INCREASING:
        left_limit, trim_right = hi, True
    elif function in DIP:
        left_limit, trim_right = min(hi, math.floor(math.ldexp(dip_bracket(function)[0], x.frac))), False
    else:
        return lo, hi
    if left_limit > lo:  # the last code of the falling (or rising) start that still rounds like lo
        target, a, b = code(lo), lo, left_limit
        while a < b:
            m = (a + b + 1) // 2
            a, b = (m, b) if code(m) == target else (a, m - 1)
        lo = a
    if trim_right and hi > lo:  # the first code that already rounds like hi
        target, a, b = code(hi), lo, hi
        while a < b:
            m = (a + b) // 2
            a, b = (a, m) if code(m) == target else (m + 1, b)
        hi = b
    return lo, hi


def quantized_table(n: Table, x: FixedType, lo: int, hi: int, out: FixedType, size: int) -> Table:
    """``n`` with its table over input codes [lo, hi] (trimmed by :func:`table_span`) in ``out``."""
    lo, hi = table_span(n.function, x, lo, hi, out)
    try:
        spec = tables.build_table(n.function, x, lo, hi, out, size)
    except BitforgeError as e:
        raise TableChoiceError(str(e)) from None
    return dataclasses.replace(n, table=spec.table, index_lo=spec.index_lo, index_shift=spec.index_shift)


def quantized_softmax(n: Softmax, x: FixedType, count: int, size: int) -> Softmax:
    """``n`` with hls4ml-style exp and reciprocal tables (:func:`bitforge.toolchain.tables.softmax_tables`, their
    18-bit default types) for ``count`` elements of ``x``."""
    try:
        st = tables.softmax_tables(x, count, size=size)
    except BitforgeError as e:
        raise TableChoiceError(str(e)) from None
    return dataclasses.replace(n, exp_table=st.exp_table, exp_type=st.exp_type, exp_shift=st.exp_shift,
                               recip_table=st.recip_table, recip_type=st.recip_type, recip_lo=st.recip_lo,
                               recip_shift=st.recip_shift)


def softmax_type(width: int) -> FixedType:
    """ufixed<A,1>: a softmax output lies in [0, 1], and 1.0 (one element far above the rest) must be a code."""
    return _sat(width, 1, False)


def calibrated_codes(x: FixedType, lo: int, hi: int, seen: Optional[tuple[Fraction, Fraction]]) -> tuple[int, int]:
    """The proven codes [lo, hi] narrowed to the calibration range ``seen`` (never beyond the proof)."""
    if seen is None:
        return lo, hi
    scale = Fraction(2) ** x.frac
    c_lo, c_hi = max(lo, math.floor(seen[0] * scale)), min(hi, math.ceil(seen[1] * scale))
    return (c_lo, c_hi) if c_lo <= c_hi else (lo, hi)
