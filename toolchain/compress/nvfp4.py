"""NVFP4 as a compression method: round-to-nearest into the format of :mod:`bitforge.runtime.formats.nvfp4`.

``nvfp4`` carries one FP32 scale per tensor (4.5 bits per weight), ``nvfp4-b128`` one per 128-element outer
block of a row (TetraJet-v2's double-block scaling, 4.75 bits per weight), which keeps the E4M3 block scales in
range when magnitudes differ by more than E4M3's dynamic range across a row or the matrix.

The format fixes the element type (E2M1) and the block (16), so ``cfg.bits`` and ``cfg.group`` are not used;
NVFP4 is a plain rounding format, so the calibration statistics are not used either.
"""
from __future__ import annotations

import torch

from ...runtime.formats import nvfp4 as fmt
from ..errors import BitforgeError
from .api import CompressConfig, CompressedLayer, LayerStats, bits_per_weight, check_options, register
from .checkpoint import register_decoder


def compress_nvfp4(W: torch.Tensor, variant: str, layer: str = "") -> CompressedLayer:
    """Quantize ``W`` to NVFP4 (``variant`` "tensor" or "block128") and describe it for the manifest."""
    if W.dim() == 2 and W.shape[1] % fmt.BLOCK:
        where = f"layer {layer}: " if layer else ""
        raise BitforgeError(f"{where}NVFP4 needs an input dimension that is a multiple of {fmt.BLOCK}, "
                            f"got {W.shape[1]}; leave this layer uncompressed or use another method")
    q = fmt.quantize(W, variant)
    out, n_in = q.shape
    tensors = q.tensors()
    bpw = bits_per_weight({"codes": (out * n_in, 4), "block_scales": (q.block_scales.numel(), 8),
                           "global_scales": (q.global_scales.numel(), 32)}, out * n_in)
    meta = {
        "method": "nvfp4" if variant == "tensor" else "nvfp4-b128",
        "bits": 4, "group": fmt.BLOCK, "zero_point": "none", "rank": 0,
        "packing": fmt.LAYOUT,
        "variant": variant, "shape": [out, n_in], "bpw": bpw,
    }
    return CompressedLayer(fmt.dequantize(q), tensors, meta)


@register("nvfp4")
def nvfp4_tensor(W: torch.Tensor, stats: LayerStats, cfg: CompressConfig) -> CompressedLayer:
    """NVFP4 with one FP32 tensor scale."""
    check_options(cfg.options, "nvfp4")
    return compress_nvfp4(W, "tensor", stats.name)


@register("nvfp4-b128")
def nvfp4_block128(W: torch.Tensor, stats: LayerStats, cfg: CompressConfig) -> CompressedLayer:
    """NVFP4 with an FP32 scale per 128-element outer block (TetraJet-v2 double-block)."""
    check_options(cfg.options, "nvfp4-b128")
    return compress_nvfp4(W, "block128", stats.name)


# Neither variant reads calibration statistics: the driver skips the forward passes for them.
nvfp4_tensor.uses_calibration = False
nvfp4_block128.uses_calibration = False


@register_decoder("nvfp4")
@register_decoder("nvfp4-b128")
def decode_nvfp4(tensors: dict[str, torch.Tensor], meta: dict) -> torch.Tensor:
    """Checkpoint decoder: the stored fields back to the float32 weight."""
    return fmt.dequantize(fmt.NVFP4Weight.from_tensors(tensors, tuple(meta["shape"]), meta["variant"]))
