"""cocotb bench for one KAN stage (the emitter's wrapper around bf_kan_layer): stage ports, not AXI.

Loaded by the simulator as a top-level module. ``KAN_BENCH`` names a JSON file: the vectors (.npz with
``inputs`` and ``expected`` int64 codes from the golden model), element widths and counts, the latency the
emitter promised, stall probabilities, the seed and where to write the result.

Both streams go through the shared AXI4-Stream source, sink and protocol monitors of
bitforge.toolchain.verify.axis (drive at the falling edge, settle, sample what the rising edge takes; identical
on Icarus and Verilator), so a stage whose out_data moves while it is stalled fails here too.
"""
from __future__ import annotations

import json
import os
import random

import cocotb
import numpy as np
from bitforge.toolchain.backends.rtl.verilog import pack_word as pack, unpack_word as unpack
from bitforge.toolchain.verify.axis import (
    AxisSink,
    AxisSource,
    clock_cycle,
    protocol_errors,
    random_pauses,
    stage_ports,
    start_clock_and_reset,
)


def _config() -> dict:
    with open(os.environ["KAN_BENCH"]) as f:
        return json.load(f)


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


def _streams(dut, rng: random.Random | None = None, cfg: dict | None = None) -> tuple[AxisSource, AxisSink]:
    """The stage's source and sink: without ``rng`` no gaps and no stalls."""
    gaps = random_pauses(cfg["p_input_gap"], rng) if rng else None
    stalls = random_pauses(cfg["p_output_stall"], rng) if rng else None
    return AxisSource(stage_ports(dut, "in"), gaps), AxisSink(stage_ports(dut, "out"), stalls)


def _check_outputs(cfg: dict, xs, expected, words, indices) -> None:
    """``words`` (data, last) as the sink took them are the outputs of vectors ``indices``."""
    for (data, _), i in zip(words, indices, strict=True):
        codes = unpack(data, cfg["out_count"], cfg["out_width"], cfg["out_signed"])
        assert codes == list(expected[i]), _mismatch(cfg, xs, expected[i], codes, i)


@cocotb.test()
async def latency_and_full_rate(dut):
    """One sample comes out after exactly the promised latency; then a burst runs at II = 1 with no stall."""
    cfg = _config()
    xs, expected = _vectors(cfg)
    source, sink = _streams(dut)
    await start_clock_and_reset(dut, 3)
    source.send(pack(xs[0], cfg["in_width"]))
    while not sink.received:
        await clock_cycle(dut.clk, source, sink)
        assert sink.monitor.cycle <= cfg["latency"] + 1, f"no output within the promised latency of {cfg['latency']}"
    assert source.accept_cycles[0] == 0, "in_ready low after reset with out_ready high"
    latency = sink.receive_cycles[0] - source.accept_cycles[0]
    assert latency == cfg["latency"], f"output after {latency} cycles, the emitter promised {cfg['latency']}"

    burst = min(len(xs), cfg["burst"])
    for x in xs[:burst]:
        source.send(pack(x, cfg["in_width"]))
    for _ in range(burst + cfg["latency"] + 1):
        await clock_cycle(dut.clk, source, sink)
    accepts = source.accept_cycles[1:]
    assert len(accepts) == burst and accepts[-1] - accepts[0] == burst - 1, (
        f"a burst of {burst} took cycles {accepts[0]}..{accepts[-1] if accepts else None} with out_ready high: II > 1")
    assert len(sink.received) == 1 + burst, f"{len(sink.received) - 1} outputs for a burst of {burst}"
    assert not protocol_errors(source, sink), protocol_errors(source, sink)[0]
    _check_outputs(cfg, xs, expected, sink.received, [0, *range(burst)])
    _write_result(cfg, "latency_and_full_rate", {"latency": latency, "burst": burst})


@cocotb.test()
async def stream_with_backpressure(dut):
    """Every vector, random input gaps and output stalls: bit-exact, in order, the AXI4-Stream rules kept."""
    cfg = _config()
    xs, expected = _vectors(cfg)
    n = len(xs)
    source, sink = _streams(dut, random.Random(cfg["seed"]), cfg)
    await start_clock_and_reset(dut, 3)
    for x in xs:
        source.send(pack(x, cfg["in_width"]))
    checked = 0
    while checked < n:
        await clock_cycle(dut.clk, source, sink)
        assert sink.monitor.cycle <= cfg["max_cycles"], (f"only {checked} of {n} outputs within "
                                                         f"{cfg['max_cycles']} cycles")
        errors = protocol_errors(source, sink)
        assert not errors, f"AXI4-Stream protocol: {errors[0]}"
        _check_outputs(cfg, xs, expected, sink.received[checked:], range(checked, len(sink.received)))
        checked = len(sink.received)
    _write_result(cfg, "stream_with_backpressure", {"vectors": n, "mismatches": 0, "cycles": sink.monitor.cycle})
