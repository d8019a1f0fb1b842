"""Implementation flows: real yosys / nextpnr / packer runs (YoWASP wheels) on tiny hand-written designs.

The designs live in ``tests/flow_designs``; each test copies one into a fresh OUT under pytest's /tmp
folder, which also checks that the YoWASP tools are driven with relative paths (they cannot see /tmp).
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from bitforge.toolchain.errors import BitforgeError
from bitforge.toolchain.flows import tools
from bitforge.toolchain.flows.cache import sha256_file
from bitforge.toolchain.flows.constraints import assign_pins
from bitforge.toolchain.flows.implement import ManifestError, TimingWarning, implement
from bitforge.toolchain.flows.nextpnr import _raise_if_over_capacity
from bitforge.toolchain.flows.targets import TARGETS, DoesNotFit, UnknownTarget, get_target
from bitforge.toolchain.flows.warm import warm_tools
from bitforge.toolchain.flows.yosys import Port

DESIGNS = Path(__file__).parent / "flow_designs"


def make_design(root: Path, source: str, top: str, latency: int = 3, ii: int = 1) -> Path:
    """An OUT folder as the RTL backend leaves it: rtl/<source> and rtl/manifest.json."""
    out = root / "out"
    (out / "rtl").mkdir(parents=True)
    shutil.copy(DESIGNS / source, out / "rtl" / source)
    manifest = {"top": top, "files": [f"rtl/{source}"], "latency_cycles": latency, "ii": ii}
    (out / "rtl" / "manifest.json").write_text(json.dumps(manifest))
    return out


def mac(tmp_path: Path) -> Path:
    return make_design(tmp_path, "mac.v", "mac_top")


def report_entry(out: Path, target: str) -> dict:
    return json.loads((out / "report.json").read_text())["targets"][target]


# -- bitstreams ------------------------------------------------------------------------------------

# nextpnr's utilisation keys whose "available" count must equal the target database's budget. (ECP5-85F pins
# are left out: nextpnr counts the die's 365 pads, the CABGA381 package bonds 205.)
BUDGET_KEYS = {
    "ice40-up5k": {"lut": "ICESTORM_LC", "dsp": "ICESTORM_DSP", "bram": "ICESTORM_RAM", "io": "SB_IO"},
    "ecp5-25f": {"lut": "TRELLIS_COMB", "ff": "TRELLIS_FF", "dsp": "MULT18X18D", "bram": "DP16KD", "io": "TRELLIS_IO"},
    "ecp5-85f": {"lut": "TRELLIS_COMB", "ff": "TRELLIS_FF", "dsp": "MULT18X18D", "bram": "DP16KD"},
    "gowin-gw1nr9": {"lut": "LUT4", "ff": "DFF", "dsp": "MULT18X18", "bram": "BSRAM"},
}


@pytest.fixture(scope="module")
def implemented(tmp_path_factory):
    """The MAC implemented once per target for the tests that only read the results: target -> (OUT, entry)."""
    done: dict[str, tuple[Path, dict]] = {}

    def get(target: str) -> tuple[Path, dict]:
        if target not in done:
            out = mac(tmp_path_factory.mktemp(target))
            done[target] = (out, implement(out, target, seed=1))
        return done[target]
    return get


@pytest.mark.parametrize("target", ["ice40-up5k", "ecp5-25f", "gowin-gw1nr9",
                                    pytest.param("ecp5-85f", marks=pytest.mark.slow)])
def test_mac_reaches_a_bitstream(implemented, target):
    out, r = implemented(target)
    bitstream = out / r["bitstream"]
    assert bitstream.is_file() and bitstream.stat().st_size > 0
    assert r["sha256"] == sha256_file(bitstream)
    assert r["status"] == "ok" and report_entry(out, target) == r
    assert r["fmax_mhz"] > 0 and r["timing_met"] is True  # a 3-stage MAC runs at the board clock
    assert r["latency_ns"] == pytest.approx(3 * 1000 / r["fmax_mhz"], rel=1e-3)
    assert r["dsp"] >= 1, "the 16x16 multiply should land in a DSP block"
    assert r["lut"] > 0 and r["ff"] >= 16 + 16 + 32  # at least the operand and product registers
    assert set(r["logs"]) == {"yosys", "nextpnr", "pack"} and all((out / p).is_file() for p in r["logs"].values())
    assert "End of script" in (out / r["logs"]["yosys"]).read_text()
    assert "Device utilisation" in (out / r["logs"]["nextpnr"]).read_text()
    assert not any(s["cached"] for s in r["stages"].values())
    t = get_target(target)
    for resource, key in BUDGET_KEYS[target].items():
        assert getattr(t.budget, resource) == r["utilisation"][key]["available"], (resource, key)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["ice40-up5k", "ecp5-25f", "gowin-gw1nr9"])
def test_bitstream_is_identical_across_fresh_folders(implemented, tmp_path, target):
    _, first = implemented(target)
    second = implement(mac(tmp_path), target, seed=1)
    assert not second["cached"]
    assert first["sha256"] == second["sha256"]


def test_gowin_pin_file_puts_every_port_bit_on_its_own_real_pin(implemented):
    out, r = implemented("gowin-gw1nr9")
    cst = (out / r["pin_file"]).read_text()
    locs = dict(re.findall(r'IO_LOC "([^"]+)" (\d+);', cst))
    assert set(locs) == {"clk", "rst", "sin", "sout"}
    assert locs["clk"] == "52"  # the Tang Nano 9K's 27 MHz oscillator
    assert len(set(locs.values())) == len(locs)
    assert re.search(r'IO_PORT "rst" .*PULL_MODE=DOWN', cst)


def test_rerun_with_nothing_changed_is_cached_and_instant(implemented):
    out, first = implemented("ice40-up5k")
    messages = []
    second = implement(out, "ice40-up5k", progress=messages.append)
    assert second["cached"] and all(s["cached"] for s in second["stages"].values())
    assert second["seconds"] < 1.0
    assert second["sha256"] == first["sha256"]
    assert sum(": cached, inputs unchanged" in m for m in messages) == 3  # one line per stage


def test_cache_reruns_only_the_stages_whose_inputs_changed(tmp_path):
    out = mac(tmp_path)
    first = implement(out, "ice40-up5k")
    (out / first["bitstream"]).unlink()  # a missing output invalidates its stage only
    r = implement(out, "ice40-up5k")
    assert {k: s["cached"] for k, s in r["stages"].items()} == {"synth": True, "pnr": True, "pack": False}
    assert r["sha256"] == first["sha256"]
    with open(out / "rtl" / "mac.v", "a") as f:  # new bytes, same netlist: synthesis reruns, the rest is reused
        f.write("// a trailing comment\n")
    r = implement(out, "ice40-up5k")
    assert {k: s["cached"] for k, s in r["stages"].items()} == {"synth": False, "pnr": True, "pack": True}
    r = implement(out, "ice40-up5k", seed=2)  # a new seed is a new place and route
    assert {k: s["cached"] for k, s in r["stages"].items()} == {"synth": True, "pnr": False, "pack": False}


def test_a_long_tool_run_reports_progress_while_it_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(tools, "HEARTBEAT_S", 0.2)  # instead of 15 s, so a one-second yosys run shows it
    out = mac(tmp_path)
    messages = []
    tools.run_tool("yosys", ["-q", "-l", "y.log", "-p", "synth_ice40 -dsp -top mac_top", "rtl/mac.v"], out,
                   out / "y.console.log", tool_log=out / "y.log", label="yosys test", progress=messages.append)
    assert any(re.match(r"yosys test: \d+ s \.\.\. ", m) for m in messages), messages
    assert re.match(r"yosys test: done in \d+\.\d s", messages[-1])


def test_missed_timing_is_a_warning_and_recorded(tmp_path):
    out = mac(tmp_path)
    with pytest.warns(TimingWarning, match="timing not met"):
        r = implement(out, "ice40-up5k", clock_mhz=400)
    assert r["timing_met"] is False and r["fmax_mhz"] < 400
    assert r["warnings"] and "400 MHz" in r["warnings"][0]
    assert report_entry(out, "ice40-up5k")["timing_met"] is False


# -- synthesis-only targets --------------------------------------------------------------------------

def test_xc7a35t_is_a_synthesis_estimate_with_a_vivado_project(tmp_path):
    out = mac(tmp_path)
    r = implement(out, "xc7a35t", clock_mhz=125)
    assert r["bitstream"] is None and r["sha256"] is None and r["fmax_mhz"] is None and r["latency_ns"] is None
    assert "synthesis-only" in " ".join(r["notes"]) and "no bitstream" in " ".join(r["notes"])
    assert r["dsp"] >= 1 and r["lut"] > 0 and r["synthesis"]["cells"].get("DSP48E1", 0) >= 1
    tcl = (out / r["vivado"]["project"]).read_text()
    for step in ("create_project", "xc7a35tcsg324-1", "add_files", "../../../rtl/mac.v", "launch_runs synth_1",
                 "write_bitstream", "set_property top mac_top"):
        assert step in tcl, step
    assert "create_clock -name clk -period 8.000 [get_ports clk]" in (out / r["vivado"]["constraints"]).read_text()
    assert not list((out / "impl").rglob("*.bit"))


# -- bad input ---------------------------------------------------------------------------------------

def test_unknown_target_lists_the_targets(tmp_path):
    with pytest.raises(UnknownTarget) as e:
        implement(mac(tmp_path), "artix-9000")
    for name in TARGETS:
        assert name in str(e.value)
    assert isinstance(e.value, BitforgeError)


def test_twelve_multipliers_do_not_fit_an_up5k_and_nextpnr_never_runs(tmp_path):
    out = make_design(tmp_path, "mac12.v", "mac12_top")
    with pytest.raises(DoesNotFit) as e:
        implement(out, "ice40-up5k")
    message = str(e.value)
    assert "needs 12 DSP" in message and "ice40-up5k has 8" in message
    assert "--reuse" in message and "precision" in message
    bigger = re.search(r"a bigger target \((\S+) has (\d+) DSP\)", message)
    assert bigger, message
    assert get_target(bigger.group(1)).budget.dsp == int(bigger.group(2)) >= 12
    assert get_target(bigger.group(1)).makes_bitstream
    assert e.value.over["dsp"] == (12, 8)
    assert not (out / "impl" / "ice40-up5k" / "nextpnr.log").exists()
    entry = report_entry(out, "ice40-up5k")
    assert entry["status"] == "does-not-fit" and entry["bitstream"] is None and "needs 12 DSP" in entry["error"]


def test_verilog_syntax_error_names_the_log_and_the_line(tmp_path):
    out = make_design(tmp_path, "syntax_error.v", "broken_top")
    with pytest.raises(tools.ToolFailed) as e:
        implement(out, "ecp5-25f")
    log = out / "impl" / "ecp5-25f" / "yosys.log"
    assert str(log) in str(e.value) and e.value.log == log
    assert "syntax_error.v:7" in str(e.value) and "syntax error" in str(e.value)
    entry = report_entry(out, "ecp5-25f")
    assert entry["status"] == "failed" and entry["log"] == "impl/ecp5-25f/yosys.log"


def test_a_failed_rerun_replaces_an_earlier_success_in_the_report(tmp_path):
    out = mac(tmp_path)
    implement(out, "ice40-up5k")
    (out / "rtl" / "mac.v").write_text((DESIGNS / "syntax_error.v").read_text().replace("broken_top", "mac_top"))
    with pytest.raises(tools.ToolFailed):
        implement(out, "ice40-up5k")
    assert report_entry(out, "ice40-up5k")["status"] == "failed"


def test_missing_manifest_says_how_to_make_one(tmp_path):
    with pytest.raises(ManifestError, match="--to rtl"):
        implement(tmp_path, "ice40-up5k")


def test_manifest_listing_a_missing_file_names_it(tmp_path):
    out = mac(tmp_path)
    (out / "rtl" / "manifest.json").write_text(json.dumps(
        {"top": "mac_top", "files": ["rtl/mac.v", "rtl/gone.v"], "latency_cycles": 3, "ii": 1}))
    with pytest.raises(ManifestError, match="rtl/gone.v"):
        implement(out, "ice40-up5k")


def test_nextpnr_over_capacity_becomes_does_not_fit(tmp_path):
    log = tmp_path / "nextpnr.log"
    log.write_text("Info: Device utilisation:\n"
                   "Info: \t         ICESTORM_LC:     378/   5280     7%\n"
                   "Info: \t        ICESTORM_DSP:      12/      8   150%\n"
                   "ERROR: Unable to place cell 'p', no BELs remaining to implement cell type 'ICESTORM_DSP'\n")
    with pytest.raises(DoesNotFit, match="needs 12 DSP"):
        _raise_if_over_capacity(log, get_target("ice40-up5k"), "top")
    log.write_text("ERROR: something else\n")
    _raise_if_over_capacity(log, get_target("ice40-up5k"), "top")  # not a capacity problem: no DoesNotFit


# -- pieces ------------------------------------------------------------------------------------------

def test_pins_run_out_with_the_numbers():
    target = get_target("gowin-gw1nr9")
    board = target.flow.board_pins
    ports = [Port("clk", "input", 1), Port("rst", "input", 1), Port("data", "output", board.count)]
    with pytest.raises(DoesNotFit, match=f"{board.count + 2} port bits.*{board.count} pins"):
        assign_pins(ports, board, design="wide", target=target)


def test_cell_census_counts_in_the_budget_units():
    xc7 = get_target("xc7a35t")
    assert xc7.count_cells({"LUT6": 3, "LUT2": 1, "RAMB18E1": 3, "RAMB36E1": 1, "FDRE": 5, "DSP48E1": 2,
                            "CARRY4": 4}) == {"lut": 4, "ff": 5, "dsp": 2, "bram": 2.5}
    ecp5 = get_target("ecp5-85f")
    assert ecp5.count_cells({"LUT4": 10, "CCU2C": 3, "TRELLIS_FF": 7, "MULT18X18D": 1})["lut"] == 16


def test_warm_up_honours_yowasp_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("YOWASP_CACHE_DIR", str(tmp_path / "cache"))
    icepack = tools.TOOLS["icepack"]
    assert not tools.is_warm(icepack)
    messages = []
    warm_tools(["icepack"], progress=messages.append)
    assert "first run compiles" in messages[0] and str(tmp_path / "cache") in messages[0]
    assert tools.is_warm(icepack) and any((tmp_path / "cache").rglob("*"))
    messages.clear()
    warm_tools(["icepack"], progress=messages.append)
    assert messages == [f"icepack: ready (cached in {tmp_path / 'cache'})"]
