"""Datapath modules of rtl/ bit-exact against fixed.py: bf_mul, bf_const_mul, bf_adder_tree, bf_bias_requant.

Each DUT is a pipe (input bus -> output bus) with a random clock enable, so the registered variants are
checked for both their values and their latency: a result one enabled cycle early or late is a mismatch.
"""
from __future__ import annotations

import pytest
from lib_designs import BIASES, CONST_MULS, MULS, TREES, library_results, tree_latency
from rtl_bench import SIMULATORS, assert_ok


@pytest.fixture(scope="module", params=SIMULATORS)
def results(request):
    return library_results(request.param)


@pytest.mark.parametrize("name", list(MULS))
def test_mul_matches_fixed_multiply_then_requantize(results, name):
    assert_ok(results, name)


@pytest.mark.parametrize("name", list(CONST_MULS))
def test_const_mul_shift_and_add_equals_fixed_multiply(results, name):
    assert_ok(results, name)


@pytest.mark.parametrize("name", list(TREES))
def test_adder_tree_sums_exactly_with_its_stated_latency(results, name):
    assert_ok(results, name)


@pytest.mark.parametrize("name", list(BIASES))
def test_bias_requant_matches_the_tail_of_dense_stage(results, name):
    assert_ok(results, name)


def test_tree_latency_is_levels_over_levels_per_stage():
    # 7 inputs: 3 levels, a register after each; 5: 3 levels, one register (after level 2); 1: no levels;
    # 16: 4 levels, a register after level 3 only.
    assert [tree_latency(n, lps) for n, _, lps in TREES.values()] == [3, 1, 0, 1]
