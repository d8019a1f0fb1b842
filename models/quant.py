"""Fake quantization in PyTorch with exactly the arithmetic of :func:`bitforge.toolchain.fixed.quantize`.

``fake_quant`` is registered as the custom op ``bitforge::fake_quant`` (width, integer, signed, rounding,
overflow as attributes) rather than written as a chain of ``floor``/``where`` ops, because
``torch.export`` then keeps every quantizer as ONE node that carries its full type. The torch frontend
reads types straight off those nodes, for a live module and for a saved ``.pt2`` archive alike
(importing ``bitforge.models`` registers the op, which ``torch.export.load`` needs), instead of
pattern-matching rounding arithmetic back into a ``FixedType``.

The value is computed in float64 (exact: scaling by a power of two and ``floor`` lose nothing) and cast
back to the input's dtype. The gradient is the straight-through estimator: identity where overflow
did not change the value, zero where a saturating mode clipped it (WRAP passes the gradient
everywhere: wrapping has no flat region to learn from).
"""
from __future__ import annotations

from typing import Optional

import torch
from bitforge.toolchain.fixed import FixedType, Overflow, Rounding
from torch import nn
from torch.nn import functional as F

__all__ = ["fake_quant", "maybe_fake_quant", "InputQuant", "QuantLinear", "fixed_type_of", "FAKE_QUANT_OP"]


def _rounded_codes(x64: torch.Tensor, frac: int, rounding: Rounding) -> torch.Tensor:
    """Codes before overflow (float64 integers), rounding the exact value ``x * 2**frac``."""
    v = x64 * (2.0 ** frac)  # exact (a power-of-two scaling) unless it underflows to zero
    # A nonzero x whose scaled value underflowed lies strictly between -1 and 1 LSB: its floor is -1 or 0.
    fl = torch.where((v == 0) & (x64 < 0), torch.full_like(v, -1.0), torch.floor(v))
    # Compare v with fl + 1/2 rather than forming v - fl, which rounds for float64 -1 < v < 0 (to exactly
    # 1/2 just inside a negative tie); fl + 1/2 is exact below 2**52, and above it v is an integer (v == fl).
    mid = fl + 0.5
    above = v > mid
    half = (v == mid) & (v != fl)
    if rounding == Rounding.TRN:
        return fl
    if rounding == Rounding.TRN_ZERO:
        inc = (v != fl) & (x64 < 0)
    elif rounding == Rounding.RND:
        inc = above | half
    elif rounding == Rounding.RND_ZERO:
        inc = above | (half & (x64 < 0))
    elif rounding == Rounding.RND_INF:
        inc = above | (half & (x64 >= 0))
    elif rounding == Rounding.RND_MIN_INF:
        inc = above
    else:  # RND_CONV: ties to the even code
        odd = (fl - 2.0 * torch.floor(fl * 0.5)) == 1.0
        inc = above | (half & odd)
    return fl + inc.to(fl.dtype)


def _code_bounds(t: FixedType) -> tuple[float, float]:
    return float(t.sat_min_code), float(t.max_code)


def _overflow(q: torch.Tensor, t: FixedType) -> torch.Tensor:
    lo, hi = _code_bounds(t)
    if t.overflow == Overflow.WRAP:
        span = 2.0 ** t.width
        # q - span * floor(q / span) is exact: the result is a representable integer below span.
        r = q - span * torch.floor(q / span)
        return torch.where(r > hi, r - span, r) if t.signed else r
    if t.overflow == Overflow.SAT_ZERO:
        return torch.where((q < lo) | (q > hi), torch.zeros_like(q), q)
    return q.clamp(lo, hi)


def _type_from_attrs(width: int, integer: int, signed: bool, rounding: str, overflow: str) -> FixedType:
    return FixedType(width, integer, signed, rounding, overflow)


@torch.library.custom_op("bitforge::fake_quant", mutates_args=())
def _fake_quant_op(x: torch.Tensor, width: int, integer: int, signed: bool, rounding: str,
                   overflow: str) -> torch.Tensor:
    t = _type_from_attrs(width, integer, signed, rounding, overflow)
    x64 = x.detach().to(torch.float64)
    q = _overflow(_rounded_codes(x64, t.frac, t.rounding), t)
    out = q * (2.0 ** -t.frac)
    # NaN/Inf have no code (fixed.quantize raises); a data-dependent raise here would force a sync in
    # every training step, so they come out as NaN and the frontend rejects non-finite weights by name.
    out = torch.where(torch.isfinite(x64), out, torch.full_like(out, float("nan")))
    return out.to(x.dtype)


@_fake_quant_op.register_fake
def _(x, width, integer, signed, rounding, overflow):
    return torch.empty_like(x)


def _ste_mask(x: torch.Tensor, t: FixedType) -> torch.Tensor:
    """1 where the value survived overflow unchanged, else 0 (all ones for WRAP)."""
    if t.overflow == Overflow.WRAP:
        return torch.ones_like(x)
    lo, hi = _code_bounds(t)
    q = _rounded_codes(x.detach().to(torch.float64), t.frac, t.rounding)
    return ((q >= lo) & (q <= hi)).to(x.dtype)


def _setup_context(ctx, inputs, output):
    x, width, integer, signed, rounding, overflow = inputs
    ctx.save_for_backward(x)
    ctx.fixed_type = _type_from_attrs(width, integer, signed, rounding, overflow)


def _backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return grad * _ste_mask(x, ctx.fixed_type), None, None, None, None, None


_fake_quant_op.register_autograd(_backward, setup_context=_setup_context)

#: The op as it appears in exported programs (``torch.ops.bitforge.fake_quant.default``).
FAKE_QUANT_OP = torch.ops.bitforge.fake_quant.default


def fake_quant(x: torch.Tensor, t: FixedType) -> torch.Tensor:
    """Round ``x`` onto ``t``'s grid as ``fixed.quantize`` does, returned as real values in ``x``'s dtype."""
    return _fake_quant_op(x, t.width, t.integer, t.signed, t.rounding.value, t.overflow.value)


def fixed_type_of(node) -> FixedType:
    """The ``FixedType`` carried by a ``bitforge::fake_quant`` node of an exported graph."""
    names = ("x", "width", "integer", "signed", "rounding", "overflow")
    values = dict(zip(names, node.args))
    values.update(node.kwargs)
    return _type_from_attrs(*(values[k] for k in names[1:]))


def maybe_fake_quant(x: torch.Tensor, t: Optional[FixedType]) -> torch.Tensor:
    """``fake_quant(x, t)``, or ``x`` itself when ``t`` is None: the layers' optional types (an untyped weight or
    output stays float, as in the IR)."""
    return x if t is None else fake_quant(x, t)


class InputQuant(nn.Module):
    """The graph-input quantizer: float samples in, values of ``t`` out (an IR ``Quantize``)."""

    def __init__(self, t: FixedType):
        super().__init__()
        self.fixed_type = t

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fake_quant(x, self.fixed_type)

    def extra_repr(self) -> str:
        return self.fixed_type.to_short()


class QuantLinear(nn.Linear):
    """``nn.Linear`` whose weight, bias and output are fake-quantized (types ``None`` stay float).

    Training sees the quantized values in the forward pass and the float master weights get the STE
    gradient, so quantization-aware training is ordinary training of this module.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 weight_type: Optional[FixedType] = None, bias_type: Optional[FixedType] = None,
                 output_type: Optional[FixedType] = None):
        super().__init__(in_features, out_features, bias=bias)
        self.weight_type = weight_type
        self.bias_type = bias_type
        self.output_type = output_type

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = maybe_fake_quant(self.weight, self.weight_type)
        b = None if self.bias is None else maybe_fake_quant(self.bias, self.bias_type)
        return maybe_fake_quant(F.linear(x, w, b), self.output_type)

    def extra_repr(self) -> str:
        types = ", ".join(f"{k}={t.to_short()}" for k, t in (("weight", self.weight_type), ("bias", self.bias_type),
                                                              ("output", self.output_type)) if t is not None)
        return f"{super().extra_repr()}, {types}" if types else super().extra_repr()
