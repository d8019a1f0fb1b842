"""Pure-spline KAN layer: ``y_o = sum_i sum_j c[o, i, j] B_{j,k}(x_i)`` on a uniform grid.

Knots are ``t_j = lo + (j - k) h`` for j = 0..G+2k (h = (hi - lo) / G), so the G+k bases of order k
cover [lo, hi) exactly; inputs are clamped into that interval, as in the reference
:func:`bitforge.toolchain.bspline.bspline_basis_float` and in the hardware's index map.

The grid (lo, hi, G, k) is also kept in an int64 buffer ``grid_spec`` (lo and hi as the bit patterns of
float64 values) so that a ``torch.export`` archive carries it: ``.float()``/``.half()`` casts leave
integer buffers alone, so the grid the frontend rebuilds is bit-exactly the one the layer was built with.
The hardware basis arithmetic (``basis_impl``, see :func:`bitforge.toolchain.bspline.basis_table`) travels the
same way, as its index in ``BASIS_IMPLS`` in the buffer ``basis_impl_code``.
"""
from __future__ import annotations

from typing import Optional

import torch
from bitforge.toolchain.bspline import BASIS_IMPLS, CLOSED_FORM_POLYNOMIALS
from bitforge.toolchain.errors import BitforgeError
from bitforge.toolchain.fixed import FixedType
from torch import nn
from torch.nn import functional as F

from .quant import maybe_fake_quant

__all__ = ["KANLayer", "KANError", "bspline_basis", "grid_from_spec"]


class KANError(BitforgeError):
    """A KAN layer configuration outside what the layer (and the IR) supports."""


def bspline_basis(x: torch.Tensor, grid_lo: float, grid_hi: float, grid_size: int, order: int) -> torch.Tensor:
    """All G+k B-spline bases at ``x`` (clamped into [lo, hi]), shape ``x.shape + (G+k,)``.

    Cox-de Boor recursion in cell units (knot j sits at j - k), vectorised over the bases. The order-0
    indicator is placed from the integer cell, clamped to G-1: in float32 the clamp G - 1e-9 rounds to
    G, and x >= hi must still evaluate the last cell's polynomial (at its right end), not zero.
    Differentiable in ``x`` inside the grid, so KAN layers can be stacked and trained end to end.
    """
    h = (grid_hi - grid_lo) / grid_size
    s = ((x - grid_lo) / h).clamp(0.0, grid_size - 1e-9)  # the reference's clamp (== G in float32)
    cell = torch.floor(s.detach()).clamp(max=grid_size - 1).to(torch.int64)
    n0 = grid_size + 2 * order
    b = F.one_hot(cell + order, n0).to(x.dtype)
    knots = torch.arange(n0 + 1, dtype=x.dtype, device=x.device) - order
    s = s.unsqueeze(-1)
    for p in range(1, order + 1):
        # Uniform knots: both denominators t_{i+p} - t_i and t_{i+p+1} - t_{i+1} equal p.
        b = ((s - knots[: -(p + 1)]) * b[..., :-1] + (knots[p + 1:] - s) * b[..., 1:]) / p
    return b


def grid_spec_tensor(grid_lo: float, grid_hi: float, grid_size: int, order: int) -> torch.Tensor:
    bounds = torch.tensor([grid_lo, grid_hi], dtype=torch.float64).view(torch.int64)
    return torch.cat([bounds, torch.tensor([grid_size, order], dtype=torch.int64)])


def grid_from_spec(spec: torch.Tensor) -> tuple[float, float, int, int]:
    """``(grid_lo, grid_hi, grid_size, order)`` from a ``grid_spec`` buffer."""
    spec = spec.detach().to(torch.int64).cpu()
    lo, hi = spec[:2].clone().view(torch.float64).tolist()
    return lo, hi, int(spec[2]), int(spec[3])


class KANLayer(nn.Module):
    """Trainable spline coefficients ``(out, in, G+k)`` on a fixed uniform grid; types optional (float).

    ``basis_type``, when given, fake-quantizes the basis values in the forward pass (an approximation of
    the hardware table, which also quantizes the position within a cell); when ``None`` the frontend
    picks its default basis type. ``basis_impl`` tells the fixed-point IR how hardware rounds the bases
    ("table" or "closed_form"); the float forward pass does not depend on it.
    """

    def __init__(self, in_features: int, out_features: int, grid_size: int = 5, order: int = 3,
                 grid_range: tuple[float, float] = (-1.0, 1.0), *, coeff_type: Optional[FixedType] = None,
                 basis_type: Optional[FixedType] = None, output_type: Optional[FixedType] = None,
                 init_scale: float = 0.1, basis_impl: str = "table"):
        super().__init__()
        lo, hi = (float(v) for v in grid_range)
        if not hi > lo:
            raise KANError(f"grid_range {grid_range} is empty; expected (lo, hi) with hi > lo")
        if grid_size < 1:
            raise KANError(f"grid_size must be >= 1, got {grid_size}")
        if not 1 <= order <= 5:
            raise KANError(f"spline order {order} unsupported; expected 1..5 (the IR's range)")
        if basis_impl not in BASIS_IMPLS or (basis_impl == "closed_form" and order not in CLOSED_FORM_POLYNOMIALS):
            raise KANError(f"basis_impl {basis_impl!r} unsupported for order {order}; expected 'table', or "
                           f"'closed_form' for orders {sorted(CLOSED_FORM_POLYNOMIALS)}")
        self.in_features, self.out_features = in_features, out_features
        self.grid_lo, self.grid_hi, self.grid_size, self.order = lo, hi, grid_size, order
        self.coeff_type, self.basis_type, self.output_type = coeff_type, basis_type, output_type
        self.coeffs = nn.Parameter(torch.randn(out_features, in_features, grid_size + order) * init_scale)
        self.register_buffer("grid_spec", grid_spec_tensor(lo, hi, grid_size, order))
        self.register_buffer("basis_impl_code", torch.tensor([BASIS_IMPLS.index(basis_impl)], dtype=torch.int64))

    @property
    def basis_impl(self) -> str:
        return BASIS_IMPLS[int(self.basis_impl_code[0])]

    @property
    def n_basis(self) -> int:
        return self.grid_size + self.order

    def basis(self, x: torch.Tensor) -> torch.Tensor:
        """``(N, in, G+k)`` basis values of a ``(N, in)`` batch."""
        return bspline_basis(x, self.grid_lo, self.grid_hi, self.grid_size, self.order)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = maybe_fake_quant(self.basis(x), self.basis_type)
        c = maybe_fake_quant(self.coeffs, self.coeff_type)
        return maybe_fake_quant(torch.einsum("nij,oij->no", b, c), self.output_type)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, grid_size={self.grid_size}, "
                f"order={self.order}, grid_range=({self.grid_lo}, {self.grid_hi})")
