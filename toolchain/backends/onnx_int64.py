"""Exact int64 arithmetic in ONNX, with a proof that nothing overflows.

The ONNX backend lowers fixed-point ops to int64 tensors of codes. Every tensor it builds is an
:class:`IntVal`: its ONNX name plus an interval (Python ints) that provably holds every value it can take,
derived from the types and the weights. :class:`Builder` emits nodes with deterministic names and checks
each Add/Mul/MatMul's result interval against int64, so a graph that would need more is refused with
:class:`OnnxExportError` naming the node, never silently wrapped; the intervals also let overflow steps
that can never fire be left out.

The functions below mirror :mod:`bitforge.toolchain.fixed` step for step (rounding, overflow, requantize,
quantize). ONNX has no arithmetic right shift on signed integers (``BitShift`` is unsigned only; ``Div``
truncates toward zero), so ``floor(q / 2**d)`` is written as ``(q - Mod(q, 2**d)) / 2**d``: ``Mod`` with
``fmod=0`` is the floor modulo (sign of the divisor), so the division is exact.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .. import fixed
from ..fixed import FixedType, Overflow, Rounding
from ..ir import IRError, Node

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

#: ``x * 2**frac`` is exact in float64 for every finite float32 ``x`` when frac is in this range
#: (no overflow past 2**1024, no loss below the float64 subnormal LSB 2**-1074).
QUANTIZE_FRAC_RANGE = (-925, 895)


class OnnxExportError(IRError):
    """The graph has no exact int64 ONNX lowering (or breaks the model's naming conventions)."""


#: How the ONNX lowering asks for a type the precision pass sets: ``node.need(field, *UNTYPED)``.
UNTYPED = (OnnxExportError, "before exporting to ONNX")


@dataclass(frozen=True)
class IntVal:
    """An int64 ONNX tensor of codes and an interval that provably holds every value it can take."""

    name: str
    lo: int
    hi: int

    @property
    def magnitude(self) -> int:
        return max(abs(self.lo), abs(self.hi))


def product_interval(a_lo: int, a_hi: int, b_lo: int, b_hi: int) -> tuple[int, int]:
    """The interval of ``a * b`` for ``a`` in [a_lo, a_hi] and ``b`` in [b_lo, b_hi] (its corners)."""
    corners = (a_lo * b_lo, a_lo * b_hi, a_hi * b_lo, a_hi * b_hi)
    return min(corners), max(corners)


# -- graph building -------------------------------------------------------------------------------------

class Builder:
    """Collects nodes and initializers with deterministic names; checks int64 intervals as it goes."""

    def __init__(self, opset: int) -> None:
        self.opset = opset
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

    def f32(self, value: float) -> str:
        return self._scalar("f32", float(np.float32(value)), np.float32)

    def i64s(self, values) -> str:
        """A 1-D int64 constant (shapes, permutations), shared by every node that needs the same values."""
        values = [int(v) for v in values]
        name = "const/i64s/" + ",".join(map(str, values))
        if name not in self._names:
            self._names.add(name)
            self.initializers.append(numpy_helper.from_array(np.array(values, dtype=np.int64), name))
        return name

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

    def mul(self, a: IntVal, b: IntVal, what: str = "product") -> IntVal:
        """Element-wise product of two code tensors (broadcasting as ONNX does)."""
        return self.checked(self.op("Mul", [a.name, b.name]), *product_interval(a.lo, a.hi, b.lo, b.hi), what)

    def mul_array(self, a: IntVal, hint: str, k: np.ndarray, what: str = "scaled value") -> IntVal:
        """``a`` times the int64 constant ``k`` (shaped by the caller to broadcast: per channel, per position)."""
        k = np.asarray(k).astype(object)
        lo, hi = product_interval(a.lo, a.hi, int(k.min()), int(k.max()))
        return self.checked(self.op("Mul", [a.name, self.array(hint, k.astype(np.int64))]), lo, hi, what)

    def reduce(self, op_type: str, x: str, axis: int, keepdims: bool) -> str:
        """ReduceMax/ReduceSum/... over one axis: the axes moved from an attribute to an input in opset 18
        (ReduceSum: 13), so the node depends on the model's opset."""
        input_since = 13 if op_type == "ReduceSum" else 18
        if self.opset >= input_since:
            return self.op(op_type, [x, self.i64s([axis])], keepdims=int(keepdims))
        return self.op(op_type, [x], axes=[axis], keepdims=int(keepdims))

    def where(self, cond: str, a: IntVal, b: IntVal) -> IntVal:
        return IntVal(self.op("Where", [cond, a.name, b.name]), min(a.lo, b.lo), max(a.hi, b.hi))

    def const_val(self, value: int) -> IntVal:
        return IntVal(self.i64(value), value, value)

    def bool_to_int(self, cond: str) -> IntVal:
        return IntVal(self.op("Cast", [cond], to=TensorProto.INT64), 0, 1)

    def is_odd(self, a: IntVal) -> str:
        return self.op("Equal", [self.mod(a, 2).name, self.i64(1)])


# -- fixed-point lowering: mirrors fixed.py exactly ---------------------------------------------------

def round_up(b: Builder, rounding: Rounding, rest: str, half: str, zero: str,
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


def shift_round_int(v: int, d: int, rounding: Rounding) -> int:
    return int(fixed.shift_round(np.array([v], dtype=object), d, rounding)[0])


def shift_round(b: Builder, q: IntVal, d: int, rounding: Rounding) -> IntVal:
    """``fixed.shift_round(q, d, rounding)`` for d >= 1."""
    lo, hi = shift_round_int(q.lo, d, rounding), shift_round_int(q.hi, d, rounding)  # monotone in q
    if d > 62:
        if q.magnitude >= 1 << (d - 1):
            raise b.fail(f"right shift by {d} of values in [{q.lo}, {q.hi}] needs 2**{d}, beyond int64")
        # |q| < 2**(d-1): floor is 0 or -1 and the remainder lies below half (q > 0) or above it (q < 0),
        # exactly as for sign(q) shifted by 2, so every rounding mode gives the same code.
        q, d = b.clip(q, -1, 1), 2
    p = 1 << d
    rem = b.mod(q, p)
    floor = b.div_exact(b.sub(q, rem, "floor division"), p)
    inc = round_up(b, rounding, rem.name, b.i64(p >> 1), b.i64(0),
                   negative=lambda: b.op("Less", [q.name, b.i64(0)]), odd=lambda: b.is_odd(floor))
    out = floor if inc is None else b.add(floor, b.bool_to_int(inc), "rounded value")
    return IntVal(out.name, lo, hi)


def sat_bounds(t: FixedType) -> tuple[int, int]:
    return t.sat_min_code, t.max_code


def overflow(b: Builder, q: IntVal, t: FixedType) -> IntVal:
    """``fixed.apply_overflow(q, t)``; nothing is emitted when the interval shows it cannot fire."""
    lo, hi = sat_bounds(t) if t.overflow != Overflow.WRAP else (t.min_code, t.max_code)
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


def shift_left(b: Builder, q: IntVal, s: int, dst: FixedType) -> IntVal:
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
    lo, hi = sat_bounds(dst)
    q_lo, q_hi = -((-lo) >> s), hi >> s  # ceil(lo / 2**s), floor(hi / 2**s)
    return b.mul_const(b.clip(q, q_lo - 1, q_hi + 1), 1 << s, "left-shifted value")


def requantize(b: Builder, q: IntVal, src: FixedType, dst: FixedType) -> IntVal:
    """``fixed.requantize(q, src, dst)``."""
    return requantize_exact(b, q, src.frac, dst)


def requantize_exact(b: Builder, q: IntVal, frac: int, dst: FixedType) -> IntVal:
    """``emulate.requantize_exact``: codes at ``frac`` (exact, of no declared width) -> codes of ``dst``. The
    source type's width never matters to the arithmetic, only its binary point."""
    d = frac - dst.frac
    if d > 0:
        q = shift_round(b, q, d, dst.rounding)
    elif d < 0:
        q = shift_left(b, q, -d, dst)
    return overflow(b, q, dst)


def quantize(b: Builder, x: str, t: FixedType) -> IntVal:
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
    inc = round_up(b, t.rounding, rest, b.f64(0.5), b.f64(0.0),
                   negative=lambda: b.op("Less", [xd, b.f64(0.0)]), odd=lambda: b.is_odd(q0))
    q = q0 if inc is None else b.add(q0, b.bool_to_int(inc), "rounded value")
    return overflow(b, q, t)


def matmul_interval(b: Builder, x: IntVal, w: np.ndarray, hint: str) -> tuple[int, int]:
    """The interval of ``x @ w.T`` for codes ``w`` of shape (out, in), refusing what int64 cannot hold.

    Any partial sum, in whatever order a kernel adds, is bounded by ``max|x| * sum_i |w_oi|``; that
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
    return int(min(lo, default=0)), int(max(hi, default=0))


def matmul_const(b: Builder, x: IntVal, w: np.ndarray, hint: str) -> IntVal:
    """Exact ``x @ w.T`` for codes ``w`` of shape (out, in) with int64 MatMul (ONNX Runtime's CPU kernel)."""
    lo, hi = matmul_interval(b, x, w, hint)
    name = b.op("MatMul", [x.name, b.array(f"{hint}_t", np.asarray(w, dtype=np.int64).T)])
    return IntVal(name, lo, hi)


#: Inputs a layer may have when a saturating accumulator must add them one by one (an Add and an overflow op
#: per input); beyond it the graph grows past what is reasonable to build and run.
MAX_SEQUENTIAL_INPUTS = 512


def accumulate_products(b: Builder, x: IntVal, w: np.ndarray, n_in: int, shift: int,
                        bias: Optional[np.ndarray], accum: FixedType, in_order: bool, hint: str) -> IntVal:
    """hls4ml's accumulation (``accumulate.dense_accumulator``) where it is not one matrix product.

    ``x`` holds codes shaped ``(..., 1, in)`` and ``w`` int64 weights that broadcast against it to
    ``(..., out, in)`` (the products' tensor); ``bias`` is already converted to the accumulator (its codes,
    shaped to broadcast against ``(..., out)``), or None. Every product is rounded to the accumulator's LSB as
    ``fixed.shift_round`` does (``shift`` = frac(x) + frac(W) - frac(accum); a negative one is an exact left
    shift). Then either the products are summed (``ReduceSum``) and the accumulator's overflow applied once
    (WRAP is modular, and a caller passes ``in_order=False`` for a saturating mode only when nothing can
    saturate), or, ``in_order``, each is brought into range and added to the bias in input order, one Add and
    one overflow per input. ONNX Runtime holds the whole products' tensor (batch x outputs x inputs int64, a Conv's
    per window position too): the price of an accumulator narrower than its products, which the matrix-product
    path of an exact one does not pay.
    """
    w = np.asarray(w, dtype=np.int64)
    products = b.mul_array(x, f"{hint}_products", w, "products")
    if shift > 0:
        products = shift_round(b, products, shift, accum.rounding)
    elif shift < 0:
        products = shift_left(b, products, -shift, accum)
    acc: Optional[IntVal] = None
    if bias is not None:
        bias = np.asarray(bias).astype(object)
        acc = IntVal(b.array(f"{hint}_bias_converted", bias.astype(np.int64)), int(bias.min()), int(bias.max()))
    if in_order:
        if n_in > MAX_SEQUENTIAL_INPUTS:
            raise b.fail(f"the accumulator {accum} may saturate a partial sum, so its {n_in} inputs must be added one "
                         f"by one (an Add and a {accum.overflow.value} per input); the ONNX backend does that for up "
                         f"to {MAX_SEQUENTIAL_INPUTS} inputs. Give the layer a WRAP accumulator (or one wide enough "
                         "never to saturate), or compile it --to hls")
        products = overflow(b, products, accum)
        for i in range(n_in):
            p = IntVal(b.op("Gather", [products.name, b.i64(i)], axis=-1), products.lo, products.hi)
            acc = p if acc is None else overflow(b, b.add(acc, p, "partial sum"), accum)
        return acc
    if accum.overflow == Overflow.WRAP and n_in * products.magnitude > INT64_MAX:
        products = overflow(b, products, accum)  # modular: wrapping each product first changes no result
    total = b.checked(b.reduce("ReduceSum", products.name, -1, keepdims=False), n_in * min(products.lo, 0),
                      n_in * max(products.hi, 0), "sum of rounded products")
    if acc is not None:
        total = b.add(total, acc, "accumulator with bias")
    return overflow(b, total, accum)
