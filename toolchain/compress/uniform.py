"""Uniform b-bit weight quantization with a float zero-point, and its min-max (RTN) initialiser.

``Q(w) = (clamp(round(w/s - z), 0, 2^b - 1) + z) * s`` per output channel or per group of ``group`` consecutive
input columns (NeUQI's parametrisation, arXiv 2505.17595): the zero-point ``z`` is a float in units of the
scale, so the grid need not contain 0 and an initialiser may place it anywhere.

Scale and zero-point are stored as float16, and codes are always rounded against the *stored* (fp16-rounded)
parameters, so ``weight_hat`` is bit for bit what a checkpoint decodes to (:mod:`bitforge.runtime.formats.uniform`).
Other methods (NeUQI, GPTQ, SRR/QERA on a residual, OSAQ before a quantizer) build on :func:`quantize_uniform`.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ...runtime.formats import uniform as fmt
from ..errors import BitforgeError
from .api import CompressConfig, CompressedLayer, LayerStats, bits_per_weight, check_group, check_options, register

MIN_BITS, MAX_BITS = 2, 8
# The smallest positive float16 (subnormal): a stored scale must not flush to zero.
FP16_TINY = 2.0 ** -24
_FP16_MAX = 65504.0


def check_bits(bits: int, method: str = "uniform") -> None:
    """Uniform methods take 2..8 bits (1 bit has no useful min-max grid; above 8 the codes do not fit a byte)."""
    if not MIN_BITS <= int(bits) <= MAX_BITS:
        raise BitforgeError(f"method {method}: --bits {bits} not supported; uniform quantizers take "
                            f"{MIN_BITS}..{MAX_BITS} bits")


def check_weight(W: torch.Tensor, layer: str = "") -> None:
    where = f"layer {layer}: " if layer else ""
    if W.dim() != 2:
        raise BitforgeError(f"{where}expected a 2-D weight [out, in], got shape {tuple(W.shape)}")
    if not torch.isfinite(W).all():
        raise BitforgeError(f"{where}the weight has non-finite entries (NaN or inf); fix the checkpoint first")


def group_size(W: torch.Tensor, group: int | None) -> int:
    """Columns per group (``None``: the whole row)."""
    return W.shape[1] if group is None else group


def grouped(W: torch.Tensor, group: int | None) -> torch.Tensor:
    """``[out, in]`` -> ``[out, in // g, g]`` view: one slice per (row, group)."""
    g = group_size(W, group)
    return W.reshape(W.shape[0], W.shape[1] // g, g)


def minmax_params(W: torch.Tensor, bits: int, group: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """RTN min-max: ``s = (max - min) / (2^b - 1)``, ``z = min / s`` per group (float32 ``[out, groups]``).

    With a float zero-point the grid spans exactly ``[min, max]`` (no need to stretch it to contain 0).
    """
    Wg = grouped(W.to(torch.float32), group)
    lo, hi = Wg.amin(-1), Wg.amax(-1)
    scale = (hi - lo) / float((1 << bits) - 1)
    scale = torch.maximum(scale, safe_scale_floor(Wg.abs().amax(-1)))
    return scale, lo / scale


def rtn_params(W: torch.Tensor, bits: int, group: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The RTN baseline's grid (GPTQ's and AutoGPTQ's asymmetric quantizer): the range is stretched to contain 0,
    ``s = (max - min) / (2^b - 1)`` and the zero-point is an integer, ``z = round(min / s)``, so 0 is on the grid.

    Why not :func:`minmax_params`' exact ``[min, max]``: LLM weights crowd around 0, and a grid that misses 0 puts
    them all up to s/2 away from it. Measured on SmolLM2-135M, W3 g64: perplexity 139.9 with the float zero-point,
    42.96 with this grid (the issue's reference RTN; W4 g64 19.43, W2 g32 30,329 likewise). The integer zero-point
    is stored in the same float16 field (exact up to 2048).
    """
    Wg = grouped(W.to(torch.float32), group)
    lo, hi = torch.clamp(Wg.amin(-1), max=0.0), torch.clamp(Wg.amax(-1), min=0.0)
    scale = (hi - lo) / float((1 << bits) - 1)
    scale = torch.maximum(scale, safe_scale_floor(Wg.abs().amax(-1)))
    return scale, torch.round(lo / scale)


def symmetric_params(W: torch.Tensor, bits: int, group: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """A symmetric grid, ``s = max|w| / (2^(b-1) - 1)`` and ``z = -2^(b-1)``: ``w = s (q - 2^(b-1))``, code 0 unused.

    Why offer it: it is the grid llama.cpp's symmetric blocks hold exactly (``--option symmetric=true`` at 8 bits
    gives Q8_0's ``d = max|w| / 127``; at 4 bits a zero of -8 is Q4_0's ``d (q - 8)``), so such a checkpoint exports
    to GGUF without the float16 offset of Q4_1 or the refusal of an asymmetric 8-bit layer (docs/llm-runtime.md).
    It spends one code and fits asymmetric groups worse than :func:`rtn_params` (measure before preferring it)."""
    Wg = grouped(W.to(torch.float32), group)
    half = float(1 << (bits - 1))
    absmax = Wg.abs().amax(-1)
    scale = torch.maximum(absmax / max(half - 1.0, 1.0), safe_scale_floor(absmax))
    return scale, torch.full_like(scale, -half)


def safe_scale_floor(absmax: torch.Tensor) -> torch.Tensor:
    """A constant group has zero range; flooring its scale at ``absmax * 2^-12`` keeps ``z = w/s`` a power of two
    small enough for float16 (so the group still decodes exactly) and keeps the scale a positive float16."""
    return torch.clamp(absmax * 2.0 ** -12, min=FP16_TINY)


def store_params(scale: torch.Tensor, zero: torch.Tensor, layer: str = "") -> tuple[torch.Tensor, torch.Tensor]:
    """Round (scale, zero) to the float16 the checkpoint stores; refuse what float16 cannot hold."""
    where = f"layer {layer}: " if layer else ""
    scale = scale.to(torch.float32)
    if not torch.isfinite(scale).all() or (scale <= 0).any() or (scale > _FP16_MAX).any():
        raise BitforgeError(f"{where}uniform scales must be positive and at most {_FP16_MAX} (float16); "
                            f"got range [{float(scale.min()):.3g}, {float(scale.max()):.3g}]")
    if not torch.isfinite(zero).all() or (zero.abs() > _FP16_MAX).any():
        raise BitforgeError(f"{where}uniform zero-points must fit float16 (|z| <= {_FP16_MAX})")
    s16 = torch.clamp(scale, min=FP16_TINY).to(torch.float16)
    s16 = torch.where(s16 == 0, torch.tensor(FP16_TINY, dtype=torch.float16), s16)
    return s16, zero.to(torch.float32).to(torch.float16)


def round_codes(w: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int) -> torch.Tensor:
    """``clamp(round(w/s - z), 0, 2^b - 1)`` as float32 (broadcasting; s, z as stored, in float32)."""
    return torch.clamp(torch.round(w / scale - zero), 0, (1 << bits) - 1)


@dataclass(frozen=True)
class UniformQuantized:
    """A uniformly quantized ``[out, in]`` matrix: unpacked uint8 codes and float16 scale/zero ``[out, groups]``."""

    codes: torch.Tensor
    scale: torch.Tensor
    zero: torch.Tensor
    bits: int
    group: int | None

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.codes.shape)

    def dequantize(self) -> torch.Tensor:
        """float32 weight, decoded exactly as the runtime decodes the checkpoint."""
        return fmt.dequantize(self.codes, self.scale, self.zero, self.group)

    def packed(self) -> torch.Tensor:
        return fmt.pack_codes(self.codes, self.bits)

    def tensors(self) -> dict[str, torch.Tensor]:
        """What the checkpoint stores for this matrix."""
        return {"codes": self.packed(), "scale": self.scale, "zero": self.zero}

    def bpw(self) -> float:
        """Stored bits per weight: packed code bytes (row padding included) plus 16 bits per scale and zero."""
        out, n_in = self.shape
        parts = {"codes": (out * fmt.row_bytes(n_in, self.bits), 8), "scale": (self.scale.numel(), 16),
                 "zero": (self.zero.numel(), 16)}
        return bits_per_weight(parts, self.codes.numel())

    def meta(self, method: str) -> dict:
        return {"method": method, "bits": self.bits, "group": self.group, "zero_point": "float16",
                "scale_dtype": "float16", "rank": 0, "packing": fmt.LAYOUT, "shape": list(self.shape),
                "bpw": self.bpw()}

    def to_layer(self, method: str) -> CompressedLayer:
        return CompressedLayer(weight_hat=self.dequantize(), tensors=self.tensors(), meta=self.meta(method))


def quantize_uniform(W: torch.Tensor, bits: int, group: int | None, scale: torch.Tensor | None = None,
                     zero: torch.Tensor | None = None, layer: str = "", method: str = "uniform") -> UniformQuantized:
    """Round ``W`` to nearest on the grid of (``scale``, ``zero``) (``[out, groups]``; min-max when omitted).

    The parameters are rounded to float16 first and the codes computed against the stored values, so rounding to
    nearest is optimal for the grid the checkpoint really holds.
    """
    check_weight(W, layer)
    check_bits(bits, method)
    check_group(W, group, layer)
    if (scale is None) != (zero is None):
        raise BitforgeError(f"method {method}: give both scale and zero, or neither (the RTN grid)")
    if scale is None:
        scale, zero = rtn_params(W, bits, group)
    n_groups = W.shape[1] // group_size(W, group)
    if tuple(scale.shape) != (W.shape[0], n_groups) or tuple(zero.shape) != (W.shape[0], n_groups):
        raise BitforgeError(f"method {method}: scale/zero must have shape [{W.shape[0]}, {n_groups}], got "
                            f"{tuple(scale.shape)} and {tuple(zero.shape)}")
    s16, z16 = store_params(scale, zero, layer)
    codes = round_codes(grouped(W.to(torch.float32), group), s16.float().unsqueeze(-1), z16.float().unsqueeze(-1),
                        bits)
    return UniformQuantized(codes.reshape(W.shape).to(torch.uint8), s16, z16, int(bits), group)


@register("rtn")
def rtn(W: torch.Tensor, stats: LayerStats, cfg: CompressConfig) -> CompressedLayer:
    """Round to nearest on the min-max grid with 0 on it (:func:`rtn_params`): the baseline every other uniform
    method must beat."""
    check_options(cfg.options, "rtn", ("symmetric",))
    if not symmetric_option(cfg.options, "rtn"):
        return quantize_uniform(W, cfg.bits, cfg.group, layer=stats.name, method="rtn").to_layer("rtn")
    check_weight(W, stats.name)
    check_bits(cfg.bits, "rtn")
    check_group(W, cfg.group, stats.name)
    scale, zero = symmetric_params(W, cfg.bits, cfg.group)
    return quantize_uniform(W, cfg.bits, cfg.group, scale, zero, layer=stats.name, method="rtn").to_layer("rtn")


def symmetric_option(options: dict, method: str) -> bool:
    """``--option symmetric=true|false`` (default false): :func:`symmetric_params`' grid instead of RTN's."""
    v = options.get("symmetric", False)
    if not isinstance(v, bool):
        raise BitforgeError(f"{method}: --option symmetric={v!r}: expected true or false")
    return v


rtn.uses_calibration = False  # the driver skips the calibration forward passes for it
