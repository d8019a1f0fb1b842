"""The shared AXI4-Stream source, sink and protocol monitor (bitforge.toolchain.verify.axis).

The monitor's rules are checked on recorded signal traces (no simulator); the mutation tests stream through
the bench of ``bitforge simulate`` a register stage whose values are right whenever they are taken but whose
tdata (or tlast) moves while it is stalled: only the protocol check can catch it, and it must.
"""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from bitforge.toolchain.fixed import FixedType
from bitforge.toolchain.verify.axis import AxisMonitor, AxisSink, AxisSource, StreamPorts, random_pauses
from bitforge.toolchain.verify.simulate import BenchDesign, run_bench
from cocotb.types import LogicArray


class Signal:
    """A stand-in for a cocotb handle: ``value`` reads back a LogicArray of what was written (an int, or a
    one-character string such as "x" for every bit)."""

    def __init__(self, width: int):
        self.width = width
        self.value = 0

    @property
    def value(self):
        return self._value

    @value.setter
    def value(self, v):
        self._value = LogicArray(v * self.width) if isinstance(v, str) else LogicArray.from_unsigned(int(v), self.width)


def stream(width: int = 8) -> StreamPorts:
    return StreamPorts("s", Signal(1), Signal(1), Signal(width), Signal(1))


def monitor_over(trace) -> AxisMonitor:
    """A monitor fed one cycle per (valid, ready, data, last) tuple."""
    p = stream()
    mon = AxisMonitor(p, clock=lambda: 0.0)
    for valid, ready, data, last in trace:
        p.valid.value, p.ready.value, p.data.value, p.last.value = valid, ready, data, last
        mon.sample()
    return mon


def test_monitor_records_transfers_in_order():
    mon = monitor_over([(1, 0, 5, 0), (1, 1, 5, 0), (0, 1, 9, 0), (1, 1, 7, 1)])
    assert mon.transfers == [(5, 0), (7, 1)] and mon.transfer_cycles == [1, 3] and not mon.errors


def test_a_word_held_while_stalled_is_legal():
    assert not monitor_over([(1, 0, 3, 1), (1, 0, 3, 1), (1, 0, 3, 1), (1, 1, 3, 1)]).errors


def test_tdata_that_moves_while_stalled_is_an_error():
    (e,) = monitor_over([(1, 0, 3, 0), (1, 1, 4, 0)]).errors
    assert e.cycle == 1 and "tdata changed while word 0 was stalled" in e.message and "0x3 -> 0x4" in e.message


def test_tlast_that_moves_while_stalled_is_an_error():
    (e,) = monitor_over([(1, 0, 3, 0), (1, 1, 3, 1)]).errors
    assert "tlast changed" in e.message


def test_tvalid_that_falls_without_a_transfer_is_an_error():
    (e,) = monitor_over([(1, 0, 3, 0), (0, 1, 3, 0)]).errors
    assert "tvalid fell without a transfer" in e.message


def test_unknown_tvalid_and_unknown_words_are_errors():
    assert "tvalid is" in monitor_over([("x", 1, 0, 0)]).errors[0].message
    mon = monitor_over([(1, 1, "x", 0)])
    assert "taken with X or Z bits" in mon.errors[0].message and mon.transfers == [(None, 0)]


def test_source_holds_its_word_until_taken():
    """Against a design that takes words at random, the source's own monitor sees no broken rule and every
    word arrives once, in order."""
    rng = random.Random(3)
    p = stream()
    source = AxisSource(p, random_pauses(0.5, rng))
    source.monitor.clock = lambda: 0.0
    words = list(range(40))
    for w in words:
        source.send(w, int(w % 3 == 2))
    for _ in range(400):
        source.drive()
        p.ready.value = int(rng.random() < 0.5)
        source.sample()
    assert source.monitor.transfers == [(w, int(w % 3 == 2)) for w in words] and not source.monitor.errors


def test_source_pauses_only_between_words_and_sink_stalls_as_told():
    p, q = stream(), stream()
    source = AxisSource(p, iter([True, False, True, True, False] + [False] * 10))
    sink = AxisSink(q, iter([True, False, False, True] + [False] * 10), free_first=0)
    source.monitor.clock = sink.monitor.clock = lambda: 0.0
    source.send(1)
    source.send(2)
    valid, ready = [], []
    for taken in (0, 0, 1, 0, 0, 0, 1, 0):
        source.drive()
        sink.drive()
        valid.append(int(p.valid.value))
        ready.append(int(q.ready.value))
        p.ready.value = taken
        source.sample()
        sink.sample()
    assert valid == [0, 1, 1, 0, 0, 1, 1, 0]  # paused, offered until taken, paused twice, offered until taken
    assert ready[:4] == [0, 1, 1, 0]


# -- mutation: a stage whose output moves while stalled --------------------------------------------------------

STAGE = """
`default_nettype none
module {name} (
    input  wire clk, input wire rst,
    input  wire s_axis_tvalid, output wire s_axis_tready, input wire [15:0] s_axis_tdata, input wire s_axis_tlast,
    output wire m_axis_tvalid, input wire m_axis_tready, output wire [15:0] m_axis_tdata, output wire m_axis_tlast
);
    // One register: a word waits in it until taken. The mutants show another word while stalled and the
    // right one whenever m_axis_tready is high, so every word the sink takes is right.
    reg full, last_q;
    reg [15:0] q;
    assign s_axis_tready = !full || m_axis_tready;
    always @(posedge clk) begin
        if (rst) full <= 1'b0;
        else if (s_axis_tvalid && s_axis_tready) begin
            full <= 1'b1;
            q <= s_axis_tdata;
            last_q <= s_axis_tlast;
        end else if (m_axis_tready) full <= 1'b0;
    end
    assign m_axis_tvalid = full;
    assign m_axis_tdata = {data};
    assign m_axis_tlast = {last};
endmodule
`default_nettype wire
"""
MUTANTS = {"axis_reg_ok": ("q", "last_q"), "axis_reg_data_moves": ("m_axis_tready ? q : ~q", "last_q"),
           "axis_reg_last_moves": ("q", "m_axis_tready ? last_q : ~last_q")}
T8 = FixedType(8, 4)


def run_stage(tmp_path: Path, name: str, simulator: str = "icarus"):
    data, last = MUTANTS[name]
    src = tmp_path / f"{name}.v"
    src.write_text(STAGE.format(name=name, data=data, last=last))
    xs = np.random.default_rng(0).integers(T8.min_code, T8.max_code + 1, size=(300, 2))
    design = BenchDesign((src,), name, T8, T8, ii=1, latency=1)
    return run_bench(simulator, design, xs, xs, tmp_path / "work", seed=1)


def test_a_correct_stage_passes_the_bench(tmp_path):
    res, outcome = run_stage(tmp_path, "axis_reg_ok")
    assert not outcome.failed and (res["mismatches"], res["protocol_errors"], res["tlast_errors"]) == (0, 0, 0)


@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
def test_a_stage_whose_tdata_moves_while_stalled_fails(tmp_path, simulator):
    res, outcome = run_stage(tmp_path, "axis_reg_data_moves", simulator)
    assert res["mismatches"] == 0 and res["received"] == 300  # every word taken was right ...
    assert outcome.failed and res["protocol_errors"] > 0  # ... and the bench fails it anyway
    assert "tdata changed while word" in res["first_protocol_error"]["message"]
    assert "protocol error" in outcome.failures[0] and "m_axis" in outcome.failures[0]


def test_a_stage_whose_tlast_moves_while_stalled_fails(tmp_path):
    res, outcome = run_stage(tmp_path, "axis_reg_last_moves")
    assert outcome.failed and res["mismatches"] == 0 and res["tlast_errors"] == 0
    assert "tlast changed while word" in res["first_protocol_error"]["message"]
