"""Which rows are worth looking at: Pareto fronts over two metrics, dominance, and the best row per constraint.

Every comparison goes through the metric's goal in :data:`.model.METRICS` ("min": lower is better, e.g. error,
LUT, latency; "max": higher is better, e.g. Fmax, accuracy), so a front of LUT against Fmax keeps the designs that
buy clock speed with area, and a front of LUT against error keeps those that buy accuracy with area. A metric a
row does not have (``None``, or a NaN a tool wrote) takes no part: such a row is on no front and wins no
constraint, because nothing can be said about where it would sit. The report (``report``) draws and lists what
these functions return; the driver's early stop uses :func:`dominates` to skip place and route for designs that
synthesis already shows another point beats.
"""
from __future__ import annotations

import math
import operator
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

from .model import METRICS, Constraint, Row, SweepError, stage_index

__all__ = ["FITTING", "OPS", "value", "dominates", "pareto_front", "eligible", "best"]

#: Statuses whose design is known to fit its target: the flow got past synthesis without a does-not-fit.
#: "timing-not-met" placed and routed (only the requested clock was missed); "dominated" fit after synthesis and
#: had place and route skipped by the early stop.
FITTING = ("ok", "timing-not-met", "dominated")

#: The comparison operators a ``where`` bound may use (``model.Constraint``).
OPS = {"<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt, "==": operator.eq}


def _metric(name: str, what: str):
    try:
        return METRICS[name]
    except KeyError:
        raise SweepError(f"{what}: unknown metric {name!r}; expected one of {', '.join(METRICS)}. "
                         "Fix the name in the sweep spec (`metrics`, `pareto` or `best`).") from None


def value(row: Union[Row, Mapping[str, Any]], name: str) -> Optional[float]:
    """``row``'s metric ``name`` as a float, or None where the row has none (missing, None, NaN or not a
    number). ``row`` is a :class:`Row` or a metrics dict."""
    metrics = row.metrics if isinstance(row, Row) else row
    v = metrics.get(name)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return None if math.isnan(v) else v


def _cost(row, name: str) -> Optional[float]:
    """The metric turned into a cost (lower is better whatever the goal), or None."""
    v = value(row, name)
    if v is None:
        return None
    return -v if METRICS[name].goal == "max" else v


def dominates(a: Union[Row, Mapping[str, Any]], b: Union[Row, Mapping[str, Any]], metrics: Sequence[str]) -> bool:
    """True when ``a`` is at least as good as ``b`` in every metric of ``metrics`` (each by its goal) and strictly
    better in at least one. A metric either row lacks makes the answer False: a missing value proves nothing.
    ``a``/``b``: rows or metrics dicts. Status is not looked at: the caller decides which rows may compete (the
    early stop compares ok synthesis rows)."""
    if not metrics:
        return False
    better = False
    for name in metrics:
        _metric(name, "dominance")
        ca, cb = _cost(a, name), _cost(b, name)
        if ca is None or cb is None or ca > cb:
            return False
        better = better or ca < cb
    return better


def pareto_front(rows: Iterable[Row], x: str, y: str) -> list[Row]:
    """The ok rows with both metrics that no other such row dominates in (``x``, ``y``), each metric by its goal.
    Rows with the same (x, y) do not dominate each other: all of them are on the front. Ordered by x ascending
    (then y ascending, then point index), which is also the order of the front's staircase in the plot."""
    for name in (x, y):
        _metric(name, f"Pareto pair ({x}, {y})")
    cands = [r for r in rows if r.status == "ok" and value(r, x) is not None and value(r, y) is not None]
    # Sort by cost: walking in increasing x-cost, a row is on the front when its y-cost beats every row before it
    # (those are at least as good in x), or when it ties the last kept row exactly (the same point twice).
    cands.sort(key=lambda r: (_cost(r, x), _cost(r, y), r.index))
    front: list[Row] = []
    best_y = math.inf
    for r in cands:
        cx, cy = _cost(r, x), _cost(r, y)
        if cy < best_y or (front and (cx, cy) == (_cost(front[-1], x), _cost(front[-1], y))):
            front.append(r)
            best_y = min(best_y, cy)
    return sorted(front, key=lambda r: (value(r, x), value(r, y), r.index))


def _target_of(row: Row, base_target: Optional[str]) -> Optional[str]:
    t = row.params.get("target", base_target)
    return None if t is None else str(t)


def eligible(row: Row, constraint: Constraint, base_target: Optional[str] = None) -> bool:
    """Whether ``row`` may answer ``constraint``: status ok (or, with a ``fits`` bound, any status in
    :data:`FITTING` with synthesis done on that target) and every ``where`` bound met by a value it has.
    ``base_target``: the spec's ``base.target``, the target of rows without a target axis."""
    fits = [b for b in constraint.where if b[0] == "fits"]
    if fits:
        if row.status not in FITTING or stage_index(row.stage) < stage_index("synth"):
            return False
    elif row.status != "ok":
        return False
    for name, op, bound in constraint.where:
        if name == "fits":
            if op != "==":
                raise SweepError(f"best {constraint.label!r}: `fits` takes a target name (fits: ice40-up5k), not "
                                 f"the comparison {op!r}. Write `where: {{fits: TARGET}}` in the sweep spec.")
            if _target_of(row, base_target) != str(bound):
                return False
            continue
        _metric(name, f"best {constraint.label!r}, where")
        if op not in OPS:
            raise SweepError(f"best {constraint.label!r}: bound {name} {op} {bound!r} has an unknown comparison; "
                             f"expected one of {', '.join(OPS)}. Fix `where` in the sweep spec.")
        if isinstance(bound, bool) or not isinstance(bound, (int, float)):
            raise SweepError(f"best {constraint.label!r}: bound {name} {op} {bound!r} is not a number. "
                             f"Write it as `where: {{{name}: \"{op} 200\"}}` in the sweep spec.")
        v = value(row, name)
        if v is None or not OPS[op](v, bound):
            return False
    return True


def best(rows: Iterable[Row], constraint: Constraint, base_target: Optional[str] = None) -> Optional[Row]:
    """The row with the best ``constraint.best`` metric (by its goal) among the :func:`eligible` rows that have
    it; the earliest point wins a tie. None when no row qualifies. ``base_target``: the spec's ``base.target``
    (for ``fits`` when the target is not an axis)."""
    _metric(constraint.best, f"best {constraint.label!r}")
    found = [r for r in rows if value(r, constraint.best) is not None and eligible(r, constraint, base_target)]
    return min(found, key=lambda r: (_cost(r, constraint.best), r.index), default=None)
