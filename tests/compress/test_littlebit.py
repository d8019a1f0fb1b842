"""LittleBit-2: sign packing, Joint-ITQ, Dual-SVID with and without the latent rotation, residual path, budget."""
from __future__ import annotations

import pytest
import torch

from bitforge.runtime.formats.binary import BinaryLowRankPath, pack_signs, unpack_signs
from bitforge.toolchain.compress import api
from bitforge.toolchain.compress import littlebit as lb
from bitforge.toolchain.errors import BitforgeError
import itertools

OUT, IN = 192, 320


pytestmark = pytest.mark.usefixtures("one_thread")


def coherent_weight(seed: int) -> torch.Tensor:
    """Power-law spectrum with spiky (coherent) singular vectors: the case LittleBit-2's rotation is for."""
    g = torch.Generator().manual_seed(seed)

    def spiky_basis(rows: int, cols: int) -> torch.Tensor:
        sparse = torch.randn(rows, cols, generator=g) * (torch.rand(rows, cols, generator=g) < 0.05)
        Q, _ = torch.linalg.qr(sparse + 1e-3 * torch.randn(rows, cols, generator=g))
        return Q

    spectrum = torch.arange(1, OUT + 1, dtype=torch.float32) ** -0.7
    return (spiky_basis(OUT, OUT) * spectrum) @ spiky_basis(IN, OUT).T


def relative_error(W: torch.Tensor, W_hat: torch.Tensor) -> float:
    return float(torch.linalg.norm(W - W_hat) / torch.linalg.norm(W))


# ---- sign packing ------------------------------------------------------------------------------------------

def test_sign_layout_is_lsb_first_with_one_for_plus():
    signs = torch.tensor([[1, -1, -1, -1, -1, -1, -1, 1, 1]], dtype=torch.float32)
    assert pack_signs(signs).tolist() == [[0x81, 0x01]]


@pytest.mark.parametrize("n", [1, 8, 13, 64])
def test_sign_pack_round_trip(n):
    g = torch.Generator().manual_seed(n)
    signs = torch.where(torch.rand(3, 5, n, generator=g) < 0.5, -1.0, 1.0)
    packed = pack_signs(signs)
    assert packed.dtype == torch.uint8 and packed.shape == (3, 5, -(-n // 8))
    assert torch.equal(unpack_signs(packed, n), signs)


def test_sign_pack_rejects_zeros_and_wrong_lengths():
    with pytest.raises(BitforgeError, match=r"\+1 or -1"):
        pack_signs(torch.tensor([1.0, 0.0, -1.0]))
    with pytest.raises(BitforgeError, match="cannot hold"):
        unpack_signs(torch.zeros(2, 2, dtype=torch.uint8), 17)


# ---- Joint-ITQ and Dual-SVID -------------------------------------------------------------------------------

def test_joint_itq_reduces_the_quantization_error():
    Up, Vp = lb.latent_factors(coherent_weight(0), 12)
    Z = torch.cat([Up, Vp])
    R, history = lb.joint_itq(Z, iters=30, seed=0)
    assert torch.allclose(R.T @ R, torch.eye(12), atol=1e-5)
    assert all(b <= a * (1 + 1e-6) for a, b in itertools.pairwise(history))     # each step is a minimisation
    assert history[-1] == pytest.approx(lb.itq_error(Z, R))
    assert lb.itq_error(Z, R) < lb.itq_error(Z, torch.eye(12))                  # better than no rotation
    assert lb.itq_error(Z, R) < history[0]                                      # and than its random start


def test_rotation_leaves_the_latent_product_unchanged():
    Up, Vp = lb.latent_factors(coherent_weight(1), 10)
    R, _ = lb.joint_itq(torch.cat([Up, Vp]), iters=5, seed=3)
    assert torch.allclose((Up @ R) @ (Vp @ R).T, Up @ Vp.T, atol=1e-5)


def test_dual_svid_magnitudes_are_the_best_rank1_fit():
    Up, Vp = lb.latent_factors(coherent_weight(2), 8)
    u1, U, latent, V, _v2 = lb.dual_svid(Up, Vp)
    assert set(U.unique().tolist()) <= {-1.0, 1.0} and set(V.unique().tolist()) <= {-1.0, 1.0}
    a = latent / lb._rank1_magnitude(Vp)[1]
    best = torch.linalg.svdvals(Up.abs())
    assert torch.linalg.norm(Up.abs() - u1[:, None] * a) ** 2 == pytest.approx(float((best[1:] ** 2).sum()),
                                                                               rel=1e-3)


def dual_svid_error(W: torch.Tensor, Up: torch.Tensor, Vp: torch.Tensor) -> float:
    u1, U, latent, V, v2 = lb.dual_svid(Up, Vp)
    return relative_error(W, (U * u1[:, None] * latent) @ (V * v2[:, None]).T)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rotated_init_has_lower_weight_error_than_plain_dual_svid(seed):
    W = coherent_weight(seed)
    rank = lb.rank_for_budget(OUT, IN, 1.0)
    plain = lb.fit_path(W, rank, itq_iters=0)
    rotated = lb.fit_path(W, rank, itq_iters=50, seed=seed)
    assert relative_error(W, rotated.dense()) < relative_error(W, plain.dense()) - 0.05
    # and the gain is Joint-ITQ's, not only that of its random starting rotation
    Up, Vp = lb.latent_factors(W, rank)
    R = lb.random_rotation(rank, seed)
    assert relative_error(W, rotated.dense()) < dual_svid_error(W, Up @ R, Vp @ R) - 0.05


def test_residual_path_reduces_the_error_further():
    W = coherent_weight(3)
    rank = lb.rank_for_budget(OUT, IN, 1.0)

    def error(residual):
        layer = api.METHODS["littlebit2"](W, api.LayerStats.identity(IN), api.CompressConfig(
            method="littlebit2", rank=rank, options={"residual": residual}))
        assert layer.meta["rank"] == rank and len(layer.meta["paths"]) == 1 + residual
        return relative_error(W, layer.weight_hat)

    assert error(True) < error(False) - 0.05


# ---- bit budget --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(576, 1536), (1536, 576), (192, 576), (OUT, IN)])
@pytest.mark.parametrize("bpw", [0.55, 1.0, 0.3])
def test_rank_is_the_largest_that_fits_the_budget(shape, bpw):
    out, n_in = shape
    rank = lb.rank_for_budget(out, n_in, bpw)
    assert lb.littlebit_bpw(out, n_in, rank) <= bpw < lb.littlebit_bpw(out, n_in, rank + 1)


def test_budget_counts_every_stored_bit():
    W = coherent_weight(4)
    layer = api.METHODS["littlebit2"](W, api.LayerStats.identity(IN), api.CompressConfig(
        method="littlebit2", bpw=0.55))
    stored = sum(t.numel() * t.element_size() * 8 for t in layer.tensors.values())
    assert layer.bpw == stored / W.numel() <= 0.55
    assert layer.bpw == lb.littlebit_bpw(OUT, IN, layer.meta["rank"])


def test_budget_too_small_for_rank_one_names_the_minimum():
    minimum = lb.littlebit_bpw(OUT, IN, 1)
    with pytest.raises(BitforgeError, match=f"at least {minimum:.4f} bits per weight"):
        api.METHODS["littlebit2"](torch.randn(OUT, IN), api.LayerStats.identity(IN, "mlp.down"),
                                  api.CompressConfig(method="littlebit2", bpw=0.1))


@pytest.mark.parametrize("cfg, match", [
    (api.CompressConfig(method="littlebit2"), "needs a bit budget"),
    (api.CompressConfig(method="littlebit2", bpw=0.5, rank=4), "not both"),
    (api.CompressConfig(method="littlebit2", bpw=0.5, options={"itq": 3}), "unknown option"),
])
def test_bad_configurations_are_rejected(cfg, match):
    with pytest.raises(BitforgeError, match=match):
        api.METHODS["littlebit2"](torch.randn(OUT, IN), api.LayerStats.identity(IN), cfg)


def test_non_finite_weight_is_rejected():
    W = torch.randn(OUT, IN)
    W[2, 3] = float("nan")
    with pytest.raises(BitforgeError, match="layer mlp.up: the weight holds NaN"):
        api.METHODS["littlebit2"](W, api.LayerStats.identity(IN, "mlp.up"),
                                  api.CompressConfig(method="littlebit2", bpw=1.0))


# ---- the stored layer --------------------------------------------------------------------------------------

def test_stored_paths_decode_to_weight_hat_and_apply_in_factored_order():
    W = coherent_weight(5)
    layer = api.METHODS["littlebit2"](W, api.LayerStats.identity(IN), api.CompressConfig(method="littlebit2",
                                                                                           bpw=0.55))
    paths = [BinaryLowRankPath.from_tensors(layer.tensors, name) for name in layer.meta["paths"]]
    assert layer.meta["paths"] == ["primary", "residual"]
    assert all(p.u1.dtype == torch.float16 and p.u_signs.dtype == torch.uint8 for p in paths)
    assert torch.equal(layer.weight_hat, paths[0].dense() + paths[1].dense())
    x = torch.randn(7, IN, generator=torch.Generator().manual_seed(0))
    y = paths[0].apply(x) + paths[1].apply(x)
    assert torch.allclose(y, x @ layer.weight_hat.T, rtol=1e-4, atol=1e-5)


def test_activation_scaling_lowers_the_output_error():
    W = coherent_weight(6)
    g = torch.Generator().manual_seed(6)
    channel_rms = torch.exp(2 * torch.randn(IN, generator=g))          # a few dominant input channels
    stats = api.LayerStats(torch.diag(channel_rms.double() ** 2), 1, "attn.o")

    def output_error(act_scale):
        layer = api.METHODS["littlebit2"](W, stats, api.CompressConfig(
            method="littlebit2", bpw=1.0, options={"act_scale": act_scale}))
        return float(torch.linalg.norm((W - layer.weight_hat) * channel_rms))

    assert output_error(True) < 0.8 * output_error(False)


@pytest.mark.parametrize("residual", [True, False])
def test_checkpoint_decoder_reproduces_weight_hat(residual):
    from bitforge.toolchain.compress import checkpoint

    layer = api.METHODS["littlebit2"](coherent_weight(7), api.LayerStats.identity(IN), api.CompressConfig(
        method="littlebit2", bpw=0.55, options={"residual": residual}))
    assert torch.equal(checkpoint.decode_layer("mlp.up", layer.tensors, layer.meta), layer.weight_hat)
