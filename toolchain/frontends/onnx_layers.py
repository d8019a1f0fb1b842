"""ONNX's window ops and BatchNormalization -> the IR's Conv, Pool and ScaleShift.

Mixed into the ONNX translator (``onnx_frontend``): the methods use its lookups (``_value``, ``_attrs``,
``_fail``), its emitter (``_emit``) and its exact-bias helpers. Geometry follows ONNX: ``pads`` lists every
spatial axis's begin pad, then every end pad, which is the IR's ``padding``; ``auto_pad`` SAME_UPPER/SAME_LOWER
is turned into those explicit pads here (the extra pad of an odd total goes to the end for SAME_UPPER, to the
beginning for SAME_LOWER).

In a quantized graph (QDQ or QONNX) a Conv is a Dense per window: the weight codes come from the quantizer on
the initializer, the output gets the exact type of ``W x + b`` and the next quantizer may retype it. MaxPool
keeps its input's type (rounding is monotone, so rounding before or after the max is the same). An average is
exact only when every window's divisor is a power of two (then the mean is a shift); anything else would round
where ONNX Runtime computes a float mean, so it is refused rather than approximated.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Optional

import numpy as np
import onnx

from ..emulate import pool_divisors
from ..fixed import FixedType
from ..ir import Conv, Pool, ScaleShift, TensorSpec
from ..windows import output_spatial
from .onnx_values import Acc, Act, Const, QConst, dense_output_type

__all__ = ["LAYER_OPS", "LayerOps", "explicit_pads"]

#: ONNX op type -> the translator method that maps it.
LAYER_OPS = {"Conv": "_conv", "BatchNormalization": "_batch_norm", "MaxPool": "_max_pool",
             "AveragePool": "_average_pool", "GlobalAveragePool": "_global_pool", "GlobalMaxPool": "_global_pool"}


def explicit_pads(auto_pad: str, pads: Optional[list[int]], in_spatial: tuple[int, ...], kernel: tuple[int, ...],
                  stride: tuple[int, ...], dilation: tuple[int, ...]) -> tuple[int, ...]:
    """ONNX's ``auto_pad``/``pads`` as explicit pads (all begins, then all ends). SAME_*: the output size is
    ``ceil(in / stride)`` and the total pad is what that takes (ONNX operator spec, Conv)."""
    nd = len(kernel)
    if auto_pad in ("NOTSET", ""):
        return tuple(int(p) for p in pads) if pads else (0,) * (2 * nd)
    if auto_pad == "VALID":
        return (0,) * (2 * nd)
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        raise ValueError(f"auto_pad '{auto_pad}' is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER")
    begin, end = [], []
    for a in range(nd):
        out = -(-in_spatial[a] // stride[a])
        total = max((out - 1) * stride[a] + dilation[a] * (kernel[a] - 1) + 1 - in_spatial[a], 0)
        small, big = total // 2, total - total // 2
        begin.append(small if auto_pad == "SAME_UPPER" else big)
        end.append(big if auto_pad == "SAME_UPPER" else small)
    return tuple(begin + end)


def _is_pow2(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


class LayerOps:
    """Conv, BatchNormalization and pooling, for the ONNX translator."""

    # -- geometry -------------------------------------------------------------------------------------
    def _spatial_input(self, x: Act, what: str, nd: Optional[int] = None) -> TensorSpec:
        """The spec of a (C, L) or (C, H, W) activation, or a clear refusal."""
        xs = self._spec(x)
        have = len(xs.shape) - 1
        if nd is None and have not in (1, 2):
            raise self._fail(f"{what} over {have} spatial axes (input per-sample shape {xs.shape}): bitforge has "
                             "1-D (C, L) and 2-D (C, H, W) windows")
        if nd is not None and have != nd:
            raise self._fail(f"{what} with a {nd}-D kernel on an input of per-sample shape {xs.shape}: expected "
                             f"(channels, then {nd} spatial size(s))")
        return xs

    def _window(self, at: dict, xs: TensorSpec, kernel: tuple[int, ...], what: str
                ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """(stride, dilation, pads, output spatial size) of a window op from its attributes."""
        nd = len(kernel)
        stride = tuple(int(s) for s in at.get("strides", [1] * nd))
        dilation = tuple(int(d) for d in at.get("dilations", [1] * nd))
        pads = at.get("pads")
        if len(stride) != nd or len(dilation) != nd or (pads and len(pads) != 2 * nd):
            raise self._fail(f"{nd}-D {what} needs {nd} strides, {nd} dilations and {2 * nd} pads, found "
                             f"strides={list(stride)}, dilations={list(dilation)}, pads={pads}")
        if min(stride) < 1 or min(dilation) < 1 or (pads and min(pads) < 0):
            raise self._fail(f"strides and dilations must be >= 1 and pads >= 0, found strides={list(stride)}, "
                             f"dilations={list(dilation)}, pads={pads}")
        try:
            padding = explicit_pads(str(at.get("auto_pad", "NOTSET")), pads, xs.shape[1:], kernel, stride, dilation)
        except ValueError as e:
            raise self._fail(str(e)) from None
        out = output_spatial(xs.shape[1:], kernel, stride, padding, dilation)
        if min(out) < 1:
            raise self._fail(f"the {what} window {kernel} (dilation {dilation}) is larger than the padded input "
                             f"{xs.shape[1:]} (pads {padding}): no output position")
        return stride, dilation, padding, out

    # -- Conv ---------------------------------------------------------------------------------------------
    def _conv(self, n: onnx.NodeProto) -> None:
        at = self._attrs(n)
        x, w = self._value(n.input[0]), self._value(n.input[1])
        if not isinstance(x, Act) or not isinstance(w, (Const, QConst)):
            raise self._fail("expected Conv(activation, constant weight[, constant bias]); the weight of a Conv "
                             "must be an initializer (or a quantizer of one)")
        warr = w.array if isinstance(w, Const) else w.codes
        nd = warr.ndim - 2
        if nd not in (1, 2):
            raise self._fail(f"{nd}-D convolution (weight shape {warr.shape}) is not supported; bitforge has 1-D "
                             "(Conv1d) and 2-D (Conv2d) convolutions")
        xs = self._spatial_input(x, "Conv", nd)
        kernel = tuple(int(k) for k in warr.shape[2:])
        if "kernel_shape" in at and tuple(at["kernel_shape"]) != kernel:
            raise self._fail(f"kernel_shape {list(at['kernel_shape'])} differs from the weight's {list(kernel)}")
        groups = int(at.get("group", 1))
        c_in, c_out = xs.shape[0], int(warr.shape[0])
        if groups < 1 or c_in % groups or c_out % groups or warr.shape[1] * groups != c_in:
            raise self._fail(f"weight {warr.shape} with group={groups} does not fit {c_in} input channels: "
                             f"expected (C_out, {c_in} / group, *kernel) with group dividing both channel counts")
        stride, dilation, padding, out_sp = self._window(at, xs, kernel, "Conv")
        bias = self._value(n.input[2]) if len(n.input) > 2 and n.input[2] else None
        if bias is not None and not isinstance(bias, (Const, QConst)):
            raise self._fail("the bias must be a constant (initializer or a quantizer of one)")
        if bias is not None:
            bias = self._bias_vector(bias, c_out)
        out_name = n.output[0]
        geometry = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
        if xs.is_float:
            node = Conv(self._name(), (x.tensor,), (out_name,), weight=self._float_weights(w, "weight"),
                        bias=None if bias is None else self._float_weights(bias, "bias"), **geometry)
            self.values[out_name] = self._emit(node, TensorSpec(out_name, (c_out, *out_sp), None))
            return
        if not isinstance(w, QConst):
            raise self._fail(f"input '{x.tensor}' is quantized ({xs.type_str()}) but the weight is float; quantize "
                             "the weight too (DequantizeLinear or Quant on the initializer)")
        if w.scale is not None or self._tensor_scale(x.tensor) != 1.0:
            self._scaled_layer(x, w, bias, out_name, lambda name, codes: Conv(
                self._name(), (x.tensor,), (name,), weight=codes, weight_type=w.dtype, **geometry), (c_out,),
                (c_out, *out_sp))
            return
        codes = w.codes.astype(np.int64)
        b_codes, b_type, k = (None, None, 0) if bias is None else self._fixed_bias(bias, xs.dtype.frac + w.dtype.frac)
        wt = w.dtype if not k else FixedType(w.dtype.width + k, w.dtype.integer, w.dtype.signed, w.dtype.rounding,
                                             w.dtype.overflow)
        codes = codes << k  # k > 0: a float bias needs a finer accumulator grid (onnx_scales)
        dtype = dense_output_type(xs.dtype, codes.reshape(c_out, -1), wt, b_codes, b_type)
        node = Conv(self._name(), (x.tensor,), (out_name,), weight=codes, bias=b_codes, weight_type=wt,
                    bias_type=b_type, **geometry)
        self.values[out_name] = self._emit(node, TensorSpec(out_name, (c_out, *out_sp), dtype), exact=True)

    # -- BatchNormalization -----------------------------------------------------------------------------------
    def _batch_norm(self, n: onnx.NodeProto) -> None:
        at = self._attrs(n)
        if at.get("training_mode", 0) or len([o for o in n.output if o]) > 1:
            raise self._fail("BatchNormalization in training mode (running statistics as outputs); export the "
                             "model in eval mode (model.eval() before torch.onnx.export)")
        x = self._value(n.input[0])
        if not isinstance(x, Act):
            raise self._fail("BatchNormalization of a constant; fold it before export")
        xs = self._spec(x)
        if not xs.shape:
            raise self._fail("BatchNormalization of a scalar per sample; expected (C, ...) with channels first")
        c = xs.shape[0]
        params = []
        for i, what in zip(range(1, 5), ("scale", "bias", "mean", "var")):
            a = self._const(n.input[i], f"BatchNormalization {what}").array
            if a.size != c:
                raise self._fail(f"{what} has {a.size} values; expected one per channel ({c}, axis 1 of the "
                                 "input)")
            params.append(a.reshape(c).astype(np.float64))
        if not xs.is_float:
            raise self._fail(f"BatchNormalization of a quantized tensor ('{x.tensor}' is {xs.type_str()}): its "
                             "float statistics cannot be applied exactly in fixed point. Fold it into the Conv or "
                             "Gemm before it ahead of quantization (Brevitas, onnxruntime's quantizer and "
                             "torch.onnx.export in eval mode do), or quantize the float model with bitforge")
        gamma, beta, mean, var = params
        eps = float(at.get("epsilon", 1e-5))
        if np.any(var + eps <= 0):
            raise self._fail(f"var + epsilon must be positive, found {float((var + eps).min())}")
        scale = gamma / np.sqrt(var + eps)
        node = ScaleShift(self._name(), (x.tensor,), (n.output[0],), scale=scale.astype(np.float32),
                          shift=(beta - mean * scale).astype(np.float32))
        self.values[n.output[0]] = self._emit(node, TensorSpec(n.output[0], xs.shape, None))

    # -- pooling ------------------------------------------------------------------------------------------
    def _max_pool(self, n: onnx.NodeProto) -> None:
        if len(n.output) > 1 and n.output[1]:
            raise self._fail("MaxPool's second output (Indices) is not supported; export without "
                             "return_indices")
        self._pool(n, "max")

    def _average_pool(self, n: onnx.NodeProto) -> None:
        self._pool(n, "avg")

    def _pool(self, n: onnx.NodeProto, mode: str) -> None:
        at = self._attrs(n)
        pending = self.values.get(n.input[0])
        # A max commutes with a pending requantize (per channel increasing): pool the accumulator itself.
        acc = pending if mode == "max" and isinstance(pending, Acc) else None
        x = Act(acc.tensor) if acc is not None else self._act_input(n, f"{n.op_type}")
        if "kernel_shape" not in at:
            raise self._fail("kernel_shape is missing")
        kernel = tuple(int(k) for k in at["kernel_shape"])
        xs = self._spatial_input(x, n.op_type, len(kernel))
        if at.get("ceil_mode", 0):
            raise self._fail("ceil_mode=1 is not supported (only floor mode, ceil_mode=0); export with "
                             "ceil_mode=False (PyTorch's default) or pad the input so the windows fit")
        if any(int(d) != 1 for d in at.get("dilations", [])):
            raise self._fail(f"dilated pooling (dilations={list(at['dilations'])}) is not supported; only "
                             "dilations of 1")
        stride, _, padding, out_sp = self._window(at, xs, kernel, n.op_type)
        nd = len(kernel)
        if any(padding[a] >= kernel[a] or padding[nd + a] >= kernel[a] for a in range(nd)):
            raise self._fail(f"pads {list(padding)} must be smaller than the kernel {list(kernel)} (a window of "
                             "padding alone has no value)")
        count_pad = bool(at.get("count_include_pad", 0)) if mode == "avg" else False
        if acc is not None:
            out = f"{n.output[0]}_acc"
            node = Pool(self._name(), (x.tensor,), (out,), mode=mode, kernel=kernel, stride=stride, padding=padding)
            self._emit(node, TensorSpec(out, (xs.shape[0], *out_sp), xs.dtype))
            self.values[n.output[0]] = replace(acc, tensor=out)
            return
        self._emit_pool(n, x, xs, mode, kernel, stride, padding, count_pad, out_sp)

    def _global_pool(self, n: onnx.NodeProto) -> None:
        x = self._act_input(n, n.op_type)
        xs = self._spatial_input(x, n.op_type)
        nd = len(xs.shape) - 1
        self._emit_pool(n, x, xs, "max" if n.op_type == "GlobalMaxPool" else "avg", tuple(xs.shape[1:]),
                        (1,) * nd, (0,) * (2 * nd), False, (1,) * nd)

    def _act_input(self, n: onnx.NodeProto, what: str) -> Act:
        x = self._value(n.input[0])
        if not isinstance(x, Act):
            raise self._fail(f"{what} of a constant is not supported; fold it before export")
        return x

    def _emit_pool(self, n: onnx.NodeProto, x: Act, xs: TensorSpec, mode: str, kernel: tuple[int, ...],
                   stride: tuple[int, ...], padding: tuple[int, ...], count_pad: bool,
                   out_sp: tuple[int, ...]) -> None:
        out_name = n.output[0]
        node = Pool(self._name(), (x.tensor,), (out_name,), mode=mode, kernel=kernel, stride=stride,
                    padding=padding, count_include_pad=count_pad)
        shape = (xs.shape[0], *out_sp)
        if xs.is_float:
            self.values[out_name] = self._emit(node, TensorSpec(out_name, shape, None))
            return
        if mode == "max":
            self.values[out_name] = self._emit(node, TensorSpec(out_name, shape, xs.dtype), exact=True)
            if self._may_retype(n.input[0], x):
                self._link(out_name, x.tensor, required=False)
            return
        divisors = sorted({int(d) for d in pool_divisors(node, xs.shape[1:])})
        odd = [d for d in divisors if not _is_pow2(d)]
        if odd:
            raise self._fail(f"average of a quantized tensor over windows of {odd[0]} elements: a mean is exact "
                             "in fixed point only when every window's divisor is a power of two (here the "
                             f"divisors are {divisors}); ONNX Runtime's float mean would be rounded differently. "
                             "Use a 2x2/4x4 (power-of-two) window, count_include_pad=1 with padding, or max "
                             "pooling")
        recip_frac = int(math.log2(divisors[-1]))
        node.recip_frac = recip_frac
        t = xs.dtype
        exact = FixedType(t.width + recip_frac, t.integer, t.signed, t.rounding, t.overflow)
        self.values[out_name] = self._emit(node, TensorSpec(out_name, shape, exact), exact=True)
