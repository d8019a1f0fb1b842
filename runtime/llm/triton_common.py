"""What every Triton kernel module of the LLM runtime shares: the optional import and the checks of its inputs.

Triton is an optional extra (``bitforge[gpu]``), so ``bitforge.runtime.llm`` never imports it; each kernel module
imports :data:`triton` and :data:`tl` from here, and a machine without Triton gets a :class:`BitforgeError` saying
how to install it instead of a bare ``ModuleNotFoundError``. On a machine without a GPU the kernels still run
under Triton's interpreter (``TRITON_INTERPRET=1`` set before Triton is imported), on CPU tensors; that is how the
tests check them.
"""
from __future__ import annotations

import os

import torch

from bitforge.toolchain.errors import BitforgeError

try:
    import triton
    import triton.language as tl
except ImportError as exc:   # pragma: no cover - the gpu extra is installed wherever the tests run
    raise BitforgeError("the LLM runtime's GPU kernels need Triton, which is not installed: "
                        "pip install 'bitforge[gpu]'") from exc

__all__ = ["triton", "tl", "interpreting", "check_device", "check_tensor"]


def interpreting() -> bool:
    """Whether Triton runs kernels in its interpreter (numpy on the CPU) rather than compiling them."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def check_device(kernel: str, *tensors: torch.Tensor) -> None:
    """All tensors on one device that can run ``kernel``: CUDA, or the CPU under the interpreter."""
    devices = {t.device for t in tensors}
    if len(devices) != 1:
        raise BitforgeError(f"{kernel}: the inputs are on different devices {sorted(map(str, devices))}; "
                            "move them to one device")
    device = devices.pop()
    if device.type == "cuda" or (device.type == "cpu" and interpreting()):
        return
    raise BitforgeError(f"{kernel}: inputs on {device} cannot run a Triton kernel; use CUDA tensors (or set "
                        "TRITON_INTERPRET=1 before importing Triton to run it on CPU tensors), or the PyTorch "
                        "reference path")


def check_tensor(kernel: str, name: str, t: torch.Tensor, shape: tuple[int, ...],
                 dtypes: tuple[torch.dtype, ...]) -> None:
    """``t`` has exactly ``shape`` and one of ``dtypes``, else an error naming the kernel and the tensor."""
    if tuple(t.shape) != tuple(shape) or t.dtype not in dtypes:
        want = " or ".join(str(d).removeprefix("torch.") for d in dtypes)
        raise BitforgeError(f"{kernel}: {name} is {str(t.dtype).removeprefix('torch.')} {tuple(t.shape)}, "
                            f"expected {want} {tuple(shape)}")
