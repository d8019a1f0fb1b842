"""Fixed-point types and exact integer arithmetic: text forms, quantization against fxpmath and against exact
rational arithmetic (Python ``Fraction``), full-precision add/multiply/accumulate, and the big-int path.

The bit-for-bit comparison with the ap_fixed C++ headers lives in ``test_fixed_apfixed.py``.
"""
from __future__ import annotations

import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
from fxpmath import Fxp
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from bitforge.toolchain import fixed
from bitforge.toolchain.fixed import FixedType, FixedTypeError, Overflow, Rounding, parse_type

PROPERTY = settings(max_examples=200, deadline=None)
#: For the fxpmath comparisons, which are parametrized over 18 mode pairs (Fxp is slow to construct).
FXP_PROPERTY = settings(max_examples=60, deadline=None)

#: fxpmath 0.4.10 rounding modes and the ap_fixed mode each one equals. fxpmath's 'trunc' is np.trunc
#: (toward zero), not bit truncation; 'ceil' has no ap_fixed counterpart.
FXP_ROUNDING = [
    (Rounding.TRN, "floor"), (Rounding.TRN, "bit_trunc"), (Rounding.TRN_ZERO, "fix"), (Rounding.TRN_ZERO, "trunc"),
    (Rounding.RND, "nearest_posinf"), (Rounding.RND_ZERO, "nearest_zero"), (Rounding.RND_INF, "nearest_away"),
    (Rounding.RND_MIN_INF, "nearest_neginf"), (Rounding.RND_CONV, "around"),
]
FXP_ROUNDING_IDS = [f"{r.value}={name}" for r, name in FXP_ROUNDING]
#: fxpmath has no SAT_SYM or SAT_ZERO.
FXP_OVERFLOW = {Overflow.WRAP: "wrap", Overflow.SAT: "saturate"}


# -- strategies -------------------------------------------------------------------------------------

def fixed_types(min_width: int = 1, max_width: int = 40, rounding=None, overflow=None) -> st.SearchStrategy:
    """Types with I < 0, 0 <= I <= W and I > W all likely."""
    return st.builds(
        FixedType, st.integers(min_width, max_width), st.integers(-12, max_width + 12), st.booleans(),
        st.sampled_from(list(Rounding)) if rounding is None else st.just(rounding),
        st.sampled_from(list(Overflow)) if overflow is None else st.just(overflow),
    )


@st.composite
def dyadic_values(draw, t: FixedType, extra_bits: int = 6, size: int = 16) -> np.ndarray:
    """k * 2**-(frac + j) for j <= extra_bits: ties and near-ties at t's LSB, within 4x t's range and beyond.

    Their scaled values have at most ~48 significant bits, so fxpmath's float arithmetic is exact on them.
    """
    reach = max(abs(t.min_code), t.max_code) * 4 + 4
    ks = draw(st.lists(st.integers(-reach, reach), min_size=1, max_size=size))
    js = draw(st.lists(st.integers(0, extra_bits), min_size=len(ks), max_size=len(ks)))
    return np.array([math.ldexp(k * 2**extra_bits + (1 << (extra_bits - 1)) * (i % 2), -t.frac - j - extra_bits)
                     if i % 3 == 0 else math.ldexp(k, -t.frac - j) for i, (k, j) in enumerate(zip(ks, js))])


def codes_of(t: FixedType, size: int = 12) -> st.SearchStrategy:
    return st.lists(st.integers(t.min_code, t.max_code), min_size=1, max_size=size)


# -- exact references ---------------------------------------------------------------------------------

def value(q: int, t: FixedType) -> Fraction:
    return Fraction(int(q)) * Fraction(2) ** -t.frac


def ref_round(v: Fraction, r: Rounding) -> int:
    """The rounding modes as their definitions read, on an exact rational number of LSBs."""
    fl = math.floor(v)
    rem = v - fl
    half = Fraction(1, 2)
    up = {
        Rounding.TRN: False,
        Rounding.TRN_ZERO: rem != 0 and v < 0,
        Rounding.RND: rem >= half,
        Rounding.RND_ZERO: rem > half or (rem == half and v < 0),
        Rounding.RND_INF: rem > half or (rem == half and v > 0),
        Rounding.RND_MIN_INF: rem > half,
        Rounding.RND_CONV: rem > half or (rem == half and fl % 2 == 1),
    }[r]
    return fl + int(up)


def ref_overflow(q: int, t: FixedType) -> int:
    lo, hi = t.min_code, t.max_code
    if t.overflow == Overflow.WRAP:
        q %= 1 << t.width
        return q - (1 << t.width) if t.signed and q > hi else q
    if t.overflow == Overflow.SAT_ZERO:
        return q if lo <= q <= hi else 0
    if t.overflow == Overflow.SAT_SYM and t.signed and t.width > 1:  # one bit: ap_fixed saturates like SAT
        lo = -hi
    return min(max(q, lo), hi)


def ref_quantize(v: Fraction, t: FixedType) -> int:
    return ref_overflow(ref_round(v * Fraction(2) ** t.frac, t.rounding), t)


def fxp(values, t: FixedType, rounding: str, overflow: str) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(Fxp(values, t.signed, t.width, t.frac, rounding=rounding, overflow=overflow).val,
                          dtype=np.int64)


# -- type strings -----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("ap_fixed<16,6,AP_RND_CONV,AP_SAT>", FixedType(16, 6, True, Rounding.RND_CONV, Overflow.SAT)),
    ("ap_ufixed<8,0>", FixedType(8, 0, False, Rounding.TRN, Overflow.WRAP)),
    ("ap_fixed<4,-2,AP_TRN_ZERO,AP_SAT_SYM>", FixedType(4, -2, True, Rounding.TRN_ZERO, Overflow.SAT_SYM)),
])
def test_ap_type_string_parses_and_prints_back_unchanged(text, expected):
    t = parse_type(text)
    assert t == expected
    assert t.to_ap() == text


def test_short_type_string_parses_and_prints_back_unchanged():
    t = parse_type("fixed<16,6,RND,SAT>")
    assert t == FixedType(16, 6, True, Rounding.RND, Overflow.SAT)
    assert t.to_short() == "fixed<16,6,RND,SAT>"


def test_type_strings_accept_modes_without_prefix_spaces_and_zero_saturation_bits():
    assert parse_type(" ap_fixed< 16 , 6 , RND_CONV , AP_SAT , 0 > ") == parse_type("fixed<16,6,RND_CONV,SAT>")


@PROPERTY
@given(fixed_types(max_width=200))
def test_every_type_round_trips_through_both_text_forms(t):
    assert parse_type(t.to_ap()) == t
    assert parse_type(t.to_short()) == t
    assert parse_type(str(t)) == t


@pytest.mark.parametrize("text", [
    "", "fixed", "ap_fixed<16>", "ap_fixed<>", "ap_int<8>", "ap_fixed<16,6", "ap_fixed<a,b>", "ap_fixed<1_6,6>",
    "ap_fixed<16,+6>", "ap_fixed<0,0>", "ap_fixed<-3,1>", "ap_fixed<16,6,AP_FOO>", "ap_fixed<16,6,AP_RND,AP_BAR>",
    "ap_fixed<16,6,AP_TRN,AP_WRAP_SM>", "ap_fixed<16,6,AP_RND,AP_SAT,3>", "ap_fixed<16,6,AP_RND,AP_SAT,0,1>",
    "ap_fixed<16,6>x",
])
def test_garbage_type_strings_raise_fixed_type_error_naming_the_text(text):
    with pytest.raises(FixedTypeError) as e:
        parse_type(text)
    assert isinstance(e.value, ValueError)
    assert repr(text) in str(e.value)


@pytest.mark.parametrize("args", [(0, 0), (8, 2.5), (True, 1), (8, 2, True, "NEAREST"), (8, 2, True, "TRN", "CLAMP")])
def test_invalid_type_parameters_raise_fixed_type_error(args):
    with pytest.raises(FixedTypeError):
        FixedType(*args)


# -- quantize -------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("rounding", "fxp_rounding"), FXP_ROUNDING, ids=FXP_ROUNDING_IDS)
@pytest.mark.parametrize("overflow", list(FXP_OVERFLOW), ids=lambda o: o.value)
@FXP_PROPERTY
@given(data=st.data())
def test_quantize_matches_fxpmath(rounding, fxp_rounding, overflow, data):
    t = data.draw(fixed_types(rounding=rounding, overflow=overflow))
    x = data.draw(dyadic_values(t))
    np.testing.assert_array_equal(fixed.quantize(x, t), fxp(x, t, fxp_rounding, FXP_OVERFLOW[overflow]),
                                  err_msg=f"{t} on {x.tolist()}")


@pytest.mark.parametrize("overflow", [Overflow.SAT_SYM, Overflow.SAT_ZERO], ids=lambda o: o.value)
@PROPERTY
@given(data=st.data())
def test_quantize_with_the_overflow_modes_fxpmath_lacks_matches_fxpmath_rounding_then_the_rule(overflow, data):
    """fxpmath rounds into a roomy type; SAT_SYM / SAT_ZERO are then applied to the exact code by definition."""
    t = data.draw(fixed_types(max_width=30, overflow=overflow))
    x = data.draw(dyadic_values(t))
    fxp_name = dict((r, n) for r, n in FXP_ROUNDING)[t.rounding]
    roomy = FixedType(t.width + 12, t.integer + 12, True)
    expected = [ref_overflow(int(q), t) for q in fxp(x, roomy, fxp_name, "saturate")]
    np.testing.assert_array_equal(fixed.quantize(x, t), expected, err_msg=f"{t} on {x.tolist()}")


@PROPERTY
@given(data=st.data())
def test_quantize_of_any_double_equals_exact_rational_rounding(data):
    """Arbitrary doubles (not only few-bit ones), every mode: the code is the exact value rounded."""
    t = data.draw(fixed_types(max_width=60))
    span = 2.0 ** min(t.integer + 3, 900)
    floats = st.floats(-span, span, allow_nan=False, allow_infinity=False)
    x = data.draw(st.lists(st.one_of(floats, st.floats(allow_nan=False, allow_infinity=False)), min_size=1,
                           max_size=12))
    got = fixed.quantize(np.array(x), t)
    assert got.dtype == np.int64
    assert got.tolist() == [ref_quantize(Fraction(v), t) for v in x], f"{t} on {x}"


@pytest.mark.parametrize("rounding", [Rounding.RND_INF, Rounding.RND_MIN_INF, Rounding.RND, Rounding.RND_CONV])
def test_quantize_just_inside_a_negative_tie_rounds_toward_zero(rounding):
    """-(1/2 - 2**-54) LSB is nearer 0 than -1 LSB; scaled float arithmetic (v - floor(v)) sees exactly 1/2."""
    t = FixedType(8, 3, True, rounding, Overflow.SAT)
    just_inside = float(np.nextafter(-0.5 * t.lsb, 0.0))
    assert fixed.quantize([just_inside, -just_inside], t).tolist() == [0, 0]


def test_quantize_huge_double_into_many_fraction_bits_saturates_instead_of_overflowing():
    t = FixedType(80, -5, True, Rounding.RND, Overflow.SAT)
    assert fixed.quantize([1e300, -1e300], t).tolist() == [t.max_code, t.min_code]
    assert fixed.quantize([1e300], t.with_(overflow=Overflow.WRAP)).tolist() == [0]  # 1e300 * 2**85: low bits 0


def test_quantize_tiny_negative_double_truncates_to_minus_one_lsb():
    """-5e-324 in a type whose LSB is 8: the scaled float underflows to -0.0, the exact floor is -1."""
    t = FixedType(5, 8, True, Rounding.TRN, Overflow.WRAP)
    assert fixed.quantize([-5e-324, 5e-324], t).tolist() == [-1, 0]


def test_one_bit_signed_sat_sym_saturates_like_sat_as_ap_fixed_does():
    t = FixedType(1, 1, True, Rounding.TRN, Overflow.SAT_SYM)
    assert fixed.quantize([-3.0, -1.0, 0.0, 5.0], t).tolist() == [-1, -1, 0, 0]
    assert fixed.quantize([-9.0, 9.0], FixedType(4, 4, True, Rounding.TRN, Overflow.SAT_SYM)).tolist() == [-7, 7]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_quantize_rejects_nan_and_infinity_with_value_error(bad):
    t = parse_type("fixed<16,6,RND_CONV,SAT>")
    with pytest.raises(ValueError, match="non-finite"):
        fixed.quantize(np.array([0.5, bad]), t)


# -- requantize ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("rounding", "fxp_rounding"), FXP_ROUNDING, ids=FXP_ROUNDING_IDS)
@pytest.mark.parametrize("overflow", list(FXP_OVERFLOW), ids=lambda o: o.value)
@FXP_PROPERTY
@given(data=st.data())
def test_requantize_matches_fxpmath_resize(rounding, fxp_rounding, overflow, data):
    """fxpmath rescales through float64 and int64, so the pairs stay where the scaled codes are below 2**50."""
    src = data.draw(fixed_types(max_width=36))
    dst = data.draw(fixed_types(max_width=36, rounding=rounding, overflow=overflow))
    assume(max(-src.min_code, src.max_code) * 2 ** max(0, dst.frac - src.frac) < 2**50)
    codes = data.draw(codes_of(src))
    ref = Fxp(None, src.signed, src.width, src.frac, rounding=fxp_rounding, overflow=FXP_OVERFLOW[overflow])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref.set_val(np.array(codes, dtype=np.int64), raw=True)
        ref.resize(dst.signed, dst.width, dst.frac)
    np.testing.assert_array_equal(fixed.requantize(np.array(codes), src, dst), np.asarray(ref.val, np.int64),
                                  err_msg=f"{src} -> {dst} on {codes}")


@PROPERTY
@given(data=st.data())
def test_requantize_equals_exact_rational_rounding_at_any_width(data):
    """Types up to 130 bits: big-int (object) arrays and int64 arrays give the exact rounded value."""
    src = data.draw(fixed_types(max_width=130))
    dst = data.draw(fixed_types(max_width=130))
    codes = data.draw(codes_of(src))
    got = fixed.requantize(np.array(codes, dtype=object), src, dst)
    assert got.dtype == (np.int64 if dst.width + 1 <= fixed.INT64_SAFE_BITS else object)
    assert [int(q) for q in got] == [ref_quantize(value(c, src), dst) for c in codes], f"{src} -> {dst}"


def test_requantize_wraps_negative_int64_codes_into_a_wide_unsigned_type():
    src, dst = FixedType(8, 0, True), FixedType(70, 70, False, Rounding.TRN, Overflow.WRAP)
    assert fixed.requantize(np.array([-128, -1, 5]), src, dst).tolist() == [(1 << 70) - 1] * 2 + [0]


def test_requantize_int64_codes_into_a_63_bit_wrap_type():
    """The codes stay in int64 (51 bits after the shift) while 2**63, the wrap modulus, does not fit it."""
    src, dst = FixedType(16, 6, True), FixedType(63, 20, True, Rounding.TRN, Overflow.WRAP)
    out = fixed.requantize(np.array([-32768, 32767, -1]), src, dst)
    assert [int(q) for q in out] == [-32768 << 33, 32767 << 33, -1 << 33]


# -- big-int path ------------------------------------------------------------------------------------------

@PROPERTY
@given(t=fixed_types(min_width=63, max_width=140),
       x=st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=10))
def test_quantize_wider_than_62_bits_uses_exact_python_ints(t, x):
    got = fixed.quantize(np.array(x), t)
    assert got.dtype == object and all(type(q) is int for q in got)
    assert got.tolist() == [ref_quantize(Fraction(v), t) for v in x], f"{t} on {x}"


@PROPERTY
@given(t=fixed_types(min_width=1, max_width=62), x=st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=10))
def test_quantize_up_to_62_bits_returns_int64(t, x):
    assert fixed.quantize(np.array(x), t).dtype == np.int64


# -- full-precision arithmetic ---------------------------------------------------------------------------------

@PROPERTY
@given(data=st.data())
def test_add_and_sub_are_exact_and_fit_their_result_type(data):
    ta, tb = data.draw(fixed_types(max_width=70)), data.draw(fixed_types(max_width=70))
    qa = data.draw(codes_of(ta, 8))
    qb = data.draw(st.lists(st.integers(tb.min_code, tb.max_code), min_size=len(qa), max_size=len(qa)))
    for op, exact in ((fixed.add, lambda a, b: a + b), (fixed.sub, lambda a, b: a - b)):
        q, rt = op(np.array(qa, dtype=object), ta, np.array(qb, dtype=object), tb)
        for a, b, r in zip(qa, qb, q):
            assert value(r, rt) == exact(value(a, ta), value(b, tb)), f"{op.__name__} {ta} {tb}"
            assert rt.min_code <= r <= rt.max_code, f"{op.__name__}: {r} does not fit {rt}"


@PROPERTY
@given(data=st.data())
def test_multiply_is_exact_and_fits_its_result_type(data):
    ta, tb = data.draw(fixed_types(max_width=70)), data.draw(fixed_types(max_width=70))
    qa = data.draw(codes_of(ta, 8))
    qb = data.draw(st.lists(st.integers(tb.min_code, tb.max_code), min_size=len(qa), max_size=len(qa)))
    q, rt = fixed.multiply(qa, ta, qb, tb)  # plain lists: numpy would make [0, 2**63 + 1] float64
    assert q.dtype == (np.int64 if rt.width + 1 <= fixed.INT64_SAFE_BITS else object)
    for a, b, r in zip(qa, qb, q):
        assert value(r, rt) == value(a, ta) * value(b, tb)
        assert rt.min_code <= r <= rt.max_code


def test_extreme_products_fit_the_product_type():
    """min * min is the largest product of two signed types; unsigned max * signed min the most negative."""
    for ta, tb in ((FixedType(8, 3), FixedType(5, 5)), (FixedType(8, 3, False), FixedType(5, -1)),
                   (FixedType(40, 10), FixedType(40, 10))):
        for a in (ta.min_code, ta.max_code):
            for b in (tb.min_code, tb.max_code):
                q, rt = fixed.multiply(np.array([a]), ta, np.array([b]), tb)
                assert rt.min_code <= int(q[0]) <= rt.max_code and value(q[0], rt) == value(a, ta) * value(b, tb)


@PROPERTY
@given(data=st.data())
def test_accumulate_is_exact_and_fits_its_result_type(data):
    t = data.draw(fixed_types(max_width=70))
    rows, n = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 40))
    edge = st.sampled_from([t.min_code, t.max_code])
    flat = data.draw(st.lists(st.one_of(edge, st.integers(t.min_code, t.max_code)), min_size=rows * n,
                              max_size=rows * n))
    q = np.array(flat, dtype=object).reshape(rows, n)
    s, rt = fixed.accumulate(q, t, axis=1)
    for row, total in zip(q, s):
        assert value(total, rt) == sum((value(c, t) for c in row), Fraction(0))
        assert rt.min_code <= total <= rt.max_code
    assert [n * t.min_code, n * t.max_code] == [int(v) for v in fixed.accumulate(
        np.array([[t.min_code] * n, [t.max_code] * n], dtype=object), t)[0]]


def test_accumulate_type_grows_by_the_exact_ceiling_of_log2():
    t = FixedType(8, 2)
    assert [fixed.accumulate_type(t, n).integer - 2 for n in (1, 2, 3, 4, 5, 1024, 1025)] == [0, 1, 2, 2, 3, 10, 11]
    assert fixed.accumulate_type(t, 2**60 + 1).integer == 2 + 61  # float log2 rounds this to 60


@PROPERTY
@given(t=fixed_types(max_width=70), n=st.integers(-20, 20), codes=st.data())
def test_shift_multiplies_by_a_power_of_two_without_touching_codes(t, n, codes):
    q = codes.draw(codes_of(t, 6))
    out, rt = fixed.shift(np.array(q, dtype=object), t, n)
    assert [value(a, rt) for a in out] == [value(a, t) * Fraction(2) ** n for a in q]
