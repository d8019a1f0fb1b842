"""The NVFP4 weight-only Triton kernels against the formats module (``runtime/formats/nvfp4.py``).

Decoding is checked bit for bit: every E4M3 code (NaN included) and every E2M1 code through the kernels' own
decoder, the nibble order on a hand-written byte, and whole quantized weights of both variants. Matmuls: exact
on problems where float32 is exact (block scales in 0.5 .. 3.75, power-of-two FP32 scales, integer
activations); on random floats within ``2 (K + 2) u (|x| @ |W|^T)``, ``u = 2^-24``: a float32 dot product of
length ``K`` is within ``gamma_K`` of exact (Higham eq. 3.5) and each side has one more rounding for the FP32
scale (the reference per weight, the "tensor" kernel once per output), so the two differ by at most twice
``gamma_{K + 1}``.
"""
from __future__ import annotations

import os

import pytest
import torch

from bitforge.runtime.formats import nvfp4
from bitforge.toolchain.errors import BitforgeError

import bitforge.runtime.llm.triton_nvfp4 as tn  # noqa: E402 - Triton: the gpu extra, installed by the set-up
DEVICE = "cpu" if os.environ.get("TRITON_INTERPRET", "0") != "0" else "cuda"
U = 2.0 ** -24
GEMV = {"BLOCK_N": 16, "BLOCK_K": 32, "K_ITERS": 2}
GEMM = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 32}


def dev(*ts):
    return [t.to(DEVICE) for t in ts]


def decode(q: nvfp4.NVFP4Weight) -> torch.Tensor:
    return tn.nvfp4_dequantize(*dev(q.codes, q.block_scales, q.global_scales), q.shape, q.variant).cpu()


def exact_weight(n, k, variant, seed):
    """Random nibbles, block scales with E4M3 exponent 6..8 (0.5 .. 3.75), power-of-two FP32 scales."""
    gen = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 256, (n, k // 2), generator=gen, dtype=torch.uint8)
    block_scales = torch.randint(0x30, 0x48, (n, k // 16), generator=gen, dtype=torch.uint8)
    shape = (1, 1) if variant == "tensor" else (n, -(-k // 128))
    global_scales = 2.0 ** -torch.randint(0, 4, shape, generator=gen).float()
    return nvfp4.NVFP4Weight(codes, block_scales, global_scales, (n, k), variant)


def random_weight(n, k, variant, seed):
    return nvfp4.quantize(torch.randn(n, k, generator=torch.Generator().manual_seed(seed)), variant)


def test_every_e4m3_and_e2m1_code_decodes_exactly():
    """Row r holds block scale code r; its 16 elements are the 16 E2M1 codes (8 bytes: 0x10, 0x32, ...)."""
    nibbles = torch.arange(16, dtype=torch.uint8)
    codes = nvfp4.pack_nibbles(nibbles).repeat(256, 1)
    q = nvfp4.NVFP4Weight(codes, torch.arange(256, dtype=torch.uint8).reshape(256, 1), torch.ones(1, 1),
                          (256, 16), "tensor")
    want = nvfp4.E4M3_TABLE[:, None] * nvfp4.E2M1_TABLE[None, :]
    got = decode(q)
    nan_rows = torch.isnan(nvfp4.E4M3_TABLE)
    assert torch.equal(got[~nan_rows], want[~nan_rows])
    assert bool(torch.isnan(got[nan_rows]).all()) and int(nan_rows.sum()) == 2


def test_nibble_order_low_nibble_is_the_even_element():
    """Byte 0x21: element 0 is code 1 (0.5), element 1 is code 2 (1.0); byte 0xF9: -0.5 then -6."""
    codes = torch.tensor([[0x21, 0xF9] + [0] * 6], dtype=torch.uint8)
    one = nvfp4.e4m3_encode(torch.tensor([[1.0]]))
    q = nvfp4.NVFP4Weight(codes, one, torch.ones(1, 1), (1, 16), "tensor")
    assert decode(q)[0, :4].tolist() == [0.5, 1.0, -0.5, -6.0]


@pytest.mark.parametrize("variant,n,k", [("tensor", 19, 48), ("block128", 7, 176), ("block128", 5, 256)])
def test_quantized_weights_decode_bit_exactly(variant, n, k):
    q = random_weight(n, k, variant, seed=k)
    assert torch.equal(decode(q), nvfp4.dequantize(q))


KERNELS = [("nvfp4_gemv", 1, GEMV), ("nvfp4_gemv", 2, GEMV), ("nvfp4_gemm", 3, GEMM), ("nvfp4_gemm", 17, GEMM)]


@pytest.mark.parametrize("kernel,m,config", KERNELS)
@pytest.mark.parametrize("variant,n,k", [("tensor", 37, 80), ("block128", 18, 176)])
def test_exact_on_exact_problems(kernel, m, config, variant, n, k):
    q = exact_weight(n, k, variant, seed=n)
    x = torch.randint(-8, 9, (m, k)).float()
    y = getattr(tn, kernel)(*dev(x, q.codes, q.block_scales, q.global_scales), q.shape, variant, config).cpu()
    assert torch.equal(y, x @ nvfp4.dequantize(q).T)


@pytest.mark.parametrize("kernel,m,config", [KERNELS[0], KERNELS[2]])
@pytest.mark.parametrize("variant,n,k", [("tensor", 37, 80), ("block128", 18, 176)])
def test_random_floats_within_summation_bound(kernel, m, config, variant, n, k):
    q = random_weight(n, k, variant, seed=3)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(4))
    y = getattr(tn, kernel)(*dev(x, q.codes, q.block_scales, q.global_scales), q.shape, variant, config).cpu()
    w = nvfp4.dequantize(q)
    assert bool(((y - x @ w.T).abs() <= 2 * (k + 2) * U * (x.abs() @ w.abs().T)).all())


def test_linear_keeps_leading_shape_and_default_launch():
    q = exact_weight(12, 64, "tensor", seed=5)
    for lead in [(1, 1), (2, 3)]:
        x = torch.randint(-4, 5, (*lead, 64)).float()
        y = tn.nvfp4_linear(*dev(x, q.codes, q.block_scales, q.global_scales), q.shape, "tensor")
        assert y.shape == (*lead, 12)
        assert torch.equal(y.cpu(), (x.reshape(-1, 64) @ nvfp4.dequantize(q).T).reshape(*lead, 12))


def test_bad_inputs_are_named():
    q = exact_weight(8, 64, "block128", seed=0)
    x = torch.randn(1, 64)
    with pytest.raises(BitforgeError, match="nvfp4_gemv: global_scales is float32 \\(8, 1\\), expected float32 "
                                            "\\(1, 1\\)"):
        tn.nvfp4_gemv(*dev(x, q.codes, q.block_scales, q.global_scales), q.shape, "tensor", GEMV)
    with pytest.raises(BitforgeError, match="not a multiple of the 16-element block"):
        tn.nvfp4_gemm(*dev(x, q.codes, q.block_scales, q.global_scales), (8, 60), "block128", GEMM)
    with pytest.raises(BitforgeError, match="variant 'mx'"):
        tn.nvfp4_gemm(*dev(x, q.codes, q.block_scales, q.global_scales), q.shape, "mx", GEMM)
