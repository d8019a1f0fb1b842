"""Low-rank linear layer ``y = U (V x) + b``: two thin matrix products instead of one wide one.

With rank r an (out, in) layer costs r (in + out) multiplies instead of in * out; on an FPGA that is
the difference between fitting and not. The intermediate ``h = V x`` has its own type (``mid_type``)
so the two stages map onto the IR's ``LowRankDense`` with nothing left implicit.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
from bitforge.toolchain.errors import BitforgeError
from bitforge.toolchain.fixed import FixedType
from torch import nn
from torch.nn import functional as F

from .quant import maybe_fake_quant

__all__ = ["LowRankLinear", "LowRankError"]


class LowRankError(BitforgeError):
    """A rank that the layer's shape cannot have."""


class LowRankLinear(nn.Module):
    """``y = U (V x) + b`` with ``v`` ``(rank, in)`` and ``u`` ``(out, rank)``; every type optional (float)."""

    def __init__(self, in_features: int, out_features: int, rank: int, bias: bool = True, *,
                 u_type: Optional[FixedType] = None, v_type: Optional[FixedType] = None,
                 mid_type: Optional[FixedType] = None, bias_type: Optional[FixedType] = None,
                 output_type: Optional[FixedType] = None):
        super().__init__()
        if not 1 <= rank <= min(in_features, out_features):
            raise LowRankError(f"rank {rank} is outside 1..min(in, out) = 1..{min(in_features, out_features)} "
                               f"for a {in_features} -> {out_features} layer")
        self.in_features, self.out_features, self.rank = in_features, out_features, rank
        self.u = nn.Parameter(torch.empty(out_features, rank))
        self.v = nn.Parameter(torch.empty(rank, in_features))
        self.bias = nn.Parameter(torch.empty(out_features)) if bias else None
        self.u_type, self.v_type, self.mid_type = u_type, v_type, mid_type
        self.bias_type, self.output_type = bias_type, output_type
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # Scaled so that U V has roughly nn.Linear's initial variance.
        nn.init.kaiming_uniform_(self.v, a=math.sqrt(5))
        nn.init.uniform_(self.u, -1.0 / math.sqrt(self.rank), 1.0 / math.sqrt(self.rank))
        if self.bias is not None:
            bound = 1.0 / math.sqrt(self.in_features)
            nn.init.uniform_(self.bias, -bound, bound)

    @classmethod
    def from_linear(cls, linear: nn.Linear, rank: int, **types: Optional[FixedType]) -> "LowRankLinear":
        """Best rank-``rank`` approximation of ``linear`` (truncated SVD, Eckart-Young).

        The singular values are split evenly (``sqrt(S)`` into each factor) so U and V have similar
        ranges, which lets them share a narrow fixed-point type.
        """
        w = linear.weight.detach().to(torch.float64)
        out = cls(linear.in_features, linear.out_features, rank, bias=linear.bias is not None, **types)
        uu, s, vh = torch.linalg.svd(w, full_matrices=False)
        root = s[:rank].sqrt()
        with torch.no_grad():
            out.u.copy_(uu[:, :rank] * root)
            out.v.copy_(root[:, None] * vh[:rank])
            if linear.bias is not None:
                out.bias.copy_(linear.bias.detach())
        return out.to(linear.weight.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = maybe_fake_quant(F.linear(x, maybe_fake_quant(self.v, self.v_type)), self.mid_type)
        b = None if self.bias is None else maybe_fake_quant(self.bias, self.bias_type)
        return maybe_fake_quant(F.linear(h, maybe_fake_quant(self.u, self.u_type), b), self.output_type)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, rank={self.rank}"
