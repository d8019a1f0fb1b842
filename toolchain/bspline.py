"""Uniform B-splines for KAN layers: exact fixed-point basis tables and the float reference.

On a uniform grid a point in cell ``c`` with local coordinate ``u`` in [0, 1) has exactly k+1 non-zero
bases, ``B_{c+m}`` for m = 0..k, with weights ``b_m(u) = N_k(u + k - m)`` where ``N_k`` is the cardinal
B-spline of order k on [0, k+1] (cubic: 6 b_0 = (1-u)^3, ..., 6 b_3 = u^3). The fixed-point table is
computed with exact rationals and rounded half-to-even, then the row's largest weight absorbs the rounding
remainder so that every row sums to exactly 1.0 and every weight stays >= 0 (completing b_0 instead can drive
a tiny b_0 to -1 LSB). Partition of unity and non-negativity survive quantization, so |phi| <= max|c| holds
in hardware too.

``impl="closed_form"`` is instead the arithmetic of a small circuit (k = 1, 2, 3): ``k! b_m(u)`` is an
integer polynomial in the u code (cubic: 6 b_3 = u^3, 6 b_2 = -3u^3 + 3u^2 + 3u + 1, 6 b_1 = 3u^3 - 6u^2 + 4,
in units of 2**-3U), so for m >= 1 ``b_m = floor(exact b_m * 2**F)`` is an exact integer floor division, and
``b_0 = 2**F - b_1 - ... - b_k`` completes the row. The floors make b_0 >= its exact value >= 0: the rows sum
to exactly one and stay non-negative, as the table's do.
"""
from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

import numpy as np

from .fixed import FixedType


def cardinal_bspline(t: Fraction, k: int) -> Fraction:
    """N_k(t) = 1/k! * sum_j (-1)^j C(k+1, j) max(0, t - j)^k, exact for rational t."""
    total = Fraction(0)
    for j in range(k + 2):
        d = t - j
        if d > 0:
            total += (-1) ** j * math.comb(k + 1, j) * d ** k
    return total / math.factorial(k)


@lru_cache(maxsize=64)
def _table(order: int, u_bits: int, basis_frac: int) -> bytes:
    n = 1 << u_bits
    one = 1 << basis_frac
    rows = np.zeros((n, order + 1), dtype=np.int64)
    for uc in range(n):
        u = Fraction(uc, n)
        for m in range(order + 1):
            rows[uc, m] = round(cardinal_bspline(u + order - m, order) * one)  # round(Fraction): half-to-even
        rows[uc, int(np.argmax(rows[uc]))] += one - rows[uc].sum()
    return rows.tobytes()


#: ``k! * b_m(u)`` as integer polynomial coefficients (constant term first), for m = 1..k; b_0 completes the row.
CLOSED_FORM_POLYNOMIALS: dict[int, dict[int, tuple[int, ...]]] = {
    1: {1: (0, 1)},
    2: {1: (1, 2, -2), 2: (0, 0, 1)},
    3: {1: (4, 0, -6, 3), 2: (1, 3, 3, -3), 3: (0, 0, 0, 1)},
}
#: How the basis weights are computed: the rounded exact table, or the closed-form circuit's floors.
BASIS_IMPLS = ("table", "closed_form")


@lru_cache(maxsize=64)
def _closed_form_table(order: int, u_bits: int, basis_frac: int) -> bytes:
    # k! 2**(kU) b_m = sum_j a_j uc**j 2**((k-j)U): exact integers, so the floor is an integer division.
    den = math.factorial(order) << (order * u_bits)
    uc = np.arange(1 << u_bits, dtype=object)
    rows = np.zeros((1 << u_bits, order + 1), dtype=object)
    for m, poly in CLOSED_FORM_POLYNOMIALS[order].items():
        num = sum(a * uc ** j * (1 << ((order - j) * u_bits)) for j, a in enumerate(poly))
        rows[:, m] = (num << basis_frac) // den
    rows[:, 0] = (1 << basis_frac) - rows[:, 1:].sum(axis=1)
    return rows.astype(np.int64).tobytes()


def basis_table(order: int, u_bits: int, basis_type: FixedType, impl: str = "table") -> np.ndarray:
    """``(2**u_bits, order + 1)`` int64 codes of ``basis_type``: row u, column m is b_m(u / 2**u_bits).

    ``impl`` picks the rounding (see the module docstring); every consumer of a KAN layer's bases (golden
    model, ONNX backend, interval analysis, RTL ROM) reads this one table, so they agree by construction.
    """
    if basis_type.signed:
        raise ValueError(f"basis type must be unsigned (bases lie in [0, 1]), got {basis_type}")
    if basis_type.integer < 1:
        raise ValueError(f"basis type {basis_type} cannot hold 1.0; it needs at least 1 integer bit")
    if impl == "table":
        raw = _table(order, u_bits, basis_type.frac)
    elif impl == "closed_form":
        if order not in CLOSED_FORM_POLYNOMIALS:
            raise ValueError(f"basis_impl 'closed_form' exists for spline orders {sorted(CLOSED_FORM_POLYNOMIALS)}, "
                             f"not {order}; use basis_impl 'table'")
        raw = _closed_form_table(order, u_bits, basis_type.frac)
    else:
        raise ValueError(f"unknown basis_impl {impl!r}; expected one of {', '.join(BASIS_IMPLS)}")
    return np.frombuffer(raw, dtype=np.int64).reshape(1 << u_bits, order + 1).copy()


def index_params(grid_lo: float, grid_hi: float, grid_size: int, x_type: FixedType,
                 u_bits: int | None = None, mult_bits: int = 18) -> tuple[int, int, int, int]:
    """Integers that map an input code to a cell position: ``(index_lo, index_mult, index_shift, u_bits)``.

    ``s = ((x - index_lo) * index_mult) >> index_shift`` counts 2**-u_bits cells from ``grid_lo``. When a
    cell spans a power-of-two number of input LSBs, ``u_bits`` defaults to that number's log2 and the map
    is a pure bit slice (mult 1, shift 0: no multiplier in hardware); otherwise ``u_bits`` defaults to 8 and
    one constant multiply with a ``mult_bits``-bit constant does it.
    """
    width = grid_hi - grid_lo
    if not (width > 0 and grid_size >= 1):
        raise ValueError(f"grid [{grid_lo}, {grid_hi}) with G={grid_size} is empty")
    index_lo = int(round(grid_lo * 2.0 ** x_type.frac))
    lsbs_per_cell = Fraction(width) / grid_size * (1 << x_type.frac) if x_type.frac >= 0 else \
        Fraction(width) / grid_size / (1 << -x_type.frac)
    if u_bits is None:
        if lsbs_per_cell.denominator == 1 and lsbs_per_cell.numerator & (lsbs_per_cell.numerator - 1) == 0:
            u_bits = min(lsbs_per_cell.numerator.bit_length() - 1, 12)
        else:
            u_bits = 8
    scale = Fraction(1 << u_bits) / lsbs_per_cell  # s per input LSB
    if scale.numerator & (scale.numerator - 1) == 0 and scale.denominator & (scale.denominator - 1) == 0:
        e = scale.numerator.bit_length() - scale.denominator.bit_length()
        return (index_lo, 1 << e, 0, u_bits) if e >= 0 else (index_lo, 1, -e, u_bits)
    shift = max(0, mult_bits - 1 - math.floor(math.log2(scale)))
    return index_lo, round(scale * (1 << shift)), shift, u_bits


def cell_and_u(xq: np.ndarray, grid_size: int, u_bits: int, index_lo: int, index_mult: int,
               index_shift: int) -> tuple[np.ndarray, np.ndarray]:
    """Integer cell index in [0, G-1] and local coordinate code in [0, 2**u_bits) (clamped out of range)."""
    s = ((np.asarray(xq, dtype=np.int64) - index_lo) * index_mult) >> index_shift
    s = np.clip(s, 0, (grid_size << u_bits) - 1)
    return s >> u_bits, s & ((1 << u_bits) - 1)


def bspline_basis_float(x: np.ndarray, grid_lo: float, grid_hi: float, grid_size: int, order: int) -> np.ndarray:
    """Float reference: all G+k basis values at x (clamped into the grid), shape ``x.shape + (G+k,)``."""
    h = (grid_hi - grid_lo) / grid_size
    s = np.clip((np.asarray(x, dtype=np.float64) - grid_lo) / h, 0.0, grid_size - 1e-9)
    cell = np.floor(s).astype(np.int64)
    u = s - cell
    out = np.zeros(x.shape + (grid_size + order,), dtype=np.float64)
    for m in range(order + 1):
        b = _cardinal_float(u + order - m, order)
        np.put_along_axis(out, (cell + m)[..., None], b[..., None], axis=-1)
    return out


def _cardinal_float(t: np.ndarray, k: int) -> np.ndarray:
    total = np.zeros_like(t)
    for j in range(k + 2):
        total += (-1) ** j * math.comb(k + 1, j) * np.maximum(t - j, 0.0) ** k
    return total / math.factorial(k)
