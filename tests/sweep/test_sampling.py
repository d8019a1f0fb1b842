"""sweep.sampling: grid order, random draws without replacement, Latin-hypercube stratification, determinism, and
the refusals (n missing, n above the grid, a grid too large), each naming the spec's key."""
from __future__ import annotations

import itertools
from collections import Counter

import pytest

from bitforge.toolchain.sweep.model import Axis, Sampling, SweepError, SweepSpec
from bitforge.toolchain.sweep.sampling import MAX_POINTS, grid_size, sample


def make(sizes: dict[str, int], method: str = "grid", n=None, seed: int = 0) -> SweepSpec:
    """A spec whose axis ``name`` has values name0, name1, ... (the value's index is readable from it)."""
    axes = tuple(Axis(name, tuple(f"{name}{i}" for i in range(m))) for name, m in sizes.items())
    return SweepSpec(kind="learn", base={"task": "t1"}, axes=axes, metrics=("error",), stage="golden",
                     sampling=Sampling(method, n, seed), source="s.yml")


def indices(spec: SweepSpec, point) -> tuple[int, ...]:
    return tuple(spec.axis(name).values.index(v) for name, v in point.params.items())


def test_grid_is_itertools_product_in_axis_order():
    spec = make({"a": 3, "b": 2, "c": 4})
    points = sample(spec)
    expected = list(itertools.product(*(a.values for a in spec.axes)))
    assert [tuple(p.params.values()) for p in points] == expected
    assert [list(p.params) for p in points] == [["a", "b", "c"]] * len(expected)
    assert [p.index for p in points] == list(range(len(expected)))
    assert grid_size(spec) == len(points) == 24


def test_no_axes_is_one_point():
    spec = make({})
    assert grid_size(spec) == 1
    assert [(p.index, p.params) for p in sample(spec)] == [(0, {})]


@pytest.mark.parametrize("method", ["random", "lhs"])
def test_draws_are_reproducible_and_follow_the_seed(method):
    spec = make({"a": 10, "b": 10, "c": 10}, method, n=12, seed=7)
    first = [p.params for p in sample(spec)]
    assert first == [p.params for p in sample(make({"a": 10, "b": 10, "c": 10}, method, n=12, seed=7))]
    other = [p.params for p in sample(make({"a": 10, "b": 10, "c": 10}, method, n=12, seed=8))]
    assert other != first


def test_random_points_are_distinct_grid_points():
    spec = make({"a": 4, "b": 3, "c": 5}, "random", n=20, seed=3)
    points = sample(spec)
    combos = [tuple(p.params.values()) for p in points]
    grid = set(itertools.product(*(a.values for a in spec.axes)))
    assert len(combos) == 20 and len(set(combos)) == 20 and set(combos) <= grid
    assert [p.index for p in points] == list(range(20))


def test_random_with_n_equal_to_the_grid_is_a_permutation_of_it():
    spec = make({"a": 3, "b": 4}, "random", n=12, seed=1)
    combos = [tuple(p.params.values()) for p in sample(spec)]
    grid = list(itertools.product(*(a.values for a in spec.axes)))
    assert sorted(combos) == sorted(grid) and combos != grid


def test_random_draws_from_a_huge_grid_without_listing_it():
    spec = make({f"x{i}": 10 for i in range(12)}, "random", n=5, seed=0)  # 10**12 combinations
    points = sample(spec)
    assert len({tuple(p.params.values()) for p in points}) == 5


@pytest.mark.parametrize("sizes,n", [({"a": 10, "b": 7, "c": 5}, 5), ({"a": 13, "b": 40}, 13),
                                     ({"a": 100, "b": 33, "c": 17}, 16)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lhs_puts_one_point_in_every_stratum_of_every_axis(sizes, n, seed):
    """An axis of m >= n values cut into n strata (index i lies in stratum i * n // m): each gets one point."""
    spec = make(sizes, "lhs", n=n, seed=seed)
    points = sample(spec)
    assert len(points) == n
    for k, (name, m) in enumerate(sizes.items()):
        strata = sorted(indices(spec, p)[k] * n // m for p in points)
        assert strata == list(range(n)), name


def test_lhs_spreads_a_short_axis_evenly():
    """An axis with fewer values than n: each value gets n / m of the points (n a multiple of m here)."""
    spec = make({"short": 4, "long": 40}, "lhs", n=20, seed=5)
    points = sample(spec)
    assert len(points) == 20
    assert Counter(p.params["short"] for p in points) == {f"short{i}": 5 for i in range(4)}


def test_lhs_drops_repeated_points_keeping_the_first():
    spec = make({"a": 2, "b": 3}, "lhs", n=20, seed=4)
    points = sample(spec)
    combos = [tuple(p.params.values()) for p in points]
    assert len(set(combos)) == len(combos) <= 6
    assert [p.index for p in points] == list(range(len(points)))


def message(spec: SweepSpec) -> str:
    with pytest.raises(SweepError) as e:
        sample(spec)
    return str(e.value)


def test_random_refuses_more_points_than_the_grid():
    m = message(make({"a": 3, "b": 2}, "random", n=7))
    assert m.startswith("s.yml: sampling.n:") and "only 6" in m and "method grid" in m


@pytest.mark.parametrize("method", ["random", "lhs"])
def test_random_and_lhs_need_n(method):
    m = message(make({"a": 3}, method))
    assert m.startswith("s.yml: sampling.n: missing") and "add n" in m


@pytest.mark.parametrize("n", [0, -2])
def test_n_must_be_positive(n):
    assert message(make({"a": 3}, "lhs", n=n)).startswith("s.yml: sampling.n: expected a whole number >= 1")


def test_grid_refuses_n():
    m = message(make({"a": 3}, "grid", n=2))
    assert m.startswith("s.yml: sampling.n: grid takes every combination (3 points")


def test_grid_refuses_more_than_the_limit_and_suggests_drawing():
    spec = make({"a": 100, "b": 100, "c": MAX_POINTS // 10_000 + 1})
    m = message(spec)
    assert m.startswith("s.yml: sampling.method: the grid has") and "random or lhs" in m


def test_unknown_method_is_refused():
    assert message(make({"a": 3}, "sobol", n=2)).startswith("s.yml: sampling.method: unknown sampling method")
