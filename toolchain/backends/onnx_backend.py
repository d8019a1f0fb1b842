"""IR -> ONNX: a model that ONNX Runtime runs and that reproduces the golden model bit for bit.

Fixed-point tensors become int64 code tensors and every IR op is lowered to the integer recipe of
:mod:`bitforge.toolchain.emulate` / :mod:`bitforge.toolchain.fixed`, op by op, so the codes ONNX Runtime
computes are the golden model's codes, not an approximation of them. Float tensors stay float32 (the
float KAN basis is evaluated in float64, as the golden model does) and match within a tolerance only.

Exactness rests on two facts:

* **Every int64 intermediate provably fits int64.** Each code tensor carries an interval (Python ints)
  derived from the types and the weights; every Add/Mul/MatMul checks its result interval (MatMul: the
  bound ``max|x| * sum|w|`` on any partial sum, whatever order the kernel sums in). A graph that needs
  more raises :class:`OnnxExportError` naming the node; the intervals also let overflow steps that can
  never fire be left out.
* **ONNX has no arithmetic right shift on signed integers** (``BitShift`` is unsigned only; ``Div``
  truncates toward zero). ``floor(q / 2**d)`` is written as ``(q - Mod(q, 2**d)) / 2**d``: ``Mod`` with
  ``fmod=0`` is the floor modulo (sign of the divisor), so the division is exact.

Model conventions (the CLI and verification rely on them): graph inputs keep their IR names (float32
``['batch', *shape]`` for float inputs, int64 codes for fixed ones); a fixed graph output ``y`` gives two
ONNX outputs, ``y_code`` (int64 codes) and ``y`` (float64, ``code * 2**-frac``); a float output ``y`` is
float32. Same IR -> byte-identical model (fixed node names, no timestamps).
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Optional, Union

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .. import fixed
from ..bspline import basis_table
from ..errors import BitforgeError
from ..version import bitforge_version
from ..fixed import FixedType, Overflow, Rounding
from ..ir import (
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
    validate,
)

__all__ = ["DEFAULT_OPSET", "OnnxExportError", "OnnxRunError", "to_onnx", "save_onnx", "make_session",
           "run_onnxruntime"]

#: Opset 17 has everything used here (Mod, Clip/Where on int64, ScatterElements, Unsqueeze with axes
#: input) and ONNX Runtime 1.32 runs all of it on the CPU provider; the tests run 13, 17 and 21.
DEFAULT_OPSET = 17
MIN_OPSET, MAX_OPSET = 13, 21

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

#: ``x * 2**frac`` is exact in float64 for every finite float32 ``x`` when frac is in this range
#: (no overflow past 2**1024, no loss below the float64 subnormal LSB 2**-1074).
QUANTIZE_FRAC_RANGE = (-925, 895)

META_TYPES = "bitforge.types"
META_INPUTS = "bitforge.inputs"
META_OUTPUTS = "bitforge.outputs"

ModelLike = Union[onnx.ModelProto, bytes, str, os.PathLike]


class OnnxExportError(IRError):
    """The graph has no exact int64 ONNX lowering (or breaks the model's naming conventions)."""


#: How the ONNX lowering asks for a type the precision pass sets: ``node.need(field, *UNTYPED)``.
UNTYPED = (OnnxExportError, "before exporting to ONNX")


class OnnxRunError(BitforgeError):
    """Inputs that the exported model cannot take (wrong name, dtype, shape, codes outside the type)."""


@dataclass(frozen=True)
class IntVal:
    """An int64 ONNX tensor of codes and an interval that provably holds every value it can take."""

    name: str
    lo: int
    hi: int

    @property
    def magnitude(self) -> int:
        return max(abs(self.lo), abs(self.hi))


# -- graph building -------------------------------------------------------------------------------------

class _Builder:
    """Collects nodes and initializers with deterministic names; checks int64 intervals as it goes."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._names: set[str] = set()
        self._count = 0
        self.scope = "graph"
        self.context = "graph"

    def enter(self, node: Node) -> None:
        self.scope, self.context, self._count = node.name, node.describe(), 0

    def fail(self, message: str) -> OnnxExportError:
        return OnnxExportError(f"{self.context}: {message}")

    def op(self, op_type: str, inputs: list[str], out: Optional[str] = None, **attrs) -> str:
        self._count += 1
        name = f"{self.scope}/{op_type}_{self._count}"
        out = out or name
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=name, **attrs))
        return out

    def array(self, hint: str, value: np.ndarray) -> str:
        name = f"{self.scope}/{hint}"
        if name in self._names:
            raise self.fail(f"initializer name {name!r} used twice")
        self._names.add(name)
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def _scalar(self, kind: str, value, dtype) -> str:
        name = f"const/{kind}/{value!r}"
        if name not in self._names:
            self._names.add(name)
            self.initializers.append(numpy_helper.from_array(np.array(value, dtype=dtype), name))
        return name

    def i64(self, value: int) -> str:
        return self._scalar("i64", int(value), np.int64)

    def f64(self, value: float) -> str:
        return self._scalar("f64", float(value), np.float64)

    # -- int64 arithmetic with interval checks ------------------------------------------------------
    def checked(self, name: str, lo: int, hi: int, what: str) -> IntVal:
        if lo < INT64_MIN or hi > INT64_MAX:
            raise self.fail(f"{what} can take values in [{lo}, {hi}], which do not fit int64; ONNX export needs "
                            "every intermediate inside int64 (narrow the types or the accumulator)")
        return IntVal(name, lo, hi)

    def add(self, a: IntVal, b: IntVal, what: str = "sum") -> IntVal:
        return self.checked(self.op("Add", [a.name, b.name]), a.lo + b.lo, a.hi + b.hi, what)

    def add_const(self, a: IntVal, k: int, what: str = "offset") -> IntVal:
        if k == 0:
            return a
        return self.checked(self.op("Add", [a.name, self.i64(k)]), a.lo + k, a.hi + k, what)

    def sub(self, a: IntVal, b: IntVal, what: str = "difference") -> IntVal:
        return self.checked(self.op("Sub", [a.name, b.name]), a.lo - b.hi, a.hi - b.lo, what)

    def mul_const(self, a: IntVal, k: int, what: str = "scaled value") -> IntVal:
        if k == 1:
            return a
        ends = (a.lo * k, a.hi * k)
        lo, hi = min(ends), max(ends)
        if hi > INT64_MAX or lo < INT64_MIN:
            raise self.fail(f"{what} can take values in [{lo}, {hi}], which do not fit int64; ONNX export needs "
                            "every intermediate inside int64 (narrow the types or the accumulator)")
        return IntVal(self.op("Mul", [a.name, self.i64(k)]), lo, hi)

    def mod(self, a: IntVal, p: int) -> IntVal:
        """Floor modulo (result in [0, p)), as Python's ``%`` and numpy's ``&`` for powers of two."""
        if 0 <= a.lo and a.hi < p:
            return a
        return IntVal(self.op("Mod", [a.name, self.i64(p)], fmod=0), 0, p - 1)

    def div_exact(self, a: IntVal, p: int) -> IntVal:
        """``a / p`` for ``a`` a multiple of ``p`` (ONNX Div truncates, which is exact here)."""
        return IntVal(self.op("Div", [a.name, self.i64(p)]), -((-a.lo) // p), a.hi // p)

    def div_floor_nonneg(self, a: IntVal, p: int) -> IntVal:
        """``floor(a / p)`` for ``a >= 0``, where truncating division is floor division."""
        assert a.lo >= 0
        if p == 1:
            return a
        return IntVal(self.op("Div", [a.name, self.i64(p)]), a.lo // p, a.hi // p)

    def clip(self, a: IntVal, lo: Optional[int], hi: Optional[int]) -> IntVal:
        """Clamp to [lo, hi] (``None``: no bound); sides the interval shows to be inactive are left out."""
        def clamp(v: int) -> int:
            v = v if lo is None else max(v, lo)
            return v if hi is None else min(v, hi)

        use_lo = lo is not None and a.lo < lo
        use_hi = hi is not None and a.hi > hi
        if not (use_lo or use_hi):
            return a
        bounds = [self.i64(lo) if use_lo else "", self.i64(hi) if use_hi else ""]
        return IntVal(self.op("Clip", [a.name, *bounds]), clamp(a.lo), clamp(a.hi))

    def where(self, cond: str, a: IntVal, b: IntVal) -> IntVal:
        return IntVal(self.op("Where", [cond, a.name, b.name]), min(a.lo, b.lo), max(a.hi, b.hi))

    def const_val(self, value: int) -> IntVal:
        return IntVal(self.i64(value), value, value)

    def bool_to_int(self, cond: str) -> IntVal:
        return IntVal(self.op("Cast", [cond], to=TensorProto.INT64), 0, 1)

    def is_odd(self, a: IntVal) -> str:
        return self.op("Equal", [self.mod(a, 2).name, self.i64(1)])


# -- fixed-point lowering: mirrors fixed.py exactly ---------------------------------------------------

def _round_up(b: _Builder, rounding: Rounding, rest: str, half: str, zero: str,
              negative: Callable[[], str], odd: Callable[[], str]) -> Optional[str]:
    """Bool tensor: add one LSB to the floor (the increment of ``fixed.shift_round`` / ``fixed.quantize``).

    ``rest`` is what the floor dropped (the float fraction in [0, 1) or the integer remainder in
    [0, 2**d)) and ``half`` its midpoint; ``negative`` / ``odd`` build the sign and floor-parity tests
    only for the modes that need them. ``None`` means never (TRN).
    """
    r = Rounding(rounding)
    if r == Rounding.TRN:
        return None
    if r == Rounding.TRN_ZERO:
        return b.op("And", [b.op("Not", [b.op("Equal", [rest, zero])]), negative()])
    if r == Rounding.RND:
        return b.op("GreaterOrEqual", [rest, half])
    above = b.op("Greater", [rest, half])
    if r == Rounding.RND_MIN_INF:
        return above
    tie = b.op("Equal", [rest, half])
    if r == Rounding.RND_ZERO:
        side = negative()
    elif r == Rounding.RND_INF:
        side = b.op("Not", [negative()])
    else:  # RND_CONV
        side = odd()
    return b.op("Or", [above, b.op("And", [tie, side])])


def _shift_round_int(v: int, d: int, rounding: Rounding) -> int:
    return int(fixed.shift_round(np.array([v], dtype=object), d, rounding)[0])


def _shift_round(b: _Builder, q: IntVal, d: int, rounding: Rounding) -> IntVal:
    """``fixed.shift_round(q, d, rounding)`` for d >= 1."""
    lo, hi = _shift_round_int(q.lo, d, rounding), _shift_round_int(q.hi, d, rounding)  # monotone in q
    if d > 62:
        if q.magnitude >= 1 << (d - 1):
            raise b.fail(f"right shift by {d} of values in [{q.lo}, {q.hi}] needs 2**{d}, beyond int64")
        # |q| < 2**(d-1): floor is 0 or -1 and the remainder lies below half (q > 0) or above it (q < 0),
        # exactly as for sign(q) shifted by 2, so every rounding mode gives the same code.
        q, d = b.clip(q, -1, 1), 2
    p = 1 << d
    rem = b.mod(q, p)
    floor = b.div_exact(b.sub(q, rem, "floor division"), p)
    inc = _round_up(b, rounding, rem.name, b.i64(p >> 1), b.i64(0),
                    negative=lambda: b.op("Less", [q.name, b.i64(0)]), odd=lambda: b.is_odd(floor))
    out = floor if inc is None else b.add(floor, b.bool_to_int(inc), "rounded value")
    return IntVal(out.name, lo, hi)


def _sat_bounds(t: FixedType) -> tuple[int, int]:
    return t.sat_min_code, t.max_code


def _overflow(b: _Builder, q: IntVal, t: FixedType) -> IntVal:
    """``fixed.apply_overflow(q, t)``; nothing is emitted when the interval shows it cannot fire."""
    lo, hi = _sat_bounds(t) if t.overflow != Overflow.WRAP else (t.min_code, t.max_code)
    if lo <= q.lo and q.hi <= hi:
        return q
    if t.overflow == Overflow.WRAP:
        if t.width > 62:
            raise b.fail(f"wrapping values in [{q.lo}, {q.hi}] to {t} needs 2**{t.width}, beyond int64")
        span = 1 << t.width
        r = b.mod(q, span)
        if t.signed and r.hi > hi:
            r = b.where(b.op("Greater", [r.name, b.i64(hi)]), b.add_const(r, -span), r)
        return IntVal(r.name, max(r.lo, lo), min(r.hi, hi))
    if t.overflow == Overflow.SAT_ZERO:
        tests = []
        if q.lo < lo:
            tests.append(b.op("Less", [q.name, b.i64(lo)]))
        if q.hi > hi:
            tests.append(b.op("Greater", [q.name, b.i64(hi)]))
        cond = tests[0] if len(tests) == 1 else b.op("Or", tests)
        kept_lo, kept_hi = max(q.lo, lo), min(q.hi, hi)
        out = b.where(cond, b.const_val(0), q)
        return IntVal(out.name, min(0, kept_lo), max(0, kept_hi))
    return b.clip(q, lo, hi)


def _shift_left(b: _Builder, q: IntVal, s: int, dst: FixedType) -> IntVal:
    """``q << s`` as far as ``dst``'s overflow can tell, staying inside int64.

    When ``q * 2**s`` itself would leave int64, the overflow mode lets us shrink ``q`` first without
    changing the final code: WRAP keeps only ``q mod 2**(W-s)``; the saturating modes only see whether
    ``q * 2**s`` lies below, inside or above the range, which clipping ``q`` one step past the range's
    preimage (and capping s at W+1, beyond which every non-zero q overflows) preserves.
    """
    if q.lo == q.hi == 0:
        return q
    if INT64_MIN <= q.lo << s and q.hi << s <= INT64_MAX:
        return b.mul_const(q, 1 << s, "left-shifted value")
    if dst.overflow == Overflow.WRAP:
        if s >= dst.width:
            return b.mul_const(q, 0)
        return b.mul_const(b.mod(q, 1 << (dst.width - s)), 1 << s, "left-shifted value")
    s = min(s, dst.width + 1)
    lo, hi = _sat_bounds(dst)
    q_lo, q_hi = -((-lo) >> s), hi >> s  # ceil(lo / 2**s), floor(hi / 2**s)
    return b.mul_const(b.clip(q, q_lo - 1, q_hi + 1), 1 << s, "left-shifted value")


def _requantize(b: _Builder, q: IntVal, src: FixedType, dst: FixedType) -> IntVal:
    """``fixed.requantize(q, src, dst)``."""
    d = src.frac - dst.frac
    if d > 0:
        q = _shift_round(b, q, d, dst.rounding)
    elif d < 0:
        q = _shift_left(b, q, -d, dst)
    return _overflow(b, q, dst)


def _quantize(b: _Builder, x: str, t: FixedType) -> IntVal:
    """``fixed.quantize(x, t)`` for a float32 tensor, exact for every finite float32 value.

    Before the float64 floor is cast to int64 it is brought into int64 range without changing the final
    code: WRAP reduces it modulo 2**W (fmod is exact and keeps the parity RND_CONV looks at); the
    saturating modes clip it to +-2**min(W+1, 62), still beyond the range after the rounding increment.
    """
    lo_f, hi_f = QUANTIZE_FRAC_RANGE
    if not lo_f <= t.frac <= hi_f:
        raise b.fail(f"quantizing to {t} scales by 2**{t.frac}; ONNX export supports frac in [{lo_f}, {hi_f}]")
    if t.width > 62:
        raise b.fail(f"quantizing to {t}: ONNX export supports types up to 62 bits")
    xd = b.op("Cast", [x], to=TensorProto.DOUBLE)
    v = b.op("Mul", [xd, b.f64(2.0 ** t.frac)]) if t.frac else xd
    floor = b.op("Floor", [v])
    rest = b.op("Sub", [v, floor])  # exact, in [0, 1)
    if t.overflow == Overflow.WRAP:
        span = 1 << t.width
        floor = b.op("Mod", [floor, b.f64(float(span))], fmod=1)
        q0 = IntVal(b.op("Cast", [floor], to=TensorProto.INT64), -(span - 1), span - 1)
    else:
        bound = 1 << min(t.width + 1, 62)
        floor = b.op("Min", [b.op("Max", [floor, b.f64(float(-bound))]), b.f64(float(bound))])
        q0 = IntVal(b.op("Cast", [floor], to=TensorProto.INT64), -bound, bound)
    inc = _round_up(b, t.rounding, rest, b.f64(0.5), b.f64(0.0),
                    negative=lambda: b.op("Less", [xd, b.f64(0.0)]), odd=lambda: b.is_odd(q0))
    q = q0 if inc is None else b.add(q0, b.bool_to_int(inc), "rounded value")
    return _overflow(b, q, t)


def _matmul_const(b: _Builder, x: IntVal, w: np.ndarray, hint: str) -> IntVal:
    """Exact ``x @ w.T`` for codes ``w`` of shape (out, in) with int64 MatMul (ONNX Runtime's CPU kernel).

    Any partial sum, in whatever order the kernel adds, is bounded by ``max|x| * sum_i |w_oi|``; that
    bound must fit int64. The interval is exact per output and then joined over outputs.
    """
    wo = np.asarray(w).astype(object)
    row_abs = np.abs(wo).sum(axis=1) if wo.size else np.zeros(wo.shape[0], dtype=object)
    bound = x.magnitude * (max(row_abs) if len(row_abs) else 0)
    if bound > INT64_MAX:
        raise b.fail(f"{hint}: partial sums can reach {bound} (|x| <= {x.magnitude}, max row sum |w| = "
                     f"{max(row_abs)}), beyond int64; ONNX export supports accumulators up to 63 bits")
    pos = np.where(wo > 0, wo, 0).sum(axis=1)
    neg = np.where(wo < 0, wo, 0).sum(axis=1)
    lo = x.lo * pos + x.hi * neg
    hi = x.hi * pos + x.lo * neg
    name = b.op("MatMul", [x.name, b.array(f"{hint}_t", np.asarray(w, dtype=np.int64).T)])
    return IntVal(name, int(min(lo, default=0)), int(max(hi, default=0)))


def _dense_stage(b: _Builder, x: IntVal, w: np.ndarray, bias: Optional[np.ndarray], bias_type: Optional[FixedType],
                 accum: FixedType, out: FixedType, hint: str) -> IntVal:
    """``emulate.dense_stage``: exact ``W x + b`` at the accumulator's frac, its overflow, requantize."""
    acc = _matmul_const(b, x, w, hint)
    if bias is not None:
        aligned = np.asarray(bias).astype(object) * (1 << (accum.frac - bias_type.frac))
        if aligned.size and max(abs(int(v)) for v in aligned) > INT64_MAX:
            raise b.fail(f"bias aligned to the accumulator {accum} does not fit int64")
        name = b.op("Add", [acc.name, b.array("bias_aligned", aligned.astype(np.int64))])
        acc = b.checked(name, acc.lo + int(min(aligned)), acc.hi + int(max(aligned)), "accumulator with bias")
    acc = _overflow(b, acc, accum)
    return _requantize(b, acc, accum, out)


def _kan_fixed(b: _Builder, n: KANLayer, x: IntVal, out: FixedType) -> IntVal:
    """``emulate.kan_fixed`` as one int64 MatMul over a dense basis.

    The k+1 active basis codes of every input are scattered into a zero (N, in, G+k) tensor at
    ``cell + m``, which is then multiplied by the coefficients laid out as (in*(G+k), out). The zeros add
    nothing, so the sum is the golden model's sum over inputs and active bases; the memory is
    N*in*(G+k) codes, where gathering coefficients per sample would need N*out*in*(k+1).
    """
    accum = n.need("accum_type", *UNTYPED)
    n_in, n_out, n_basis, k = n.in_features, n.out_features, n.n_basis, n.order
    s = b.mul_const(b.add_const(x, -n.index_lo, "index offset"), n.index_mult, "index product")
    if n.index_shift:
        s = _shift_round(b, s, n.index_shift, Rounding.TRN)
    s = b.clip(s, 0, (n.grid_size << n.u_bits) - 1)
    cell = b.div_floor_nonneg(s, 1 << n.u_bits)
    u = b.mod(s, 1 << n.u_bits)
    table = basis_table(k, n.u_bits, n.basis_type, n.basis_impl)  # (2**U, k+1)
    weights = b.op("Gather", [b.array("basis_table", table), u.name], axis=0)  # (N, in, k+1)
    cols = b.op("Add", [b.op("Unsqueeze", [cell.name, b.array("axis2", np.array([2], dtype=np.int64))]),
                        b.array("active", np.arange(k + 1, dtype=np.int64).reshape(1, 1, k + 1))])
    dense = _scatter_basis(b, x.name, cols, weights, n_basis, TensorProto.INT64)
    coeffs = np.asarray(n.coeffs, dtype=np.int64)
    c2 = coeffs.transpose(1, 2, 0).reshape(n_in * n_basis, n_out)
    row_bound = int(np.abs(table).sum(axis=1).max())
    per_out = np.abs(coeffs.astype(object)).max(axis=2).sum(axis=1) * row_bound if coeffs.size else [0]
    bound = int(max(per_out))
    if bound > INT64_MAX:
        raise b.fail(f"KAN accumulator can reach {bound}, beyond int64; ONNX export supports accumulators "
                     "up to 63 bits (narrow coeff_type or basis_type)")
    acc = IntVal(b.op("MatMul", [dense, b.array("coeffs_flat", c2)]), -bound, bound)
    acc = _overflow(b, acc, accum)
    return _requantize(b, acc, accum, out)


def _scatter_basis(b: _Builder, like: str, cols: str, weights: str, n_basis: int, elem: int) -> str:
    """(N, in, n_basis) zeros with ``weights[n, i, m]`` at column ``cols[n, i, m]``, flattened to (N, in*n_basis)."""
    shape = b.op("Concat", [b.op("Shape", [like]), b.array("n_basis", np.array([n_basis], dtype=np.int64))], axis=0)
    zero = numpy_helper.from_array(np.zeros(1, dtype=helper.tensor_dtype_to_np_dtype(elem)), "zero")
    zeros = b.op("ConstantOfShape", [shape], value=zero)
    dense = b.op("ScatterElements", [zeros, cols, weights], axis=2)
    return b.op("Reshape", [dense, b.array("flat_shape", np.array([0, -1], dtype=np.int64))])


def _lower_fixed(b: _Builder, g: Graph, n: Node, args: list) -> IntVal:
    ins = [g.tensors[t].dtype for t in n.inputs]
    out = g.tensors[n.output].dtype
    x = args[0]
    if isinstance(n, Quantize):
        return _quantize(b, x, out)
    if isinstance(n, Requantize):
        return _requantize(b, x, ins[0], out)
    if isinstance(n, ReLU):
        if x.lo < 0:
            x = IntVal(b.op("Max", [x.name, b.i64(0)]), max(x.lo, 0), max(x.hi, 0))
        return _requantize(b, x, ins[0], out)
    if isinstance(n, Add):
        st = fixed.add_type(ins[0], ins[1])
        a0 = b.mul_const(args[0], 1 << (st.frac - ins[0].frac), "aligned operand")
        a1 = b.mul_const(args[1], 1 << (st.frac - ins[1].frac), "aligned operand")
        return _requantize(b, b.add(a0, a1, "exact sum"), st, out)
    if isinstance(n, Dense):
        return _dense_stage(b, x, n.weight, n.bias, n.bias_type, n.need("accum_type", *UNTYPED), out, "weight")
    if isinstance(n, LowRankDense):
        h = _dense_stage(b, x, n.v, None, None, n.need("accum_v_type", *UNTYPED), n.mid_type, "v")
        return _dense_stage(b, h, n.u, n.bias, n.bias_type, n.need("accum_type", *UNTYPED), out, "u")
    if isinstance(n, KANLayer):
        return _kan_fixed(b, n, x, out)
    raise b.fail(f"no ONNX lowering for op {n.OP}")


# -- float lowering: mirrors emulate's float path ------------------------------------------------------

def _lower_float(b: _Builder, n: Node, args: list[str]) -> str:
    x = args[0]
    if isinstance(n, ReLU):
        return b.op("Relu", [x])
    if isinstance(n, Add):
        return b.op("Add", [args[0], args[1]])
    if isinstance(n, Dense):
        y = b.op("MatMul", [x, b.array("weight_t", np.asarray(n.weight, dtype=np.float32).T)])
        return _float_bias(b, y, n.bias)
    if isinstance(n, LowRankDense):
        h = b.op("MatMul", [x, b.array("v_t", np.asarray(n.v, dtype=np.float32).T)])
        y = b.op("MatMul", [h, b.array("u_t", np.asarray(n.u, dtype=np.float32).T)])
        return _float_bias(b, y, n.bias)
    if isinstance(n, KANLayer):
        return _kan_float(b, n, x)
    raise b.fail(f"op {n.OP} has no float lowering")


def _float_bias(b: _Builder, y: str, bias: Optional[np.ndarray]) -> str:
    return y if bias is None else b.op("Add", [y, b.array("bias", np.asarray(bias, dtype=np.float32))])


def _kan_float(b: _Builder, n: KANLayer, x: str) -> str:
    """``bspline_basis_float`` step for step in float64 (same clamp, cell, u and truncated-power sum)."""
    k, h = n.order, (n.grid_hi - n.grid_lo) / n.grid_size
    xd = b.op("Cast", [x], to=TensorProto.DOUBLE)
    s = b.op("Div", [b.op("Sub", [xd, b.f64(n.grid_lo)]), b.f64(h)])
    s = b.op("Min", [b.op("Max", [s, b.f64(0.0)]), b.f64(n.grid_size - 1e-9)])
    cell_f = b.op("Floor", [s])
    u = b.op("Sub", [s, cell_f])
    cell = b.op("Cast", [cell_f], to=TensorProto.INT64)
    shifted = b.op("Add", [u, b.f64(float(k))])
    columns = []
    for m in range(k + 1):
        t = b.op("Sub", [shifted, b.f64(float(m))])
        total = None
        for j in range(k + 2):
            power = b.op("Max", [b.op("Sub", [t, b.f64(float(j))]), b.f64(0.0)])
            if k > 1:
                power = b.op("Pow", [power, b.f64(float(k))])
            term = b.op("Mul", [power, b.f64(float((-1) ** j * math.comb(k + 1, j)))])
            total = term if total is None else b.op("Add", [total, term])
        total = b.op("Div", [total, b.f64(float(math.factorial(k)))])
        columns.append(b.op("Unsqueeze", [total, b.array(f"axis2_{m}", np.array([2], dtype=np.int64))]))
    weights = b.op("Concat", columns, axis=2)  # (N, in, k+1)
    cols = b.op("Add", [b.op("Unsqueeze", [cell, b.array("axis2", np.array([2], dtype=np.int64))]),
                        b.array("active", np.arange(k + 1, dtype=np.int64).reshape(1, 1, k + 1))])
    dense = _scatter_basis(b, x, cols, weights, n.n_basis, TensorProto.DOUBLE)
    c2 = np.asarray(n.coeffs, dtype=np.float64).transpose(1, 2, 0).reshape(n.in_features * n.n_basis, n.out_features)
    y = b.op("MatMul", [dense, b.array("coeffs_flat", c2)])
    return b.op("Cast", [y], to=TensorProto.FLOAT)


# -- the model -------------------------------------------------------------------------------------------

def _code_name(g: Graph, t: str) -> str:
    """ONNX name of a fixed tensor's codes: graph inputs keep their IR name, the rest get ``_code``."""
    return t if t in g.inputs else f"{t}_code"


def _check_names(g: Graph) -> None:
    taken: dict[str, str] = {}
    for t, spec in g.tensors.items():
        names = [t] if spec.is_float or t in g.inputs else [f"{t}_code"] + ([t] if t in g.outputs else [])
        for name in names:
            if name in taken and taken[name] != t:
                raise OnnxExportError(f"graph '{g.name}': ONNX tensor name {name!r} is needed by both tensor "
                                      f"'{taken[name]}' and tensor '{t}'; rename one of them")
            taken[name] = t
    for t in g.inputs:
        if t in g.outputs:
            raise OnnxExportError(f"graph '{g.name}': tensor '{t}' is both a graph input and a graph output; "
                                  "ONNX export needs outputs computed by nodes")


def _value_info(name: str, elem: int, shape: tuple[int, ...]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, ["batch", *shape])


def _doc(g: Graph) -> str:
    types = "; ".join(f"{t}: {spec.type_str()}" for t, spec in g.tensors.items())
    return (f"bitforge {bitforge_version()} ONNX export of graph '{g.name}' (fixed-point tensors are int64 codes, "
            f"value = code * 2^-frac). Tensor types: {types}")


def to_onnx(graph: Graph, opset: int = DEFAULT_OPSET) -> onnx.ModelProto:
    """Lower a validated IR graph to an ONNX model that reproduces ``emulate.run`` (codes bit for bit).

    Raises :class:`OnnxExportError` when an intermediate cannot be proven to fit int64, when an
    accumulator type is missing, or when the naming convention would give two tensors one name.
    """
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise OnnxExportError(f"opset {opset} is not supported; use {MIN_OPSET}..{MAX_OPSET} (default {DEFAULT_OPSET})")
    g = validate(graph)
    _check_names(g)
    b = _Builder()
    env: dict[str, Union[IntVal, str]] = {}
    inputs = []
    for t in g.inputs:
        spec = g.tensors[t]
        if spec.is_float:
            env[t] = t
            inputs.append(_value_info(t, TensorProto.FLOAT, spec.shape))
        else:
            env[t] = IntVal(t, spec.dtype.min_code, spec.dtype.max_code)
            inputs.append(_value_info(t, TensorProto.INT64, spec.shape))
    for n in g.nodes:
        b.enter(n)
        args = [env[t] for t in n.inputs]
        spec = g.tensors[n.output]
        if spec.is_float:
            env[n.output] = b.op("Identity", [_lower_float(b, n, args)], out=n.output)
        else:
            v = _lower_fixed(b, g, n, args)
            env[n.output] = IntVal(b.op("Identity", [v.name], out=_code_name(g, n.output)), v.lo, v.hi)
    outputs = []
    b.scope = b.context = "outputs"
    for t in g.outputs:
        spec = g.tensors[t]
        if spec.is_float:
            outputs.append(_value_info(t, TensorProto.FLOAT, spec.shape))
            continue
        frac = spec.dtype.frac
        if not -1022 <= frac <= 1074:
            raise OnnxExportError(f"graph output '{t}' of type {spec.dtype}: 2^-{frac} is not a float64 value")
        b.op("Mul", [b.op("Cast", [_code_name(g, t)], to=TensorProto.DOUBLE), b.f64(2.0 ** -frac)], out=t)
        outputs += [_value_info(_code_name(g, t), TensorProto.INT64, spec.shape),
                    _value_info(t, TensorProto.DOUBLE, spec.shape)]
    onnx_graph = helper.make_graph(b.nodes, g.name, inputs, outputs, initializer=b.initializers,
                                   doc_string=_doc(g))
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(onnx_graph, opset_imports=opsets, producer_name="bitforge",
                              producer_version=bitforge_version(), doc_string=_doc(g))
    model.ir_version = helper.find_min_ir_version_for(opsets)
    helper.set_model_props(model, {
        META_TYPES: json.dumps({t: s.type_str() for t, s in g.tensors.items()}),
        META_INPUTS: json.dumps({t: g.tensors[t].type_str() for t in g.inputs}),
        META_OUTPUTS: json.dumps({t: g.tensors[t].type_str() for t in g.outputs}),
    })
    onnx.checker.check_model(model, full_check=True)
    return model


def save_onnx(model: onnx.ModelProto, path: Union[str, os.PathLike]) -> Path:
    """Write the model atomically (a half-written file never carries the final name)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(model.SerializeToString())
    os.replace(tmp, path)
    return path


# -- running --------------------------------------------------------------------------------------------

def make_session(model_or_path: ModelLike, threads: Optional[int] = None):
    """An ONNX Runtime CPU session with deterministic settings (sequential, fixed thread count).

    Integer kernels give the same codes for any thread count; fixing it keeps float outputs
    reproducible between runs as well. Basic graph optimisation only: constant folding and redundant
    node removal, no float fusions.
    """
    import onnxruntime as ort

    if isinstance(model_or_path, ort.InferenceSession):
        return model_or_path
    if isinstance(model_or_path, onnx.ModelProto):
        source = model_or_path.SerializeToString()
    elif isinstance(model_or_path, (bytes, bytearray)):
        source = bytes(model_or_path)
    else:
        path = Path(model_or_path)
        if not path.is_file():
            raise OnnxRunError(f"{path}: no such ONNX file (make one with bitforge's to_onnx/save_onnx)")
        source = str(path)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads or max(1, min(os.cpu_count() or 1, 8))
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    opts.use_deterministic_compute = True
    opts.log_severity_level = 3
    return ort.InferenceSession(source, sess_options=opts, providers=["CPUExecutionProvider"])


def _declared_types(session) -> dict[str, Optional[FixedType]]:
    meta = session.get_modelmeta().custom_metadata_map
    if META_INPUTS not in meta:
        return {}
    return {t: (None if s == "float32" else fixed.parse_type(s)) for t, s in json.loads(meta[META_INPUTS]).items()}


def _feed(name: str, value, declared, onnx_input) -> np.ndarray:
    a = np.asarray(value)
    want_shape = tuple(onnx_input.shape[1:])
    if a.ndim != len(onnx_input.shape) or any(isinstance(d, int) and d != s for d, s in zip(want_shape, a.shape[1:])):
        raise OnnxRunError(f"input '{name}': expected shape (batch, {', '.join(map(str, want_shape))}), found {a.shape}")
    if onnx_input.type == "tensor(float)":
        if a.dtype.kind not in "fiu":
            raise OnnxRunError(f"input '{name}' is float32: give real numbers, found dtype {a.dtype}")
        a = a.astype(np.float32)
        if not np.all(np.isfinite(a)):
            raise OnnxRunError(f"input '{name}' holds NaN or Inf (or values beyond float32); they have no code")
        return a
    if a.dtype.kind not in "iu":
        raise OnnxRunError(f"input '{name}' takes int64 codes of {declared or 'its type'}, found dtype {a.dtype}")
    if declared is not None and a.size and (a.min() < declared.min_code or a.max() > declared.max_code):
        raise OnnxRunError(f"input '{name}': codes in [{a.min()}, {a.max()}] lie outside {declared} "
                           f"[{declared.min_code}, {declared.max_code}]")
    return a.astype(np.int64)


def run_onnxruntime(model_or_path: ModelLike, inputs: Union[np.ndarray, Mapping[str, np.ndarray]],
                    threads: Optional[int] = None) -> dict[str, np.ndarray]:
    """Run the whole batch in one session call; returns every model output by name.

    ``model_or_path`` may also be a session from :func:`make_session`, to run several batches without
    building it again. Float inputs are cast to float32 and must be finite; fixed inputs must be
    integer codes inside their declared type (as ``emulate.run`` demands).
    """
    session = make_session(model_or_path, threads)
    onnx_inputs = session.get_inputs()
    if not isinstance(inputs, Mapping):
        if len(onnx_inputs) != 1:
            raise OnnxRunError(f"the model has inputs {[i.name for i in onnx_inputs]}; pass a dict")
        inputs = {onnx_inputs[0].name: inputs}
    names = [i.name for i in onnx_inputs]
    unknown = sorted(set(inputs) - set(names))
    missing = [nm for nm in names if nm not in inputs]
    if unknown or missing:
        raise OnnxRunError(f"model inputs are {names}; missing {missing}, unknown {unknown}")
    declared = _declared_types(session)
    feeds = {i.name: _feed(i.name, inputs[i.name], declared.get(i.name), i) for i in onnx_inputs}
    out_names = [o.name for o in session.get_outputs()]
    return dict(zip(out_names, session.run(out_names, feeds)))
