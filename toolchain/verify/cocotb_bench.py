"""cocotb test bench for a generated core: streams golden vectors through it with random stalls on both sides.

Loaded by the simulator as a plain top-level module (so absolute imports only). Configuration comes from the
JSON file named by ``BITFORGE_BENCH``: the vectors (.npz with ``inputs`` and ``expected`` int64 codes), the
element widths and types, the stall probabilities and the seed, and where to write the result JSON.

One coroutine, one step per clock: drive at the falling edge, let combinational logic settle (ReadOnly),
then record which handshakes the next rising edge will perform. This samples the same way on Icarus and
Verilator, whatever their scheduling differences at the clock edge.
"""
from __future__ import annotations

import json
import os
import random

import cocotb
import numpy as np
from bitforge.toolchain.backends.rtl.verilog import pack_word, unpack_word
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly


def _describe(codes, width: int, frac: int) -> dict:
    return {"hex": [f"{int(c) & ((1 << width) - 1):0{(width + 3) // 4}x}" for c in codes],
            "real": [int(c) * 2.0 ** -frac for c in codes], "codes": [int(c) for c in codes]}


async def start_and_reset(dut, cycles: int = 4) -> None:
    """Start the 100 MHz clock, hold reset for ``cycles`` with both streams idle, release it at a falling edge."""
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.s_axis_tvalid.value = 0
    dut.s_axis_tdata.value = 0
    dut.s_axis_tlast.value = 0
    dut.m_axis_tready.value = 0
    await ClockCycles(dut.clk, cycles)
    await FallingEdge(dut.clk)
    dut.rst.value = 0


@cocotb.test()
async def stream_golden_vectors(dut):
    """Every output equals the golden model's, bit for bit, under random input gaps and output backpressure."""
    with open(os.environ["BITFORGE_BENCH"]) as f:
        cfg = json.load(f)
    data = np.load(cfg["vectors"])
    xs, expected = data["inputs"], data["expected"]
    n = len(xs)
    rng = random.Random(cfg["seed"])
    iw, ow = cfg["in_width"], cfg["out_width"]
    last_every = cfg.get("last_every", 7)

    await start_and_reset(dut)

    sent = 0
    got = []
    lasts = []
    cycles = 0
    limit = cfg["max_cycles"]
    while len(got) < n:
        await FallingEdge(dut.clk)
        cycles += 1
        if cycles > limit:
            break
        valid = sent < n and rng.random() >= cfg["p_input_gap"]
        dut.s_axis_tvalid.value = int(valid)
        if valid:
            dut.s_axis_tdata.value = pack_word(xs[sent], iw)
            dut.s_axis_tlast.value = int(sent % last_every == last_every - 1)
        ready = rng.random() >= cfg["p_output_stall"]
        dut.m_axis_tready.value = int(ready)
        await ReadOnly()
        if valid and int(dut.s_axis_tready.value):
            sent += 1
        if ready and int(dut.m_axis_tvalid.value):
            got.append(unpack_word(int(dut.m_axis_tdata.value), cfg["out_count"], ow, cfg["out_signed"]))
            lasts.append(int(dut.m_axis_tlast.value))

    got_a = np.array(got, dtype=np.int64).reshape(len(got), cfg["out_count"]) if got else np.zeros((0, cfg["out_count"]))
    bad = [i for i in range(len(got)) if not np.array_equal(got_a[i], expected[i])]
    last_bad = [i for i, v in enumerate(lasts) if v != int(i % last_every == last_every - 1)]
    result = {"vectors": n, "received": len(got), "mismatches": len(bad) + (n - len(got)), "cycles": cycles,
              "tlast_errors": len(last_bad)}
    if bad:
        i = bad[0]
        result["first_mismatch"] = {"index": i, "input": _describe(xs[i], iw, cfg["in_frac"]),
                                    "expected": _describe(expected[i], ow, cfg["out_frac"]),
                                    "got": _describe(got_a[i], ow, cfg["out_frac"])}
    with open(cfg["result"], "w") as f:
        json.dump(result, f, indent=2)
    assert len(got) == n, (f"only {len(got)} of {n} outputs arrived within {limit} cycles: the design stalls "
                           "or drops samples")
    assert not bad, (f"{len(bad)} of {n} outputs differ from the golden model; first at vector {bad[0]}: "
                     f"{json.dumps(result['first_mismatch'])}")
    assert not last_bad, f"tlast out of order at output {last_bad[0]}"
