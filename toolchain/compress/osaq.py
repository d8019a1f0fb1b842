"""OSAQ (arXiv 2605.04738): shrink weight outliers by adding a change that lies in the calibration Hessian's
(near) null space, so the layer's outputs on calibration data stay (nearly) the same, then quantize.

With ``H = X^T X`` and ``N`` (``[in, K]``, orthonormal) the eigenvectors of its smallest eigenvalues, any
``dW = B N^T`` (``B`` ``[out, K]``) changes the outputs by ``X dW^T = X N B^T``, whose energy is
``sum_k lambda_k ||B[:, k]||^2``: at most the null space's eigenvalues times the change. Each row ``i`` picks its
coefficients ``b_i`` to make the new row small where it is largest,

    min_b  sum_j s_ij (W_ij + n_j . b)^2 + mu1 ||b||^2,    s_ij = softmax_j(|W_ij| / tau_i),

with ``n_j`` the j-th row of ``N`` (input ``j``'s null-space coordinates). The softmax weights are OSAQ's smooth
stand-in for the row's max |entry| (its "Softmax-infinity" objective: the range the quantizer must cover); the
normal equations are the brief's ``(sum_j s_ij n_j n_j^T + mu1 I) b_i = -sum_j s_ij W_ij n_j``, one ``K x K`` system
per row, solved batched (Cholesky, float64). No iteration, no training: the transform is absorbed into ``W``.

Choices where the paper's constants were not available to us (each is an option in ``cfg.options``):

- ``gamma`` (null-space size): the eigenvectors of the smallest ``|lambda|`` whose cumulative energy is at most
  ``gamma`` of ``tr H``. Default adaptive, ``gamma = 4^-bits / 16``: a b-bit uniform quantizer injects relative noise
  power ~ ``4^-b`` anyway, so directions carrying a sixteenth of that fraction of the input energy are "null" at the
  precision the layer will have (looser at 2 bits, where outliers hurt most; tighter at 4).
- ``temperature`` ``t``: ``tau_i = t * max_j |W_ij|`` (default 0.5): the row's largest entry weighs e^2 ~ 7.4 times
  an entry at 0, whatever the row's scale. Sharper (t = 0.25) is closer to the true max but lets the bulk grow into
  new outliers, since only the top entries then pay for the change; flatter (t >= 1) drifts towards a plain
  projection off the null space. On synthetic outlier entries, outlier columns and Student-t rows, t = 0.5 gave the
  lowest or near-lowest (within ~10%) 2-4 bit RTN output error of t in {0.25, 0.5, 1}; t = 0.25 lost up to 1.5x.
- ``mu`` (ridge): ``mu1 = mu / in`` (default ``mu = 1e-2``). With uniform weights ``s_ij = 1/in`` the system matrix
  is ``I / in`` (``N^T N = I``), so ``mu`` is relative to the weights' own scale: a 1% pull towards a small change.
- ``max_null``: cap on ``K`` (default 256); forming the systems costs ``out * in * K^2`` (about 3 s for a
  576 x 1536 layer at K = 256 on one CPU core, four times that at 512). The cap keeps the *smallest* eigenvalue
  directions, so it only gives up freedom, never output fidelity.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..errors import BitforgeError
from . import uniform  # noqa: F401  (registers rtn; the other bases are looked up when called)
from .api import METHODS, CompressConfig, CompressedLayer, LayerStats, register
from .checkpoint import find_decoder, register_decoder
from .lowrank import checked_hessian
from .uniform import check_weight

BASES = ("rtn", "gptq", "neuqi", "neuqi+gptq")
_OWN_OPTIONS = ("gamma", "temperature", "mu", "max_null")
# Elements of the [rows, K, in] intermediate formed per chunk of rows (64 MB in float32).
_CHUNK_ELEMENTS = 1 << 24


def default_gamma(bits: int) -> float:
    """The adaptive null-space energy fraction ``4^-bits / 16`` (see the module docstring)."""
    return 4.0 ** -int(bits) / 16.0


@dataclass(frozen=True)
class NullSpace:
    """Orthonormal ``basis`` ``[in, K]`` of H's smallest-eigenvalue directions and their ``eigenvalues``."""

    basis: torch.Tensor
    eigenvalues: torch.Tensor
    gamma: float
    energy: float  # the fraction of tr H the basis carries (<= gamma)

    @property
    def dim(self) -> int:
        return self.basis.shape[1]


def hessian_null_space(H: torch.Tensor, gamma: float, max_dim: int | None = None) -> NullSpace:
    """Eigenvectors of the smallest ``|lambda|`` whose cumulative ``|lambda|`` is at most ``gamma * sum |lambda|``."""
    lam, V = torch.linalg.eigh(H.to(torch.float64))
    mag = lam.abs()
    order = torch.argsort(mag)
    total = float(mag.sum())
    cum = torch.cumsum(mag[order], 0) / total
    K = int((cum <= gamma).sum())
    if max_dim is not None:
        K = min(K, int(max_dim))
    idx = order[:K]
    energy = float(cum[K - 1]) if K else 0.0
    return NullSpace(V[:, idx].contiguous(), lam[idx], float(gamma), energy)


def softmax_weights(W: torch.Tensor, temperature: float) -> torch.Tensor:
    """``s_ij = softmax_j(|W_ij| / (temperature * max_j |W_ij|))`` as float64 ``[out, in]``; rows sum to 1."""
    A = W.to(torch.float64).abs()
    tau = temperature * torch.clamp(A.amax(1, keepdim=True), min=torch.finfo(torch.float64).tiny)
    return torch.softmax(A / tau, dim=1)


def suppression_coefficients(W: torch.Tensor, basis: torch.Tensor, weights: torch.Tensor, mu1: float) -> torch.Tensor:
    """Solve ``(N^T diag(s_i) N + mu1 I) b_i = -N^T (s_i * W_i)`` for every row ``i``: ``B`` ``[out, K]`` (float64).

    Rows go in chunks so the ``[rows, K, in]`` intermediate stays bounded; per chunk one batched matmul forms the
    systems and one batched Cholesky (float64) solves them. The systems are formed in float32: the softmax weights of
    a row differ by at most ``e^(1/temperature)`` (module docstring) and ``N^T N = I``, so their condition number is
    about that ratio (~7 at the default), far inside float32's precision, and the matmul runs twice as fast. Whatever
    the accuracy of ``b``, the change ``b N^T`` stays exactly in the null space.
    """
    out, n_in = W.shape
    K = basis.shape[1]
    W32 = W.to(torch.float32)
    N32 = basis.to(torch.float32)
    B = torch.empty(out, K, dtype=torch.float64, device=W.device)
    ridge = mu1 * torch.eye(K, dtype=torch.float64, device=W.device)
    rows = max(1, _CHUNK_ELEMENTS // max(1, K * n_in))
    for start in range(0, out, rows):
        s = weights[start:start + rows].to(torch.float32)
        weighted = N32.T.unsqueeze(0) * s.unsqueeze(1)                         # [r, K, in] = N^T diag(s_i)
        A = (weighted @ N32).to(torch.float64) + ridge                          # [r, K, K]
        rhs = -(weighted @ W32[start:start + rows].unsqueeze(-1)).to(torch.float64)  # [r, K, 1]
        chol, info = torch.linalg.cholesky_ex(A)
        if bool((info != 0).any()):  # not expected (mu1 > 0); fall back to LU rather than fail
            B[start:start + rows] = torch.linalg.solve(A, rhs).squeeze(-1)
        else:
            B[start:start + rows] = torch.cholesky_solve(rhs, chol).squeeze(-1)
    return B


@dataclass(frozen=True)
class Suppressed:
    """The transformed weight and what the manifest records about the transform."""

    weight: torch.Tensor
    null: NullSpace
    temperature: float
    mu: float

    def meta(self) -> dict:
        return {"osaq_gamma": self.null.gamma, "osaq_null_dim": self.null.dim, "osaq_null_energy": self.null.energy,
                "osaq_temperature": self.temperature, "osaq_mu": self.mu}


def suppress_outliers(W: torch.Tensor, stats: LayerStats, gamma: float, temperature: float = 0.5, mu: float = 1e-2,
                      max_null: int | None = 256, method: str = "osaq") -> Suppressed:
    """``W + B N^T`` with ``N`` the Hessian null space and ``B`` the per-row softmax-weighted least-squares
    coefficients (module docstring). Float32 out, same shape; a layer with no null space comes back unchanged."""
    layer = stats.name or "?"
    check_weight(W, stats.name)
    if not 0.0 < gamma < 1.0:
        raise BitforgeError(f"layer {layer}: method {method}: option gamma={gamma}; expected a fraction in (0, 1)")
    if not temperature > 0.0:
        raise BitforgeError(f"layer {layer}: method {method}: option temperature={temperature}; expected > 0")
    if not mu > 0.0:
        raise BitforgeError(f"layer {layer}: method {method}: option mu={mu}; expected > 0")
    if max_null is not None and int(max_null) < 1:
        raise BitforgeError(f"layer {layer}: method {method}: option max_null={max_null}; expected >= 1 (or None)")
    H = checked_hessian(stats, W.shape[1], method).to(W.device)
    null = hessian_null_space(H, gamma, max_null)
    if null.dim == 0:
        return Suppressed(W.to(torch.float32).clone(), null, float(temperature), float(mu))
    s = softmax_weights(W, temperature)
    B = suppression_coefficients(W, null.basis, s, mu / W.shape[1])
    W_new = (W.to(torch.float64) + B @ null.basis.T).to(torch.float32)
    return Suppressed(W_new, null, float(temperature), float(mu))


def osaq_then(base: str):
    """OSAQ followed by ``base`` from the registry (looked up at call time, so bases registered later work)."""
    name = f"osaq+{base}"

    def method(W: torch.Tensor, stats: LayerStats, cfg: CompressConfig) -> CompressedLayer:
        if base not in METHODS:
            raise BitforgeError(f"layer {stats.name or '?'}: method {name}: base quantizer {base!r} is not "
                                f"registered; known methods: {', '.join(sorted(METHODS))}")
        opts = cfg.options
        gamma = float(opts.get("gamma", default_gamma(cfg.bits)))
        max_null = opts.get("max_null", 256)
        sup = suppress_outliers(W, stats, gamma, float(opts.get("temperature", 0.5)), float(opts.get("mu", 1e-2)),
                                None if max_null is None else int(max_null), name)
        base_opts = {k: v for k, v in opts.items() if k not in _OWN_OPTIONS}
        q = METHODS[base](sup.weight, stats, replace(cfg, method=base, options=base_opts))
        meta = dict(q.meta)
        meta.update(method=name, base=base, **sup.meta())
        return CompressedLayer(weight_hat=q.weight_hat, tensors=q.tensors, meta=meta)

    method.__name__ = name.replace("+", "_")
    method.__doc__ = f"OSAQ null-space outlier suppression, then {base} on the transformed weight."
    return method


def decoder_of(base: str):
    """An OSAQ layer stores exactly what its base stores (the transform is absorbed into ``W``): decode it as one."""
    def decode(tensors: dict[str, torch.Tensor], meta: dict) -> torch.Tensor:
        base_meta = {**meta, "method": base}
        fn = find_decoder(base_meta, tensors)
        if fn is None:
            raise BitforgeError(f"osaq+{base} layer: no checkpoint decoder for its base {base!r} "
                                f"(packing {meta.get('packing')!r})")
        return fn(tensors, base_meta)
    return decode


for _base in BASES:
    register(f"osaq+{_base}")(osaq_then(_base))
    register_decoder(f"osaq+{_base}")(decoder_of(_base))
