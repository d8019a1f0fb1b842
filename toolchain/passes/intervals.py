"""Interval analysis: sound per-element bounds of every tensor and every rounding point of a graph.

A fixed-point tensor's bounds are exact integer codes (Python ints in object arrays, so no width can
overflow them); the golden model's ops are all monotone up to the overflow step, so rounding the two
endpoints with the destination's own rounding mode gives the exact image of an interval, and the overflow
step is handled per mode (WRAP can split an interval, so it falls back to the whole range unless the
wrapped interval stays contiguous). A float tensor's bounds are float64 values widened outward by the
worst-case float32 rounding error of the op (Higham's gamma_n bound), so they contain both the exact real
result and what the float32 golden model computes.

Each node is seen as a chain of :class:`Stage` s, one per point where values are cast into a type:
the accumulator(s), LowRankDense's intermediate, and the output. A stage records the exact values before
the cast, the type, the values after it and whether the type's overflow mode can be triggered; the
precision pass sizes accumulators from these, and ``check_precision`` reports the stages that overflow.
Dense, LowRankDense and Conv accumulators follow hls4ml's rule (docs/ir.md): an accumulator with fewer
fractional bits than the products gets the bounds of the rounded products, and a saturating one that some
partial sum can push out of range is reported, with its result bounded by the sum in input order
(``bounds.accumulator_rows``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Mapping, Optional

import numpy as np

from ..ir import Add, Dense, Graph, KANLayer, LowRankDense, Node, Quantize, ReLU, Requantize
from .bounds import (
    Bounds,
    InputRange,
    IntervalError,
    Stage,
    accumulator_stage,
    add_float,
    cast_stage,
    dense_accumulator_stage,
    dense_float,
    kan_exact,
    kan_float,
    round_to_code,
    signed_bits,
    typed,
)
from .op_intervals import fixed_stages, float_bounds

__all__ = ["Bounds", "Stage", "Analysis", "IntervalError", "InputRange", "analyze", "input_bounds",
           "node_stages", "signed_bits", "round_to_code"]


def node_stages(g: Graph, n: Node, env: Mapping[str, Bounds]) -> list[Stage]:
    """Bounds of every cast inside ``n`` given its inputs' bounds; the last stage is the output.

    An output tensor that is still float after a fixed-point input, or a LowRankDense ``mid_type`` of
    None, counts as untyped: its stage passes the exact values through, which is what a quantizer needs
    to choose the type (a graph in that state does not pass validation).
    """
    xs = [env[t] for t in n.inputs]
    x = xs[0]
    out_t = g.tensors[n.output].dtype
    out = lambda exact: cast_stage(n.name, n.output, "output", exact, out_t)  # noqa: E731
    if isinstance(n, Quantize):
        if not x.is_float:
            raise IntervalError(f"{n.describe()}: input '{n.input}' is already fixed point")
        return [out(x)]
    if x.is_float:
        return [_float_stage(g, n, xs)]
    if isinstance(n, Requantize):
        return [out(x)]
    if isinstance(n, ReLU):
        zero = lambda a: np.where(a > 0, a, 0).astype(object)  # noqa: E731
        return [out(Bounds(zero(x.lo), zero(x.hi), x.frac))]
    if isinstance(n, Add):
        a, b = xs
        frac = max(a.frac, b.frac)
        up = lambda c, f: c * (1 << (frac - f))  # noqa: E731
        return [out(Bounds(up(a.lo, a.frac) + up(b.lo, b.frac), up(a.hi, a.frac) + up(b.hi, b.frac), frac))]
    if isinstance(n, Dense):
        acc = dense_accumulator_stage(n, f"{n.name}.accum", x, n.weight, n.bias, n.bias_type,
                                      typed(n, n.weight_type, "weight_type"), n.accum_type)
        return [acc, out(acc.result)]
    if isinstance(n, LowRankDense):
        acc_v = dense_accumulator_stage(n, f"{n.name}.accum_v", x, n.v, None, None, typed(n, n.v_type, "v_type"),
                                        n.accum_v_type)
        mid = cast_stage(n.name, f"{n.name}.mid", "intermediate", acc_v.result, n.mid_type)
        acc = dense_accumulator_stage(n, f"{n.name}.accum", mid.result, n.u, n.bias, n.bias_type,
                                      typed(n, n.u_type, "u_type"), n.accum_type)
        return [acc_v, mid, acc, out(acc.result)]
    if isinstance(n, KANLayer):
        typed(n, n.coeff_type, "coeff_type")
        typed(n, n.basis_type, "basis_type")
        acc = accumulator_stage(n, f"{n.name}.accum", kan_exact(n, x), n.accum_type)
        return [acc, out(acc.result)]
    # The ops of the models people bring have their rules in their own module.
    return fixed_stages(g, n, xs, out)


def _float_stage(g: Graph, n: Node, xs: list[Bounds]) -> Stage:
    x = xs[0]
    if isinstance(n, ReLU):
        exact = Bounds(np.maximum(x.lo, 0.0), np.maximum(x.hi, 0.0), None)
    elif isinstance(n, Add):
        exact = add_float(*xs)
    elif isinstance(n, Dense):
        exact = dense_float(x, n.weight, n.bias)
    elif isinstance(n, LowRankDense):
        exact = dense_float(dense_float(x, n.v, None), n.u, n.bias)
    elif isinstance(n, KANLayer):
        exact = kan_float(n, x)
    else:
        exact = float_bounds(g, n, xs)
    return Stage(n.name, n.output, "output", None, exact, exact, False)


# -- graph inputs and the whole graph -----------------------------------------------------------------

def _range_for(g: Graph, name: str, input_range) -> Optional[tuple[np.ndarray, np.ndarray]]:
    if input_range is None:
        return None
    if isinstance(input_range, Mapping):
        if name not in input_range:
            return None
        input_range = input_range[name]
    where = f"input range of '{name}' in graph '{g.name}'"
    if not isinstance(input_range, (list, tuple, np.ndarray)) or len(input_range) != 2:
        raise IntervalError(f"{where}: expected [lo, hi] (scalars or per-feature lists), found {input_range!r}")
    shape = g.tensors[name].shape
    try:
        lo = np.broadcast_to(np.asarray(input_range[0], dtype=np.float64), shape)
        hi = np.broadcast_to(np.asarray(input_range[1], dtype=np.float64), shape)
    except (ValueError, TypeError):
        raise IntervalError(f"{where}: bounds {input_range!r} do not broadcast to the tensor shape {shape} "
                            f"(give scalars or lists of {shape[-1] if shape else 1} per-feature values)") from None
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        raise IntervalError(f"{where}: bounds must be finite numbers, found {input_range!r}")
    if np.any(lo > hi):
        raise IntervalError(f"{where}: lower bound above upper bound in {input_range!r}")
    return lo, hi


def _float32_outward(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Widen to float32 values: the golden model casts float inputs to float32 before anything else."""
    lo32, hi32 = lo.astype(np.float32), hi.astype(np.float32)
    lo32 = np.where(lo32.astype(np.float64) > lo, np.nextafter(lo32, np.float32(-np.inf)), lo32)
    hi32 = np.where(hi32.astype(np.float64) < hi, np.nextafter(hi32, np.float32(np.inf)), hi32)
    return lo32.astype(np.float64), hi32.astype(np.float64)


def input_bounds(g: Graph, input_range: Optional[InputRange] = None) -> dict[str, Bounds]:
    """Bounds of the graph inputs from ``input_range`` (else ``metadata['input_range']``).

    Without a declared range a float input is unbounded (its quantizer is then assumed to see values
    in its own range) and a fixed-point input spans its type's whole code range.
    """
    if input_range is None:
        input_range = g.metadata.get("input_range")
    out = {}
    for name in g.inputs:
        spec = g.tensor(name)
        declared = _range_for(g, name, input_range)
        if spec.is_float:
            if declared is None:
                lo, hi = np.full(spec.shape, -np.inf), np.full(spec.shape, np.inf)
            else:
                lo, hi = _float32_outward(*declared)
            out[name] = Bounds(lo, hi, None)
            continue
        t = spec.dtype
        if declared is None:
            codes = (np.full(spec.shape, t.min_code, dtype=object), np.full(spec.shape, t.max_code, dtype=object))
        else:
            # Codes whose values lie in [lo, hi], clipped to what the type can hold.
            scale = Fraction(2) ** t.frac
            codes = tuple(np.array([min(max(f(Fraction(float(v)) * scale), t.min_code), t.max_code)
                                    for v in arr.ravel()], dtype=object).reshape(spec.shape)
                          for f, arr in ((math.ceil, declared[0]), (math.floor, declared[1])))
        out[name] = Bounds(codes[0], codes[1], t.frac)
    return out


@dataclass(frozen=True)
class Analysis:
    """Bounds of every tensor and every stage of every node, in graph order."""

    tensors: dict[str, Bounds]
    stages: tuple[Stage, ...]


def analyze(g: Graph, input_range: Optional[InputRange] = None) -> Analysis:
    """Propagate bounds from the graph inputs (see :func:`input_bounds`) through every node.

    Sound: every value the golden model can produce for inputs inside the range lies inside the bounds
    of its tensor and stage. Exact (attained) for chains of Quantize/Requantize/ReLU/Add and for a
    Dense layer fed directly by its quantizer; otherwise a box over-approximation.
    """
    env = input_bounds(g, input_range)
    stages: list[Stage] = []
    for n in g.nodes:
        ss = node_stages(g, n, env)
        env[n.output] = ss[-1].result
        stages.extend(ss)
    return Analysis(env, tuple(stages))
