"""cocotb bench for the rtl/ library tests: drives every DUT of a wrapper top at once from a JSON plan.

The pytest side (tests/rtl/rtl_bench.py) computes inputs and expected outputs with bitforge's golden model
and writes them, with each DUT's port prefix and timing, to the JSON file named by $BF_BENCH. Two kinds:

* ``pipe``: ``<p>in_bus`` -> ``<p>out_bus`` through LATENCY registers that load when ``<p>en`` is high
  (absent: every cycle; LATENCY 0: combinational). en is random, so the register chain is checked too.
* ``stream``: valid/ready on both sides (``<p>in_valid/in_ready/in_data[/in_last]``,
  ``<p>out_valid/out_ready/out_data[/out_last]``). The first ``full_rate`` samples go in back to back with
  the output always ready, which measures latency and II; the rest come with random gaps and random
  backpressure. With ``capacity`` the DUT is first filled with its output stalled, counting what it takes.
  Checked: every output in order and bit-exact, none extra, out_valid/out_data held while stalled, and
  (``registered_ready``) that in_ready never changes within a cycle when out_ready does.

Results (per DUT: ok, first mismatch, measured latency and II) go to $BF_BENCH_RESULTS; the cocotb test
fails too if any DUT failed. A mismatch names the sample and shows expected and got in hex and as reals.
"""
from __future__ import annotations

import json
import os
import random

import cocotb
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
    p = spec["prefix"]
    sig = {k: getattr(dut, p + k) for k in ("in_valid", "in_ready", "in_data", "out_valid", "out_ready", "out_data")}
    has_last = spec.get("last", False)
    if has_last:
        sig["in_last"], sig["out_last"] = getattr(dut, p + "in_last"), getattr(dut, p + "out_last")
    inputs, expected = spec["inputs"], spec["expected"]
    full = min(spec.get("full_rate", 8), len(inputs))
    full_out = spec.get("full_rate_out", full)  # outputs those inputs make (a serializer makes several)
    gap_p, ready_p = spec.get("gap_p", 0.3), spec.get("ready_p", 0.6)
    budget = spec.get("max_cycles", 200 + 8 * (spec.get("latency") or 4) + 12 * len(inputs) * (spec.get("ii") or 1))
    sig["in_valid"].value = 0
    sig["out_ready"].value = 0
    sent = received = cycle = ready_checks = 0
    offering = False
    capacity = None
    last_ready = 0
    if spec.get("capacity") is not None:  # fill with the output stalled: how many samples fit?
        for _ in range(2 * spec["capacity"] + 4):
            await FallingEdge(dut.clk)
            sig["in_valid"].value = int(sent < len(inputs))
            if sent < len(inputs):
                data, last = (inputs[sent] if has_last else (inputs[sent], 0))
                sig["in_data"].value = data
                if has_last:
                    sig["in_last"].value = last
            await ReadOnly()
            if sent < len(inputs) and _uint(sig["in_ready"]):
                sent += 1
        capacity = sent
    accepts: list[int] = []
    first_out = None
    held = None  # (data, last) shown while stalled last cycle
    while received < len(expected):
        if cycle > budget:
            return {"ok": False, "error": f"{spec['name']}: timeout after {cycle} cycles: {sent} of {len(inputs)} "
                                          f"inputs accepted, {received} of {len(expected)} outputs seen"}
        await FallingEdge(dut.clk)
        ready_before = _uint(sig["in_ready"])
        if sent < len(inputs) and not offering:
            offering = sent < full or rng.random() >= gap_p
        sig["in_valid"].value = int(offering)
        if offering:
            data, last = (inputs[sent] if has_last else (inputs[sent], 0))
            sig["in_data"].value = data
            if has_last:
                sig["in_last"].value = last
        ready = received < full_out or rng.random() < ready_p
        sig["out_ready"].value = int(ready)
        await ReadOnly()
        in_ready = _uint(sig["in_ready"])
        if spec.get("registered_ready") and int(ready) != last_ready:
            ready_checks += 1
            if in_ready != ready_before:
                return {"ok": False, "error": f"{spec['name']}: in_ready changed from {ready_before} to {in_ready} "
                                              f"within cycle {cycle} when out_ready became {int(ready)}: it is not "
                                              "registered"}
        last_ready = int(ready)
        if offering and in_ready:
            accepts.append(cycle)
            sent += 1
            offering = False
        if _uint(sig["out_valid"]):
            data = _uint(sig["out_data"])
            last = _uint(sig["out_last"]) if has_last else 0
            if held is not None and held != (data, last):
                return {"ok": False, "error": f"{spec['name']}: output {received} changed while stalled "
                                              f"(0x{held[0]:x} -> 0x{data:x})"}
            if first_out is None:
                first_out = cycle
            if ready:
                if received >= len(expected):
                    return {"ok": False, "error": f"{spec['name']}: an extra output 0x{data:x} after all "
                                                  f"{len(expected)} expected"}
                want = expected[received] if has_last else (expected[received], 0)
                if (data, last) != tuple(want):
                    if has_last and data == want[0]:
                        return {"ok": False, "error": f"{spec['name']}: output {received}: last is {last}, "
                                                      f"expected {want[1]}"}
                    vin = inputs[min(received, len(inputs) - 1)]
                    vin = vin[0] if has_last else vin
                    return {"ok": False, "error": describe_mismatch(spec, received, vin, want[0], data)}
                received += 1
                held = None
            else:
                held = (data, last)
        elif held is not None:
            return {"ok": False, "error": f"{spec['name']}: out_valid dropped while output {received} was stalled"}
        cycle += 1
    # Anything after the last expected output is an extra one.
    for _ in range(spec.get("drain_cycles", 2 * (spec.get("latency") or 4) + 4)):
        await FallingEdge(dut.clk)
        sig["in_valid"].value = 0
        sig["out_ready"].value = 1
        await ReadOnly()
        if _uint(sig["out_valid"]):
            return {"ok": False, "error": f"{spec['name']}: an extra output 0x{_uint(sig['out_data']):x} after all "
                                          f"{len(expected)} expected"}
    steps = [b - a for a, b in zip(accepts[:full - 1], accepts[1:full])]
    return {"ok": True, "latency": first_out - accepts[0] if full and accepts and first_out is not None else None,
            "ii_min": min(steps) if steps else None, "ii_max": max(steps) if steps else None,
            "accepted": sent, "outputs": received, "capacity": capacity, "ready_checks": ready_checks}


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
