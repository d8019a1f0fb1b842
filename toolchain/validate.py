"""The IR's rules, checked one by one; each failure names the node (or tensor) and what was expected.

Kept apart from ``ir`` so the data structures stay small; ``ir.validate`` calls :func:`check_graph`. This
module imports nothing from ``ir`` at run time (rules dispatch on ``Node.OP``, the error class lives in
``errors``), so ``ir`` can call it without an import cycle.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .bspline import BASIS_IMPLS, CLOSED_FORM_POLYNOMIALS
from .errors import IRError
from .fixed import FixedType
from .windows import output_spatial

if TYPE_CHECKING:
    from .ir import Graph, Node

def check_graph(g: Graph) -> None:
    names = set()
    defined = set(g.inputs)
    for t in g.inputs:
        g.tensor(t)
    for n in g.nodes:
        if n.name in names:
            raise IRError(f"{n.describe()}: node name used twice")
        names.add(n.name)
        if len(n.inputs) != n.ARITY or len(n.outputs) != 1:
            raise IRError(f"{n.describe()}: expected {n.ARITY} input(s) and 1 output, "
                          f"found {len(n.inputs)} and {len(n.outputs)}")
        for t in n.inputs:
            g.tensor(t)
            if t not in defined:
                raise IRError(f"{n.describe()}: input '{t}' is not produced by an earlier node or a graph input "
                              "(nodes must be in topological order)")
        out = g.tensor(n.output)
        if n.output in defined:
            raise IRError(f"{n.describe()}: output '{n.output}' is already produced elsewhere")
        defined.add(n.output)
        for k, a in n.array_fields().items():
            if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
                raise IRError(f"{n.describe()}: array '{k}' contains NaN or Inf")
        _check_node(g, n, [g.tensor(t) for t in n.inputs], out)
    for t in g.outputs:
        if t not in defined:
            raise IRError(f"graph output '{t}' is never produced")


def _shape_err(n: Node, what: str, expected, found) -> IRError:
    return IRError(f"{n.describe()}: {what}: expected {expected}, found {found}")


def _codes_fit(n: Node, field: str, a: np.ndarray, t: FixedType) -> None:
    if a is None:
        return
    if a.dtype.kind not in "iu":
        raise IRError(f"{n.describe()}: '{field}' must hold integer codes of {t}, found dtype {a.dtype}")
    if a.size and (a.min() < t.min_code or a.max() > t.max_code):
        raise IRError(f"{n.describe()}: '{field}' has codes in [{a.min()}, {a.max()}] outside {t} "
                      f"[{t.min_code}, {t.max_code}]; widen the type or re-quantize the weights")


def _check_dense_stage(n: Node, x, w, w_type, bias, bias_type, accum, label: str) -> None:
    """Shared rules of a fixed-point ``W x + b`` stage (Dense, both halves of LowRankDense, Conv).

    Any accumulator type is defined (docs/ir.md, hls4ml's accumulation: products and bias converted to it, each
    partial sum too), so its frac is not checked against frac(x) + frac(W) or frac(b) here.
    """
    if w_type is None:
        raise IRError(f"{n.describe()}: {label} weights are float but the input is fixed point; give a weight type")
    _codes_fit(n, f"{label} weight".strip(), w, w_type)
    if bias is not None:
        if bias_type is None:
            raise IRError(f"{n.describe()}: bias has no type")
        _codes_fit(n, "bias", bias, bias_type)


def _check_node(g: Graph, n: Node, ins, out) -> None:
    x = ins[0]
    if n.OP == "Quantize":
        if not x.is_float or out.is_float:
            raise IRError(f"{n.describe()}: expected float input and fixed output, found {x.type_str()} -> "
                          f"{out.type_str()}")
        if x.shape != out.shape:
            raise _shape_err(n, "output shape", x.shape, out.shape)
        return
    if n.OP in ("Requantize", "ReLU"):
        if x.shape != out.shape:
            raise _shape_err(n, "output shape", x.shape, out.shape)
        if n.OP == "Requantize" and (x.is_float or out.is_float):
            raise IRError(f"{n.describe()}: Requantize needs fixed input and output, found {x.type_str()} -> "
                          f"{out.type_str()}")
        if x.is_float != out.is_float:
            raise IRError(f"{n.describe()}: input is {x.type_str()} but output is {out.type_str()}")
        return
    if n.OP == "Add":
        if ins[0].shape != ins[1].shape or out.shape != ins[0].shape:
            raise _shape_err(n, "operand shapes", ins[0].shape, f"{ins[1].shape} -> {out.shape}")
        if len({t.is_float for t in (*ins, out)}) != 1:
            raise IRError(f"{n.describe()}: operands and result must all be fixed or all float")
        return
    if n.OP == "Dense":
        w = n.weight
        if w is None or w.ndim != 2:
            raise IRError(f"{n.describe()}: weight must be a 2-D (out, in) array")
        if x.shape[-1:] != (w.shape[1],):
            raise _shape_err(n, f"input '{x.name}' features", w.shape[1], x.shape)
        if out.shape != x.shape[:-1] + (w.shape[0],):
            raise _shape_err(n, "output shape", x.shape[:-1] + (w.shape[0],), out.shape)
        if n.bias is not None and n.bias.shape != (w.shape[0],):
            raise _shape_err(n, "bias shape", (w.shape[0],), n.bias.shape)
        if not x.is_float:
            if out.is_float:
                raise IRError(f"{n.describe()}: fixed input but float output")
            _check_dense_stage(n, x.dtype, w, n.weight_type, n.bias, n.bias_type, n.accum_type, "")
        return
    if n.OP == "LowRankDense":
        if n.u is None or n.v is None or n.u.ndim != 2 or n.v.ndim != 2:
            raise IRError(f"{n.describe()}: u (out, rank) and v (rank, in) must be 2-D arrays")
        if n.u.shape[1] != n.v.shape[0]:
            raise _shape_err(n, "rank of u and v", n.v.shape[0], n.u.shape[1])
        if x.shape[-1:] != (n.v.shape[1],):
            raise _shape_err(n, f"input '{x.name}' features", n.v.shape[1], x.shape)
        if out.shape != x.shape[:-1] + (n.u.shape[0],):
            raise _shape_err(n, "output shape", x.shape[:-1] + (n.u.shape[0],), out.shape)
        if not x.is_float:
            if n.mid_type is None:
                raise IRError(f"{n.describe()}: fixed-point low-rank layer needs mid_type for V x")
            _check_dense_stage(n, x.dtype, n.v, n.v_type, None, None, n.accum_v_type, "v")
            _check_dense_stage(n, n.mid_type, n.u, n.u_type, n.bias, n.bias_type, n.accum_type, "u")
        return
    if n.OP == "KANLayer":
        c = n.coeffs
        if c is None or c.ndim != 3:
            raise IRError(f"{n.describe()}: coeffs must be a 3-D (out, in, G+k) array")
        if c.shape[2] != n.grid_size + n.order:
            raise _shape_err(n, "coefficients per edge (G + k)", n.grid_size + n.order, c.shape[2])
        if not (n.grid_hi > n.grid_lo):
            raise IRError(f"{n.describe()}: grid range [{n.grid_lo}, {n.grid_hi}) is empty")
        if not (1 <= n.order <= 5):
            raise IRError(f"{n.describe()}: spline order {n.order} unsupported (1..5)")
        if x.shape != (c.shape[1],) or out.shape != (c.shape[0],):
            raise _shape_err(n, "input/output features", (c.shape[1], c.shape[0]), (x.shape, out.shape))
        if n.basis_impl not in BASIS_IMPLS:
            raise IRError(f"{n.describe()}: unknown basis_impl {n.basis_impl!r}; expected one of "
                          f"{', '.join(BASIS_IMPLS)}")
        if n.basis_impl == "closed_form" and n.order not in CLOSED_FORM_POLYNOMIALS:
            raise IRError(f"{n.describe()}: basis_impl 'closed_form' exists for spline orders "
                          f"{sorted(CLOSED_FORM_POLYNOMIALS)}, not {n.order}; use basis_impl 'table'")
        if not x.is_float:
            if n.coeff_type is None or n.basis_type is None:
                raise IRError(f"{n.describe()}: fixed-point KAN layer needs coeff_type and basis_type")
            _codes_fit(n, "coeffs", c, n.coeff_type)
            if n.u_bits < 0 or n.u_bits > 16 or n.index_mult < 1 or n.index_shift < 0:
                raise IRError(f"{n.describe()}: index map (u_bits={n.u_bits}, mult={n.index_mult}, "
                              f"shift={n.index_shift}) out of range")
            if n.accum_type is not None and n.accum_type.frac != n.coeff_type.frac + n.basis_type.frac:
                raise IRError(f"{n.describe()}: accumulator {n.accum_type} must have frac(coeff) + frac(basis) = "
                              f"{n.coeff_type.frac + n.basis_type.frac} fractional bits")
        return
    rule = _RULES.get(n.OP)
    if rule is None:
        raise IRError(f"{n.describe()}: unknown op")
    rule(g, n, ins, out)


# -- the ops of the models people bring ---------------------------------------------------------------------

def _window_output_shape(n: Node, in_shape: tuple[int, ...], kernel: tuple[int, ...],
                         channels: int) -> tuple[int, ...]:
    """(channels, *spatial) of a window op (Conv, Pool) on a (C, *spatial) input; raises on a bad geometry."""
    nd = len(kernel)
    stride, pads = tuple(n.stride), tuple(n.padding)
    dilation = tuple(getattr(n, "dilation", (1,) * nd))
    if len(in_shape) != nd + 1:
        raise _shape_err(n, "input shape (channels, then one size per spatial axis)", f"{nd + 1} axes", in_shape)
    if len(stride) != nd or len(dilation) != nd or len(pads) != 2 * nd:
        raise IRError(f"{n.describe()}: {nd}-D window needs {nd} strides, {nd} dilations and {2 * nd} pads "
                      f"(all begins, then all ends), found {stride}, {dilation}, {pads}")
    if min(stride) < 1 or min(dilation) < 1 or min(pads) < 0 or min(kernel) < 1:
        raise IRError(f"{n.describe()}: strides, dilations and kernel sizes must be >= 1 and pads >= 0")
    for a in range(nd):
        span = dilation[a] * (kernel[a] - 1) + 1
        if in_shape[1 + a] + pads[a] + pads[nd + a] < span:
            raise IRError(f"{n.describe()}: window of {span} on spatial axis {a} is larger than the padded input "
                          f"({in_shape[1 + a]} + {pads[a]} + {pads[nd + a]})")
    return (channels, *output_spatial(in_shape[1:], kernel, stride, pads, dilation))


def _check_same_kind(n: Node, x, out) -> None:
    if x.is_float != out.is_float:
        raise IRError(f"{n.describe()}: input is {x.type_str()} but output is {out.type_str()}")


def _check_per_channel(n: Node, field: str, a, x, allow_scalar: bool) -> None:
    c = x.shape[0] if x.shape else 1
    if a is None or a.ndim != 1 or not (a.shape[0] == c or (allow_scalar and a.shape[0] == 1)):
        want = f"({c},)" + (" or (1,)" if allow_scalar else "")
        raise _shape_err(n, f"'{field}' (one value per channel, axis 0)", want, None if a is None else a.shape)


def _check_conv(g: Graph, n: Node, ins, out) -> None:
    x, w = ins[0], n.weight
    if w is None or w.ndim not in (3, 4):
        raise IRError(f"{n.describe()}: weight must be (C_out, C_in / groups, *kernel) with 1 or 2 spatial axes")
    if n.groups < 1 or x.shape[0] % n.groups or w.shape[0] % n.groups:
        raise IRError(f"{n.describe()}: groups={n.groups} must divide the input channels {x.shape[0]} and the "
                      f"output channels {w.shape[0]}")
    if w.shape[1] * n.groups != x.shape[0]:
        raise _shape_err(n, "weight input channels x groups", x.shape[0], f"{w.shape[1]} x {n.groups}")
    want = _window_output_shape(n, x.shape, tuple(w.shape[2:]), int(w.shape[0]))
    if out.shape != want:
        raise _shape_err(n, "output shape", want, out.shape)
    if n.bias is not None and n.bias.shape != (w.shape[0],):
        raise _shape_err(n, "bias shape", (w.shape[0],), n.bias.shape)
    _check_same_kind(n, x, out)
    if not x.is_float:
        _check_dense_stage(n, x.dtype, w, n.weight_type, n.bias, n.bias_type, n.accum_type, "")


def _check_pool(g: Graph, n: Node, ins, out) -> None:
    x = ins[0]
    if n.mode not in ("max", "avg"):
        raise IRError(f"{n.describe()}: mode must be 'max' or 'avg', found {n.mode!r}")
    kernel = tuple(n.kernel)
    if len(kernel) not in (1, 2):
        raise IRError(f"{n.describe()}: pooling over {len(kernel)} spatial axes; 1 or 2 are supported")
    want = _window_output_shape(n, x.shape, kernel, x.shape[0] if x.shape else 0)
    if out.shape != want:
        raise _shape_err(n, "output shape", want, out.shape)
    nd = len(kernel)
    if any(n.padding[a] >= kernel[a] or n.padding[nd + a] >= kernel[a] for a in range(nd)):
        raise IRError(f"{n.describe()}: pads {tuple(n.padding)} must be smaller than the kernel {kernel} (a window "
                      "of padding alone has no value)")
    if not (0 <= n.recip_frac <= 32):
        raise IRError(f"{n.describe()}: recip_frac {n.recip_frac} out of range (0..32)")
    _check_same_kind(n, x, out)


def _check_scale_shift(g: Graph, n: Node, ins, out) -> None:
    x = ins[0]
    if not x.shape or out.shape != x.shape:
        raise _shape_err(n, "output shape", x.shape, out.shape)
    _check_per_channel(n, "scale", n.scale, x, allow_scalar=False)
    if n.shift is not None:
        _check_per_channel(n, "shift", n.shift, x, allow_scalar=False)
    _check_same_kind(n, x, out)
    if not x.is_float:
        if n.scale_type is None:
            raise IRError(f"{n.describe()}: fixed-point ScaleShift needs scale_type")
        _codes_fit(n, "scale", n.scale, n.scale_type)
        if n.shift is not None:
            if n.shift_type is None:
                raise IRError(f"{n.describe()}: shift has no type")
            _codes_fit(n, "shift", n.shift, n.shift_type)
        frac = x.dtype.frac + n.scale_type.frac
        if n.accum_type is not None and n.accum_type.frac != frac:
            raise IRError(f"{n.describe()}: accumulator {n.accum_type} must have frac(x) + frac(scale) = {frac} "
                          "fractional bits")
        if n.shift is not None and n.shift_type.frac > frac:
            raise IRError(f"{n.describe()}: shift type {n.shift_type} is finer than frac(x) + frac(scale) = {frac}")


def _check_elementwise(g: Graph, n: Node, ins, out) -> None:
    x = ins[0]
    if out.shape != x.shape:
        raise _shape_err(n, "output shape", x.shape, out.shape)
    _check_same_kind(n, x, out)


def _check_leaky_relu(g: Graph, n: Node, ins, out) -> None:
    _check_elementwise(g, n, ins, out)
    x = ins[0]
    _check_per_channel(n, "alpha", n.alpha, x, allow_scalar=True)
    if not x.is_float:
        if n.alpha_type is None:
            raise IRError(f"{n.describe()}: fixed-point LeakyReLU needs alpha_type")
        _codes_fit(n, "alpha", n.alpha, n.alpha_type)
        _no_negative_frac(n, "alpha_type", n.alpha_type)


def _no_negative_frac(n: Node, field: str, t: FixedType) -> None:
    """A slope's type must reach the binary point: the positive branch is x shifted left by frac(slope)."""
    if t.frac < 0:
        raise IRError(f"{n.describe()}: {field} {t} has {t.frac} fractional bits; a slope type needs frac >= 0 "
                      "(give it more width or fewer integer bits)")


def _check_clip(g: Graph, n: Node, ins, out) -> None:
    _check_elementwise(g, n, ins, out)
    if n.lo is not None and n.hi is not None and not n.lo <= n.hi:
        raise IRError(f"{n.describe()}: lower bound {n.lo} above upper bound {n.hi}")


def _check_hard_sigmoid(g: Graph, n: Node, ins, out) -> None:
    _check_elementwise(g, n, ins, out)
    if not ins[0].is_float:
        t = n.alpha_type
        if ins[0].dtype.frac < 0:
            raise IRError(f"{n.describe()}: input type {ins[0].dtype} has no fractional bits to align beta with; "
                          "give the input a type with frac >= 0")
        if t is None:
            raise IRError(f"{n.describe()}: fixed-point HardSigmoid needs alpha_type for alpha_code and beta_code")
        _no_negative_frac(n, "alpha_type", t)
        for field in ("alpha_code", "beta_code"):
            v = getattr(n, field)
            if not isinstance(v, int) or not t.min_code <= v <= t.max_code:
                raise IRError(f"{n.describe()}: {field} {v!r} is not a code of {t}")


def _check_table(g: Graph, n: Node, ins, out) -> None:
    from .tables import FUNCTIONS  # below the IR; a function import keeps validate free of import cycles

    _check_elementwise(g, n, ins, out)
    if n.function not in FUNCTIONS:
        raise IRError(f"{n.describe()}: unknown function {n.function!r}; known: {', '.join(sorted(FUNCTIONS))}")
    if not ins[0].is_float:
        if n.table is None or n.table.ndim != 1 or len(n.table) < 1:
            raise IRError(f"{n.describe()}: a fixed-point Table needs its 1-D table of output codes (the "
                          "quantization pass builds it)")
        _codes_fit(n, "table", n.table, out.dtype)
        if n.index_shift < 0:
            raise IRError(f"{n.describe()}: index_shift {n.index_shift} is negative")


def _check_softmax(g: Graph, n: Node, ins, out) -> None:
    _check_elementwise(g, n, ins, out)
    if not ins[0].shape:
        raise IRError(f"{n.describe()}: softmax of a scalar")
    if not ins[0].is_float:
        for table, t in (("exp_table", n.exp_type), ("recip_table", n.recip_type)):
            a = getattr(n, table)
            if a is None or t is None or a.ndim != 1 or len(a) < 1:
                raise IRError(f"{n.describe()}: fixed-point Softmax needs {table} and its type (the quantization "
                              "pass builds them)")
            if t.signed:
                raise IRError(f"{n.describe()}: {table} type {t} must be unsigned (ufixed)")
            _codes_fit(n, table, a, t)
        if n.exp_shift < 0 or n.recip_shift < 0:
            raise IRError(f"{n.describe()}: table index shifts must be >= 0")


def _check_argmax(g: Graph, n: Node, ins, out) -> None:
    x = ins[0]
    if not x.shape or out.shape != x.shape[:-1] + (1,):
        raise _shape_err(n, "output shape (the input's, last axis 1)", x.shape[:-1] + (1,), out.shape)
    if not out.is_float:
        t = out.dtype
        if t.frac != 0 or t.max_code < x.shape[-1] - 1:
            raise IRError(f"{n.describe()}: output type {t} must hold the indices 0..{x.shape[-1] - 1} as "
                          f"integers (e.g. ufixed<{max(1, (x.shape[-1] - 1).bit_length())},"
                          f"{max(1, (x.shape[-1] - 1).bit_length())}>)")
    if x.is_float != out.is_float:
        raise IRError(f"{n.describe()}: input is {x.type_str()} but output is {out.type_str()}; an ArgMax of "
                      "fixed-point codes has an integer output, a float one a float index")


def _check_reshape(g: Graph, n: Node, ins, out) -> None:
    x = ins[0]
    if int(np.prod(x.shape)) != int(np.prod(out.shape)):
        raise _shape_err(n, "element count", int(np.prod(x.shape)), f"{int(np.prod(out.shape))} {out.shape}")
    if x.dtype != out.dtype:
        raise IRError(f"{n.describe()}: moves data only, so the output type must be the input's ({x.type_str()}), "
                      f"found {out.type_str()}")


def _check_transpose(g: Graph, n: Node, ins, out) -> None:
    x = ins[0]
    perm = tuple(n.perm)
    if sorted(perm) != list(range(len(x.shape))):
        raise IRError(f"{n.describe()}: perm {perm} is not a permutation of the {len(x.shape)} per-sample axes")
    want = tuple(x.shape[p] for p in perm)
    if out.shape != want:
        raise _shape_err(n, "output shape", want, out.shape)
    if x.dtype != out.dtype:
        raise IRError(f"{n.describe()}: moves data only, so the output type must be the input's ({x.type_str()}), "
                      f"found {out.type_str()}")


def _check_concat(g: Graph, n: Node, ins, out) -> None:
    a, b = ins
    if len(a.shape) != len(b.shape) or not 0 <= n.axis < len(a.shape):
        raise IRError(f"{n.describe()}: axis {n.axis} does not fit operands {a.shape} and {b.shape}")
    rest = [s for i, s in enumerate(a.shape) if i != n.axis], [s for i, s in enumerate(b.shape) if i != n.axis]
    if rest[0] != rest[1]:
        raise _shape_err(n, f"operand shapes off axis {n.axis}", a.shape, b.shape)
    want = tuple(a.shape[i] + b.shape[i] if i == n.axis else a.shape[i] for i in range(len(a.shape)))
    if out.shape != want:
        raise _shape_err(n, "output shape", want, out.shape)
    if len({t.is_float for t in (a, b, out)}) != 1:
        raise IRError(f"{n.describe()}: operands and result must all be fixed or all float")


_RULES = {"Conv": _check_conv, "Pool": _check_pool, "ScaleShift": _check_scale_shift, "LeakyReLU": _check_leaky_relu,
          "Clip": _check_clip, "HardSigmoid": _check_hard_sigmoid, "Table": _check_table, "Softmax": _check_softmax,
          "ArgMax": _check_argmax, "Reshape": _check_reshape, "Transpose": _check_transpose, "Concat": _check_concat}
