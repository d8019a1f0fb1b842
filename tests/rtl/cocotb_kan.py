"""cocotb bench for one KAN stage (the emitter's wrapper around bf_kan_layer): stage ports, not AXI.

Loaded by the simulator as a top-level module. ``KAN_BENCH`` names a JSON file: the vectors (.npz with
``inputs`` and ``expected`` int64 codes from the golden model), element widths and counts, the latency the
emitter promised, stall probabilities, the seed and where to write the result.

Sampling as in bitforge.toolchain.verify.cocotb_bench: drive at the falling edge, let combinational logic
settle (ReadOnly), then record the handshakes the next rising edge performs; identical on Icarus and Verilator.
"""
from __future__ import annotations

import json
import os
import random

import cocotb
import numpy as np
from bitforge.toolchain.backends.rtl.verilog import pack_word as pack, unpack_word as unpack
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly


def _config() -> dict:
    with open(os.environ["KAN_BENCH"]) as f:
        return json.load(f)


async def _reset(dut) -> None:
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.in_valid.value = 0
    dut.in_data.value = 0
    dut.out_ready.value = 0
    await ClockCycles(dut.clk, 3)
    await FallingEdge(dut.clk)
    dut.rst.value = 0


def _mismatch(cfg: dict, xs, want, got, i: int) -> str:
    def show(codes, width, frac):
        return ", ".join(f"0x{int(c) & ((1 << width) - 1):0{(width + 3) // 4}x} ({int(c) * 2.0 ** -frac:g})"
                         for c in codes)
    return (f"vector {i}: input [{show(xs[i], cfg['in_width'], cfg['in_frac'])}] expected "
            f"[{show(want, cfg['out_width'], cfg['out_frac'])}] got [{show(got, cfg['out_width'], cfg['out_frac'])}]")


def _vectors(cfg: dict) -> tuple[np.ndarray, np.ndarray]:
    with np.load(cfg["vectors"]) as data:
        return data["inputs"], data["expected"]


def _write_result(cfg: dict, name: str, result: dict) -> None:
    path = cfg["result"]
    doc = {}
    if os.path.exists(path):
        with open(path) as f:
            doc = json.load(f)
    doc[name] = result
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)


@cocotb.test()
async def latency_and_full_rate(dut):
    """One sample comes out after exactly the promised latency; then a burst runs at II = 1 with no stall."""
    cfg = _config()
    xs, expected = _vectors(cfg)
    await _reset(dut)
    dut.out_ready.value = 1
    dut.in_valid.value = 1
    dut.in_data.value = pack(xs[0], cfg["in_width"])
    await ReadOnly()
    assert int(dut.in_ready.value) == 1, "in_ready low after reset with out_ready high"
    await FallingEdge(dut.clk)
    dut.in_valid.value = 0
    cycles = 1
    while True:
        await ReadOnly()
        if int(dut.out_valid.value):
            break
        assert cycles <= cfg["latency"], f"no output within the promised latency of {cfg['latency']} cycles"
        await FallingEdge(dut.clk)
        cycles += 1
    assert cycles == cfg["latency"], f"output after {cycles} cycles, the emitter promised {cfg['latency']}"
    got = unpack(int(dut.out_data.value), cfg["out_count"], cfg["out_width"], cfg["out_signed"])
    assert got == list(expected[0]), _mismatch(cfg, xs, expected[0], got, 0)
    await FallingEdge(dut.clk)

    burst = min(len(xs), cfg["burst"])
    received = []
    for t in range(burst + cfg["latency"] + 1):
        dut.in_valid.value = int(t < burst)
        if t < burst:
            dut.in_data.value = pack(xs[t], cfg["in_width"])
        await ReadOnly()
        if t < burst:
            assert int(dut.in_ready.value) == 1, f"in_ready dropped at burst cycle {t} with out_ready high: II > 1"
        if int(dut.out_valid.value):
            received.append(unpack(int(dut.out_data.value), cfg["out_count"], cfg["out_width"], cfg["out_signed"]))
        await FallingEdge(dut.clk)
    assert len(received) == burst, f"{len(received)} outputs for a burst of {burst}"
    for i, got in enumerate(received):
        assert got == list(expected[i]), _mismatch(cfg, xs, expected[i], got, i)
    _write_result(cfg, "latency_and_full_rate", {"latency": cycles, "burst": burst})


@cocotb.test()
async def stream_with_backpressure(dut):
    """Every vector, random input gaps and output stalls: bit-exact, in order, out_data held while stalled."""
    cfg = _config()
    xs, expected = _vectors(cfg)
    n = len(xs)
    rng = random.Random(cfg["seed"])
    await _reset(dut)
    sent, got, cycles, held = 0, [], 0, None
    while len(got) < n:
        await FallingEdge(dut.clk)
        cycles += 1
        assert cycles <= cfg["max_cycles"], f"only {len(got)} of {n} outputs within {cfg['max_cycles']} cycles"
        valid = sent < n and rng.random() >= cfg["p_input_gap"]
        dut.in_valid.value = int(valid)
        if valid:
            dut.in_data.value = pack(xs[sent], cfg["in_width"])
        ready = rng.random() >= cfg["p_output_stall"]
        dut.out_ready.value = int(ready)
        await ReadOnly()
        out_valid = int(dut.out_valid.value)
        word = int(dut.out_data.value) if out_valid else None
        if held is not None:
            assert out_valid and word == held, (f"output {len(got)} changed or vanished while stalled: "
                                                f"held 0x{held:x}, now valid={out_valid} data={word}")
        if valid and int(dut.in_ready.value):
            sent += 1
        if out_valid and ready:
            codes = unpack(word, cfg["out_count"], cfg["out_width"], cfg["out_signed"])
            i = len(got)
            assert codes == list(expected[i]), _mismatch(cfg, xs, expected[i], codes, i)
            got.append(codes)
        held = word if out_valid and not ready else None
    _write_result(cfg, "stream_with_backpressure", {"vectors": n, "mismatches": 0, "cycles": cycles})
