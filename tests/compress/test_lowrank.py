"""Quantization + low-rank correction: QERA (k = 0) and SRR (preserve top-k, quantize the residual)."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from bitforge.runtime.formats import uniform as fmt
from bitforge.toolchain.compress import api, checkpoint
from bitforge.toolchain.compress.api import METHODS, CompressConfig, LayerStats
from bitforge.toolchain.compress.lowrank import choose_k, input_scaling, srr_criterion, tail_energy
from bitforge.toolchain.errors import BitforgeError

OUT, IN, RANK = 64, 128, 16


def structured_weight(strong: int, seed: int = 0, out: int = OUT, n_in: int = IN) -> torch.Tensor:
    """Power-law spectrum s_i = i^-1/2 with the top ``strong`` directions 10x larger (random singular vectors)."""
    g = torch.Generator().manual_seed(seed)
    U, _ = torch.linalg.qr(torch.randn(out, out, generator=g))
    V, _ = torch.linalg.qr(torch.randn(n_in, out, generator=g))
    s = torch.arange(1, out + 1, dtype=torch.float32) ** -0.5
    s[:strong] *= 10
    W = (U * s) @ V.T
    return W / W.std()


def calibration(seed: int = 1, n: int = 2048, n_in: int = IN,
                name: str = "blk.0.fc") -> tuple[torch.Tensor, LayerStats]:
    """Correlated inputs with a few dominant channels (x8), as LLM activations have."""
    g = torch.Generator().manual_seed(seed)
    mix = torch.eye(n_in) + 0.5 * torch.randn(n_in, n_in, generator=g) / n_in ** 0.5
    gain = torch.ones(n_in)
    gain[torch.randperm(n_in, generator=g)[: n_in // 16]] = 8.0
    X = ((torch.randn(n, n_in, generator=g) @ mix) * gain).double()
    return X, LayerStats(X.T @ X, n, name)


def output_error(X: torch.Tensor, W: torch.Tensor, W_hat: torch.Tensor) -> float:
    """||X (W - W_hat)^T||^2 per token: what the layer's outputs lose on calibration data."""
    return float(((X @ (W - W_hat).double().T) ** 2).sum()) / X.shape[0]


def run(method: str, W: torch.Tensor, stats: LayerStats, rank: int = RANK, bits: int = 3, **options):
    return METHODS[method](W, stats, CompressConfig(method, bits=bits, group=32, rank=rank, options=options))


@pytest.mark.parametrize("scaling", ["approx", "exact"])
def test_srr_beats_qera_at_equal_rank_and_bits_when_the_weight_has_strong_directions(scaling):
    X, stats = calibration()
    W = structured_weight(strong=4)
    qera, srr = run("qera", W, stats, scaling=scaling), run("srr", W, stats, scaling=scaling)
    assert srr.bpw == pytest.approx(qera.bpw)
    assert srr.meta["k"] > 0
    assert output_error(X, W, srr.weight_hat) < 0.5 * output_error(X, W, qera.weight_hat)


@pytest.mark.parametrize("strong", [0, 2, 8])
def test_srr_never_worse_than_qera_on_power_law_weights(strong):
    X, stats = calibration(seed=strong + 3)
    W = structured_weight(strong, seed=strong)
    qera, srr = run("qera", W, stats), run("srr", W, stats)
    assert output_error(X, W, srr.weight_hat) <= output_error(X, W, qera.weight_hat) * (1 + 1e-9)


@pytest.mark.parametrize("method", ["qera", "srr"])
@pytest.mark.parametrize("kind", ["structured", "white"])
def test_low_rank_correction_beats_plain_rtn(method, kind):
    X, stats = calibration()
    white = torch.randn(OUT, IN, generator=torch.Generator().manual_seed(5))
    W = structured_weight(4) if kind == "structured" else white
    rtn = METHODS["rtn"](W, stats, CompressConfig("rtn", bits=3, group=32))
    assert output_error(X, W, run(method, W, stats).weight_hat) < 0.8 * output_error(X, W, rtn.weight_hat)


@pytest.mark.parametrize("seed", range(3))
def test_k_star_preserves_at_least_the_planted_low_rank_part(seed):
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(OUT, 4, generator=g) @ torch.randn(4, IN, generator=g) + 0.3 * torch.randn(OUT, IN, generator=g)
    c = run("srr", W, LayerStats.identity(IN, "planted"))
    assert 4 <= c.meta["k_star"] <= RANK and c.meta["k"] == c.meta["k_star"]


@pytest.mark.parametrize("seed", range(3))
def test_k_star_is_zero_for_white_noise(seed):
    W = torch.randn(OUT, IN, generator=torch.Generator().manual_seed(seed))
    c = run("srr", W, LayerStats.identity(IN, "white"))
    assert c.meta["k_star"] == 0 and c.meta["k"] == 0


def test_criterion_is_the_product_of_tail_energies_and_ties_go_to_the_smallest_k():
    sv = torch.tensor([4.0, 2.0, 1.0, 1.0])
    rho = tail_energy(sv)
    assert rho.tolist() == pytest.approx([1.0, 6 / 22, 2 / 22, 1 / 22, 0.0])
    crit = srr_criterion(sv, torch.ones(4), rank=2)
    assert crit.tolist() == pytest.approx([1.0 * 0.5, (6 / 22) * 0.75, (2 / 22) * 1.0])
    assert choose_k(torch.tensor([1.0, 0.5, 0.5001, 0.9]), k_tol=0.0) == 1
    assert choose_k(torch.tensor([0.505, 0.5, 0.9]), k_tol=0.02) == 0


def test_guard_keeps_qera_when_the_criterion_misjudges_an_unstructured_weight():
    # White W under a steep exact scaling: W S inherits S's spectrum, so the criterion preserves directions that do
    # not shrink the quantizer's range. The guard compares with k = 0 on the calibration objective.
    g = torch.Generator().manual_seed(0)
    Q, _ = torch.linalg.qr(torch.randn(IN, IN, generator=g, dtype=torch.float64))
    H = (Q * torch.arange(1, IN + 1, dtype=torch.float64) ** -2.0) @ Q.T
    stats = LayerStats(H, 1, "steep")
    W = torch.randn(OUT, IN, generator=g)
    guarded = run("srr", W, stats, scaling="exact")
    unguarded = run("srr", W, stats, scaling="exact", check_k0=False)
    qera = run("qera", W, stats, scaling="exact")
    assert guarded.meta["k_star"] > 0 and guarded.meta["k"] == 0
    assert torch.equal(guarded.weight_hat, qera.weight_hat)
    D = lambda c: (W - c.weight_hat).double()  # noqa: E731
    assert float(torch.trace(D(unguarded) @ H @ D(unguarded).T)) > float(torch.trace(D(qera) @ H @ D(qera).T))


def test_exact_scaling_minimises_the_output_error_for_a_given_quantization():
    # QERA-exact's L R = SVD_r((W - Q) H^1/2) H^-1/2 is the optimum for its Q; the diagonal approximation is not.
    X, stats = calibration()
    W = torch.randn(OUT, IN, generator=torch.Generator().manual_seed(2))
    exact, approx = run("qera", W, stats, scaling="exact", damp=1e-9), run("qera", W, stats, damp=1e-9)
    assert torch.equal(exact.tensors["q.codes"], approx.tensors["q.codes"])
    assert output_error(X, W, exact.weight_hat) < output_error(X, W, approx.weight_hat)


def test_approx_scaling_is_the_rms_of_each_input_channel():
    X, stats = calibration()
    S = input_scaling(stats, IN, "approx", damp=1e-12)
    assert S.root == pytest.approx(torch.sqrt((X ** 2).mean(0)), rel=1e-6)
    A = torch.randn(3, IN, dtype=torch.float64)
    assert torch.allclose(S.unscale(S.scale(A)), A)
    E = input_scaling(stats, IN, "exact", damp=1e-12)
    assert torch.allclose(E.scale(torch.eye(IN, dtype=torch.float64)) @ E.scale(torch.eye(IN, dtype=torch.float64)),
                          stats.hessian, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("method", ["qera", "srr"])
def test_stored_tensors_decode_to_weight_hat_and_bpw_counts_the_factors(method):
    _, stats = calibration()
    W = structured_weight(4)
    c = run(method, W, stats)
    L, R = c.tensors["lr_left"], c.tensors["lr_right"]
    assert L.dtype == R.dtype == torch.float16 and tuple(L.shape) == (OUT, RANK) and tuple(R.shape) == (RANK, IN)
    codes = fmt.unpack_codes(c.tensors["q.codes"], 3, (OUT, IN))
    decoded = fmt.dequantize(codes, c.tensors["q.scale"], c.tensors["q.zero"], 32) + L.float() @ R.float()
    assert torch.allclose(decoded, c.weight_hat, rtol=0, atol=1e-5)
    base = METHODS["rtn"](W, stats, CompressConfig("rtn", bits=3, group=32))
    assert c.bpw == pytest.approx(base.bpw + 16 * RANK * (OUT + IN) / (OUT * IN))
    assert c.meta["rank"] == RANK and c.meta["base"] == "rtn" and c.meta["method"] == method
    assert c.meta["scaling"] == "approx" and "k" in c.meta
    assert torch.equal(checkpoint.decode_layer("fc", c.tensors, c.meta), c.weight_hat)


def test_srr_with_k_zero_is_qera():
    _, stats = calibration()
    W = structured_weight(4)
    assert torch.equal(run("srr", W, stats, k=0).weight_hat, run("qera", W, stats).weight_hat)


def test_residual_goes_through_the_registry_to_any_base(monkeypatch):
    seen = {}

    def exact_base(W, stats, cfg):
        seen.update(method=cfg.method, rank=cfg.rank, options=dict(cfg.options), shape=tuple(W.shape))
        return api.CompressedLayer(W.clone(), {"w": W.half()}, {"method": cfg.method, "bits": cfg.bits, "bpw": 16.0})

    monkeypatch.setitem(METHODS, "test-lossless", exact_base)
    _, stats = calibration()
    W = structured_weight(4)
    c = run("srr", W, stats, base="test-lossless", k=2, extra=1)
    assert seen == {"method": "test-lossless", "rank": 0, "options": {"extra": 1}, "shape": (OUT, IN)}
    assert c.meta["base"] == "test-lossless" and "q.w" in c.tensors
    # A lossless base leaves no error: the reconstruction part of the factors is zero.
    L, R = c.tensors["lr_left"].double(), c.tensors["lr_right"].double()
    assert float((L[:, 2:] @ R[2:]).abs().max()) < 1e-6
    assert torch.allclose(c.weight_hat, W, atol=1e-2)


@pytest.mark.parametrize("method", ["qera", "srr"])
def test_bad_rank_is_refused_naming_the_layer(method):
    _, stats = calibration(name="blk.3.mlp.up")
    W = structured_weight(0)
    with pytest.raises(BitforgeError, match=r"blk\.3\.mlp\.up.*--rank R >= 1"):
        run(method, W, stats, rank=0)
    with pytest.raises(BitforgeError, match=r"blk\.3\.mlp\.up.*--rank 65 exceeds min\(out, in\) = 64"):
        run(method, W, stats, rank=65)


def test_bad_statistics_and_options_are_refused_naming_the_layer():
    W = structured_weight(0)
    empty = LayerStats(torch.zeros(IN, IN, dtype=torch.float64), 0, "blk.1.attn.q")
    with pytest.raises(BitforgeError, match=r"blk\.1\.attn\.q.*0 tokens"):
        run("qera", W, empty)
    zero = replace(empty, n_tokens=10)
    with pytest.raises(BitforgeError, match=r"blk\.1\.attn\.q.*is zero .*singular"):
        run("srr", W, zero)
    wrong = LayerStats.identity(IN + 1, "blk.1.attn.k")
    with pytest.raises(BitforgeError, match=r"blk\.1\.attn\.k.*shape \[128, 128\]"):
        run("qera", W, wrong)
    _, stats = calibration(name="blk.2.o")
    with pytest.raises(BitforgeError, match=r"blk\.2\.o.*base quantizer 'nope' is not registered"):
        run("qera", W, stats, base="nope")
    with pytest.raises(BitforgeError, match=r"blk\.2\.o.*scaling='full'"):
        run("qera", W, stats, scaling="full")
    with pytest.raises(BitforgeError, match=r"blk\.2\.o.*k=17 must lie in 0\.\.16"):
        run("srr", W, stats, k=17)
