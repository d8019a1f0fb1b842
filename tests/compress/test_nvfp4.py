"""NVFP4: exact E4M3 / E2M1 tables, round-to-nearest-even, saturation, nibble packing, quantize error bounds."""
from __future__ import annotations

import math

import pytest
import torch

from bitforge.runtime.formats import nvfp4 as f
from bitforge.toolchain.compress import api
from bitforge.toolchain.compress import nvfp4 as _registers_nvfp4  # noqa: F401
from bitforge.toolchain.errors import BitforgeError

ALL_CODES = torch.arange(256, dtype=torch.uint8)


pytestmark = pytest.mark.usefixtures("one_thread")


def torch_e4m3(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float8_e4m3fn).view(torch.uint8)


def finite_e4m3_values() -> torch.Tensor:
    values = f.e4m3_decode(ALL_CODES)
    return torch.sort(values[~torch.isnan(values) & (values >= 0)].unique()).values


# ---- E4M3 -------------------------------------------------------------------------------------------------

def test_e4m3_decode_of_all_256_codes_matches_torch():
    ours = f.e4m3_decode(ALL_CODES)
    ref = ALL_CODES.view(torch.float8_e4m3fn).to(torch.float32)
    assert torch.equal(torch.isnan(ours), torch.isnan(ref))
    assert torch.equal(ours[~torch.isnan(ours)], ref[~torch.isnan(ref)])
    assert torch.equal(torch.signbit(ours[~torch.isnan(ours)]), torch.signbit(ref[~torch.isnan(ref)]))


def test_e4m3_decode_landmarks():
    cases = {0x00: 0.0, 0x01: 2.0 ** -9, 0x07: 7 * 2.0 ** -9, 0x08: 2.0 ** -6, 0x38: 1.0, 0x39: 1.125,
             0x7E: 448.0, 0xB8: -1.0, 0xFE: -448.0}
    for code, value in cases.items():
        assert f.e4m3_decode(torch.tensor([code], dtype=torch.uint8)).item() == value, hex(code)
    nan_codes = ALL_CODES[torch.isnan(f.e4m3_decode(ALL_CODES))].tolist()
    assert nan_codes == [0x7F, 0xFF]


def test_e4m3_encode_inverts_decode_on_every_finite_code():
    values = f.e4m3_decode(ALL_CODES)
    finite = ~torch.isnan(values)
    assert torch.equal(f.e4m3_encode(values[finite]), ALL_CODES[finite])


def test_e4m3_encode_matches_torch_on_midpoints_neighbours_and_random_values():
    grid = finite_e4m3_values()
    mids = (grid[1:] + grid[:-1]) / 2
    near = torch.cat([mids, torch.nextafter(mids, torch.zeros(())), torch.nextafter(mids, torch.full((), 1e9))])
    g = torch.Generator().manual_seed(0)
    spread = torch.exp(torch.empty(20000).uniform_(math.log(2.0 ** -12), math.log(448.0), generator=g))
    x = torch.cat([grid, near, spread, torch.tensor([2.0 ** -11, 1e-30, 0.0])])
    x = x[x <= 448]
    x = torch.cat([x, -x])
    ours, ref = f.e4m3_encode(x), torch_e4m3(x)
    bad = ours != ref
    assert not bad.any(), f"first mismatch at {x[bad][:4].tolist()}: ours {ours[bad][:4]} torch {ref[bad][:4]}"


@pytest.mark.parametrize("x, expected", [
    (17.0, 16.0),                  # tie between 16 (mantissa 0) and 18 (mantissa 1): even
    (19.0, 20.0),                  # tie between 18 (1) and 20 (2)
    (124.0, 128.0),                # tie 120 (7) / 128: the carry moves into the exponent
    (126.9, 128.0),                # Triton's interpreter gives 64 here
    (2.0 ** -10, 0.0),             # half the smallest subnormal: tie with 0
    (3 * 2.0 ** -10, 2.0 ** -8),   # subnormal tie 1 / 2 -> 2
    (5 * 2.0 ** -10, 2.0 ** -8),   # subnormal tie 2 / 3 -> 2
    (15 * 2.0 ** -10, 2.0 ** -6),  # tie between the largest subnormal and the smallest normal
    (-19.0, -20.0),
])
def test_e4m3_ties_round_to_even(x, expected):
    assert f.e4m3_decode(f.e4m3_encode(torch.tensor([x]))).item() == expected


def test_e4m3_saturates_to_448_and_keeps_nan():
    x = torch.tensor([448.0, 460.0, 464.0, 500.0, 1e30, math.inf, -math.inf, -1e6, math.nan])
    codes = f.e4m3_encode(x).tolist()
    assert codes == [0x7E] * 6 + [0xFE, 0xFE, 0x7F]


# ---- E2M1 and packing --------------------------------------------------------------------------------------

def test_e2m1_decode_table():
    codes = torch.arange(16, dtype=torch.uint8)
    expected = [0, 0.5, 1, 1.5, 2, 3, 4, 6, 0, -0.5, -1, -1.5, -2, -3, -4, -6]
    assert f.e2m1_decode(codes).tolist() == expected
    assert f.e2m1_encode(f.e2m1_decode(codes)).tolist() == list(range(16))


def test_e2m1_rounds_to_nearest():
    g = torch.Generator().manual_seed(1)
    x = torch.empty(5000).uniform_(-6.0, 6.0, generator=g)
    grid = f.e2m1_decode(torch.arange(16, dtype=torch.uint8))
    nearest = grid[(x[:, None] - grid).abs().argmin(dim=1)]
    assert torch.equal(f.e2m1_decode(f.e2m1_encode(x)).abs(), nearest.abs())
    assert torch.equal(torch.signbit(f.e2m1_decode(f.e2m1_encode(x))), torch.signbit(x))


def test_e2m1_ties_round_to_even_code():
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    expected = [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0]
    assert f.e2m1_decode(f.e2m1_encode(ties)).tolist() == expected
    assert f.e2m1_decode(f.e2m1_encode(-ties)).tolist() == [-v for v in expected]


def test_e2m1_saturates_to_6():
    assert f.e2m1_decode(f.e2m1_encode(torch.tensor([6.5, 100.0, math.inf, -7.0]))).tolist() == [6, 6, 6, -6]


def test_nibble_layout_puts_even_index_low():
    assert f.pack_nibbles(torch.tensor([[0x1, 0x2, 0xF, 0x0]], dtype=torch.uint8)).tolist() == [[0x21, 0x0F]]


def test_nibble_pack_round_trip():
    g = torch.Generator().manual_seed(2)
    codes = torch.randint(0, 16, (5, 3, 34), generator=g, dtype=torch.uint8)
    packed = f.pack_nibbles(codes)
    assert packed.shape == (5, 3, 17)
    assert torch.equal(f.unpack_nibbles(packed), codes)


def test_nibble_pack_rejects_odd_length():
    with pytest.raises(BitforgeError, match="even"):
        f.pack_nibbles(torch.zeros(3, 5, dtype=torch.uint8))


# ---- quantize / dequantize ---------------------------------------------------------------------------------

def element_scales(q: f.NVFP4Weight) -> torch.Tensor:
    _out, n_in = q.shape
    g = f._global_scale_per_block(q.global_scales, n_in // f.BLOCK, q.variant)
    per_block = f.e4m3_decode(q.block_scales) * g
    return per_block.repeat_interleave(f.BLOCK, dim=1)


def half_step(a: torch.Tensor) -> torch.Tensor:
    """Largest rounding error of E2M1 at magnitude a: grid spacing 0.5 up to 2, 1 up to 4, 2 up to 6; past 6
    (a block scale rounded down by at most E4M3's half ulp, 1/16) saturation costs under 0.4."""
    return torch.where(a <= 2, 0.25, torch.where(a <= 4, 0.5, 1.0))


@pytest.mark.parametrize("variant", f.VARIANTS)
def test_dequantize_error_is_within_half_a_step_of_the_block_grid(variant):
    g = torch.Generator().manual_seed(3)
    W = torch.randn(24, 320, generator=g) * torch.exp(torch.randn(24, 1, generator=g))
    W[3, 17] = 40.0   # an outlier sets the tensor scale
    q = f.quantize(W, variant)
    s = element_scales(q)
    assert (s > 0).all()
    err = (W - f.dequantize(q)).abs()
    bound = half_step(W.abs() / s) * s
    assert (err <= bound * (1 + 1e-6)).all()
    # the block scale is block amax / 6 up to E4M3's half ulp, so nothing saturates far past 6
    assert (W.abs() / s <= 6 / (1 - 2 ** -4) + 1e-5).all()
    assert err.norm() / W.norm() < 0.15


def test_tensor_amax_is_reproduced():
    g = torch.Generator().manual_seed(4)
    W = torch.randn(8, 64, generator=g)
    W[5, 9] = -12.5
    q = f.quantize(W, "tensor")
    assert q.block_scales[5, 0].item() == 0x7E
    assert f.dequantize(q)[5, 9].item() == pytest.approx(-12.5, rel=1e-6)


def test_zero_weight_quantizes_to_zero():
    q = f.quantize(torch.zeros(4, 32), "block128")
    assert torch.equal(f.dequantize(q), torch.zeros(4, 32))


def test_block128_beats_tensor_scale_across_a_huge_dynamic_range():
    g = torch.Generator().manual_seed(5)
    W = torch.randn(32, 512, generator=g)
    decades = 12 * torch.rand(32, 4, generator=g)   # each 128-element block 10^0 .. 10^-12
    W = W * (10 ** -decades).repeat_interleave(128, dim=1)

    def relative_error_per_outer_block(variant):
        E = W - f.dequantize(f.quantize(W, variant))
        return E.reshape(32, 4, 128).norm(dim=-1) / W.reshape(32, 4, 128).norm(dim=-1)

    tensor, block128 = relative_error_per_outer_block("tensor"), relative_error_per_outer_block("block128")
    assert tensor.max() == 1.0                # blocks below E4M3's range flush to zero
    assert block128.max() < 0.2               # every outer block keeps 4-bit precision
    assert block128.mean() <= tensor.mean()


def test_bpw_and_shapes_of_the_two_variants():
    W = torch.randn(6, 576)
    q = f.quantize(W, "tensor")
    assert q.codes.shape == (6, 288) and q.block_scales.shape == (6, 36) and q.global_scales.shape == (1, 1)
    assert q.bpw == 4.5 + 32 / (6 * 576)
    q = f.quantize(W, "block128")
    assert q.global_scales.shape == (6, 5)    # 576 = 4 x 128 + 64: a ragged last outer block
    assert q.bpw == 4.5 + 32 * 5 / 576


def test_ragged_last_outer_block_has_its_own_scale():
    W = torch.ones(1, 192)
    W[0, 128:] = 1e-9                         # the last, 64-element outer block
    q = f.quantize(W, "block128")
    assert torch.allclose(f.dequantize(q), W, rtol=1e-6, atol=0)


def test_from_tensors_round_trip_and_shape_check():
    W = torch.randn(4, 256)
    q = f.quantize(W, "block128")
    again = f.NVFP4Weight.from_tensors(q.tensors(), (4, 256), "block128")
    assert torch.equal(f.dequantize(again), f.dequantize(q))
    with pytest.raises(BitforgeError, match="global_scales"):
        f.NVFP4Weight.from_tensors(q.tensors(), (4, 256), "tensor")


@pytest.mark.parametrize("bad, match", [(torch.randn(4, 40), "multiple of the 16"),
                                        (torch.randn(64), "2-D"),
                                        (torch.full((2, 16), math.nan), "NaN")])
def test_quantize_rejects_bad_weights(bad, match):
    with pytest.raises(BitforgeError, match=match):
        f.quantize(bad)


def test_unknown_variant_is_rejected():
    with pytest.raises(BitforgeError, match="variant"):
        f.quantize(torch.randn(2, 16), "per-row")


# ---- registered methods ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, variant", [("nvfp4", "tensor"), ("nvfp4-b128", "block128")])
def test_registered_methods_return_the_format(name, variant):
    W = torch.randn(16, 256)
    layer = api.METHODS[name](W, api.LayerStats.identity(256, "mlp.up"), api.CompressConfig(method=name))
    q = f.quantize(W, variant)
    assert torch.equal(layer.weight_hat, f.dequantize(q))
    assert set(layer.tensors) == {"codes", "block_scales", "global_scales"}
    assert layer.bpw == q.bpw
    assert layer.meta["method"] == name and layer.meta["group"] == 16 and layer.meta["variant"] == variant


def test_registered_method_names_the_layer_on_bad_input():
    with pytest.raises(BitforgeError, match="layer attn.q.*multiple of 16"):
        api.METHODS["nvfp4"](torch.randn(8, 24), api.LayerStats.identity(24, "attn.q"),
                             api.CompressConfig(method="nvfp4"))


@pytest.mark.parametrize("name", ["nvfp4", "nvfp4-b128"])
def test_checkpoint_decoder_reproduces_weight_hat(name):
    from bitforge.toolchain.compress import checkpoint

    W = torch.randn(8, 576)
    layer = api.METHODS[name](W, api.LayerStats.identity(576), api.CompressConfig(method=name))
    assert layer.meta["packing"] == f.LAYOUT
    assert torch.equal(checkpoint.decode_layer("mlp.down", layer.tensors, layer.meta), layer.weight_hat)
