"""Triton kernels for uniform group-wise weights (layout ``uniform-v1``, :mod:`bitforge.runtime.formats.uniform`).

``y = x @ W^T`` with ``W[n, k] = (code[n, k] + zero[n, k // group]) * scale[n, k // group]`` decoded in registers
(float32, the formats module's rule, so the decoded weight is bit-identical to the reference's) from the packed
byte stream itself: code ``k`` of row ``n`` starts at stream bit ``k * bits``, i.e. byte ``k * bits >> 3`` at
shift ``k * bits & 7``; for 3, 5, 6 and 7 bits the next byte is OR-ed in above it because a code may straddle two.
No repacking: the kernels read the checkpoint's tensors as they are.

Two kernels, as GemLite splits them (Badri & Shaji, "GemLite", 2024):

- :func:`uniform_gemv` for decode (``M`` rows of ``x``, typically 1): reverse split-K. Each program covers
  ``BLOCK_N`` outputs and ``K_ITERS`` blocks of ``BLOCK_K`` inputs, reduces them in float32 and adds the partial
  sum atomically into a zeroed float32 output, so a skinny layer still spreads over every SM.
- :func:`uniform_gemm` for prefill and batches of 2-64: a tiled ``[BLOCK_M, BLOCK_N]`` output, the weight tile
  ``[BLOCK_K, BLOCK_N]`` decoded per K step and fed to ``tl.dot`` (float32 ``x``: IEEE float32 products, no
  TF32; float16/bfloat16 ``x``: the decoded tile is rounded to ``x``'s dtype first, GemLite's choice).

Each kernel has one autotune list keyed by ``(M, N, K, GROUP, BITS)``; ``config=`` skips autotuning and launches
one given configuration (the interpreter would otherwise run every configuration in full). Under the interpreter
``config=None`` launches the list's first configuration: autotuning times the trials with a GPU driver's timer,
which the interpreter does not have.
"""
from __future__ import annotations

import torch

from bitforge.runtime.formats.uniform import row_bytes as packed_row_bytes
from bitforge.runtime.llm.triton_common import check_device, check_tensor, interpreting, tl, triton
from bitforge.toolchain.errors import BitforgeError

__all__ = ["GEMV_CONFIGS", "GEMM_CONFIGS", "GEMV_TUNED", "GEMM_TUNED", "uniform_gemv", "uniform_gemm",
           "uniform_linear", "uniform_dequantize",
           "decode_tile", "check_inputs", "FLOATS"]

FLOATS = (torch.float16, torch.bfloat16, torch.float32)


@triton.jit
def decode_tile(w_ptr, s_ptr, z_ptr, rows, cols, mask, row_bytes, n_groups,
                GROUP: tl.constexpr, BITS: tl.constexpr):
    """float32 weights at (``rows``, ``cols``) (broadcastable int tensors) of a ``uniform-v1`` packed matrix."""
    bit = cols * BITS
    byte = bit >> 3
    addr = w_ptr + rows * row_bytes + byte
    word = tl.load(addr, mask=mask, other=0).to(tl.int32)
    if 8 % BITS != 0:   # a code may straddle two bytes; the mask keeps the read inside the row
        nxt = tl.load(addr + 1, mask=mask & (byte + 1 < row_bytes), other=0).to(tl.int32)
        word = word | (nxt << 8)
    code = (word >> (bit & 7)) & ((1 << BITS) - 1)
    g = rows * n_groups + cols // GROUP
    s = tl.load(s_ptr + g, mask=mask, other=0.0).to(tl.float32)
    z = tl.load(z_ptr + g, mask=mask, other=0.0).to(tl.float32)
    return (code.to(tl.float32) + z) * s


@triton.jit
def _dequant_kernel(w_ptr, s_ptr, z_ptr, out_ptr, N, K, row_bytes, n_groups,
                    GROUP: tl.constexpr, BITS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (offs_n[:, None] < N) & (offs_k[None, :] < K)
    w = decode_tile(w_ptr, s_ptr, z_ptr, offs_n[:, None], offs_k[None, :], mask, row_bytes, n_groups, GROUP, BITS)
    tl.store(out_ptr + offs_n[:, None] * K + offs_k[None, :], w, mask=mask)


@triton.jit
def _gemv_kernel(x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, M, N, K, row_bytes, n_groups, stride_xm, stride_ym,
                 GROUP: tl.constexpr, BITS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 K_ITERS: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    m = tl.program_id(2)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    k_start = pid_k * (BLOCK_K * K_ITERS)
    for i in tl.static_range(K_ITERS):
        offs_k = k_start + i * BLOCK_K + tl.arange(0, BLOCK_K)
        k_mask = offs_k < K
        x = tl.load(x_ptr + m * stride_xm + offs_k, mask=k_mask, other=0.0).to(tl.float32)
        w = decode_tile(w_ptr, s_ptr, z_ptr, offs_n[:, None], offs_k[None, :], n_mask[:, None] & k_mask[None, :],
                        row_bytes, n_groups, GROUP, BITS)
        acc += tl.sum(w * x[None, :], axis=1)
    tl.atomic_add(y_ptr + m * stride_ym + offs_n, acc, mask=n_mask)


@triton.jit
def _gemm_kernel(x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, M, N, K, row_bytes, n_groups, stride_xm, stride_ym,
                 GROUP: tl.constexpr, BITS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr, F32: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    m_mask = offs_m < M
    n_mask = offs_n < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        k_mask = offs_k < K
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :], mask=m_mask[:, None] & k_mask[None, :],
                    other=0.0)
        w = decode_tile(w_ptr, s_ptr, z_ptr, offs_n[None, :], offs_k[:, None], k_mask[:, None] & n_mask[None, :],
                        row_bytes, n_groups, GROUP, BITS)
        if F32:
            acc = tl.dot(x, w, acc, input_precision="ieee")
        else:
            acc = tl.dot(x, w.to(x.dtype), acc)
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=m_mask[:, None] & n_mask[None, :])


KEY = ["M", "N", "K", "GROUP", "BITS"]
GEMV_CONFIGS = [triton.Config({"BLOCK_N": bn, "BLOCK_K": bk, "K_ITERS": it}, num_warps=w)
                for bn in (32, 64, 128) for bk in (64, 128) for it in (1, 2, 4) for w in (2, 4)]
GEMM_CONFIGS = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, num_warps=w, num_stages=s)
                for bm in (16, 32, 64) for bn in (64, 128) for bk in (32, 64) for w, s in ((4, 3), (8, 4))]
GEMV_TUNED = triton.autotune(GEMV_CONFIGS, key=KEY, reset_to_zero=["y_ptr"])(_gemv_kernel)
GEMM_TUNED = triton.autotune(GEMM_CONFIGS, key=KEY)(_gemm_kernel)


def check_inputs(kernel: str, x: torch.Tensor | None, packed: torch.Tensor, scale: torch.Tensor,
                 zero: torch.Tensor, bits: int, group: int | None, shape: tuple[int, int]) -> int:
    """Validate a uniform-v1 weight (and ``x``) against ``shape`` for ``kernel``; return the effective group
    (``K`` for one pair per row). The low-rank kernels check their base with it too."""
    n, k = shape
    if not 1 <= bits <= 8:
        raise BitforgeError(f"{kernel}: bits {bits} not supported; expected 1..8")
    g = k if group is None else group
    if g <= 0 or k % g:
        raise BitforgeError(f"{kernel}: group {group} does not divide the input dimension {k}")
    check_tensor(kernel, "packed", packed, (n, packed_row_bytes(k, bits)), (torch.uint8,))
    check_tensor(kernel, "scale", scale, (n, k // g), FLOATS)
    check_tensor(kernel, "zero", zero, (n, k // g), FLOATS)
    tensors = (packed, scale, zero)
    if x is not None:
        if x.dim() != 2 or x.shape[1] != k or x.dtype not in FLOATS:
            raise BitforgeError(f"{kernel}: x is {x.dtype} {tuple(x.shape)}, expected a float [M, {k}]")
        tensors = (x, *tensors)
    check_device(kernel, *tensors)
    return g


def uniform_dequantize(packed: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int, group: int | None,
                       shape: tuple[int, int]) -> torch.Tensor:
    """float32 ``[N, K]`` weight decoded by the kernels' own :func:`decode_tile` (to check it bit for bit)."""
    g = check_inputs("uniform_dequantize", None, packed, scale, zero, bits, group, shape)
    n, k = shape
    out = torch.empty((n, k), dtype=torch.float32, device=packed.device)
    grid = (triton.cdiv(n, 32), triton.cdiv(k, 32))
    _dequant_kernel[grid](packed.contiguous(), scale.contiguous(), zero.contiguous(), out, n, k, packed.shape[1],
                          k // g, GROUP=g, BITS=bits, BLOCK_N=32, BLOCK_K=32)
    return out


def uniform_gemv(x: torch.Tensor, packed: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int,
                 group: int | None, shape: tuple[int, int], config: dict | None = None) -> torch.Tensor:
    """``x @ W^T`` for few rows of ``x`` ([M, K], M = 1 at decode): split-K, atomic float32 accumulation.

    ``config``: ``{"BLOCK_N", "BLOCK_K", "K_ITERS"}`` (optionally ``num_warps``) to launch one configuration;
    ``None`` autotunes over :data:`GEMV_CONFIGS`. Returns ``[M, N]`` in ``x``'s dtype.
    """
    g = check_inputs("uniform_gemv", x, packed, scale, zero, bits, group, shape)
    n, k = shape
    m = x.shape[0]
    xc, pc, sc, zc = (t.contiguous() for t in (x, packed, scale, zero))
    y = torch.zeros((m, n), dtype=torch.float32, device=x.device)
    args = (xc, pc, sc, zc, y, m, n, k, pc.shape[1], k // g, xc.stride(0), y.stride(0))

    def grid(meta):
        return (triton.cdiv(n, meta["BLOCK_N"]), triton.cdiv(k, meta["BLOCK_K"] * meta["K_ITERS"]), m)

    if config is None and not interpreting():
        GEMV_TUNED[grid](*args, GROUP=g, BITS=bits)
    else:
        config = config or GEMV_CONFIGS[0].all_kwargs()
        _gemv_kernel[grid(config)](*args, GROUP=g, BITS=bits, **config)
    return y.to(x.dtype)


def uniform_gemm(x: torch.Tensor, packed: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int,
                 group: int | None, shape: tuple[int, int], config: dict | None = None) -> torch.Tensor:
    """``x @ W^T`` for a batch or a prompt ([M, K]): tiled, ``tl.dot`` on decoded weight tiles.

    ``config``: ``{"BLOCK_M", "BLOCK_N", "BLOCK_K"}`` (optionally ``num_warps``, ``num_stages``); ``None``
    autotunes over :data:`GEMM_CONFIGS`. Returns ``[M, N]`` in ``x``'s dtype.
    """
    g = check_inputs("uniform_gemm", x, packed, scale, zero, bits, group, shape)
    n, k = shape
    m = x.shape[0]
    xc, pc, sc, zc = (t.contiguous() for t in (x, packed, scale, zero))
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    args = (xc, pc, sc, zc, y, m, n, k, pc.shape[1], k // g, xc.stride(0), y.stride(0))

    def grid(meta):
        return (triton.cdiv(m, meta["BLOCK_M"]), triton.cdiv(n, meta["BLOCK_N"]))

    f32 = x.dtype == torch.float32
    if config is None and not interpreting():
        GEMM_TUNED[grid](*args, GROUP=g, BITS=bits, F32=f32)
    else:
        config = config or GEMM_CONFIGS[0].all_kwargs()
        _gemm_kernel[grid(config)](*args, GROUP=g, BITS=bits, F32=f32, **config)
    return y


def uniform_linear(x: torch.Tensor, packed: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int,
                   group: int | None, shape: tuple[int, int], gemv_config: dict | None = None,
                   gemm_config: dict | None = None) -> torch.Tensor:
    """``x @ W^T`` for ``x`` of any leading shape ``[..., K]``: the GEMV for one row, the GEMM otherwise."""
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1])
    if x2.shape[0] == 1:
        y = uniform_gemv(x2, packed, scale, zero, bits, group, shape, gemv_config)
    else:
        y = uniform_gemm(x2, packed, scale, zero, bits, group, shape, gemm_config)
    return y.reshape(*lead, shape[0])
