"""What the rtl/ library tests share: packing, wrapper text, cached simulator builds, and the bench's plan.

``simulate`` builds a wrapper top (lib_designs puts every device under test in one) and runs the cocotb
bench (cocotb_lib_bench.py) over it, handing back the per-DUT results that the tests assert on.

Builds live in build/test_rtl/<name>-<simulator>-<hash of the sources>: an unchanged design is not rebuilt
(Icarus by file dates, Verilator by its own make; ccache covers the rest). pytest-xdist may start the same
simulation in two workers: a file lock serialises them and the second reuses the first's results, which
are kept for the current run only (keyed by xdist's run id), so every pytest run simulates afresh.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Sequence

import numpy as np
from bitforge.toolchain.fixed import FixedType
from bitforge.toolchain.verify.simulators import run_cocotb

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
RTL = REPO / "rtl"
BUILD_ROOT = REPO / "build" / "test_rtl"
BENCH = HERE / "cocotb_lib_bench.py"
SIMULATORS = ("icarus", "verilator")
_RUN_ID = os.environ.get("PYTEST_XDIST_TESTRUNUID") or uuid.uuid4().hex


# -- packing and field descriptions --------------------------------------------------------------------------

def fields(name: str, t: FixedType, count: int, lsb: int = 0) -> list[dict]:
    """Bench field descriptions of ``count`` elements of type ``t`` packed from bit ``lsb``."""
    return [{"name": f"{name}[{i}]" if count > 1 else name, "lsb": lsb + i * t.width, "width": t.width,
             "frac": t.frac, "signed": t.signed} for i in range(count)]


def random_codes(rng: np.random.Generator, t: FixedType, shape) -> np.ndarray:
    """Uniform codes of ``t`` with the edge codes (min, max, 0, +-1 LSB) mixed in."""
    codes = rng.integers(t.min_code, t.max_code, size=shape, endpoint=True, dtype=np.int64)
    edges = np.array(sorted({t.min_code, t.max_code, 0, min(1, t.max_code), max(-1, t.min_code),
                             t.min_code + 1 if t.max_code > t.min_code else t.min_code, t.max_code - 1}))
    flat = codes.reshape(-1)
    k = min(len(flat), 8 * len(edges))
    flat[:k] = edges[np.arange(k) % len(edges)]  # the first rows run through the edges
    return codes


# -- wrapper text ---------------------------------------------------------------------------------------------

def stream_ports(prefix: str, in_w: int, out_w: int, last: bool = False) -> list[str]:
    ports = [f"input wire {prefix}in_valid", f"output wire {prefix}in_ready",
             f"input wire [{in_w - 1}:0] {prefix}in_data", f"output wire {prefix}out_valid",
             f"input wire {prefix}out_ready", f"output wire [{out_w - 1}:0] {prefix}out_data"]
    if last:
        ports += [f"input wire {prefix}in_last", f"output wire {prefix}out_last"]
    return ports


def pipe_ports(prefix: str, in_w: int, out_w: int, en: bool) -> list[str]:
    ports = [f"input wire [{in_w - 1}:0] {prefix}in_bus", f"output wire [{out_w - 1}:0] {prefix}out_bus"]
    return ports + ([f"input wire {prefix}en"] if en else [])


def top_text(name: str, ports: Sequence[str], body: Sequence[str]) -> str:
    head = ",\n    ".join(["input wire clk", "input wire rst", *ports])
    return (f"`default_nettype none\nmodule {name} (\n    {head}\n);\n" + "\n".join(body)
            + "\nendmodule\n`default_nettype wire\n")


# -- running --------------------------------------------------------------------------------------------------

def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()


def simulate(simulator: str, name: str, top: str, library: Sequence[str], duts: list[dict],
             seed: int) -> dict[str, dict]:
    """Build the wrapper ``top`` (module ``name``) with the ``rtl/`` files in ``library`` and run every DUT.

    Returns the bench's per-DUT results. A simulation that produced no results (it did not build or
    crashed) raises AssertionError with the simulator's failure messages.
    """
    sources = [RTL / f for f in sorted(set(library))]
    source_text = [s.read_text() for s in sources]
    build_dir = BUILD_ROOT / f"{name}-{simulator}-{_digest(simulator, top, *source_text)[:12]}"
    plan = {"seed": seed, "duts": duts}
    plan_text = json.dumps(plan, sort_keys=True)
    run_dir = BUILD_ROOT / "runs" / f"{name}-{simulator}-{_digest(plan_text, BENCH.read_text())[:12]}"
    if not build_dir.exists():  # a Verilator build with its precompiled headers is ~200 MB: drop stale ones
        for stale in BUILD_ROOT.glob(f"{name}-{simulator}-*"):
            shutil.rmtree(stale, ignore_errors=True)
    build_dir.mkdir(parents=True, exist_ok=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(build_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        results, marker = run_dir / "results.json", run_dir / "run_id"
        if results.exists() and marker.exists() and marker.read_text() == _RUN_ID:
            return json.loads(results.read_text())  # another xdist worker ran this very plan in this pytest run
        results.unlink(missing_ok=True)
        wrapper = build_dir / f"{name}.v"
        if not wrapper.exists():  # keep its date so Icarus sees an unchanged build
            wrapper.write_text(top)
        shutil.copy(BENCH, run_dir / BENCH.name)
        (run_dir / "plan.json").write_text(plan_text)
        saved = os.environ.get("MAKEFLAGS")
        # The bench runs a few thousand cycles: an unoptimised C++ model builds about a third faster, which
        # is most of this suite's time on a cold cache. Restored afterwards for other tests in this process.
        os.environ["MAKEFLAGS"] = " ".join(filter(None, [saved, "OPT_FAST=-O0 OPT_SLOW=-O0 OPT_GLOBAL=-O0"]))
        try:
            outcome = run_cocotb(simulator, [*sources, wrapper], name, BENCH.stem, run_dir, build_dir,
                                 extra_env={"BF_BENCH": str(run_dir / "plan.json"),
                                            "BF_BENCH_RESULTS": str(results)})
            failures = outcome.failures
        except SystemExit as e:  # cocotb's runner exits when a cocotb test failed; the results say which
            failures = [f"cocotb runner exited with {e.code}"]
        finally:
            if saved is None:
                os.environ.pop("MAKEFLAGS", None)
            else:
                os.environ["MAKEFLAGS"] = saved
        if not results.exists():
            raise AssertionError(f"{simulator} run of {name} gave no results (build or simulator failure; "
                                 f"see {build_dir}/build.log and sim.log): {failures}")
        marker.write_text(_RUN_ID)
        return json.loads(results.read_text())


def assert_ok(results: dict[str, dict], dut: str) -> dict:
    r = results[dut]
    assert r["ok"], r["error"]
    return r
