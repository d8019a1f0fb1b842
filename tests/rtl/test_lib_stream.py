"""Stream modules of rtl/ under random gaps and backpressure: skid buffer, FIFO, serialize/deserialize,
ReLU and requantize stages (the last two bit-exact against the golden model's rules).
"""
from __future__ import annotations

import pytest
from lib_designs import BEATS, FIFO_DEPTH_LOG2, library_results
from rtl_bench import SIMULATORS, assert_ok


@pytest.fixture(scope="module", params=SIMULATORS)
def results(request):
    return library_results(request.param)


def test_skid_buffer_passes_every_sample_in_order_under_backpressure(results):
    assert_ok(results, "skid")


def test_skid_buffer_ready_is_a_register(results):
    # The bench fails the DUT if in_ready moves within a cycle in which out_ready moved.
    assert assert_ok(results, "skid")["ready_checks"] > 50


def test_skid_buffer_runs_at_full_rate_with_one_cycle_latency(results):
    r = assert_ok(results, "skid")
    assert (r["latency"], r["ii_min"], r["ii_max"]) == (1, 1, 1)


def test_skid_buffer_holds_two_samples_when_stalled(results):
    assert assert_ok(results, "skidfill")["capacity"] == 2


def test_fifo_holds_exactly_its_depth_then_drains_in_order(results):
    assert assert_ok(results, "fifo")["capacity"] == 1 << FIFO_DEPTH_LOG2


def test_fifo_runs_at_full_rate(results):
    r = assert_ok(results, "fiforate")
    assert (r["latency"], r["ii_min"], r["ii_max"]) == (1, 1, 1)


def test_relu_stage_matches_the_golden_model_rule(results):
    r = assert_ok(results, "relu")
    assert (r["latency"], r["ii_max"]) == (1, 1)


def test_requantize_stage_matches_fixed_requantize(results):
    r = assert_ok(results, "req")
    assert (r["latency"], r["ii_max"]) == (1, 1)


def test_serialize_sends_beats_lsb_first_with_tlast_on_the_last(results):
    r = assert_ok(results, "ser")
    assert (r["latency"], r["ii_min"], r["ii_max"]) == (1, BEATS, BEATS)


def test_deserialize_rebuilds_words_and_resyncs_on_early_tlast(results):
    r = assert_ok(results, "des")
    assert r["latency"] == BEATS and r["ii_max"] == 1
