"""Integer stand-ins for the float numbers of quantized exports: scale multipliers and float biases.

A QONNX or QDQ model with float (non-power-of-two) scales multiplies every accumulator by a real number
``M = s_w s_x / s_y``. Integer-only inference (gemmlowp, TFLite: Jacob et al. 2018) replaces it with
``M0 * 2**-n``: an integer multiply and a shift, so the golden model, ONNX Runtime and the RTL compute the same
bits. bitforge holds ``M0`` as the code of a fixed-point type with ``n`` fractional bits, which is exactly a
:class:`~bitforge.toolchain.ir.ScaleShift` scale. A float32 bias is a dyadic rational (an integer times a power
of two), so it is exact on a fine enough grid; :func:`bias_codes` says how fine, or how much rounding to a
coarser one changes it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from .errors import BitforgeError
from .fixed import FixedType, Overflow, Rounding

__all__ = ["MultiplierError", "Multiplier", "multiplier", "dyadic_frac", "BiasCodes", "bias_codes",
           "MIN_BITS", "MAX_BITS"]

#: The multiplier widths a user may choose (gemmlowp uses 32; 16 fits one DSP input of most FPGAs).
MIN_BITS, MAX_BITS = 16, 32


class MultiplierError(BitforgeError):
    """A scale that has no integer multiplier (zero, negative, not finite) or a width outside 16..32."""


@dataclass(frozen=True)
class Multiplier:
    """``values ~= codes * 2**-type.frac``: per-channel integer multipliers sharing one shift."""

    codes: np.ndarray
    type: FixedType
    #: Largest relative error |M0 2**-n - m| / m over the channels.
    max_rel_error: float


def multiplier(values, bits: int = 32, where: str = "scale") -> Multiplier:
    """The ``bits``-bit signed integer multipliers of the positive reals ``values`` with one shift ``n``: the
    largest fills the width (its code in [2**(bits-2), 2**(bits-1))), so it keeps ``bits - 1`` significant
    bits; smaller channels keep fewer. Rounding is to nearest, ties to even."""
    if not MIN_BITS <= bits <= MAX_BITS:
        raise MultiplierError(f"multiplier width must be {MIN_BITS} to {MAX_BITS} bits, got {bits}")
    m = np.atleast_1d(np.asarray(values, dtype=np.float64))
    if m.size == 0 or not np.all(np.isfinite(m)) or np.any(m <= 0):
        raise MultiplierError(f"{where}: multipliers must be positive and finite, found "
                              f"{m[~(np.isfinite(m) & (m > 0))][:3].tolist() if m.size else 'none'}")
    _, e = math.frexp(float(m.max()))  # max = f 2**e, f in [0.5, 1)
    n = bits - 1 - e
    while True:
        codes = np.array([_round_half_even(Fraction(float(v)) * (Fraction(2) ** n)) for v in m], dtype=np.int64)
        if codes.max() < 1 << (bits - 1):
            break
        n -= 1  # the largest rounded up to 2**(bits-1): one bit less of fraction
    rel = float(np.max(np.abs(np.ldexp(codes.astype(np.float64), -n) - m) / m))
    return Multiplier(codes, FixedType(bits, bits - n, True, Rounding.RND_CONV, Overflow.SAT), rel)


def _round_half_even(v: Fraction) -> int:
    f = math.floor(v)
    rem = v - f
    return f + (1 if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and f % 2) else 0)


def dyadic_frac(value: float) -> int:
    """Fractional bits that hold the float ``value`` exactly (its denominator's power of two; <= 0 for
    integers that are multiples of powers of two)."""
    f = Fraction(float(value))
    if f == 0:
        return -1074  # zero sits on every grid
    if f.denominator > 1:
        return f.denominator.bit_length() - 1  # a float's denominator is a power of two
    num = abs(f.numerator)
    return -((num & -num).bit_length() - 1)  # an integer: minus its trailing zero bits


@dataclass(frozen=True)
class BiasCodes:
    """A float bias on a fixed-point grid: codes at ``frac``, and the largest change rounding made (0: exact)."""

    codes: np.ndarray
    frac: int
    max_change: float

    @property
    def exact(self) -> bool:
        return self.max_change == 0.0


def bias_codes(values, max_frac: int) -> BiasCodes:
    """The float ``values`` as integer codes at the coarsest grid that holds them all exactly, if that grid is
    no finer than ``max_frac`` (the accumulator's); else rounded (ties to even) at ``max_frac``."""
    v = np.atleast_1d(np.asarray(values, dtype=np.float64))
    need = max((dyadic_frac(x) for x in v), default=0)
    frac = min(max(need, 0), max_frac)
    scaled = [Fraction(float(x)) * (Fraction(2) ** frac) for x in v]
    codes = [_round_half_even(s) for s in scaled]
    change = max((abs(float((Fraction(c) - s) / (Fraction(2) ** frac))) for c, s in zip(codes, scaled)),
                 default=0.0)
    return BiasCodes(np.array(codes, dtype=object if any(abs(c) >= 2 ** 62 for c in codes) else np.int64), frac,
                     change)
