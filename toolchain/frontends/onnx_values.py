"""What flows between the ONNX translator's modules: its error, the values an ONNX tensor name can stand for, and
the exact-number helpers more than one op family needs.

The translator (``onnx_frontend``) maps every ONNX tensor name to one :data:`Value`: a constant, a quantized
constant, a per-sample tensor of the IR, the integer codes of a ``QuantizeLinear``, or a shape vector (the
``Shape -> Gather -> Unsqueeze -> Concat`` plumbing exporters put in front of a ``Reshape``). The op families
(``onnx_layers``, ``onnx_activations``, ``onnx_shapes``) read and write these.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

import numpy as np

from ..errors import BitforgeError
from ..fixed import FixedType, Overflow, Rounding

__all__ = ["OnnxFrontendError", "Const", "QConst", "Act", "Acc", "Codes", "ShapeVec", "Value", "holding_type",
           "range_type", "dense_output_type", "dyadic"]


class OnnxFrontendError(BitforgeError):
    """An ONNX model bitforge cannot translate exactly; the message names the file, node, what was expected
    and found, and what to do."""


@dataclass
class Const:
    """A constant (initializer, Constant node, or an op folded on constants). ``elem`` is the ONNX
    element type, kept because int4/uint4 arrive as int8 numpy arrays."""

    array: np.ndarray
    elem: int


@dataclass
class QConst:
    """A quantized constant, exactly ``codes * 2**-dtype.frac``, times ``scale`` (broadcast to the codes' shape)
    when its quantizer's scale is not a power of two."""

    codes: np.ndarray
    dtype: FixedType
    scale: Optional[np.ndarray] = None

    def real(self) -> np.ndarray:
        r = np.ldexp(self.codes.astype(np.float64), -self.dtype.frac)
        return r if self.scale is None else r * self.scale


@dataclass
class Act:
    """A per-sample tensor of the IR (name of the IR tensor)."""

    tensor: str


@dataclass
class Acc:
    """An exact integer accumulator not yet requantized (a Dense/Conv with non-power-of-two scales): its real
    value is ``relu?(value(tensor) * scale[c] + bias[c])`` per channel (axis 0). The next quantizer turns it into
    one ScaleShift onto its grid (the gemmlowp requantize); anything else first turns it into real numbers."""

    tensor: str
    scale: np.ndarray
    bias: Optional[np.ndarray] = None
    relu: bool = False


@dataclass
class Codes:
    """Integer output of ``QuantizeLinear`` on an activation: the IR tensor it typed, and the quantizer
    parameters its ``DequantizeLinear`` must repeat."""

    tensor: str
    scale: np.ndarray
    zero_point: np.ndarray
    elem: int


@dataclass
class ShapeVec:
    """A shape computed from an activation's shape: known sizes, and ``None`` for the batch size, which only the
    runtime knows. ``scalar`` marks a single ``Gather``ed entry (rank 0)."""

    dims: tuple[Optional[int], ...]
    scalar: bool = False


Value = Union[Const, QConst, Act, Acc, Codes, ShapeVec]


def range_type(lo: int, hi: int, frac: int, rounding: Rounding) -> Optional[FixedType]:
    """The fixed type whose code range is exactly [lo, hi] (saturating), or None if there is none."""
    if lo == 0 and hi >= 1 and (hi + 1) & hi == 0:
        w = hi.bit_length()
        return FixedType(w, w - frac, False, rounding, Overflow.SAT)
    if hi >= 1 and (hi + 1) & hi == 0:
        w = hi.bit_length() + 1
        if lo == -(hi + 1):
            return FixedType(w, w - frac, True, rounding, Overflow.SAT)
        if lo == -hi:
            return FixedType(w, w - frac, True, rounding, Overflow.SAT_SYM)
    return None


def holding_type(lo: int, hi: int, frac: int, rounding: Rounding = Rounding.RND_CONV) -> FixedType:
    """The narrowest type holding every code in [lo, hi] (for constants, whose codes are already known, and for
    exact intermediates, whose code range is proven)."""
    exact = range_type(lo, hi, frac, rounding)
    if exact is not None:
        return exact
    if lo >= 0:
        w = max(1, hi.bit_length())
        return FixedType(w, w - frac, False, rounding, Overflow.SAT)
    w = max(hi.bit_length(), (-lo - 1).bit_length()) + 1
    return FixedType(w, w - frac, True, rounding, Overflow.SAT)


def dense_output_type(x: FixedType, w: np.ndarray, wt: FixedType, bias: Optional[np.ndarray],
                      bt: Optional[FixedType]) -> FixedType:
    """Smallest signed type holding ``W x + b`` exactly for every input code (``w`` is ``(out, fan_in)``): the
    value a QDQ/QONNX graph carries between its MatMul or Conv and the next quantizer. A Conv's padding reads 0,
    so its windows are bounded by the same sums."""
    frac = x.frac + wt.frac
    xmax = max(abs(x.min_code), abs(x.max_code))
    rows = np.abs(w.astype(object)).sum(axis=1) * xmax
    if bias is not None:
        rows = rows + np.abs(bias.astype(object)) * (1 << (frac - bt.frac))
    width = max(2, int(max(rows, default=0)).bit_length() + 1)
    return FixedType(width, width - frac, True)


def dyadic(values: np.ndarray, max_frac: int = 32) -> Optional[tuple[np.ndarray, int]]:
    """``(codes, frac)`` with ``values == codes * 2**-frac`` exactly, ``frac`` the smallest such (>= 0), or None
    when that needs more than ``max_frac`` fractional bits (or codes beyond int64): the real numbers a
    fixed-point type can hold exactly."""
    v = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(v)):
        return None
    for frac in range(0, max_frac + 1):
        scaled = np.ldexp(v, frac)
        if np.all(scaled == np.round(scaled)):
            if np.any(np.abs(scaled) >= 2.0 ** 62):
                return None
            return scaled.astype(np.int64), frac
    return None
