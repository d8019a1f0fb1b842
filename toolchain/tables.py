"""Lookup tables for the smooth functions (Sigmoid, Tanh, GELU, SiLU, ...) and for Softmax.

A :class:`~bitforge.toolchain.ir.Table` or :class:`~bitforge.toolchain.ir.Softmax` node carries its tables as
integer codes, so every executor reads the same bits; this module is where those codes are made (by the
quantization pass and the frontends) and where each function's float form lives (the float golden model and
the fidelity report). hls4ml builds its activation tables the same way: a declared input range cut into
``table_size`` equal buckets. Ours differ in two details that make them deterministic and tighter: buckets are
whole powers of two of input codes (the index is a shift, no multiplier), and each entry is the function at
its bucket's middle (hls4ml takes the left edge), rounded with the output type's own rounding.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import fixed
from .errors import BitforgeError
from .fixed import FixedType, parse_type

__all__ = ["FUNCTIONS", "TABLE_SIZE", "EXP_TYPE", "RECIP_TYPE", "TableError", "TableSpec", "function",
           "build_table", "SoftmaxTables", "softmax_tables", "lookup"]

#: Entries a table gets when the user does not say (hls4ml's default table_size).
TABLE_SIZE = 1024
#: Softmax's exp(-d) values lie in (0, 1]; 1.0 itself must be a code (the maximum element's own term).
EXP_TYPE = parse_type("ufixed<18,1,RND_CONV,SAT>")
#: 1 / S for S in [1, n]: also in (0, 1].
RECIP_TYPE = parse_type("ufixed<18,1,RND_CONV,SAT>")


class TableError(BitforgeError):
    """A function or table that cannot be built as asked (unknown function, empty range, ...)."""


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # The two-branch form never overflows exp for large |x|.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


#: Function name -> its float64 definition. PyTorch's and ONNX's names map onto these in the frontends.
FUNCTIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "sigmoid": _sigmoid,
    "tanh": np.tanh,
    "gelu": lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))),
    "gelu_tanh": lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3))),
    "silu": lambda x: x * _sigmoid(x),
    "elu": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0.0))),
    "softplus": lambda x: np.logaddexp(0.0, x),
    "exp": np.exp,
}


def function(name: str) -> Callable[[np.ndarray], np.ndarray]:
    """The float64 definition of ``name``; a clear error listing the known ones otherwise."""
    try:
        return FUNCTIONS[name]
    except KeyError:
        raise TableError(f"no table function '{name}'; known: {', '.join(sorted(FUNCTIONS))}") from None


@dataclass(frozen=True)
class TableSpec:
    """A built table: ``table`` codes of the output type and its index map (the Table node's fields)."""

    table: np.ndarray
    index_lo: int
    index_shift: int


def _shift_for(span: int, size: int) -> int:
    """Smallest shift s with ceil(span / 2**s) <= size."""
    s = 0
    while (span + (1 << s) - 1) >> s > size:
        s += 1
    return s


def _midpoints(lo: int, shift: int, entries: int, frac: int) -> np.ndarray:
    """Real value of every bucket's middle: bucket i holds codes lo + i 2**s ... lo + (i + 1) 2**s - 1."""
    first = lo + (np.arange(entries, dtype=np.float64) * float(1 << shift))
    return (first + ((1 << shift) - 1) / 2.0) * math.ldexp(1.0, -frac)


def build_table(name: str, in_type: FixedType, lo_code: int, hi_code: int, out_type: FixedType,
                size: int = TABLE_SIZE) -> TableSpec:
    """The table of function ``name`` for inputs of ``in_type`` with codes in ``[lo_code, hi_code]`` (the
    declared or proven input range; inputs outside it read the nearest end entry), at most ``size`` entries,
    values rounded and saturated into ``out_type``."""
    f = function(name)
    lo_code, hi_code = max(int(lo_code), in_type.min_code), min(int(hi_code), in_type.max_code)
    if hi_code < lo_code:
        raise TableError(f"table for {name}: the input range [{lo_code}, {hi_code}] (codes of {in_type}) is empty")
    if size < 2:
        raise TableError(f"table for {name}: a table needs at least 2 entries, got {size}")
    shift = _shift_for(hi_code - lo_code + 1, size)
    entries = ((hi_code - lo_code) >> shift) + 1
    values = f(_midpoints(lo_code, shift, entries, in_type.frac))
    return TableSpec(fixed.quantize(values, out_type).astype(np.int64), lo_code, shift)


def lookup(x: np.ndarray, table: np.ndarray, index_lo: int, index_shift: int) -> np.ndarray:
    """``table[clamp((x - index_lo) >> index_shift, 0, len - 1)]`` on integer codes (the Table op's rule)."""
    i = np.clip((np.asarray(x, dtype=np.int64) - index_lo) >> index_shift, 0, len(table) - 1)
    return np.asarray(table, dtype=np.int64)[i]


@dataclass(frozen=True)
class SoftmaxTables:
    """A Softmax node's fields: the exp table over ``d = max - x`` and the reciprocal table over the sum."""

    exp_table: np.ndarray
    exp_type: FixedType
    exp_shift: int
    recip_table: np.ndarray
    recip_type: FixedType
    recip_lo: int
    recip_shift: int


def softmax_tables(in_type: FixedType, n: int, exp_type: FixedType = EXP_TYPE, recip_type: FixedType = RECIP_TYPE,
                   size: int = TABLE_SIZE, in_scale: float = 1.0) -> SoftmaxTables:
    """Tables for a softmax over ``n`` elements of ``in_type``, each unit of which is worth ``in_scale`` (an
    integer code of a non-power-of-two quantizer: real value ``code * 2**-frac * in_scale``).

    ``d`` runs over ``[0, max_code - min_code]``, cut where ``exp(-d)`` rounds to 0 in ``exp_type`` (every
    larger d reads the last entry, which is then 0). The sum S of the n terms lies in ``[e0, n e0]``, e0 the
    entry of d = 0 (the maximum element's own term; the others are >= 0), so the reciprocal table covers
    exactly that range.
    """
    if n < 1:
        raise TableError(f"softmax over {n} elements")
    if exp_type.signed or recip_type.signed:
        raise TableError(f"softmax tables hold positive values: use ufixed types, got {exp_type} and {recip_type}")
    d_max = in_type.max_code - in_type.min_code
    # exp(-d) < 2**-(frac_e + 1) rounds to 0 in every mode but the ceiling ones; stop a little beyond.
    cut = math.ceil(math.ldexp((exp_type.frac + 2) * math.log(2.0), in_type.frac) / in_scale)
    d_max = min(d_max, max(cut, 1))
    e_shift = _shift_for(d_max + 1, size)
    e_entries = (d_max >> e_shift) + 1
    d_mid = _midpoints(0, e_shift, e_entries, in_type.frac) * in_scale
    exp_codes = fixed.quantize(np.exp(-d_mid), exp_type).astype(np.int64)
    e0 = int(exp_codes[0])
    if e0 <= 0:
        raise TableError(f"softmax: exp_type {exp_type} cannot hold exp(0) = 1")
    s_lo, s_hi = e0, n * e0
    r_shift = _shift_for(s_hi - s_lo + 1, size)
    r_entries = ((s_hi - s_lo) >> r_shift) + 1
    s_mid = _midpoints(s_lo, r_shift, r_entries, exp_type.frac)
    recip_codes = fixed.quantize(1.0 / s_mid, recip_type).astype(np.int64)
    return SoftmaxTables(exp_codes, exp_type, e_shift, recip_codes, recip_type, s_lo, r_shift)
