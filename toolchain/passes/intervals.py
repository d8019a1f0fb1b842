"""Interval analysis: sound per-element bounds of every tensor and every rounding point of a graph.

A fixed-point tensor's bounds are exact integer codes (Python ints in object arrays, so no width can
overflow them); the golden model's ops are all monotone up to the overflow step, so rounding the two
endpoints with the destination's own rounding mode gives the exact image of an interval, and the overflow
step is handled per mode (WRAP can split an interval, so it falls back to the whole range unless the
wrapped interval stays contiguous). A float tensor's bounds are float64 values widened outward by the
worst-case float32 rounding error of the op (Higham's gamma_n bound), so they contain both the exact real
result and what the float32 golden model computes.

Each node is seen as a chain of :class:`Stage` s, one per point where values are cast into a type:
the accumulator(s), LowRankDense's intermediate, and the output. A stage records the exact values before
the cast, the type, the values after it and whether the type's overflow mode can be triggered; the
precision pass sizes accumulators from these, and ``check_precision`` reports the stages that overflow.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Mapping, Optional, Sequence, Union

import numpy as np

from .. import fixed
from ..bspline import basis_table, cell_and_u
from ..emulate import exact_matmul
from ..fixed import FixedType, Overflow, signed_bits
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
)

__all__ = ["Bounds", "Stage", "Analysis", "IntervalError", "InputRange", "analyze", "input_bounds",
           "node_stages", "signed_bits", "round_to_code"]

#: Largest finite float32: the golden model casts float inputs to float32, so nothing finite lies beyond.
FLOAT32_MAX = float(np.finfo(np.float32).max)
#: float32 unit roundoff 2**-24, doubled so the float64 arithmetic of the bounds themselves is covered too.
F32_REL = 2.0 ** -23
#: Absolute error one float32 rounding can make in the subnormal range (spacing 2**-149), with slack.
F32_ABS = 2.0 ** -140

#: ``[lo, hi]`` for every graph input (scalars or per-feature lists), or ``{input name: [lo, hi]}``.
InputRange = Union[Sequence, Mapping[str, Sequence]]


class IntervalError(IRError):
    """An input range that cannot be used, or a node the analysis cannot bound; names what and where."""


# -- bounds ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Bounds:
    """Element-wise ``lo <= value <= hi`` over a tensor's per-sample shape.

    ``frac`` set: ``lo``/``hi`` are exact integer codes (object arrays of Python ints) of values
    ``code * 2**-frac``. ``frac`` None: ``lo``/``hi`` are float64 real values (a float tensor).
    """

    lo: np.ndarray
    hi: np.ndarray
    frac: Optional[int]

    @property
    def is_float(self) -> bool:
        return self.frac is None

    def real(self) -> tuple[np.ndarray, np.ndarray]:
        """The bounds as float64 values (rounded to nearest: for reports, not for proofs)."""
        if self.frac is None:
            return self.lo, self.hi
        return _codes_as_float(self.lo, self.frac), _codes_as_float(self.hi, self.frac)

    def span(self) -> tuple[float, float]:
        """Smallest lower and largest upper bound over all elements, as floats."""
        lo, hi = self.real()
        return float(np.min(lo)), float(np.max(hi))

    def exact_span(self) -> tuple[Fraction, Fraction]:
        """Smallest lower and largest upper bound over all elements, exactly (finite bounds only)."""
        if self.frac is None:
            lo, hi = self.span()
            if not (math.isfinite(lo) and math.isfinite(hi)):
                raise IntervalError(f"bounds [{lo}, {hi}] are not finite (no input range declared?)")
            return Fraction(lo), Fraction(hi)
        scale = Fraction(2) ** self.frac
        return Fraction(int(min(self.lo.ravel()))) / scale, Fraction(int(max(self.hi.ravel()))) / scale

    def contains(self, values: np.ndarray) -> np.ndarray:
        """Which samples of a batch ``(N, *shape)`` lie inside the bounds (codes for fixed, floats for float)."""
        v = np.asarray(values)
        if self.frac is None:
            inside = (v >= self.lo) & (v <= self.hi)
        else:
            v = v.astype(object)
            inside = (v >= self.lo) & (v <= self.hi)
        return np.asarray(inside, dtype=bool).reshape(len(v), -1).all(axis=1)


def _codes_as_float(codes: np.ndarray, frac: int) -> np.ndarray:
    flat = [math.ldexp(float(int(c)), -frac) for c in codes.ravel()]
    return np.array(flat, dtype=np.float64).reshape(codes.shape)


def _objects(a) -> np.ndarray:
    """Integer array -> object array of Python ints (exact for any later arithmetic)."""
    a = np.asarray(a)
    out = np.empty(a.shape, dtype=object)
    out.ravel()[:] = [int(v) for v in a.ravel()]
    return out


def _compact(a: np.ndarray) -> np.ndarray:
    """Object codes -> int64 when they fit in 62 bits, so :func:`exact_matmul` can take its fast path."""
    if a.size == 0 or max(abs(int(v)) for v in a.ravel()) < 2 ** 62:
        return np.asarray(a).astype(np.int64)
    return a


# -- casting an interval into a type ------------------------------------------------------------------

def _round_codes(codes: np.ndarray, src_frac: int, t: FixedType) -> np.ndarray:
    """Exact codes at ``src_frac`` -> unbounded codes at ``t.frac`` with ``t``'s rounding (monotone)."""
    return fixed.shift_round(codes, src_frac - t.frac, t.rounding) if codes.size else codes


def round_to_code(v: Union[float, Fraction], t: FixedType) -> int:
    """A dyadic value (any binary float, or a Fraction with a power-of-two denominator) -> its code of
    ``t`` with ``t``'s rounding and no overflow step, exactly as ``fixed.quantize`` rounds."""
    scaled = Fraction(v) * (Fraction(2) ** t.frac)
    den = scaled.denominator
    if den & (den - 1):
        raise ValueError(f"{v!r} is not a dyadic rational; only binary floats and fixed-point values round exactly")
    shift = den.bit_length() - 1
    q = np.array([scaled.numerator], dtype=object)
    return int(fixed.shift_round(q, shift, t.rounding)[0])


def _overflow_one(lo: int, hi: int, t: FixedType) -> tuple[int, int, bool]:
    """Image of the integer interval [lo, hi] under ``t``'s overflow mode, and whether the mode is triggered."""
    mn, mx = t.sat_min_code, t.max_code
    o = t.overflow
    if mn <= lo and hi <= mx:
        return lo, hi, False
    if o in (Overflow.SAT, Overflow.SAT_SYM):
        return min(max(lo, mn), mx), min(max(hi, mn), mx), True
    if o == Overflow.SAT_ZERO:
        a, b = max(lo, mn), min(hi, mx)
        return (min(a, 0), max(b, 0), True) if a <= b else (0, 0, True)
    span = 1 << t.width
    wl, wh = lo % span, hi % span
    if t.signed:
        wl, wh = (wl - span if wl > mx else wl), (wh - span if wh > mx else wh)
    if hi - lo < span and wh - wl == hi - lo:
        return wl, wh, True  # the interval wrapped as a whole and stayed contiguous
    return t.min_code, t.max_code, True


def _overflow(lo: np.ndarray, hi: np.ndarray, t: FixedType) -> tuple[np.ndarray, np.ndarray, bool]:
    out_lo, out_hi = np.empty(lo.shape, dtype=object), np.empty(hi.shape, dtype=object)
    hit = False
    seen: dict[tuple[int, int], tuple[int, int, bool]] = {}  # features often share their bounds, too
    for idx in np.ndindex(lo.shape):
        key = int(lo[idx]), int(hi[idx])
        if key not in seen:
            seen[key] = _overflow_one(*key, t)
        out_lo[idx], out_hi[idx], h = seen[key]
        hit |= h
    return out_lo, out_hi, hit


# -- stages -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Stage:
    """One point where a node casts values into a type.

    ``where`` is ``'accumulator'``, ``'intermediate'`` (LowRankDense's ``V x`` after its accumulator) or
    ``'output'``. ``dtype`` None means the cast is not typed yet (an accumulator the precision pass has not
    sized, or an output a quantizer has not typed): values pass through exactly. ``overflow`` is True when
    some value in ``exact`` falls outside ``dtype``'s range after rounding, i.e. saturation or wrap can occur.
    """

    node: str
    tensor: str
    where: str
    dtype: Optional[FixedType]
    exact: Bounds
    result: Bounds
    overflow: bool


def _cast_stage(node: str, tensor: str, where: str, exact: Bounds, t: Optional[FixedType]) -> Stage:
    if t is None:
        return Stage(node, tensor, where, None, exact, exact, False)
    if exact.is_float:
        code: dict[float, int] = {}  # one exact rounding per distinct bound: features often share their range

        def rounded(v: float) -> int:
            if v not in code:
                code[v] = _float_bound_code(v, t)
            return code[v]

        lo = _objects([rounded(float(v)) for v in exact.lo.ravel()]).reshape(exact.lo.shape)
        hi = _objects([rounded(float(v)) for v in exact.hi.ravel()]).reshape(exact.hi.shape)
    else:
        lo, hi = _round_codes(exact.lo, exact.frac, t), _round_codes(exact.hi, exact.frac, t)
    lo, hi, hit = _overflow(lo, hi, t)
    return Stage(node, tensor, where, t, exact, Bounds(lo, hi, t.frac), hit)


def _float_bound_code(v: float, t: FixedType) -> int:
    """Code of a float bound. An infinite one (an input with no declared range) stands for the end of
    the quantizer's own range: such an input is assumed to lie in it, so it is neither clipped nor reported."""
    if math.isinf(v):
        if v > 0:
            return t.max_code
        return t.sat_min_code
    return round_to_code(v, t)


def _accumulator_stage(n: Node, tensor: str, exact: Bounds, t: Optional[FixedType]) -> Stage:
    """The golden model applies only the accumulator's overflow (its frac equals the exact sum's)."""
    if t is None:
        return Stage(n.name, tensor, "accumulator", None, exact, exact, False)
    if t.frac != exact.frac:
        raise IntervalError(f"{n.describe()}: accumulator {t} has {t.frac} fractional bits; the exact sum has "
                            f"{exact.frac} (frac(x) + frac(W)); fix the type or rerun infer_precision")
    lo, hi, hit = _overflow(exact.lo, exact.hi, t)
    return Stage(n.name, tensor, "accumulator", t, exact, Bounds(lo, hi, t.frac), hit)


# -- per-op exact bounds (fixed point) --------------------------------------------------------------

def box_matmul(xl: np.ndarray, xh: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact range of ``x @ w.T`` over the box ``xl <= x <= xh`` (``(rows, in)`` codes, ``w`` ``(out, in)``): each
    product takes its extreme at an endpoint of x_i, so the bounds are attained when the x_i are independent."""
    xl, xh = _compact(xl), _compact(xh)
    w = np.asarray(w, dtype=np.int64)
    wpos, wneg = np.maximum(w, 0), np.minimum(w, 0)
    hi = _objects(exact_matmul(xh, wpos)) + _objects(exact_matmul(xl, wneg))
    lo = _objects(exact_matmul(xl, wpos)) + _objects(exact_matmul(xh, wneg))
    return lo, hi


def aligned_codes(n: Node, codes: np.ndarray, t: Optional[FixedType], frac: int, what: str) -> np.ndarray:
    """A bias or shift (codes of ``t``) as exact codes at the accumulator's ``frac``, as the golden model aligns it."""
    if t is None:
        raise IntervalError(f"{n.describe()}: fixed-point {what} has no {what}_type")
    if t.frac > frac:
        raise IntervalError(f"{n.describe()}: {what} type {t} is finer than the accumulator's {frac} fractional bits")
    return _objects(codes) * (1 << (frac - t.frac))


def _dense_exact(n: Node, x: Bounds, w: np.ndarray, bias: Optional[np.ndarray], bias_type: Optional[FixedType],
                 w_type: FixedType) -> Bounds:
    """Exact range of ``W x + b`` on codes (see :func:`box_matmul`)."""
    frac = x.frac + w_type.frac
    n_in = w.shape[1]
    lo, hi = box_matmul(x.lo.reshape(-1, n_in), x.hi.reshape(-1, n_in), w)
    if bias is not None:
        b = aligned_codes(n, bias, bias_type, frac, "bias")
        lo, hi = lo + b, hi + b
    shape = x.lo.shape[:-1] + (w.shape[0],)
    return Bounds(lo.reshape(shape), hi.reshape(shape), frac)


def _kan_exact(n: KANLayer, x: Bounds) -> Bounds:
    """Per edge, phi = sum_m c[cell + m] b_m(u) over the cells the input interval reaches.

    Each table row sums to exactly ``one`` and every weight is >= 0 (``bspline.basis_table`` guarantees
    both), so phi is a convex combination of the active coefficients: one * [min c, max c] over the
    reachable ones.
    """
    k = n.order
    table = basis_table(k, n.u_bits, n.basis_type, n.basis_impl)
    one = 1 << n.basis_type.frac
    assert table.min() >= 0, "basis_table must be non-negative for the convex bound"
    c_lo, _ = cell_and_u(_compact(x.lo).astype(np.int64), n.grid_size, n.u_bits, n.index_lo, n.index_mult,
                         n.index_shift)
    c_hi, _ = cell_and_u(_compact(x.hi).astype(np.int64), n.grid_size, n.u_bits, n.index_lo, n.index_mult,
                         n.index_shift)
    coeffs = np.asarray(n.coeffs, dtype=np.int64)
    n_out, n_in = coeffs.shape[:2]
    lo, hi = _objects(np.zeros(n_out, dtype=np.int64)), _objects(np.zeros(n_out, dtype=np.int64))
    for i in range(n_in):
        window = coeffs[:, i, int(c_lo[i]):int(c_hi[i]) + k + 1]
        cmin, cmax = _objects(window.min(axis=1)), _objects(window.max(axis=1))
        lo += cmin * one
        hi += cmax * one
    return Bounds(lo, hi, n.coeff_type.frac + n.basis_type.frac)


# -- per-op bounds (float) ----------------------------------------------------------------------------

def _finite(a: np.ndarray) -> np.ndarray:
    return np.clip(np.asarray(a, dtype=np.float64), -FLOAT32_MAX, FLOAT32_MAX)


def _dense_float(x: Bounds, w: np.ndarray, bias: Optional[np.ndarray]) -> Bounds:
    """Real range of ``W x + b`` widened by float32's summation error bound gamma_(n+1) * sum |x_i W_oi| + |b|."""
    w = np.asarray(w, dtype=np.float32).astype(np.float64)  # the golden model multiplies float32 weights
    n_in = w.shape[1]
    xl, xh = _finite(x.lo).reshape(-1, n_in), _finite(x.hi).reshape(-1, n_in)
    wpos, wneg = np.maximum(w, 0), np.minimum(w, 0)
    hi = xh @ wpos.T + xl @ wneg.T
    lo = xl @ wpos.T + xh @ wneg.T
    mag = np.maximum(np.abs(xl), np.abs(xh)) @ np.abs(w).T
    if bias is not None:
        b = np.asarray(bias, dtype=np.float32).astype(np.float64)
        lo, hi, mag = lo + b, hi + b, mag + np.abs(b)
    err = (n_in + 2) * (F32_REL * mag + F32_ABS)
    shape = x.lo.shape[:-1] + (w.shape[0],)
    return Bounds((lo - err).reshape(shape), (hi + err).reshape(shape), None)


def _kan_float(n: KANLayer, x: Bounds) -> Bounds:
    """Convex-combination bound on the float Cox-de Boor basis; one extra cell each side absorbs float
    error in locating the cell, and a relative margin absorbs the basis' rounding and the float32 cast."""
    k, g = n.order, n.grid_size
    h = (n.grid_hi - n.grid_lo) / g
    coeffs = np.asarray(n.coeffs, dtype=np.float64)
    cell = lambda v: np.clip(np.floor((_finite(v) - n.grid_lo) / h), 0, g - 1).astype(np.int64)  # noqa: E731
    c_lo, c_hi = np.maximum(cell(x.lo) - 1, 0), np.minimum(cell(x.hi) + 1, g - 1)
    lo, hi, mag = (np.zeros(coeffs.shape[0]) for _ in range(3))
    for i in range(coeffs.shape[1]):
        window = coeffs[:, i, c_lo[i]:c_hi[i] + k + 1]
        lo, hi = lo + window.min(axis=1), hi + window.max(axis=1)
        mag = mag + np.abs(window).max(axis=1)
    err = 2.0 ** -20 * (k + 2) * mag + F32_ABS
    return Bounds(lo - err, hi + err, None)


def _add_float(a: Bounds, b: Bounds) -> Bounds:
    lo, hi = _finite(a.lo) + _finite(b.lo), _finite(a.hi) + _finite(b.hi)
    err = F32_REL * np.maximum(np.abs(lo), np.abs(hi)) + F32_ABS
    return Bounds(lo - err, hi + err, None)


# -- nodes --------------------------------------------------------------------------------------------

def node_stages(g: Graph, n: Node, env: Mapping[str, Bounds]) -> list[Stage]:
    """Bounds of every cast inside ``n`` given its inputs' bounds; the last stage is the output.

    An output tensor that is still float after a fixed-point input, or a LowRankDense ``mid_type`` of
    None, counts as untyped: its stage passes the exact values through, which is what a quantizer needs
    to choose the type (a graph in that state does not pass validation).
    """
    xs = [env[t] for t in n.inputs]
    x = xs[0]
    out_t = g.tensors[n.output].dtype
    out = lambda exact: _cast_stage(n.name, n.output, "output", exact, out_t)  # noqa: E731
    if isinstance(n, Quantize):
        if not x.is_float:
            raise IntervalError(f"{n.describe()}: input '{n.input}' is already fixed point")
        return [out(x)]
    if x.is_float:
        return [_float_stage(g, n, xs)]
    if isinstance(n, Requantize):
        return [out(x)]
    if isinstance(n, ReLU):
        zero = lambda a: np.where(a > 0, a, 0).astype(object)  # noqa: E731
        return [out(Bounds(zero(x.lo), zero(x.hi), x.frac))]
    if isinstance(n, Add):
        a, b = xs
        frac = max(a.frac, b.frac)
        up = lambda c, f: c * (1 << (frac - f))  # noqa: E731
        return [out(Bounds(up(a.lo, a.frac) + up(b.lo, b.frac), up(a.hi, a.frac) + up(b.hi, b.frac), frac))]
    if isinstance(n, Dense):
        acc = _accumulator_stage(n, f"{n.name}.accum", _dense_exact(n, x, n.weight, n.bias, n.bias_type,
                                                                     _typed(n, n.weight_type, "weight_type")),
                                 n.accum_type)
        return [acc, out(acc.result)]
    if isinstance(n, LowRankDense):
        acc_v = _accumulator_stage(n, f"{n.name}.accum_v",
                                   _dense_exact(n, x, n.v, None, None, _typed(n, n.v_type, "v_type")), n.accum_v_type)
        mid = _cast_stage(n.name, f"{n.name}.mid", "intermediate", acc_v.result, n.mid_type)
        acc = _accumulator_stage(n, f"{n.name}.accum", _dense_exact(n, mid.result, n.u, n.bias, n.bias_type,
                                                                     _typed(n, n.u_type, "u_type")), n.accum_type)
        return [acc_v, mid, acc, out(acc.result)]
    if isinstance(n, KANLayer):
        _typed(n, n.coeff_type, "coeff_type")
        _typed(n, n.basis_type, "basis_type")
        acc = _accumulator_stage(n, f"{n.name}.accum", _kan_exact(n, x), n.accum_type)
        return [acc, out(acc.result)]
    # The ops of the models people bring have their rules in their own module, which builds on this one (so it
    # is imported here, when first needed, rather than at the top).
    from .op_intervals import fixed_stages

    return fixed_stages(g, n, xs, out)


def _typed(n: Node, t: Optional[FixedType], field: str) -> FixedType:
    if t is None:
        raise IntervalError(f"{n.describe()}: {field} is not set but the input is fixed point; "
                            "quantize the layer (bitforge.toolchain.passes.quantize) first")
    return t


def _float_stage(g: Graph, n: Node, xs: list[Bounds]) -> Stage:
    x = xs[0]
    if isinstance(n, ReLU):
        exact = Bounds(np.maximum(x.lo, 0.0), np.maximum(x.hi, 0.0), None)
    elif isinstance(n, Add):
        exact = _add_float(*xs)
    elif isinstance(n, Dense):
        exact = _dense_float(x, n.weight, n.bias)
    elif isinstance(n, LowRankDense):
        exact = _dense_float(_dense_float(x, n.v, None), n.u, n.bias)
    elif isinstance(n, KANLayer):
        exact = _kan_float(n, x)
    else:
        from .op_intervals import float_bounds  # see node_stages

        exact = float_bounds(g, n, xs)
    return Stage(n.name, n.output, "output", None, exact, exact, False)


# -- graph inputs and the whole graph -----------------------------------------------------------------

def _range_for(g: Graph, name: str, input_range) -> Optional[tuple[np.ndarray, np.ndarray]]:
    if input_range is None:
        return None
    if isinstance(input_range, Mapping):
        if name not in input_range:
            return None
        input_range = input_range[name]
    where = f"input range of '{name}' in graph '{g.name}'"
    if not isinstance(input_range, (list, tuple, np.ndarray)) or len(input_range) != 2:
        raise IntervalError(f"{where}: expected [lo, hi] (scalars or per-feature lists), found {input_range!r}")
    shape = g.tensors[name].shape
    try:
        lo = np.broadcast_to(np.asarray(input_range[0], dtype=np.float64), shape)
        hi = np.broadcast_to(np.asarray(input_range[1], dtype=np.float64), shape)
    except (ValueError, TypeError):
        raise IntervalError(f"{where}: bounds {input_range!r} do not broadcast to the tensor shape {shape} "
                            f"(give scalars or lists of {shape[-1] if shape else 1} per-feature values)") from None
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        raise IntervalError(f"{where}: bounds must be finite numbers, found {input_range!r}")
    if np.any(lo > hi):
        raise IntervalError(f"{where}: lower bound above upper bound in {input_range!r}")
    return lo, hi


def _float32_outward(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Widen to float32 values: the golden model casts float inputs to float32 before anything else."""
    lo32, hi32 = lo.astype(np.float32), hi.astype(np.float32)
    lo32 = np.where(lo32.astype(np.float64) > lo, np.nextafter(lo32, np.float32(-np.inf)), lo32)
    hi32 = np.where(hi32.astype(np.float64) < hi, np.nextafter(hi32, np.float32(np.inf)), hi32)
    return lo32.astype(np.float64), hi32.astype(np.float64)


def input_bounds(g: Graph, input_range: Optional[InputRange] = None) -> dict[str, Bounds]:
    """Bounds of the graph inputs from ``input_range`` (else ``metadata['input_range']``).

    Without a declared range a float input is unbounded (its quantizer is then assumed to see values
    in its own range) and a fixed-point input spans its type's whole code range.
    """
    if input_range is None:
        input_range = g.metadata.get("input_range")
    out = {}
    for name in g.inputs:
        spec = g.tensor(name)
        declared = _range_for(g, name, input_range)
        if spec.is_float:
            if declared is None:
                lo, hi = np.full(spec.shape, -np.inf), np.full(spec.shape, np.inf)
            else:
                lo, hi = _float32_outward(*declared)
            out[name] = Bounds(lo, hi, None)
            continue
        t = spec.dtype
        if declared is None:
            codes = (np.full(spec.shape, t.min_code, dtype=object), np.full(spec.shape, t.max_code, dtype=object))
        else:
            # Codes whose values lie in [lo, hi], clipped to what the type can hold.
            scale = Fraction(2) ** t.frac
            codes = tuple(np.array([min(max(f(Fraction(float(v)) * scale), t.min_code), t.max_code)
                                    for v in arr.ravel()], dtype=object).reshape(spec.shape)
                          for f, arr in ((math.ceil, declared[0]), (math.floor, declared[1])))
        out[name] = Bounds(codes[0], codes[1], t.frac)
    return out


@dataclass(frozen=True)
class Analysis:
    """Bounds of every tensor and every stage of every node, in graph order."""

    tensors: dict[str, Bounds]
    stages: tuple[Stage, ...]


def analyze(g: Graph, input_range: Optional[InputRange] = None) -> Analysis:
    """Propagate bounds from the graph inputs (see :func:`input_bounds`) through every node.

    Sound: every value the golden model can produce for inputs inside the range lies inside the bounds
    of its tensor and stage. Exact (attained) for chains of Quantize/Requantize/ReLU/Add and for a
    Dense layer fed directly by its quantizer; otherwise a box over-approximation.
    """
    env = input_bounds(g, input_range)
    stages: list[Stage] = []
    for n in g.nodes:
        ss = node_stages(g, n, env)
        env[n.output] = ss[-1].result
        stages.extend(ss)
    return Analysis(env, tuple(stages))
