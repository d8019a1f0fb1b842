"""The packed modules' CUDA path (runtime/llm/cuda_kernels.py): a layer's stored tensors and manifest entry, handed
to the Triton kernels by the adapters, give the reference path's ``x W^T`` (run here by Triton's interpreter on CPU
tensors; on a GPU machine ``TRITON_INTERPRET=0`` runs them compiled).

Tolerance: both sides sum K float32 products in different orders, so each lies within gamma_K |x| |W|^T of the exact
sum (Higham, eq. 3.5, gamma_K ~ K u, u = 2^-24) and they differ by at most twice that.
"""
from __future__ import annotations

import os

import pytest
import torch

from bitforge.runtime.formats import nvfp4, uniform
from bitforge.runtime.formats.binary import BinaryLowRankPath
from bitforge.runtime.llm import reference
from bitforge.runtime.llm.kernels import KERNELS
from bitforge.runtime.llm.modules import QuantizedLinear

import bitforge.runtime.llm.cuda_kernels as ck  # noqa: E402 - Triton: the gpu extra, installed by the set-up
DEVICE = "cpu" if os.environ.get("TRITON_INTERPRET", "0") != "0" else "cuda"
U = 2.0 ** -24


def _within(y: torch.Tensor, x: torch.Tensor, w: torch.Tensor, y_ref: torch.Tensor) -> bool:
    bound = 2 * x.shape[1] * U * (x.abs().float() @ w.abs().T.float()) + 1e-30
    return bool(((y.cpu() - y_ref.cpu()).abs() <= bound.cpu()).all())


def _uniform_layer(n: int, k: int, bits: int, group, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 1 << bits, (n, k), generator=gen, dtype=torch.uint8)
    g = 1 if group is None else k // group
    scale = (torch.rand(n, g, generator=gen) * 0.1 + 0.01).to(torch.float16)
    zero = (-torch.rand(n, g, generator=gen) * (1 << bits)).to(torch.float16)
    tensors = {"codes": uniform.pack_codes(codes, bits), "scale": scale, "zero": zero}
    meta = {"method": "rtn", "packing": "uniform-v1", "bits": bits, "group": group, "shape": [n, k]}
    return tensors, meta, uniform.dequantize(codes, scale, zero, group)


@pytest.mark.parametrize("rows", [1, 5])
@pytest.mark.parametrize("bits,group", [(4, 32), (3, 64), (2, None), (8, 32)])
def test_uniform_adapter_equals_the_reference_path(rows, bits, group):
    tensors, meta, w = _uniform_layer(24, 128, bits, group)
    x = torch.randn(rows, 128, generator=torch.Generator().manual_seed(1))
    y = ck.uniform_kernel(x.to(DEVICE), {k: v.to(DEVICE) for k, v in tensors.items()}, meta)
    assert y.dtype == torch.float32 and y.shape == (rows, 24)
    assert _within(y, x, w, reference.forward(x, tensors, meta))


@pytest.mark.parametrize("variant", ["tensor", "block128"])
def test_nvfp4_adapter_equals_the_reference_path(variant):
    gen = torch.Generator().manual_seed(2)
    q = nvfp4.quantize(torch.randn(16, 256, generator=gen), variant)
    tensors = {"codes": q.codes, "block_scales": q.block_scales, "global_scales": q.global_scales}
    meta = {"method": "nvfp4", "packing": "nvfp4-v1", "variant": variant, "shape": [16, 256]}
    x = torch.randn(3, 256, generator=gen)
    y = ck.nvfp4_kernel(x.to(DEVICE), {k: v.to(DEVICE) for k, v in tensors.items()}, meta)
    assert _within(y, x, nvfp4.dequantize(q), reference.forward(x, tensors, meta))


def test_a_quantized_linear_dispatches_to_the_registered_kernel(monkeypatch):
    """What ``register()`` does for "cuda", done here for the interpreter's device: the module's forward goes through
    the registry to the kernel (a call counter proves it), with the reference's result."""
    tensors, meta, w = _uniform_layer(8, 64, 4, 32, seed=3)
    calls = []

    def counted(x, t, m):
        calls.append(x.shape)
        return ck.uniform_kernel(x, t, m)

    monkeypatch.setitem(KERNELS, ("uniform-v1", DEVICE), counted)
    layer = QuantizedLinear("blk.fc", {k: v.to(DEVICE) for k, v in tensors.items()}, meta).to(DEVICE)
    x = torch.randn(2, 4, 64, generator=torch.Generator().manual_seed(4))
    y = layer(x.to(DEVICE))
    assert calls == [(8, 64)] and y.shape == (2, 4, 8)
    assert _within(y.reshape(8, 8), x.reshape(8, 64), w, reference.forward(x.reshape(8, 64), tensors, meta))


def test_register_is_for_cuda_and_idempotent():
    before = dict(KERNELS)
    try:
        ck.register()
        ck.register()  # a second call finds its own kernels and leaves them (register_kernel refuses another one)
        assert KERNELS[("uniform-v1", "cuda")] is ck.uniform_kernel
        assert KERNELS[("nvfp4-v1", "cuda")] is ck.nvfp4_kernel
        assert KERNELS[("binary-lowrank-v1", "cuda")] is ck.binary_kernel
        assert KERNELS[("uniform-v1+lowrank-v1", "cuda")] is ck.uniform_lowrank_kernel
        assert ("lowrank-v1", "cuda") not in KERNELS  # only an NVFP4-based Q + L R needs it: the reference's matmuls
    finally:
        KERNELS.clear()
        KERNELS.update(before)


def _binary_layer(n: int, k: int, r: int, paths: tuple[str, ...], seed: int = 5):
    gen = torch.Generator().manual_seed(seed)

    def sign(*shape):
        return torch.where(torch.rand(*shape, generator=gen) < 0.5, -1.0, 1.0)

    tensors, w = {}, torch.zeros(n, k)
    for name in paths:
        p = BinaryLowRankPath.from_factors(torch.rand(n, generator=gen) + 0.5, sign(n, r),
                                           torch.rand(r, generator=gen) + 0.5, sign(k, r), torch.rand(k, generator=gen))
        tensors.update(p.tensors(name))
        w += p.dense()
    meta = {"method": "littlebit2", "packing": "binary-lowrank-v1", "rank": r, "paths": list(paths), "shape": [n, k]}
    return tensors, meta, w


@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("n,k,paths", [(64, 96, ("primary",)), (40, 72, ("primary", "residual"))])
def test_binary_adapter_equals_the_reference_path(rows, n, k, paths):
    """Every stored path is applied (a dropped residual would miss by a whole path), rows of 4*j sign bytes go
    through the zero-copy word view, others (40 outputs: 5 bytes) through the regrouping."""
    tensors, meta, w = _binary_layer(n, k, 16, paths)
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(6))
    y = ck.binary_kernel(x.to(DEVICE), {t: v.to(DEVICE) for t, v in tensors.items()}, meta)
    assert y.dtype == torch.float32 and y.shape == (rows, n)
    assert _within(y, x, w, reference.forward(x, tensors, meta))


def _srr_layer(n: int, k: int, bits: int, group: int, r: int, seed: int = 7):
    tensors, meta, q = _uniform_layer(n, k, bits, group, seed)
    gen = torch.Generator().manual_seed(seed + 1)
    left = (torch.randn(n, r, generator=gen) * 0.05).to(torch.float16)
    right = (torch.randn(r, k, generator=gen) * 0.05).to(torch.float16)
    layer = {**{"q." + t: v for t, v in tensors.items()}, "lr_left": left, "lr_right": right}
    meta = {**meta, "method": "srr", "base": "rtn", "rank": r}
    return layer, meta, q + left.float() @ right.float()


@pytest.mark.parametrize("rows", [1, 4])
def test_fused_uniform_lowrank_adapter_equals_the_reference_path(rows):
    layer, meta, w = _srr_layer(48, 128, 4, 32, 8)
    x = torch.randn(rows, 128, generator=torch.Generator().manual_seed(8))
    y = ck.uniform_lowrank_kernel(x.to(DEVICE), {t: v.to(DEVICE) for t, v in layer.items()}, meta)
    # Triton sums K + r products per output where the reference sums K, then r: bound with K + r terms.
    bound_x = torch.cat([x, x @ layer["lr_right"].float().T], dim=1)
    bound_w = torch.cat([w - layer["lr_left"].float() @ layer["lr_right"].float(), layer["lr_left"].float()], dim=1)
    assert _within(y, bound_x, bound_w, reference.forward(x, layer, meta))


def test_a_lowrank_layer_runs_the_fused_kernel_when_the_device_has_one(monkeypatch):
    """The module looks up the whole-layer kernel first: one call to it, none to the parts."""
    layer, meta, w = _srr_layer(16, 64, 4, 32, 4, seed=9)
    calls = []

    def fused(x, t, m):
        calls.append("fused")
        return ck.uniform_lowrank_kernel(x, t, m)

    def part(x, t, m):
        calls.append("part")
        return reference.forward(x, t, m)

    monkeypatch.setitem(KERNELS, ("uniform-v1+lowrank-v1", DEVICE), fused)
    monkeypatch.setitem(KERNELS, ("uniform-v1", DEVICE), part)
    module = QuantizedLinear("blk.q", {t: v.to(DEVICE) for t, v in layer.items()}, meta)
    x = torch.randn(2, 64, generator=torch.Generator().manual_seed(10))
    y = module(x.to(DEVICE))
    assert calls == ["fused"]
    assert torch.allclose(y.cpu(), reference.forward(x, layer, meta), rtol=1e-4, atol=1e-5)


def test_word_view_is_the_regrouped_words_without_a_copy():
    from bitforge.runtime.llm.triton_binary import sign_words, word_view

    signs = torch.randint(0, 256, (3, 12), dtype=torch.uint8, generator=torch.Generator().manual_seed(11))
    view = word_view(signs)
    assert torch.equal(view, sign_words(signs)) and view.data_ptr() == signs.data_ptr()
    odd = signs[:, :10].contiguous()  # 10 bytes: not whole words, regrouped with zero padding
    assert torch.equal(word_view(odd), sign_words(odd)) and word_view(odd).shape == (3, 3)
