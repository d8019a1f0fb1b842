"""Waveforms: ``bitforge simulate --waves`` writes one per run and prints its path (a VCD from Icarus, an FST
from Verilator), and a failed run leaves the waveform of its failing window without being asked."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from bitforge.toolchain.cli import main
from bitforge.toolchain.compiler import CompileOptions, compile_model
from bitforge.toolchain.fixed import FixedType
from bitforge.toolchain.verify.simulate import CLOCK_PERIOD_NS, BenchDesign, run_bench
from bitforge.toolchain.verify.waves import WINDOW_AFTER_CYCLES, WINDOW_BEFORE_CYCLES, verilator_fst


def vcd_times_ps(path: Path) -> tuple[list[str], list[int]]:
    """(variable names, every timestamp in ps) of a VCD whose timescale is 1 ps."""
    text = path.read_text()
    assert re.search(r"\$timescale\s+1ps\s+\$end", text), "expected Icarus's 1 ps timescale"
    names = re.findall(r"^\$var \S+ \d+ \S+ (\S+)", text, re.M)
    times = [int(t) for t in re.findall(r"^#(\d+)$", text, re.M)]
    return names, times


@pytest.fixture(scope="module")
def kan_tracker(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("waves") / "kt"
    compile_model("kan-tracker", out, CompileOptions(to=("rtl",), vectors=100))
    return out


def test_icarus_waves_are_a_vcd_of_the_whole_run_and_the_path_is_printed(kan_tracker, capsys):
    assert main(["simulate", str(kan_tracker), "--simulator", "icarus", "--vectors", "40", "--waves"]) == 0
    path = kan_tracker / "sim" / "icarus" / "waves.vcd"
    assert str(path) in capsys.readouterr().out
    names, times = vcd_times_ps(path)
    assert {"s_axis_tdata", "m_axis_tdata", "m_axis_tready"} <= set(names)
    report = json.loads((kan_tracker / "report.json").read_text())["verification"]["golden_vs_rtl"]["icarus"]
    assert report["waves"] == "sim/icarus/waves.vcd" and report["mismatches"] == 0  # relative: flow moves OUT
    assert times[0] == 0 and times[-1] >= report["cycles"] * CLOCK_PERIOD_NS * 1000  # from reset to the last output


def test_verilator_waves_are_an_fst(kan_tracker, capsys):
    assert main(["simulate", str(kan_tracker), "--simulator", "verilator", "--vectors", "40", "--waves"]) == 0
    path = kan_tracker / "sim" / "verilator" / ("waves.fst" if verilator_fst() else "waves.vcd")
    assert str(path) in capsys.readouterr().out
    head = path.read_bytes()[:64]
    if verilator_fst():
        assert head[0] == 0 and len(path.read_bytes()) > 1000  # FST's header block (type 0) opens the file
    else:
        assert head.startswith(b"$")


# A register stage that is right until its 250th word, then returns one with the lowest bit flipped: a failure
# late enough that the kept window starts well after reset.
LATE_BUG = """
`default_nettype none
module late_bug (
    input  wire clk, input wire rst,
    input  wire s_axis_tvalid, output wire s_axis_tready, input wire [15:0] s_axis_tdata, input wire s_axis_tlast,
    output wire m_axis_tvalid, input wire m_axis_tready, output wire [15:0] m_axis_tdata, output wire m_axis_tlast
);
    reg full, last_q;
    reg [15:0] q;
    reg [9:0] taken;
    assign s_axis_tready = !full || m_axis_tready;
    always @(posedge clk) begin
        if (rst) begin
            full <= 1'b0;
            taken <= 10'd0;
        end else if (s_axis_tvalid && s_axis_tready) begin
            full <= 1'b1;
            q <= s_axis_tdata ^ (taken == 10'd250 ? 16'd1 : 16'd0);
            last_q <= s_axis_tlast;
            taken <= taken + 10'd1;
        end else if (m_axis_tready) full <= 1'b0;
    end
    assign m_axis_tvalid = full;
    assign m_axis_tdata = q;
    assign m_axis_tlast = last_q;
endmodule
`default_nettype wire
"""


@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
def test_a_failure_keeps_the_waveform_of_its_window(tmp_path, simulator):
    src = tmp_path / "late_bug.v"
    src.write_text(LATE_BUG)
    t = FixedType(8, 4)
    xs = np.random.default_rng(2).integers(t.min_code, t.max_code + 1, size=(400, 2))
    res, outcome = run_bench(simulator, BenchDesign((src,), "late_bug", t, t, ii=1, latency=1), xs, xs,
                             tmp_path / "work", seed=3)
    assert outcome.failed and res["mismatches"] == 1 and res["first_mismatch"]["index"] == 250
    fail = res["first_failure"]
    assert fail["kind"] == "mismatch" and fail["cycle"] > WINDOW_BEFORE_CYCLES + 50
    path = Path(res["failure_waves"])
    rerun = json.loads((tmp_path / "work" / "failure_result.json").read_text())
    assert rerun["first_failure"] == fail  # the rerun repeated the very same failure ...
    assert rerun["cycles"] == fail["cycle"] + WINDOW_AFTER_CYCLES  # ... and stopped just after it
    if simulator == "icarus":
        names, times = vcd_times_ps(path)
        assert "m_axis_tdata" in names
        start = (fail["time_ns"] - WINDOW_BEFORE_CYCLES * CLOCK_PERIOD_NS) * 1000
        assert times[0] == start and times[-1] <= (fail["time_ns"] + (WINDOW_AFTER_CYCLES + 1) * CLOCK_PERIOD_NS) * 1000
        assert times[-1] > fail["time_ns"] * 1000
    else:
        assert path.suffix == (".fst" if verilator_fst() else ".vcd") and path.stat().st_size > 1000
