"""Fixed-point types and exact integer arithmetic with the ap_fixed vocabulary.

A value of a :class:`FixedType` is stored as its integer *code* ``q``; the real value is ``q * 2**-frac``.
Every operation here works on integer codes held in numpy arrays: ``int64`` when every intermediate
provably fits in 62 bits, otherwise numpy ``object`` arrays of Python ints (exact at any width). The
same operator expressions serve both, so the big-int path is not a second implementation.

Semantics follow Xilinx ``ap_fixed<W, I, Q, O>``: rounding first (on the exact value), then overflow.
The tests compare every rounding and overflow mode with the ap_fixed C++ headers and with fxpmath.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from enum import Enum

import numpy as np

from .errors import BitforgeError

__all__ = [
    "Rounding", "Overflow", "FixedType", "FixedTypeError", "parse_type",
    "quantize", "to_float", "requantize", "add", "sub", "multiply", "shift", "accumulate",
    "add_type", "mul_type", "accumulate_type", "clog2", "signed_bits", "apply_overflow", "shift_round", "int_array",
    "out_of_range",
]

#: int64 is used while every intermediate fits in this many bits (one spare bit for sums).
INT64_SAFE_BITS = 62


class FixedTypeError(BitforgeError):
    """A type string or parameter that does not describe a valid fixed-point type."""


class Rounding(str, Enum):
    """How the bits below the LSB are discarded (ap_fixed ``AP_*`` quantization modes)."""

    TRN = "TRN"  # toward -inf (drop the bits)
    TRN_ZERO = "TRN_ZERO"  # toward zero
    RND = "RND"  # to nearest, ties toward +inf
    RND_ZERO = "RND_ZERO"  # to nearest, ties toward zero
    RND_INF = "RND_INF"  # to nearest, ties away from zero
    RND_MIN_INF = "RND_MIN_INF"  # to nearest, ties toward -inf
    RND_CONV = "RND_CONV"  # to nearest, ties to even (convergent)


class Overflow(str, Enum):
    """What happens to a value outside the representable range (ap_fixed ``AP_*`` overflow modes)."""

    WRAP = "WRAP"  # keep the low W bits (two's complement)
    SAT = "SAT"  # clamp to [min, max]
    SAT_SYM = "SAT_SYM"  # clamp to [-max, max] for signed types
    SAT_ZERO = "SAT_ZERO"  # overflowing values become zero


@dataclass(frozen=True)
class FixedType:
    """``width`` bits in all, ``integer`` of them above the binary point (sign included when signed).

    ``integer`` may be negative or larger than ``width`` (as in ap_fixed): ``frac = width - integer``
    is then larger than ``width`` or negative.
    """

    width: int
    integer: int
    signed: bool = True
    rounding: Rounding = Rounding.TRN
    overflow: Overflow = Overflow.WRAP

    def __post_init__(self) -> None:
        if not isinstance(self.width, (int, np.integer)) or isinstance(self.width, bool) or self.width < 1:
            raise FixedTypeError(f"width must be a positive integer, got {self.width!r}")
        if not isinstance(self.integer, (int, np.integer)) or isinstance(self.integer, bool):
            raise FixedTypeError(f"integer bits must be an integer, got {self.integer!r}")
        object.__setattr__(self, "width", int(self.width))
        object.__setattr__(self, "integer", int(self.integer))
        object.__setattr__(self, "rounding", _coerce(Rounding, self.rounding))
        object.__setattr__(self, "overflow", _coerce(Overflow, self.overflow))

    # -- derived quantities ------------------------------------------------------------------
    @property
    def frac(self) -> int:
        """Fractional bits: the LSB weighs ``2**-frac``."""
        return self.width - self.integer

    @property
    def min_code(self) -> int:
        return -(1 << (self.width - 1)) if self.signed else 0

    @property
    def max_code(self) -> int:
        return (1 << (self.width - 1)) - 1 if self.signed else (1 << self.width) - 1

    @property
    def sat_min_code(self) -> int:
        """Lowest code the overflow mode saturates to: ``-max_code`` for SAT_SYM, else ``min_code``.

        ap_fixed_base::overflow_adjust writes the symmetric minimum as the bit pattern MSB | 1, which for a
        1-bit type is 1 = -1: ap_fixed<1, I, Q, AP_SAT_SYM> saturates like AP_SAT. Unsigned types have no
        symmetric case either (ap_ufixed SAT_SYM is SAT).
        """
        if self.overflow == Overflow.SAT_SYM and self.signed and self.width > 1:
            return -self.max_code
        return self.min_code

    @property
    def lsb(self) -> float:
        return math.ldexp(1.0, -self.frac)

    @property
    def min_value(self) -> float:
        return math.ldexp(self.min_code, -self.frac)

    @property
    def max_value(self) -> float:
        return math.ldexp(self.max_code, -self.frac)

    def with_(self, **changes) -> "FixedType":
        return replace(self, **changes)

    # -- text forms ----------------------------------------------------------------------------
    def __str__(self) -> str:
        return self.to_short()

    def to_ap(self) -> str:
        """``ap_fixed<16,6,AP_RND_CONV,AP_SAT>`` (modes omitted when they are the defaults)."""
        head = "ap_fixed" if self.signed else "ap_ufixed"
        args = [str(self.width), str(self.integer)]
        if self.rounding != Rounding.TRN or self.overflow != Overflow.WRAP:
            args.append(f"AP_{self.rounding.value}")
        if self.overflow != Overflow.WRAP:
            args.append(f"AP_{self.overflow.value}")
        return f"{head}<{','.join(args)}>"

    def to_short(self) -> str:
        """``fixed<16,6,RND_CONV,SAT>`` / ``ufixed<...>``: the form used in bitforge's own files."""
        head = "fixed" if self.signed else "ufixed"
        return f"{head}<{self.width},{self.integer},{self.rounding.value},{self.overflow.value}>"

    @classmethod
    def parse(cls, text: str) -> "FixedType":
        return parse_type(text)


def _coerce(enum, value):
    if isinstance(value, enum):
        return value
    name = str(value).upper()
    name = name[3:] if name.startswith("AP_") else name
    try:
        return enum(name)
    except ValueError:
        allowed = ", ".join(m.value for m in enum)
        raise FixedTypeError(f"unknown {enum.__name__.lower()} mode {value!r}; expected one of {allowed}") from None


_TYPE_RE = re.compile(r"^\s*(ap_fixed|ap_ufixed|fixed|ufixed)\s*<\s*([^>]*)>\s*$")


def parse_type(text: str) -> FixedType:
    """Parse ``ap_fixed<16,6,AP_RND_CONV,AP_SAT>``, ``ap_ufixed<8,0>`` or ``fixed<16,6,RND,SAT>``.

    Modes may be written with or without the ``AP_`` prefix; missing modes default to TRN and WRAP,
    as in ap_fixed. A fifth ap_fixed argument (saturation bits) is accepted only when it is 0.
    """
    if isinstance(text, FixedType):
        return text
    m = _TYPE_RE.match(str(text))
    if not m:
        raise FixedTypeError(
            f"cannot parse fixed-point type {text!r}; expected e.g. 'ap_fixed<16,6,AP_RND_CONV,AP_SAT>', "
            "'ap_ufixed<8,0>' or 'fixed<16,6,RND,SAT>'"
        )
    head, body = m.groups()
    args = [a.strip() for a in body.split(",") if a.strip()]
    if len(args) < 2 or len(args) > 5:
        raise FixedTypeError(f"{text!r}: expected 2 to 5 template arguments <W, I[, Q[, O[, N]]]>, got {len(args)}")
    if not all(re.fullmatch(r"-?[0-9]+", a) for a in args[:2]):
        raise FixedTypeError(f"{text!r}: width and integer bits must be decimal integers, got {args[0]!r}, "
                             f"{args[1]!r}")
    width, integer = int(args[0]), int(args[1])
    if len(args) == 5 and args[4] != "0":
        raise FixedTypeError(f"{text!r}: saturation bits N other than 0 are not supported")
    rounding = args[2] if len(args) > 2 else Rounding.TRN
    overflow = args[3] if len(args) > 3 else Overflow.WRAP
    try:
        return FixedType(width, integer, signed=head in ("ap_fixed", "fixed"), rounding=rounding, overflow=overflow)
    except FixedTypeError as e:
        raise FixedTypeError(f"{text!r}: {e}") from None


# -- integer array plumbing ---------------------------------------------------------------------

def int_array(values, bits: int = 0) -> np.ndarray:
    """Integer codes as int64 when ``bits`` fit, else as an object array of exact Python ints."""
    a = np.asarray(values)
    if a.dtype.kind == "f" and not isinstance(values, np.ndarray):
        # numpy makes a list such as [0, 2**63 + 1] float64; keep its Python ints exact instead.
        a = np.asarray(values, dtype=object)
        if not all(isinstance(v, (int, np.integer)) for v in a.ravel()):
            raise TypeError("integer codes expected, got floats")
    elif a.dtype != object and not np.issubdtype(a.dtype, np.integer):
        raise TypeError(f"integer codes expected, got dtype {a.dtype}")  # at every width: no silent int(float)
    if bits <= INT64_SAFE_BITS:
        return a.astype(np.int64, copy=False)
    if a.dtype == object:
        return a
    out = np.empty(a.shape, dtype=object)
    out.ravel()[:] = [int(v) for v in a.ravel()]
    return out


def _bits_of(t: FixedType) -> int:
    return t.width + 1


def _pow2(n: int, like: np.ndarray):
    """2**n as a scalar of the array's kind (Python int for object arrays)."""
    return (1 << n) if like.dtype == object else np.int64(1 << n)


def _round_up(rem, half, floor, negative, rounding: Rounding):
    """Whether the floor of an exact quotient gets one LSB added.

    ``rem`` is the discarded part (``0 <= rem < 2 * half``, ``half`` standing for 1/2 LSB) and ``negative``
    the sign of the exact value. This is ap_fixed_base::quantization_adjust, which adds the first discarded
    bit ``qb`` to the floor masked by ``r`` (a lower bit is set) and ``s`` (the source is negative):
    RND_ZERO ``qb &= s || r``, RND_INF ``qb &= !s || r``, RND_MIN_INF ``qb &= r``, RND_CONV
    ``qb &= lsb || r``, TRN_ZERO ``qb = s && (qb || r)``.
    """
    r = Rounding(rounding)
    if r == Rounding.TRN:
        return np.zeros(np.shape(rem), dtype=bool)
    if r == Rounding.TRN_ZERO:
        return (rem != 0) & negative
    if r == Rounding.RND:
        return rem >= half
    if r == Rounding.RND_ZERO:
        return (rem > half) | ((rem == half) & negative)
    if r == Rounding.RND_INF:
        return (rem > half) | ((rem == half) & ~negative)
    if r == Rounding.RND_MIN_INF:
        return rem > half
    return (rem > half) | ((rem == half) & ((floor & 1) == 1))  # RND_CONV


def shift_round(q: np.ndarray, d: int, rounding: Rounding) -> np.ndarray:
    """Divide codes by 2**d (d >= 0) rounding the exact quotient as ``rounding`` says."""
    if d <= 0:
        return q << (-d) if d < 0 else q
    if q.dtype != object and d >= INT64_SAFE_BITS:
        q = int_array(q, d + 2)  # floor * 2**d and 2**(d-1) have no int64 form
    floor = q >> d
    rem = q - (floor << d)  # in [0, 2**d)
    inc = _round_up(rem, _pow2(d - 1, q), floor, q < 0, rounding)
    return np.where(inc, floor + 1, floor) if q.dtype == object else floor + inc.astype(np.int64)


def _shift_round_each(q: np.ndarray, d: np.ndarray, rounding: Rounding) -> np.ndarray:
    """``shift_round`` with one shift per element, for int64 codes below 2**53 and 0 <= d <= 55."""
    floor = q >> d
    rem = q - (floor << d)
    half = np.where(d > 0, np.int64(1) << np.maximum(d - 1, 0), np.int64(1))  # d == 0: rem == 0 < half
    return floor + _round_up(rem, half, floor, q < 0, rounding).astype(np.int64)


def apply_overflow(q: np.ndarray, t: FixedType) -> np.ndarray:
    """Bring already-rounded codes into ``t``'s range with its overflow mode.

    As in ap_fixed_base::operator=, overflow is judged on the rounded value, so a rounding carry can
    saturate. WRAP keeps the low ``width`` bits (the header's shift-and-truncate), for any I, also I < 0
    and I > W, and also from signed codes into unsigned types.
    """
    lo, hi = t.min_code, t.max_code
    o = t.overflow
    if o == Overflow.WRAP:
        if q.dtype != object and t.width > INT64_SAFE_BITS:
            # 2**width has no int64 form, and negative codes must still wrap into an unsigned type.
            q = int_array(q, t.width + 1)
        span = 1 << t.width
        if q.dtype == object:
            wrapped = q & (span - 1)
            if t.signed:
                wrapped = np.where(wrapped > hi, wrapped - span, wrapped)
            return wrapped
        wrapped = q & np.int64(span - 1)
        if t.signed:
            wrapped = np.where(wrapped > hi, wrapped - np.int64(span), wrapped)
        return wrapped.astype(np.int64)
    lo = t.sat_min_code
    if o == Overflow.SAT_ZERO:
        return np.where((q < lo) | (q > hi), 0 if q.dtype == object else np.int64(0), q)
    if q.dtype == object:
        return np.where(q < lo, lo, np.where(q > hi, hi, q))
    return np.clip(q, max(lo, np.iinfo(np.int64).min), min(hi, np.iinfo(np.int64).max))


# -- conversions ---------------------------------------------------------------------------------

def quantize(x, t: FixedType) -> np.ndarray:
    """Float array -> integer codes of ``t`` (exact rounding of the float's value, then overflow).

    NaN and infinities have no code: they raise ``ValueError``, so callers name the offending tensor.
    """
    x = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(x)):
        raise ValueError(f"cannot quantize non-finite values (NaN/Inf) to {t}")
    # A finite double is m * 2**e exactly with |m| < 2**53, so its code is m * 2**(e + frac): rounding is an
    # integer shift of m, as in ap_fixed_base(double), which splits the double the same way. Scaling the
    # float instead (floor(x * 2**frac)) overflows to inf for a large frac, and v - floor(v) rounds: to
    # exactly 1/2 just inside a negative tie, to 0 when the scaled value underflows. (ap_fixed_base(double)
    # decodes subnormals as if they had the hidden bit; that changes a result only for types with more
    # than ~1000 fraction bits and is not reproduced.)
    mant, exp = np.frexp(x)
    m = np.ldexp(mant, 53).astype(np.int64)
    s = exp.astype(np.int64) + (t.frac - 53)  # code == m * 2**s
    # Past 55 discarded bits the value is under 1/4 LSB: every mode decides as it does at 55.
    rounded = _shift_round_each(m, np.clip(-s, 0, 55), t.rounding)
    left = s > 0
    if t.width <= INT64_SAFE_BITS - 2:
        q = np.where(left, _shift_left_stand_in(m, s, t.width), rounded)
    else:
        q = int_array(rounded, t.width + 2)
        for i in np.flatnonzero(left):
            # Shifting past width + 1 changes neither the low ``width`` bits nor the overflow decision.
            q.flat[i] = int(m.flat[i]) << min(int(s.flat[i]), t.width + 1)
    return int_array(apply_overflow(q, t), t.width)


def _shift_left_stand_in(m: np.ndarray, s: np.ndarray, width: int) -> np.ndarray:
    """``m * 2**s`` (for s > 0) where it is below 2**width, else an int64 stand-in that overflows alike.

    The stand-in keeps the low ``width`` bits (WRAP) and the sign, and lies beyond every code of the type
    (SAT, SAT_SYM, SAT_ZERO); with width <= 60 it fits int64 where the true code may need 1000 bits.
    """
    s = np.clip(s, 0, width + 1)
    room = np.maximum(width - s, 0)
    fits = np.abs(m) < (np.int64(1) << room)
    low = (m & ((np.int64(1) << room) - 1)) << np.minimum(s, width)
    stand_in = low + np.sign(m) * (np.int64(1) << (width + 1))
    return np.where(fits, np.where(fits, m, 0) << s, stand_in)


def out_of_range(x, t: FixedType) -> np.ndarray:
    """Mask of float values whose rounded code lies outside ``t``'s range (before any overflow handling).

    Used to refuse weights that a type is too narrow for, instead of letting WRAP or SAT change them.
    """
    roomy = FixedType(max(t.width, INT64_SAFE_BITS), max(t.width, INT64_SAFE_BITS) - t.frac, t.signed, t.rounding,
                      Overflow.SAT)  # same LSB and rounding, no overflow for any weight-sized value
    q = quantize(x, roomy)
    return (q < t.sat_min_code) | (q > t.max_code)


def to_float(q, t: FixedType) -> np.ndarray:
    """Integer codes -> float64 values (exact while the code fits in 53 bits)."""
    q = np.asarray(q)
    if q.dtype == object:
        return np.array([math.ldexp(int(v), -t.frac) for v in q.ravel()], dtype=np.float64).reshape(q.shape)
    return np.ldexp(q.astype(np.float64), -t.frac)


def requantize(q, src: FixedType, dst: FixedType) -> np.ndarray:
    """Codes of ``src`` -> codes of ``dst``: align the binary point with ``dst``'s rounding, then overflow."""
    d = src.frac - dst.frac
    bits = max(src.width, src.width - d, d) + 2  # d: shift_round needs 2**d as a scalar
    q = int_array(q, bits)
    out = shift_round(q, d, dst.rounding) if d > 0 else (q << (-d) if d < 0 else q)
    out = apply_overflow(out, dst)
    return int_array(out, _bits_of(dst))


# -- arithmetic (full precision: results never round) -------------------------------------------

def add_type(a: FixedType, b: FixedType) -> FixedType:
    """Smallest type that holds every ``a + b`` exactly (ap_fixed's rule for ``+``)."""
    signed = a.signed or b.signed
    ia = a.integer + (1 if signed and not a.signed else 0)
    ib = b.integer + (1 if signed and not b.signed else 0)
    integer = max(ia, ib) + 1
    frac = max(a.frac, b.frac)
    return FixedType(integer + frac, integer, signed)


def mul_type(a: FixedType, b: FixedType) -> FixedType:
    """Smallest type that holds every ``a * b`` exactly."""
    return FixedType(a.width + b.width, a.integer + b.integer, a.signed or b.signed)


def clog2(n: int) -> int:
    """ceil(log2(n)) without float rounding, 0 for n <= 1 (Verilog's $clog2): the bits a sum of ``n`` terms
    grows by, or the bits of an index over ``n`` things."""
    return (n - 1).bit_length() if n > 1 else 0


def signed_bits(code: int) -> int:
    """Width of the narrowest signed type whose code range holds ``code`` (1 for 0 and -1)."""
    code = int(code)
    return (code.bit_length() if code >= 0 else (-code - 1).bit_length()) + 1


def accumulate_type(t: FixedType, n: int) -> FixedType:
    """Type that holds the sum of ``n`` values of ``t`` exactly."""
    grow = clog2(n)
    return FixedType(t.width + grow, t.integer + grow, t.signed)


def _align(q, t: FixedType, frac: int, bits: int):
    return int_array(q, bits) << (frac - t.frac)


def add(qa, ta: FixedType, qb, tb: FixedType) -> tuple[np.ndarray, FixedType]:
    """Exact sum; returns ``(codes, add_type(ta, tb))``."""
    rt = add_type(ta, tb)
    bits = rt.width + 1
    s = _align(qa, ta, rt.frac, bits) + _align(qb, tb, rt.frac, bits)
    return s, rt


def sub(qa, ta: FixedType, qb, tb: FixedType) -> tuple[np.ndarray, FixedType]:
    """Exact difference; returns ``(codes, add_type(ta, tb))`` (signed)."""
    rt = add_type(ta, tb).with_(signed=True)
    if not (ta.signed or tb.signed):
        rt = FixedType(rt.width + 1, rt.integer + 1, True)
    bits = rt.width + 1
    return _align(qa, ta, rt.frac, bits) - _align(qb, tb, rt.frac, bits), rt


def multiply(qa, ta: FixedType, qb, tb: FixedType) -> tuple[np.ndarray, FixedType]:
    """Exact (full-precision) product; returns ``(codes, mul_type(ta, tb))``."""
    rt = mul_type(ta, tb)
    bits = rt.width + 1
    return int_array(qa, bits) * int_array(qb, bits), rt


def shift(q, t: FixedType, n: int) -> tuple[np.ndarray, FixedType]:
    """Multiply by ``2**n`` exactly: the codes stay, the binary point moves (free in hardware)."""
    return np.asarray(q), FixedType(t.width, t.integer + n, t.signed, t.rounding, t.overflow)


def accumulate(q, t: FixedType, axis: int = -1) -> tuple[np.ndarray, FixedType]:
    """Exact sum along ``axis``; returns ``(codes, accumulate_type(t, n))``."""
    q = np.asarray(q)
    n = q.shape[axis]
    rt = accumulate_type(t, n)
    return int_array(q, rt.width + 1).sum(axis=axis), rt
