"""Integer multipliers for float scales and exact float biases (toolchain/multiplier.py)."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from bitforge.toolchain.multiplier import MultiplierError, bias_codes, dyadic_frac, multiplier


@pytest.mark.parametrize("bits", [16, 24, 32])
def test_multiplier_keeps_bits_minus_one_significant_bits_of_the_largest_channel(bits):
    m = np.array([0.00307102, 0.0012, 0.75, 1.9e-5])
    mult = multiplier(m, bits)
    assert mult.codes.max() < 2 ** (bits - 1) <= 2 * mult.codes.max()  # the largest fills the width
    approx = np.ldexp(mult.codes.astype(np.float64), -mult.type.frac)
    # Rounding to nearest: within half an LSB of 2**-frac for every channel.
    assert np.all(np.abs(approx - m) <= 2.0 ** -(mult.type.frac + 1))
    assert mult.max_rel_error == pytest.approx(float(np.max(np.abs(approx - m) / m)))
    assert mult.codes.min() >= mult.type.min_code and mult.type.width == bits


def test_a_multiplier_that_rounds_up_to_the_next_power_of_two_gives_up_one_fraction_bit():
    just_below = 1.0 - 2.0 ** -40  # rounds to 2**15 at 16 bits, which does not fit a signed 16-bit code
    mult = multiplier([just_below], 16)
    assert mult.codes[0] == 2 ** 14 and mult.type.frac == 14


@pytest.mark.parametrize("bad", [[0.0], [-0.5], [float("nan")], []])
def test_multiplier_refuses_what_has_no_integer_form(bad):
    with pytest.raises(MultiplierError):
        multiplier(bad)
    with pytest.raises(MultiplierError, match="16 to 32"):
        multiplier([0.5], bits=12)


def test_float32_biases_are_exact_on_their_own_grid_and_rounded_on_a_coarser_one():
    b = np.array([-0.06580283, 0.04319843, 0.36965913], dtype=np.float32).astype(np.float64)
    need = max(dyadic_frac(v) for v in b)
    exact = bias_codes(b, max_frac=need + 3)
    assert exact.exact and exact.frac == need
    assert all(Fraction(int(c), 2 ** exact.frac) == Fraction(v) for c, v in zip(exact.codes, b))
    coarse = bias_codes(b, max_frac=8)
    assert coarse.frac == 8 and not coarse.exact
    assert coarse.max_change == pytest.approx(float(np.max(np.abs(coarse.codes / 256 - b))))
    assert coarse.max_change <= 2.0 ** -9


def test_dyadic_frac_of_integers_and_powers_of_two():
    assert dyadic_frac(0.375) == 3 and dyadic_frac(1.0) <= 0 and dyadic_frac(6.0) <= 0
    assert bias_codes([4.0, -2.0], max_frac=10).codes.tolist() == [4, -2]
