"""LittleBit-2: sub-1-bit weights as two binary low-rank paths with a Joint-ITQ latent rotation.

Each path is ``W_hat = diag(u1) U diag(latent) V^T diag(v2)`` with ``U``, ``V`` in {+-1} (LittleBit, arXiv
2506.13771; stored layout in :mod:`bitforge.runtime.formats.binary`), computed as
``y = ((((x * v2) V) * latent) U^T) * u1``. The second (residual) path has the same form and rank and is fitted
to what the first leaves: ``W - W_hat_1``.

Initialisation of a path (Dual-SVID): truncated SVD ``W ~ U_s S V_s^T``, latent factors ``U' = U_s S^(1/2)``,
``V' = V_s S^(1/2)``; signs ``U = sign(U')``, ``V = sign(V')``; the magnitudes ``|U'| ~ u1 a^T`` and
``|V'| ~ v2 b^T`` by rank-1 SVDs (non-negative Perron vectors), so ``latent = a * b``.

LittleBit-2 (arXiv 2603.00042): singular vectors are coherent (a few large entries per column), the worst case
for taking signs. Because ``U' V'^T = (U' R)(V' R)^T`` for any orthogonal ``R``, the latent space is rotated
first, by the ``R`` that Joint-ITQ fits to the stacked factors ``Z = [U'; V']``: alternate ``B = sign(Z R)``
and the orthogonal Procrustes step ``R = P Q^T`` from ``Z^T B = P S Q^T``, which maximises ``tr(R^T Z^T B)``,
i.e. minimises ``||B - Z R||_F``. Each step cannot increase that error, the rotation costs nothing at
inference (it is folded into the signs), and the iteration starts from a seeded random rotation as in ITQ.

Rank comes from the bit budget ``cfg.bpw``: every stored bit of both paths counts (packed signs
``r * (out + in)`` when ``out`` and ``in`` are multiples of 8, float16 ``u1``, ``latent`` and ``v2``).

The papers continue with quantization-aware training and distillation; this is the post-training part, and
:mod:`.distill` the (optional, short) training that follows it (``bitforge quantize --distill-steps N``).
Their initialisation is data-free; ``options["act_scale"]`` (default off, not from the papers) fits
``W diag(s)`` with ``s = sqrt(diag(E[x x^T]))`` and folds ``1/s`` into ``v2``, so that the weight error is
weighted by the input channels' energy as the layer output's error is. (Exact alternating least squares on
the three scale vectors with the signs fixed was tried and left out: on SmolLM2 layers it lowers the relative
weight error by under 0.001, the Dual-SVID magnitudes being already near the optimum for their signs.)
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from ...runtime.formats import binary
from ...runtime.formats.binary import BinaryLowRankPath
from ..errors import BitforgeError
from .api import CompressConfig, CompressedLayer, LayerStats, bits_per_weight, register
from .checkpoint import register_decoder

PATHS = 2


@dataclass(frozen=True)
class LittleBitOptions:
    """``cfg.options`` of ``littlebit2``: Joint-ITQ iterations (0: plain Dual-SVID, i.e. LittleBit), the
    residual path, activation scaling from the calibration statistics."""

    itq_iters: int = 50
    residual: bool = True
    act_scale: bool = False

    def __post_init__(self) -> None:
        if self.itq_iters < 0:
            raise BitforgeError(f"littlebit2 options: itq_iters must be >= 0, got {self.itq_iters}")

    @staticmethod
    def from_options(options: dict) -> LittleBitOptions:
        known = {f.name for f in fields(LittleBitOptions)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise BitforgeError(f"littlebit2: unknown option(s) {unknown}; known: {sorted(known)}")
        return LittleBitOptions(**options)


def path_bits(out: int, n_in: int, rank: int) -> int:
    """Stored bits of one path: signs packed 8 per byte along ``out`` and ``in``, three float16 vectors."""
    return rank * 8 * (-(-out // 8) + -(-n_in // 8)) + 16 * (out + n_in + rank)


def littlebit_bpw(out: int, n_in: int, rank: int, paths: int = PATHS) -> float:
    """Bits per weight of ``paths`` paths of rank ``rank``."""
    return paths * path_bits(out, n_in, rank) / (out * n_in)


def rank_for_budget(out: int, n_in: int, bpw: float, paths: int = PATHS, layer: str = "") -> int:
    """The largest rank whose ``paths`` paths fit in ``bpw`` bits per weight (capped at ``min(out, in)``)."""
    budget = bpw * out * n_in
    per_rank = paths * (8 * (-(-out // 8) + -(-n_in // 8)) + 16)
    rank = max(int((budget - paths * 16 * (out + n_in)) // per_rank), 0)
    while littlebit_bpw(out, n_in, rank + 1, paths) <= bpw:   # the estimate may be off by one either way
        rank += 1
    while rank > 0 and littlebit_bpw(out, n_in, rank, paths) > bpw:
        rank -= 1
    if rank == 0:
        where = f"layer {layer} " if layer else ""
        raise BitforgeError(f"littlebit2: {where}[{out}, {n_in}] needs at least "
                            f"{littlebit_bpw(out, n_in, 1, paths):.4f} bits per weight for rank 1 with {paths} "
                            f"path(s); --bpw {bpw} is too small (raise it, or skip this layer)")
    return min(rank, out, n_in)


def latent_factors(W: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Truncated SVD with the singular values split evenly: ``W ~ U' V'^T``, ``U' [out, r]``, ``V' [in, r]``.

    Each singular pair's sign is fixed (largest entry of the left vector positive) so that the seeded ITQ
    start sees the same ``Z`` whichever sign convention the LAPACK build picks."""
    U, S, Vh = torch.linalg.svd(W, full_matrices=False)
    U, S, Vh = U[:, :rank], S[:rank], Vh[:rank]
    flip = torch.where(U.gather(0, U.abs().argmax(dim=0, keepdim=True))[0] >= 0, 1.0, -1.0)
    root = S.sqrt() * flip
    return U * root, Vh.T * root


def random_rotation(rank: int, seed: int) -> torch.Tensor:
    """A Haar-random orthogonal ``[r, r]`` (QR of a Gaussian with the signs of R's diagonal fixed)."""
    g = torch.Generator().manual_seed(seed)
    Q, R = torch.linalg.qr(torch.randn(rank, rank, generator=g))
    return Q * torch.sign(torch.diagonal(R))


def _sign(x: torch.Tensor) -> torch.Tensor:
    """sign with 0 -> +1: every stored entry must be +-1."""
    return torch.where(x >= 0, 1.0, -1.0).to(x.dtype)


def itq_error(Z: torch.Tensor, R: torch.Tensor) -> float:
    """Joint-ITQ's quantization error ``||sign(Z R) - Z R||_F``."""
    ZR = Z @ R
    return float(torch.linalg.norm(_sign(ZR) - ZR))


def joint_itq(Z: torch.Tensor, iters: int = 50, seed: int = 0) -> tuple[torch.Tensor, list[float]]:
    """Orthogonal ``R`` minimising ``||sign(Z R) - Z R||_F`` by ITQ's alternation from a seeded random rotation;
    returns ``R`` and the error of each iterate, the last entry being that of the returned ``R``."""
    R = random_rotation(Z.shape[1], seed).to(Z.dtype)
    history = []
    for _ in range(iters):
        ZR = Z @ R
        B = torch.sign(ZR)   # an exact 0 only drops out of Z^T B; 10x cheaper than the +-1-only _sign
        history.append(float(torch.linalg.norm(B - ZR)))
        P, _, Qh = torch.linalg.svd(Z.T @ B)
        R = P @ Qh
    history.append(itq_error(Z, R))
    return R, history


def _rank1_magnitude(M: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Best rank-1 ``|M| ~ a b^T``; the leading singular vectors of a non-negative matrix are non-negative."""
    U, S, Vh = torch.linalg.svd(M.abs(), full_matrices=False)
    root = S[0].sqrt()
    return U[:, 0].abs() * root, Vh[0].abs() * root


def dual_svid(Up: torch.Tensor, Vp: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Signs and rank-1 magnitudes of the latent factors: ``(u1, U, latent, V, v2)``."""
    u1, a = _rank1_magnitude(Up)
    v2, b = _rank1_magnitude(Vp)
    return u1, _sign(Up), a * b, _sign(Vp), v2


def _balance(u1: torch.Tensor, latent: torch.Tensor, v2: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Give the three scale vectors the same RMS (their product is unchanged) so float16 holds all three."""
    rms = [v.pow(2).mean().sqrt() for v in (u1, latent, v2)]
    if min(float(r) for r in rms) == 0.0:
        return u1, latent, v2
    target = (rms[0] * rms[1] * rms[2]) ** (1 / 3)
    return u1 * (target / rms[0]), latent * (target / rms[1]), v2 * (target / rms[2])


def fit_path(W: torch.Tensor, rank: int, itq_iters: int = 50, seed: int = 0,
             in_scale: torch.Tensor | None = None) -> BinaryLowRankPath:
    """One binary low-rank path for ``W`` (float32 ``[out, in]``): Dual-SVID on the Joint-ITQ-rotated latent
    factors (``itq_iters = 0``: plain Dual-SVID); ``in_scale`` (the activation scale ``s``) makes it fit
    ``W diag(s)`` and folds ``1 / s`` into ``v2``."""
    target = W if in_scale is None else W * in_scale
    Up, Vp = latent_factors(target, rank)
    if itq_iters:
        R, _ = joint_itq(torch.cat([Up, Vp]), itq_iters, seed)
        Up, Vp = Up @ R, Vp @ R
    u1, U, latent, V, v2 = dual_svid(Up, Vp)
    u1, latent, v2 = _balance(u1, latent, v2)
    if in_scale is not None:
        v2 = v2 / in_scale
    return BinaryLowRankPath.from_factors(u1, U, latent, V, v2)


def _activation_scale(stats: LayerStats, n_in: int) -> torch.Tensor:
    """``sqrt(diag(E[x x^T]))`` normalised to RMS 1, floored so that dead channels keep a finite ``1/s``."""
    if stats.diag.numel() != n_in:
        raise BitforgeError(f"littlebit2: layer {stats.name or '?'} has {n_in} inputs but its calibration "
                            f"statistics have {stats.diag.numel()}")
    s = stats.diag.clamp_min(0).sqrt().to(torch.float32)
    s = s / s.pow(2).mean().sqrt().clamp_min(torch.finfo(torch.float32).tiny)
    return s.clamp_min(1e-2)


@register("littlebit2")
def littlebit2(W: torch.Tensor, stats: LayerStats, cfg: CompressConfig) -> CompressedLayer:
    """LittleBit-2 post-training: rank from ``cfg.bpw`` (or ``cfg.rank``), primary + residual path."""
    opts = LittleBitOptions.from_options(cfg.options)
    layer = stats.name
    if W.dim() != 2:
        raise BitforgeError(f"littlebit2: layer {layer or '?'}: expected a 2-D weight, got {tuple(W.shape)}")
    out, n_in = W.shape
    paths = PATHS if opts.residual else 1
    if cfg.bpw is not None and cfg.rank:
        raise BitforgeError("littlebit2: give a bit budget (--bpw) or a rank (--rank), not both")
    if cfg.bpw is not None:
        rank = rank_for_budget(out, n_in, cfg.bpw, paths, layer)
    elif cfg.rank:
        rank = min(cfg.rank, out, n_in)
    else:
        raise BitforgeError("littlebit2 needs a bit budget (--bpw, e.g. 0.55) or a rank (--rank)")
    W = W.detach().to(torch.float32)
    if not bool(torch.isfinite(W).all()):
        raise BitforgeError(f"littlebit2: layer {layer or '?'}: the weight holds NaN or inf")
    in_scale = _activation_scale(stats, n_in) if opts.act_scale else None

    stored = []
    remainder = W
    for p in range(paths):
        path = fit_path(remainder, rank, opts.itq_iters, cfg.seed + p, in_scale)
        stored.append(path)
        remainder = remainder - path.dense()
    names = ("primary", "residual")[:paths]
    tensors, parts = {}, {}
    for name, path in zip(names, stored):
        tensors.update(path.tensors(name))
        parts.update({f"{name}.{k}": v for k, v in path.stored_bits().items()})
    meta = {
        "method": "littlebit2", "bits": 1, "group": None, "zero_point": "none", "rank": rank,
        "packing": binary.LAYOUT,
        "paths": list(names), "shape": [out, n_in], "itq_iters": opts.itq_iters,
        "act_scale": opts.act_scale, "bpw": bits_per_weight(parts, out * n_in),
    }
    return CompressedLayer(decode_paths(stored), tensors, meta)


littlebit2.statistics = "diag"  # the activation scale reads diag(E[x x^T]) only


def decode_paths(paths: list[BinaryLowRankPath]) -> torch.Tensor:
    """The weight a stack of paths computes with (primary first, then the residual added to it)."""
    weight = paths[0].dense()
    for path in paths[1:]:
        weight = weight + path.dense()
    return weight


@register_decoder("littlebit2")
def decode_littlebit2(tensors: dict[str, torch.Tensor], meta: dict) -> torch.Tensor:
    """Checkpoint decoder: the sum of the stored paths named in ``meta["paths"]``."""
    paths = [BinaryLowRankPath.from_tensors(tensors, name) for name in meta["paths"]]
    if paths and paths[0].shape != tuple(meta["shape"]):
        raise BitforgeError(f"littlebit2 checkpoint: paths of shape {paths[0].shape}, manifest says "
                            f"{tuple(meta['shape'])}")
    return decode_paths(paths)
