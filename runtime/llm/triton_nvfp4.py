"""Triton kernels for NVFP4 weights (layout ``nvfp4-v1``, :mod:`bitforge.runtime.formats.nvfp4`), weight-only.

Hopper-class GPUs have no FP4 tensor-core path, so the kernels unpack the E2M1 pairs in registers and run the
matmul in the activations' precision (float32 accumulation): byte ``j`` of a row holds element ``2 j`` in its low
nibble and ``2 j + 1`` in its high nibble (the project's one nibble order, PyTorch's ``float4_e2m1fn_x2`` order);
nibble = ``sign << 3 | magnitude``. Both small formats are decoded with integer arithmetic and a power of two
built from its float32 bit pattern, never with an fp8 cast (Triton's interpreter rounds some fp8 conversions
differently from the GPU, triton-lang/triton#8322), so the decoded values are exact by construction:

- E2M1 magnitude ``e m`` (2 + 1 bits): ``2 * value = m`` for ``e = 0``, else ``(2 + m) << (e - 1)``;
- E4M3 code ``s eeee mmm``: ``m * 2^-9`` for ``e = 0``, else ``(8 + m) * 2^(e - 10)``; ``0x7F``/``0xFF`` is NaN.

Their product is exact in float32 (the formats module's decoding rule). The FP32 scale above them: the
``"tensor"`` variant has one per matrix, folded into the output (``y = (x @ (e2m1 * e4m3)^T) * g``, one multiply
per output instead of one per weight); the ``"block128"`` variant has one per 128 inputs of a row and multiplies
the decoded weight in registers, ``(e2m1 * e4m3) * g``, the formats module's order, so its decoded weight is
bit-identical to the reference's.

:func:`nvfp4_gemv` (decode: split-K, atomic float32 adds into a zeroed output) and :func:`nvfp4_gemm` (prefill and
batches: tiled, ``tl.dot``) follow :mod:`.triton_uniform`; autotune lists keyed by ``(M, N, K, GLOBAL_PER_ROW)``.
"""
from __future__ import annotations

import torch

from bitforge.runtime.formats.nvfp4 import BLOCK, OUTER_BLOCK, VARIANTS
from bitforge.runtime.llm.triton_common import check_device, check_tensor, interpreting, tl, triton
from bitforge.toolchain.errors import BitforgeError

__all__ = ["GEMV_CONFIGS", "GEMM_CONFIGS", "GEMV_TUNED", "GEMM_TUNED", "nvfp4_gemv", "nvfp4_gemm",
           "nvfp4_linear", "nvfp4_dequantize", "decode_nvfp4_tile"]

FLOATS = (torch.float16, torch.bfloat16, torch.float32)


@triton.jit
def pow2(k):
    """2.0 ** k for integer tensors k in the normal float32 range, from the bit pattern (exact)."""
    return ((k + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def decode_nvfp4_tile(codes_ptr, bs_ptr, gs_ptr, rows, cols, mask, K, n_outer, GLOBAL_PER_ROW: tl.constexpr):
    """float32 weights at (``rows``, ``cols``): ``e2m1 * e4m3``, times the FP32 scale for ``block128`` only."""
    byte = tl.load(codes_ptr + rows * (K // 2) + (cols >> 1), mask=mask, other=0).to(tl.int32)
    nib = (byte >> ((cols & 1) * 4)) & 0xF
    e = (nib >> 1) & 3
    m = nib & 1
    twice = tl.where(e == 0, m, (2 + m) << tl.maximum(e - 1, 0))
    e2m1 = twice.to(tl.float32) * 0.5
    e2m1 = tl.where((nib & 8) != 0, -e2m1, e2m1)
    sc = tl.load(bs_ptr + rows * (K // 16) + (cols >> 4), mask=mask, other=0).to(tl.int32)
    se = (sc >> 3) & 0xF
    sm = sc & 7
    e4m3 = tl.where(se == 0, sm, 8 + sm).to(tl.float32) * pow2(tl.where(se == 0, -9, se - 10))
    nan = (sc * 0 + 0x7FC00000).to(tl.float32, bitcast=True)
    e4m3 = tl.where((se == 15) & (sm == 7), nan, e4m3)
    e4m3 = tl.where((sc & 0x80) != 0, -e4m3, e4m3)
    w = e2m1 * e4m3
    if GLOBAL_PER_ROW:
        g = tl.load(gs_ptr + rows * n_outer + (cols >> 7), mask=mask, other=0.0)
        w = w * g
    return w


@triton.jit
def _dequant_kernel(codes_ptr, bs_ptr, gs_ptr, out_ptr, N, K, n_outer, GLOBAL_PER_ROW: tl.constexpr,
                    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (offs_n[:, None] < N) & (offs_k[None, :] < K)
    w = decode_nvfp4_tile(codes_ptr, bs_ptr, gs_ptr, offs_n[:, None], offs_k[None, :], mask, K, n_outer,
                          GLOBAL_PER_ROW)
    if not GLOBAL_PER_ROW:
        w = w * tl.load(gs_ptr)
    tl.store(out_ptr + offs_n[:, None] * K + offs_k[None, :], w, mask=mask)


@triton.jit
def _gemv_kernel(x_ptr, codes_ptr, bs_ptr, gs_ptr, y_ptr, M, N, K, n_outer, stride_xm, stride_ym,
                 GLOBAL_PER_ROW: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, K_ITERS: tl.constexpr):
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
        w = decode_nvfp4_tile(codes_ptr, bs_ptr, gs_ptr, offs_n[:, None], offs_k[None, :],
                              n_mask[:, None] & k_mask[None, :], K, n_outer, GLOBAL_PER_ROW)
        acc += tl.sum(w * x[None, :], axis=1)
    if not GLOBAL_PER_ROW:
        acc = acc * tl.load(gs_ptr)
    tl.atomic_add(y_ptr + m * stride_ym + offs_n, acc, mask=n_mask)


@triton.jit
def _gemm_kernel(x_ptr, codes_ptr, bs_ptr, gs_ptr, y_ptr, M, N, K, n_outer, stride_xm, stride_ym,
                 GLOBAL_PER_ROW: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 F32: tl.constexpr):
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
        w = decode_nvfp4_tile(codes_ptr, bs_ptr, gs_ptr, offs_n[None, :], offs_k[:, None],
                              k_mask[:, None] & n_mask[None, :], K, n_outer, GLOBAL_PER_ROW)
        if F32:
            acc = tl.dot(x, w, acc, input_precision="ieee")
        else:
            acc = tl.dot(x, w.to(x.dtype), acc)
    if not GLOBAL_PER_ROW:
        acc = acc * tl.load(gs_ptr)
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=m_mask[:, None] & n_mask[None, :])


KEY = ["M", "N", "K", "GLOBAL_PER_ROW"]
GEMV_CONFIGS = [triton.Config({"BLOCK_N": bn, "BLOCK_K": bk, "K_ITERS": it}, num_warps=w)
                for bn in (32, 64, 128) for bk in (64, 128) for it in (1, 2, 4) for w in (2, 4)]
GEMM_CONFIGS = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, num_warps=w, num_stages=s)
                for bm in (16, 32, 64) for bn in (64, 128) for bk in (32, 64) for w, s in ((4, 3), (8, 4))]
GEMV_TUNED = triton.autotune(GEMV_CONFIGS, key=KEY, reset_to_zero=["y_ptr"])(_gemv_kernel)
GEMM_TUNED = triton.autotune(GEMM_CONFIGS, key=KEY)(_gemm_kernel)


def _check(kernel: str, x: torch.Tensor | None, codes: torch.Tensor, block_scales: torch.Tensor,
           global_scales: torch.Tensor, shape: tuple[int, int], variant: str) -> int:
    """Validate an NVFP4 weight (and ``x``) against ``shape``/``variant``; return the outer blocks per row."""
    n, k = shape
    if variant not in VARIANTS:
        raise BitforgeError(f"{kernel}: NVFP4 variant {variant!r}, expected one of {VARIANTS}")
    if k % BLOCK:
        raise BitforgeError(f"{kernel}: the input dimension {k} is not a multiple of the {BLOCK}-element block")
    n_outer = -(-k // OUTER_BLOCK)
    check_tensor(kernel, "codes", codes, (n, k // 2), (torch.uint8,))
    check_tensor(kernel, "block_scales", block_scales, (n, k // BLOCK), (torch.uint8,))
    check_tensor(kernel, "global_scales", global_scales, (1, 1) if variant == "tensor" else (n, n_outer),
                 (torch.float32,))
    tensors = (codes, block_scales, global_scales)
    if x is not None:
        if x.dim() != 2 or x.shape[1] != k or x.dtype not in FLOATS:
            raise BitforgeError(f"{kernel}: x is {x.dtype} {tuple(x.shape)}, expected a float [M, {k}]")
        tensors = (x, *tensors)
    check_device(kernel, *tensors)
    return n_outer


def nvfp4_dequantize(codes: torch.Tensor, block_scales: torch.Tensor, global_scales: torch.Tensor,
                     shape: tuple[int, int], variant: str) -> torch.Tensor:
    """float32 ``[N, K]`` weight decoded by the kernels' own :func:`decode_nvfp4_tile` (to check it bit for bit)."""
    n_outer = _check("nvfp4_dequantize", None, codes, block_scales, global_scales, shape, variant)
    n, k = shape
    out = torch.empty((n, k), dtype=torch.float32, device=codes.device)
    grid = (triton.cdiv(n, 32), triton.cdiv(k, 32))
    _dequant_kernel[grid](codes.contiguous(), block_scales.contiguous(), global_scales.contiguous(), out, n, k,
                          n_outer, GLOBAL_PER_ROW=variant != "tensor", BLOCK_N=32, BLOCK_K=32)
    return out


def nvfp4_gemv(x: torch.Tensor, codes: torch.Tensor, block_scales: torch.Tensor, global_scales: torch.Tensor,
               shape: tuple[int, int], variant: str, config: dict | None = None) -> torch.Tensor:
    """``x @ W^T`` for few rows of ``x`` ([M, K]): split-K, atomic float32 accumulation.

    ``config``: ``{"BLOCK_N", "BLOCK_K", "K_ITERS"}``; ``None`` autotunes over :data:`GEMV_CONFIGS` (under the
    interpreter, which cannot time trials: the first). Returns ``[M, N]`` in ``x``'s dtype.
    """
    n_outer = _check("nvfp4_gemv", x, codes, block_scales, global_scales, shape, variant)
    n, k = shape
    m = x.shape[0]
    xc, cc, bc, gc = (t.contiguous() for t in (x, codes, block_scales, global_scales))
    y = torch.zeros((m, n), dtype=torch.float32, device=x.device)
    args = (xc, cc, bc, gc, y, m, n, k, n_outer, xc.stride(0), y.stride(0))

    def grid(meta):
        return (triton.cdiv(n, meta["BLOCK_N"]), triton.cdiv(k, meta["BLOCK_K"] * meta["K_ITERS"]), m)

    per_row = variant != "tensor"
    if config is None and not interpreting():
        GEMV_TUNED[grid](*args, GLOBAL_PER_ROW=per_row)
    else:
        config = config or GEMV_CONFIGS[0].all_kwargs()
        _gemv_kernel[grid(config)](*args, GLOBAL_PER_ROW=per_row, **config)
    return y.to(x.dtype)


def nvfp4_gemm(x: torch.Tensor, codes: torch.Tensor, block_scales: torch.Tensor, global_scales: torch.Tensor,
               shape: tuple[int, int], variant: str, config: dict | None = None) -> torch.Tensor:
    """``x @ W^T`` for a batch or a prompt ([M, K]), tiled. ``config``: ``{"BLOCK_M", "BLOCK_N", "BLOCK_K"}``;
    ``None`` autotunes over :data:`GEMM_CONFIGS`. Returns ``[M, N]`` in ``x``'s dtype."""
    n_outer = _check("nvfp4_gemm", x, codes, block_scales, global_scales, shape, variant)
    n, k = shape
    m = x.shape[0]
    xc, cc, bc, gc = (t.contiguous() for t in (x, codes, block_scales, global_scales))
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    args = (xc, cc, bc, gc, y, m, n, k, n_outer, xc.stride(0), y.stride(0))

    def grid(meta):
        return (triton.cdiv(m, meta["BLOCK_M"]), triton.cdiv(n, meta["BLOCK_N"]))

    per_row, f32 = variant != "tensor", x.dtype == torch.float32
    if config is None and not interpreting():
        GEMM_TUNED[grid](*args, GLOBAL_PER_ROW=per_row, F32=f32)
    else:
        config = config or GEMM_CONFIGS[0].all_kwargs()
        _gemm_kernel[grid(config)](*args, GLOBAL_PER_ROW=per_row, F32=f32, **config)
    return y


def nvfp4_linear(x: torch.Tensor, codes: torch.Tensor, block_scales: torch.Tensor, global_scales: torch.Tensor,
                 shape: tuple[int, int], variant: str, gemv_config: dict | None = None,
                 gemm_config: dict | None = None) -> torch.Tensor:
    """``x @ W^T`` for ``x`` of any leading shape ``[..., K]``: the GEMV for one row, the GEMM otherwise."""
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1])
    if x2.shape[0] == 1:
        y = nvfp4_gemv(x2, codes, block_scales, global_scales, shape, variant, gemv_config)
    else:
        y = nvfp4_gemm(x2, codes, block_scales, global_scales, shape, variant, gemm_config)
    return y.reshape(*lead, shape[0])
