"""The ATen ops of convolutional and activation layers, read into the attributes of bitforge's IR ops.

``torch.export`` writes a layer as one ATen call (``aten.conv2d``, ``aten.max_pool1d``, ``aten.hardsigmoid``) or,
after ``run_decompositions()``, as its core-ATen form (``aten.convolution``, ``aten.max_pool2d_with_indices``,
``aten._native_batch_norm_legit_no_training``, ``aten.mean.dim``). This module knows the argument conventions of
both (default values, empty strides, ``padding='same'``, PyTorch's pads per axis against ONNX's begins-then-ends)
and turns them into the IR's: it sees argument values only, never the graph, so the converter in
``torch_frontend`` keeps the plumbing (values, types, names) and this module the layer semantics. Every refusal
is a :class:`LayerError` whose text says what the layer asked for and what is supported; the converter prefixes
the node it came from.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import torch

from .. import ir
from ..errors import BitforgeError

__all__ = ["LayerError", "ConvAttrs", "PoolAttrs", "conv_attrs", "pool_attrs", "adaptive_pool_attrs",
           "check_spatial_mean", "batchnorm_scale_shift", "activation", "TABLE_OPS", "spatial_pads"]

_aten = torch.ops.aten


class LayerError(BitforgeError):
    """A layer argument bitforge's IR cannot express (the converter names the node)."""


@dataclass(frozen=True)
class ConvAttrs:
    stride: tuple[int, ...]
    padding: tuple[int, ...]  # ONNX pads: every begin, then every end
    dilation: tuple[int, ...]
    groups: int


@dataclass(frozen=True)
class PoolAttrs:
    mode: str
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    count_include_pad: bool = False


def _per_axis(value, nd: int, what: str) -> tuple[int, ...]:
    """PyTorch's ``int or [int] or [int, ...]`` per spatial axis."""
    v = [int(value)] if isinstance(value, (int, np.integer)) else [int(x) for x in value]
    if len(v) == 1:
        v = v * nd
    if len(v) != nd:
        raise LayerError(f"{what} {list(v)} has {len(v)} values for {nd} spatial axes")
    return tuple(v)


def _symmetric(pads: Sequence[int]) -> tuple[int, ...]:
    return tuple(pads) + tuple(pads)


def spatial_pads(flat: Sequence[int], nd: int) -> Optional[tuple[int, ...]]:
    """``aten.constant_pad_nd``'s pads of a ``(N, C, *spatial)`` tensor (begin/end pairs from the LAST axis
    backwards) as ONNX pads of its ``nd`` spatial axes; None when they pad or crop the batch or channel axis."""
    flat = [int(p) for p in flat]
    if len(flat) % 2:
        return None
    pairs = {nd + 1 - i: (flat[2 * i], flat[2 * i + 1]) for i in range(len(flat) // 2)}  # tensor axis -> pair
    if any(axis < 2 and pair != (0, 0) for axis, pair in pairs.items()) or min(flat, default=0) < 0:
        return None
    per_axis = [pairs.get(2 + a, (0, 0)) for a in range(nd)]
    return tuple(b for b, _ in per_axis) + tuple(e for _, e in per_axis)


def conv_attrs(target, kw: dict, nd: int, kernel: tuple[int, ...]) -> ConvAttrs:
    """``aten.conv1d/conv2d`` (``.default`` and the ``padding='same'/'valid'`` overload) and ``aten.convolution``."""
    if target.overloadpacket == _aten.convolution and kw.get("transposed"):
        raise LayerError("transposed convolution (ConvTranspose1d/2d) is not supported; use Conv1d/Conv2d, or "
                         "Upsample + Conv")
    stride = _per_axis(kw["stride"], nd, "stride")
    dilation = _per_axis(kw["dilation"], nd, "dilation")
    padding = kw["padding"]
    if isinstance(padding, str):
        if padding == "valid":
            pads = (0,) * (2 * nd)
        elif padding == "same":  # PyTorch's rule: the odd pad goes to the end of the axis
            total = [d * (k - 1) for d, k in zip(dilation, kernel)]
            pads = tuple(t // 2 for t in total) + tuple(t - t // 2 for t in total)
        else:
            raise LayerError(f"padding {padding!r} is not supported; expected integers, 'same' or 'valid'")
    else:
        pads = _symmetric(_per_axis(padding, nd, "padding"))
    return ConvAttrs(stride, pads, dilation, int(kw["groups"]))


def pool_attrs(target, kw: dict, nd: int) -> PoolAttrs:
    """``aten.max_pool1d/2d(_with_indices)`` and ``aten.avg_pool1d/2d``: floor mode only, no dilation."""
    kernel = _per_axis(kw["kernel_size"], nd, "kernel_size")
    stride = _per_axis(kw["stride"], nd, "stride") if kw.get("stride") else kernel  # [] means "the kernel"
    padding = _symmetric(_per_axis(kw.get("padding", 0), nd, "padding"))
    if kw.get("ceil_mode"):
        raise LayerError("ceil_mode=True is not supported (the last, partial window has no IR form); use "
                         "ceil_mode=False, with padding if the last elements must be covered")
    mode = "max" if "max_pool" in target.name() else "avg"
    if mode == "max":
        if any(d != 1 for d in _per_axis(kw.get("dilation", 1), nd, "dilation")):
            raise LayerError("dilated max pooling is not supported; use dilation=1")
        return PoolAttrs("max", kernel, stride, padding)
    if kw.get("divisor_override") is not None:
        raise LayerError(f"divisor_override={kw['divisor_override']} is not supported; the average divides by the "
                         "window (count_include_pad chooses whether padding counts)")
    return PoolAttrs("avg", kernel, stride, padding, bool(kw.get("count_include_pad", True)))


def adaptive_pool_attrs(output_size, in_spatial: tuple[int, ...]) -> PoolAttrs:
    """Adaptive average pooling whose output size divides every input size: a plain average pool."""
    nd = len(in_spatial)
    out = _per_axis(output_size, nd, "output_size")
    if any(o < 1 or i % o for i, o in zip(in_spatial, out)):
        raise LayerError(f"adaptive pooling of {in_spatial} to {out}: only output sizes that divide the input size "
                         "are supported (windows of equal size, e.g. output 1 for global pooling)")
    kernel = tuple(i // o for i, o in zip(in_spatial, out))
    return PoolAttrs("avg", kernel, kernel, (0,) * (2 * nd))


def check_spatial_mean(dims, rank: int) -> None:
    """``aten.mean.dim`` is global average pooling when it averages every spatial axis of a ``(C, *spatial)``
    sample (``rank`` per-sample axes); a mean over anything else is refused."""
    axes = sorted({int(d) % (rank + 1) for d in dims})
    if rank < 2 or axes != list(range(2, rank + 1)):
        raise LayerError(f"mean over dims {list(dims)} of a tensor with {rank} per-sample axes: only the mean over "
                         "all spatial axes (global average pooling) is supported")


def batchnorm_scale_shift(weight: Optional[np.ndarray], bias: Optional[np.ndarray], mean: np.ndarray,
                          var: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """Eval-mode BatchNorm as ``x * scale + shift`` (float64 maths, float32 result like the module's)."""
    mean, var = np.asarray(mean, np.float64), np.asarray(var, np.float64)
    gamma = np.ones_like(mean) if weight is None else np.asarray(weight, np.float64)
    beta = np.zeros_like(mean) if bias is None else np.asarray(bias, np.float64)
    if np.any(var + eps <= 0):
        raise LayerError("running_var + eps is not positive; the running statistics are damaged")
    scale = gamma / np.sqrt(var + eps)
    return scale.astype(np.float32), (beta - mean * scale).astype(np.float32)


#: ATen ops that become a float ``Table`` with this function (GELU's depends on its ``approximate``).
TABLE_OPS = {_aten.sigmoid: "sigmoid", _aten.tanh: "tanh", _aten.silu: "silu", _aten.elu: "elu",
             _aten.softplus: "softplus", _aten.gelu: "gelu"}


def activation(target, kw: dict, name: str) -> ir.Node:
    """The IR node of an element-wise activation (its inputs/outputs set to ``name``)."""
    op = target.overloadpacket
    io = dict(name=name, inputs=("",), outputs=(name,))
    if op in (_aten.leaky_relu, _aten.leaky_relu_):
        return ir.LeakyReLU(**io, alpha=np.array([kw.get("negative_slope", 0.01)], dtype=np.float32))
    if op in (_aten.hardtanh, _aten.hardtanh_):
        return ir.Clip(**io, lo=float(kw.get("min_val", -1.0)), hi=float(kw.get("max_val", 1.0)))
    if op in (_aten.clamp, _aten.clamp_min, _aten.clamp_max):
        lo = kw.get("min") if op != _aten.clamp_max else None
        hi = kw.get("max") if op != _aten.clamp_min else None
        if isinstance(lo, torch.fx.Node) or isinstance(hi, torch.fx.Node):
            raise LayerError("clamp with tensor bounds is not supported; use number bounds")
        return ir.Clip(**io, lo=None if lo is None else float(lo), hi=None if hi is None else float(hi))
    if op in (_aten.hardsigmoid, _aten.hardswish):  # PyTorch's: relu6(x + 3) / 6
        return ir.HardSigmoid(**io, alpha=1.0 / 6.0, beta=0.5, swish=op == _aten.hardswish)
    if op in TABLE_OPS:
        function = TABLE_OPS[op]
        if op == _aten.gelu:
            approx = kw.get("approximate", "none")
            if approx not in ("none", "tanh"):
                raise LayerError(f"GELU approximate={approx!r} is not supported; expected 'none' or 'tanh'")
            function = "gelu" if approx == "none" else "gelu_tanh"
        if op == _aten.elu and any(float(kw.get(k, 1.0)) != 1.0 for k in ("alpha", "scale", "input_scale")):
            raise LayerError(f"ELU with alpha={kw.get('alpha')}, scale={kw.get('scale')}, input_scale="
                             f"{kw.get('input_scale')} is not supported; only ELU(alpha=1) (SELU is not either)")
        if op == _aten.softplus and float(kw.get("beta", 1.0)) != 1.0:
            raise LayerError(f"Softplus(beta={kw.get('beta')}) is not supported; only beta=1")
        return ir.Table(**io, function=function)
    raise LayerError(f"op {target.name()} is not an activation")  # the caller dispatches only the ops above
