"""The binary low-rank (LittleBit-2) Triton kernels against the formats module's factored reference.

Exact checks use power-of-two scale vectors and integer activations (every float32 operation exact, so any
summation order gives the reference's bits). Random floats: one path's output is within
``gamma_{K + r + 3}`` of exact relative to ``|u1| ((|latent| ((|x| |v2|) @ |V|)) @ |U|^T)`` (``K`` additions and
one product per input term in stage 1, ``r`` additions and the latent and ``u1`` products in stage 2; Higham eq.
3.5), one more addition per extra path; kernel and reference differ by at most twice that, ``u = 2^-24``.
"""
from __future__ import annotations

import os

import pytest
import torch

from bitforge.runtime.formats.binary import BinaryLowRankPath, unpack_signs
from bitforge.toolchain.errors import BitforgeError

import bitforge.runtime.llm.triton_binary as tb  # noqa: E402 - Triton: the gpu extra, installed by the set-up
DEVICE = "cpu" if os.environ.get("TRITON_INTERPRET", "0") != "0" else "cuda"
U = 2.0 ** -24
CONFIG = {"BLOCK_R": 8, "BLOCK_K": 32, "K_ITERS": 2, "BLOCK_N": 32, "BLOCK_J": 8, "J_ITERS": 2}


def make_path(n, k, r, seed, exact):
    gen = torch.Generator().manual_seed(seed)
    sign = lambda *s: torch.randint(0, 2, s, generator=gen).float() * 2 - 1  # noqa: E731
    if exact:
        vec = lambda d: 2.0 ** -torch.randint(0, 4, (d,), generator=gen).float() * sign(d)  # noqa: E731
    else:
        vec = lambda d: torch.rand(d, generator=gen) + 0.1  # noqa: E731
    return BinaryLowRankPath.from_factors(vec(n), sign(n, r), vec(r), sign(k, r), vec(k))


def on_device(path):
    return BinaryLowRankPath(*(getattr(path, f).to(DEVICE) for f in ("u_signs", "v_signs", "u1", "latent", "v2")))


def reference(x, paths):
    y = paths[0].apply(x)
    for p in paths[1:]:
        y = y + p.apply(x)
    return y


def magnitude(x, path):
    U, V = path.signs()
    t = (x.abs() * path.v2.float().abs()) @ V.abs()
    return ((t * path.latent.float().abs()) @ U.abs().T) * path.u1.float().abs()


@pytest.mark.parametrize("nbytes", [1, 3, 4, 9])
def test_sign_words_put_element_k_at_bit_k_mod_32_of_word_k_div_32(nbytes):
    packed = torch.randint(0, 256, (5, nbytes), dtype=torch.uint8, generator=torch.Generator().manual_seed(nbytes))
    words = tb.sign_words(packed)
    assert words.shape == (5, -(-nbytes // 4)) and words.dtype == torch.int32
    k = torch.arange(32 * words.shape[1])
    bits = (words.to(torch.int64)[:, k // 32] >> (k % 32)) & 1
    signs = unpack_signs(packed, 8 * nbytes)
    assert torch.equal(bits[:, : 8 * nbytes] * 2 - 1, signs.to(torch.int64))
    assert not bits[:, 8 * nbytes:].any()   # padding words are zero


@pytest.mark.parametrize("m", [1, 3])
@pytest.mark.parametrize("n,k,r,residual", [(40, 72, 12, False), (33, 50, 7, True), (64, 64, 20, True)])
def test_exact_on_power_of_two_scales(m, n, k, r, residual):
    paths = [make_path(n, k, r, seed=i + n, exact=True) for i in range(2 if residual else 1)]
    x = torch.randint(-8, 9, (m, k)).float()
    y = tb.binary_lowrank_gemv(x.to(DEVICE), [on_device(p) for p in paths], CONFIG)
    assert torch.equal(y.cpu(), reference(x, paths))


@pytest.mark.parametrize("n,k,r,residual", [(40, 72, 12, False), (33, 50, 7, True)])
def test_random_floats_within_summation_bound(n, k, r, residual):
    paths = [make_path(n, k, r, seed=7 + i, exact=False) for i in range(2 if residual else 1)]
    x = torch.randn(2, k, generator=torch.Generator().manual_seed(8))
    y = tb.binary_lowrank_gemv(x.to(DEVICE), [tb.prepare_path(on_device(p)) for p in paths], CONFIG)
    bound = 2 * (k + r + 3 + len(paths)) * U * sum(magnitude(x, p) for p in paths)
    assert bool(((y.cpu() - reference(x, paths)).abs() <= bound).all())


def test_default_launch_matches_reference():
    paths = [make_path(24, 40, 5, seed=1, exact=True)]
    x = torch.randint(-8, 9, (1, 40)).float()
    assert torch.equal(tb.binary_lowrank_gemv(x.to(DEVICE), [on_device(p) for p in paths]).cpu(), reference(x, paths))


def test_bad_inputs_are_named():
    path = on_device(make_path(16, 32, 4, seed=0, exact=True))
    with pytest.raises(BitforgeError, match="x is torch.float32 \\(1, 31\\), expected a float \\[M, 32\\]"):
        tb.binary_lowrank_gemv(torch.randn(1, 31).to(DEVICE), [path], CONFIG)
    other = on_device(make_path(16, 32, 5, seed=1, exact=True))
    bad = tb.WordPath(tb.sign_words(other.u_signs), tb.sign_words(path.v_signs), path.u1, path.latent, path.v2)
    with pytest.raises(BitforgeError, match="path 1: u_words is int32 \\(5, 1\\), expected int32 \\(4, 1\\)"):
        tb.binary_lowrank_gemv(torch.randn(1, 32).to(DEVICE), [path, bad], CONFIG)
    with pytest.raises(BitforgeError, match="at least one path"):
        tb.binary_lowrank_gemv(torch.randn(1, 32).to(DEVICE), [], CONFIG)
