"""cocotb bench for --weights ram: stream vectors, rewrite the parameters through wr_*, stream again.

Configuration from the JSON file named by ``BITFORGE_WEIGHTS_BENCH``: ``vectors`` (an .npz), ``phases`` (each
optional ``words`` to write first, as (address, word) pairs in the order they are written, then the ``inputs``
and ``expected`` arrays of the .npz to stream and compare), ``seed``, ``result``. Writes happen one a clock while
nothing is in flight (the core's contract); the streams keep the shared source, sink and protocol monitors.
"""
from __future__ import annotations

import json
import os
import random
from collections import deque

import cocotb
import numpy as np
from bitforge.toolchain.backends.rtl.verilog import pack_word, unpack_word
from bitforge.toolchain.verify.axis import (
    AxisSink,
    AxisSource,
    axis_ports,
    clock_cycle,
    protocol_errors,
    random_pauses,
    start_clock_and_reset,
)


class WritePort:
    """Drives wr_en/wr_addr/wr_data: one queued (address, word) a clock, idle (wr_en low) otherwise."""

    def __init__(self, dut):
        self.dut = dut
        self.queue: deque[tuple[int, int]] = deque()
        self.written = 0
        dut.wr_en.value = 0
        dut.wr_addr.value = 0
        dut.wr_data.value = 0

    def drive(self) -> None:
        if self.queue:
            addr, word = self.queue.popleft()
            self.dut.wr_en.value = 1
            self.dut.wr_addr.value = addr
            self.dut.wr_data.value = word
            self.written += 1
        else:
            self.dut.wr_en.value = 0

    def sample(self) -> None:
        pass


@cocotb.test()
async def reload_weights(dut):
    """Each phase's outputs equal its model's golden outputs bit for bit, after its words were written."""
    with open(os.environ["BITFORGE_WEIGHTS_BENCH"]) as f:
        cfg = json.load(f)
    data = np.load(cfg["vectors"])
    rng = random.Random(cfg["seed"])
    iw, ow, count, signed = cfg["in_width"], cfg["out_width"], cfg["out_count"], cfg["out_signed"]
    source = AxisSource(axis_ports(dut, "s_axis"), random_pauses(0.2, rng))
    sink = AxisSink(axis_ports(dut, "m_axis"), random_pauses(0.3, rng))
    writer = WritePort(dut)
    await start_clock_and_reset(dut)

    results, sent, cycles = [], 0, 0
    for phase in cfg["phases"]:
        for addr, word in phase.get("words", []):
            writer.queue.append((int(addr), int(word)))
        while writer.queue:
            await clock_cycle(dut.clk, source, sink, writer)
            cycles += 1
        await clock_cycle(dut.clk, source, sink, writer)  # wr_en low again before the first sample
        xs, expected = data[phase["inputs"]], data[phase["expected"]]
        for x in xs:
            source.send(pack_word(x, iw), int(sent % 7 == 6))
            sent += 1
        limit = cycles + 40 * len(xs) * cfg["ii"] + 2000
        while len(sink.received) < sent and cycles < limit:
            await clock_cycle(dut.clk, source, sink, writer)
            cycles += 1
        got = [unpack_word(d or 0, count, ow, signed) for d, _ in sink.received[sent - len(xs):sent]]
        bad = [i for i, (g, e) in enumerate(zip(got, expected)) if g != [int(v) for v in e]]
        results.append({"name": phase["name"], "vectors": len(xs), "received": len(got), "mismatches": len(bad),
                        "first_mismatch": None if not bad else {"index": bad[0], "got": got[bad[0]],
                                                                 "expected": [int(v) for v in expected[bad[0]]]}})
    errors = protocol_errors(source, sink)
    lasts = [last for _, last in sink.received]
    with open(cfg["result"], "w") as f:
        json.dump({"phases": results, "cycles": cycles, "written": writer.written,
                   "protocol_errors": [str(e) for e in errors[:3]],
                   "tlast_ok": lasts == [int(i % 7 == 6) for i in range(len(lasts))]}, f, indent=2)
    assert not errors, f"AXI4-Stream protocol error: {errors[0]}"
    for r in results:
        assert r["received"] == r["vectors"], f"{r['name']}: {r['received']} of {r['vectors']} outputs arrived"
        assert r["mismatches"] == 0, f"{r['name']}: {r['mismatches']} mismatches; first {r['first_mismatch']}"
