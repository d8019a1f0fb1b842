"""NVFP4: 4-bit E2M1 weights in 16-element blocks with an E4M3 block scale and an FP32 scale above it.

Layout of one ``[out, in]`` weight (``in`` a multiple of 16; blocks run along the input dimension, so block ``b``
of row ``o`` is ``W[o, 16 b : 16 b + 16]``):

``codes``          uint8 ``[out, in / 2]``   two E2M1 nibbles per byte, element ``2 j`` in the low nibble and
                                              ``2 j + 1`` in the high nibble; nibble = ``sign << 3 | magnitude``.
``block_scales``   uint8 ``[out, in / 16]``  E4M3 (fp8 e4m3fn) code of each block's scale.
``global_scales``  float32                   ``[1, 1]`` for the per-tensor variant (``"tensor"``), or
                                              ``[out, ceil(in / 128)]`` for the double-block variant
                                              (``"block128"``, TetraJet-v2): one FP32 scale per 128-element outer
                                              block (8 inner blocks) of a row; the last outer block of a row may
                                              hold fewer than 8 inner blocks (SmolLM2's 576 = 4 x 128 + 64).

Decoding: ``w = (e2m1(code) * e4m3(block_scale)) * global_scale``. The first product is exact in float32 (2 + 4
significant bits), so the only rounding is the final multiply, which a GPU kernel reproduces bit for bit.

Scale choice (NVIDIA's recipe): the FP32 scale maps the largest magnitude it covers to the largest product of
the two small formats, ``global = amax / (6 * 448)``; each block scale is ``block_amax / 6 / global`` rounded to
E4M3, so the block's largest element lands near E2M1's 6 and the scale itself never exceeds E4M3's 448. An
all-zero region takes ``global = 1`` (its codes are all zero anyway).

Storage cost: ``4 + 8 / 16 + 32 * global_scales.numel() / (out * in)`` bits per weight: 4.5 plus a vanishing
term per tensor, 4.75 with one FP32 per 128 elements.

E4M3 rounding is done with integer arithmetic on the float32 bit pattern, not with a float8 cast: Triton's
interpreter drops the carry of a rounding that overflows the mantissa (126.9 -> 64 instead of 128), and the
GPU kernels' tests need a reference that is right by construction.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch

from bitforge.toolchain.errors import BitforgeError

LAYOUT = "nvfp4-v1"   # the manifest's "packing"; the variant is the manifest's "variant"
BLOCK = 16
OUTER_BLOCK = 128
E2M1_MAX = 6.0
E4M3_MAX = 448.0
VARIANTS = ("tensor", "block128")

# Magnitudes of the 3-bit E2M1 code (1 exponent bias, 1 mantissa bit): subnormal 0.5, then 1, 1.5, 2, 3, 4, 6.
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# Rounding boundaries between consecutive magnitudes; a value exactly on one goes to the even code (RNE).
_E2M1_MIDPOINTS = torch.tensor([(a + b) / 2 for a, b in itertools.pairwise(E2M1_VALUES)], dtype=torch.float32)


def _e4m3_table() -> torch.Tensor:
    """Value of each of the 256 fp8 e4m3fn codes: bias 7, subnormals m/8 * 2^-6, S.1111.111 is NaN, no inf."""
    values = []
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        exp, man = (code >> 3) & 0xF, code & 0x7
        if exp == 0xF and man == 0x7:
            values.append(math.nan)
        elif exp == 0:
            values.append(sign * math.ldexp(man / 8.0, -6))
        else:
            values.append(sign * math.ldexp(1.0 + man / 8.0, exp - 7))
    return torch.tensor(values, dtype=torch.float32)


E4M3_TABLE = _e4m3_table()
E2M1_TABLE = torch.tensor(list(E2M1_VALUES) + [-v for v in E2M1_VALUES], dtype=torch.float32)


def e4m3_encode(x: torch.Tensor) -> torch.Tensor:
    """float -> fp8 e4m3fn codes (uint8), round to nearest even, saturating to +-448; NaN -> 0x7F.

    Works on the float32 bits. Normal results (float32 exponent >= 121, i.e. |x| >= 2^-6) drop 20 of the 23
    mantissa bits with the add-half-minus-one-plus-lsb trick, and the carry of a round-up flows into the exponent
    field by itself. Subnormal results are ``|x| / 2^-9`` rounded: the 24-bit significand shifted right by
    ``141 - exponent`` with an explicit remainder-versus-half comparison.
    """
    bits = x.detach().to(torch.float32).contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    sign = (bits >> 31) & 1
    mag = bits & 0x7FFFFFFF
    exp = mag >> 23
    normal = ((mag + 0x7FFFF + ((mag >> 20) & 1)) >> 20) - (120 << 3)

    significand = torch.where(exp > 0, (mag & 0x7FFFFF) | (1 << 23), mag & 0x7FFFFF)
    shift = (141 - torch.clamp(exp, min=1)).clamp(min=1, max=40)   # >= 25 already rounds everything to 0
    quotient = significand >> shift
    remainder = significand & ((torch.ones_like(shift) << shift) - 1)
    half = torch.ones_like(shift) << (shift - 1)
    round_up = (remainder > half) | ((remainder == half) & ((quotient & 1) == 1))
    subnormal = quotient + round_up.to(torch.int64)

    code = torch.where(exp >= 121, normal, subnormal).clamp(max=0x7E)   # saturate: inf and >= 464 -> 448
    code = torch.where(mag > 0x7F800000, torch.full_like(code, 0x7F), code)
    return (code | (sign << 7)).to(torch.uint8)


def e4m3_decode(codes: torch.Tensor) -> torch.Tensor:
    """fp8 e4m3fn codes (uint8) -> float32, through the exact 256-entry table."""
    return E4M3_TABLE[codes.to(torch.int64)]


def e2m1_encode(x: torch.Tensor) -> torch.Tensor:
    """float -> 4-bit E2M1 codes (uint8 0..15, sign in bit 3), round to nearest even, saturating to +-6.

    ``bucketize`` with ``right=False`` and ``right=True`` differ exactly on a midpoint; there the even code of
    the two neighbours wins (0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4).
    """
    x = x.detach().to(torch.float32)
    mag = x.abs()
    down = torch.bucketize(mag, _E2M1_MIDPOINTS, right=False)
    up = torch.bucketize(mag, _E2M1_MIDPOINTS, right=True)
    code = torch.where(up != down, down + (down & 1), down)
    code = torch.where(torch.isnan(x), torch.zeros_like(code), code)
    return (code | (torch.signbit(x).to(torch.int64) << 3)).to(torch.uint8)


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    """4-bit E2M1 codes -> float32."""
    return E2M1_TABLE[codes.to(torch.int64) & 0xF]


def pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """``[..., n]`` 4-bit codes (n even) -> ``[..., n / 2]`` bytes, even index in the low nibble."""
    if codes.shape[-1] % 2:
        raise BitforgeError(f"pack_nibbles: the last dimension ({codes.shape[-1]}) must be even")
    c = codes.to(torch.uint8) & 0xF
    return c[..., 0::2] | (c[..., 1::2] << 4)


def unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`pack_nibbles`: ``[..., m]`` bytes -> ``[..., 2 m]`` codes."""
    p = packed.to(torch.uint8)
    return torch.stack((p & 0xF, p >> 4), dim=-1).reshape(*p.shape[:-1], 2 * p.shape[-1])


@dataclass(frozen=True)
class NVFP4Weight:
    """The stored fields of one NVFP4 weight (layout in the module docstring)."""

    codes: torch.Tensor
    block_scales: torch.Tensor
    global_scales: torch.Tensor
    shape: tuple[int, int]
    variant: str

    @property
    def bpw(self) -> float:
        out, n_in = self.shape
        return 4 + 8 / BLOCK + 32 * self.global_scales.numel() / (out * n_in)

    def tensors(self) -> dict[str, torch.Tensor]:
        """The checkpoint's tensors (names relative to the layer)."""
        return {"codes": self.codes, "block_scales": self.block_scales, "global_scales": self.global_scales}

    @staticmethod
    def from_tensors(tensors: dict[str, torch.Tensor], shape: tuple[int, int], variant: str) -> NVFP4Weight:
        """Rebuild from a checkpoint, checking every field's shape against ``shape`` and ``variant``."""
        _check_variant(variant)
        out, n_in = shape
        expected = {"codes": (out, n_in // 2), "block_scales": (out, n_in // BLOCK),
                    "global_scales": _global_shape(out, n_in, variant)}
        for name, want in expected.items():
            if name not in tensors:
                raise BitforgeError(f"NVFP4 weight {shape}: tensor {name!r} is missing from the checkpoint")
            if tuple(tensors[name].shape) != want:
                raise BitforgeError(f"NVFP4 weight {shape} ({variant}): {name} has shape "
                                    f"{tuple(tensors[name].shape)}, expected {want}")
        return NVFP4Weight(tensors["codes"], tensors["block_scales"], tensors["global_scales"],
                           (out, n_in), variant)


def _check_variant(variant: str) -> None:
    if variant not in VARIANTS:
        raise BitforgeError(f"NVFP4 variant {variant!r}: expected one of {VARIANTS}")


def _global_shape(out: int, n_in: int, variant: str) -> tuple[int, int]:
    return (1, 1) if variant == "tensor" else (out, -(-n_in // OUTER_BLOCK))


def _global_scale_per_block(global_scales: torch.Tensor, n_blocks: int, variant: str) -> torch.Tensor:
    """The FP32 scale that applies to each 16-element block: ``[1, 1]`` or ``[out, n_blocks]``."""
    if variant == "tensor":
        return global_scales
    outer_of_block = torch.arange(n_blocks) // (OUTER_BLOCK // BLOCK)
    return global_scales[:, outer_of_block]


def quantize(W: torch.Tensor, variant: str = "tensor") -> NVFP4Weight:
    """Round a float ``[out, in]`` weight to NVFP4 with the scales of the module docstring."""
    _check_variant(variant)
    if W.dim() != 2:
        raise BitforgeError(f"NVFP4 quantize: expected a 2-D [out, in] weight, got shape {tuple(W.shape)}")
    out, n_in = W.shape
    if n_in % BLOCK:
        raise BitforgeError(f"NVFP4 quantize: the input dimension {n_in} is not a multiple of the "
                            f"{BLOCK}-element block; pad the layer's inputs or use another method")
    W = W.detach().to(torch.float32)
    if not torch.isfinite(W).all():
        raise BitforgeError("NVFP4 quantize: the weight holds NaN or inf")
    n_blocks = n_in // BLOCK
    blocks = W.reshape(out, n_blocks, BLOCK)
    block_amax = blocks.abs().amax(dim=-1)

    if variant == "tensor":
        outer_amax = W.abs().amax().reshape(1, 1)
    else:
        per_outer = OUTER_BLOCK // BLOCK
        n_outer = -(-n_blocks // per_outer)
        padded = torch.nn.functional.pad(block_amax, (0, n_outer * per_outer - n_blocks))
        outer_amax = padded.reshape(out, n_outer, per_outer).amax(dim=-1)
    global_scales = outer_amax / (E2M1_MAX * E4M3_MAX)
    global_scales = torch.where(global_scales > 0, global_scales, torch.ones_like(global_scales))

    g = _global_scale_per_block(global_scales, n_blocks, variant)
    block_scales = e4m3_encode(block_amax / E2M1_MAX / g)
    scale = e4m3_decode(block_scales) * g
    nonzero = scale > 0   # a block whose scale underflows E4M3 stores zeros
    elements = blocks / torch.where(nonzero, scale, torch.ones_like(scale))[..., None]
    codes = torch.where(nonzero[..., None], e2m1_encode(elements), torch.zeros_like(elements, dtype=torch.uint8))
    return NVFP4Weight(pack_nibbles(codes.reshape(out, n_in)), block_scales, global_scales, (out, n_in), variant)


def dequantize(q: NVFP4Weight) -> torch.Tensor:
    """Decode to float32 ``[out, in]``: ``(e2m1 * e4m3) * fp32``, the order a kernel uses."""
    out, n_in = q.shape
    n_blocks = n_in // BLOCK
    elements = e2m1_decode(unpack_nibbles(q.codes)).reshape(out, n_blocks, BLOCK)
    g = _global_scale_per_block(q.global_scales.to(torch.float32), n_blocks, q.variant)
    scaled = elements * e4m3_decode(q.block_scales)[..., None]
    return (scaled * g.expand(out, n_blocks)[..., None]).reshape(out, n_in)
