"""Quantizers whose scale is not a power of two (Brevitas' float scales, onnxruntime's ``quantize_static``), as
integer-only inference (gemmlowp, TFLite: Jacob et al. 2018).

Mixed into the ONNX translator (``onnx_frontend``). A tensor quantized with scale ``s`` and zero point ``zp`` is
held as its integer code minus the zero point, ``q - zp``, in an integer type (``fixed<W,W>``); the translator
keeps ``s`` beside it (``_Translator.scales``, recorded in ``graph.metadata["tensor_scales"]``), so the tensor's
real value is ``code * s``. A code range that is no two's-complement range (an asymmetric zero point such as
onnxruntime's 37 on int8: ``[-165, 90]``) gets a one-bit-wider saturating type and a ``Clip`` to its bounds.

A Dense or Conv with such scales runs on the codes without its bias; its output stays an exact accumulator
(:class:`.onnx_values.Acc`: real value ``acc * s_x * s_w[c] + bias[c]``, then a pending ReLU) until the next
quantizer, which turns it into one ``ScaleShift``: ``scale`` = the integer multipliers ``M0[c]`` of
``s_x s_w[c] / s_y`` sharing one shift ``n`` (:func:`..multiplier.multiplier`), ``shift`` = ``bias / s_y`` on
the ScaleShift's accumulator grid. ReLU follows it (exact: rounding is monotone and maps 0 to 0) and a MaxPool
between the layer and the quantizer runs on the accumulator itself (a per-channel increasing map commutes with
max). An accumulator that reaches anything else (a graph output, an op that needs real numbers) becomes a real
number in a power-of-two type with :data:`REAL_EXTRA_BITS` fraction bits below its finest accumulator step.

A float graph input meeting such a quantizer is first quantized to a fine power-of-two type
(:data:`INPUT_EXTRA_BITS` below the step ``s``), then scaled by ``1/s``: the two roundings differ from one
rounding of ``x / s`` only where ``x / s`` lies within ``2**-INPUT_EXTRA_BITS`` of a tie.

Nothing here is exact in the sense the rest of the frontend is: the deviation from the source model's float
arithmetic is what the fidelity report measures, against the source executed by onnxruntime.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..fixed import FixedType, Overflow, Rounding
from ..ir import Clip, Quantize, ReLU, ScaleShift, TensorSpec
from ..multiplier import MAX_BITS, MIN_BITS, MultiplierError, bias_codes, multiplier
from .onnx_values import Acc, Act, OnnxFrontendError, holding_type, range_type

__all__ = ["QuantOptions", "ScaleOps", "DEFAULT_BITS", "REAL_EXTRA_BITS", "INPUT_EXTRA_BITS", "BIAS_EXTRA_BITS", "is_pow2"]

#: Fraction bits a real-valued accumulator output keeps below its finest channel's step (scale): its rounding
#: then moves a value by at most 2**-9 of one accumulator step.
REAL_EXTRA_BITS = 8
#: Fraction bits below the quantizer's step ``s`` of the power-of-two type a float input is first quantized to.
INPUT_EXTRA_BITS = 12
#: At most this many fraction bits beyond the accumulator's a power-of-two layer takes on to add a float bias
#: exactly (its weight codes are shifted left by as many bits); a bias that needs more is rounded.
BIAS_EXTRA_BITS = 16
#: A requantize shift (bias / output scale) rounded by more than this many output steps is reported; below it,
#: the change is far under the multiplier's own rounding and would only be noise in every compile's warnings.
NOTED_BIAS_CHANGE = 2.0 ** -16
#: The requantize multipliers' default width: 23 significant bits, beyond float32's rounding of the scales
#: themselves, and within the 30-bit constants the RTL's multipliers take.
DEFAULT_BITS = 24


@dataclass(frozen=True)
class QuantOptions:
    """How the ONNX frontend treats what it cannot translate exactly.

    ``strict``: refuse non-power-of-two scales, asymmetric activation zero points, inexact float biases and
    lookup tables of quantized tensors (bitforge before integer-only requantization). ``multiplier_bits``: the
    width of every requantize multiplier ``M0`` (16..32)."""

    strict: bool = False
    multiplier_bits: int = DEFAULT_BITS

    def __post_init__(self) -> None:
        if not MIN_BITS <= self.multiplier_bits <= MAX_BITS:
            raise OnnxFrontendError(f"--multiplier-bits must be {MIN_BITS} to {MAX_BITS}, got {self.multiplier_bits}")


def is_pow2(scale: np.ndarray) -> bool:
    """Whether every (positive, finite) scale is ``2**-F``."""
    mant, _ = np.frexp(np.asarray(scale, dtype=np.float64))
    return bool(np.all(mant == 0.5))


def _bits_for(value: float) -> int:
    """Integer bits (sign included) of a signed type whose range holds +-value."""
    return max(1, math.ceil(math.log2(value))) + 1 if value > 0 else 1


class ScaleOps:
    """Non-power-of-two quantizers and the requantize ScaleShifts, for the ONNX translator."""

    # -- bookkeeping --------------------------------------------------------------------------------------
    def _tensor_scale(self, tensor: str) -> float:
        """Real value per unit of the IR tensor's fixed value (1.0: the tensor is its real value)."""
        return self.scales.get(tensor, 1.0)

    def _set_scale(self, tensor: str, scale: float) -> None:
        if scale != 1.0:
            self.scales[tensor] = float(scale)
        else:
            self.scales.pop(tensor, None)

    def _note(self, message: str) -> None:
        """A frontend approximation the compile report lists among its warnings."""
        self.notes.append(f"{self._where()}: {message}")

    def _fresh(self, base: str) -> str:
        """A node name not yet used, for the nodes this module adds (they may have no ONNX node of their own)."""
        name, k = base, 1
        while name in self.node_names:
            name, k = f"{base}_{k}", k + 1
        self.node_names.add(name)
        return name

    # -- types ----------------------------------------------------------------------------------------------
    def _code_type(self, lo: int, hi: int, frac: int, rounding: Rounding
                   ) -> tuple[FixedType, Optional[tuple[float, float]]]:
        """The type of codes in [lo, hi] (zero point taken off) at ``frac``, and the real Clip bounds when that
        range is no type's own (then the type is one bit wider, saturating)."""
        exact = range_type(lo, hi, frac, rounding)
        if exact is not None:
            return exact, None
        w = max(hi.bit_length(), (-lo - 1).bit_length() if lo < 0 else 0) + 1
        t = FixedType(w, w - frac, True, rounding, Overflow.SAT)
        return t, (math.ldexp(lo, -frac), math.ldexp(hi, -frac))

    def _real_type(self, acc: Acc, s_out: float) -> FixedType:
        """The power-of-two type of an accumulator's real value: every channel's bound, REAL_EXTRA_BITS below
        the finest step."""
        t = self.tensors[acc.tensor].dtype
        step = acc.scale / s_out
        top = max(abs(t.min_value), t.max_value)
        hi = float(np.max(top * step + (0.0 if acc.bias is None else np.abs(acc.bias) / s_out)))
        frac = math.ceil(-math.log2(float(step.min()))) + REAL_EXTRA_BITS
        integer = _bits_for(hi + math.ldexp(1.0, -frac))
        return FixedType(integer + frac, integer, True, Rounding.RND_CONV, Overflow.SAT)

    # -- the requantize ScaleShift -------------------------------------------------------------------------------
    def _materialize(self, acc: Acc, out: str, s_out: float, dtype: Optional[FixedType],
                     bounds: Optional[tuple[float, float]] = None) -> str:
        """``acc`` onto the grid of scale ``s_out`` in ``dtype`` (None: a real-valued power-of-two type): one
        ScaleShift, then the pending ReLU, then the Clip of an asymmetric code range. Returns the IR tensor."""
        xs = self.tensors[acc.tensor]
        dtype = dtype or self._real_type(acc, s_out)
        channels = xs.shape[0]
        ratio = np.broadcast_to(np.asarray(acc.scale, dtype=np.float64) / s_out, (channels,))
        try:
            m = multiplier(ratio, self.options.multiplier_bits, self._where())
        except MultiplierError as e:
            raise self._fail(str(e)) from None
        shift = shift_type = None
        if acc.bias is not None:
            frac = xs.dtype.frac + m.type.frac
            b = bias_codes(np.broadcast_to(acc.bias / s_out, (channels,)), frac)
            if b.codes.dtype == object:
                raise self._fail(f"bias {acc.bias.tolist()} divided by the output scale {s_out} needs codes beyond "
                                 "64 bits; check the export's scales")
            if b.max_change > NOTED_BIAS_CHANGE:
                self._note(f"bias / output scale rounded to 2**-{b.frac} (the requantize accumulator's grid): "
                           f"largest change {b.max_change:.3g} output steps")
            shift = b.codes.astype(np.int64)
            shift_type = holding_type(int(shift.min(initial=0)), int(shift.max(initial=0)), b.frac)
        steps = [t for t in (acc.relu, bounds is not None) if t]
        name = out if not steps else f"{out}_scaled"
        node = ScaleShift(self._fresh(f"{out}_requantize"), (acc.tensor,), (name,), scale=m.codes.copy(),
                          shift=shift, scale_type=m.type, shift_type=shift_type)
        self._emit(node, TensorSpec(name, xs.shape, dtype))
        self._set_scale(name, s_out)
        if acc.relu:
            nxt = out if bounds is None else f"{out}_relu"
            self._emit(ReLU(self._fresh(f"{out}_relu"), (name,), (nxt,)), TensorSpec(nxt, xs.shape, dtype))
            name = nxt
        if bounds is not None:
            self._emit(Clip(self._fresh(f"{out}_clip"), (name,), (out,), lo=bounds[0], hi=bounds[1]),
                       TensorSpec(out, xs.shape, dtype))
        self._set_scale(out, s_out)
        self.approximate = True
        return out

    def _rescale(self, tensor: str, out: str, s_out: float, dtype: FixedType,
                 bounds: Optional[tuple[float, float]]) -> str:
        """A fixed tensor of scale ``s_in`` onto the grid of ``s_out`` (one ScaleShift by s_in / s_out)."""
        channels = self.tensors[tensor].shape[0] if self.tensors[tensor].shape else 1
        acc = Acc(tensor, np.full(channels, self._tensor_scale(tensor)))
        return self._materialize(acc, out, s_out, dtype, bounds)

    def _rescale_real(self, tensor: str, out: str) -> str:
        """Codes of a non-power-of-two grid as real numbers (a graph output: callers read real values)."""
        channels = self.tensors[tensor].shape[0] if self.tensors[tensor].shape else 1
        return self._materialize(Acc(tensor, np.full(channels, self._tensor_scale(tensor))), out, 1.0, None)

    def _real(self, name: str, acc: Acc) -> Act:
        """An accumulator as real numbers (scale 1), once, under the ONNX name it stands for."""
        act = Act(self._materialize(acc, name, 1.0, None))
        self.values[name] = act
        return act

    # -- quantizers -----------------------------------------------------------------------------------------
    def _quantize_to(self, onnx_name: str, v, s_out: float, frac: int, lo: int, hi: int, rounding: Rounding,
                     out: str) -> str:
        """Any activation (float, fixed of any scale, an accumulator) onto a quantizer's grid: codes ``[lo, hi]``
        (zero point already taken off) at ``frac`` fraction bits, each unit worth ``s_out``."""
        dtype, bounds = self._code_type(lo, hi, frac, rounding)
        if isinstance(v, Acc):
            return self._materialize(v, out, s_out, dtype, bounds)
        spec = self._spec(v)
        if spec.is_float and s_out == 1.0:
            t = self._quantize_activation(onnx_name, v, dtype, out if bounds is None else f"{out}_wide")
        elif spec.is_float:
            top = max(abs(lo), abs(hi)) + 1
            ffrac = math.ceil(-math.log2(s_out)) + INPUT_EXTRA_BITS
            integer = _bits_for(top * s_out)
            fine = FixedType(integer + ffrac, integer, True, Rounding.RND_CONV, Overflow.SAT)
            name = f"{out}_fine"
            self._emit(Quantize(self._fresh(f"{out}_quantize"), (v.tensor,), (name,)),
                       TensorSpec(name, spec.shape, fine))
            return self._rescale(name, out, s_out, dtype, bounds)
        elif self._tensor_scale(v.tensor) == s_out and spec.dtype == dtype and s_out != 1.0:
            t = v.tensor  # already on this grid (onnxruntime re-quantizes after MaxPool and Flatten): nothing to do
            bounds = None
        elif self._tensor_scale(v.tensor) == s_out:
            t = self._quantize_activation(onnx_name, v, dtype, out if bounds is None else f"{out}_wide")
        else:
            return self._rescale(v.tensor, out, s_out, dtype, bounds)
        self._set_scale(t, s_out)
        if bounds is not None:
            self._emit(Clip(self._fresh(f"{out}_clip"), (t,), (out,), lo=bounds[0], hi=bounds[1]),
                       TensorSpec(out, spec.shape, dtype))
            t = out
            self.approximate = self.approximate or s_out != 1.0
        self._set_scale(t, s_out)
        return t

    # -- biases of power-of-two layers ------------------------------------------------------------------------
    def _float_bias_codes(self, real: np.ndarray, accum_frac: int) -> tuple[np.ndarray, FixedType, int]:
        """A float bias of a power-of-two layer: (codes, type, k) with the weight codes to be shifted left by k
        bits so the accumulator's grid holds the bias exactly; rounded (with a note) when that takes more than
        BIAS_EXTRA_BITS."""
        b = bias_codes(real, accum_frac + BIAS_EXTRA_BITS)
        if not b.exact:
            self._note(f"float bias rounded to 2**-{b.frac}: largest change {b.max_change:.3g}")
            self.approximate = True
        q = b.codes.astype(np.int64)
        return q, holding_type(int(q.min(initial=0)), int(q.max(initial=0)), b.frac, Rounding.RND_CONV), \
            max(0, b.frac - accum_frac)
