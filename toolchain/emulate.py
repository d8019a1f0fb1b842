"""The golden model: runs the IR bit-exactly on integer codes, batched.

This module *defines* bitforge's arithmetic: ONNX Runtime, RTL simulation and HLS C-simulation are
checked against it bit for bit. Fixed-point tensors are int64 code arrays of shape ``(batch, *shape)``
(object arrays of Python ints when an accumulator is wider than 62 bits); float tensors are float32.

Speed: integer matrix products run as float64 BLAS products whenever every partial sum is provably an
integer below 2**53 (then float64 is exact whatever the summation order), else as exact integer
products.
"""
from __future__ import annotations

from typing import Mapping, Union

import numpy as np

from . import fixed
from .bspline import basis_table, bspline_basis_float, cell_and_u
from .fixed import FixedType
from .ir import (
    Add,
    Dense,
    Graph,
    IRError,
    KANLayer,
    LowRankDense,
    Node,
    Quantize,
    ReLU,
    Requantize,
)

EXACT_F64 = float(2 ** 53)


class EmulationError(IRError):
    """The graph cannot be run as given (missing accumulator types, wrong input shape, ...)."""


def exact_matmul(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``x @ w.T`` for integer codes, exact. ``x`` is ``(N, in)``, ``w`` is ``(out, in)``."""
    if x.dtype == object or w.dtype == object:
        return np.dot(x.astype(object), w.astype(object).T)
    xmax = float(np.abs(x).max()) if x.size else 0.0
    wsum = float(np.abs(w).sum(axis=1).max()) if w.size else 0.0
    if xmax * wsum < EXACT_F64:
        return (x.astype(np.float64) @ w.astype(np.float64).T).astype(np.int64)
    if xmax * wsum < 2.0 ** 62:
        return x @ w.T
    return np.dot(x.astype(object), w.astype(object).T)


def dense_stage(x: np.ndarray, xt: FixedType, w: np.ndarray, wt: FixedType, bias, bt, accum: FixedType,
                out: FixedType) -> np.ndarray:
    """One fixed-point ``W x + b`` with an exact accumulator, then the accumulator's overflow and a requantize."""
    acc = exact_matmul(x, w)
    if bias is not None:
        acc = acc + (np.asarray(bias, dtype=np.int64) << (accum.frac - bt.frac))
    acc = fixed.apply_overflow(acc, accum)
    return fixed.requantize(acc, accum, out)


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
    raise EmulationError(f"{n.describe()}: no golden-model rule for op {n.OP}")


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
    raise EmulationError(f"{n.describe()}: op {n.OP} has no float rule")


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
