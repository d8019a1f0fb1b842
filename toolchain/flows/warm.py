"""Warm the tools' caches once, with a message: ``python -m bitforge.toolchain.flows.warm``.

A YoWASP tool's first call compiles its WebAssembly to machine code (yosys: a few minutes, nextpnr: tens of
seconds) and caches it under ``YOWASP_CACHE_DIR`` (or the user cache folder). Verilator's first cocotb build
compiles its own runtime and cocotb's VPI glue with g++ (about 15 s of CPU, the same for every design); with
ccache those objects are cached too, and later builds pay only for the design itself. ``make setup`` runs
this so that no flow later sits silent for minutes and the first ``bitforge demo`` costs what every later one
does; a tool that is already warm costs about a second.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

from ..errors import BitforgeError
from .tools import HEARTBEAT_S, TOOLS, Progress, is_warm, yowasp_cache_dir

#: The names ``warm_tools`` takes besides the YoWASP tools.
VERILATOR = "verilator"

_WARM_DESIGN = """module warm_up(input wire clk, output reg q);
  initial q = 1'b0;
  always @(posedge clk) q <= ~q;
endmodule
"""
_WARM_TEST = """import cocotb


@cocotb.test()
async def builds_and_starts(dut):
    pass
"""


def warm_tools(names: Optional[Sequence[str]] = None, progress: Progress = print) -> dict[str, float]:
    """Start each tool once so its machine code is cached; returns seconds per tool.

    Tools that were already warm are reported together in one line. Raises :class:`~.tools.ToolMissing` for a
    tool whose wheel is not installed, :class:`~..verify.simulators.SimulatorMissing` without Verilator, and ``RuntimeError`` when a tool cannot start at all.
    """
    seconds: dict[str, float] = {}
    ready = []
    names = list(names or (*TOOLS, VERILATOR))
    for name in (n for n in names if n != VERILATOR):
        tool = TOOLS[name]
        tool.check_installed()
        if tool.wasm is None:
            continue  # plain Python (gowin_pack): nothing to compile
        if is_warm(tool):
            ready.append(name)
            seconds[name] = 0.0
            continue
        expect = "a few minutes" if name == "yosys" else "under a minute"
        progress(f"{name}: first run compiles it to machine code ({expect}, once), cached in {yowasp_cache_dir()}")
        t0 = time.perf_counter()
        proc = subprocess.Popen(tool.argv(tool.probe_args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        while True:
            try:
                output = proc.communicate(timeout=HEARTBEAT_S)[0].decode(errors="replace")
                break
            except subprocess.TimeoutExpired:
                progress(f"{name}: still compiling, {time.perf_counter() - t0:.0f} s")
        seconds[name] = time.perf_counter() - t0
        if not is_warm(tool):
            raise RuntimeError(f"{name} did not start (exit {proc.returncode}); its output:\n{output[-2000:]}")
        progress(f"{name}: ready after {seconds[name]:.0f} s")
    if ready:
        progress(f"{', '.join(ready)}: ready (cached in {yowasp_cache_dir()})")
    if VERILATOR in names:
        seconds[VERILATOR] = _warm_verilator(progress)
    return seconds


def _warm_verilator(progress: Progress) -> float:
    """Build and start a one-register design with cocotb on Verilator, the way ``bitforge simulate`` does, so
    that ccache holds the design-independent objects (and the set-up proves the simulator works)."""
    from ..verify.simulators import run_cocotb

    if shutil.which("ccache") is None:
        progress("verilator: no ccache, nothing to warm (each new design compiles Verilator's runtime: "
                 "apt-get install -y ccache)")
        return 0.0
    progress("verilator: compiling its runtime once into ccache (about 15 s of CPU)")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bitforge-warm-") as tmp:
        work = Path(tmp)
        (work / "warm_up.v").write_text(_WARM_DESIGN)
        (work / "warm_up_test.py").write_text(_WARM_TEST)
        outcome = run_cocotb(VERILATOR, [work / "warm_up.v"], "warm_up", "warm_up_test", work, work / "build")
        if outcome.failed or not outcome.passed:
            log = (work / "build" / "sim.log")
            tail = log.read_text(errors="replace")[-2000:] if log.is_file() else "(no log)"
            raise RuntimeError(f"verilator: the warm-up design did not run; its log:\n{tail}")
    seconds = time.perf_counter() - t0
    progress(f"verilator: ready after {seconds:.0f} s")
    return seconds


def main(argv: Optional[Sequence[str]] = None) -> int:
    from rich.console import Console

    console = Console(stderr=True, highlight=False)
    names = list(argv if argv is not None else sys.argv[1:]) or None
    known = (*TOOLS, VERILATOR)
    unknown = [n for n in names or () if n not in known]
    if unknown:
        console.print(f"unknown tool(s) {', '.join(unknown)}; choose from {', '.join(known)}")
        return 2
    try:
        warm_tools(names, progress=lambda m: console.print(f"[bold]warm[/bold] {m}", soft_wrap=True))
    except (BitforgeError, RuntimeError) as e:  # a missing wheel or simulator, a tool that cannot start
        console.print(f"[red]error:[/red] {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
