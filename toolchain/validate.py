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
    """Shared rules of a fixed-point ``W x + b`` stage (Dense and both halves of LowRankDense)."""
    if w_type is None:
        raise IRError(f"{n.describe()}: {label} weights are float but the input is fixed point; give a weight type")
    _codes_fit(n, f"{label} weight".strip(), w, w_type)
    if bias is not None:
        if bias_type is None:
            raise IRError(f"{n.describe()}: bias has no type")
        _codes_fit(n, "bias", bias, bias_type)
    if accum is not None:
        want = x.frac + w_type.frac
        if accum.frac != want:
            raise IRError(f"{n.describe()}: {label} accumulator {accum} has {accum.frac} fractional bits; "
                          f"exact products need frac(x) + frac(W) = {want}")
        if bias is not None and bias_type.frac > accum.frac:
            raise IRError(f"{n.describe()}: bias type {bias_type} is finer than the accumulator {accum}")


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
    raise IRError(f"{n.describe()}: unknown op")
