"""Which points a sweep evaluates: every combination of its axes (grid), ``n`` distinct random combinations, or an
``n``-point Latin hypercube over the axes' value indices.

Deterministic: the same spec and seed give the same points in the same order (one ``numpy.random.Generator``
seeded with ``sampling.seed``, drawn in axis order), so a rerun or a resumed sweep asks for exactly the points it
already has in its cache. Grid order is ``itertools.product`` in axis order (the last axis varies fastest); a
random or LHS point's index is its position in the drawn order.

Latin hypercube (McKay, Beckman and Conover, Technometrics 21(2), 1979): each axis's index range is cut into ``n``
strata, every stratum gets exactly one point, and the strata are paired across axes by an independent random
permutation per axis, so ``n`` points cover every axis's whole range where a random draw of ``n`` may cluster. An
axis with at least ``n`` values has ``n`` integer strata ``[ceil(s m / n), ceil((s + 1) m / n))`` (index ``i``
lies in stratum ``i * n // m``), one index drawn uniformly in each; an axis with fewer values than ``n`` gives
stratum ``s`` the value under ``(s + u) m / n``, so each value gets about ``n / m`` points. Points that come out
equal (only possible when every axis has fewer than ``n`` values) are dropped, the first kept.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from .model import Point, SweepError, SweepSpec

__all__ = ["MAX_POINTS", "grid_size", "check_sampling", "sample"]

#: More points than this is a mistake (each may cost a synthesis and a place and route of minutes).
MAX_POINTS = 100_000
_MAX_DRAW = 2**62  # numpy draws indices as int64


def grid_size(spec: SweepSpec) -> int:
    """Every combination of the axes' values (1 for a sweep without axes: its one point is the base)."""
    return math.prod(len(a.values) for a in spec.axes)


def _error(spec: SweepSpec, path: str, message: str) -> SweepError:
    return SweepError(f"{spec.source or 'sweep spec'}: {path}: {message}")


def _shape(spec: SweepSpec) -> str:
    return " x ".join(f"{len(a.values)} {a.name}" for a in spec.axes) or "no axes"


def check_sampling(spec: SweepSpec) -> None:
    """Raise :class:`SweepError` when ``spec.sampling`` cannot give the points it asks for (the spec parser calls
    this, so the CLI refuses before any work)."""
    s, total = spec.sampling, grid_size(spec)
    if s.method == "grid":
        if s.n is not None:
            raise _error(spec, "sampling.n", f"grid takes every combination ({total:,} points: {_shape(spec)}); "
                                             "drop n, or use method random or lhs to draw n of them")
        if total > MAX_POINTS:
            raise _error(spec, "sampling.method", f"the grid has {total:,} points ({_shape(spec)}), more than "
                                                  f"{MAX_POINTS:,}; draw some with method random or lhs and n")
        return
    if s.method not in ("random", "lhs"):
        raise _error(spec, "sampling.method", f"unknown sampling method {s.method!r}; expected grid, random or lhs")
    if s.n is None:
        raise _error(spec, "sampling.n", f"missing: method {s.method} draws n points; add n (the grid has {total:,}: "
                                         f"{_shape(spec)})")
    if isinstance(s.n, bool) or not isinstance(s.n, int) or s.n < 1:
        raise _error(spec, "sampling.n", f"expected a whole number >= 1, got {s.n!r}")
    if s.n > MAX_POINTS:
        raise _error(spec, "sampling.n", f"{s.n:,} points; at most {MAX_POINTS:,}")
    if s.method == "random":
        if s.n > total:
            raise _error(spec, "sampling.n", f"random draws {s.n:,} distinct points but the grid has only {total:,} "
                                             f"({_shape(spec)}); lower n to at most {total:,}, or use method grid "
                                             "for all of them")
        if total > _MAX_DRAW:
            raise _error(spec, "sampling.method", f"the grid has {total:,} points, too many to draw from at random; "
                                                  "use method lhs")


def sample(spec: SweepSpec) -> list[Point]:
    """The sweep's points, in order, with ``index`` 0..len-1 (contract: docs/sweep.md, "Sampling")."""
    check_sampling(spec)
    if spec.sampling.method == "grid":
        combos = list(itertools.product(*(range(len(a.values)) for a in spec.axes)))
    else:
        rng = np.random.default_rng(spec.sampling.seed)
        draw = _random if spec.sampling.method == "random" else _lhs
        combos = list(dict.fromkeys(draw(spec, rng)))  # equal points: the first kept, order unchanged
    return [Point(i, {a.name: a.values[k] for a, k in zip(spec.axes, combo)}) for i, combo in enumerate(combos)]


def _random(spec: SweepSpec, rng: np.random.Generator) -> list[tuple[int, ...]]:
    """``n`` distinct grid positions, without replacement, unravelled in grid (itertools.product) order."""
    flat = rng.choice(grid_size(spec), size=spec.sampling.n, replace=False)
    sizes = [len(a.values) for a in spec.axes]
    out = []
    for f in flat.tolist():
        combo = []
        for m in reversed(sizes):
            f, k = divmod(f, m)
            combo.append(k)
        out.append(tuple(reversed(combo)))
    return out


def _lhs(spec: SweepSpec, rng: np.random.Generator) -> list[tuple[int, ...]]:
    """One draw per stratum on every axis, the strata in an independent random order per axis (module doc)."""
    n = spec.sampling.n
    columns = []
    for a in spec.axes:
        m = len(a.values)
        strata = rng.permutation(n)
        u = rng.random(n)
        if m >= n:
            lo = -(-strata * m // n)  # ceil(s m / n)
            hi = -(-(strata + 1) * m // n)
            idx = lo + np.floor(u * (hi - lo)).astype(np.int64)
        else:
            idx = np.minimum(np.floor((strata + u) * m / n).astype(np.int64), m - 1)
        columns.append(idx.tolist())
    return [tuple(c[i] for c in columns) for i in range(n)]
