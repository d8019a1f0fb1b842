"""The fused Q + low-rank Triton kernels (SRR/QERA layout) against torch: ``x Q^T + (x R^T) L^T``.

Same two kinds of check as tests/llm/test_triton_uniform.py: exact equality on problems where every float32
operation is exact (power-of-two scales, integer zero-points, factors that are small multiples of 2^-3,
integer activations), and for random floats ``|y - y_ref| <= 2 (K + r + 1) u (|Q| |x| + |L| (|R| |x|))``,
``u = 2^-24``: the base's dot product is within ``gamma_K`` of exact, the correction's two chained products
within ``gamma_{K + r}`` of exact (Higham eq. 3.5 applied to ``R x`` then ``L t``), for the kernel and the
reference alike, so they differ by at most twice the larger bound.
"""
from __future__ import annotations

import os

import pytest
import torch

from bitforge.runtime.formats import uniform
from bitforge.toolchain.errors import BitforgeError

import bitforge.runtime.llm.triton_lowrank as tl_  # noqa: E402 - Triton: the gpu extra, installed by the set-up
DEVICE = "cpu" if os.environ.get("TRITON_INTERPRET", "0") != "0" else "cuda"
U = 2.0 ** -24
GEMV = {"BLOCK_N": 16, "BLOCK_K": 32, "K_ITERS": 2}
GEMM = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 32}


def make_layer(n, k, bits, group, rank, seed, exact):
    gen = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 1 << bits, (n, k), generator=gen, dtype=torch.uint8)
    n_groups = 1 if group is None else k // group
    if exact:
        scale = 2.0 ** -torch.randint(0, 4, (n, n_groups), generator=gen).to(torch.float16)
        zero = -torch.randint(0, 1 << bits, (n, n_groups), generator=gen).to(torch.float16)
        left = (torch.randint(-4, 5, (n, rank), generator=gen) / 8).to(torch.float16)
        right = (torch.randint(-4, 5, (rank, k), generator=gen) / 8).to(torch.float16)
    else:
        scale = (torch.rand(n, n_groups, generator=gen) * 0.1 + 0.01).to(torch.float16)
        zero = (-torch.rand(n, n_groups, generator=gen) * (1 << bits)).to(torch.float16)
        left = (torch.randn(n, rank, generator=gen) * 0.1).to(torch.float16)
        right = (torch.randn(rank, k, generator=gen) * 0.1).to(torch.float16)
    return codes, uniform.pack_codes(codes, bits), scale, zero, left, right


def reference(x, codes, scale, zero, group, left, right):
    q = uniform.dequantize(codes, scale, zero, group)
    return x @ q.T + (x @ right.float().T) @ left.float().T


def bound(x, codes, scale, zero, group, left, right):
    q = uniform.dequantize(codes, scale, zero, group).abs()
    k, rank = x.shape[1], left.shape[1]
    mag = x.abs() @ q.T + (x.abs() @ right.float().abs().T) @ left.float().abs().T
    return 2 * (k + rank + 1) * U * mag


def run(kernel, x, layer, bits, group, config):
    codes, packed, scale, zero, left, right = layer
    n, k = codes.shape
    dev = [t.to(DEVICE) for t in (x, packed, scale, zero)]
    return getattr(tl_, kernel)(*dev, bits, group, (n, k), left.to(DEVICE), right.to(DEVICE), config).cpu()


CASES = [(2, 32, 37, 96, 5), (3, None, 20, 72, 16), (4, 64, 17, 128, 20), (8, 128, 9, 128, 1)]


@pytest.mark.parametrize("kernel,m,config", [("lowrank_gemv", 1, GEMV), ("lowrank_gemv", 2, GEMV),
                                             ("lowrank_gemm", 3, GEMM), ("lowrank_gemm", 18, GEMM)])
@pytest.mark.parametrize("bits,group,n,k,rank", CASES)
def test_exact_on_integer_problems(kernel, m, config, bits, group, n, k, rank):
    layer = make_layer(n, k, bits, group, rank, seed=bits, exact=True)
    x = torch.randint(-8, 9, (m, k)).float()
    y = run(kernel, x, layer, bits, group, config)
    codes, _, scale, zero, left, right = layer
    assert torch.equal(y, reference(x, codes, scale, zero, group, left, right))


@pytest.mark.parametrize("kernel,m,config", [("lowrank_gemv", 1, GEMV), ("lowrank_gemm", 5, GEMM)])
@pytest.mark.parametrize("bits,group,n,k,rank", CASES[:2])
def test_random_floats_within_summation_bound(kernel, m, config, bits, group, n, k, rank):
    layer = make_layer(n, k, bits, group, rank, seed=10 + bits, exact=False)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(11))
    y = run(kernel, x, layer, bits, group, config)
    codes, _, scale, zero, left, right = layer
    err = (y - reference(x, codes, scale, zero, group, left, right)).abs()
    assert bool((err <= bound(x, codes, scale, zero, group, left, right)).all())


def test_correction_is_not_dropped():
    """The low-rank term matters: the kernel differs from the base alone by exactly ``(x R^T) L^T``."""
    layer = make_layer(16, 64, 4, 32, 4, seed=3, exact=True)
    codes, packed, scale, zero, left, right = layer
    x = torch.randint(-8, 9, (1, 64)).float()
    y = run("lowrank_gemv", x, layer, 4, 32, GEMV)
    base = x @ uniform.dequantize(codes, scale, zero, 32).T
    assert torch.equal(y - base, (x @ right.float().T) @ left.float().T) and not torch.equal(y, base)


def test_linear_keeps_leading_shape():
    layer = make_layer(12, 64, 4, 32, 3, seed=4, exact=True)
    codes, packed, scale, zero, left, right = layer
    dev = [t.to(DEVICE) for t in (packed, scale, zero)]
    for lead in [(1, 1), (2, 3)]:
        x = torch.randint(-4, 5, (*lead, 64)).float()
        y = tl_.lowrank_linear(x.to(DEVICE), *dev, 4, 32, (12, 64), left.to(DEVICE), right.to(DEVICE),
                               gemv_config=GEMV, gemm_config=GEMM)
        want = reference(x.reshape(-1, 64), codes, scale, zero, 32, left, right).reshape(*lead, 12)
        assert torch.equal(y.cpu(), want)


def test_bad_factors_are_named():
    codes, packed, scale, zero, left, right = make_layer(8, 64, 4, 32, 4, seed=0, exact=True)
    x = torch.randn(1, 64)
    dev = [t.to(DEVICE) for t in (x, packed, scale, zero)]
    with pytest.raises(BitforgeError, match="lowrank_gemv: lr_right is float16 \\(4, 32\\), expected"):
        tl_.lowrank_gemv(*dev, 4, 32, (8, 64), left.to(DEVICE), right[:, :32].to(DEVICE), GEMV)
    with pytest.raises(BitforgeError, match="lowrank_gemm: lr_left is \\(7, 4\\), expected \\[8, rank\\]"):
        tl_.lowrank_gemm(*dev, 4, 32, (8, 64), left[:7].to(DEVICE), right.to(DEVICE), GEMM)
