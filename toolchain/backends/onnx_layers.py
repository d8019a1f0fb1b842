"""ONNX lowerings of the ops of the models people bring: convolutions, pooling, per-channel scales, exact
activations, lookup tables, softmax, argmax and data movement.

Fixed point: int64 codes, step for step the golden model's rule (``emulate.conv_fixed``, ``pool_fixed``, ...),
every intermediate with a proven int64 interval (:mod:`.onnx_int64`), so ONNX Runtime gives the golden codes
bit for bit. ONNX Runtime has no int64 Conv or pooling kernels, so window ops read their windows through
:func:`~bitforge.toolchain.windows.window_indices`, the table every executor shares: the flattened input gets
one extra column holding the padding value, and a ``Gather`` with the table (padding taps pointing at that
column) yields ``(N, C, positions, taps)``; a convolution is then one batched int64 ``MatMul`` per group, a
pool a ``ReduceMax`` or ``ReduceSum``. Lookups (Table, Softmax) clamp their index before the floor shift, which
makes the shift a division of a non-negative number (ONNX's truncating ``Div`` is then the floor).

Float: ONNX's own float32 ops (Conv, MaxPool, AveragePool, PRelu, HardSigmoid, Softmax, ...), which agree with
the float golden model within the float tolerance of :mod:`bitforge.toolchain.verify.compare`.

Tensors carry the batch first: a per-sample ``(C, *spatial)`` tensor is ``(N, C, *spatial)`` in ONNX, so
per-channel constants are shaped ``(C, 1, ...)`` to broadcast over it.
"""
from __future__ import annotations

import math
from typing import Callable, Optional, Union

import numpy as np
from onnx import TensorProto

from .. import emulate
from ..accumulate import accumulation_plan, convert_bias, rounded_bias
from ..fixed import FixedType
from ..ir import (
    ArgMax,
    Clip,
    Concat,
    Conv,
    Graph,
    HardSigmoid,
    LeakyReLU,
    Node,
    Pool,
    ScaleShift,
    Softmax,
    Table,
)
from ..windows import PAD, window_indices
from .onnx_int64 import (
    INT64_MAX,
    INT64_MIN,
    UNTYPED,
    Builder,
    IntVal,
    accumulate_products,
    matmul_interval,
    overflow,
    requantize,
    requantize_exact,
)

__all__ = ["FIXED_RULES", "FLOAT_RULES"]


# -- shared pieces -----------------------------------------------------------------------------------------------

def _per_channel(values: np.ndarray, ndim: int) -> np.ndarray:
    """A per-channel ``(C,)`` (or scalar ``(1,)``) array shaped ``(C, 1, ...)`` for a per-sample tensor of
    ``ndim`` axes, which broadcasts over its ONNX form ``(N, C, ...)`` (as ``emulate._channel`` does)."""
    values = np.asarray(values)
    return values.reshape((-1,) + (1,) * (ndim - 1))


def _add_codes(b: Builder, acc: IntVal, hint: str, values: np.ndarray, what: str) -> IntVal:
    """``acc`` plus constant codes (exact Python ints, e.g. a bias aligned to the accumulator), shaped to broadcast."""
    v = np.asarray(values).astype(object)
    lo, hi = int(v.min()), int(v.max())
    if lo < INT64_MIN or hi > INT64_MAX:
        raise b.fail(f"{hint} ({what}) reaches [{lo}, {hi}], beyond int64; narrow its type or the accumulator's "
                     "frac")
    return b.checked(b.op("Add", [acc.name, b.array(hint, v.astype(np.int64))]), acc.lo + lo, acc.hi + hi, what)


def _aligned(codes: np.ndarray, shift: int) -> np.ndarray:
    """Codes shifted left by ``shift`` bits as exact Python ints (a bias or shift aligned to the accumulator)."""
    return np.asarray(codes).astype(object) * (1 << shift)


def _windows(b: Builder, x: IntVal, in_shape: tuple[int, ...], idx: np.ndarray, pad_value: int) -> IntVal:
    """``windows.gather_windows`` of the ``(N, C, *spatial)`` codes ``x``: ``(N, C, positions, taps)``, padding
    taps reading ``pad_value``."""
    channels, size = in_shape[0], math.prod(in_shape[1:])
    flat = b.op("Reshape", [x.name, b.i64s([0, channels, size])])
    lo, hi = x.lo, x.hi
    if (idx == PAD).any():
        flat = b.op("Pad", [flat, b.i64s([0, 0, 0, 0, 0, 1]), b.i64(pad_value)])
        lo, hi = min(lo, pad_value), max(hi, pad_value)
    taps = b.array("window_indices", np.where(idx == PAD, size, idx).astype(np.int64))
    return IntVal(b.op("Gather", [flat, taps], axis=2), lo, hi)


def _lookup(b: Builder, x: IntVal, table: np.ndarray, index_lo: int, index_shift: int, hint: str) -> IntVal:
    """``tables.lookup``: ``table[clamp((x - index_lo) >> index_shift, 0, len - 1)]``.

    Clamping ``x - index_lo`` to ``[0, len * 2**s - 1]`` before the shift gives the same index as clamping
    after it (floor division is monotone, and those are the first and last codes of the end entries), and
    leaves a non-negative number whose floor shift is ONNX's truncating ``Div``.
    """
    table = np.asarray(table, dtype=np.int64)
    v = b.clip(b.add_const(x, -index_lo, "table index offset"), 0, (len(table) << index_shift) - 1)
    if index_shift >= 63:  # 2**s is no int64, and every clamped value lies below it: the index is 0
        i = b.clip(v, 0, 0)
    else:
        i = b.div_floor_nonneg(v, 1 << index_shift)
    reachable = table[i.lo:i.hi + 1]
    name = b.op("Gather", [b.array(hint, table), i.name], axis=0)
    return IntVal(name, int(reachable.min()), int(reachable.max()))


def _slope_frac(b: Builder, t: FixedType, field: str) -> int:
    """frac of a slope type: the golden model shifts ``x`` left by it, so it must not be negative."""
    if t.frac < 0:
        raise b.fail(f"{field} {t} has a negative frac; give the slope a type with frac >= 0")
    return t.frac


# -- fixed point: the golden model's rules on int64 codes -------------------------------------------------------

def _conv(b: Builder, g: Graph, n: Conv, x: IntVal, xt: FixedType, out: FixedType) -> IntVal:
    """``emulate.conv_fixed``: every output position a Dense stage over its window. Where no product is rounded and
    no partial sum can saturate (``accumulate.accumulation_plan``), one MatMul per group; else the products of
    every window rounded or added one by one (:func:`.onnx_int64.accumulate_products`)."""
    accum = n.need("accum_type", *UNTYPED)
    in_shape, out_shape = g.tensors[n.input].shape, g.tensors[n.output].shape
    idx = window_indices(in_shape[1:], n.kernel, n.stride, n.padding, n.dilation)
    positions, taps = idx.shape
    groups, cg = n.groups, int(n.weight.shape[1])
    og = n.out_channels // groups
    win = _windows(b, x, in_shape, idx, 0)  # (N, C_in, P, K)
    w2 = np.asarray(n.weight, dtype=np.int64).reshape(n.out_channels, cg * taps)
    plan = accumulation_plan(xt, w2, n.weight_type, n.bias, n.bias_type, accum, (win.lo, win.hi))
    # (N, C_in, P, K) -> (N, G, P, cg * K), the taps of one group's channels side by side as the weight has them
    v = b.op("Reshape", [win.name, b.i64s([0, groups, cg, positions, taps])])
    v = b.op("Transpose", [v], perm=[0, 1, 3, 2, 4])
    v = b.op("Reshape", [v, b.i64s([0, groups, positions, cg * taps])])
    if plan.rounds_products or plan.saturates:
        ve = IntVal(b.op("Unsqueeze", [v, b.i64s([-2])]), win.lo, win.hi)  # (N, G, P, 1, cg * K)
        bias = None
        if n.bias is not None:
            bias = convert_bias(n.bias, n.bias_type, accum).reshape(groups, 1, og)
        acc = accumulate_products(b, ve, w2.reshape(groups, 1, og, cg * taps), cg * taps, plan.shift, bias, accum,
                                  plan.saturates, "weight")  # (N, G, P, og)
        t = b.op("Transpose", [acc.name], perm=[0, 1, 3, 2])  # (N, G, og, P): channel grp * og + o
        return requantize(b, IntVal(b.op("Reshape", [t, b.i64s([0, *out_shape])]), acc.lo, acc.hi), accum, out)
    wa = w2.astype(object)
    wa = wa // (1 << plan.shift) if plan.shift > 0 else wa * (1 << -plan.shift)  # exact: no product rounds
    w2 = wa.astype(np.int64)
    lo, hi = matmul_interval(b, win, w2, "weight")  # per output channel: its group's taps are its row
    wg = w2.reshape(groups, og, cg * taps).transpose(0, 2, 1)  # (G, cg * K, og)
    acc = b.op("MatMul", [v, b.array("weight_by_group", np.ascontiguousarray(wg))])  # (N, G, P, og)
    acc = b.op("Transpose", [acc], perm=[0, 1, 3, 2])  # (N, G, og, P): channel grp * og + o
    acc = IntVal(b.op("Reshape", [acc, b.i64s([0, *out_shape])]), lo, hi)
    if n.bias is not None:
        bias = _per_channel(rounded_bias(n.bias, n.bias_type, accum).astype(object), len(out_shape))
        acc = _add_codes(b, acc, "bias_aligned", bias, "accumulator with bias")
    return requantize(b, overflow(b, acc, accum), accum, out)


def _pool(b: Builder, g: Graph, n: Pool, x: IntVal, xt: FixedType, out: FixedType) -> IntVal:
    """``emulate.pool_fixed``: the window's largest code, or its exact sum times the per-position reciprocal."""
    in_shape, out_shape = g.tensors[n.input].shape, g.tensors[n.output].shape
    kernel = tuple(n.kernel)
    idx = window_indices(in_shape[1:], kernel, n.stride, n.padding, (1,) * len(kernel))
    if n.mode == "max":
        # Every window holds a real element (validate: pads < kernel), so padding at the smallest possible
        # code never changes a maximum.
        win = _windows(b, x, in_shape, idx, x.lo)
        m = IntVal(b.reduce("ReduceMax", win.name, 3, keepdims=False), x.lo, x.hi)
        y = requantize(b, m, xt, out)
    else:
        win = _windows(b, x, in_shape, idx, 0)
        taps = idx.shape[1]
        total = b.checked(b.reduce("ReduceSum", win.name, 3, keepdims=False), taps * min(win.lo, 0),
                          taps * max(win.hi, 0), "window sum")
        prod = b.mul_array(total, "reciprocals", emulate.pool_reciprocals(n, in_shape[1:]), "sum times reciprocal")
        y = requantize_exact(b, prod, xt.frac + n.recip_frac, out)
    return IntVal(b.op("Reshape", [y.name, b.i64s([0, *out_shape])]), y.lo, y.hi)


def _scale_shift(b: Builder, g: Graph, n: ScaleShift, x: IntVal, xt: FixedType, out: FixedType) -> IntVal:
    accum = n.need("accum_type", *UNTYPED)
    ndim = len(g.tensors[n.input].shape)
    acc = b.mul_array(x, "scale", _per_channel(n.scale, ndim), "product with the scale")
    if n.shift is not None:
        shift = _per_channel(_aligned(n.shift, accum.frac - n.shift_type.frac), ndim)
        acc = _add_codes(b, acc, "shift_aligned", shift, "accumulator with shift")
    return requantize(b, overflow(b, acc, accum), accum, out)


def _leaky_relu(b: Builder, g: Graph, n: LeakyReLU, x: IntVal, xt: FixedType, out: FixedType) -> IntVal:
    """``emulate.leaky_relu_fixed``: ``x << frac(alpha)`` where ``x >= 0``, else ``x * alpha[c]``."""
    f = _slope_frac(b, n.alpha_type, "alpha_type")
    alpha = np.asarray(n.alpha).astype(object)
    neg = b.mul_array(x, "alpha", _per_channel(alpha, len(g.tensors[n.input].shape)), "negative side times alpha")
    pos = b.mul_const(x, 1 << f, "positive side aligned")
    lo, hi = [], []
    if x.hi >= 0:  # the values each side really keeps
        lo.append(max(x.lo, 0) << f)
        hi.append(x.hi << f)
    if x.lo < 0:
        side = [v * a for v in (x.lo, min(x.hi, -1)) for a in (int(alpha.min()), int(alpha.max()))]
        lo.append(min(side))
        hi.append(max(side))
    y = IntVal(b.op("Where", [b.op("GreaterOrEqual", [x.name, b.i64(0)]), pos.name, neg.name]), min(lo), max(hi))
    return requantize_exact(b, y, xt.frac + f, out)


def _clip(b: Builder, g: Graph, n: Clip, x: IntVal, xt: FixedType, out: FixedType) -> IntVal:
    lo, hi = emulate.clip_codes(n, xt)
    if lo is not None and hi is not None and lo > hi:
        # No code between the bounds: the golden model's rule (lo first, then hi) gives hi everywhere, and ONNX
        # leaves Clip with min > max unspecified.
        lo = hi
    # A bound beyond int64 on its own side never acts; one beyond it on the other side would be every result.
    if (lo is not None and lo > INT64_MAX) or (hi is not None and hi < INT64_MIN):
        raise b.fail(f"bounds [{n.lo}, {n.hi}] as codes of {xt} lie beyond int64 and would be every output")
    return requantize(b, b.clip(x, lo, hi), xt, out)


def _hard_sigmoid(b: Builder, g: Graph, n: HardSigmoid, x: IntVal, xt: FixedType, out: FixedType) -> IntVal:
    """``emulate.hard_sigmoid_fixed``: ``t = clamp(x alpha + beta 2**frac(x), 0, 2**F)``, then t or ``x t``."""
    f = xt.frac + _slope_frac(b, n.alpha_type, "alpha_type")
    t = b.add_const(b.mul_const(x, n.alpha_code, "x times alpha"), n.beta_code << xt.frac, "x alpha + beta")
    t = b.clip(t, 0, 1 << f)
    if n.swish:
        return requantize_exact(b, b.mul(x, t, "x times hard sigmoid"), xt.frac + f, out)
    return requantize_exact(b, t, f, out)


def _softmax(b: Builder, g: Graph, n: Softmax, x: IntVal, out: FixedType) -> IntVal:
    """``emulate.softmax_fixed``: exp table over ``max - x``, exact sum, reciprocal table, product requantized."""
    length = g.tensors[n.input].shape[-1]
    top = b.reduce("ReduceMax", x.name, -1, keepdims=True)
    d = b.checked(b.op("Sub", [top, x.name]), 0, x.hi - x.lo, "distance to the maximum")
    e = _lookup(b, d, n.exp_table, 0, n.exp_shift, "exp_table")
    total = b.checked(b.reduce("ReduceSum", e.name, -1, keepdims=True), length * e.lo, length * e.hi, "sum of exps")
    r = _lookup(b, total, n.recip_table, n.recip_lo, n.recip_shift, "recip_table")
    return requantize_exact(b, b.mul(e, r, "exp times reciprocal"), n.exp_type.frac + n.recip_type.frac, out)


def _argmax(b: Builder, g: Graph, n: ArgMax, x: Union[IntVal, str]) -> IntVal:
    """The first index of the largest element of the last axis, as the integer code (ONNX's ArgMax keeps the
    first on ties with ``select_last_index=0``). A float input gives the same indices."""
    name = x.name if isinstance(x, IntVal) else x
    length = g.tensors[n.input].shape[-1]
    return IntVal(b.op("ArgMax", [name], axis=-1, keepdims=1, select_last_index=0), 0, length - 1)


def _concat(b: Builder, g: Graph, n: Concat, args: list[IntVal], ins: list[FixedType], out: FixedType) -> IntVal:
    parts = [requantize(b, a, t, out) for a, t in zip(args, ins)]
    name = b.op("Concat", [p.name for p in parts], axis=n.axis + 1)
    return IntVal(name, min(p.lo for p in parts), max(p.hi for p in parts))


def _moved(b: Builder, x: IntVal, name: str) -> IntVal:
    """The same codes under another shape or order: the interval stays."""
    return IntVal(name, x.lo, x.hi)


FixedRule = Callable[[Builder, Graph, Node, list, list, Optional[FixedType]], IntVal]

#: op -> lowering of its fixed-point rule: (builder, graph, node, argument IntVals, input types, output type).
FIXED_RULES: dict[str, FixedRule] = {
    "Conv": lambda b, g, n, a, ins, out: _conv(b, g, n, a[0], ins[0], out),
    "Pool": lambda b, g, n, a, ins, out: _pool(b, g, n, a[0], ins[0], out),
    "ScaleShift": lambda b, g, n, a, ins, out: _scale_shift(b, g, n, a[0], ins[0], out),
    "LeakyReLU": lambda b, g, n, a, ins, out: _leaky_relu(b, g, n, a[0], ins[0], out),
    "Clip": lambda b, g, n, a, ins, out: _clip(b, g, n, a[0], ins[0], out),
    "HardSigmoid": lambda b, g, n, a, ins, out: _hard_sigmoid(b, g, n, a[0], ins[0], out),
    "Table": lambda b, g, n, a, ins, out: _lookup(b, a[0], n.table, n.index_lo, n.index_shift, "table"),
    "Softmax": lambda b, g, n, a, ins, out: _softmax(b, g, n, a[0], out),
    "ArgMax": lambda b, g, n, a, ins, out: _argmax(b, g, n, a[0]),
    "Reshape": lambda b, g, n, a, ins, out: _moved(
        b, a[0], b.op("Reshape", [a[0].name, b.i64s([0, *g.tensors[n.output].shape])])),
    "Transpose": lambda b, g, n, a, ins, out: _moved(
        b, a[0], b.op("Transpose", [a[0].name], perm=[0, *(p + 1 for p in n.perm)])),
    "Concat": lambda b, g, n, a, ins, out: _concat(b, g, n, a, ins, out),
}


# -- float: ONNX's float32 ops ------------------------------------------------------------------------------------

def _conv_float(b: Builder, n: Conv, x: str) -> str:
    inputs = [x, b.array("weight", np.asarray(n.weight, dtype=np.float32))]
    if n.bias is not None:
        inputs.append(b.array("bias", np.asarray(n.bias, dtype=np.float32)))
    return b.op("Conv", inputs, kernel_shape=list(n.kernel), strides=list(n.stride), pads=list(n.padding),
                dilations=list(n.dilation), group=n.groups)


def _pool_float(b: Builder, n: Pool, x: str) -> str:
    common = dict(kernel_shape=list(n.kernel), strides=list(n.stride), pads=list(n.padding))
    if n.mode == "max":
        return b.op("MaxPool", [x], **common)
    return b.op("AveragePool", [x], count_include_pad=int(n.count_include_pad), **common)


def _scale_shift_float(b: Builder, g: Graph, n: ScaleShift, x: str) -> str:
    ndim = len(g.tensors[n.input].shape)
    y = b.op("Mul", [x, b.array("scale", _per_channel(np.asarray(n.scale, dtype=np.float32), ndim))])
    if n.shift is None:
        return y
    return b.op("Add", [y, b.array("shift", _per_channel(np.asarray(n.shift, dtype=np.float32), ndim))])


def _leaky_relu_float(b: Builder, g: Graph, n: LeakyReLU, x: str) -> str:
    slope = _per_channel(np.asarray(n.alpha, dtype=np.float32), len(g.tensors[n.input].shape))
    return b.op("PRelu", [x, b.array("alpha", slope)])


def _clip_float(b: Builder, n: Clip, x: str) -> str:
    return b.op("Clip", [x, "" if n.lo is None else b.f32(n.lo), "" if n.hi is None else b.f32(n.hi)])


def _hard_sigmoid_float(b: Builder, n: HardSigmoid, x: str) -> str:
    if n.swish and n.alpha == 1 / 6 and n.beta == 0.5 and b.opset >= 14:
        return b.op("HardSwish", [x])  # ONNX's HardSwish is exactly this one (alpha 1/6, beta 0.5)
    h = b.op("HardSigmoid", [x], alpha=float(n.alpha), beta=float(n.beta))
    return b.op("Mul", [x, h]) if n.swish else h


def _gelu(b: Builder, x: str, exact: bool) -> str:
    if exact:  # 0.5 x (1 + erf(x / sqrt 2))
        inner = b.op("Erf", [b.op("Mul", [x, b.f32(1 / math.sqrt(2.0))])])
    else:  # 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
        cube = b.op("Mul", [b.op("Mul", [x, x]), x])
        poly = b.op("Add", [x, b.op("Mul", [cube, b.f32(0.044715)])])
        inner = b.op("Tanh", [b.op("Mul", [poly, b.f32(math.sqrt(2.0 / math.pi))])])
    return b.op("Mul", [b.op("Mul", [x, b.f32(0.5)]), b.op("Add", [inner, b.f32(1.0)])])


#: Table function -> its float form in ONNX ops (names as in :data:`bitforge.toolchain.tables.FUNCTIONS`).
TABLE_FLOAT: dict[str, Callable[[Builder, str], str]] = {
    "sigmoid": lambda b, x: b.op("Sigmoid", [x]),
    "tanh": lambda b, x: b.op("Tanh", [x]),
    "gelu": lambda b, x: _gelu(b, x, exact=True),
    "gelu_tanh": lambda b, x: _gelu(b, x, exact=False),
    "silu": lambda b, x: b.op("Mul", [x, b.op("Sigmoid", [x])]),
    "elu": lambda b, x: b.op("Elu", [x], alpha=1.0),
    "softplus": lambda b, x: b.op("Softplus", [x]),
    "exp": lambda b, x: b.op("Exp", [x]),
}


def _table_float(b: Builder, n: Table, x: str) -> str:
    form = TABLE_FLOAT.get(n.function)
    if form is None:
        raise b.fail(f"table function {n.function!r} has no float ONNX form; known: {', '.join(sorted(TABLE_FLOAT))}")
    return form(b, x)


FloatRule = Callable[[Builder, Graph, Node, list], str]

#: op -> lowering of its float rule: (builder, graph, node, argument names) -> output name.
FLOAT_RULES: dict[str, FloatRule] = {
    "Conv": lambda b, g, n, a: _conv_float(b, n, a[0]),
    "Pool": lambda b, g, n, a: _pool_float(b, n, a[0]),
    "ScaleShift": lambda b, g, n, a: _scale_shift_float(b, g, n, a[0]),
    "LeakyReLU": lambda b, g, n, a: _leaky_relu_float(b, g, n, a[0]),
    "Clip": lambda b, g, n, a: _clip_float(b, n, a[0]),
    "HardSigmoid": lambda b, g, n, a: _hard_sigmoid_float(b, n, a[0]),
    "Table": lambda b, g, n, a: _table_float(b, n, a[0]),
    "Softmax": lambda b, g, n, a: b.op("Softmax", [a[0]], axis=-1),
    "ArgMax": lambda b, g, n, a: b.op("Cast", [b.op("ArgMax", [a[0]], axis=-1, keepdims=1, select_last_index=0)],
                                      to=TensorProto.FLOAT),
    "Reshape": lambda b, g, n, a: b.op("Reshape", [a[0], b.i64s([0, *g.tensors[n.output].shape])]),
    "Transpose": lambda b, g, n, a: b.op("Transpose", [a[0]], perm=[0, *(p + 1 for p in n.perm)]),
    "Concat": lambda b, g, n, a: b.op("Concat", list(a), axis=n.axis + 1),
}
