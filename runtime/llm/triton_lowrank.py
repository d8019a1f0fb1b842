"""Triton kernels for a uniform-v1 base plus a float16 low-rank correction (SRR, QERA: compress/lowrank.py).

The checkpoint stores ``W_hat = Q + L R`` with ``Q`` in ``uniform-v1`` (tensors ``q.codes``, ``q.scale``,
``q.zero``), ``L = lr_left [N, r]`` and ``R = lr_right [r, K]``, so ``y = x W_hat^T = x Q^T + (x R^T) L^T``.
Both terms are linear in ``x``, which is what makes one pass over ``x`` enough: a program that holds a chunk of
``x`` (a K range) uses it for the decoded ``Q`` tile and for the matching columns of ``R``, and
``sum_chunks L (R_chunk x_chunk)`` is the full correction. So:

- :func:`lowrank_gemv` (decode): the split-K GEMV of :mod:`.triton_uniform`, each program also reducing
  ``t = R[:, chunk] x_chunk`` (``[r]``, float32) and adding ``L[n_block] t`` to its partial sum before the one
  atomic add.
- :func:`lowrank_gemm` (prefill, batches): the tiled GEMM, with a second accumulator ``t = x R^T``
  (``[BLOCK_M, r]``) built from the same ``x`` tiles, and ``t L^T`` added to the output tile at the end.

Every N block re-reads ``R`` (``r K`` float16, 256 KiB for r = 32, K = 4096): small enough to stay in L2, so the
extra DRAM traffic is one read of ``R``, not one per block. The rank is padded to a power of two (at least 16, the
smallest ``tl.dot`` operand) with masked loads. Autotune lists are :mod:`.triton_uniform`'s, keyed by
``(M, N, K, GROUP, BITS, RANK)``.
"""
from __future__ import annotations

import torch

from bitforge.runtime.llm import triton_uniform as tu
from bitforge.runtime.llm.triton_common import check_device, check_tensor, interpreting, tl, triton
from bitforge.toolchain.errors import BitforgeError

__all__ = ["GEMV_TUNED", "GEMM_TUNED", "lowrank_gemv", "lowrank_gemm", "lowrank_linear"]

decode_tile = tu.decode_tile


@triton.jit
def _gemv_kernel(x_ptr, w_ptr, s_ptr, z_ptr, l_ptr, r_ptr, y_ptr, M, N, K, RANK, row_bytes, n_groups,
                 stride_xm, stride_ym, GROUP: tl.constexpr, BITS: tl.constexpr, RANK_BLOCK: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, K_ITERS: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    m = tl.program_id(2)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_r = tl.arange(0, RANK_BLOCK)
    n_mask = offs_n < N
    r_mask = offs_r < RANK
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    t = tl.zeros((RANK_BLOCK,), dtype=tl.float32)
    k_start = pid_k * (BLOCK_K * K_ITERS)
    for i in tl.static_range(K_ITERS):
        offs_k = k_start + i * BLOCK_K + tl.arange(0, BLOCK_K)
        k_mask = offs_k < K
        x = tl.load(x_ptr + m * stride_xm + offs_k, mask=k_mask, other=0.0).to(tl.float32)
        w = decode_tile(w_ptr, s_ptr, z_ptr, offs_n[:, None], offs_k[None, :], n_mask[:, None] & k_mask[None, :],
                        row_bytes, n_groups, GROUP, BITS)
        acc += tl.sum(w * x[None, :], axis=1)
        r = tl.load(r_ptr + offs_r[:, None] * K + offs_k[None, :], mask=r_mask[:, None] & k_mask[None, :],
                    other=0.0).to(tl.float32)
        t += tl.sum(r * x[None, :], axis=1)
    left = tl.load(l_ptr + offs_n[:, None] * RANK + offs_r[None, :], mask=n_mask[:, None] & r_mask[None, :],
                   other=0.0).to(tl.float32)
    acc += tl.sum(left * t[None, :], axis=1)
    tl.atomic_add(y_ptr + m * stride_ym + offs_n, acc, mask=n_mask)


@triton.jit
def _gemm_kernel(x_ptr, w_ptr, s_ptr, z_ptr, l_ptr, r_ptr, y_ptr, M, N, K, RANK, row_bytes, n_groups,
                 stride_xm, stride_ym, GROUP: tl.constexpr, BITS: tl.constexpr, RANK_BLOCK: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, F32: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_r = tl.arange(0, RANK_BLOCK)
    m_mask = offs_m < M
    n_mask = offs_n < N
    r_mask = offs_r < RANK
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    t = tl.zeros((BLOCK_M, RANK_BLOCK), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        k_mask = offs_k < K
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :], mask=m_mask[:, None] & k_mask[None, :],
                    other=0.0)
        w = decode_tile(w_ptr, s_ptr, z_ptr, offs_n[None, :], offs_k[:, None], k_mask[:, None] & n_mask[None, :],
                        row_bytes, n_groups, GROUP, BITS)
        r = tl.load(r_ptr + offs_r[None, :] * K + offs_k[:, None], mask=k_mask[:, None] & r_mask[None, :],
                    other=0.0)
        if F32:
            acc = tl.dot(x, w, acc, input_precision="ieee")
            t = tl.dot(x, r.to(tl.float32), t, input_precision="ieee")
        else:
            acc = tl.dot(x, w.to(x.dtype), acc)
            t = tl.dot(x, r.to(x.dtype), t)
    left = tl.load(l_ptr + offs_n[None, :] * RANK + offs_r[:, None], mask=r_mask[:, None] & n_mask[None, :],
                   other=0.0).to(tl.float32)
    acc = tl.dot(t, left, acc, input_precision="ieee")
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=m_mask[:, None] & n_mask[None, :])


KEY = ["M", "N", "K", "GROUP", "BITS", "RANK"]
GEMV_TUNED = triton.autotune(tu.GEMV_CONFIGS, key=KEY, reset_to_zero=["y_ptr"])(_gemv_kernel)
GEMM_TUNED = triton.autotune(tu.GEMM_CONFIGS, key=KEY)(_gemm_kernel)


def _check_factors(kernel: str, left: torch.Tensor, right: torch.Tensor, shape: tuple[int, int]) -> int:
    n, k = shape
    if left.dim() != 2 or left.shape[0] != n:
        raise BitforgeError(f"{kernel}: lr_left is {tuple(left.shape)}, expected [{n}, rank]")
    rank = left.shape[1]
    check_tensor(kernel, "lr_left", left, (n, rank), tu.FLOATS)
    check_tensor(kernel, "lr_right", right, (rank, k), tu.FLOATS)
    if rank < 1:
        raise BitforgeError(f"{kernel}: the low-rank correction has rank 0; use the uniform kernels")
    return rank


def _launch(kernel_name, x, packed, scale, zero, bits, group, shape, left, right):
    g = tu.check_inputs(kernel_name, x, packed, scale, zero, bits, group, shape)
    rank = _check_factors(kernel_name, left, right, shape)
    check_device(kernel_name, x, left, right)
    rank_block = max(16, triton.next_power_of_2(rank))
    return g, rank, rank_block


def lowrank_gemv(x: torch.Tensor, packed: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int,
                 group: int | None, shape: tuple[int, int], left: torch.Tensor, right: torch.Tensor,
                 config: dict | None = None) -> torch.Tensor:
    """``x (Q + L R)^T`` for few rows of ``x`` ([M, K]): split-K, atomic float32 accumulation, one pass over x.

    ``config`` as :func:`.triton_uniform.uniform_gemv`'s. Returns ``[M, N]`` in ``x``'s dtype.
    """
    g, rank, rank_block = _launch("lowrank_gemv", x, packed, scale, zero, bits, group, shape, left, right)
    n, k = shape
    m = x.shape[0]
    xc, pc, sc, zc, lc, rc = (t.contiguous() for t in (x, packed, scale, zero, left, right))
    y = torch.zeros((m, n), dtype=torch.float32, device=x.device)
    args = (xc, pc, sc, zc, lc, rc, y, m, n, k, rank, pc.shape[1], k // g, xc.stride(0), y.stride(0))

    def grid(meta):
        return (triton.cdiv(n, meta["BLOCK_N"]), triton.cdiv(k, meta["BLOCK_K"] * meta["K_ITERS"]), m)

    if config is None and not interpreting():
        GEMV_TUNED[grid](*args, GROUP=g, BITS=bits, RANK_BLOCK=rank_block)
    else:
        config = config or tu.GEMV_CONFIGS[0].all_kwargs()
        _gemv_kernel[grid(config)](*args, GROUP=g, BITS=bits, RANK_BLOCK=rank_block, **config)
    return y.to(x.dtype)


def lowrank_gemm(x: torch.Tensor, packed: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int,
                 group: int | None, shape: tuple[int, int], left: torch.Tensor, right: torch.Tensor,
                 config: dict | None = None) -> torch.Tensor:
    """``x (Q + L R)^T`` for a batch or a prompt ([M, K]), tiled. ``config`` as
    :func:`.triton_uniform.uniform_gemm`'s. Returns ``[M, N]`` in ``x``'s dtype."""
    g, rank, rank_block = _launch("lowrank_gemm", x, packed, scale, zero, bits, group, shape, left, right)
    n, k = shape
    m = x.shape[0]
    xc, pc, sc, zc, lc, rc = (t.contiguous() for t in (x, packed, scale, zero, left, right))
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    args = (xc, pc, sc, zc, lc, rc, y, m, n, k, rank, pc.shape[1], k // g, xc.stride(0), y.stride(0))

    def grid(meta):
        return (triton.cdiv(m, meta["BLOCK_M"]), triton.cdiv(n, meta["BLOCK_N"]))

    f32 = x.dtype == torch.float32
    if config is None and not interpreting():
        GEMM_TUNED[grid](*args, GROUP=g, BITS=bits, RANK_BLOCK=rank_block, F32=f32)
    else:
        config = config or tu.GEMM_CONFIGS[0].all_kwargs()
        _gemm_kernel[grid(config)](*args, GROUP=g, BITS=bits, RANK_BLOCK=rank_block, F32=f32, **config)
    return y


def lowrank_linear(x: torch.Tensor, packed: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int,
                   group: int | None, shape: tuple[int, int], left: torch.Tensor, right: torch.Tensor,
                   gemv_config: dict | None = None, gemm_config: dict | None = None) -> torch.Tensor:
    """``x (Q + L R)^T`` for ``x`` of any leading shape ``[..., K]``: the GEMV for one row, the GEMM otherwise."""
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1])
    if x2.shape[0] == 1:
        y = lowrank_gemv(x2, packed, scale, zero, bits, group, shape, left, right, gemv_config)
    else:
        y = lowrank_gemm(x2, packed, scale, zero, bits, group, shape, left, right, gemm_config)
    return y.reshape(*lead, shape[0])
