"""GPTQ rounding: lower layer-output error than round-to-nearest on the same grids."""
from __future__ import annotations

import pytest
import torch
from bitforge.runtime.formats import uniform as fmt
from bitforge.toolchain.compress import api
from bitforge.toolchain.compress.gptq import (
    GPTQConfig,
    gptq,
    gptq_quantize,
    inverse_hessian_factor,
    neuqi_gptq,
)
from bitforge.toolchain.compress.neuqi import neuqi
from bitforge.toolchain.compress.uniform import rtn
from bitforge.toolchain.errors import BitforgeError


def _correlated_stats(n_in: int, seed: int, dead: tuple[int, ...] = ()) -> api.LayerStats:
    """Inputs with a shared low-rank component and a few dominant channels (as LLM activations have)."""
    gen = torch.Generator().manual_seed(seed)
    tokens = 1024
    X = torch.randn(tokens, n_in, generator=gen) + torch.randn(tokens, 4, generator=gen) @ torch.randn(
        4, n_in, generator=gen)
    X[:, :6] *= 12.0
    for d in dead:
        X[:, d] = 0.0
    X = X.double()
    return api.LayerStats(X.T @ X, tokens, "blk.0.attn_q")


def _output_error(W: torch.Tensor, What: torch.Tensor, stats: api.LayerStats) -> float:
    """tr((W - What) H (W - What)^T): the mean squared change of the layer's outputs on the calibration inputs."""
    D = (W - What).double()
    return float(torch.einsum("oi,ij,oj->", D, stats.hessian, D))


@pytest.mark.parametrize("bits,group", [(2, 32), (3, 64), (4, None)])
def test_gptq_beats_round_to_nearest_on_output_error(bits, group):
    gen = torch.Generator().manual_seed(bits)
    W = torch.randn(32, 128, generator=gen) * 0.05
    stats = _correlated_stats(128, bits)
    cfg = api.CompressConfig("gptq", bits=bits, group=group)
    e_rtn = _output_error(W, rtn(W, stats, cfg).weight_hat, stats)
    e_gptq = _output_error(W, gptq(W, stats, cfg).weight_hat, stats)
    e_neuqi = _output_error(W, neuqi(W, stats, cfg).weight_hat, stats)
    e_both = _output_error(W, neuqi_gptq(W, stats, cfg).weight_hat, stats)
    assert e_gptq < 0.8 * e_rtn
    assert e_both < 0.8 * e_neuqi
    assert e_both < e_gptq


def test_white_inputs_reduce_gptq_to_round_to_nearest():
    """With H = I the inverse-Hessian factor is diagonal: no error is fed forward, so GPTQ is RTN exactly."""
    W = torch.randn(16, 128, generator=torch.Generator().manual_seed(0))
    stats = api.LayerStats.identity(128)
    cfg = api.CompressConfig("gptq", bits=3, group=32)
    assert torch.equal(gptq(W, stats, cfg).weight_hat, rtn(W, stats, cfg).weight_hat)


def test_lazy_blocks_do_not_change_the_result():
    W = torch.randn(24, 256, generator=torch.Generator().manual_seed(1)) * 0.05
    stats = _correlated_stats(256, 1)
    a = gptq_quantize(W, stats, 3, 32, GPTQConfig(block=128))
    b = gptq_quantize(W, stats, 3, 32, GPTQConfig(block=32))
    assert (a.codes == b.codes).float().mean() > 0.995               # float32 summation order may flip a tie
    assert _output_error(W, a.dequantize(), stats) == pytest.approx(_output_error(W, b.dequantize(), stats), rel=0.02)


def test_dead_inputs_are_handled_like_gptq():
    W = torch.randn(16, 128, generator=torch.Generator().manual_seed(2)) * 0.05
    stats = _correlated_stats(128, 2, dead=(7, 64, 65))
    cfg = api.CompressConfig("gptq", bits=3, group=64)
    for method in (gptq, neuqi_gptq):
        layer = method(W, stats, cfg)
        assert torch.isfinite(layer.weight_hat).all()
        assert _output_error(W, layer.weight_hat, stats) < _output_error(W, rtn(W, stats, cfg).weight_hat, stats)


@pytest.mark.parametrize("method,name", [(gptq, "gptq"), (neuqi_gptq, "neuqi+gptq")])
def test_layer_contract(method, name):
    W = torch.randn(8, 192, generator=torch.Generator().manual_seed(3))
    layer = method(W, _correlated_stats(192, 3), api.CompressConfig(name, bits=4, group=96))   # 96: blocks of 96
    t = layer.tensors
    codes = fmt.unpack_codes(t["codes"], 4, (8, 192))
    assert torch.equal(layer.weight_hat, fmt.dequantize(codes, t["scale"], t["zero"], 96))
    assert layer.meta["method"] == name and layer.meta["group"] == 96 and layer.meta["packing"] == fmt.LAYOUT
    assert layer.bpw == pytest.approx(4 + 32 / 96)
    assert api.METHODS[name] is method


def test_inverse_hessian_factor_is_the_cholesky_of_the_damped_inverse():
    stats = _correlated_stats(32, 4)
    H = stats.hessian
    U = inverse_hessian_factor(H, 0.01)
    damped = H + 0.01 * torch.diagonal(H).mean() * torch.eye(32, dtype=H.dtype)
    assert torch.allclose(U.T @ U, torch.linalg.inv(damped), rtol=1e-6, atol=1e-10)
    assert torch.equal(U, torch.triu(U))


def test_bad_input_is_refused_before_work():
    W = torch.randn(4, 64)
    with pytest.raises(BitforgeError, match="does not match"):
        gptq(W, api.LayerStats.identity(32, "o_proj"), api.CompressConfig("gptq", bits=3, group=32))
    with pytest.raises(BitforgeError, match="2..8"):
        gptq(W, api.LayerStats.identity(64), api.CompressConfig("gptq", bits=9, group=32))
    with pytest.raises(BitforgeError, match="does not divide"):
        gptq(W, api.LayerStats.identity(64), api.CompressConfig("gptq", bits=3, group=48))
    with pytest.raises(BitforgeError, match="init"):
        GPTQConfig(init="gptq")
