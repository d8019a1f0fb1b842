"""A stand-in for ``runners.run_point`` in the executor and driver tests: rows computed from the params alone.

Top-level and picklable, so it runs in pool workers and Ray tasks like the real runner. Params it reads (all
optional): ``a``, ``b``, ``c`` (numbers: the metrics are functions of them, :func:`metric_value`), ``fits``
(False: "does-not-fit" at synthesis), ``fail`` (True: a failed row), ``raise`` (True: the runner raises),
``interrupt`` (True: it raises KeyboardInterrupt, as Ctrl-C would), ``sleep`` (seconds), ``mem_mb`` (touches that
many MiB in this process), ``torch_mb`` (the same through torch), ``child_mem_mb`` (starts a child Python that
touches that many MiB: a tool), ``die`` (the process kills itself with SIGKILL). ``spec.base`` may hold
``interrupt_at`` / ``fail_at`` (point indices): outside the params, so a rerun with them removed keeps the points'
keys (the tests give the spec's digest themselves).
``spec.base["pnr_lut_extra"]`` adds that many LUTs after P&R (nextpnr's count is not yosys's; ``Row.synth``
keeps the synthesis numbers). ``spec.base["calls"]``, when set, names a file that gets one line ``INDEX UPTO`` per call (O_APPEND: safe from
several processes), so a test can see which points ran.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from bitforge.toolchain.sweep.model import METRICS, Row, point_key, stage_index

TOUCH = "import sys; b = bytearray(int(sys.argv[1]) << 20); b[::4096] = b'1' * len(b[::4096]); print(len(b))"


def metric_value(name: str, a: float, b: float, c: float = 0):
    """A deterministic value per metric: error falls with ``a``, LUTs grow with ``a`` and fall with ``b`` (so
    neither dominates), and ``c`` makes everything known after synthesis worse (a point with c > 0 is dominated
    by the same point with c = 0)."""
    return {"error": round(1.0 / (1 + a) + 0.01 * b + 0.1 * c, 6), "lut": int(100 * a + 10 * (5 - b) + 10 * c),
            "ff": int(50 * a + c),
            "dsp": int(b), "fmax_mhz": round(50.0 + 3 * b - a, 3), "latency_ns": round(10.0 * a + 2 * b, 3),
            "accuracy": round(1 - 1.0 / (1 + a), 6)}.get(name, float(a + b))


def log_call(spec, point, upto: str) -> None:
    calls = spec.base.get("calls")
    if calls:
        fd = os.open(calls, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{point.index} {upto}\n".encode())
        finally:
            os.close(fd)


def run_point(spec, point, folder: str, upto: str) -> Row:
    t0 = time.monotonic()
    log_call(spec, point, upto)
    p = point.params
    if p.get("sleep"):
        time.sleep(float(p["sleep"]))
    if p.get("interrupt") or spec.base.get("interrupt_at") == point.index:
        raise KeyboardInterrupt
    if p.get("die"):
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
    if p.get("raise"):
        raise RuntimeError(f"fake runner asked to raise at point {point.index}")
    block = None
    if p.get("mem_mb"):  # held while the child below runs: the point's tree is this process and the child
        block = bytearray(int(p["mem_mb"]) << 20)
        block[::4096] = b"1" * len(block[::4096])  # touch every page: resident, not just reserved
        time.sleep(1.0)
    if p.get("torch_mb"):  # torch's allocator (C++): refused with a RuntimeError, not a MemoryError
        import torch

        torch.ones(int(p["torch_mb"]) << 18, dtype=torch.float32)
    if p.get("child_mem_mb"):
        r = subprocess.run([sys.executable, "-c", TOUCH + "; import time; time.sleep(3)", str(p["child_mem_mb"])],
                           capture_output=True, text=True, start_new_session=True)
        if r.returncode != 0:
            key = point_key(spec, point)
            return Row(key=key, index=point.index, params=dict(p), status="failed",
                       metrics={m: None for m in spec.metrics}, stage="golden",
                       reason=f"tool exited with {r.returncode}", folder=f"points/{key}",
                       seconds=time.monotonic() - t0)
    del block
    a, b, c = float(p.get("a", 1)), float(p.get("b", 0)), float(p.get("c", 0))
    status, reason, stage = "ok", "", upto
    if p.get("fail") or point.index in spec.base.get("fail_at", ()):
        status, reason, stage = "failed", "fake failure asked by the point", "golden"
    elif p.get("fits") is False and stage_index(upto) >= stage_index("synth"):
        status, reason, stage = "does-not-fit", "fake: 9999 LUT > 5280 LUT", "synth"
    reached = status != "failed"
    metrics = {m: metric_value(m, a, b, c) if reached and stage_index(METRICS[m].stage) <= stage_index(stage)
               else None for m in spec.metrics}
    synth = {}
    if reached and stage_index(stage) >= stage_index("synth"):
        synth = {m: metrics[m] for m in ("lut", "ff", "dsp", "bram") if metrics.get(m) is not None}
        extra = spec.base.get("pnr_lut_extra")  # nextpnr's LUT count differs from yosys's (Row.synth keeps yosys's)
        if extra and stage == "pnr" and metrics.get("lut") is not None:
            metrics["lut"] += int(extra)
    out = Path(folder)
    (out / "report.json").write_text(f'{{"upto": "{upto}", "a": {a}, "b": {b}}}\n')
    key = point_key(spec, point)
    assert out.name == key, (out, key)
    return Row(key=key, index=point.index, params=dict(p), status=status, metrics=metrics, stage=stage,
               reason=reason, folder=f"points/{key}", seconds=round(time.monotonic() - t0, 3),
               files={"report.json": f"points/{key}/report.json"}, synth=synth)


COUNTER = """module top(input clk, output [7:0] q);
  reg [7:0] n = 0;
  always @(posedge clk) n <= n + 1;
  assign q = n;
endmodule
"""


def tools_point(folder: str) -> dict:
    """What a real point does that a memory guard could break: torch, then yosys and nextpnr (YoWASP, through
    bitforge's own tool runner) on an 8-bit counter. Returns what each produced."""
    import json

    import torch

    from bitforge.toolchain.flows.tools import run_tool

    x = torch.arange(64 * 64, dtype=torch.float32).reshape(64, 64) / 4096
    total = float((x @ x).sum())
    work = Path(folder)
    (work / "top.v").write_text(COUNTER)
    run_tool("yosys", ["-q", "-l", "yosys.log", "-p", "read_verilog top.v; synth_ice40 -top top -json top.json"],
             work, work / "yosys.console.log", label="yosys")
    cells = json.loads((work / "top.json").read_text())["modules"]["top"]["cells"]
    run_tool("nextpnr-ice40", ["--up5k", "--package", "sg48", "--json", "top.json", "--pcf-allow-unconstrained",
                               "--asc", "top.asc", "-q"], work, work / "nextpnr.console.log", label="nextpnr")
    return {"torch": total, "cells": len(cells), "asc_bytes": (work / "top.asc").stat().st_size}


def worker_env_seen() -> dict:
    """The tool and cache locations as a worker sees them (what a Ray task must share with the driver)."""
    return {"BITFORGE_CACHE": os.environ.get("BITFORGE_CACHE"), "YOWASP_CACHE_DIR": os.environ.get("YOWASP_CACHE_DIR"),
            "pid": os.getpid()}
