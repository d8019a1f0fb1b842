"""``--reuse auto``: the smallest reuse factor per layer that fits a target's multiplier budget.

A folded layer with reuse R needs about ceil(P / R) multipliers for its P products (the emitter's own
count, registered with ``stages.emitter(folded_multipliers=...)``, is exact) and accepts a sample every R
cycles, so the design's II is the largest R. We look for the smallest II whose multipliers fit in half of
the DSP blocks: the other half is routing headroom, not waste (see DSP_SHARE). LUT-built multipliers are counted only on parts
with no DSP blocks at all: yosys's synth_ecp5/synth_ice40 map every variable multiply of a folded layer to a
DSP block when the part has them, so a LUT share would only make the design not fit (measured: jet-mlp with
286 folded multipliers on an ECP5-85F asked for 286 MULT18X18D). Each layer then takes R = min(II, P).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ...ir import Graph
from . import conv, dense, elementwise, kan  # noqa: F401  (they register the multiplier counts used here)
from .stages import FOLDABLE, MULTIPLIES

#: Share of the DSP blocks and of the LUTs that folded multipliers may take. DSP blocks sit in a few rows and
#: every multiplier's operands and product must reach them, so a nearly full DSP row congests the fabric around
#: it: nextpnr takes longer and the clock closes lower (docs/rtl.md, "--reuse auto", has the commands that
#: compare 0.5 with about 0.9 on jet-mlp / ECP5-85F). A user who wants the smaller II passes --reuse N.
DSP_SHARE = 0.5
LUT_SHARE = 0.15


@dataclass(frozen=True)
class Budget:
    """What a target offers to multipliers."""

    dsp: int
    lut: int
    dsp_width: int = 18  # operand width one DSP multiplies (MULT18X18D, SB_MAC16: 16)


@dataclass
class ReuseChoice:
    reuse: dict[str, int]
    ii: int
    multipliers: int
    capacity: int
    explanation: str


def lut_multiplier_cost(a_bits: int, b_bits: int) -> int:
    """LUT4s of one LUT-built a x b multiplier (an array multiplier is about a*b/2 LUT4s plus carries)."""
    return max(8, (a_bits * b_bits * 6) // 10)


def choose_reuse(g: Graph, nodes: list, budget: Budget, operand_bits: tuple[int, int]) -> ReuseChoice:
    products = {n.name: MULTIPLIES[n.OP](n) for n in nodes if n.OP in FOLDABLE}
    fixed = sum(MULTIPLIES[n.OP](n) for n in nodes if n.OP in MULTIPLIES and n.OP not in FOLDABLE)
    if not products:
        return ReuseChoice({}, 1, fixed, fixed, "no foldable layers")
    wide = max(operand_bits) > budget.dsp_width
    dsp_mults = math.floor(budget.dsp * DSP_SHARE) // (2 if wide else 1)
    lut_mults = 0 if budget.dsp else math.floor(budget.lut * LUT_SHARE) // lut_multiplier_cost(*operand_bits)
    capacity = max(1, dsp_mults + lut_mults - fixed)  # layers that cannot fold take theirs first

    by_name = {n.name: n for n in nodes}

    def needed(ii: int) -> int:
        # The folded form's own count: ceil(P / R) on friendly shapes, up to 1.5x on awkward ones (padding).
        return sum(FOLDABLE[by_name[name].OP](by_name[name], min(ii, p)) for name, p in products.items())

    # The count is not monotonic in R on awkward shapes, so scan upwards: the first II that fits wins. A folded
    # layer computes its P products in at most R cycles, so it has at least ceil(P / R) multipliers: no II
    # below the first where those bounds fit can fit, and the scan starts there (a 40,000-product layer on a
    # part with 4 multipliers would otherwise count 10,000 tilings).
    most = max(products.values())
    ii = next((r for r in range(_first_possible(list(products.values()), capacity), most + 1)
               if needed(r) <= capacity), most)
    reuse = {name: min(ii, p) for name, p in products.items()}
    used = needed(ii)
    text = (f"{sum(products.values())} products per sample; budget {capacity} multipliers "
            f"({dsp_mults} in DSP blocks, {lut_mults} in LUTs); reuse {ii} -> {used} multipliers, II {ii}")
    return ReuseChoice(reuse, ii, used, capacity, text)


def _first_possible(products: list[int], capacity: int) -> int:
    """The smallest II at which the layers' least multiplier counts, ceil(P / min(II, P)) each, fit the
    capacity (1 if they always do); those bounds only fall as II grows, so a bisection finds it."""
    fits = lambda ii: sum(-(-p // min(ii, p)) for p in products) <= capacity  # noqa: E731
    lo, hi = 1, max(products)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid + 1, hi)
    return lo
