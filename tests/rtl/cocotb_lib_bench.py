"""cocotb bench for the rtl/ library tests: drives every DUT of a wrapper top at once from a JSON plan.

The pytest side (tests/rtl/rtl_bench.py) computes inputs and expected outputs with bitforge's golden model
and writes them, with each DUT's port prefix and timing, to the JSON file named by $BF_BENCH. Two kinds:

* ``pipe``: ``<p>in_bus`` -> ``<p>out_bus`` through LATENCY registers that load when ``<p>en`` is high
  (absent: every cycle; LATENCY 0: combinational). en is random, so the register chain is checked too.
* ``stream``: valid/ready on both sides (``<p>in_valid/in_ready/in_data[/in_last]``,
  ``<p>out_valid/out_ready/out_data[/out_last]``), driven by the shared AXI4-Stream source and sink of
  bitforge.toolchain.verify.axis. The first ``full_rate`` samples go in back to back with the output always
  ready, which measures latency and II; the rest come with random gaps and random backpressure. With
  ``capacity`` the DUT is first filled with its output stalled, counting what it takes. Checked: every output
  in order and bit-exact, none extra, the AXI4-Stream rules on both sides (the shared monitors: valid, data and
  last held while stalled), and (``registered_ready``) that in_ready never changes within a cycle when
  out_ready does.

Results (per DUT: ok, first mismatch, measured latency and II) go to $BF_BENCH_RESULTS; the cocotb test
fails too if any DUT failed. A mismatch names the sample and shows expected and got in hex and as reals.
"""
from __future__ import annotations

import json
import os
import random

import cocotb
from bitforge.toolchain.verify.axis import (
    AxisSink,
    AxisSource,
    clock_cycle,
    never,
    protocol_errors,
    random_pauses,
    read,
    stage_ports,
)
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge


def _uint(handle) -> int:
    v = handle.value
    try:
        return v.to_unsigned()
    except AttributeError:
        return int(v)


def _signed(code: int, width: int, signed: bool) -> int:
    return code - (1 << width) if signed and code >> (width - 1) & 1 else code


def _fields(bus: int, fields: list[dict]) -> list[tuple[str, int, float]]:
    """(name, code, real value) of each field of a packed bus."""
    out = []
    for f in fields:
        raw = (bus >> f["lsb"]) & ((1 << f["width"]) - 1)
        code = _signed(raw, f["width"], f["signed"])
        out.append((f["name"], raw, code * 2.0 ** -f["frac"]))
    return out


def describe_mismatch(spec: dict, index: int, vin: int, expected: int, got: int) -> str:
    """The first differing output field, with the sample's input, in hex and as real values."""
    outs = spec["out_fields"]
    exp_f, got_f = _fields(expected, outs), _fields(got, outs)
    bad = [k for k in range(len(outs)) if exp_f[k][1] != got_f[k][1]] or [0]
    k = bad[0]
    f = outs[k]
    digits = (f["width"] + 3) // 4
    lines = [f"{spec['name']}: sample {index}: {len(bad)} of {len(outs)} output fields differ; first is {f['name']}",
             f"  expected 0x{exp_f[k][1]:0{digits}x} ({exp_f[k][2]!r})  got 0x{got_f[k][1]:0{digits}x} "
             f"({got_f[k][2]!r})"]
    ins = spec["in_fields"]
    if "in" in f:  # this output reads one particular input field
        ins = [ins[f["in"]]]
    shown = ", ".join(f"{n}=0x{raw:x} ({val!r})" for n, raw, val in _fields(vin, ins)[:16])
    lines.append(f"  input: {shown}")
    lines.append(f"  whole words: expected 0x{expected:x} got 0x{got:x} input 0x{vin:x}")
    return "\n".join(lines)


async def run_pipe(dut, spec: dict, rng: random.Random) -> dict:
    p = spec["prefix"]
    in_bus, out_bus = getattr(dut, p + "in_bus"), getattr(dut, p + "out_bus")
    en = getattr(dut, p + "en") if spec.get("has_en") else None
    vectors, expected, latency = spec["inputs"], spec["expected"], spec["latency"]
    n = len(vectors)
    history: list[int] = []  # vector index loaded at each enabled edge
    j = checked = 0
    while checked < n:
        await FallingEdge(dut.clk)
        cur = min(j, n - 1)
        in_bus.value = vectors[cur]
        enable = en is None or rng.random() < spec.get("en_p", 0.7)
        if en is not None:
            en.value = int(enable)
        await ReadOnly()
        if latency == 0:
            want = cur
        elif len(history) >= latency:
            want = history[len(history) - latency]
        else:
            want = None
        if want is not None and want == checked:
            got = _uint(out_bus)
            if got != expected[want]:
                return {"ok": False, "error": describe_mismatch(spec, want, vectors[want], expected[want], got)}
            checked += 1
        if latency == 0 or enable:
            history.append(cur)  # past the last vector it is loaded again; those repeats are never checked
            j += 1
    return {"ok": True, "checked": checked}


async def run_stream(dut, spec: dict, rng: random.Random) -> dict:
    """One valid/ready DUT through the shared AXI4-Stream source, sink and protocol monitors."""
    p = spec["prefix"]
    has_last = spec.get("last", False)
    inputs, expected = spec["inputs"], spec["expected"]
    full = min(spec.get("full_rate", 8), len(inputs))
    full_out = spec.get("full_rate_out", full)  # outputs those inputs make (a serializer makes several)
    gap_p, ready_p = spec.get("gap_p", 0.3), spec.get("ready_p", 0.6)
    budget = spec.get("max_cycles", 200 + 8 * (spec.get("latency") or 4) + 12 * len(inputs) * (spec.get("ii") or 1))
    source = AxisSource(stage_ports(dut, "in", p, has_last), random_pauses(gap_p, rng), free_first=full)
    sink = AxisSink(stage_ports(dut, "out", p, has_last), random_pauses(1 - ready_p, rng), free_first=full_out)
    for x in inputs:
        source.send(*(x if has_last else (x, 0)))
    name = spec["name"]

    def failed(message: str) -> dict:
        return {"ok": False, "error": f"{name}: {message}"}

    capacity = None
    filled = 0
    if spec.get("capacity") is not None:  # fill with the output stalled: how many samples fit?
        source.free_first, sink.stall = len(inputs), True
        for _ in range(2 * spec["capacity"] + 4):
            await clock_cycle(dut.clk, source, sink)
        capacity = filled = source.accepted
        source.free_first, sink.stall = full + filled, False
    start = source.monitor.cycle
    ready_checks, last_ready, checked = 0, 0, 0
    while checked < len(expected):
        cycle = source.monitor.cycle - start
        if cycle > budget:
            return failed(f"timeout after {cycle} cycles: {source.accepted} of {len(inputs)} inputs accepted, "
                          f"{checked} of {len(expected)} outputs seen")
        await FallingEdge(dut.clk)
        ready_before = read(source.ports.ready)
        source.drive()
        sink.drive()
        await ReadOnly()
        source.sample()
        sink.sample()
        if spec.get("registered_ready") and int(sink.ready) != last_ready:
            ready_checks += 1
            in_ready = read(source.ports.ready)
            if in_ready != ready_before:
                return failed(f"in_ready changed from {ready_before} to {in_ready} within cycle {cycle} when "
                              f"out_ready became {int(sink.ready)}: it is not registered")
        last_ready = int(sink.ready)
        errors = protocol_errors(source, sink)
        if errors:
            return failed(f"AXI4-Stream protocol: {errors[0]}")
        for data, last in sink.received[checked:]:
            if checked >= len(expected):
                return failed(f"an extra output 0x{data:x} after all {len(expected)} expected")
            want = expected[checked] if has_last else (expected[checked], 0)
            if (data, last) != tuple(want):  # an X or Z word is a protocol error, reported above
                if has_last and data == want[0]:
                    return failed(f"output {checked}: last is {last}, expected {want[1]}")
                vin = inputs[min(checked, len(inputs) - 1)]
                vin = vin[0] if has_last else vin
                return {"ok": False, "error": describe_mismatch(spec, checked, vin, want[0], data)}
            checked += 1
    # Anything after the last expected output is an extra one.
    sink.stalls, sink.free_first = never(), 0
    for _ in range(spec.get("drain_cycles", 2 * (spec.get("latency") or 4) + 4)):
        await clock_cycle(dut.clk, source, sink)
        if len(sink.received) > len(expected):
            return failed(f"an extra output 0x{sink.received[len(expected)][0] or 0:x} after all "
                          f"{len(expected)} expected")
    accepts = [c - start for c in source.accept_cycles[filled:]]
    first_valid = sink.monitor.first_valid  # a filled DUT showed its first output before the main phase
    first_out = first_valid - start if first_valid is not None and first_valid >= start else None
    steps = [b - a for a, b in zip(accepts[:full - 1], accepts[1:full])]
    return {"ok": True, "latency": first_out - accepts[0] if full and accepts and first_out is not None else None,
            "ii_min": min(steps) if steps else None, "ii_max": max(steps) if steps else None,
            "accepted": source.accepted, "outputs": checked, "capacity": capacity, "ready_checks": ready_checks}


async def _guarded(dut, spec: dict, rng: random.Random) -> dict:
    """Run one DUT's bench; an exception (an X or Z where a value was due, ...) becomes its failure."""
    try:
        return await {"pipe": run_pipe, "stream": run_stream}[spec["kind"]](dut, spec, rng)
    except Exception as e:  # noqa: BLE001 - reported per DUT, and the cocotb test fails below
        return {"ok": False, "error": f"{spec['name']}: {type(e).__name__}: {e}"}


@cocotb.test()
async def library_bench(dut):
    with open(os.environ["BF_BENCH"]) as f:
        plan = json.load(f)
    Clock(dut.clk, 10, unit="ns").start()
    dut.rst.value = 1
    for spec in plan["duts"]:
        if spec["kind"] == "pipe" and spec.get("has_en"):
            getattr(dut, spec["prefix"] + "en").value = 0
        if spec["kind"] == "stream":
            getattr(dut, spec["prefix"] + "in_valid").value = 0
            getattr(dut, spec["prefix"] + "out_ready").value = 0
    for _ in range(3):
        await RisingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst.value = 0
    tasks = {spec["name"]: cocotb.start_soon(_guarded(dut, spec, random.Random(f"{plan['seed']}:{spec['name']}")))
             for spec in plan["duts"]}
    results = {}
    for name, task in tasks.items():
        results[name] = await task
    with open(os.environ["BF_BENCH_RESULTS"], "w") as f:
        json.dump(results, f, indent=1)
    failed = [r["error"] for r in results.values() if not r["ok"]]
    assert not failed, "\n".join(failed)
