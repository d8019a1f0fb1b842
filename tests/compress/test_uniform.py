"""Uniform quantizer (RTN min-max) and the uniform-v1 packed layout."""
from __future__ import annotations

import pytest
import torch
from bitforge.runtime.formats import uniform as fmt
from bitforge.toolchain.compress import api
from bitforge.toolchain.compress.uniform import quantize_uniform, rtn
from bitforge.toolchain.errors import BitforgeError
from hypothesis import given, settings
from hypothesis import strategies as st


def _reference_pack(codes: list[list[int]], bits: int) -> list[list[int]]:
    """The docstring's layout, bit by bit: per row, stream bit j of code c is bit j of code c; LSB-first bytes."""
    rows = []
    for row in codes:
        stream = [(c >> k) & 1 for c in row for k in range(bits)]
        stream += [0] * (-len(stream) % 8)
        rows.append([sum(stream[8 * i + j] << j for j in range(8)) for i in range(len(stream) // 8)])
    return rows


@settings(max_examples=40, deadline=None)
@given(bits=st.integers(1, 8), out=st.integers(1, 4), n_in=st.integers(1, 19), seed=st.integers(0, 2**16))
def test_pack_matches_documented_layout_and_roundtrips(bits, out, n_in, seed):
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 1 << bits, (out, n_in), generator=g, dtype=torch.uint8)
    packed = fmt.pack_codes(codes, bits)
    assert packed.dtype == torch.uint8 and tuple(packed.shape) == (out, fmt.row_bytes(n_in, bits))
    assert packed.tolist() == _reference_pack(codes.tolist(), bits)
    assert torch.equal(fmt.unpack_codes(packed, bits, (out, n_in)), codes)


def test_four_bit_layout_puts_even_codes_in_the_low_nibble():
    packed = fmt.pack_codes(torch.tensor([[0x3, 0xA, 0x1, 0xF]], dtype=torch.uint8), 4)
    assert packed.tolist() == [[0xA3, 0xF1]]


def test_pack_rejects_codes_that_do_not_fit():
    with pytest.raises(BitforgeError, match="does not fit in 2 bits"):
        fmt.pack_codes(torch.tensor([[4]], dtype=torch.uint8), 2)
    with pytest.raises(BitforgeError, match="expected uint8"):
        fmt.unpack_codes(torch.zeros(2, 3, dtype=torch.uint8), 4, (2, 8))


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
@pytest.mark.parametrize("group", [None, 32, 64])
def test_rtn_grid_holds_zero_and_covers_the_group_within_half_a_step(bits, group):
    """RTN is the standard asymmetric grid: 0 exactly on it (integer zero-point), [min, max] inside it up to half
    a step, and every weight within half a step of its code."""
    W = torch.randn(16, 128, generator=torch.Generator().manual_seed(bits))
    W[:, 5] = 0.0
    q = quantize_uniform(W, bits, group)
    g = 128 if group is None else group
    s = q.scale.float().repeat_interleave(g, dim=1)
    assert torch.equal(q.zero.float(), torch.round(q.zero.float())) and (q.zero <= 0).all()
    assert (q.dequantize()[:, 5] == 0).all()
    err = (q.dequantize() - W).abs()
    # Rounding s to float16 (relative 2^-11) moves the far end of the grid by up to (2^b - 1) * 2^-11 steps.
    slack = 0.5 + ((1 << bits) - 1) * 2.0 ** -11
    assert (err <= slack * s + 1e-6).all()
    Qg, Wg = q.dequantize().reshape(16, -1, g), W.reshape(16, -1, g)
    grid_lo = q.zero.float() * q.scale.float()
    grid_hi = (q.zero.float() + (1 << bits) - 1) * q.scale.float()
    assert (grid_lo <= Wg.amin(-1) + slack * q.scale.float() + 1e-6).all()
    assert (grid_hi >= Wg.amax(-1) - slack * q.scale.float() - 1e-6).all()
    assert Qg.shape == Wg.shape


@pytest.mark.parametrize("bits,group,expected", [(3, 64, 3.5), (2, 32, 3.0), (4, None, 4 + 32 / 96)])
def test_rtn_layer_is_what_the_checkpoint_decodes_to(bits, group, expected):
    W = torch.randn(8, 96 if group is None else 128)
    layer = rtn(W, api.LayerStats.identity(W.shape[1], "l0"), api.CompressConfig("rtn", bits=bits, group=group))
    t = layer.tensors
    assert t["scale"].dtype == torch.float16 and t["zero"].dtype == torch.float16
    codes = fmt.unpack_codes(t["codes"], bits, tuple(W.shape))
    assert torch.equal(layer.weight_hat, fmt.dequantize(codes, t["scale"], t["zero"], group))
    assert layer.bpw == pytest.approx(expected)
    assert {k: layer.meta[k] for k in ("method", "bits", "group", "zero_point", "rank", "packing")} == {
        "method": "rtn", "bits": bits, "group": group, "zero_point": "float16", "rank": 0, "packing": fmt.LAYOUT}
    assert api.METHODS["rtn"] is rtn


def test_constant_and_zero_groups_decode_exactly():
    W = torch.zeros(3, 64)
    W[1] = 0.37
    W[2, :32] = -5.0
    q = quantize_uniform(W, 3, 32)
    assert torch.allclose(q.dequantize(), W, atol=1e-3 * 5.0, rtol=0)
    assert (q.scale > 0).all()


def test_given_scale_and_zero_are_used_as_stored_float16():
    W = torch.randn(4, 64)
    s = torch.full((4, 2), 0.1234567)
    z = torch.full((4, 2), -3.3333)
    q = quantize_uniform(W, 3, 32, scale=s, zero=z)
    assert torch.equal(q.scale, s.half()) and torch.equal(q.zero, z.half())
    expect = (torch.clamp(torch.round(W / s.half().float()[:, :1] - z.half().float()[:, :1]), 0, 7)
              + z.half().float()[:, :1]) * s.half().float()[:, :1]
    assert torch.equal(q.dequantize(), expect)


@pytest.mark.parametrize("bits", [1, 9])
def test_bits_outside_two_to_eight_are_refused(bits):
    with pytest.raises(BitforgeError, match="2..8"):
        rtn(torch.randn(4, 64), api.LayerStats.identity(64), api.CompressConfig("rtn", bits=bits, group=32))


def test_group_that_does_not_divide_is_refused():
    with pytest.raises(BitforgeError, match="does not divide the input dimension 576"):
        rtn(torch.randn(4, 576), api.LayerStats.identity(576, "q_proj"), api.CompressConfig("rtn", bits=3, group=128))


def test_non_finite_weights_are_refused():
    W = torch.randn(4, 64)
    W[1, 3] = float("nan")
    with pytest.raises(BitforgeError, match="non-finite"):
        quantize_uniform(W, 3, 32)


@pytest.mark.parametrize("bits,group", [(4, 32), (8, 32), (3, None)])
def test_symmetric_grid_is_llama_cpps_and_holds_each_groups_largest_weight(bits, group):
    """``--option symmetric=true``: zero = -2^(b-1) in every group, s = max|w| / (2^(b-1) - 1), so the largest
    magnitude lands on code 2^(b-1) +- (2^(b-1) - 1) (up to the float16 rounding of s), and code 0 is never used."""
    from bitforge.toolchain.compress.api import CompressConfig, LayerStats

    W = torch.randn(8, 64, generator=torch.Generator().manual_seed(3))
    layer = rtn(W, LayerStats(torch.ones(64), 1, "blk.fc"), CompressConfig("rtn", bits=bits, group=group, options={"symmetric": True}))
    half = 1 << (bits - 1)
    assert bool((layer.tensors["zero"] == -half).all())
    g = 64 if group is None else group
    scale = layer.tensors["scale"].float().repeat_interleave(g, dim=1)
    assert torch.allclose(scale, W.reshape(8, -1, g).abs().amax(-1).repeat_interleave(g, dim=1) / (half - 1),
                          rtol=2 ** -10)
    codes = fmt.unpack_codes(layer.tensors["codes"], bits, (8, 64))
    assert int(codes.min()) >= 1 and int(codes.max()) <= 2 * half - 1
    assert float((layer.weight_hat - W).abs().max()) <= float(scale.max()) / 2 * (1 + 2 ** -9)


def test_symmetric_option_takes_a_boolean_only():
    from bitforge.toolchain.compress.api import CompressConfig, LayerStats

    with pytest.raises(BitforgeError, match=r"--option symmetric='yes': expected true or false"):
        rtn(torch.randn(4, 32), LayerStats(torch.ones(32), 1, "fc"), CompressConfig("rtn", group=32, options={"symmetric": "yes"}))
