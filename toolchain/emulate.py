"""The golden model: runs the IR bit-exactly on integer codes, batched.

This module *defines* bitforge's arithmetic: ONNX Runtime, RTL simulation and HLS C-simulation are
checked against it bit for bit. Fixed-point tensors are int64 code arrays of shape ``(batch, *shape)``
(object arrays of Python ints when an accumulator is wider than 62 bits); float tensors are float32.

Dense, LowRankDense and Conv accumulate by hls4ml's rule (:mod:`.accumulate`). Speed: integer matrix products
run as float64 BLAS products whenever every partial sum is provably an integer below 2**53 (then float64 is exact
whatever the summation order), else as exact integer products; an accumulator that rounds each product or may
saturate a partial sum costs an elementwise or per-input pass instead.
"""
from __future__ import annotations

import math
from typing import Mapping, Optional, Union

import numpy as np

from . import fixed, tables
from .accumulate import EXACT_F64, dense_accumulator, exact_matmul  # noqa: F401  (EXACT_F64, exact_matmul: re-exported)
from .bspline import basis_table, bspline_basis_float, cell_and_u
from .fixed import FixedType
from .ir import (
    Add,
    ArgMax,
    Clip,
    Concat,
    Conv,
    Dense,
    Graph,
    HardSigmoid,
    IRError,
    KANLayer,
    LeakyReLU,
    LowRankDense,
    Node,
    Pool,
    Quantize,
    ReLU,
    Requantize,
    Reshape,
    ScaleShift,
    Softmax,
    Table,
    Transpose,
)
from .windows import gather_windows, window_indices


class EmulationError(IRError):
    """The graph cannot be run as given (missing accumulator types, wrong input shape, ...)."""


def dense_stage(x: np.ndarray, xt: FixedType, w: np.ndarray, wt: FixedType, bias, bt, accum: FixedType,
                out: FixedType) -> np.ndarray:
    """One fixed-point ``W x + b``: the accumulation rule (:func:`.accumulate.dense_accumulator`), then a
    requantize to the output type."""
    return fixed.requantize(dense_accumulator(x, xt, w, wt, bias, bt, accum), accum, out)


def _run_fixed(g: Graph, n: Node, args: list[np.ndarray]) -> np.ndarray:
    ins = [g.tensors[t].dtype for t in n.inputs]
    out = g.tensors[n.output].dtype
    x = args[0]
    if isinstance(n, Quantize):
        return fixed.quantize(x, out)
    if isinstance(n, Requantize):
        return fixed.requantize(x, ins[0], out)
    if isinstance(n, ReLU):
        return fixed.requantize(np.maximum(x, 0), ins[0], out)
    if isinstance(n, Add):
        s, st = fixed.add(args[0], ins[0], args[1], ins[1])
        return fixed.requantize(s, st, out)
    if isinstance(n, Dense):
        return dense_stage(x, ins[0], n.weight, n.weight_type, n.bias, n.bias_type,
                           n.need("accum_type", EmulationError), out)
    if isinstance(n, LowRankDense):
        h = dense_stage(x, ins[0], n.v, n.v_type, None, None, n.need("accum_v_type", EmulationError), n.mid_type)
        return dense_stage(h, n.mid_type, n.u, n.u_type, n.bias, n.bias_type,
                           n.need("accum_type", EmulationError), out)
    if isinstance(n, KANLayer):
        return kan_fixed(n, x, out)
    rule = _FIXED_RULES.get(n.OP)
    if rule is None:
        raise EmulationError(f"{n.describe()}: no golden-model rule for op {n.OP}")
    return rule(g, n, args, ins, out)


# -- the ops of the models people bring (docs/ir.md has each rule in words) ----------------------------------

def exact_type(q: np.ndarray, frac: int) -> FixedType:
    """A signed type wide enough for every code in ``q`` at ``frac``: what ``fixed.requantize`` needs to know
    about an exact intermediate (it picks int64 or Python ints from the width)."""
    if q.size == 0:
        return FixedType(2, 2 - frac)
    lo, hi = int(q.min()), int(q.max())
    width = max(fixed.signed_bits(lo), fixed.signed_bits(hi)) + 1
    return FixedType(width, width - frac)


def requantize_exact(q: np.ndarray, frac: int, out: FixedType) -> np.ndarray:
    """Exact codes at ``frac`` -> codes of ``out`` (its rounding, then its overflow)."""
    return fixed.requantize(q, exact_type(q, frac), out)


def _windows(n: Node, x: np.ndarray, kernel: tuple[int, ...], pad_value) -> np.ndarray:
    """(N, C, positions, taps) windows of a (N, C, *spatial) batch."""
    idx = window_indices(x.shape[2:], kernel, n.stride, n.padding, getattr(n, "dilation", (1,) * len(kernel)))
    return gather_windows(x, idx, pad_value)


def conv_fixed(n: Conv, x: np.ndarray, out_shape: tuple[int, ...], out: FixedType,
               xt: Optional[FixedType] = None) -> np.ndarray:
    """Every output position a Dense stage over its window, the taps in C order of ``(C_in / groups, *kernel)``.

    ``xt`` is the input's type; only its frac matters (where the products land). None reads the products as
    landing on the accumulator's LSB (frac(accum) - frac(W)), as every inferred accumulator has them.
    """
    accum = n.need("accum_type", EmulationError)
    wt = n.weight_type
    if xt is None:
        xt = FixedType(2, 2 - (accum.frac - wt.frac))  # only its frac is read
    patches = _windows(n, x, n.kernel, 0)  # (N, C_in, P, K)
    N, _, P, K = patches.shape
    cg, og = n.weight.shape[1], n.out_channels // n.groups
    acc = []
    for grp in range(n.groups):
        xs = patches[:, grp * cg:(grp + 1) * cg].transpose(0, 2, 1, 3).reshape(N * P, cg * K)
        w = n.weight[grp * og:(grp + 1) * og].reshape(og, cg * K).astype(np.int64)
        bias = None if n.bias is None else np.asarray(n.bias)[grp * og:(grp + 1) * og]
        acc.append(dense_accumulator(xs, xt, w, wt, bias, n.bias_type, accum).reshape(N, P, og))
    acc = np.concatenate(acc, axis=2).transpose(0, 2, 1)  # (N, C_out, P)
    return fixed.requantize(acc, accum, out).reshape(N, *out_shape)


def pool_divisors(n: Pool, in_spatial: tuple[int, ...]) -> np.ndarray:
    """(positions,) the divisor of every average window: the whole kernel, or only its real elements."""
    idx = window_indices(in_spatial, n.kernel, n.stride, n.padding, (1,) * len(n.kernel))
    return np.full(len(idx), idx.shape[1], dtype=np.int64) if n.count_include_pad else (idx >= 0).sum(axis=1)


def pool_reciprocals(n: Pool, in_spatial: tuple[int, ...]) -> np.ndarray:
    """(positions,) ``R_n = round(2**recip_frac / n)``, ties to even: the average's constant multipliers."""
    return _round_div(1 << n.recip_frac, pool_divisors(n, in_spatial))


def _round_div(a: int, d: np.ndarray) -> np.ndarray:
    """round(a / d) for positive integers, ties to even (exact integer arithmetic)."""
    q, r = np.divmod(np.int64(a), d)
    up = (2 * r > d) | ((2 * r == d) & (q % 2 == 1))
    return q + up.astype(np.int64)


def pool_fixed(n: Pool, x: np.ndarray, xt: FixedType, out_shape: tuple[int, ...], out: FixedType) -> np.ndarray:
    N = x.shape[0]
    if n.mode == "max":
        w = _windows(n, x, tuple(n.kernel), xt.min_code - 1)  # padding never wins: a window has a real element
        return fixed.requantize(w.max(axis=3), xt, out).reshape(N, *out_shape)
    w = _windows(n, x, tuple(n.kernel), 0)
    sums = w.sum(axis=3)  # (N, C, P): exact (object arrays stay Python ints)
    prod = sums * pool_reciprocals(n, x.shape[2:])[None, None, :]
    return requantize_exact(prod, xt.frac + n.recip_frac, out).reshape(N, *out_shape)


def _channel(a: np.ndarray, ndim: int) -> np.ndarray:
    """A per-channel (C,) or scalar (1,) array shaped to broadcast over (N, C, *rest) of ``ndim`` axes."""
    return np.asarray(a).reshape((1, -1) + (1,) * (ndim - 2))


def scale_shift_fixed(n: ScaleShift, x: np.ndarray, xt: FixedType, out: FixedType) -> np.ndarray:
    accum = n.need("accum_type", EmulationError)
    acc = _scale_product(x, n.scale, xt, n.scale_type)
    if n.shift is not None:
        acc = acc + _channel(np.asarray(n.shift, dtype=np.int64) << (accum.frac - n.shift_type.frac), x.ndim)
    acc = fixed.apply_overflow(acc, accum)
    return fixed.requantize(acc, accum, out)


def _scale_product(x: np.ndarray, scale: np.ndarray, xt: FixedType, st: FixedType) -> np.ndarray:
    """x * scale[c] exactly: int64 while the product type fits, else Python ints."""
    wide = x.dtype == object or xt.width + st.width > fixed.INT64_SAFE_BITS
    xs = fixed.int_array(x, 64 if wide else 0)
    return xs * _channel(fixed.int_array(scale, 64 if wide else 0), x.ndim)


def leaky_relu_fixed(n: LeakyReLU, x: np.ndarray, xt: FixedType, out: FixedType) -> np.ndarray:
    neg = _scale_product(x, n.alpha, xt, n.alpha_type)
    pos = fixed.int_array(x, 64 if neg.dtype == object else 0) << n.alpha_type.frac
    return requantize_exact(np.where(x >= 0, pos, neg), xt.frac + n.alpha_type.frac, out)


def clip_codes(n: Clip, xt: FixedType) -> tuple[Optional[int], Optional[int]]:
    """The bounds as codes of the input type: ceil(lo 2**frac), floor(hi 2**frac) (exact for any float)."""
    from fractions import Fraction

    scale = Fraction(2) ** xt.frac
    lo = None if n.lo is None else math.ceil(Fraction(n.lo) * scale)
    hi = None if n.hi is None else math.floor(Fraction(n.hi) * scale)
    return lo, hi


def clip_fixed(n: Clip, x: np.ndarray, xt: FixedType, out: FixedType) -> np.ndarray:
    lo, hi = clip_codes(n, xt)
    # A bound beyond the input type's range cannot act (ONNX exporters write FLT_MAX for "none"): dropped, so that
    # its code (2**128 and more) never meets int64. An upper bound below the lower one still acts (it wins).
    if lo is not None and lo <= xt.min_code:
        lo = None
    if hi is not None and hi >= xt.max_code and (lo is None or hi >= lo):
        hi = None
    bits = max([xt.width + 1] + [fixed.signed_bits(v) + 1 for v in (lo, hi) if v is not None])
    y = fixed.int_array(x, bits)
    if lo is not None:
        y = np.where(y < lo, lo, y)
    if hi is not None:
        y = np.where(y > hi, hi, y)
    return fixed.requantize(fixed.int_array(y, bits), FixedType(bits, bits - xt.frac, True), out)


def hard_sigmoid_fixed(n: HardSigmoid, x: np.ndarray, xt: FixedType, out: FixedType) -> np.ndarray:
    at = n.alpha_type
    f = xt.frac + at.frac
    xs = fixed.int_array(x, xt.width + at.width + 2)
    t = xs * n.alpha_code + (n.beta_code << xt.frac)  # validate: frac(x) >= 0
    one = 1 << f
    t = np.where(t < 0, 0, np.where(t > one, one, t))
    if n.swish:
        return requantize_exact(fixed.int_array(xs * t, 2 * xt.width + at.width + 4), xt.frac + f, out)
    return requantize_exact(t, f, out)


def softmax_fixed(n: Softmax, x: np.ndarray, out: FixedType) -> np.ndarray:
    d = x.max(axis=-1, keepdims=True) - x  # >= 0, exact
    e = np.asarray(n.exp_table, dtype=np.int64)[np.minimum(d >> n.exp_shift, len(n.exp_table) - 1)]
    s = e.sum(axis=-1, keepdims=True)
    r = tables.lookup(s, n.recip_table, n.recip_lo, n.recip_shift)
    return requantize_exact(e * r, n.exp_type.frac + n.recip_type.frac, out)


def concat_fixed(n: Concat, args: list[np.ndarray], ins: list[FixedType], out: FixedType) -> np.ndarray:
    parts = [fixed.requantize(a, t, out) for a, t in zip(args, ins)]
    return np.concatenate(parts, axis=n.axis + 1)


_FIXED_RULES = {
    "Conv": lambda g, n, a, ins, out: conv_fixed(n, a[0], g.tensors[n.output].shape, out, ins[0]),
    "Pool": lambda g, n, a, ins, out: pool_fixed(n, a[0], ins[0], g.tensors[n.output].shape, out),
    "ScaleShift": lambda g, n, a, ins, out: scale_shift_fixed(n, a[0], ins[0], out),
    "LeakyReLU": lambda g, n, a, ins, out: leaky_relu_fixed(n, a[0], ins[0], out),
    "Clip": lambda g, n, a, ins, out: clip_fixed(n, a[0], ins[0], out),
    "HardSigmoid": lambda g, n, a, ins, out: hard_sigmoid_fixed(n, a[0], ins[0], out),
    "Table": lambda g, n, a, ins, out: tables.lookup(a[0], n.table, n.index_lo, n.index_shift),
    "Softmax": lambda g, n, a, ins, out: softmax_fixed(n, a[0], out),
    "ArgMax": lambda g, n, a, ins, out: np.argmax(a[0], axis=-1)[..., None].astype(np.int64),
    "Reshape": lambda g, n, a, ins, out: a[0].reshape(len(a[0]), *g.tensors[n.output].shape),
    "Transpose": lambda g, n, a, ins, out: a[0].transpose(0, *(p + 1 for p in n.perm)),
    "Concat": lambda g, n, a, ins, out: concat_fixed(n, a, ins, out),
}


def kan_fixed(n: KANLayer, x: np.ndarray, out: FixedType) -> np.ndarray:
    """Fixed-point KAN layer: integer cell/u, basis table, exact sum over inputs and the k+1 active bases."""
    accum = n.need("accum_type", EmulationError)
    cell, u = cell_and_u(x, n.grid_size, n.u_bits, n.index_lo, n.index_mult, n.index_shift)  # (N, in)
    table = basis_table(n.order, n.u_bits, n.basis_type, n.basis_impl)  # (2**U, k+1)
    b = table[u]  # (N, in, k+1)
    n_in = n.in_features
    idx = cell[..., None] + np.arange(n.order + 1)  # (N, in, k+1)
    coeffs = n.coeffs.astype(np.int64)  # (out, in, G+k)
    # Gather the k+1 active coefficients of every edge: (N, out, in, k+1).
    active = coeffs[:, np.arange(n_in)[None, :, None], idx]  # (out, N, in, k+1)
    bound = float(np.abs(coeffs).max(initial=0)) * float(table.max()) * n_in * (n.order + 1)
    if bound < 2.0 ** 62:
        acc = np.einsum("onik,nik->no", active, b)
    else:
        acc = np.einsum("onik,nik->no", active.astype(object), b.astype(object))
    acc = fixed.apply_overflow(fixed.int_array(acc, 64 if acc.dtype == object else 0), accum)
    return fixed.requantize(acc, accum, out)


def _run_float(g: Graph, n: Node, args: list[np.ndarray]) -> np.ndarray:
    x = args[0]
    if isinstance(n, ReLU):
        return np.maximum(x, np.float32(0))
    if isinstance(n, Add):
        return (args[0] + args[1]).astype(np.float32)
    if isinstance(n, Dense):
        y = x @ n.weight.astype(np.float32).T
        return (y + n.bias.astype(np.float32) if n.bias is not None else y).astype(np.float32)
    if isinstance(n, LowRankDense):
        y = (x @ n.v.astype(np.float32).T) @ n.u.astype(np.float32).T
        return (y + n.bias.astype(np.float32) if n.bias is not None else y).astype(np.float32)
    if isinstance(n, KANLayer):
        basis = bspline_basis_float(x, n.grid_lo, n.grid_hi, n.grid_size, n.order)  # (N, in, G+k)
        return np.einsum("nij,oij->no", basis, n.coeffs.astype(np.float64)).astype(np.float32)
    rule = _FLOAT_RULES.get(n.OP)
    if rule is None:
        raise EmulationError(f"{n.describe()}: op {n.OP} has no float rule")
    return np.asarray(rule(g, n, args), dtype=np.float32)


def conv_float(n: Conv, x: np.ndarray, out_shape: tuple[int, ...]) -> np.ndarray:
    patches = _windows(n, x, n.kernel, np.float32(0))  # (N, C_in, P, K)
    N, _, P, K = patches.shape
    cg, og = n.weight.shape[1], n.out_channels // n.groups
    parts = [np.einsum("ncpk,ock->nop", patches[:, grp * cg:(grp + 1) * cg],
                       n.weight[grp * og:(grp + 1) * og].reshape(og, cg, K).astype(np.float32))
             for grp in range(n.groups)]
    y = np.concatenate(parts, axis=1)
    if n.bias is not None:
        y = y + n.bias.astype(np.float32)[None, :, None]
    return y.reshape(N, *out_shape)


def pool_float(n: Pool, x: np.ndarray, out_shape: tuple[int, ...]) -> np.ndarray:
    if n.mode == "max":
        return _windows(n, x, tuple(n.kernel), np.float32(-np.inf)).max(axis=3).reshape(len(x), *out_shape)
    sums = _windows(n, x, tuple(n.kernel), np.float32(0)).sum(axis=3, dtype=np.float32)
    return (sums / pool_divisors(n, x.shape[2:]).astype(np.float32)).reshape(len(x), *out_shape)


def softmax_float(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def hard_sigmoid_float(n: HardSigmoid, x: np.ndarray) -> np.ndarray:
    h = np.clip(np.float32(n.alpha) * x + np.float32(n.beta), 0, 1)
    return x * h if n.swish else h


_FLOAT_RULES = {
    "Conv": lambda g, n, a: conv_float(n, a[0], g.tensors[n.output].shape),
    "Pool": lambda g, n, a: pool_float(n, a[0], g.tensors[n.output].shape),
    "ScaleShift": lambda g, n, a: a[0] * _channel(n.scale.astype(np.float32), a[0].ndim)
    + (0 if n.shift is None else _channel(n.shift.astype(np.float32), a[0].ndim)),
    "LeakyReLU": lambda g, n, a: np.where(a[0] >= 0, a[0], a[0] * _channel(n.alpha.astype(np.float32), a[0].ndim)),
    "Clip": lambda g, n, a: np.clip(a[0], -np.inf if n.lo is None else np.float32(n.lo),
                                    np.inf if n.hi is None else np.float32(n.hi)),
    "HardSigmoid": lambda g, n, a: hard_sigmoid_float(n, a[0]),
    "Table": lambda g, n, a: tables.function(n.function)(a[0].astype(np.float64)),
    "Softmax": lambda g, n, a: softmax_float(a[0]),
    "ArgMax": lambda g, n, a: np.argmax(a[0], axis=-1)[..., None],
    "Reshape": lambda g, n, a: a[0].reshape(len(a[0]), *g.tensors[n.output].shape),
    "Transpose": lambda g, n, a: a[0].transpose(0, *(p + 1 for p in n.perm)),
    "Concat": lambda g, n, a: np.concatenate(a, axis=n.axis + 1),
}


def run(g: Graph, inputs: Union[np.ndarray, Mapping[str, np.ndarray]], keep: bool = False) -> dict[str, np.ndarray]:
    """Run ``g`` on a batch; returns the graph outputs (all tensors when ``keep``).

    Float graph inputs take float arrays; fixed-point graph inputs take integer codes of their type.
    """
    if not isinstance(inputs, Mapping):
        if len(g.inputs) != 1:
            raise EmulationError(f"graph '{g.name}' has inputs {g.inputs}; pass a dict")
        inputs = {g.inputs[0]: inputs}
    env: dict[str, np.ndarray] = {}
    for name in g.inputs:
        spec = g.tensors[name]
        if name not in inputs:
            raise EmulationError(f"no value given for graph input '{name}'")
        a = np.asarray(inputs[name])
        if a.shape[1:] != spec.shape:
            raise EmulationError(f"input '{name}': expected shape (batch, {', '.join(map(str, spec.shape))}), "
                                 f"found {a.shape}")
        if spec.is_float:
            a = _float32_input(name, a)
        else:
            if a.dtype.kind not in "iu":
                raise EmulationError(f"input '{name}' is {spec.type_str()}: give integer codes, found dtype {a.dtype}")
            if a.size and (a.min() < spec.dtype.min_code or a.max() > spec.dtype.max_code):
                raise EmulationError(f"input '{name}': codes outside {spec.dtype}")
            a = a.astype(np.int64)
        env[name] = a
    for n in g.nodes:
        args = [env[t] for t in n.inputs]
        fixed_in = not g.tensors[n.inputs[0]].is_float or isinstance(n, Quantize)
        env[n.output] = _run_fixed(g, n, args) if fixed_in else _run_float(g, n, args)
    return env if keep else {t: env[t] for t in g.outputs}


def _float32_input(name: str, a: np.ndarray) -> np.ndarray:
    """A float input as the float32 the model takes: real numbers only, and none that float32 would turn into an
    infinity (the cast is silent, and the quantizer would then blame a NaN/Inf the data never held)."""
    if a.dtype.kind not in "biuf":
        raise EmulationError(f"input '{name}': expected real numbers, found dtype {a.dtype}")
    with np.errstate(invalid="ignore"):
        beyond = np.isfinite(a) & (np.abs(a.astype(np.float64)) > np.finfo(np.float32).max)
    if beyond.any():
        first = tuple(int(i) for i in np.argwhere(beyond)[0])
        raise EmulationError(f"input '{name}': {int(beyond.sum())} value(s) beyond float32's range (+-3.4e38), "
                             f"first {float(a[first]):g} at index {first}; the model's inputs are float32: scale or "
                             "clip the data")
    return a.astype(np.float32)


def run_values(g: Graph, inputs) -> dict[str, np.ndarray]:
    """Like :func:`run` but fixed-point outputs come back as float64 real values."""
    out = run(g, inputs)
    return {k: (fixed.to_float(v, g.tensors[k].dtype) if g.tensors[k].dtype is not None else v)
            for k, v in out.items()}
