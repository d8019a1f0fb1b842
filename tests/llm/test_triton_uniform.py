"""The uniform-v1 Triton kernels (GEMV split-K, tiled GEMM) against a plain torch dequantize + matmul.

Runs in Triton's interpreter (TRITON_INTERPRET, set in tests/conftest.py) on tiny shapes whose N, K and M do not fill the blocks, so
every mask is exercised. Two kinds of check:

- bit-exact: the kernels' weight decoding (``uniform_dequantize``) equals the formats module's code for code,
  and on "integer" problems (power-of-two scales, integer zero-points, small integer activations) every
  product and partial sum is exact in float32, so the kernels must equal the reference exactly whatever order
  they add in;
- random floats: ``|y - y_ref| <= 2 K u (|W| @ |x|)`` with ``u = 2^-24``: each of the two float32 dot products
  (kernel and reference, any summation order, any split) is within ``gamma_K ~ K u`` of the exact sum
  (Higham, Accuracy and Stability of Numerical Algorithms, eq. 3.5), so they differ by at most twice that.
"""
from __future__ import annotations

import os

import pytest
import torch

from bitforge.runtime.formats import uniform
from bitforge.toolchain.errors import BitforgeError

import bitforge.runtime.llm.triton_uniform as tu  # noqa: E402 - Triton: the gpu extra, installed by the set-up
DEVICE = "cpu" if os.environ.get("TRITON_INTERPRET", "0") != "0" else "cuda"
U = 2.0 ** -24
GEMV = {"BLOCK_N": 16, "BLOCK_K": 32, "K_ITERS": 2}
GEMM = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 32}


def make_weight(n, k, bits, group, seed=0, exact=False):
    """Random codes packed in the uniform-v1 layout, with fp16 scale and zero; ``exact``: power-of-two scales and
    integer zero-points, so every decoded weight is a small multiple of 2^-4."""
    gen = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 1 << bits, (n, k), generator=gen, dtype=torch.uint8)
    n_groups = 1 if group is None else k // group
    if exact:
        scale = 2.0 ** -torch.randint(0, 5, (n, n_groups), generator=gen).to(torch.float16)
        zero = -torch.randint(0, 1 << bits, (n, n_groups), generator=gen).to(torch.float16)
    else:
        scale = (torch.rand(n, n_groups, generator=gen) * 0.1 + 0.01).to(torch.float16)
        zero = (-torch.rand(n, n_groups, generator=gen) * (1 << bits)).to(torch.float16)
    return codes, uniform.pack_codes(codes, bits), scale, zero


def reference(x, codes, scale, zero, group):
    return x.float() @ uniform.dequantize(codes, scale, zero, group).T


def on_device(*ts):
    return [t.to(DEVICE) for t in ts]


def within_bound(y, x, codes, scale, zero, group):
    w = uniform.dequantize(codes, scale, zero, group)
    bound = 2 * x.shape[1] * U * (x.abs().float() @ w.abs().T)
    return bool(((y.cpu().float() - reference(x, codes, scale, zero, group)).abs() <= bound).all())


@pytest.mark.parametrize("bits", [1, 2, 3, 4, 5, 6, 7, 8])
@pytest.mark.parametrize("n,k,group", [(19, 64, 32), (5, 50, None)])
def test_decode_tile_is_bit_exact(bits, n, k, group):
    codes, packed, scale, zero = make_weight(n, k, bits, group, seed=bits)
    w = tu.uniform_dequantize(*on_device(packed, scale, zero), bits, group, (n, k))
    assert torch.equal(w.cpu(), uniform.dequantize(codes, scale, zero, group))


@pytest.mark.parametrize("bits,group,n,k", [(2, 32, 37, 96), (3, 64, 20, 128), (4, 128, 17, 128),
                                            (8, None, 9, 40), (3, None, 7, 50)])
def test_gemv_is_exact_on_integer_problems(bits, group, n, k):
    codes, packed, scale, zero = make_weight(n, k, bits, group, seed=1, exact=True)
    x = torch.randint(-8, 9, (1, k)).float()
    y = tu.uniform_gemv(*on_device(x, packed, scale, zero), bits, group, (n, k), config=GEMV)
    assert torch.equal(y.cpu(), reference(x, codes, scale, zero, group))


@pytest.mark.parametrize("bits,group,n,k", [(2, 32, 37, 96), (4, 64, 33, 128), (8, 128, 17, 128),
                                            (3, None, 18, 72)])
def test_gemv_random_floats_within_summation_bound(bits, group, n, k):
    codes, packed, scale, zero = make_weight(n, k, bits, group, seed=2)
    x = torch.randn(2, k, generator=torch.Generator().manual_seed(3))
    y = tu.uniform_gemv(*on_device(x, packed, scale, zero), bits, group, (n, k), config=GEMV)
    assert y.shape == (2, n) and within_bound(y, x, codes, scale, zero, group)


@pytest.mark.parametrize("bits,group,m,n,k", [(2, 32, 3, 37, 96), (3, 64, 17, 20, 128), (4, 128, 2, 17, 128),
                                              (8, None, 5, 9, 40)])
def test_gemm_is_exact_on_integer_problems(bits, group, m, n, k):
    codes, packed, scale, zero = make_weight(n, k, bits, group, seed=4, exact=True)
    x = torch.randint(-8, 9, (m, k)).float()
    y = tu.uniform_gemm(*on_device(x, packed, scale, zero), bits, group, (n, k), config=GEMM)
    assert torch.equal(y.cpu(), reference(x, codes, scale, zero, group))


@pytest.mark.parametrize("bits,group,m,n,k", [(4, 32, 18, 21, 64), (3, None, 3, 16, 48)])
def test_gemm_random_floats_within_summation_bound(bits, group, m, n, k):
    codes, packed, scale, zero = make_weight(n, k, bits, group, seed=5)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(6))
    y = tu.uniform_gemm(*on_device(x, packed, scale, zero), bits, group, (n, k), config=GEMM)
    assert within_bound(y, x, codes, scale, zero, group)


def test_linear_dispatches_by_rows_and_keeps_leading_shape():
    n, k, bits, group = 12, 64, 4, 32
    codes, packed, scale, zero = make_weight(n, k, bits, group, seed=7, exact=True)
    w = on_device(packed, scale, zero)
    for lead in [(1, 1), (2, 3)]:
        x = torch.randint(-4, 5, (*lead, k)).float()
        y = tu.uniform_linear(x.to(DEVICE), *w, bits, group, (n, k), gemv_config=GEMV, gemm_config=GEMM)
        assert y.shape == (*lead, n)
        assert torch.equal(y.cpu(), reference(x.reshape(-1, k), codes, scale, zero, group).reshape(*lead, n))


def test_autotune_lists_are_keyed_by_shape_group_and_bits():
    for tuned in (tu.GEMV_TUNED, tu.GEMM_TUNED):
        assert list(tuned.keys) == ["M", "N", "K", "GROUP", "BITS"]
        assert len(tuned.configs) > 1
    assert len(tu.GEMV_CONFIGS) > 1 and len(tu.GEMM_CONFIGS) > 1


def test_bad_inputs_name_the_kernel_and_the_tensor():
    codes, packed, scale, zero = make_weight(8, 64, 4, 32)
    x = torch.randn(1, 64)
    with pytest.raises(BitforgeError, match="uniform_gemv: packed is uint8 \\(8, 32\\), expected uint8 \\(8, 24\\)"):
        tu.uniform_gemv(*on_device(x, packed, scale, zero), 3, 32, (8, 64), config=GEMV)
    with pytest.raises(BitforgeError, match="group 48 does not divide"):
        tu.uniform_gemm(*on_device(x, packed, scale, zero), 4, 48, (8, 64), config=GEMM)
    with pytest.raises(BitforgeError, match="x is torch.float32 \\(1, 32\\)"):
        tu.uniform_gemv(*on_device(x[:, :32], packed, scale, zero), 4, 32, (8, 64), config=GEMV)


@pytest.mark.parametrize("kernel", ["uniform_gemv", "uniform_gemm"])
def test_launch_without_config_matches_reference(kernel):
    """``config=None``: on a GPU the autotuner (every configuration once; the GEMV's split-K output must be zeroed
    before each trial, or the trials would add up in it) then the chosen one; in the interpreter, which cannot
    time trials, the list's first configuration (with its ``num_warps``/``num_stages`` launch options)."""
    n, k, bits, group = 10, 64, 4, 32
    codes, packed, scale, zero = make_weight(n, k, bits, group, seed=8, exact=True)
    x = torch.randint(-4, 5, (1 if kernel == "uniform_gemv" else 3, k)).float()
    y = getattr(tu, kernel)(*on_device(x, packed, scale, zero), bits, group, (n, k))
    assert torch.equal(y.cpu(), reference(x, codes, scale, zero, group))


@pytest.mark.parametrize("kernel,m,config", [("uniform_gemv", 1, GEMV), ("uniform_gemm", 4, GEMM)])
def test_float16_activations(kernel, m, config):
    """float16 ``x``: the GEMV accumulates in float32, the GEMM rounds the decoded tile to float16 for ``tl.dot``
    (exact here: 4-bit codes plus integer zero-points times a power of two fit float16's 11 bits) and
    accumulates in float32; the output is the float32 sum rounded once to float16."""
    n, k, bits, group = 20, 96, 4, 32
    codes, packed, scale, zero = make_weight(n, k, bits, group, seed=9, exact=True)
    x = torch.randint(-8, 9, (m, k)).half()
    y = getattr(tu, kernel)(*on_device(x, packed, scale, zero), bits, group, (n, k), config=config)
    assert y.dtype == torch.float16
    assert torch.equal(y.cpu(), reference(x, codes, scale, zero, group).half())
