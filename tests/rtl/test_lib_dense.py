"""Dense, LowRankDense, ReLU and Requantize emitters + bf_dense_parallel / bf_dense_folded, bit-exact against
emulate.dense_stage, with the latency and II each emitter states measured on the simulators.

Every layer below is emitted by toolchain/backends/rtl/dense.py exactly as the RTL generator would emit it
(the stage ports are the wrapper's ports), so the test covers the emitter's parameters and the library.
"""
from __future__ import annotations

import numpy as np
import pytest

from bitforge.toolchain.backends.rtl import dense
from bitforge.toolchain.backends.rtl.generate import RtlError
from bitforge.toolchain.backends.rtl.stages import MULTIPLIES
from bitforge.toolchain.fixed import parse_type

from lib_designs import SEED, dense_layers, dense_node, emit, library_design, library_results
from rtl_bench import SIMULATORS, assert_ok


@pytest.fixture(scope="module")
def stages():
    return library_design()[3]


@pytest.fixture(scope="module", params=SIMULATORS)
def results(request):
    return library_results(request.param)


LAYERS = list(dense_layers(np.random.default_rng(0)))


@pytest.mark.parametrize("layer", LAYERS)
def test_layer_matches_golden_model_under_backpressure(results, layer):
    assert_ok(results, layer)


@pytest.mark.parametrize("layer", LAYERS)
def test_measured_latency_and_ii_equal_the_emitters(results, stages, layer):
    r, st = assert_ok(results, layer), stages[layer]
    assert (r["latency"], r["ii_min"], r["ii_max"]) == (st.latency, st.ii, st.ii)


def test_parallel_form_drops_zero_weights(stages):
    st = stages["par_sparse_sat"]
    node = dense_layers(np.random.default_rng(SEED))["par_sparse_sat"][0]
    nonzero = int(np.count_nonzero(node.weight))
    assert st.resources["multipliers"] == nonzero < node.weight.size
    assert st.resources["zero_weights_skipped"] == node.weight.size - nonzero
    assert f".TERMS({max(np.count_nonzero(node.weight, axis=1))})" in st.instance


def test_folded_form_uses_ceil_products_over_reuse_multipliers(stages):
    st = stages["fold_r3"]
    assert st.ii == st.reuse == 3 and st.resources["multipliers"] == -(-15 // 3)
    assert "bf_dense_folded" in st.instance and "bf_dense_folded.v" in st.library


def test_reuse_beyond_the_product_count_is_clamped():
    rng = np.random.default_rng(1)
    x, w = parse_type("fixed<8,3>"), parse_type("fixed<6,2>")
    node = dense_node("fc", 3, 2, w, None, parse_type("fixed<20,11>"), rng)
    st = emit(node, x, x, 100, {}, "a_")
    assert (st.reuse, st.ii, st.resources["multipliers"]) == (6, 6, 1)


def test_emitted_text_is_deterministic():
    assert library_design()[0] == library_design()[0]


def test_multiplies_registered_for_reuse_choice():
    rng = np.random.default_rng(2)
    layers = dense_layers(rng)
    assert MULTIPLIES["Dense"](layers["fold_r3"][0]) == 15
    assert MULTIPLIES["LowRankDense"](layers["lowrank_folded"][0]) == 6 * 3 + 3 * 4


def test_missing_accumulator_type_is_a_clear_error():
    rng = np.random.default_rng(3)
    x, w = parse_type("fixed<8,3>"), parse_type("fixed<6,2>")
    node = dense_node("fc_noacc", 3, 2, w, None, None, rng)
    with pytest.raises(RtlError, match=r"Dense 'fc_noacc': accum_type is not set; run the precision pass"):
        emit(node, x, x, 1, {}, "a_")


def test_weights_outside_their_type_are_refused():
    rng = np.random.default_rng(4)
    x, w = parse_type("fixed<8,3>"), parse_type("fixed<4,1>")
    node = dense_node("fc_big", 3, 2, w, None, parse_type("fixed<20,12>"), rng)
    node.weight[0, 0] = 40
    with pytest.raises(RtlError, match=r"fc_big.*weight codes span .* outside fixed<4,1"):
        emit(node, x, x, 1, {}, "a_")


def test_latency_formulas():
    # Parallel: product + output registers + one tree register per 2 levels.
    assert [dense.parallel_latency(t) for t in (1, 2, 4, 5, 16)] == [2, 2, 3, 3, 4]
    # Folded, 5 inputs, 3 outputs, R = 3: rows [0,5) [5,10) [10,15) touch lanes {0,1}, {1,2,3}, {3,4}.
    assert dense.folded_fragments(5, 3, 3) == 3
    assert dense.folded_latency(5, 3, 3) == 3 + 3 + 1


def test_canonical_signed_digits_rebuild_the_value_without_adjacent_non_zeros():
    for v in range(-700, 701):
        d = dense.csd_digits(v)
        assert sum(x << k for k, x in enumerate(d)) == v
        assert all(not (a and b) for a, b in zip(d, d[1:])), (v, d)


def test_shift_add_cost_counts_adders_after_the_first_digit():
    # 127 = 128 - 1: one subtractor; 91 = 128 - 32 - 4 - 1: three; -1: a negation; 0 and 4: nothing.
    assert [dense.constant_multiplier_adders(c) for c in (127, 91, -1, 0, 4)] == [1, 3, 1, 0, 0]
