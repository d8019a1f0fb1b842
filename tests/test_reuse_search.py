"""The folded form's searches at scale give what their exhaustive versions give.

``folded_tiling`` visits only the T where ceil(n_in / T) or R // T changes, and ``--reuse auto`` starts its scan
at the first II where every layer's ceil(P / R) multipliers fit: a 40,000-product layer on a part with a handful
of multipliers used to count 10,000 tilings of up to 10,000 steps each.
"""
from __future__ import annotations

import itertools

import pytest

from bitforge.toolchain.backends.rtl.dense import FoldedTiling, folded_multipliers, folded_tiling
from bitforge.toolchain.backends.rtl.reuse import Budget, choose_reuse
from bitforge.toolchain.backends.rtl.stages import FOLDABLE
from test_reuse_auto import dense_chain


def exhaustive_tiling(n_in: int, n_out: int, reuse: int) -> FoldedTiling:
    """bf_dense_folded's tiling() as the module writes it: every T in 1 .. min(R, n_in)."""
    best = None
    for t in range(1, min(reuse, n_in) + 1):
        g = -(-n_out // (reuse // t))
        if best is None or (-(-n_in // t) * g, g) < best:
            best, t0 = (-(-n_in // t) * g, g), t
    s = -(-n_in // t0)
    return FoldedTiling(s=s, g=best[1], t=-(-n_in // s), q=-(-n_out // best[1]))


def test_folded_tiling_is_the_exhaustive_search():
    for n_in, n_out, r in itertools.product(range(1, 33), range(1, 12), range(1, 80)):
        assert folded_tiling(n_in, n_out, r) == exhaustive_tiling(n_in, n_out, r), (n_in, n_out, r)
    for shape in [(784, 64, 672), (784, 64, 16_768), (20_000, 2, 10_000), (1000, 7, 997), (997, 13, 4096)]:
        assert folded_tiling(*shape) == exhaustive_tiling(*shape), shape


def test_a_folded_layer_has_at_least_products_over_reuse_multipliers():
    """The bound the reuse scan skips by: R cycles of the lanes cover every product."""
    for n_in, n_out, r in itertools.product(range(1, 20), range(1, 10), range(1, 130)):
        tiling = folded_tiling(n_in, n_out, r)
        assert tiling.cycles <= r and tiling.lanes * tiling.cycles >= n_in * n_out
        assert folded_multipliers(n_in, n_out, r) >= -(-n_in * n_out // r)


@pytest.mark.parametrize("dsp", [1, 2, 9, 17, 40, 156])
def test_reuse_auto_picks_what_a_scan_from_one_picks(dsp):
    g = dense_chain([(13, 7), (7, 5), (5, 3)])  # awkward shapes: the multiplier count is not monotonic in R
    choice = choose_reuse(g, g.nodes, Budget(dsp=dsp, lut=0), (16, 8))
    products = {n.name: int(n.weight.size) for n in g.nodes}

    def needed(ii):
        return sum(FOLDABLE[n.OP](n, min(ii, products[n.name])) for n in g.nodes)

    most = max(products.values())
    want = next((r for r in range(1, most + 1) if needed(r) <= choice.capacity), most)
    assert choice.ii == want and choice.multipliers == needed(want)
