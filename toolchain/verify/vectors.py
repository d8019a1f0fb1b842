"""Seeded verification vectors: random samples plus the edge values where fixed-point bugs live.

Edge rows hit the ends of the input range and of the input type, zero, values far beyond the type
(saturation or wrap), exact rounding ties (k + 1/2 LSB, both signs) and one LSB either side of them.
Every other row is uniform in the input range. The same graph, count and seed give the same vectors.
"""
from __future__ import annotations

import numpy as np

from ..fixed import FixedType, quantize
from ..ir import Graph


def input_range(g: Graph, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature [lo, hi] of a graph input: metadata['input_range'] if given, else the first fixed type's range."""
    spec = g.tensors[name]
    r = g.metadata.get("input_range")
    if isinstance(r, dict):
        r = r.get(name)
    if r is not None:
        lo, hi = (np.broadcast_to(np.asarray(v, dtype=np.float64), spec.shape) for v in r)
        return lo.copy(), hi.copy()
    t = spec.dtype or _first_fixed_type(g, name)
    if t is None:
        return np.full(spec.shape, -1.0), np.full(spec.shape, 1.0)
    return np.full(spec.shape, t.min_value), np.full(spec.shape, t.max_value)


def _first_fixed_type(g: Graph, name: str) -> FixedType | None:
    for n in g.consumers(name):
        t = g.tensors[n.output].dtype
        if t is not None:
            return t
    return None


def edge_values(t: FixedType | None, lo: float, hi: float) -> np.ndarray:
    """Scalar edge cases for one feature (real values)."""
    vals = [0.0, -0.0, lo, hi, (lo + hi) / 2]
    if t is not None:
        lsb = t.lsb
        vals += [t.min_value, t.max_value, t.min_value - lsb, t.max_value + lsb,
                 2 * t.max_value + 1, 2 * t.min_value - 1, -4 * abs(t.min_value) - 3, 1e9, -1e9]
        for k in (0, 1, 2, 3, 7):
            for s in (1, -1):
                tie = s * (k + 0.5) * lsb
                vals += [tie, tie + lsb / 4, tie - lsb / 4]
        vals += [t.max_value - lsb / 2, t.min_value + lsb / 2, t.max_value + lsb / 2, t.min_value - lsb / 2]
    return np.asarray(vals, dtype=np.float64)


def make_vectors(g: Graph, n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``n`` rows per graph input: edge rows first (each feature takes each edge value), the rest uniform."""
    rng = np.random.default_rng(seed)
    out = {}
    for name in g.inputs:
        spec = g.tensors[name]
        lo, hi = input_range(g, name)
        x = rng.uniform(lo, hi, size=(n,) + spec.shape)
        t = spec.dtype or _first_fixed_type(g, name)
        flat = x.reshape(n, -1)
        for f in range(flat.shape[1]):
            edges = edge_values(t, float(lo.ravel()[f]), float(hi.ravel()[f]))
            # Spread the edge values over distinct rows per feature so rows mix edges of different features.
            rows = (np.arange(edges.size) * 7 + f * 3) % max(1, min(n, 4 * edges.size))
            rows = rows[rows < n]
            flat[rows, f] = edges[: rows.size]
        if spec.dtype is None:
            out[name] = flat.reshape(x.shape).astype(np.float32)
        else:
            out[name] = quantize(flat.reshape(x.shape), spec.dtype.with_(overflow="SAT"))
    return out
