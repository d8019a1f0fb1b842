"""Gate-level check: the synthesised netlist of a target, simulated on Icarus with the family's cell models,
streams the RTL check's vectors and must equal the golden model (``bitforge simulate OUT --netlist T``)."""
from __future__ import annotations

import json
import random
import re
import subprocess
from pathlib import Path

import pytest
import torch
from bitforge.toolchain.cli import main
from bitforge.toolchain.compiler import CompileOptions, compile_model
from bitforge.toolchain.flows.tools import get_tool
from bitforge.toolchain.verify.netlist import (
    FLOW_CYCLE_BUDGET,
    NoCellModels,
    cell_model_files,
    check_netlist,
    flow_check,
    flow_vectors,
)
from bitforge.toolchain.verify.simulators import SimulationFailed
from torch import nn


@pytest.fixture(scope="module")
def tiny_dense(tmp_path_factory) -> Path:
    """A 2-input, 2-output dense layer (torch.export), quantized to 8 bits: synthesises in seconds."""
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(2, 2)).eval()
    path = tmp_path_factory.mktemp("tiny") / "tiny.pt2"
    torch.export.save(torch.export.export(model, (torch.randn(3, 2),)), str(path))
    return path


def compiled(model: Path, out: Path, **options) -> Path:
    compile_model(str(model), out, CompileOptions(to=("rtl",), precision="8", input_range=(-2.0, 2.0), vectors=100,
                                                  **options))
    return out


def test_tiny_dense_netlist_equals_the_golden_model_on_ice40(tiny_dense, tmp_path, capsys):
    out = compiled(tiny_dense, tmp_path / "out")
    assert main(["simulate", str(out), "--netlist", "ice40-up5k", "--vectors", "120"]) == 0
    assert "golden model vs netlist ice40-up5k: 120 vectors, 0 mismatches" in capsys.readouterr().out
    report = json.loads((out / "report.json").read_text())
    entry = report["verification"]["golden_vs_netlist"]["ice40-up5k"]
    assert (entry["vectors"], entry["mismatches"], entry["protocol_errors"]) == (120, 0, 0)
    assert entry["simulator"] == "icarus"
    netlist = out / entry["netlist"]
    assert netlist.is_file() and "SB_LUT4" in netlist.read_text()  # the mapped cells, not the RTL
    assert "netlist, ice40-up5k (gate level, icarus)" in (out / "report.md").read_text()


def test_folded_dense_netlist_with_dsp_blocks_equals_the_golden_model_on_ecp5(tiny_dense, tmp_path):
    """Reuse 2: the products go through MULT18X18D, which only bitforge's model simulates."""
    out = compiled(tiny_dense, tmp_path / "out", reuse=2, target="ecp5-25f")
    res = check_netlist(out, "ecp5-25f", 80)
    assert (res["vectors"], res["mismatches"]) == (80, 0)
    assert "MULT18X18D" in (out / res["netlist"]).read_text()
    assert res["cell_models"] == ["ecp5/cells_sim.v (yosys share)", "ecp5_hard_blocks.v"]


def test_a_netlist_that_differs_from_the_golden_model_fails_with_its_window(tiny_dense, tmp_path):
    """A weight changed in the generated Verilog (not in the graph): synthesis builds what the Verilog says,
    and the gate-level check reports the first differing vector and keeps the waveform of it."""
    out = compiled(tiny_dense, tmp_path / "out")
    layer = next(p for p in (out / "rtl").glob("*.v") if "board" not in p.name and "bf_" not in p.name
                 and re.search(r"\d+'sd\d+|\d+'h[0-9a-f]+", p.read_text()))
    text = layer.read_text()
    broken = re.sub(r"(\d+)'sd(\d+)", lambda m: f"{m.group(1)}'sd{int(m.group(2)) ^ 1}", text, count=1)
    if broken == text:
        broken = re.sub(r"(\d+)'h([0-9a-f])", lambda m: f"{m.group(1)}'h{int(m.group(2), 16) ^ 1:x}", text, count=1)
    assert broken != text
    layer.write_text(broken)
    with pytest.raises(SimulationFailed, match="first at vector") as e:
        check_netlist(out, "ice40-up5k", 120)
    waves = re.search(r"waveform: (\S+)\)", str(e.value)).group(1)
    assert Path(waves).name == "failure.vcd" and Path(waves).stat().st_size > 0
    entry = json.loads((out / "report.json").read_text())["verification"]["golden_vs_netlist"]["ice40-up5k"]
    assert entry["mismatches"] > 0 and out / entry["failure_waves"] == Path(waves)


def test_a_family_without_cell_models_is_a_clear_error(tiny_dense, tmp_path, capsys):
    out = compiled(tiny_dense, tmp_path / "out")
    assert main(["simulate", str(out), "--netlist", "xcvu9p"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--netlist xcvu9p" in err and "xilinx" in err and "ecp5 or ice40" in err
    with pytest.raises(NoCellModels):
        check_netlist(out, "xc7a35t")


def test_flow_records_a_skipped_gate_level_check_for_such_a_family(tmp_path):
    assert flow_check(tmp_path, "xcvu9p", 2000, 0) == {}
    entry = json.loads((tmp_path / "report.json").read_text())["verification"]["golden_vs_netlist"]["xcvu9p"]
    assert "no gate-level cell models for the xilinx family" in entry["skipped"]


def test_flow_spends_a_cycle_budget_on_the_gate_level_check():
    """Vectors of a folded design take II cycles each; the board's beats bound the rest."""
    folded = {"ii": 64, "bus_width": 8, "in_width": 256, "out_width": 80}
    assert flow_vectors(folded, 500) == FLOW_CYCLE_BUDGET // 64
    assert flow_vectors({**folded, "ii": 1, "in_width": 16, "out_width": 16}, 2000) == 200
    assert flow_vectors({**folded, "ii": 1000}, 2000) == 50  # never under 50: the edge cases come first
    assert flow_vectors({**folded, "ii": 1}, 30) == 30  # never more than the RTL check ran


def test_ecp5_models_replace_the_share_folders_black_boxes_once_each(tmp_path):
    files = cell_model_files("ecp5", tmp_path)
    text = "\n".join(p.read_text() for p in files)
    modules = re.findall(r"^\s*module\s+\\?([\w$]+)", text, re.M)
    assert len(modules) == len(set(modules)) and {"DP16KD", "MULT18X18D", "TRELLIS_FF", "LUT4", "CCU2C"} <= set(modules)
    assert "`include" not in files[0].read_text()


# -- bitforge's ECP5 hard-block models against yosys's own mapping ---------------------------------------------

ROMS = """
module hard_blocks (input wire clk, input wire [8:0] a36, input wire [9:0] a18, input wire [10:0] a9,
                    input wire signed [17:0] x, input wire signed [17:0] y, input wire [17:0] ux, input wire [17:0] uy,
                    output reg [35:0] d36, output reg [17:0] d18, output reg [8:0] d9,
                    output wire signed [35:0] p_ss, output wire [35:0] p_uu, output wire signed [35:0] p_su);
    (* rom_style = "block" *) reg [35:0] rom36 [0:511];
    (* rom_style = "block" *) reg [17:0] rom18 [0:1023];
    (* rom_style = "block" *) reg [8:0] rom9 [0:2047];
    initial begin
        $readmemh("rom36.hex", rom36);
        $readmemh("rom18.hex", rom18);
        $readmemh("rom9.hex", rom9);
    end
    always @(posedge clk) begin
        d36 <= rom36[a36];
        d18 <= rom18[a18];
        d9 <= rom9[a9];
    end
    assign p_ss = x * y;
    assign p_uu = ux * uy;
    assign p_su = x * $signed({1'b0, uy[16:0]});
endmodule
"""
BENCH = """
`timescale 1ns/1ps
module tb;
    reg clk = 0;
    reg [8:0] a36; reg [9:0] a18; reg [10:0] a9; reg signed [17:0] x, y; reg [17:0] ux, uy;
    wire [35:0] d36_r, d36_g, p_ss_r, p_ss_g, p_uu_r, p_uu_g, p_su_r, p_su_g;
    wire [17:0] d18_r, d18_g; wire [8:0] d9_r, d9_g;
    hard_blocks rtl (clk, a36, a18, a9, x, y, ux, uy, d36_r, d18_r, d9_r, p_ss_r, p_uu_r, p_su_r);
    hard_blocks_netlist gl (clk, a36, a18, a9, x, y, ux, uy, d36_g, d18_g, d9_g, p_ss_g, p_uu_g, p_su_g);
    always #5 clk = ~clk;
    integer i, bad = 0;
    initial begin
        for (i = 0; i < 3000; i = i + 1) begin
            @(negedge clk);
            if (i > 1 && {d36_r, d18_r, d9_r, p_ss_r, p_uu_r, p_su_r} !== {d36_g, d18_g, d9_g, p_ss_g, p_uu_g, p_su_g})
                bad = bad + 1;
            a36 = $random; a18 = $random; a9 = $random; x = $random; y = $random; ux = $random; uy = $random;
        end
        $display("MISMATCHES %0d", bad);
        $finish;
    end
endmodule
"""


def test_ecp5_hard_block_models_match_the_rtl_yosys_mapped(tmp_path):
    """ROMs in every DP16KD width bitforge models (x36 pseudo dual port, x18, x9) and signed, unsigned and mixed
    18x18 products: the netlist, simulated with ecp5_hard_blocks.v, equals the RTL cycle by cycle."""
    rng = random.Random(5)
    for name, words, width in (("rom36", 512, 36), ("rom18", 1024, 18), ("rom9", 2048, 9)):
        (tmp_path / f"{name}.hex").write_text("".join(f"{rng.getrandbits(width):x}\n" for _ in range(words)))
    (tmp_path / "hard_blocks.v").write_text(ROMS)
    script = ("read_verilog hard_blocks.v; synth_ecp5 -top hard_blocks; rename hard_blocks hard_blocks_netlist; "
              "setundef -zero -undriven -params; splitnets; write_verilog -noattr netlist.v")
    run = subprocess.run(get_tool("yosys").argv(["-q", "-p", script]), cwd=tmp_path, capture_output=True, text=True,
                         timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    netlist = (tmp_path / "netlist.v").read_text()
    widths = set(re.findall(r"\.DATA_WIDTH_[AB]\(32'd(\d+)\)", netlist))
    assert {"36", "18", "9"} <= widths and netlist.count("MULT18X18D ") >= 3
    (tmp_path / "tb.v").write_text(BENCH)
    sources = ["tb.v", "hard_blocks.v", "netlist.v", *map(str, cell_model_files("ecp5", tmp_path / "models"))]
    subprocess.run(["iverilog", "-g2012", "-o", "tb.vvp", *sources], cwd=tmp_path, check=True, capture_output=True)
    sim = subprocess.run(["vvp", "-n", "tb.vvp"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert "MISMATCHES 0" in sim.stdout, sim.stdout[-2000:] + sim.stderr[-2000:]


# -- the reference designs (slow: synthesis and minutes of gate-level simulation) ----------------------

@pytest.mark.slow
def test_jet_mlp_netlist_on_ecp5_85f_equals_the_golden_model(tmp_path):
    """jet-mlp folded as ``flow`` builds it for an ECP5-85F (reuse auto: II 64, MULT18X18D and DP16KD ROMs)."""
    out = tmp_path / "jet"
    compile_model("jet-mlp", out, CompileOptions(to=("rtl",), reuse="auto", target="ecp5-85f", vectors=100))
    res = check_netlist(out, "ecp5-85f", 200)
    assert (res["vectors"], res["mismatches"], res["protocol_errors"], res["tlast_errors"]) == (200, 0, 0, 0)
    netlist = (out / res["netlist"]).read_text()
    assert "MULT18X18D " in netlist and "DP16KD " in netlist


@pytest.mark.slow
def test_kan_tracker_netlist_on_ice40_up5k_equals_the_golden_model(tmp_path):
    """kan-tracker on an UP5K: SB_MAC16 for the basis powers and the coefficient products."""
    out = tmp_path / "kt"
    compile_model("kan-tracker", out, CompileOptions(to=("rtl",), vectors=100))
    res = check_netlist(out, "ice40-up5k", 200)
    assert (res["vectors"], res["mismatches"], res["protocol_errors"], res["tlast_errors"]) == (200, 0, 0, 0)
    assert "SB_MAC16" in (out / res["netlist"]).read_text()
