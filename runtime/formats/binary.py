"""Binary (+-1) matrices packed 8 per byte, and the binary low-rank path of LittleBit built on them.

Sign packing: a ``[..., n]`` matrix of +-1 becomes ``[..., ceil(n / 8)]`` uint8; bit ``j`` (least significant
first) of byte ``b`` holds element ``8 b + j``, 1 for +1 and 0 for -1 (so the value is ``2 * bit - 1``, the
XNOR-popcount convention); padding bits past ``n`` are 0. Packing runs along the last dimension, the one a
kernel streams through.

A binary low-rank path (LittleBit, arXiv 2506.13771) stores ``W_hat = diag(u1) U diag(latent) V^T diag(v2)`` with
``U`` in {+-1}^[out, r], ``V`` in {+-1}^[in, r] and computes ``y = ((((x * v2) V) * latent) U^T) * u1``, so a
kernel never forms ``W_hat``. Stored tensors (``PREFIX`` is the path's name, e.g. ``primary``):

``PREFIX.u_signs``  uint8 ``[r, ceil(out / 8)]``  ``U^T`` packed along ``out``
``PREFIX.v_signs``  uint8 ``[r, ceil(in / 8)]``   ``V^T`` packed along ``in``
``PREFIX.u1``       float16 ``[out]``            output scale
``PREFIX.latent``   float16 ``[r]``              latent scale (the paper's ``v1 * u2``, stored as one vector)
``PREFIX.v2``       float16 ``[in]``             input scale

Both sign matrices are stored rank-major so that their padding depends only on ``out`` and ``in`` (none for
dimensions that are multiples of 8, as every LLM layer's are).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from bitforge.toolchain.errors import BitforgeError

LAYOUT = "binary-lowrank-v1"   # the manifest's "packing" of layers made of these paths
_BIT_WEIGHTS = (1 << torch.arange(8, dtype=torch.int32))


def pack_signs(signs: torch.Tensor) -> torch.Tensor:
    """``[..., n]`` of +-1 -> ``[..., ceil(n / 8)]`` uint8 (layout in the module docstring)."""
    if not bool(((signs == 1) | (signs == -1)).all()):
        raise BitforgeError("pack_signs: every entry must be +1 or -1 (map zeros to a sign before packing)")
    n = signs.shape[-1]
    bits = torch.nn.functional.pad((signs > 0).to(torch.int32), (0, -n % 8))
    grouped = bits.reshape(*bits.shape[:-1], bits.shape[-1] // 8, 8)
    return (grouped * _BIT_WEIGHTS).sum(dim=-1).to(torch.uint8)


def unpack_signs(packed: torch.Tensor, n: int) -> torch.Tensor:
    """Inverse of :func:`pack_signs`: ``[..., m]`` uint8 -> ``[..., n]`` float32 of +-1 (``n <= 8 m``)."""
    if not 8 * (packed.shape[-1] - 1) < n <= 8 * packed.shape[-1]:
        raise BitforgeError(f"unpack_signs: {packed.shape[-1]} bytes per row cannot hold {n} signs")
    bits = (packed.to(torch.int32)[..., None] & _BIT_WEIGHTS) != 0
    flat = bits.reshape(*packed.shape[:-1], 8 * packed.shape[-1])[..., :n]
    return flat.to(torch.float32) * 2 - 1


@dataclass(frozen=True)
class BinaryLowRankPath:
    """One stored path ``diag(u1) U diag(latent) V^T diag(v2)`` (fields as in the module docstring)."""

    u_signs: torch.Tensor
    v_signs: torch.Tensor
    u1: torch.Tensor
    latent: torch.Tensor
    v2: torch.Tensor

    @staticmethod
    def from_factors(u1: torch.Tensor, U: torch.Tensor, latent: torch.Tensor, V: torch.Tensor,
                     v2: torch.Tensor) -> BinaryLowRankPath:
        """Pack ``U [out, r]`` and ``V [in, r]`` (+-1) and round the scale vectors to float16."""
        out, rank = U.shape
        n_in = V.shape[0]
        if V.shape[1] != rank or u1.shape != (out,) or latent.shape != (rank,) or v2.shape != (n_in,):
            raise BitforgeError(f"binary low-rank path: inconsistent shapes U {tuple(U.shape)}, V "
                                f"{tuple(V.shape)}, u1 {tuple(u1.shape)}, latent {tuple(latent.shape)}, "
                                f"v2 {tuple(v2.shape)}")
        scales = torch.cat([u1, latent, v2]).abs()
        if not bool(torch.isfinite(scales).all()) or float(scales.max()) > torch.finfo(torch.float16).max:
            raise BitforgeError("binary low-rank path: a scale vector does not fit float16 (NaN, inf or "
                                "> 65504); rescale the weight or balance the scale vectors")
        return BinaryLowRankPath(pack_signs(U.T), pack_signs(V.T), u1.to(torch.float16),
                                 latent.to(torch.float16), v2.to(torch.float16))

    @property
    def shape(self) -> tuple[int, int]:
        return (self.u1.numel(), self.v2.numel())

    @property
    def rank(self) -> int:
        return self.latent.numel()

    def signs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``U [out, r]`` and ``V [in, r]`` as float32 +-1."""
        out, n_in = self.shape
        return unpack_signs(self.u_signs, out).T, unpack_signs(self.v_signs, n_in).T

    def dense(self) -> torch.Tensor:
        """``W_hat`` as float32 ``[out, in]``."""
        U, V = self.signs()
        left = U * self.u1.float()[:, None] * self.latent.float()
        return left @ (V * self.v2.float()[:, None]).T

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """``x @ W_hat^T`` in the factored order a kernel uses (the reference for the GPU runtime)."""
        U, V = self.signs()
        t = (x.float() * self.v2.float()) @ V
        return ((t * self.latent.float()) @ U.T) * self.u1.float()

    def stored_bits(self) -> dict[str, tuple[int, int]]:
        """name -> (elements, bits each), as :func:`bitforge.toolchain.compress.api.bits_per_weight` takes."""
        return {"u_signs": (self.u_signs.numel(), 8), "v_signs": (self.v_signs.numel(), 8),
                "u1": (self.u1.numel(), 16), "latent": (self.latent.numel(), 16), "v2": (self.v2.numel(), 16)}

    def tensors(self, prefix: str) -> dict[str, torch.Tensor]:
        return {f"{prefix}.u_signs": self.u_signs, f"{prefix}.v_signs": self.v_signs, f"{prefix}.u1": self.u1,
                f"{prefix}.latent": self.latent, f"{prefix}.v2": self.v2}

    @staticmethod
    def from_tensors(tensors: dict[str, torch.Tensor], prefix: str) -> BinaryLowRankPath:
        """Rebuild a path stored under ``prefix``, checking that its shapes agree."""
        fields = ("u_signs", "v_signs", "u1", "latent", "v2")
        missing = [f"{prefix}.{f}" for f in fields if f"{prefix}.{f}" not in tensors]
        if missing:
            raise BitforgeError(f"binary low-rank path {prefix!r}: missing tensors {missing}")
        path = BinaryLowRankPath(*(tensors[f"{prefix}.{f}"] for f in fields))
        out, n_in = path.shape
        want = {"u_signs": (path.rank, -(-out // 8)), "v_signs": (path.rank, -(-n_in // 8))}
        for name, shape in want.items():
            if tuple(getattr(path, name).shape) != shape:
                raise BitforgeError(f"binary low-rank path {prefix!r}: {name} has shape "
                                    f"{tuple(getattr(path, name).shape)}, expected {shape}")
        return path
