"""The window geometry of convolutions and pooling, as one table of input indices.

Every window op (Conv, Pool) reads, for each output position and each kernel tap, one input element or the
padding. :func:`window_indices` lists those reads once: the golden model gathers with it, the interval analysis
bounds with it, the ONNX backend lowers to a ``Gather`` with it, and the RTL backend builds its window
multiplexers from it, so the four cannot disagree about which element sits under which tap.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

__all__ = ["PAD", "output_spatial", "window_indices", "gather_windows"]

#: Index of a tap that falls on the padding.
PAD = -1


def output_spatial(in_spatial: Sequence[int], kernel: Sequence[int], stride: Sequence[int], padding: Sequence[int],
                   dilation: Sequence[int]) -> tuple[int, ...]:
    """Output size per spatial axis (floor mode, as ONNX and PyTorch by default)."""
    nd = len(kernel)
    return tuple((in_spatial[a] + padding[a] + padding[nd + a] - dilation[a] * (kernel[a] - 1) - 1) // stride[a] + 1
                 for a in range(nd))


def window_indices(in_spatial: Sequence[int], kernel: Sequence[int], stride: Sequence[int],
                   padding: Sequence[int], dilation: Sequence[int]) -> np.ndarray:
    """``(positions, taps)`` int64: the flat (C-order) spatial index each tap of each output position reads, or
    :data:`PAD`. Positions and taps are both in C order (the last spatial axis fastest), so a Conv weight
    ``(C_out, C_in, *kernel)`` reshaped to ``(C_out, C_in * taps)`` lines up with them."""
    nd = len(kernel)
    out = output_spatial(in_spatial, kernel, stride, padding, dilation)
    coords = []  # per axis: (out_a, k_a) input coordinate
    for a in range(nd):
        o = np.arange(out[a])[:, None] * stride[a] - padding[a]
        coords.append(o + np.arange(kernel[a])[None, :] * dilation[a])
    positions, taps = math.prod(out), math.prod(kernel)
    flat = np.zeros((positions, taps), dtype=np.int64)
    valid = np.ones((positions, taps), dtype=bool)
    # Broadcast every axis's (out_a, k_a) table to (out_0, ..., out_{n-1}, k_0, ..., k_{n-1}).
    for a in range(nd):
        shape = [1] * (2 * nd)
        shape[a], shape[nd + a] = out[a], kernel[a]
        c = np.broadcast_to(coords[a].reshape(shape), (*out, *kernel)).reshape(positions, taps)
        valid &= (c >= 0) & (c < in_spatial[a])
        flat = flat * in_spatial[a] + c
    return np.where(valid, flat, PAD)


def gather_windows(x: np.ndarray, idx: np.ndarray, pad_value) -> np.ndarray:
    """``x`` of shape ``(N, C, *spatial)`` -> ``(N, C, positions, taps)`` through :func:`window_indices`'s table,
    padding read as ``pad_value``. Works on int64, object and float arrays alike."""
    n, c = x.shape[:2]
    flat = x.reshape(n, c, -1)
    pad = np.full((n, c, 1), pad_value, dtype=flat.dtype)
    padded = np.concatenate([flat, pad], axis=2)
    return padded[:, :, np.where(idx == PAD, flat.shape[2], idx)]
