"""The Triton kernels as the packed modules' CUDA path: adapters from a layer's stored tensors and manifest entry
(what :mod:`.reference` reads) to the kernels' arguments, registered in :data:`.kernels.KERNELS` for "cuda".

Imported by :func:`register` (``load_quantized`` on a CUDA device calls it); importing this module imports Triton,
so nothing on the CPU path does. Every layout bitforge packs has a kernel here: uniform, NVFP4, binary low-rank
(every stored path), and Q + L R with a uniform base as one fused kernel (``"uniform-v1+lowrank-v1"``, which the
module runs instead of its two parts). A Q + L R layer on an NVFP4 base runs the NVFP4 kernel plus the reference
path's low-rank term, whose two small torch matmuls run on the GPU too.
"""
from __future__ import annotations

import torch

from .kernels import KERNELS, register_kernel
from .reference import BASE_PREFIX, LOWRANK

__all__ = ["register", "uniform_kernel", "nvfp4_kernel", "binary_kernel", "uniform_lowrank_kernel", "CUDA_FORMATS"]

FUSED_UNIFORM_LOWRANK = f"uniform-v1+{LOWRANK}"


def _group(meta: dict) -> int | None:
    group = meta.get("group")
    return None if group is None else int(group)


def uniform_kernel(x: torch.Tensor, tensors: dict[str, torch.Tensor], meta: dict) -> torch.Tensor:
    """``uniform-v1``: the split-K GEMV for one row, the tiled GEMM for more; float32 out, as the reference."""
    from .triton_uniform import uniform_linear

    return uniform_linear(x.contiguous(), tensors["codes"], tensors["scale"], tensors["zero"], int(meta["bits"]),
                          _group(meta), tuple(meta["shape"])).to(torch.float32)


def nvfp4_kernel(x: torch.Tensor, tensors: dict[str, torch.Tensor], meta: dict) -> torch.Tensor:
    """``nvfp4-v1``: E2M1 pairs and E4M3 block scales decoded in registers."""
    from .triton_nvfp4 import nvfp4_linear

    return nvfp4_linear(x.contiguous(), tensors["codes"], tensors["block_scales"], tensors["global_scales"],
                        tuple(meta["shape"]), meta["variant"]).to(torch.float32)


def binary_kernel(x: torch.Tensor, tensors: dict[str, torch.Tensor], meta: dict) -> torch.Tensor:
    """``binary-lowrank-v1``: every stored path (primary, residual) through the two chained binary GEMVs; the
    sign bytes are viewed as words in place (``word_view``), so nothing is copied per call."""
    from bitforge.runtime.formats.binary import BinaryLowRankPath

    from .triton_binary import binary_lowrank_gemv, prepare_path

    paths = [prepare_path(BinaryLowRankPath.from_tensors(tensors, name)) for name in meta["paths"]]
    return binary_lowrank_gemv(x.contiguous(), paths).to(torch.float32)


def uniform_lowrank_kernel(x: torch.Tensor, tensors: dict[str, torch.Tensor], meta: dict) -> torch.Tensor:
    """A whole SRR/QERA layer with a ``uniform-v1`` base: ``x Q^T + (x R^T) L^T`` in one pass over ``x``."""
    from .triton_lowrank import lowrank_linear

    q = {k[len(BASE_PREFIX):]: t for k, t in tensors.items() if k.startswith(BASE_PREFIX)}
    return lowrank_linear(x.contiguous(), q["codes"], q["scale"], q["zero"], int(meta["bits"]), _group(meta),
                          tuple(meta["shape"]), tensors["lr_left"], tensors["lr_right"]).to(torch.float32)


#: registry name -> the kernel this module registers for "cuda"
CUDA_KERNELS = {"uniform-v1": uniform_kernel, "nvfp4-v1": nvfp4_kernel, "binary-lowrank-v1": binary_kernel,
                FUSED_UNIFORM_LOWRANK: uniform_lowrank_kernel}
#: Layouts (and fused layer forms) this module gives a Triton kernel on CUDA.
CUDA_FORMATS = tuple(CUDA_KERNELS)


def register() -> None:
    """Register the kernels for "cuda" (idempotent)."""
    from . import triton_common  # noqa: F401 - a missing Triton is reported here, naming the extra to install

    for fmt, fn in CUDA_KERNELS.items():
        if KERNELS.get((fmt, "cuda")) is not fn:
            register_kernel(fmt, "cuda")(fn)
