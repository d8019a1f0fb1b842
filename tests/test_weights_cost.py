"""bench.weights_cost: --weights rom against ram, same model and reuse, one run."""
from __future__ import annotations

import json

import pytest
from bitforge.toolchain.bench import weights_cost
from bitforge.toolchain.compiler import CompileOptions, compile_model
from bitforge.toolchain.errors import BitforgeError


def test_the_loader_becomes_the_top_and_drives_the_whole_write_port(tmp_path):
    out = tmp_path / "kt"
    compile_model("kan-tracker", out, CompileOptions(to=("rtl",), weights="ram"))
    top = weights_cost.add_loader(out)
    man = json.loads((out / "rtl" / "manifest.json").read_text())
    assert man["top"] == man["board_top"] == top and f"rtl/{top}.v" in man["files"]
    text = (out / "rtl" / f"{top}.v").read_text()
    w = man["weights"]
    assert f".wr_addr(ld[{w['addr_bits'] + w['word_bits'] - 1}:{w['word_bits']}])" in text
    assert f".wr_data(ld[{w['word_bits'] - 1}:0])" in text


def test_a_rom_design_gets_no_loader(tmp_path):
    out = tmp_path / "kt"
    compile_model("kan-tracker", out, CompileOptions(to=("rtl",)))
    with pytest.raises(BitforgeError, match="not a --weights ram design"):
        weights_cost.add_loader(out)


def test_bad_reuse_and_unknown_targets_fail_before_building(tmp_path):
    with pytest.raises(BitforgeError, match="reuse must be a positive integer"):
        weights_cost.measure("kan-tracker", "auto", work=tmp_path)
    with pytest.raises(BitforgeError, match="nope"):
        weights_cost.measure("kan-tracker", 1, targets=("nope",), work=tmp_path)
    assert not any(tmp_path.iterdir())


def test_table_puts_ram_beside_rom():
    rows = [{"model": "m", "reuse": 4, "target": "t", "weights": "rom", "lut": 1000, "ff": 10, "dsp": 2, "bram": 0,
             "fmax_mhz": 50.0},
            {"model": "m", "reuse": 4, "target": "t", "weights": "ram", "lut": 1200, "ff": 30, "dsp": 2, "bram": 1,
             "fmax_mhz": 45.5}]
    assert "| m | 4 | t | 1,000 / 1,200 | 10 / 30 | 2 / 2 | 0 / 1 | 50.0 / 45.5 |" in weights_cost.table(rows)


@pytest.mark.slow
def test_measure_places_and_routes_both_designs_in_one_run(tmp_path):
    rows = weights_cost.measure("kan-tracker", 1, targets=("ice40-up5k",), work=tmp_path)
    assert [(r["weights"], r["target"]) for r in rows] == [("rom", "ice40-up5k"), ("ram", "ice40-up5k")]
    rom, ram = rows
    assert rom["fmax_mhz"] and ram["fmax_mhz"] and not rom.get("error") and not ram.get("error")
    # The coefficients move from constant multiplexers into writable registers (the UP5K has no LUT RAM).
    assert ram["ff"] > rom["ff"]
    assert ram["dsp"] == rom["dsp"]
