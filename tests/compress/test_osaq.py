"""OSAQ: null-space additive outlier suppression before a quantizer."""
from __future__ import annotations

import math

import pytest
import torch

from bitforge.toolchain.compress import checkpoint, osaq
from bitforge.toolchain.compress.api import METHODS, CompressConfig, LayerStats
from bitforge.toolchain.compress.osaq import (DEFAULT_GAMMA, hessian_null_space, output_ridge, softmax_weights,
                                              suppress_outliers, suppression_coefficients)
from bitforge.toolchain.errors import BitforgeError

OUT, IN, RANK_X = 48, 128, 96


def calibration(seed: int = 0, n: int = 1024, name: str = "blk.0.mlp.down") -> tuple[torch.Tensor, LayerStats]:
    """Inputs confined to a random 96-dim subspace of 128 (plus 1e-5 noise): H has a genuine 32-dim near null space."""
    g = torch.Generator().manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn(IN, RANK_X, generator=g))
    gain = torch.linspace(1.0, 0.5, RANK_X)
    X = (torch.randn(n, RANK_X, generator=g) * gain) @ Q.T + 1e-5 * torch.randn(n, IN, generator=g)
    X = X.double()
    return X, LayerStats(X.T @ X, n, name)


def outlier_weight(seed: int = 1) -> torch.Tensor:
    """Gaussian rows with 1% of the entries pushed to +-10 sigma."""
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(OUT, IN, generator=g)
    mask = torch.rand(OUT, IN, generator=g) < 0.01
    return W + mask * torch.randn(OUT, IN, generator=g).sign() * 10


def output_error(X: torch.Tensor, W: torch.Tensor, W_hat: torch.Tensor) -> float:
    return float(((X @ (W - W_hat).double().T) ** 2).sum()) / X.shape[0]


def test_change_lies_in_the_calibration_null_space():
    X, stats = calibration()
    W = outlier_weight()
    sup = suppress_outliers(W, stats, 3, 32, gamma=1e-3)
    assert sup.null.dim == IN - RANK_X
    dW = (sup.weight - W).double()
    assert float(dW.norm()) > 0.1 * float(W.norm())  # a real change ...
    assert float((X @ dW.T).norm()) < 1e-4 * float((X @ W.double().T).norm())  # ... that the outputs do not see


def test_outliers_shrink():
    _, stats = calibration()
    W = outlier_weight()
    sup = suppress_outliers(W, stats, 3, 32, gamma=1e-3)
    assert float(sup.weight.abs().max()) < 0.7 * float(W.abs().max())
    assert float(sup.weight.abs().amax(1).mean()) < 0.8 * float(W.abs().amax(1).mean())


# W3 is the claim. At 2 bits on this synthetic case OSAQ does not beat the standard RTN grid (which
# keeps 0 exact): 1,270 vs 1,251.
@pytest.mark.parametrize("bits", [3])
def test_osaq_rtn_output_error_is_below_rtn(bits):
    X, stats = calibration()
    W = outlier_weight()
    cfg = CompressConfig("rtn", bits=bits, group=32)
    rtn = METHODS["rtn"](W, stats, cfg)
    ours = METHODS["osaq+rtn"](W, stats, CompressConfig("osaq+rtn", bits=bits, group=32))
    assert output_error(X, W, ours.weight_hat) < 0.75 * output_error(X, W, rtn.weight_hat)
    assert ours.bpw == rtn.bpw and ours.tensors.keys() == rtn.tensors.keys()
    assert torch.equal(checkpoint.decode_layer("fc", ours.tensors, ours.meta), ours.weight_hat)


def test_meta_records_the_base_and_the_transform():
    _, stats = calibration()
    c = METHODS["osaq+rtn"](outlier_weight(), stats, CompressConfig("osaq+rtn", bits=3, group=32))
    assert c.meta["method"] == "osaq+rtn" and c.meta["base"] == "rtn"
    assert c.meta["osaq_gamma"] == DEFAULT_GAMMA == 0.25
    assert c.meta["osaq_null_dim"] >= IN - RANK_X and c.meta["osaq_null_energy"] <= c.meta["osaq_gamma"]
    assert (c.meta["osaq_alpha"], c.meta["osaq_beta"], c.meta["osaq_mu"]) == (1.0, 3e-3, 1e-2)
    assert 0 < c.meta["osaq_cg_iterations"] < 200
    custom = METHODS["osaq+rtn"](outlier_weight(), stats, CompressConfig("osaq+rtn", bits=3, group=32,
                                                                          options={"gamma": 0.2, "max_null": 8}))
    assert custom.meta["osaq_gamma"] == 0.2 and custom.meta["osaq_null_dim"] == 8


def test_null_space_takes_the_smallest_eigenvalues_up_to_gamma_of_the_energy():
    lam = torch.tensor([5.0, 0.01, 3.0, 0.02, 1.0, 0.0], dtype=torch.float64)  # total 9.03
    Q, _ = torch.linalg.qr(torch.randn(6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0)))
    H = (Q * lam) @ Q.T
    null = hessian_null_space(H, gamma=0.01)  # 0, 0.01, 0.02 sum to 0.03 <= 0.0903; adding 1.0 would not
    assert null.dim == 3
    assert sorted(null.eigenvalues.tolist()) == pytest.approx([0.0, 0.01, 0.02], abs=1e-12)
    assert torch.allclose(null.basis.T @ null.basis, torch.eye(3, dtype=torch.float64), atol=1e-12)
    assert hessian_null_space(H, gamma=0.01, max_dim=1).eigenvalues.tolist() == pytest.approx([0.0], abs=1e-12)
    assert hessian_null_space(H, gamma=1e-9).dim == 1  # only the exact zero


def test_softmax_weights_are_a_distribution_tempered_by_the_row_max():
    W = torch.tensor([[0.0, -2.0, 1.0, 2.0]])
    s = softmax_weights(W, temperature=0.5)
    assert float(s.sum()) == pytest.approx(1.0)
    assert float(s[0, 3] / s[0, 0]) == pytest.approx(math.e ** 2)  # |w| = max vs 0: e^(1/t)
    assert float(s[0, 1]) == pytest.approx(float(s[0, 3]))


def test_grouped_softmax_weighs_each_groups_own_largest_entry():
    W = torch.tensor([[0.0, 4.0, 0.0, 0.5]])  # group 2's largest entry is 8x smaller than group 1's
    s = softmax_weights(W, temperature=0.5, group=2)
    assert s[0, :2].sum() == pytest.approx(0.5) and s[0, 2:].sum() == pytest.approx(0.5)
    assert float(s[0, 3] / s[0, 2]) == pytest.approx(math.e ** 2)  # tempered by its own group's max
    assert float(s[0, 1] / s[0, 0]) == pytest.approx(math.e ** 2)


def test_conjugate_gradients_match_row_by_row_normal_equations():
    g = torch.Generator().manual_seed(3)
    W = torch.randn(13, 40, generator=g)
    N, _ = torch.linalg.qr(torch.randn(40, 8, generator=g, dtype=torch.float64))
    s = softmax_weights(W, 0.5, group=8)
    ridge = torch.logspace(-4, -1, 8, dtype=torch.float64)
    B, its = suppression_coefficients(W, N, s, ridge)
    assert 0 < its < 200
    for i in range(13):
        A = N.T @ torch.diag(s[i]) @ N + torch.diag(ridge)
        b = torch.linalg.solve(A, -N.T @ (s[i] * W[i].double()))
        assert torch.allclose(B[i], b, rtol=1e-4, atol=1e-5)


def test_the_ridge_prices_each_direction_by_its_output_energy():
    lam = torch.tensor([0.0, 1e-3, 1e-1], dtype=torch.float64)
    null = osaq.NullSpace(torch.eye(3, dtype=torch.float64), lam, 0.25, 0.1, trace=10.0)
    r = output_ridge(null, n_in=100, bits=3, alpha=1.0, beta=0.0, mu=1e-2)
    assert r.tolist() == pytest.approx((3 * 49 * lam / 10.0 + 1e-4).tolist())  # 3 q^2 lambda / tr H + mu / in
    shrunk = output_ridge(null, n_in=100, bits=3, alpha=1.0, beta=0.01, mu=1e-2)
    assert (shrunk - r).tolist() == pytest.approx([3 * 49 * 0.01 / 100] * 3)  # beta tr H / in added to each lambda
    assert output_ridge(null, 100, 2).tolist() < output_ridge(null, 100, 4).tolist()  # finer grids price change more


def test_white_inputs_leave_nothing_to_gain():
    """White inputs (H = I): every direction carries as much output as any other, so the change is priced far above
    what it saves and stays negligible; with gamma below one direction's share there is no null space at all."""
    W = outlier_weight()
    stats = LayerStats.identity(IN, "dense")
    c = METHODS["osaq+rtn"](W, stats, CompressConfig("osaq+rtn", bits=3, group=32))
    sup = suppress_outliers(W, stats, 3, 32)
    assert float((sup.weight - W).norm()) < 0.02 * float(W.norm())
    none = METHODS["osaq+rtn"](W, stats, CompressConfig("osaq+rtn", bits=3, group=32, options={"gamma": 0.5 / IN}))
    assert none.meta["osaq_null_dim"] == 0 and c.meta["osaq_null_dim"] > 0
    assert torch.equal(none.weight_hat, METHODS["rtn"](W, stats, CompressConfig("rtn", bits=3, group=32)).weight_hat)


def test_every_composition_is_registered_and_a_missing_base_is_a_clear_error(monkeypatch):
    for base in ("rtn", "gptq", "neuqi", "neuqi+gptq"):
        assert f"osaq+{base}" in METHODS
    monkeypatch.delitem(METHODS, "gptq", raising=False)
    _, stats = calibration(name="blk.4.attn.v")
    with pytest.raises(BitforgeError, match=r"blk\.4\.attn\.v.*base quantizer 'gptq' is not registered"):
        METHODS["osaq+gptq"](outlier_weight(), stats, CompressConfig("osaq+gptq", bits=3, group=32))


def test_bad_statistics_and_options_are_refused_naming_the_layer():
    W = outlier_weight()
    cfg = CompressConfig("osaq+rtn", bits=3, group=32)
    empty = LayerStats(torch.zeros(IN, IN, dtype=torch.float64), 0, "blk.5.mlp.gate")
    with pytest.raises(BitforgeError, match=r"blk\.5\.mlp\.gate.*0 tokens"):
        METHODS["osaq+rtn"](W, empty, cfg)
    zero = LayerStats(torch.zeros(IN, IN, dtype=torch.float64), 7, "blk.5.mlp.up")
    with pytest.raises(BitforgeError, match=r"blk\.5\.mlp\.up.*is zero .*singular"):
        METHODS["osaq+rtn"](W, zero, cfg)
    nan = LayerStats(torch.full((IN, IN), float("nan"), dtype=torch.float64), 7, "blk.5.o")
    with pytest.raises(BitforgeError, match=r"blk\.5\.o.*non-finite"):
        METHODS["osaq+rtn"](W, nan, cfg)
    _, stats = calibration(name="blk.6.q")
    for opt, msg in [({"gamma": 1.5}, "gamma=1.5"), ({"temperature": 0}, "temperature=0"), ({"mu": -1}, "mu=-1"),
                     ({"max_null": 0}, "max_null=0")]:
        with pytest.raises(BitforgeError, match=rf"blk\.6\.q.*{msg}"):
            METHODS["osaq+rtn"](W, stats, CompressConfig("osaq+rtn", bits=3, group=32, options=opt))


def decaying_inputs(seed: int):
    """Inputs with a power-law spectrum (gains 1/k): no exact null space, and the small eigenvalues estimated from
    a few hundred tokens are biased low, as on a real model. Returns a sampler ``draw(n, seed)``."""
    g = torch.Generator().manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn(IN, IN, generator=g, dtype=torch.float64))
    gain = torch.arange(1, IN + 1, dtype=torch.float64) ** -1.0
    return lambda n, s: (torch.randn(n, IN, generator=torch.Generator().manual_seed(s), dtype=torch.float64)
                         * gain) @ Q.T


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_held_out_output_error_is_below_rtn_where_the_null_space_is_only_approximate(seed):
    """The regression behind the output-priced ridge: with a constant ridge (alpha = 0, the brief's mu1) and the
    first version's gamma = 4^-3 / 16, OSAQ + RTN lost to RTN on SmolLM2's held-out tokens (here it gains little or
    loses: 0.7-1.4x RTN's error, hand check); priced by output energy it wins clearly."""
    draw = decaying_inputs(seed)
    calib, held_out = draw(256, 10 + seed), draw(16384, 99)
    stats = LayerStats(calib.T @ calib, 256, "blk.3.mlp.up")
    W = outlier_weight(seed + 1)
    rtn = METHODS["rtn"](W, stats, CompressConfig("rtn", bits=3, group=32)).weight_hat
    ours = METHODS["osaq+rtn"](W, stats, CompressConfig("osaq+rtn", bits=3, group=32)).weight_hat
    flat = METHODS["osaq+rtn"](W, stats, CompressConfig("osaq+rtn", bits=3, group=32,
                                                        options={"alpha": 0.0, "gamma": 4.0 ** -3 / 16})).weight_hat
    assert output_error(held_out, W, ours) < 0.7 * output_error(held_out, W, rtn)
    assert output_error(held_out, W, ours) < 0.5 * output_error(held_out, W, flat)
