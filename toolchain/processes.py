"""Child processes that end with the run, and the signals that end a run.

Every tool and simulator bitforge starts (yosys, nextpnr, the packers, make, iverilog, vvp, verilator and the
binary it builds) runs in a process group of its own (``start_new_session``), registered here, and bitforge
ends the whole group when the run ends by an error, Ctrl-C or SIGTERM. Why a group of its own: Ctrl-C in a
terminal signals the whole foreground group, so a child used to die at the same moment as bitforge started
cleaning up, and killing one pid leaves that pid's children (make -> g++) running.

If bitforge itself is killed (SIGKILL: no cleanup runs), Linux still kills each direct child: the child is
started through a small guard that sets ``PR_SET_PDEATHSIG`` and then ``exec``s the command (the setting
survives ``exec``). Limit: a child's own children (g++ under make) are not covered and run to their end,
seconds for a compiler; the long-running processes (the YoWASP tools, vvp, the Verilator binary) are direct
children. Elsewhere than Linux there is no guard.

:func:`signals_raise` makes SIGTERM and SIGHUP raise :class:`~.errors.Terminated`, a ``KeyboardInterrupt``,
so the same cleanup runs for them as for Ctrl-C.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator, Mapping, Optional, Sequence

from .errors import Terminated

_lock = threading.Lock()
_running: set[subprocess.Popen] = set()
_refusing = 0

# Runs with -I -S (no site, no user paths: a few milliseconds). prctl(PR_SET_PDEATHSIG = 1, SIGKILL); a parent
# that died before the call would never send the signal, so compare the parent pid afterwards.
_GUARD = ("import ctypes, os, sys\n"
          "ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)\n"
          "os.getppid() == int(sys.argv[1]) or os._exit(137)\n"
          "os.execvp(sys.argv[2], sys.argv[2:])\n")


class RunEnding(RuntimeError):
    """A child was asked to start while the run is ending (another thread was interrupted)."""


def _guarded(argv: Sequence[str], env: Optional[Mapping[str, str]]) -> list[str]:
    argv = [os.fspath(a) for a in argv]
    if not sys.platform.startswith("linux"):
        return argv
    path = (env if env is not None else os.environ).get("PATH")
    if os.sep not in argv[0] and shutil.which(argv[0], path=path) is None:
        raise FileNotFoundError(f"{argv[0]}: command not found")  # as Popen says it without the guard
    return [sys.executable, "-I", "-S", "-c", _GUARD, str(os.getpid()), *argv]


def start(argv: Sequence[str], **popen_kwargs) -> subprocess.Popen:
    """Start ``argv`` in a new session (its own process group) that :func:`end` ends as a whole."""
    with _lock:
        if _refusing:
            raise RunEnding(f"not starting {os.path.basename(os.fspath(argv[0]))}: the run is ending")
        proc = subprocess.Popen(_guarded(argv, popen_kwargs.get("env")), start_new_session=True, **popen_kwargs)
        _running.add(proc)
    return proc


def _kill_group(proc: subprocess.Popen) -> None:
    # Only while the leader is not reaped: its pid, the group's id, cannot be reused until then.
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


def end(proc: subprocess.Popen) -> None:
    """Kill ``proc``'s whole process group and reap it."""
    _kill_group(proc)
    with contextlib.suppress(ChildProcessError):
        proc.wait()
    with _lock:
        _running.discard(proc)


def wait(proc: subprocess.Popen, timeout: Optional[float] = None) -> int:
    """``proc.wait(timeout)``; any exception but the timeout (Ctrl-C, SIGTERM) ends the group first."""
    try:
        rc = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        raise
    except BaseException:
        end(proc)
        raise
    with _lock:
        _running.discard(proc)
    return rc


def run(argv: Sequence[str], **popen_kwargs) -> int:
    """Start, wait, return the exit status: ``subprocess.run(..., check=False).returncode`` in its own group."""
    proc = start(argv, **popen_kwargs)
    return wait(proc)


def running() -> list[subprocess.Popen]:
    with _lock:
        return list(_running)


@contextlib.contextmanager
def worker_thread(name: str) -> Iterator[ThreadPoolExecutor]:
    """A one-thread pool for a stage that runs beside the main thread (``flow`` implements while it simulates).

    When the block fails (Ctrl-C, SIGTERM, an error), every child of every thread is ended and no new one
    starts until the worker has stopped: the failure does not wait minutes for the worker's yosys."""
    global _refusing
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
    try:
        yield pool
    except BaseException:
        with _lock:
            _refusing += 1
            procs = list(_running)
        try:
            for proc in procs:
                _kill_group(proc)
            pool.shutdown(wait=True, cancel_futures=True)
        finally:
            with _lock:
                _refusing -= 1
        raise
    pool.shutdown(wait=True)


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """SIGTERM and SIGHUP raise :class:`~.errors.Terminated` in the main thread while the block runs (Ctrl-C
    already raises ``KeyboardInterrupt``); a signal set to be ignored stays ignored.

    Python runs a signal's handler at the next bytecode, which may be inside a callback whose exceptions it
    swallows (importlib's module-lock weakref callback, a gc callback): it prints "Exception ignored ... Traceback"
    and the run goes on as if no signal came. The unraisable hook catches exactly that case and sends the signal
    again from a timer thread a moment later (sent from the hook itself, it would be raised inside the hook and
    swallowed again), so it is raised once the main thread is out of the callback."""
    def handler(signum, frame):
        raise Terminated(signum)

    def resend(unraisable) -> None:
        exc = unraisable.exc_value
        if isinstance(exc, KeyboardInterrupt):  # Terminated included
            threading.Timer(0.05, os.kill, (os.getpid(), getattr(exc, "signum", signal.SIGINT))).start()
        else:
            previous_hook(unraisable)

    previous = {}
    previous_hook = sys.unraisablehook
    sys.unraisablehook = resend
    try:
        for s in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(s) is not signal.SIG_IGN:
                previous[s] = signal.signal(s, handler)
        yield
    finally:
        sys.unraisablehook = previous_hook
        for s, h in previous.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)
