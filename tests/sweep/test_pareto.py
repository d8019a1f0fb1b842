"""Pareto fronts, dominance and best-per-constraint on hand-made rows (toolchain/sweep/pareto.py).

The fronts below are worked out by hand from the points drawn in each test's comment; the random test checks the
sorting algorithm against the definition (no other row at least as good in both, better in one) by brute force.
"""
from __future__ import annotations

import itertools
import math
import random

import pytest

from bitforge.toolchain.sweep.model import METRICS, Constraint, Row, SweepError
from bitforge.toolchain.sweep.pareto import best, dominates, eligible, pareto_front


def row(index: int, status: str = "ok", stage: str = "pnr", **metrics) -> Row:
    params = {"target": metrics.pop("target")} if "target" in metrics else {}
    return Row(key=f"k{index}", index=index, params=params, status=status, metrics=metrics, stage=stage)


def indices(rows) -> list[int]:
    return [r.index for r in rows]


def test_front_min_min():
    # error
    #   9 | 0         3
    #   5 |   1   2
    #   2 |         4
    #   1 |             5
    #     +--------------- lut: 1 2 3 4 5 6
    # 2 is beaten by 1 (less lut, same error), 3 by everything, 4 beats 2; front: 0 (lut 1), 1, 4, 5.
    rows = [row(0, lut=1, error=9.0), row(1, lut=2, error=5.0), row(2, lut=4, error=5.0), row(3, lut=5, error=9.0),
            row(4, lut=5, error=2.0), row(5, lut=6, error=1.0)]
    assert indices(pareto_front(rows, "lut", "error")) == [0, 1, 4, 5]


def test_front_min_max_keeps_area_for_speed_trades():
    # lut (min) against fmax (max): more LUT is only worth it for more MHz.
    rows = [row(0, lut=100, fmax_mhz=50.0), row(1, lut=200, fmax_mhz=40.0), row(2, lut=200, fmax_mhz=80.0),
            row(3, lut=300, fmax_mhz=80.0), row(4, lut=400, fmax_mhz=120.0), row(5, lut=90, fmax_mhz=10.0)]
    assert indices(pareto_front(rows, "lut", "fmax_mhz")) == [5, 0, 2, 4]


def test_front_max_x_min_y_ordered_by_x_ascending():
    # accuracy (max) against latency (min).
    rows = [row(0, accuracy=0.90, latency_ns=100.0), row(1, accuracy=0.95, latency_ns=300.0),
            row(2, accuracy=0.80, latency_ns=120.0), row(3, accuracy=0.99, latency_ns=900.0),
            row(4, accuracy=0.70, latency_ns=50.0)]
    assert indices(pareto_front(rows, "accuracy", "latency_ns")) == [4, 0, 1, 3]


def test_front_ties():
    # 1 and 2 are the same point: neither dominates the other, both stay; 3 ties 1 in lut but is worse in error.
    rows = [row(0, lut=5, error=1.0), row(1, lut=2, error=3.0), row(2, lut=2, error=3.0), row(3, lut=2, error=4.0),
            row(4, lut=7, error=1.0)]
    assert indices(pareto_front(rows, "lut", "error")) == [1, 2, 0]


def test_front_excludes_missing_and_not_ok():
    rows = [row(0, lut=1, error=None), row(1, lut=None, error=0.1), row(2, lut=1, error=math.nan),
            row(3, lut=2), row(4, "dominated", lut=1, error=0.1), row(5, "timing-not-met", lut=1, error=0.1),
            row(6, "failed", lut=1, error=0.1), row(7, lut=3, error=0.5), row(8, lut=4, error=0.2)]
    assert indices(pareto_front(rows, "lut", "error")) == [7, 8]
    assert pareto_front([], "lut", "error") == []
    assert pareto_front(rows[:4], "lut", "error") == []


def brute_front(rows, x, y):
    ok = [r for r in rows if r.status == "ok" and r.metrics.get(x) is not None and r.metrics.get(y) is not None]
    sign = {n: (1 if METRICS[n].goal == "min" else -1) for n in (x, y)}

    def beats(a, b):
        ca = [sign[n] * a.metrics[n] for n in (x, y)]
        cb = [sign[n] * b.metrics[n] for n in (x, y)]
        return all(p <= q for p, q in zip(ca, cb)) and ca != cb

    return {r.index for r in ok if not any(beats(o, r) for o in ok)}


@pytest.mark.parametrize("x,y", [("lut", "error"), ("lut", "fmax_mhz"), ("fmax_mhz", "accuracy"),
                                 ("accuracy", "latency_ns")])
def test_front_matches_definition_on_random_rows(x, y):
    rnd = random.Random(f"{x}/{y}")
    for trial in range(30):
        # Values on a small grid, so ties and duplicates are common; some rows miss a metric or are not ok.
        rows = [Row(key=str(i), index=i, params={}, status=rnd.choice(["ok"] * 4 + ["failed", "dominated"]),
                    metrics={x: rnd.choice([None, *range(6)]), y: rnd.choice([None, *range(6)])})
                for i in range(rnd.randint(0, 25))]
        front = pareto_front(rows, x, y)
        assert {r.index for r in front} == brute_front(rows, x, y)
        assert [(r.metrics[x], r.metrics[y], r.index) for r in front] == \
            sorted((r.metrics[x], r.metrics[y], r.index) for r in front)


def test_front_unknown_metric():
    with pytest.raises(SweepError, match=r"unknown metric 'luts'.*pareto"):
        pareto_front([row(0, lut=1, error=1.0)], "luts", "error")


def test_dominates():
    a = {"error": 0.1, "lut": 100, "fmax_mhz": 60.0}
    assert dominates(a, {"error": 0.2, "lut": 100, "fmax_mhz": 60.0}, ["error", "lut", "fmax_mhz"])
    assert dominates(a, {"error": 0.1, "lut": 100, "fmax_mhz": 50.0}, ["error", "lut", "fmax_mhz"])  # max goal
    assert not dominates(a, {"error": 0.1, "lut": 100, "fmax_mhz": 70.0}, ["error", "lut", "fmax_mhz"])
    assert not dominates(a, dict(a), ["error", "lut", "fmax_mhz"])  # equal in all: not strictly better
    assert not dominates(a, {"error": 0.2, "lut": 90}, ["error", "lut"])  # a trade, not a win
    assert not dominates(a, {"error": 0.2, "lut": None}, ["error", "lut"])  # a missing value proves nothing
    assert not dominates({"error": 0.1}, {"error": 0.2, "lut": 5}, ["error", "lut"])
    assert not dominates(a, {"error": 0.2}, [])
    # Rows work as well as metrics dicts, and the status is the caller's business.
    assert dominates(row(0, error=0.1, lut=10), row(1, "dominated", error=0.1, lut=11), ["error", "lut"])
    with pytest.raises(SweepError, match="unknown metric 'area'"):
        dominates(a, a, ["area"])


def test_dominates_is_a_strict_order_on_random_metrics():
    rnd = random.Random(0)
    names = ["error", "lut", "fmax_mhz"]
    pts = [{n: rnd.randint(0, 3) for n in names} for _ in range(40)]
    for p, q in itertools.product(pts, pts):
        assert not (dominates(p, q, names) and dominates(q, p, names))
    for p, q, r in itertools.product(pts[:15], pts[:15], pts[:15]):
        if dominates(p, q, names) and dominates(q, r, names):
            assert dominates(p, r, names)


FITS_UP5K = Constraint("fits ice40-up5k, lowest error", "error", (("fits", "==", "ice40-up5k"),))


def test_best_fits_target_param():
    rows = [row(0, error=0.05, target="ecp5-25f"),                          # best error, other target
            row(1, "does-not-fit", stage="synth", error=0.06, target="ice40-up5k"),
            row(2, "failed", stage="golden", error=0.07, target="ice40-up5k"),
            row(3, error=0.20, target="ice40-up5k"),
            row(4, "timing-not-met", error=0.10, target="ice40-up5k"),     # fits, just slower: counts
            row(5, "dominated", stage="synth", error=0.15, target="ice40-up5k")]
    assert best(rows, FITS_UP5K).index == 4
    assert best(rows[:4], FITS_UP5K).index == 3
    assert best(rows[:3], FITS_UP5K) is None
    # A dominated row fits: it wins when the better ones are gone.
    assert best([rows[3], rows[5]], FITS_UP5K).index == 5


def test_best_fits_base_target_and_needs_synthesis():
    rows = [row(0, error=0.3), row(1, error=0.2), row(2, stage="golden", error=0.1)]
    assert best(rows, FITS_UP5K) is None  # no target known
    assert best(rows, FITS_UP5K, base_target="ecp5-25f") is None
    # Row 2 only ran the golden model: whether it fits is not known, so it cannot answer "fits".
    assert best(rows, FITS_UP5K, base_target="ice40-up5k").index == 1
    # A target axis wins over the base target.
    rows.append(row(3, error=0.05, target="ecp5-25f"))
    assert best(rows, FITS_UP5K, base_target="ice40-up5k").index == 1


def test_best_with_bounds():
    rows = [row(0, lut=500, latency_ns=150.0, error=0.1), row(1, lut=300, latency_ns=250.0, error=0.2),
            row(2, lut=400, latency_ns=199.9, error=0.3), row(3, lut=350, latency_ns=None, error=0.1),
            row(4, "timing-not-met", lut=100, latency_ns=100.0, error=0.1),
            row(5, lut=400, latency_ns=200.0, error=0.05)]
    c = Constraint("latency under 200 ns, fewest LUT", "lut", (("latency_ns", "<", 200),))
    assert best(rows, c).index == 2  # 4 is not ok, 3 has no latency, 5 is at 200, not under
    assert best(rows, Constraint("x", "lut", (("latency_ns", "<=", 200),))).index == 2  # ties 5: earliest wins
    assert best(rows, Constraint("x", "error", (("latency_ns", "<=", 200), ("lut", ">", 400)))).index == 0
    assert best(rows, Constraint("x", "error", (("lut", "==", 400),))).index == 5
    assert best(rows, Constraint("x", "error", (("lut", ">=", 1000),))) is None
    assert best(rows, Constraint("lowest error", "error")).index == 5
    assert best(rows, Constraint("fewest LUT", "lut")).index == 1


def test_best_max_goal_and_ties():
    rows = [row(0, fmax_mhz=80.0), row(1, fmax_mhz=120.0), row(2, fmax_mhz=120.0), row(3, fmax_mhz=None)]
    assert best(rows, Constraint("fastest", "fmax_mhz")).index == 1
    assert best([], Constraint("fastest", "fmax_mhz")) is None


def test_best_bad_constraints():
    rows = [row(0, lut=1, error=0.1, target="ice40-up5k")]
    with pytest.raises(SweepError, match="unknown metric 'errors'"):
        best(rows, Constraint("x", "errors"))
    with pytest.raises(SweepError, match="unknown metric 'luts'"):
        best(rows, Constraint("x", "error", (("luts", "<", 3),)))
    with pytest.raises(SweepError, match="unknown comparison"):
        best(rows, Constraint("x", "error", (("lut", "!=", 3),)))
    with pytest.raises(SweepError, match="not a number"):
        best(rows, Constraint("x", "error", (("lut", "<", "3"),)))
    with pytest.raises(SweepError, match="`fits` takes a target name"):
        best(rows, Constraint("x", "error", (("fits", "<", "ice40-up5k"),)))


def test_eligible_without_fits_wants_ok():
    c = Constraint("x", "error")
    assert eligible(row(0, error=0.1), c)
    assert not eligible(row(0, "timing-not-met", error=0.1), c)
    assert not eligible(row(0, "dominated", error=0.1), c)
