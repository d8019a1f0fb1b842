"""Quantization plus a low-rank correction, ``W_hat = Q + L R``: QERA (every rank on the quantization error) and
SRR (preserve the top-k of the activation-scaled weight, quantize the rest, reconstruct its error with r - k).

The objective is the layer-output error on calibration inputs, ``||X (W - W_hat)^T||^2 = tr(D H D^T)`` with
``D = W - W_hat`` and ``H = E[x x^T]``. With ``S`` a square root of ``H`` acting on the input dimension it is
``||D S||_F^2``, so the best rank-r fit of a residual ``D`` is ``SVD_r(D S) S^-1`` (Eckart-Young in the scaled space).

Layout: the papers write ``y = x W`` with ``W`` ``[in, out]`` and scale rows, ``S W``; bitforge stores ``nn.Linear``'s
``[out, in]``, so the same scaling multiplies on the right, ``W S``. ``SVD_r(S W)`` in the papers is
``SVD_r(W S)`` here.

Scaling (option ``scaling``):

- ``"approx"`` (default): QERA-approx, ``S = diag(sqrt(E[x_i^2]))``. It is exact when the input channels are
  uncorrelated (QERA's approximation) and it is what the issue benchmarks ("QERA-approx vs SRR"); LQER's
  ``mean |x|`` heuristic is replaced by the RMS, which is what the diagonal of ``H`` actually weighs.
- ``"exact"``: QERA-exact, ``S = H^(1/2)`` (symmetric square root by ``eigh``): the true minimiser of the output
  error for a given ``Q``, at the price of one ``in x in`` eigendecomposition per layer.

Both add ``damp * mean(diag H)`` to the diagonal (GPTQ's relative damping, default 1%) so that dead or rank-deficient
input directions keep ``S`` invertible and the factors finite.

SRR's split (arXiv 2602.02001): ``k* = argmin_k rho_k(W S) * rho_{r-k}(E S)`` with ``rho_p(A) = sum_{i>p} s_i^2 /
sum s_i^2`` and ``E`` one seeded ``U[-1, 1]`` probe of ``W``'s shape. ``rho`` is a ratio, so the probe's scale does
not matter: no calibration to the quantization step is needed. The criterion is flat where neither preserving nor
reconstructing gains (a white-noise ``W`` has the same Marchenko-Pastur spectrum as the probe, so the product is
constant up to the probe's sampling noise, ~0.1%); taking the exact argmin there would pick an arbitrary k. bitforge
therefore takes the *smallest* k whose criterion is within ``k_tol`` (relative, default 1%) of the minimum: rank is
spent on preserving only when it buys a clear predicted gain (``k_tol = 0`` gives the plain argmin). When k* > 0,
SRR also builds the k = 0 (QERA) candidate and keeps the one with the lower calibration output error (option
``check_k0``, default on; :func:`choose_split` says why). The manifest records both ``k_star`` and the ``k`` kept.

Storage: the base quantizer's tensors under ``q.`` plus ``lr_left`` ``[out, r]`` and ``lr_right`` ``[r, in]`` in float16
(``L = U sqrt(s)``, ``R = sqrt(s) V^T S^-1``: the singular values are split evenly so that neither factor leaves
float16's range first). ``weight_hat`` is computed from the float16 factors, and SRR quantizes the residual of the
*rounded* preserved part, so what is stored is what was optimised.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..errors import BitforgeError
from . import uniform  # noqa: F401  (registers rtn, the default base; other bases are looked up when called)
from .api import METHODS, CompressConfig, CompressedLayer, LayerStats, register
from .checkpoint import find_decoder, register_decoder
from .uniform import check_weight

SCALINGS = ("approx", "exact")
_FP16_MAX = 65504.0
# Options consumed here; everything else in cfg.options is passed on to the base quantizer.
_OWN_OPTIONS = ("base", "scaling", "damp", "k", "k_tol", "check_k0")


@dataclass(frozen=True)
class InputScaling:
    """``S`` on the input dimension: ``diag(root)`` (QERA-approx, ``basis`` None) or ``basis diag(root) basis^T``
    (exact; kept factored so that applying it costs two thin matmuls instead of forming ``in x in`` matrices)."""

    kind: str
    root: torch.Tensor
    basis: torch.Tensor | None = None

    def scale(self, A: torch.Tensor) -> torch.Tensor:
        """``A S`` for ``A`` ``[rows, in]`` (float64)."""
        if self.basis is None:
            return A * self.root
        return ((A @ self.basis) * self.root) @ self.basis.T

    def unscale(self, A: torch.Tensor) -> torch.Tensor:
        """``A S^-1``: maps a right factor fitted in the scaled space back to weight space."""
        if self.basis is None:
            return A / self.root
        return ((A @ self.basis) / self.root) @ self.basis.T


def checked_hessian(stats: LayerStats, n_in: int, method: str) -> torch.Tensor:
    """``E[x x^T]`` as float64, refusing what no method can use: wrong shape, no tokens, non-finite, all zero."""
    where = f"layer {stats.name or '?'}"
    xtx = stats.xtx
    if xtx.dim() != 2 or tuple(xtx.shape) != (n_in, n_in):
        raise BitforgeError(f"{where}: method {method} needs calibration statistics X^T X of shape [{n_in}, {n_in}] "
                            f"for a weight with {n_in} inputs, got {tuple(xtx.shape)}")
    if stats.n_tokens <= 0:
        raise BitforgeError(f"{where}: method {method} needs calibration data, but the layer saw 0 tokens; "
                            f"check that the calibration text reaches this layer")
    H = stats.hessian.to(torch.float64)
    if not torch.isfinite(H).all():
        raise BitforgeError(f"{where}: the calibration Hessian X^T X has non-finite entries (overflow in the "
                            f"activations?); method {method} cannot use it")
    if float(torch.diagonal(H).max()) <= 0.0:
        raise BitforgeError(f"{where}: the calibration Hessian X^T X is zero (all inputs were 0), so it is singular "
                            f"and method {method} has nothing to weigh the error with; use more calibration text")
    return H


def input_scaling(stats: LayerStats, n_in: int, kind: str = "approx", damp: float = 0.01,
                  method: str = "qera") -> InputScaling:
    """QERA's activation scaling ``S`` (``"approx"``: diagonal RMS; ``"exact"``: ``H^(1/2)``), damped by
    ``damp * mean(diag H)`` so it is invertible on a singular ``H``."""
    if kind not in SCALINGS:
        raise BitforgeError(f"layer {stats.name or '?'}: method {method}: option scaling={kind!r}; expected one of "
                            f"{', '.join(SCALINGS)}")
    if not damp > 0:
        raise BitforgeError(f"layer {stats.name or '?'}: method {method}: option damp={damp}; expected > 0 "
                            f"(a relative diagonal damping such as 0.01)")
    H = checked_hessian(stats, n_in, method)
    h = torch.diagonal(H).clamp_min(0.0)
    delta = damp * float(h.mean())
    if kind == "approx":
        return InputScaling(kind, torch.sqrt(h + delta))
    lam, V = torch.linalg.eigh(H + delta * torch.eye(n_in, dtype=torch.float64, device=H.device))
    # Rounding can leave the damped spectrum a hair below delta (or a PSD matrix's eigenvalue below 0).
    return InputScaling(kind, torch.sqrt(lam.clamp_min(delta)), V)


def tail_energy(sv: torch.Tensor) -> torch.Tensor:
    """``rho_p = sum_{i>p} s_i^2 / sum_i s_i^2`` for ``p = 0 .. len(sv)`` (``sv`` sorted descending)."""
    e = sv.to(torch.float64) ** 2
    total = e.sum()
    if float(total) == 0.0:
        return torch.zeros(len(sv) + 1, dtype=torch.float64)
    return torch.cat([torch.ones(1, dtype=torch.float64), (total - torch.cumsum(e, 0)).clamp_min(0.0) / total])


def srr_criterion(sv_weight: torch.Tensor, sv_probe: torch.Tensor, rank: int) -> torch.Tensor:
    """SRR's predicted error ``rho_k(W S) * rho_{r-k}(E S)`` for ``k = 0 .. rank``: the energy left for the
    quantizer to damage times the fraction of its error that ``r - k`` ranks cannot reconstruct."""
    rw, re = tail_energy(sv_weight), tail_energy(sv_probe)
    k = torch.arange(rank + 1)
    return rw[k] * re[rank - k]


def choose_k(criterion: torch.Tensor, k_tol: float = 0.01) -> int:
    """The smallest k whose criterion is within ``k_tol`` (relative) of the minimum (see the module docstring)."""
    best = float(criterion.min())
    return int(torch.nonzero(criterion <= best * (1.0 + k_tol) + 1e-300)[0, 0])


def probe_matrix(shape: tuple[int, int], seed: int) -> torch.Tensor:
    """SRR's random probe: ``U[-1, 1]`` of the weight's shape, from its own seeded generator (float64)."""
    gen = torch.Generator().manual_seed(int(seed))
    return torch.rand(shape, generator=gen, dtype=torch.float64) * 2.0 - 1.0


def lowrank_fit(residual: torch.Tensor, rank: int, scaling: InputScaling,
                svd: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """``L R = S^-1 SVD_rank(residual S)`` (in our layout ``SVD_rank(residual S) S^-1``), as float64 ``[out, rank]``
    and ``[rank, in]``. ``svd`` reuses a decomposition of ``residual S`` already computed."""
    out, n_in = residual.shape
    if rank == 0:
        return residual.new_zeros(out, 0), residual.new_zeros(0, n_in)
    U, sv, Vh = svd if svd is not None else torch.linalg.svd(scaling.scale(residual), full_matrices=False)
    root = torch.sqrt(sv[:rank])
    return U[:, :rank] * root, scaling.unscale(root[:, None] * Vh[:rank])


def to_fp16(A: torch.Tensor, what: str, layer: str) -> torch.Tensor:
    """Round a factor to the float16 the checkpoint stores; refuse one that float16 cannot hold."""
    if A.numel() and float(A.abs().max()) > _FP16_MAX:
        raise BitforgeError(f"layer {layer or '?'}: the low-rank factor {what} exceeds float16's range "
                            f"(max |entry| {float(A.abs().max()):.3g}); the activation scaling is too skewed, raise "
                            f"the option damp")
    return A.to(torch.float16)


def check_rank(W: torch.Tensor, rank: int, method: str, layer: str) -> None:
    out, n_in = W.shape
    if rank <= 0:
        raise BitforgeError(f"layer {layer or '?'}: method {method} needs --rank R >= 1 (the rank of the low-rank "
                            f"correction); got {rank}. Use --method rtn for no correction")
    if rank > min(out, n_in):
        raise BitforgeError(f"layer {layer or '?'}: --rank {rank} exceeds min(out, in) = {min(out, n_in)} for a "
                            f"[{out}, {n_in}] weight")


def base_quantize(W: torch.Tensor, stats: LayerStats, cfg: CompressConfig, method: str) -> CompressedLayer:
    """Quantize through the registry, so any registered quantizer (rtn, gptq, neuqi, osaq+...) is a valid base."""
    base = cfg.options.get("base", "rtn")
    if base not in METHODS:
        raise BitforgeError(f"layer {stats.name or '?'}: method {method}: base quantizer {base!r} is not registered; "
                            f"known methods: {', '.join(sorted(METHODS))}")
    if base in ("qera", "srr"):
        raise BitforgeError(f"method {method}: base {base!r} is itself low-rank; use a plain quantizer as base")
    options = {k: v for k, v in cfg.options.items() if k not in _OWN_OPTIONS}
    return METHODS[base](W.to(torch.float32).contiguous(), stats, replace(cfg, method=base, rank=0, options=options))


@dataclass(frozen=True)
class Reconstruction:
    """``W_hat = Q + L R`` for one split ``k``: the base quantizer's layer and the float16 factors."""

    q: CompressedLayer
    left: torch.Tensor   # [out, rank] float16, columns 0..k-1 preserved, k.. reconstruct the error
    right: torch.Tensor  # [rank, in] float16
    k: int

    @property
    def weight_hat(self) -> torch.Tensor:
        return self.q.weight_hat.to(torch.float32) + self.left.to(torch.float32) @ self.right.to(torch.float32)


def reconstruct(W64: torch.Tensor, stats: LayerStats, cfg: CompressConfig, method: str, scaling: InputScaling,
                k: int, svd_w: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None) -> Reconstruction:
    """SRR's three steps for a given k: preserve ``L1 R1`` (rank k), quantize the residual of its *float16* version,
    fit the remaining error with rank ``r - k``. ``k = 0`` is QERA."""
    layer, rank = stats.name, cfg.rank
    if k:
        L1, R1 = lowrank_fit(W64, k, scaling, svd_w)
    else:
        L1, R1 = W64.new_zeros(W64.shape[0], 0), W64.new_zeros(0, W64.shape[1])
    L1h, R1h = to_fp16(L1, "lr_left", layer), to_fp16(R1, "lr_right", layer)
    residual = W64 - L1h.to(torch.float64) @ R1h.to(torch.float64)
    q = base_quantize(residual, stats, cfg, method)
    L2, R2 = lowrank_fit(residual - q.weight_hat.to(torch.float64), rank - k, scaling)
    return Reconstruction(q, torch.cat([L1h, to_fp16(L2, "lr_left", layer)], 1),
                          torch.cat([R1h, to_fp16(R2, "lr_right", layer)], 0), k)


def output_error(W64: torch.Tensor, W_hat: torch.Tensor, H: torch.Tensor) -> float:
    """``tr(D H D^T)``, ``D = W - W_hat``: the layer-output error on calibration data (per token)."""
    D = W64 - W_hat.to(torch.float64)
    return float(((D @ H) * D).sum())


def choose_split(W64: torch.Tensor, stats: LayerStats, cfg: CompressConfig, scaling: InputScaling,
                 svd_w: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> tuple[Reconstruction, int]:
    """SRR's k* from the spectra, then (option ``check_k0``, default on) the k = 0 candidate as well, keeping the one
    with the lower calibration output error. Returns the kept reconstruction and k*.

    The guard exists because the criterion models the quantization error as proportional to the residual's energy:
    true when ``W`` has a dominant low-rank part (removing it shrinks the quantizer's range), false for an unstructured
    ``W`` under a strongly anisotropic ``S`` (``W S`` then has a steep spectrum, so the criterion preserves ~r/2
    directions, but the residual's range, and so the quantization error, hardly shrinks). On such synthetic layers the
    criterion alone lost up to 2x to QERA; the guard costs one more quantization of the layer.
    """
    opts = cfg.options
    sv_probe = torch.linalg.svdvals(scaling.scale(probe_matrix(tuple(W64.shape), cfg.seed).to(W64.device)))
    k_star = choose_k(srr_criterion(svd_w[1], sv_probe, cfg.rank), float(opts.get("k_tol", 0.01)))
    best = reconstruct(W64, stats, cfg, "srr", scaling, k_star, svd_w)
    if k_star and opts.get("check_k0", True):
        H = stats.hessian.to(torch.float64)
        qera = reconstruct(W64, stats, cfg, "srr", scaling, 0, None)
        if output_error(W64, qera.weight_hat, H) < output_error(W64, best.weight_hat, H):
            best = qera
    return best, k_star


def quantize_lowrank(W: torch.Tensor, stats: LayerStats, cfg: CompressConfig, method: str,
                     preserve: int | None) -> CompressedLayer:
    """``W_hat = L1 R1 + Q(W - L1 R1) + L2 R2`` with ``rank(L1 R1) = k``: ``preserve=0`` is QERA, ``None`` lets SRR
    choose k (:func:`choose_split`), an int fixes it."""
    layer = stats.name
    check_weight(W, layer)
    rank = cfg.rank
    check_rank(W, rank, method, layer)
    opts = cfg.options
    scaling = input_scaling(stats, W.shape[1], opts.get("scaling", "approx"), float(opts.get("damp", 0.01)), method)
    W64 = W.to(torch.float64)
    k_star = None
    if preserve == 0:
        rec = reconstruct(W64, stats, cfg, method, scaling, 0, None)
    else:
        svd_w = torch.linalg.svd(scaling.scale(W64), full_matrices=False)
        if preserve is None:
            rec, k_star = choose_split(W64, stats, cfg, scaling, svd_w)
        elif not 0 <= preserve <= rank:
            raise BitforgeError(f"layer {layer or '?'}: method {method}: option k={preserve} must lie in 0..{rank} "
                                f"(the preserved part of the rank budget)")
        else:
            rec = reconstruct(W64, stats, cfg, method, scaling, int(preserve), svd_w)

    q = rec.q
    out, n_in = W.shape
    meta = dict(q.meta)
    meta.update(method=method, rank=rank, k=rec.k, base=q.meta.get("method", opts.get("base", "rtn")),
                base_bpw=q.bpw, scaling=scaling.kind, lowrank_dtype="float16",
                bpw=q.bpw + 16.0 * rank * (out + n_in) / (out * n_in))
    if k_star is not None:
        meta["k_star"] = k_star
    tensors = {f"q.{name}": t for name, t in q.tensors.items()}
    tensors.update(lr_left=rec.left, lr_right=rec.right)
    return CompressedLayer(weight_hat=rec.weight_hat, tensors=tensors, meta=meta)


@register("qera")
def qera(W: torch.Tensor, stats: LayerStats, cfg: CompressConfig) -> CompressedLayer:
    """LQER/QERA: ``Q = Quant(W)``, ``L R = S^-1 SVD_r(S (W - Q))`` (SRR with k = 0)."""
    return quantize_lowrank(W, stats, cfg, "qera", preserve=0)


@register("srr")
def srr(W: torch.Tensor, stats: LayerStats, cfg: CompressConfig) -> CompressedLayer:
    """Structured Residual Reconstruction: k* from the spectra of ``S W`` and a random probe, unless option ``k``."""
    k = cfg.options.get("k")
    return quantize_lowrank(W, stats, cfg, "srr", preserve=None if k is None else int(k))


def decode_lowrank(tensors: dict[str, torch.Tensor], meta: dict) -> torch.Tensor:
    """Checkpoint decoder of a Q + L R layer: the base's decoder on the ``q.`` tensors, plus ``lr_left @ lr_right``
    (float32, the order ``weight_hat`` was computed in)."""
    base_tensors = {name[2:]: t for name, t in tensors.items() if name.startswith("q.")}
    base_meta = {**meta, "method": meta.get("base")}
    decode = find_decoder(base_meta, base_tensors)
    if decode is None:
        raise BitforgeError(f"{meta.get('method')} layer: no checkpoint decoder for its base {meta.get('base')!r} "
                            f"(packing {meta.get('packing')!r})")
    return decode(base_tensors, base_meta).to(torch.float32) + (
        tensors["lr_left"].to(torch.float32) @ tensors["lr_right"].to(torch.float32))


for _name in ("qera", "srr"):
    register_decoder(_name)(decode_lowrank)
