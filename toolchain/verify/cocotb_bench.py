"""cocotb bench for a generated design: streams golden vectors through it with random stalls on both sides.

Loaded by the simulator as a plain top-level module (so absolute imports only). Configuration comes from the
JSON file named by ``BITFORGE_BENCH``: the vectors (.npz with ``inputs`` and ``expected`` int64 codes), the
element widths and types, the stall probabilities and the seed, and where to write the result JSON.

Two port sets: the core (``s_axis_*``/``m_axis_*``, one word per tensor, ``tlast`` on every ``last_every``-th
sample passed through) and, with ``bus`` set, the board top (``s_*``/``m_*``, each tensor as beats of ``bus``
bits, least significant first, ``tlast`` on the last beat of every tensor); the gate-level netlist check
drives the latter. Both streams go through the shared :mod:`bitforge.toolchain.verify.axis` source, sink and
protocol monitors. ``stop_cycle`` ends the run early (a rerun that keeps the waveform of a failure).
"""
from __future__ import annotations

import json
import os
import random

import cocotb
import numpy as np
from bitforge.toolchain.backends.rtl.verilog import pack_word, unpack_word
from bitforge.toolchain.verify.axis import (
    AxisSink,
    AxisSource,
    axis_ports,
    clock_cycle,
    now_ns,
    protocol_error_count,
    protocol_errors,
    random_pauses,
    start_clock_and_reset,
)


#: Cycles between progress lines in the simulator's log.
PROGRESS_EVERY = 1000


def _describe(codes, width: int, frac: int) -> dict:
    return {"hex": [f"{int(c) & ((1 << width) - 1):0{(width + 3) // 4}x}" for c in codes],
            "real": [int(c) * 2.0 ** -frac for c in codes], "codes": [int(c) for c in codes]}


def beats(word: int, word_width: int, bus: int) -> list[int]:
    """A word as ``ceil(word_width / bus)`` beats of ``bus`` bits, least significant first."""
    mask = (1 << bus) - 1
    return [(word >> (b * bus)) & mask for b in range(-(-word_width // bus))]


@cocotb.test()
async def stream_golden_vectors(dut):
    """Every output equals the golden model's, bit for bit, under random input gaps and output backpressure,
    and both streams keep the AXI4-Stream rules."""
    with open(os.environ["BITFORGE_BENCH"]) as f:
        cfg = json.load(f)
    data = np.load(cfg["vectors"])
    xs, expected = data["inputs"], data["expected"]
    n = len(xs)
    rng = random.Random(cfg["seed"])
    iw, ow, out_count = cfg["in_width"], cfg["out_width"], cfg["out_count"]
    last_every = cfg.get("last_every", 7)
    bus = cfg.get("bus")
    prefix_in, prefix_out = ("s", "m") if bus else ("s_axis", "m_axis")
    source = AxisSource(axis_ports(dut, prefix_in), random_pauses(cfg["p_input_gap"], rng))
    sink = AxisSink(axis_ports(dut, prefix_out), random_pauses(cfg["p_output_stall"], rng))
    out_beats = -(-ow * out_count // bus) if bus else 1
    if hasattr(dut, "wr_en"):  # a --weights ram design: its parameter write port stays idle (not X) while streaming
        dut.wr_en.value = 0
        dut.wr_addr.value = 0
        dut.wr_data.value = 0
    for i, x in enumerate(xs):
        word = pack_word(x, iw)
        if bus:
            parts = beats(word, iw * len(x), bus)
            for b, beat in enumerate(parts):
                source.send(beat, int(b == len(parts) - 1))
        else:
            source.send(word, int(i % last_every == last_every - 1))

    await start_clock_and_reset(dut)

    got: list[list[int]] = []
    bad: list[int] = []
    tlast_bad: list[int] = []
    first = None  # (kind, time_ns, bench cycle) of the first failure: the waveform window
    limit = min(cfg["max_cycles"], cfg.get("stop_cycle") or cfg["max_cycles"])
    cycles = 0
    while len(got) < n and cycles < limit:
        await clock_cycle(dut.clk, source, sink)
        cycles += 1
        if cycles % PROGRESS_EVERY == 0:  # a gate-level netlist runs a few hundred cycles per second: show it
            cocotb.log.info("cycle %d: %d of %d outputs", cycles, len(got), n)
        if first is None and protocol_error_count(source, sink):
            first = ("protocol", protocol_errors(source, sink)[0].time_ns, cycles)
        if len(sink.received) < out_beats * (len(got) + 1):
            continue
        i = len(got)
        words = sink.received[out_beats * i:out_beats * (i + 1)]
        if bus:
            word = sum((d or 0) << (b * bus) for b, (d, _) in enumerate(words))
            lasts_ok = [last == int(b == out_beats - 1) for b, (_, last) in enumerate(words)]
        else:
            word = words[0][0] or 0
            lasts_ok = [words[0][1] == int(i % last_every == last_every - 1)]
        codes = unpack_word(word, out_count, ow, cfg["out_signed"])
        got.append(codes)
        if codes != [int(v) for v in expected[i]] or any(d is None for d, _ in words):
            bad.append(i)
            if first is None:
                first = ("mismatch", now_ns(), cycles)
        if not all(lasts_ok):
            tlast_bad.append(i)
            if first is None:
                first = ("tlast", now_ns(), cycles)

    errors = protocol_errors(source, sink)
    n_errors = protocol_error_count(source, sink)
    result = {"vectors": n, "received": len(got), "mismatches": len(bad) + (n - len(got)), "cycles": cycles,
              "tlast_errors": len(tlast_bad), "protocol_errors": n_errors}
    if bad:
        i = bad[0]
        result["first_mismatch"] = {"index": i, "input": _describe(xs[i], iw, cfg["in_frac"]),
                                    "expected": _describe(expected[i], ow, cfg["out_frac"]),
                                    "got": _describe(got[i], ow, cfg["out_frac"])}
    if errors:
        result["first_protocol_error"] = errors[0].to_json()
    if first is not None:
        result["first_failure"] = {"kind": first[0], "time_ns": first[1], "cycle": first[2]}
    elif len(got) < n:
        result["first_failure"] = {"kind": "timeout", "time_ns": now_ns(), "cycle": cycles}
    with open(cfg["result"], "w") as f:
        json.dump(result, f, indent=2)
    if cfg.get("stop_cycle"):
        return  # a rerun for the waveform: the first run has already reported
    assert not errors, (f"{n_errors} AXI4-Stream protocol error(s); first: {errors[0]}"
                        + (f"; then: {errors[1]}" if len(errors) > 1 else ""))
    assert len(got) == n, (f"only {len(got)} of {n} outputs arrived within {limit} cycles: the design stalls "
                           "or drops samples")
    assert not bad, (f"{len(bad)} of {n} outputs differ from the golden model; first at vector {bad[0]}: "
                     f"{json.dumps(result['first_mismatch'])}")
    assert not tlast_bad, f"tlast out of order at output {tlast_bad[0]}"
