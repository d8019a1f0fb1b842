"""ONNX's data movement -> the IR's Reshape, Transpose and Concat, and the shape arithmetic exporters put around it.

Mixed into the ONNX translator (``onnx_frontend``). ONNX shapes include the batch axis; IR shapes are per sample,
so every op here checks that the batch stays axis 0 and alone (a Flatten from axis 0, a Reshape that moves
elements across samples, a Transpose or Concat on axis 0 are refused). A change that leaves the per-sample shape
as it is becomes no node at all. On constants the ops are evaluated here.

``x.view(x.size(0), -1)`` exports as ``Shape -> Gather -> Unsqueeze -> Concat -> Reshape``: those ops run here on
a :class:`ShapeVec`, whose batch entry stays unknown, and the Reshape reads it as "keep the batch".

Data movement keeps the element type; in a quantized graph its output shares its input's type, so a following
quantizer may retype both together (``_link(..., required=True)``), never one alone.
"""
from __future__ import annotations

import math
from typing import Optional, Union

import numpy as np
import onnx
from onnx import TensorProto

from ..ir import Concat, Reshape, TensorSpec, Transpose
from .onnx_values import Act, Const, QConst, ShapeVec, holding_type

__all__ = ["SHAPE_OPS", "ShapeOps"]

#: ONNX op type -> the translator method that maps it.
SHAPE_OPS = {"Flatten": "_flatten", "Reshape": "_reshape", "Squeeze": "_squeeze", "Unsqueeze": "_unsqueeze",
             "Transpose": "_transpose_op", "Concat": "_concat", "Shape": "_shape_of", "Gather": "_gather"}


def _array_of(v: Union[Const, QConst]) -> np.ndarray:
    return v.array if isinstance(v, Const) else v.codes


def _like(v: Union[Const, QConst], arr: np.ndarray) -> Union[Const, QConst]:
    if isinstance(v, Const):
        return Const(arr, v.elem)
    if v.scale is not None and np.any(v.scale != v.scale.flat[0]):
        raise ValueError("moving a constant with per-channel non-power-of-two scales is not supported; quantize "
                         "the weight after reshaping it")
    return QConst(arr, v.dtype, None if v.scale is None else np.full(arr.shape, v.scale.flat[0]))


class ShapeOps:
    """Flatten, Reshape, Squeeze, Unsqueeze, Transpose, Concat, Shape and Gather, for the ONNX translator."""

    # -- shared ---------------------------------------------------------------------------------------------
    def _move(self, n: onnx.NodeProto, x: Act, node_of, shape: tuple[int, ...]) -> None:
        """Emit ``node_of(name, inputs, outputs)`` giving ``shape`` with ``x``'s type; a Reshape to the same
        per-sample shape is no node at all."""
        xs = self._spec(x)
        out = n.output[0]
        if shape == xs.shape and node_of is Reshape:
            self.values[out] = x
            return
        linked = not xs.is_float and self._may_retype(n.input[0], x)
        self.values[out] = self._emit(node_of(self._name(), (x.tensor,), (out,)), TensorSpec(out, shape, xs.dtype),
                                      exact=linked)
        if linked:
            self._link(out, x.tensor, required=True)

    def _raw_axes(self, n: onnx.NodeProto, what: str) -> Optional[list[int]]:
        """A Squeeze/Unsqueeze's axes as written: an attribute before opset 13, an input from 13."""
        if len(n.input) > 1 and n.input[1]:
            return [int(a) for a in self._const(n.input[1], f"{what} axes").array.ravel()]
        axes = self._attrs(n).get("axes")
        return None if axes is None else [int(a) for a in axes]

    def _axes(self, n: onnx.NodeProto, rank: int, what: str) -> Optional[list[int]]:
        """The axes normalised to ``rank`` (Unsqueeze: the output's rank)."""
        axes = self._raw_axes(n, what)
        if axes is None:
            return None
        if any(not -rank <= a < rank for a in axes):
            raise self._fail(f"axes {list(axes)} out of range for rank {rank}")
        return sorted(a % rank for a in axes)

    def _batch_first(self, axes: list[int], what: str) -> None:
        if 0 in axes:
            raise self._fail(f"{what} on axis 0, the batch axis: bitforge keeps the batch as axis 0 and compiles "
                             "one sample at a time; export the model so the batch axis is left alone")

    # -- Flatten / Reshape -------------------------------------------------------------------------------------
    def _flatten(self, n: onnx.NodeProto) -> None:
        v = self._value(n.input[0])
        axis = int(self._attrs(n).get("axis", 1))
        if isinstance(v, (Const, QConst)):
            arr = _array_of(v)
            axis = axis % max(arr.ndim, 1) if arr.ndim else 0
            shape = (int(np.prod(arr.shape[:axis])), int(np.prod(arr.shape[axis:])))
            self.values[n.output[0]] = _like(v, arr.reshape(shape))
            return
        x = self._act(n, v, "Flatten")
        shape = self._spec(x).shape
        rank = len(shape) + 1
        if not -rank <= axis <= rank:
            raise self._fail(f"axis {axis} out of range for rank {rank}")
        axis = axis % rank if axis != rank else rank
        if axis == 0 or math.prod(shape[:axis - 1]) != 1:
            raise self._fail(f"Flatten(axis={axis}) of a (batch, {', '.join(map(str, shape))}) tensor merges the "
                             "batch axis with others; expected axis 1 (nn.Flatten's start_dim=1)")
        self._move(n, x, Reshape, (math.prod(shape),))

    def _reshape(self, n: onnx.NodeProto) -> None:
        v = self._value(n.input[0])
        allowzero = int(self._attrs(n).get("allowzero", 0))
        target_v = self.values.get(n.input[1])
        if isinstance(v, (Const, QConst)):
            target = [int(d) for d in self._const(n.input[1], "Reshape shape").array.ravel()]
            arr = _array_of(v)
            shape = [arr.shape[i] if d == 0 and not allowzero else d for i, d in enumerate(target)]
            try:
                self.values[n.output[0]] = _like(v, arr.reshape(shape))
            except ValueError as e:
                raise self._fail(f"cannot reshape constant of shape {arr.shape} to {target} ({e})") from None
            return
        x = self._act(n, v, "Reshape")
        if isinstance(target_v, ShapeVec):
            target = list(target_v.dims)
        else:
            target = [int(d) for d in self._const(n.input[1], "Reshape shape").array.ravel()]
        self._move(n, x, Reshape, self._per_sample_target(target, self._spec(x).shape, bool(allowzero)))

    def _per_sample_target(self, target: list[Optional[int]], shape: tuple[int, ...], allowzero: bool
                           ) -> tuple[int, ...]:
        """The per-sample shape a Reshape's full ``target`` gives (``None``: the runtime batch size), or a refusal
        when the target does not keep the batch as axis 0 on its own."""
        size = math.prod(shape)
        shown = ["batch" if d is None else d for d in target]
        bad = (f"Reshape to {shown} of a (batch, {', '.join(map(str, shape))}) tensor moves elements between "
               "samples or cannot be resolved; expected the batch first (0, -1 or the batch size) and the rest "
               f"giving {size} elements per sample, such as [-1, {size}] or [0, -1]")
        if not target or (allowzero and 0 in target) or any(d is None for d in target[1:]):
            raise self._fail(bad)
        rest = [shape[i - 1] if d == 0 and i - 1 < len(shape) else d for i, d in enumerate(target) if i > 0]
        if any(d == 0 for d in rest) or sum(d == -1 for d in rest) > 1 or any(d < -1 for d in rest):
            raise self._fail(bad)
        first = target[0]
        known = math.prod(d for d in rest if d != -1)
        if first == -1:  # the batch is whatever is left: the rest must be exactly one sample
            if -1 in rest or known != size:
                raise self._fail(bad)
        elif first is None or first == 0 or (self.batch is not None and first == self.batch):
            if -1 in rest:
                if known == 0 or size % known:
                    raise self._fail(bad)
                rest = [size // known if d == -1 else d for d in rest]
            elif known != size:
                raise self._fail(bad)
        else:
            raise self._fail(bad)
        return tuple(int(d) for d in rest)

    def _squeeze(self, n: onnx.NodeProto) -> None:
        v = self._value(n.input[0])
        if isinstance(v, (Const, QConst)):
            arr = _array_of(v)
            axes = self._axes(n, arr.ndim, "Squeeze")
            self.values[n.output[0]] = _like(v, np.squeeze(arr, axis=None if axes is None else tuple(axes)))
            return
        x = self._act(n, v, "Squeeze")
        shape = self._spec(x).shape
        axes = self._axes(n, len(shape) + 1, "Squeeze")
        if axes is None:
            raise self._fail("Squeeze without axes would also drop a batch of size 1; give the axes explicitly")
        self._batch_first(axes, "Squeeze")
        if any(shape[a - 1] != 1 for a in axes):
            raise self._fail(f"axes {axes} of a (batch, {', '.join(map(str, shape))}) tensor are not all of size 1")
        self._move(n, x, Reshape, tuple(d for i, d in enumerate(shape) if i + 1 not in axes))

    def _unsqueeze(self, n: onnx.NodeProto) -> None:
        v = self._value(n.input[0])
        if isinstance(v, ShapeVec):  # the plumbing of x.view(x.size(0), -1)
            if not v.scalar or self._axes(n, 1, "Unsqueeze") != [0]:
                raise self._fail("Unsqueeze of a shape is supported only as a scalar to a 1-element vector")
            self.values[n.output[0]] = ShapeVec(v.dims)
            return
        count = len(self._raw_axes(n, "Unsqueeze") or [])
        if not count:
            raise self._fail("Unsqueeze needs axes")
        if isinstance(v, (Const, QConst)):
            arr = _array_of(v)
            for a in self._axes(n, arr.ndim + count, "Unsqueeze"):
                arr = np.expand_dims(arr, a)
            self.values[n.output[0]] = _like(v, arr)
            return
        x = self._act(n, v, "Unsqueeze")
        shape = list(self._spec(x).shape)
        axes = self._axes(n, len(shape) + 1 + count, "Unsqueeze")
        self._batch_first(axes, "Unsqueeze")
        full = [None] + shape
        for a in axes:
            full.insert(a, 1)
        self._move(n, x, Reshape, tuple(full[1:]))

    # -- Transpose -----------------------------------------------------------------------------------------
    def _transpose_op(self, n: onnx.NodeProto) -> None:
        v = self._value(n.input[0])
        perm = self._attrs(n).get("perm")
        if isinstance(v, (Const, QConst)):
            self.values[n.output[0]] = _like(v, np.transpose(_array_of(v), perm).copy())
            return
        x = self._act(n, v, "Transpose")
        shape = self._spec(x).shape
        rank = len(shape) + 1
        perm = list(range(rank))[::-1] if perm is None else [int(p) for p in perm]
        if sorted(perm) != list(range(rank)):
            raise self._fail(f"perm {perm} is not a permutation of the {rank} axes")
        if perm[0] != 0:
            raise self._fail(f"perm {perm} moves the batch axis (axis 0); expected perm[0] = 0 (the batch stays "
                             "first and the per-sample axes are permuted)")
        inner = tuple(p - 1 for p in perm[1:])
        if inner == tuple(range(len(shape))):
            self.values[n.output[0]] = x
            return
        self._move(n, x, lambda name, i, o: Transpose(name, i, o, perm=inner), tuple(shape[p] for p in inner))

    # -- Concat ------------------------------------------------------------------------------------------------
    def _concat(self, n: onnx.NodeProto) -> None:
        ins = [self._value(i) for i in n.input]
        axis = int(self._attrs(n).get("axis", 0))
        if all(isinstance(v, (Const, ShapeVec)) for v in ins):
            self._concat_shapes(n, ins, axis)
            return
        if not all(isinstance(v, Act) for v in ins):
            raise self._fail("Concat of tensors with constants is not supported; every input must be computed "
                             "from the graph input")
        specs = [self._spec(v) for v in ins]
        rank = len(specs[0].shape) + 1
        if any(len(s.shape) + 1 != rank for s in specs) or not -rank <= axis < rank:
            raise self._fail(f"axis {axis} does not fit inputs of per-sample shapes {[s.shape for s in specs]}")
        axis %= rank
        self._batch_first([axis], "Concat")
        if len({s.is_float for s in specs}) != 1:
            raise self._fail("joins float and quantized tensors; quantize every input (or none)")
        a = axis - 1
        for s in specs[1:]:
            if [d for i, d in enumerate(s.shape) if i != a] != [d for i, d in enumerate(specs[0].shape) if i != a]:
                raise self._fail(f"input shapes {[s.shape for s in specs]} differ off the joined axis {axis}")
        dtype = None if specs[0].is_float else self._join_type([s.dtype for s in specs])
        acc, acc_spec = ins[0], specs[0]
        for k, (v, s) in enumerate(zip(ins[1:], specs[1:]), start=1):
            shape = tuple(d + s.shape[i] if i == a else d for i, d in enumerate(acc_spec.shape))
            out = n.output[0] if k == len(ins) - 1 else f"{n.output[0]}__{k}"
            acc_spec = TensorSpec(out, shape, dtype)
            acc = self._emit(Concat(self._name(), (acc.tensor, v.tensor), (out,), axis=a), acc_spec,
                             exact=dtype is not None)
        self.values[n.output[0]] = acc

    @staticmethod
    def _join_type(types):
        """The narrowest type holding every input's values exactly (Concat requantizes each to it)."""
        frac = max(t.frac for t in types)
        lo = min(t.min_code << (frac - t.frac) for t in types)
        hi = max(t.max_code << (frac - t.frac) for t in types)
        return holding_type(lo, hi, frac, types[0].rounding)

    def _concat_shapes(self, n: onnx.NodeProto, ins: list, axis: int) -> None:
        if axis not in (0, -1) or any(isinstance(v, ShapeVec) and v.scalar for v in ins):
            raise self._fail("Concat of shape vectors is supported along axis 0 of 1-D vectors only")
        if not any(isinstance(v, ShapeVec) for v in ins):
            self.values[n.output[0]] = Const(np.concatenate([v.array for v in ins], axis=axis), ins[0].elem)
            return
        dims: list[Optional[int]] = []
        for v in ins:
            if isinstance(v, ShapeVec):
                dims += list(v.dims)
            elif v.array.ndim == 1 and v.array.dtype.kind in "iu":
                dims += [int(d) for d in v.array]
            else:
                raise self._fail(f"Concat of a shape with a constant of shape {v.array.shape}, dtype "
                                 f"{v.array.dtype}; expected 1-D integer vectors")
        self.values[n.output[0]] = ShapeVec(tuple(dims))

    # -- shape plumbing ---------------------------------------------------------------------------------------
    def _shape_of(self, n: onnx.NodeProto) -> None:
        v = self._value(n.input[0])
        at = self._attrs(n)
        if isinstance(v, Act):
            dims: tuple[Optional[int], ...] = (None, *self._spec(v).shape)
        elif isinstance(v, (Const, QConst)):
            dims = tuple(int(d) for d in _array_of(v).shape)
        else:
            raise self._fail("Shape of a shape vector is not supported")
        dims = dims[slice(at.get("start", 0), at.get("end"))]
        if all(d is not None for d in dims):
            self.values[n.output[0]] = Const(np.array(dims, np.int64), TensorProto.INT64)
        else:
            self.values[n.output[0]] = ShapeVec(dims)

    def _gather(self, n: onnx.NodeProto) -> None:
        data = self.values.get(n.input[0])
        idx_v = self._const(n.input[1], "Gather indices")
        axis = int(self._attrs(n).get("axis", 0))
        if isinstance(data, Const):
            self.values[n.output[0]] = Const(np.take(data.array, idx_v.array, axis=axis), data.elem)
            return
        if not isinstance(data, ShapeVec) or axis != 0 or idx_v.array.ndim > 1:
            raise self._fail("Gather is supported on constants and on the entries of a Shape (x.size(i)); "
                             "gathering from a computed tensor is not")
        rank = len(data.dims)
        idx = [int(i) for i in idx_v.array.ravel()]
        if any(not -rank <= i < rank for i in idx):
            raise self._fail(f"indices {idx} out of range for a shape of {rank} entries")
        self.values[n.output[0]] = ShapeVec(tuple(data.dims[i] for i in idx), scalar=idx_v.array.ndim == 0)

    def _act(self, n: onnx.NodeProto, v, what: str) -> Act:
        if not isinstance(v, Act):
            raise self._fail(f"{what} of a shape vector is not supported")
        return v
