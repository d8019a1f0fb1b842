"""The UART front end (rtl/bf_uart_rx.v, rtl/bf_uart_tx.v) on Icarus and Verilator, and through yosys for iCE40.

One wrapper top per simulator holds every device under test (a Verilator build costs 15-40 s), and one
simulation runs every cocotb test of tests/rtl/cocotb_uart.py; each pytest test here asserts the outcome of
one of them. Clocks per bit are small where the test allows (the bench is Python-bound per event); the
loopback also runs 104 (12 MHz / 115200), which the bench reaches by waking only on stream edges.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest
from bitforge.toolchain.verify.simulators import run_cocotb
from rtl_bench import BUILD_ROOT, HERE, RTL, SIMULATORS, top_text

BENCH = "cocotb_uart"
TOP = "uart_bench"
SOURCES = [RTL / "bf_uart_rx.v", RTL / "bf_uart_tx.v"]
PLAN = {
    "period_ps": 10_000,
    "seed": 17,
    "rx": [4, 5, 8, 16],      # 4: the smallest; 5: odd; 8 and 16: majority-of-3 sampling
    "tolerant": [5, 8, 16],   # +-3 %: at 4 clocks per bit the tolerance is -2.6 % .. +5.2 % (bf_uart_rx.v)
    "wide": 16,               # +-7 % must fail here
    "majority": [8, 16],      # sampled as the majority of three clocks: a one-clock spike cannot flip a bit
    "tx": [4, 5, 16],
    "loop": [4, 5, 16, 104],
}


def wrapper() -> str:
    ports, body = [], []
    for n in PLAN["rx"]:
        ports += [f"input wire rx{n}_rx", f"output wire rx{n}_m_valid", f"output wire [7:0] rx{n}_m_data",
                  f"output wire rx{n}_frame_err"]
        body.append(f"bf_uart_rx #(.CLKS_PER_BIT({n})) u_rx{n} (.clk(clk), .rst(rst), .rx(rx{n}_rx), "
                    f".m_valid(rx{n}_m_valid), .m_data(rx{n}_m_data), .frame_err(rx{n}_frame_err));")
    for n in PLAN["tx"]:
        ports += [f"input wire tx{n}_s_valid", f"output wire tx{n}_s_ready", f"input wire [7:0] tx{n}_s_data",
                  f"output wire tx{n}_tx", f"output wire tx{n}_busy"]
        body.append(f"bf_uart_tx #(.CLKS_PER_BIT({n})) u_tx{n} (.clk(clk), .rst(rst), .s_valid(tx{n}_s_valid), "
                    f".s_ready(tx{n}_s_ready), .s_data(tx{n}_s_data), .tx(tx{n}_tx), .busy(tx{n}_busy));")
    for n in PLAN["loop"]:
        ports += [f"input wire lb{n}_s_valid", f"output wire lb{n}_s_ready", f"input wire [7:0] lb{n}_s_data",
                  f"output wire lb{n}_m_valid", f"output wire [7:0] lb{n}_m_data", f"output wire lb{n}_frame_err"]
        body += [f"wire lb{n}_pin;",
                 f"bf_uart_tx #(.CLKS_PER_BIT({n})) u_lb{n}_tx (.clk(clk), .rst(rst), .s_valid(lb{n}_s_valid), "
                 f".s_ready(lb{n}_s_ready), .s_data(lb{n}_s_data), .tx(lb{n}_pin), .busy());",
                 f"bf_uart_rx #(.CLKS_PER_BIT({n})) u_lb{n}_rx (.clk(clk), .rst(rst), .rx(lb{n}_pin), "
                 f".m_valid(lb{n}_m_valid), .m_data(lb{n}_m_data), .frame_err(lb{n}_frame_err));"]
    return top_text(TOP, ports, body)


def _outcomes(xml) -> dict[str, str]:
    """cocotb test name -> '' (passed) or its failure message."""
    out = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        out[case.get("name")] = "" if bad is None else (bad.get("message") or bad.text or "failed").strip()
    return out


@pytest.fixture(scope="module", params=SIMULATORS)
def outcomes(request):
    simulator = request.param
    build = BUILD_ROOT / f"uart-{simulator}"
    build.mkdir(parents=True, exist_ok=True)
    with open(build / ".lock", "w") as lock:  # two xdist workers on one simulator take turns
        fcntl.flock(lock, fcntl.LOCK_EX)
        top = build / f"{TOP}.v"
        text = wrapper()
        if not top.exists() or top.read_text() != text:  # an unchanged file keeps its date: no Icarus rebuild
            top.write_text(text)
        saved = os.environ.get("MAKEFLAGS")
        # A few hundred thousand clocks: an unoptimised Verilator model builds much faster and runs fast enough.
        os.environ["MAKEFLAGS"] = " ".join(filter(None, [saved, "OPT_FAST=-O0 OPT_SLOW=-O0 OPT_GLOBAL=-O0"]))
        try:
            result = run_cocotb(simulator, [*SOURCES, top], TOP, BENCH, HERE, build,
                                extra_env={"BF_UART_PLAN": json.dumps(PLAN)})
        finally:
            if saved is None:
                os.environ.pop("MAKEFLAGS", None)
            else:
                os.environ["MAKEFLAGS"] = saved
        return _outcomes(result.results_xml)


def _check(outcomes: dict[str, str], name: str) -> None:
    assert name in outcomes, f"cocotb test {name} did not run; ran {sorted(outcomes)}"
    assert outcomes[name] == "", outcomes[name]


def test_receives_random_bytes_at_the_nominal_rate(outcomes):
    _check(outcomes, "receive_at_the_nominal_rate")


def test_receives_random_bytes_at_plus_and_minus_3_percent_baud_error(outcomes):
    _check(outcomes, "receive_at_3_percent_baud_error")


def test_7_percent_baud_error_shows_up_as_wrong_bytes(outcomes):
    _check(outcomes, "receive_at_7_percent_baud_error_fails")


def test_spike_under_one_clock_inside_a_bit_is_outvoted(outcomes):
    _check(outcomes, "spike_under_one_clock_is_outvoted")


def test_glitch_shorter_than_half_a_bit_is_not_a_start_bit(outcomes):
    _check(outcomes, "glitch_shorter_than_half_a_bit_is_not_a_start")


def test_low_stop_bit_gives_one_frame_err_and_no_byte(outcomes):
    _check(outcomes, "low_stop_bit_gives_one_frame_err_and_no_byte")


def test_break_gives_one_frame_err_then_reception_resumes(outcomes):
    _check(outcomes, "break_gives_one_frame_err_then_reception_resumes")


def test_transmitter_bit_times_framing_and_handshake(outcomes):
    _check(outcomes, "transmit_bit_times_framing_and_handshake")


def test_loopback_carries_every_byte_value(outcomes):
    _check(outcomes, "loopback_every_byte_value")


# -- synthesis ---------------------------------------------------------------------------------------------------

def test_both_modules_synthesise_for_ice40(tmp_path):
    """synth_ice40 at 12 MHz / 115200: a handful of LUTs and flip-flops each, no RAM or DSP."""
    from bitforge.toolchain.flows.tools import get_tool  # finds the YoWASP wheel whether or not the venv is on PATH

    work = BUILD_ROOT / "yosys-uart"  # YoWASP cannot see /tmp: relative paths in the repository's build folder
    work.mkdir(parents=True, exist_ok=True)
    for src in SOURCES:
        shutil.copy(src, work / src.name)
    script = "".join(f"design -reset\nread_verilog {src.name}\nchparam -set CLKS_PER_BIT 104 {src.stem}\n"
                     f"synth_ice40 -top {src.stem}\ntee -q -o {src.stem}.stat.txt stat\n" for src in SOURCES)
    (work / "uart.ys").write_text(script)
    r = subprocess.run(get_tool("yosys").argv(["-q", "-l", "uart.log", "-s", "uart.ys"]), cwd=work,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"yosys failed ({work / 'uart.log'}): {r.stderr[-2000:]}"
    for src in SOURCES:
        stat = (work / f"{src.stem}.stat.txt").read_text()
        cells = {m.group(2): int(m.group(1)) for m in re.finditer(r"^\s+(\d+)\s+(SB_\w+)", stat, re.M)}
        if not cells:
            cells = {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s+(SB_\w+)\s+(\d+)", stat, re.M)}
        luts = cells.get("SB_LUT4", 0)
        ffs = sum(v for k, v in cells.items() if k.startswith("SB_DFF"))
        assert 5 <= luts <= 80 and 10 <= ffs <= 48, f"{src.stem}: {luts} LUTs, {ffs} flip-flops\n{stat}"
        assert not any(k.startswith(("SB_RAM", "SB_MAC")) for k in cells), f"{src.stem}: {cells}"
