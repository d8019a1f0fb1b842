"""bf_requant against fixed.requantize: all 7 rounding x 4 overflow modes, for type pairs chosen where bugs live.

Per type pair, 28 instances (every mode pair) share one input bus; the narrow pairs see every input code,
the 40-bit pair random and edge codes (lib_designs.REQUANT_PAIRS says why each pair is there).
"""
from __future__ import annotations

import pytest
from lib_designs import MODES, REQUANT_PAIRS, library_results
from rtl_bench import SIMULATORS, assert_ok


@pytest.fixture(scope="module", params=SIMULATORS)
def results(request):
    return library_results(request.param)


@pytest.mark.parametrize("pair", list(REQUANT_PAIRS))
def test_requant_matches_fixed_requantize_in_all_28_modes(results, pair):
    assert len(MODES) == 28
    assert_ok(results, pair)
