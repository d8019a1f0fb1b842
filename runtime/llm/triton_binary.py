"""Triton kernels for binary low-rank layers (LittleBit-2, layout ``binary-lowrank-v1``,
:mod:`bitforge.runtime.formats.binary`).

One path computes ``y = ((((x * v2) @ V) * latent) @ U^T) * u1`` (LittleBit, arXiv 2506.13771; ``latent`` is the
paper's ``v1 * u2``) without ever forming the ``[N, K]`` weight, as two chained binary GEMVs:

1. ``t = (x * v2) @ V``: ``V^T`` is ``[r, K]`` signs; a program covers ``BLOCK_R`` ranks and ``K_ITERS`` blocks
   of ``BLOCK_K`` inputs, adds ``+x`` or ``-x`` by the sign bit (no multiply), and atomically adds its partial
   sums into a zeroed float32 ``t`` (split-K, as the uniform GEMV).
2. ``y += ((t * latent) @ U^T) * u1``: ``U^T`` is ``[r, N]`` signs; a program covers ``BLOCK_N`` outputs and
   ``J_ITERS`` blocks of ``BLOCK_J`` ranks, scales its partial sum by ``u1`` and adds it atomically into ``y``.

All scalings are fused into the two passes. A layer with a residual path runs both stages for each path into the
same ``y``. Rows of ``x`` (``M``) are a grid dimension: prefill runs the GEMV per row.

Sign words: the checkpoint packs signs 8 per byte, bit ``k % 8`` of byte ``k // 8``; :func:`sign_words` regroups
four bytes into one int32 (byte ``b`` at bits ``8 b .. 8 b + 7``), so element ``k`` is bit ``k % 32`` of word
``k // 32`` and a kernel loads 32 signs per access. For rows of a multiple of 4 bytes on a little-endian machine
that is the bytes' own memory layout, so :func:`word_view` is a zero-copy view (:func:`prepare_path`).
"""
from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from bitforge.runtime.formats.binary import BinaryLowRankPath
from bitforge.runtime.llm.triton_common import check_device, check_tensor, interpreting, tl, triton
from bitforge.toolchain.errors import BitforgeError

__all__ = ["WordPath", "sign_words", "word_view", "prepare_path", "binary_lowrank_gemv", "ROWS_CONFIGS",
           "COLS_CONFIGS", "ROWS_TUNED", "COLS_TUNED"]


def sign_words(packed: torch.Tensor) -> torch.Tensor:
    """uint8 sign bytes ``[rows, nbytes]`` -> int32 words ``[rows, ceil(nbytes / 4)]`` (zero padded), little-endian
    byte order computed explicitly, so the result does not depend on the machine's byte order."""
    if packed.dtype != torch.uint8 or packed.dim() != 2:
        raise BitforgeError(f"sign_words: expected uint8 [rows, bytes] signs, got {packed.dtype} "
                            f"{tuple(packed.shape)}")
    rows, nbytes = packed.shape
    b = torch.nn.functional.pad(packed, (0, -nbytes % 4)).reshape(rows, -1, 4).to(torch.int64)
    v = (b << torch.tensor([0, 8, 16, 24], device=packed.device)).sum(-1)
    return torch.where(v >= 1 << 31, v - (1 << 32), v).to(torch.int32).contiguous()


@dataclass(frozen=True)
class WordPath:
    """One binary low-rank path with its signs regrouped in int32 words (float16 scale vectors as stored)."""

    u_words: torch.Tensor   # int32 [r, ceil(N / 32)]  U^T
    v_words: torch.Tensor   # int32 [r, ceil(K / 32)]  V^T
    u1: torch.Tensor        # [N]
    latent: torch.Tensor    # [r]
    v2: torch.Tensor        # [K]

    @property
    def shape(self) -> tuple[int, int]:
        return (self.u1.numel(), self.v2.numel())

    @property
    def rank(self) -> int:
        return self.latent.numel()


def word_view(packed: torch.Tensor) -> torch.Tensor:
    """:func:`sign_words` without a copy where it can: on a little-endian machine (every CUDA host) a contiguous
    row of a multiple of 4 bytes already *is* its words in memory, so ``view(int32)`` gives them for free. The
    packed modules call this on every forward (they keep the checkpoint's bytes), so the copy is avoided for the
    shapes real models have (N and K multiples of 32); other rows are regrouped (tests check both agree)."""
    if (sys.byteorder == "little" and packed.dtype == torch.uint8 and packed.dim() == 2
            and packed.shape[1] % 4 == 0 and packed.is_contiguous()):
        return packed.view(torch.int32)
    return sign_words(packed)


def prepare_path(path: BinaryLowRankPath) -> WordPath:
    """A stored path with its sign bytes as words (:func:`word_view`: a view where the layout allows)."""
    return WordPath(word_view(path.u_signs), word_view(path.v_signs), path.u1.contiguous(),
                    path.latent.contiguous(), path.v2.contiguous())


@triton.jit
def _rows_kernel(x_ptr, v2_ptr, words_ptr, t_ptr, R, K, n_words, stride_xm, stride_tm,
                 BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr, K_ITERS: tl.constexpr):
    """t[m, j] += sum_k (x[m, k] * v2[k]) * sign[j, k] over this program's K range."""
    pid_r = tl.program_id(0)
    pid_k = tl.program_id(1)
    m = tl.program_id(2)
    offs_r = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    r_mask = offs_r < R
    acc = tl.zeros((BLOCK_R,), dtype=tl.float32)
    k_start = pid_k * (BLOCK_K * K_ITERS)
    for i in tl.static_range(K_ITERS):
        offs_k = k_start + i * BLOCK_K + tl.arange(0, BLOCK_K)
        k_mask = offs_k < K
        x = tl.load(x_ptr + m * stride_xm + offs_k, mask=k_mask, other=0.0).to(tl.float32)
        x = x * tl.load(v2_ptr + offs_k, mask=k_mask, other=0.0).to(tl.float32)
        w = tl.load(words_ptr + offs_r[:, None] * n_words + (offs_k[None, :] >> 5),
                    mask=r_mask[:, None] & k_mask[None, :], other=0)
        bit = (w >> (offs_k[None, :] & 31)) & 1
        acc += tl.sum(tl.where(bit != 0, x[None, :], -x[None, :]), axis=1)
    tl.atomic_add(t_ptr + m * stride_tm + offs_r, acc, mask=r_mask)


@triton.jit
def _cols_kernel(t_ptr, latent_ptr, words_ptr, u1_ptr, y_ptr, N, R, n_words, stride_tm, stride_ym,
                 BLOCK_N: tl.constexpr, BLOCK_J: tl.constexpr, J_ITERS: tl.constexpr):
    """y[m, n] += u1[n] * sum_j (t[m, j] * latent[j]) * sign[j, n] over this program's rank range."""
    pid_n = tl.program_id(0)
    pid_j = tl.program_id(1)
    m = tl.program_id(2)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    j_start = pid_j * (BLOCK_J * J_ITERS)
    for i in tl.static_range(J_ITERS):
        offs_j = j_start + i * BLOCK_J + tl.arange(0, BLOCK_J)
        j_mask = offs_j < R
        t = tl.load(t_ptr + m * stride_tm + offs_j, mask=j_mask, other=0.0)
        t = t * tl.load(latent_ptr + offs_j, mask=j_mask, other=0.0).to(tl.float32)
        w = tl.load(words_ptr + offs_j[:, None] * n_words + (offs_n[None, :] >> 5),
                    mask=j_mask[:, None] & n_mask[None, :], other=0)
        bit = (w >> (offs_n[None, :] & 31)) & 1
        acc += tl.sum(tl.where(bit != 0, t[:, None], -t[:, None]), axis=0)
    acc = acc * tl.load(u1_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)
    tl.atomic_add(y_ptr + m * stride_ym + offs_n, acc, mask=n_mask)


ROWS_CONFIGS = [triton.Config({"BLOCK_R": br, "BLOCK_K": bk, "K_ITERS": it}, num_warps=w)
                for br in (16, 32, 64) for bk in (128, 256) for it in (1, 2, 4) for w in (2, 4)]
COLS_CONFIGS = [triton.Config({"BLOCK_N": bn, "BLOCK_J": bj, "J_ITERS": it}, num_warps=w)
                for bn in (64, 128, 256) for bj in (16, 32, 64) for it in (1, 2, 4) for w in (2, 4)]
ROWS_TUNED = triton.autotune(ROWS_CONFIGS, key=["R", "K"], reset_to_zero=["t_ptr"])(_rows_kernel)
# restore, not zero: y already holds the paths before this one while a residual path is tuned
COLS_TUNED = triton.autotune(COLS_CONFIGS, key=["N", "R"], restore_value=["y_ptr"])(_cols_kernel)
ROWS_KEYS = ("BLOCK_R", "BLOCK_K", "K_ITERS")
COLS_KEYS = ("BLOCK_N", "BLOCK_J", "J_ITERS")


def _check_path(path: WordPath, i: int, shape: tuple[int, int]) -> None:
    n, k = shape
    r = path.rank
    name = f"binary_lowrank_gemv: path {i}"
    check_tensor(name, "u_words", path.u_words, (r, -(-n // 32)), (torch.int32,))
    check_tensor(name, "v_words", path.v_words, (r, -(-k // 32)), (torch.int32,))
    floats = (torch.float16, torch.float32)
    check_tensor(name, "u1", path.u1, (n,), floats)
    check_tensor(name, "latent", path.latent, (r,), floats)
    check_tensor(name, "v2", path.v2, (k,), floats)


def binary_lowrank_gemv(x: torch.Tensor, paths: Sequence[WordPath | BinaryLowRankPath],
                        config: dict | None = None) -> torch.Tensor:
    """``x @ W_hat^T`` for ``x`` ``[M, K]`` and a layer made of ``paths`` (primary first, then the residual).

    ``config``: launch sizes of both stages, ``{"BLOCK_R", "BLOCK_K", "K_ITERS", "BLOCK_N", "BLOCK_J",
    "J_ITERS"}``; ``None`` autotunes each stage over :data:`ROWS_CONFIGS` / :data:`COLS_CONFIGS` (under the
    interpreter, which cannot time trials: their first entries). Returns ``[M, N]`` in ``x``'s dtype.
    """
    if not paths:
        raise BitforgeError("binary_lowrank_gemv: a layer needs at least one path")
    paths = [p if isinstance(p, WordPath) else prepare_path(p) for p in paths]
    shape = paths[0].shape
    n, k = shape
    if x.dim() != 2 or x.shape[1] != k or x.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise BitforgeError(f"binary_lowrank_gemv: x is {x.dtype} {tuple(x.shape)}, expected a float [M, {k}]")
    for i, p in enumerate(paths):
        _check_path(p, i, shape)
        check_device("binary_lowrank_gemv", x, p.u_words, p.v_words, p.u1, p.latent, p.v2)
    m = x.shape[0]
    xc = x.contiguous()
    y = torch.zeros((m, n), dtype=torch.float32, device=x.device)
    tune = config is None and not interpreting()
    if config is None:
        config = {**ROWS_CONFIGS[0].kwargs, **COLS_CONFIGS[0].kwargs}
    rows_cfg = {key: config[key] for key in ROWS_KEYS}
    cols_cfg = {key: config[key] for key in COLS_KEYS}
    for p in paths:
        r = p.rank
        t = torch.zeros((m, r), dtype=torch.float32, device=x.device)
        rows_args = (xc, p.v2, p.v_words, t, r, k, p.v_words.shape[1], xc.stride(0), t.stride(0))

        def rows_grid(meta, r=r):
            return (triton.cdiv(r, meta["BLOCK_R"]), triton.cdiv(k, meta["BLOCK_K"] * meta["K_ITERS"]), m)

        cols_args = (t, p.latent, p.u_words, p.u1, y, n, r, p.u_words.shape[1], t.stride(0), y.stride(0))

        def cols_grid(meta, r=r):
            return (triton.cdiv(n, meta["BLOCK_N"]), triton.cdiv(r, meta["BLOCK_J"] * meta["J_ITERS"]), m)

        if tune:
            ROWS_TUNED[rows_grid](*rows_args)
            COLS_TUNED[cols_grid](*cols_args)
        else:
            _rows_kernel[rows_grid(rows_cfg)](*rows_args, **rows_cfg)
            _cols_kernel[cols_grid(cols_cfg)](*cols_args, **cols_cfg)
    return y.to(x.dtype)
