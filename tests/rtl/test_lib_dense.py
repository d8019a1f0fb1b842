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
from bitforge.toolchain.flows.yosys import read_cell_census
from lib_designs import (
    SEED,
    dense_layers,
    dense_node,
    emit,
    features,
    library_design,
    library_results,
)
from rtl_bench import SIMULATORS, assert_ok, top_text
from test_lib_yosys import WORK, _failure, _yosys


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
    for name in ("par_sparse_narrow", "par_per_weight"):
        st = stages[name]
        node = dense_layers(np.random.default_rng(SEED))[name][0]
        nonzero = int(np.count_nonzero(node.weight))
        assert st.resources["zero_weights_skipped"] == node.weight.size - nonzero > 0
    assert stages["par_per_weight"].resources["multipliers"] == nonzero
    assert f".TERMS({max(np.count_nonzero(node.weight, axis=1))})" in stages["par_per_weight"].instance


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
    # Folded, 5 inputs, 3 outputs, R = 3: one group of 5 lanes finishes a row per cycle (C = 3 cycles of
    # work), a 5-leaf tree (3 levels, 1 register), then the accumulator and the output register.
    assert dense.folded_tiling(5, 3, 3) == dense.FoldedTiling(s=5, g=1, t=1, q=3)
    assert dense.folded_latency(5, 3, 3) == 3 + 3 + 1
    # 6 inputs, 4 outputs, R = 7: 2 groups of 2 lanes, 3 cycles a row, 2 passes: 6 of the 7 cycles work.
    assert dense.folded_tiling(6, 4, 7) == dense.FoldedTiling(s=2, g=2, t=3, q=2)
    assert dense.folded_latency(6, 4, 7) == 6 + 3 + 0


def test_folded_tiling_of_the_jet_layers_uses_products_over_reuse_multipliers():
    # R divides the outputs: trees over whole rows, no accumulation (T = 1), one requantizer per group.
    assert dense.folded_tiling(16, 64, 32) == dense.FoldedTiling(s=16, g=2, t=1, q=32)
    assert dense.folded_tiling(64, 32, 32) == dense.FoldedTiling(s=64, g=1, t=1, q=32)
    # R is a multiple of the outputs: one lane, one accumulator per output.
    assert dense.folded_tiling(32, 5, 32) == dense.FoldedTiling(s=1, g=5, t=32, q=1)
    assert [dense.folded_multipliers(*shape, 32) for shape in ((16, 64), (64, 32), (32, 32), (32, 5))] == \
        [32, 64, 32, 5]


def test_folded_tiling_fits_the_reuse_factor_and_covers_the_matrix():
    for n_in in range(1, 13):
        for n_out in range(1, 13):
            for reuse in range(1, n_in * n_out + 1):
                t = dense.folded_tiling(n_in, n_out, reuse)
                assert t.cycles <= reuse and t.s * t.t >= n_in and t.g * t.q >= n_out, (n_in, n_out, reuse, t)
                assert t.lanes >= -(-(n_in * n_out) // reuse)
                # No idle multiplier: the last lane of a group and the last group of a pass have real work.
                assert (t.s - 1) * t.t < n_in and (t.q - 1) * t.g < n_out, (n_in, n_out, reuse, t)


def test_canonical_signed_digits_rebuild_the_value_without_adjacent_non_zeros():
    for v in range(-700, 701):
        d = dense.csd_digits(v)
        assert sum(x << k for k, x in enumerate(d)) == v
        assert all(not (a and b) for a, b in zip(d, d[1:])), (v, d)


def test_shift_add_cost_counts_adders_after_the_first_digit():
    # 127 = 128 - 1: one subtractor; 91 = 128 - 32 - 4 - 1: three; -1: a negation; 0 and 4: nothing.
    assert [dense.constant_multiplier_adders(c) for c in (127, 91, -1, 0, 4)] == [1, 3, 1, 0, 0]


# -- synthesis: the weight ROM is block RAM, one DSP block per multiplier -------------------------------------

ROM_LAYER = "fold_r19_padded"
SYNTH = {"ecp5": "synth_ecp5", "ice40": "synth_ice40 -dsp"}


@pytest.fixture(scope="module")
def rom_layer_cells():
    """Cell counts of the block-ROM layer synthesised for ECP5 and iCE40, and its stage."""
    node, xt, yt, reuse, options = dense_layers(np.random.default_rng(SEED))[ROM_LAYER]
    st = emit(node, xt, yt, reuse, options, "d_")
    n_in, n_out = features(node)
    ports = ["input wire d_in_valid", "output wire d_in_ready", f"input wire [{n_in * xt.width - 1}:0] d_in_data",
             "output wire d_out_valid", "input wire d_out_ready", f"output wire [{n_out * yt.width - 1}:0] d_out_data"]
    WORK.mkdir(parents=True, exist_ok=True)
    (WORK / f"{ROM_LAYER}.v").write_text(top_text(ROM_LAYER, ports, [st.instance]))
    files = " ".join([*st.library, f"{ROM_LAYER}.v"])
    script = "".join(f"design -reset\nread_verilog -defer {files}\n{synth} -top {ROM_LAYER}\n"
                     f"tee -q -o {ROM_LAYER}.{arch}.json stat -json\n" for arch, synth in SYNTH.items())
    r = _yosys(script, f"{ROM_LAYER}_rom")
    assert r.returncode == 0, _failure(r, f"{ROM_LAYER}_rom")
    return {arch: read_cell_census(WORK / f"{ROM_LAYER}.{arch}.json") for arch in SYNTH}, st


def test_block_rom_layer_asks_for_block_ram_and_small_ones_do_not(stages):
    assert ".ROM_STYLE(1)" in stages[ROM_LAYER].instance and stages["fold_r19_padded"].reuse >= \
        dense.BLOCK_ROM_MIN_DEPTH
    assert ".ROM_STYLE(0)" in stages["fold_r3"].instance


def test_folded_weights_are_block_ram_not_luts(rom_layer_cells):
    cells, st = rom_layer_cells
    tiling = dense.folded_tiling(5, 11, 19)
    word_bits = st.resources["rom_bits"] // 19
    assert word_bits == tiling.lanes * 6 + 3 + tiling.g * 8  # weights, flags, the groups' biases
    # ECP5: 36-bit words in PDPW16KD mode (DP16KD cells); iCE40: 16-bit words in SB_RAM40_4K.
    assert cells["ecp5"].get("DP16KD", 0) == -(-word_bits // 36)
    assert cells["ice40"].get("SB_RAM40_4K", 0) == -(-word_bits // 16)


def test_folded_multipliers_are_one_dsp_block_each(rom_layer_cells):
    cells, st = rom_layer_cells
    assert cells["ecp5"].get("MULT18X18D", 0) == st.resources["multipliers"] == 4
    assert cells["ice40"].get("SB_MAC16", 0) == 4
