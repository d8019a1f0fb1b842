"""Warm the YoWASP tool caches once, with a message: ``python -m bitforge.toolchain.flows.warm``.

A YoWASP tool's first call compiles its WebAssembly to machine code (yosys: a few minutes, nextpnr: tens of
seconds) and caches it under ``YOWASP_CACHE_DIR`` (or the user cache folder). ``make setup`` runs this so
that no flow later sits silent for minutes; a tool that is already warm costs about a second.
"""
from __future__ import annotations

import subprocess
import sys
import time
from typing import Optional, Sequence

from .tools import HEARTBEAT_S, TOOLS, Progress, ToolMissing, is_warm, yowasp_cache_dir


def warm_tools(names: Optional[Sequence[str]] = None, progress: Progress = print) -> dict[str, float]:
    """Start each tool once so its machine code is cached; returns seconds per tool.

    Raises :class:`~.tools.ToolMissing` for a tool whose wheel is not installed, and ``RuntimeError`` when a
    tool cannot start at all.
    """
    seconds: dict[str, float] = {}
    for name in names or TOOLS:
        tool = TOOLS[name]
        tool.check_installed()
        if tool.wasm is None:
            continue  # plain Python (gowin_pack): nothing to compile
        if is_warm(tool):
            progress(f"{name}: ready (cached in {yowasp_cache_dir()})")
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
    return seconds


def main(argv: Optional[Sequence[str]] = None) -> int:
    from rich.console import Console

    console = Console(stderr=True, highlight=False)
    names = list(argv if argv is not None else sys.argv[1:]) or None
    unknown = [n for n in names or () if n not in TOOLS]
    if unknown:
        console.print(f"unknown tool(s) {', '.join(unknown)}; choose from {', '.join(TOOLS)}")
        return 2
    try:
        warm_tools(names, progress=lambda m: console.print(f"[bold]warm[/bold] {m}"))
    except (ToolMissing, RuntimeError) as e:
        console.print(f"[red]error:[/red] {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
