"""The Triton kernels as the packed modules' CUDA path: adapters from a layer's stored tensors and manifest entry
(what :mod:`.reference` reads) to the kernels' arguments, registered in :data:`.kernels.KERNELS` for "cuda".

Imported by :func:`register` (``load_quantized`` on a CUDA device calls it); importing this module imports Triton,
so nothing on the CPU path does. Formats without a kernel here (the binary low-rank paths, the ``lowrank-v1`` term
of a Q + L R layer) keep the reference path, whose torch ops run on the GPU too.
"""
from __future__ import annotations

import torch

from .kernels import KERNELS, register_kernel

__all__ = ["register", "uniform_kernel", "nvfp4_kernel", "CUDA_FORMATS"]

#: Layouts this module gives a Triton kernel on CUDA.
CUDA_FORMATS = ("uniform-v1", "nvfp4-v1")


def uniform_kernel(x: torch.Tensor, tensors: dict[str, torch.Tensor], meta: dict) -> torch.Tensor:
    """``uniform-v1``: the split-K GEMV for one row, the tiled GEMM for more; float32 out, as the reference."""
    from .triton_uniform import uniform_linear

    group = meta.get("group")
    return uniform_linear(x.contiguous(), tensors["codes"], tensors["scale"], tensors["zero"], int(meta["bits"]),
                          None if group is None else int(group), tuple(meta["shape"])).to(torch.float32)


def nvfp4_kernel(x: torch.Tensor, tensors: dict[str, torch.Tensor], meta: dict) -> torch.Tensor:
    """``nvfp4-v1``: E2M1 pairs and E4M3 block scales decoded in registers."""
    from .triton_nvfp4 import nvfp4_linear

    return nvfp4_linear(x.contiguous(), tensors["codes"], tensors["block_scales"], tensors["global_scales"],
                        tuple(meta["shape"]), meta["variant"]).to(torch.float32)


def register() -> None:
    """Register the kernels for "cuda" (idempotent)."""
    from . import triton_common  # noqa: F401 - a missing Triton is reported here, naming the extra to install

    for fmt, fn in zip(CUDA_FORMATS, (uniform_kernel, nvfp4_kernel)):
        if KERNELS.get((fmt, "cuda")) is not fn:
            register_kernel(fmt, "cuda")(fn)
