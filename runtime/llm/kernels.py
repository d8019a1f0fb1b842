"""The packed layers' kernel registry: ``(format, device type) -> fn(x, tensors, meta) -> float32 x W^T``.

The reference path (:mod:`.reference`) is registered for ``"cpu"`` and is the fallback for every device (its torch ops
run anywhere); :mod:`.cuda_kernels` registers the Triton kernels for ``"cuda"``. Its own module so that both
:mod:`.modules` and a kernel module can import it without importing each other.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from bitforge.runtime.llm import reference

__all__ = ["Kernel", "KERNELS", "register_kernel", "find_kernel"]

Kernel = Callable[[torch.Tensor, dict[str, torch.Tensor], dict], torch.Tensor]
#: (format, device type) -> forward; the reference path is ("<format>", "cpu") and the fallback for any device
KERNELS: dict[tuple[str, str], Kernel] = {(fmt, "cpu"): fn for fmt, fn in reference.FORWARDS.items()}


def register_kernel(fmt: str, device_type: str) -> Callable[[Kernel], Kernel]:
    """Decorator: ``fn(x, tensors, meta) -> float32 y`` computes the ``fmt`` part of a layer on ``device_type``."""
    def wrap(fn: Kernel) -> Kernel:
        if (fmt, device_type) in KERNELS and device_type != "cpu":
            raise RuntimeError(f"kernel for {fmt!r} on {device_type!r} registered twice")
        KERNELS[(fmt, device_type)] = fn
        return fn
    return wrap


def find_kernel(fmt: str, device_type: str) -> Kernel:
    """The kernel for ``fmt`` on ``device_type``, else the reference path."""
    fn = KERNELS.get((fmt, device_type)) or KERNELS.get((fmt, "cpu"))
    if fn is None:
        raise reference.PackedLayerError(f"no forward for format {fmt!r}; known: "
                                         f"{', '.join(sorted({f for f, _ in KERNELS}))}")
    return fn
