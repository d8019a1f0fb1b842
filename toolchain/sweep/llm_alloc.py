"""Per-layer (bits, group, rank) under a bit budget: a multiple-choice knapsack on the layer-wise proxies.

Each layer picks exactly one candidate; candidate ``i`` of layer ``l`` costs ``c[l][i]`` stored bits (integers: the
checkpoint's bpw times the layer's weights) and adds ``v[l][i]`` to the objective (its proxy loss). The total cost
must stay within ``budget`` bits = ``floor(budget_bpw * total weights)``.

Exact dynamic programming over the cost in units of ``u`` bits: ``f_l[s] = min_i f_{l-1}[s - c_li / u] + v_li``,
one vectorised numpy pass per (layer, candidate). With ``u`` the gcd of all costs the DP is exact; when that would
need more than ``max_steps`` units, ``u`` grows and every cost is rounded *up* to whole units, so the result is
still within budget (each layer gives away less than ``u`` bits: SmolLM2's 210 layers at 200k steps leave at most
0.1 % of the budget unused), and a greedy pass on the true costs then spends what is left on the upgrades with
the best proxy gain per bit. :func:`brute_force` is the reference for tiny cases (the tests).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from .model import SweepError

MAX_STEPS = 200_000


@dataclass(frozen=True)
class Allocation:
    """The chosen candidate index per layer, its total cost (bits) and value, and whether the DP was exact."""

    choice: tuple[int, ...]
    cost: int
    value: float
    exact: bool


def _check(costs: list[list[int]], values: list[list[float]], budget: int) -> None:
    if len(costs) != len(values) or not costs:
        raise SweepError("llm allocation: expected one candidate list per layer (costs and values alike), got "
                         f"{len(costs)} and {len(values)}")
    for l, (c, v) in enumerate(zip(costs, values)):
        if not c or len(c) != len(v):
            raise SweepError(f"llm allocation: layer {l} has {len(c)} costs and {len(v)} values; each layer needs "
                             "at least one candidate")
        if any(int(x) != x or x < 0 for x in c):
            raise SweepError(f"llm allocation: layer {l}: costs must be non-negative integers (bits), got {c}")
    need = sum(min(c) for c in costs)
    if need > budget:
        raise SweepError(f"llm allocation: the budget of {budget:,} bits is below the cheapest allocation "
                         f"({need:,} bits); raise budget_bpw or add cheaper candidates (fewer bits, rank 0)")


def total(costs, values, choice) -> tuple[int, float]:
    return (sum(int(costs[l][i]) for l, i in enumerate(choice)),
            float(sum(values[l][i] for l, i in enumerate(choice))))


def allocate(costs: list[list[int]], values: list[list[float]], budget: int, max_steps: int = MAX_STEPS
             ) -> Allocation:
    """The allocation of least total value with total cost <= ``budget`` (see the module docstring)."""
    _check(costs, values, budget)
    g = 0
    for c in itertools.chain.from_iterable(costs):
        g = math.gcd(g, int(c))
    g = max(g, 1)
    unit = g if budget // g <= max_steps else g * math.ceil(budget / g / max_steps)
    exact = all(int(c) % unit == 0 for c in itertools.chain.from_iterable(costs))
    units = [[-(-int(c) // unit) for c in cl] for cl in costs]
    S = budget // unit
    f = np.zeros(S + 1)
    dtype = np.uint8 if max(len(c) for c in costs) < 255 else np.int32
    choice = np.zeros((len(costs), S + 1), dtype=dtype)
    for l, (ul, vl) in enumerate(zip(units, values)):
        new = np.full(S + 1, np.inf)
        for i, (u, v) in enumerate(zip(ul, vl)):
            if u > S:
                continue
            cand = np.full(S + 1, np.inf)
            cand[u:] = f[:S + 1 - u] + float(v)
            better = cand < new
            new[better] = cand[better]
            choice[l][better] = i
        f = new
    if not np.isfinite(f[S]):
        raise SweepError(f"llm allocation: no allocation fits {budget:,} bits once costs are rounded to units of "
                         f"{unit} bits; raise budget_bpw slightly or raise max_steps")
    picked, s = [0] * len(costs), S
    for l in range(len(costs) - 1, -1, -1):
        i = int(choice[l][s])
        picked[l] = i
        s -= units[l][i]
    picked = fill(costs, values, budget, picked)
    cost, value = total(costs, values, picked)
    return Allocation(tuple(picked), cost, value, exact)


def fill(costs, values, budget: int, picked: list[int]) -> list[int]:
    """Spend the bits the units' rounding left: repeatedly take the single-layer switch with the best value drop
    per extra bit that still fits (a switch that is cheaper and better is taken first)."""
    picked = list(picked)
    left = budget - total(costs, values, picked)[0]
    while True:
        best, best_rate = None, 0.0
        for l, (cl, vl) in enumerate(zip(costs, values)):
            cur = picked[l]
            for i, (c, v) in enumerate(zip(cl, vl)):
                gain, extra = vl[cur] - v, int(c) - int(cl[cur])
                if gain <= 0 or extra > left:
                    continue
                rate = math.inf if extra <= 0 else gain / extra
                if best is None or rate > best_rate:
                    best, best_rate = (l, i, extra), rate
        if best is None:
            return picked
        l, i, extra = best
        picked[l] = i
        left -= extra


def brute_force(costs, values, budget: int) -> Allocation:
    """Every combination (tiny cases only): the reference the DP is tested against."""
    _check(costs, values, budget)
    best = None
    for combo in itertools.product(*[range(len(c)) for c in costs]):
        c, v = total(costs, values, combo)
        if c <= budget and (best is None or v < best.value):
            best = Allocation(tuple(combo), c, v, True)
    return best
