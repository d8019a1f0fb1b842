"""--reuse auto: the chosen reuse factors fit the budget with the folded form's own multiplier count."""
from __future__ import annotations

import numpy as np

from bitforge.toolchain import ir
from bitforge.toolchain.backends.rtl.dense import folded_multipliers
from bitforge.toolchain.backends.rtl.reuse import Budget, choose_reuse
from bitforge.toolchain.fixed import FixedType, parse_type, quantize


def dense_chain(shapes, seed=0):
    rng = np.random.default_rng(seed)
    X, W = parse_type("fixed<16,6,RND_CONV,SAT>"), parse_type("fixed<8,2,RND_CONV,SAT>")
    layers = []
    for i, (n_in, n_out) in enumerate(shapes):
        d = ir.Dense(f"d{i}", ("",), ("",), weight=quantize(rng.normal(size=(n_out, n_in)), W), weight_type=W,
                     accum_type=FixedType(32, 16))
        layers.append((d, ir.TensorSpec(f"t{i}", (n_out,), X)))
    return ir.sequential("chain", ir.TensorSpec("x", (shapes[0][0],), X), layers)


def test_awkward_shape_is_budgeted_with_the_real_multiplier_count():
    g = dense_chain([(5, 5)])
    # 5 -> 5 at R = 4 needs 9 multipliers, not ceil(25 / 4) = 7: the chooser must not pick R = 4 for 8 DSPs.
    assert folded_multipliers(5, 5, 4) > 7
    choice = choose_reuse(g, g.nodes, Budget(dsp=17, lut=0), (16, 8))  # half of 17 DSPs = 8 multipliers
    r = choice.reuse["d0"]
    assert folded_multipliers(5, 5, r) <= 8 and choice.multipliers <= choice.capacity
    assert all(folded_multipliers(5, 5, s) > 8 for s in range(2, r))  # and it is the smallest that fits


def test_jet_like_chain_uses_half_the_dsps_at_the_smallest_ii():
    g = dense_chain([(16, 64), (64, 32), (32, 32), (32, 5)])
    choice = choose_reuse(g, g.nodes, Budget(dsp=156, lut=83_640), (16, 8))
    assert choice.multipliers <= choice.capacity == 78  # DSP_SHARE: the other half is routing headroom
    smaller = choice.ii - 1
    need = sum(folded_multipliers(n.in_features, n.out_features, min(smaller, n.weight.size)) for n in g.nodes)
    assert need > choice.capacity
