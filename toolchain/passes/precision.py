"""Precision inference: accumulators sized so they cannot overflow, and a report of the types that can.

Both work from the interval analysis (:mod:`.intervals`), so their promises hold for every input inside
the declared range (``input_range`` argument, else ``graph.metadata['input_range']``, else the whole
range of each graph input's type) and are exact where the analysis is exact: a Dense layer fed by its
quantizer gets the narrowest accumulator that holds a sum some corner input actually reaches.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Union
from dataclasses import dataclass
from fractions import Fraction
from typing import Optional

from .. import fixed
from ..fixed import FixedType, Overflow, Rounding
from ..ir import Conv, Dense, Graph, IRError, KANLayer, LowRankDense, Node, ScaleShift
from ..weight_codes import WEIGHT_CODES_KEY
from .intervals import (
    Bounds,
    InputRange,
    Stage,
    analyze,
    input_bounds,
    node_stages,
    round_to_code,
    signed_bits,
)

__all__ = ["SaturationWarning", "WeightCodeWarning", "PrecisionError", "accumulator_type", "infer_precision",
           "check_precision", "weight_code_warnings", "ZEROED_SHARE", "SATURATED_SHARE"]

#: Accumulator fields of each layer op, in the order their stages appear.
ACCUMULATORS = {Dense: ("accum_type",), KANLayer: ("accum_type",), LowRankDense: ("accum_v_type", "accum_type"),
                Conv: ("accum_type",), ScaleShift: ("accum_type",)}
#: Stage tensor suffix of each accumulator field (see ``intervals.node_stages``).
_STAGE_OF = {"accum_type": "accum", "accum_v_type": "accum_v"}


class PrecisionError(IRError):
    """The graph cannot be given accumulator types (e.g. a layer whose weights have no type)."""


@dataclass(frozen=True)
class SaturationWarning:
    """A cast where values can leave the type's range for some input inside the declared range.

    ``where`` is ``'accumulator'``, ``'intermediate'`` (LowRankDense's ``mid_type``) or ``'output'``;
    ``interval`` is the range of the exact values that reach the cast.
    """

    node: str
    tensor: str
    type: FixedType
    interval: tuple[float, float]
    where: str
    message: str

    def __str__(self) -> str:
        return self.message


def accumulator_type(exact: Bounds) -> FixedType:
    """Narrowest signed type at the exact sum's frac that holds every code in ``exact``.

    WRAP and TRN because neither can act: the sum already has the accumulator's frac, and no value
    leaves the range; WRAP is also what costs nothing in hardware.
    """
    width = max(signed_bits(v) for v in (*exact.lo.ravel(), *exact.hi.ravel()))
    return FixedType(width, width - exact.frac, True, Rounding.TRN, Overflow.WRAP)


def _is_fixed_layer(g: Graph, n: Node) -> bool:
    return type(n) in ACCUMULATORS and not g.tensors[n.input].is_float


def _size_accumulators(g: Graph, n: Node, env: dict[str, Bounds], overwrite: bool) -> Node:
    fields = [f for f in ACCUMULATORS[type(n)] if overwrite or getattr(n, f) is None]
    if not fields:
        return n
    untyped = dataclasses.replace(n, **{f: None for f in fields})
    try:
        stages = {s.tensor: s for s in node_stages(g, untyped, env)}
    except IRError as e:
        raise PrecisionError(f"cannot size the accumulators: {e}") from None
    # An inferred accumulator never overflows, so its stage result equals the exact sum the next
    # stage was computed from: sizing all fields from one untyped pass is consistent.
    return dataclasses.replace(n, **{f: accumulator_type(stages[f"{n.name}.{_STAGE_OF[f]}"].exact) for f in fields})


def infer_precision(g: Graph, input_range: Optional[InputRange] = None, overwrite: bool = False) -> Graph:
    """Give every fixed-point Dense, LowRankDense, KANLayer, Conv and ScaleShift the narrowest accumulators that
    cannot overflow (a Conv's is sized over all its output positions: one accumulator type serves every window).

    Guarantees on the returned graph: every such layer has ``accum_type`` (and LowRankDense ``accum_v_type``)
    set; inferred ones are signed, TRN, WRAP, with frac(x) + frac(W) fractional bits, and no input inside
    the range makes them overflow. User-given accumulators are kept unless ``overwrite``; output and
    intermediate types are never changed. ``metadata['precision']`` holds, per fixed-point node, the
    accumulator types with the intervals they hold and whether the output type can saturate.
    """
    out = g.copy()
    env = input_bounds(out, input_range)
    summary = {}
    for i, n in enumerate(out.nodes):
        if _is_fixed_layer(out, n):
            n = out.nodes[i] = _size_accumulators(out, n, env, overwrite)
        stages = node_stages(out, n, env)
        env[n.output] = stages[-1].result
        if stages[-1].dtype is not None:
            summary[n.name] = _summary(n, stages)
    out.metadata["precision"] = summary
    return out


def _json_interval(b: Bounds) -> list[Optional[float]]:
    lo, hi = b.span()
    return [lo if math.isfinite(lo) else None, hi if math.isfinite(hi) else None]


def _summary(n: Node, stages: list[Stage]) -> dict:
    row: dict = {"op": n.OP}
    for s in stages:
        key = {"accumulator": s.tensor.rsplit(".", 1)[-1], "intermediate": "mid", "output": "output"}[s.where]
        row[f"{key}_type"] = s.dtype.to_short() if s.dtype is not None else None
        row[f"{key}_interval"] = _json_interval(s.exact)
        row[f"{key}_can_{'overflow' if s.where == 'accumulator' else 'saturate'}"] = s.overflow
    return row


def check_precision(g: Graph, input_range: Optional[InputRange] = None
                    ) -> list[Union[SaturationWarning, "WeightCodeWarning"]]:
    """Every typed cast where saturation or wrap-around can happen for inputs inside the range, then every layer
    whose weights lost too much when they became codes (:func:`weight_code_warnings`).

    Accumulators left unset (to be inferred) are not reported. An empty list proves that no type in
    the graph is too narrow for the values that reach it.
    """
    if input_range is None:
        input_range = g.metadata.get("input_range")
    where_from = (f"inputs in {input_range}" if input_range is not None
                  else "inputs anywhere in their types' ranges")
    casts = [_warning(g, s, where_from) for s in analyze(g, input_range).stages if s.overflow and s.dtype is not None]
    return casts + weight_code_warnings(g)


# -- weights that quantization zeroed or saturated ------------------------------------------------------------

#: Warn when more than this share of a layer's non-zero weights become 0. Gaussian weights under a width-only
#: type (integer bits fitted to the layer's extremes) lose 1-2 % at 8 bits, 23-38 % at 4 bits and 37-68 % at
#: 3 bits (1,024 and 65,536 weights; tests/test_precision.py measures it): past one half, the LSB is coarser than
#: most weights, which is what an explicit type with too many integer bits or one outlier weight does.
ZEROED_SHARE = 0.5
#: Warn when more than this share of a layer's weights saturate: clipping a few outliers is what quantization-aware
#: training does on purpose, clipping more than 1 % cuts into the distribution itself.
SATURATED_SHARE = 0.01


@dataclass(frozen=True)
class WeightCodeWarning:
    """A weight array that its type turned into mostly zeros, or saturated in part; ``counts`` is its entry of
    ``metadata[WEIGHT_CODES_KEY]`` (:func:`bitforge.toolchain.weight_codes.weight_code_counts`)."""

    node: str
    field: str
    counts: dict
    message: str

    def __str__(self) -> str:
        return self.message


def weight_code_warnings(g: Graph) -> list[WeightCodeWarning]:
    """One warning per weight array in ``metadata[WEIGHT_CODES_KEY]`` past :data:`ZEROED_SHARE` zeroed or
    :data:`SATURATED_SHARE` saturated, with the counts."""
    out = []
    for key, c in (g.metadata.get(WEIGHT_CODES_KEY) or {}).items():
        node, _, field = key.rpartition(".")
        try:
            what = g.node(node).describe()
        except IRError:
            what = f"node '{node}'"
        t = c["type"]
        if c["nonzero"] and c["zeroed"] > ZEROED_SHARE * c["nonzero"]:
            lsb = 2.0 ** -fixed.parse_type(t).frac
            out.append(WeightCodeWarning(node, field, c, (
                f"{what}: quantizing '{field}' to {t} turns {c['zeroed']:,} of its {c['nonzero']:,} non-zero weights "
                f"({c['zeroed'] / c['nonzero']:.0%}) into 0: the type's LSB {lsb:g} is coarser than most weights "
                f"(largest |weight| {c['max_abs']:g}); give it fewer integer bits or more width, or remove the "
                "outlier weights that set a width-only type's range")))
        if c["values"] and c["saturated"] > SATURATED_SHARE * c["values"]:
            out.append(WeightCodeWarning(node, field, c, (
                f"{what}: quantizing '{field}' to {t} saturates {c['saturated']:,} of its {c['values']:,} weights "
                f"({c['saturated'] / c['values']:.0%}; largest |weight| {c['max_abs']:g}); give the type more "
                "integer bits")))
    return out


_CONSEQUENCE = {Overflow.WRAP: "wrap around (silently wrong results)", Overflow.SAT: "saturate",
                Overflow.SAT_SYM: "saturate", Overflow.SAT_ZERO: "overflow to zero"}


def _warning(g: Graph, s: Stage, where_from: str) -> SaturationWarning:
    t = s.dtype
    lo, hi = s.exact.span()
    fix = ("run infer_precision(overwrite=True)" if s.where == "accumulator" else "narrow the input range")
    message = (f"{g.node(s.node).describe()}: {s.where} '{s.tensor}' of type {t.to_short()} holds "
               f"[{t.min_value:g}, {t.max_value:g}] but its values reach [{lo:g}, {hi:g}] for {where_from}: "
               f"it can {_CONSEQUENCE[t.overflow]}; widen it to {_wide_enough(s).to_short()} (same LSB) or {fix}")
    return SaturationWarning(s.node, s.tensor, t, (lo, hi), s.where, message)


def _wide_enough(s: Stage) -> FixedType:
    """The type with ``s.dtype``'s LSB and modes, widened to hold every value reaching the cast."""
    t = s.dtype
    if s.exact.is_float:  # a quantizer's input: float bounds, possibly huge after unbounded float layers
        lo, hi = (Fraction(min(max(v, -2.0 ** 120), 2.0 ** 120)) for v in s.exact.span())
    else:
        lo, hi = s.exact.exact_span()
    codes = [round_to_code(v, t) for v in (lo, hi)]
    signed = t.signed or codes[0] < 0
    width = max(signed_bits(c) for c in codes) if signed else max(int(c).bit_length() for c in codes)
    width = max(width, 1)
    return FixedType(width, width - t.frac, signed, t.rounding, t.overflow)
