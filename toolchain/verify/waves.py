"""Waveforms of a cocotb bench run: ``bitforge simulate --waves`` and the window kept at a failure.

Icarus writes a VCD through ``bf_waves.v``, a second root module that starts ``$dumpvars`` at a time given as
a plusarg (so a failure's window needs no rebuild); Verilator writes an FST through cocotb's Verilator main
(a model built with ``--trace-fst``, run with ``--trace --trace-file FILE``), which traces from time 0: its
window is the run up to the failure. Verilator's FST writer needs lz4's header (Debian ``liblz4-dev``, which
``make setup`` installs); without it Verilator writes a VCD instead. Traced builds live in their own folder
beside the plain one: a traced Verilator model is slower, and cocotb's Icarus runner rebuilds by file dates
only, so one folder cannot serve both.

cocotb's Icarus runner appends vvp's ``-none`` (no dumps) when its own waves are off and ``-fst`` when they
are on; vvp takes the last format it is given, so ``-vcd`` goes in ``SIM_CMD_SUFFIX``, cocotb's documented
variable for arguments after the simulator command, for the duration of the run.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from .simulators import TestOutcome, run_cocotb

#: A failure's waveform: this many clock cycles before the first failing cycle (Icarus) ...
WINDOW_BEFORE_CYCLES = 200
#: ... and this many after it (both simulators: the rerun stops there).
WINDOW_AFTER_CYCLES = 20
DUMP_MODULE = Path(__file__).with_name("bf_waves.v")


def verilator_fst() -> bool:
    """Whether a Verilator model can be built with FST tracing (its writer includes ``lz4.h``)."""
    dirs = ["/usr/include", "/usr/local/include"]
    for var in ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH"):
        dirs += [d for d in os.environ.get(var, "").split(os.pathsep) if d]
    return any(Path(d, "lz4.h").is_file() for d in dirs)


def extension(simulator: str) -> str:
    return ".fst" if simulator == "verilator" and verilator_fst() else ".vcd"


@dataclass(frozen=True)
class WaveDump:
    """Where a run's waveform goes and, on Icarus, from when (ns of simulation time)."""

    path: Path
    from_ns: float = 0.0


def waves_build_dir(build_dir: Path) -> Path:
    return build_dir.with_name(build_dir.name + "_waves")


@contextlib.contextmanager
def _sim_cmd_suffix(value: str) -> Iterator[None]:
    saved = os.environ.get("SIM_CMD_SUFFIX")
    os.environ["SIM_CMD_SUFFIX"] = " ".join(filter(None, [saved, value]))
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("SIM_CMD_SUFFIX", None)
        else:
            os.environ["SIM_CMD_SUFFIX"] = saved


def run_cocotb_with_waves(simulator: str, sources: Sequence[Path], toplevel: str, test_module: str, test_dir: Path,
                          build_dir: Path, dump: WaveDump, **kwargs) -> TestOutcome:
    """:func:`~.simulators.run_cocotb` with the waveform written to ``dump.path`` (built in the traced folder)."""
    dump.path.parent.mkdir(parents=True, exist_ok=True)
    dump.path.unlink(missing_ok=True)
    build = waves_build_dir(Path(build_dir))
    if simulator == "verilator":
        return run_cocotb(simulator, sources, toplevel, test_module, test_dir, build, waves=True,
                          build_args=[*kwargs.pop("build_args", ()), "--trace-fst" if verilator_fst() else "--trace"],
                          test_args=[*kwargs.pop("test_args", ()), "--trace-file", str(dump.path)], **kwargs)
    defines = {**dict(kwargs.pop("defines", None) or {}), "BF_WAVES_TOP": toplevel}
    plusargs = [*kwargs.pop("plusargs", ()), f"+bf_waves={dump.path}", f"+bf_waves_from={int(dump.from_ns)}"]
    with _sim_cmd_suffix("-vcd"):
        return run_cocotb(simulator, [*sources, DUMP_MODULE], toplevel, test_module, test_dir, build,
                          build_args=[*kwargs.pop("build_args", ()), "-s", "bf_waves"], defines=defines,
                          plusargs=plusargs, **kwargs)
