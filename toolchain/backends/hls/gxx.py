"""g++ and the ap_types headers: what bitforge needs to build an HLS design's C simulation without Vitis.

The HLS backend's designs use Xilinx's arbitrary-precision types (``ap_fixed``, ``ap_int``). hls4ml ships their
open-source headers (``hls4ml/templates/vivado/ap_types``), so a C simulation builds with a plain g++ and
``-I`` that folder: no vendor tool. Missing pieces are :class:`HlsToolError` naming what to install.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from ...errors import BitforgeError

__all__ = ["HlsToolError", "CompileResult", "require_gxx", "ap_types_dir", "compile_cpp", "CXXFLAGS"]

#: -std=c++14: what Vitis HLS compiles C simulations with; -O2: the ap_fixed templates are slow unoptimised.
CXXFLAGS = ("-O2", "-std=c++14", "-w")


class HlsToolError(BitforgeError):
    """g++ or hls4ml (the ap_types headers) missing, or a C++ build that failed; the message says what to do."""


@dataclass(frozen=True)
class CompileResult:
    """An executable built by :func:`compile_cpp`, the command and how long g++ took."""

    exe: Path
    command: tuple[str, ...]
    seconds: float


def require_gxx(cxx: Optional[str] = None) -> str:
    """The path of the C++ compiler (``cxx``, else ``$CXX``, else ``g++``), or :class:`HlsToolError`."""
    name = cxx or os.environ.get("CXX") or "g++"
    found = shutil.which(name)
    if found is None:
        raise HlsToolError(f"C++ compiler {name!r} not found on PATH: the HLS C simulation is built with g++ and the "
                           "ap_types headers; install it (Debian/Ubuntu: apt-get install -y g++) or set CXX")
    return found


def ap_types_dir() -> Path:
    """The folder holding ``ap_fixed.h``, ``ap_int.h`` and friends, as the installed hls4ml ships it."""
    try:
        import hls4ml
    except ImportError:
        raise HlsToolError("hls4ml is not installed: bitforge builds HLS C simulations with the ap_fixed/ap_int "
                           "headers it ships; install it (pip install 'hls4ml>=1.3,<1.4', a "
                           "dependency of bitforge)") from None
    d = Path(hls4ml.__file__).parent / "templates" / "vivado" / "ap_types"
    if not (d / "ap_fixed.h").is_file():
        raise HlsToolError(f"{d}/ap_fixed.h not found: this hls4ml ({getattr(hls4ml, '__version__', '?')}) no longer "
                           "ships the ap_types headers where bitforge looks; install hls4ml 1.x")
    return d


def compile_cpp(sources: Sequence[Path], exe: Path, include_dirs: Sequence[Path] = (),
                flags: Sequence[str] = CXXFLAGS, cxx: Optional[str] = None) -> CompileResult:
    """Compile and link ``sources`` into ``exe`` with g++, ``-I`` the ap_types folder and ``include_dirs``.

    The executable is written under a temporary name and renamed, so a failed or interrupted build never
    leaves a stale one behind. A compiler error is :class:`HlsToolError` with the end of g++'s output."""
    from ...processes import end, start, wait

    gxx = require_gxx(cxx)
    exe = Path(exe)
    exe.parent.mkdir(parents=True, exist_ok=True)
    partial = exe.with_name(exe.name + ".partial")
    command = (gxx, *flags, *(f"-I{d}" for d in (*include_dirs, ap_types_dir())), *map(str, sources), "-o",
               str(partial))
    t0 = time.perf_counter()
    proc = start(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        log = proc.communicate()[0]
    except BaseException:  # Ctrl-C, SIGTERM: no compiler left running
        end(proc)
        raise
    wait(proc)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        partial.unlink(missing_ok=True)
        raise HlsToolError(f"g++ failed (exit {proc.returncode}) building {exe.name} from "
                           f"{', '.join(Path(s).name for s in sources)}:\n{log[-3000:]}")
    os.replace(partial, exe)
    return CompileResult(exe, command, seconds)
