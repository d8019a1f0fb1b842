"""NeUQI: the exact zero-point solver against brute force, and the quantizer against RTN on its own objective."""
from __future__ import annotations

import pytest
import torch
from bitforge.runtime.formats import uniform as fmt
from bitforge.toolchain.compress import api
from bitforge.toolchain.compress.neuqi import (
    NeuqiConfig,
    exact_zero,
    lloyd_zero,
    neuqi,
    quantize_neuqi,
    weighted_loss,
)
from bitforge.toolchain.compress.uniform import quantize_uniform
from bitforge.toolchain.errors import BitforgeError


def _loss_at(x: torch.Tensor, h: torch.Tensor, q: int, z: torch.Tensor) -> torch.Tensor:
    """The objective evaluated directly (float64): sum h (clamp(round(x - z), 0, q) + z - x)^2 for z [..., G]."""
    x, h = x.double(), h.double()
    c = torch.clamp(torch.round(x - z.unsqueeze(-1)), 0, q)
    return (h * (c + z.unsqueeze(-1) - x) ** 2).sum(-1)


def _brute_force(x: torch.Tensor, h: torch.Tensor, q: int, points: int = 20001) -> torch.Tensor:
    """Minimum over a fine z grid covering every z where the loss is not monotone."""
    lo, hi = x.double().amin(-1, keepdim=True) - q - 1, x.double().amax(-1, keepdim=True) + 1
    zs = lo + (hi - lo) * torch.linspace(0, 1, points, dtype=torch.float64)          # [G, points]
    c = torch.clamp(torch.round(x.double().unsqueeze(1) - zs.unsqueeze(-1)), 0, q)
    return (h.double().unsqueeze(1) * (c + zs.unsqueeze(-1) - x.double().unsqueeze(1)) ** 2).sum(-1).amin(-1)


@pytest.mark.parametrize("q", [3, 7, 15])
@pytest.mark.parametrize("spread", [0.5, 1.0, 4.0, 12.0])
def test_exact_zero_matches_brute_force(q, spread):
    """``spread`` is the data range in grid steps relative to q: < 1 leaves slack, 12 forces heavy clipping (and
    windows far wider than the initial two levels)."""
    gen = torch.Generator().manual_seed(q * 100 + int(spread * 10))
    G, n = 12, 9
    x = torch.randn(G, n, generator=gen)
    x = x / (x.amax(-1, keepdim=True) - x.amin(-1, keepdim=True)) * q * spread + 50 * torch.randn(G, 1, generator=gen)
    h = torch.rand(G, n, generator=gen) ** 3
    h[0, :4] = 0.0                                            # dead inputs weigh nothing
    loss, z = exact_zero(x, h, q)
    direct = _loss_at(x, h, q, z.double())
    bf = _brute_force(x, h, q)
    assert torch.allclose(loss.double(), direct, rtol=1e-4, atol=1e-6)
    # Exact: never above the grid's minimum, and the grid (step ~1e-3) gets within a hair of it.
    assert (direct <= bf * (1 + 1e-5) + 1e-9).all()
    assert (direct >= bf - 1e-3 * (bf + h.sum(-1).double())).all()


def test_exact_zero_beats_lloyd_local_minima():
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(400, 32, generator=gen)
    x = w / (w.amax(-1, keepdim=True) - w.amin(-1, keepdim=True)) * 3       # the min-max scale at 2 bits
    h = torch.rand(400, 32, generator=gen) + 0.05
    exact, _ = exact_zero(x, h, 3)
    local, _ = lloyd_zero(x.clone(), h, 3, iters=4)
    assert (exact <= local * (1 + 1e-5) + 1e-6).all()
    assert (local / exact).mean() > 1.03                        # Lloyd stalls in worse local minima


def _heavy_tailed(out: int, n_in: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng():          # StudentT samples from the global generator: seed it, then restore it
        torch.manual_seed(seed)
        W = torch.distributions.StudentT(2.5).sample((out, n_in)) * 0.02
    W[torch.rand(out, n_in, generator=gen) < 0.01] *= 8.0          # sparse large outliers
    return W


@pytest.mark.parametrize("bits,group", [(2, 32), (3, 64), (4, None), (8, 32)])
def test_neuqi_never_worse_than_rtn_on_any_row(bits, group):
    W = _heavy_tailed(24, 128, bits)
    h = torch.rand(128, generator=torch.Generator().manual_seed(1)) ** 2 + 0.01
    ours = quantize_neuqi(W, h, bits, group)
    rtn = quantize_uniform(W, bits, group)
    l_ours = weighted_loss(W, ours.dequantize(), h, group).sum(-1)
    l_rtn = weighted_loss(W, rtn.dequantize(), h, group).sum(-1)
    assert (l_ours <= l_rtn).all()
    assert l_ours.sum() < l_rtn.sum()


def test_neuqi_is_much_better_than_rtn_at_two_bits_on_heavy_tails():
    W = _heavy_tailed(48, 256, 7)
    h = torch.rand(256, generator=torch.Generator().manual_seed(2)) ** 2 + 0.01
    for group in (32, 64):
        ours = weighted_loss(W, quantize_neuqi(W, h, 2, group).dequantize(), h, group).sum()
        rtn = weighted_loss(W, quantize_uniform(W, 2, group).dequantize(), h, group).sum()
        # Against the standard RTN grid (integer zero-point, 0 on the grid): measured 0.64 at g64.
        assert ours < 0.75 * rtn, (group, float(ours / rtn))


def test_default_search_is_close_to_the_exhaustive_one():
    """The default scores most scales with Lloyd steps; the paper's search solves z exactly everywhere (a coarser
    grid here keeps the exhaustive run short)."""
    W = _heavy_tailed(8, 128, 11)
    h = torch.rand(128, generator=torch.Generator().manual_seed(4)) + 0.1
    grid = {"T": 512, "coarse": 16, "refine": 8}

    def loss(cfg: NeuqiConfig) -> torch.Tensor:
        return weighted_loss(W, quantize_neuqi(W, h, 3, 64, cfg=cfg).dequantize(), h, 64).sum()

    assert loss(NeuqiConfig(**grid)) <= 1.1 * loss(NeuqiConfig(**grid, exhaustive=True))


def test_importance_moves_the_error_to_unimportant_columns():
    W = _heavy_tailed(32, 64, 5)
    h = torch.full((64,), 1e-3)
    h[:8] = 1.0
    q = quantize_neuqi(W, h, 2, None)
    err = (q.dequantize() - W) ** 2
    rtn_err = (quantize_uniform(W, 2, None).dequantize() - W) ** 2
    assert err[:, :8].sum() < 0.5 * rtn_err[:, :8].sum()


def test_layer_contract_and_dead_groups():
    W = _heavy_tailed(16, 128, 9)
    W[3] = 0.0                                                   # a zero row and a constant group decode exactly
    W[4, 64:] = -0.25
    stats = api.LayerStats(torch.diag(torch.cat([torch.zeros(64), torch.rand(64) + 0.5])).double(), 1, "mlp.up")
    layer = neuqi(W, stats, api.CompressConfig("neuqi", bits=3, group=64))
    t = layer.tensors
    codes = fmt.unpack_codes(t["codes"], 3, (16, 128))
    assert torch.equal(layer.weight_hat, fmt.dequantize(codes, t["scale"], t["zero"], 64))
    assert t["scale"].dtype == torch.float16 and t["zero"].dtype == torch.float16
    assert layer.meta["method"] == "neuqi" and layer.meta["zero_point"] == "float16" and layer.meta["rank"] == 0
    assert layer.meta["packing"] == fmt.LAYOUT and layer.bpw == pytest.approx(3 + 32 / 64)
    # The dead half (h = 0) still gets a sensible grid: no worse than RTN's plain error there.
    dead_err = ((layer.weight_hat - W)[:, :64] ** 2).sum()
    assert dead_err <= 1.5 * ((quantize_uniform(W, 3, 64).dequantize() - W)[:, :64] ** 2).sum()
    assert torch.equal(layer.weight_hat[3], W[3]) and torch.allclose(layer.weight_hat[4, 64:], W[4, 64:], atol=1e-4)
    assert api.METHODS["neuqi"] is neuqi


@pytest.mark.parametrize("bits", [1, 9])
def test_bad_bits_are_refused(bits):
    with pytest.raises(BitforgeError, match="neuqi.*2..8"):
        quantize_neuqi(torch.randn(4, 64), torch.ones(64), bits, 32)


def test_importance_of_the_wrong_length_is_refused():
    with pytest.raises(BitforgeError, match="importance vector must hold 64"):
        quantize_neuqi(torch.randn(4, 64), torch.ones(32), 3, 32)


def test_bad_group_is_refused():
    with pytest.raises(BitforgeError, match="does not divide"):
        neuqi(torch.randn(4, 96), api.LayerStats.identity(96, "k_proj"), api.CompressConfig("neuqi", bits=3, group=64))


def test_search_options_reach_the_search_and_unknown_ones_are_refused():
    W = _heavy_tailed(16, 128, 3)
    d = (torch.rand(128, generator=torch.Generator().manual_seed(2)) + 0.1).double()
    stats_full = api.LayerStats(torch.diag(d), 1, "mlp.up")
    h = stats_full.diag
    for opts in ({"exact_top": 2}, {"starts": 1, "lloyd_iters": 3}, {"exhaustive": True, "coarse": 8}):
        via_option = neuqi(W, stats_full, api.CompressConfig("neuqi", bits=3, group=64, options=opts)).weight_hat
        direct = quantize_neuqi(W, h, 3, 64, cfg=NeuqiConfig(**opts)).dequantize()
        assert torch.equal(via_option, direct), opts
    with pytest.raises(BitforgeError, match="unknown --option exact_tops; known: T, coarse"):
        neuqi(W, stats_full, api.CompressConfig("neuqi", bits=3, group=64, options={"exact_tops": 1}))
    with pytest.raises(BitforgeError, match="exact_top=1.5.*expected int"):
        neuqi(W, stats_full, api.CompressConfig("neuqi", bits=3, group=64, options={"exact_top": 1.5}))
    with pytest.raises(BitforgeError, match="starts >= 1"):
        neuqi(W, stats_full, api.CompressConfig("neuqi", bits=3, group=64, options={"starts": 0}))
    with pytest.raises(BitforgeError, match="rtn: unknown --option exact_top; known: symmetric"):
        api.METHODS["rtn"](W, stats_full, api.CompressConfig("rtn", bits=3, group=64, options={"exact_top": 0}))


def test_default_search_is_close_to_exact_solves_on_the_coarse_grid():
    """The default ranks coarse scales with two Lloyd starts and solves z exactly once per group; solving it exactly
    at the 3 best coarse points as well (``exact_top=3``) costs about twice the time."""
    W = _heavy_tailed(8, 128, 11)
    h = torch.rand(128, generator=torch.Generator().manual_seed(4)) + 0.1

    def loss(cfg: NeuqiConfig) -> torch.Tensor:
        return weighted_loss(W, quantize_neuqi(W, h, 3, 64, cfg=cfg).dequantize(), h, 64).sum()

    rtn = weighted_loss(W, quantize_uniform(W, 3, 64).dequantize(), h, 64).sum()
    assert loss(NeuqiConfig()) <= min(1.03 * loss(NeuqiConfig(exact_top=3)), rtn)


def test_lloyd_score_is_the_loss_of_its_codes_at_its_offset():
    """lloyd_zero returns the loss of its last codes at their best z (no final rounding pass): an upper bound of
    the objective at that z, and never below the exact minimum."""
    gen = torch.Generator().manual_seed(5)
    w = torch.randn(300, 32, generator=gen)
    x = w / (w.amax(-1, keepdim=True) - w.amin(-1, keepdim=True)) * 7 * 1.3 + 40.0   # clipped, offset far from 0
    h = torch.rand(300, 32, generator=gen) + 0.05
    for iters in (1, 2, 4):
        loss, z = lloyd_zero(x, h, 7, iters=iters)
        direct = _loss_at(x, h, 7, z.double())
        assert (direct <= loss.double() * (1 + 1e-4) + 1e-5).all(), iters
    exact, _ = exact_zero(x, h, 7)
    assert (loss >= exact * (1 - 1e-4) - 1e-5).all()


def test_lloyd_starts_keep_the_best_of_shifted_grids():
    """starts = K: K Lloyd runs from the centred grid shifted by (j + 1/2)/K - 1/2 steps, the best kept; on 2-bit
    heavy-tailed groups two starts find lower minima than the single centred start."""
    W = _heavy_tailed(64, 64, 2)
    x = W / (W.amax(-1, keepdim=True) - W.amin(-1, keepdim=True)) * 3 * 1.25
    h = torch.rand(64, 64, generator=torch.Generator().manual_seed(6)) + 0.05
    two, z2 = lloyd_zero(x, h, 3, starts=2)
    centre = 0.5 * (x.amin(-1) + x.amax(-1) - 3)
    each = [lloyd_zero(x, h, 3, centre + shift) for shift in (-0.25, 0.25)]
    assert torch.equal(two, torch.minimum(each[0][0], each[1][0]))
    one, _ = lloyd_zero(x, h, 3)
    assert two.sum() < 0.9 * one.sum()          # 0.82 here


def test_neuqi_asks_the_driver_for_the_diagonal_only():
    """NeUQI reads diag(E[x x^T]) only; the full float64 x x^T would more than double its calibration time."""
    assert getattr(api.METHODS["neuqi"], "statistics", "full") == "diag"
