"""Where a sweep's points run: in this process, on a local process pool, or on a Ray cluster.

All three take the same call, ``submit(fn, *args, num_cpus=1) -> concurrent.futures.Future``, so the driver
schedules points the same way whatever runs them, and the rows come out the same (the runner is a pure function of
the spec, the point and its folder; only ``seconds`` differs).

* :class:`SerialExecutor` runs ``fn`` inside ``submit`` (unit tests, library callers). A ``KeyboardInterrupt`` is not a
  point's failure: it leaves ``submit`` as it is.
* :class:`PoolExecutor` is a ``ProcessPoolExecutor`` (``spawn``: no fork of a process that holds threads or torch
  state) sized to the cores, with a per-point **memory guard** (:class:`MemoryGuard`). A worker that dies anyway
  (the kernel's OOM killer, a segfault in a native library) breaks a ``ProcessPoolExecutor`` for every queued
  and running task; here each task notes its worker's pid as it starts, so the point whose worker died fails
  alone (:class:`WorkerDied`, with the signal), and the others are submitted again to a fresh pool.
* :class:`RayExecutor` runs each call as a Ray task that declares ``num_cpus`` (a P&R point declares the cores
  nextpnr uses, so a cluster is not oversubscribed). Ray is imported only here and only when asked; an address
  nothing listens on, or where no gRPC server answers, is refused in seconds (:func:`check_reachable`, before
  ``ray.init``, which would otherwise retry for minutes). Workers get this process's tool and cache locations
  (``BITFORGE_CACHE``, ``YOWASP_CACHE_DIR``, ``PATH``) and ``sys.path`` in the task itself, so a worker on this
  machine reuses the compiled YoWASP tools and the flow caches instead of compiling yosys again for minutes.

The memory guard, and why it is built this way (measured on this project's tools, see
``tests/sweep/test_executors.py``): ``RLIMIT_AS`` caps address space, and both the YoWASP tools (wasmtime
reserves gigabytes of guard pages for each WebAssembly memory) and torch's allocators reserve address space they
never touch, so yosys fails to start under any useful ``RLIMIT_AS``. ``RLIMIT_DATA`` counts only private writable
mappings that were made accessible: yosys, nextpnr and torch run under it, and an allocation past it fails at
once in the process that asked (``MemoryError``, torch's "can't allocate memory", a WebAssembly memory that
cannot grow) instead of the kernel's OOM killer picking a victim. It is per process, and a point is a tree (the
worker and the tool it runs in a child Python), so a watchdog thread also sums the tree's anonymous resident
memory (``RssAnon``: heap, arrays, WebAssembly memories; not the shared, reclaimable file pages of libraries and
cached machine code) every :data:`GUARD_INTERVAL_S` and, past the limit, kills the point's tool processes and
interrupts the point. Either way the point's call raises :class:`MemoryGuardExceeded`, which the driver turns
into a failed row whose reason names the limit and ``--mem-gb``; the worker lives on for the next point.
On Ray the watchdog runs without ``RLIMIT_DATA`` (a worker's own gRPC threads share the process) and Ray's memory
monitor stays the last line.
"""
from __future__ import annotations

import contextlib
import os
import pickle
import signal
import socket
import sys
import threading
import time
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, Callable, Optional

from .model import SweepError

__all__ = ["Executor", "SerialExecutor", "PoolExecutor", "RayExecutor", "make_executor", "MemoryGuard",
           "MemoryGuardExceeded", "WorkerDied", "default_mem_gb", "guarded_call", "pool_call", "ray_task",
           "check_reachable", "worker_env", "PNR_CPUS", "RAY_HINT"]

#: Cores one place-and-route job uses: the YoWASP nextpnr builds are single-threaded WebAssembly.
PNR_CPUS = 1
#: Seconds between two looks of the memory guard at a point's processes.
GUARD_INTERVAL_S = 0.2
#: What to install when Ray is missing.
RAY_HINT = "pip install 'bitforge[ray]'"
#: Seconds to wait for a TCP answer from a Ray address before calling it unreachable.
CONNECT_TIMEOUT_S = 3.0
_GIB = 1 << 30


class MemoryGuardExceeded(SweepError):
    """A point went past the memory guard's limit; its tools were stopped and it is reported as failed."""


class WorkerDied(SweepError):
    """The process running a point died without an answer (killed by the kernel, a crash in native code)."""


# -- the memory guard -------------------------------------------------------------------------------------------

def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(name))
    return kids


def _descendants(pid: int) -> list[int]:
    kids = _children_map()
    out, todo = [], list(kids.get(pid, ()))
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, ()))
    return out


def _rss_anon(pid: int) -> int:
    """Anonymous resident bytes of ``pid`` (0 when it has gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return str(pid)
    for a in argv:  # the tools run as ``python -c "... import _run_yosys_argv ..."``: name the tool
        if "_run_" in a and "_argv" in a:
            return a.split("_run_", 1)[1].split("_argv", 1)[0].replace("_", "-")
    return Path(argv[0]).name if argv else str(pid)


class _Tripped(BaseException):
    """Raised in the point's thread by the guard: a BaseException, so a runner's ``except Exception`` that turns
    errors into failed rows cannot swallow it."""


class MemoryGuard:
    """Holds one point's process tree (this process and the descendants it starts) to ``limit_bytes``.

    ``rlimit``: also set ``RLIMIT_DATA``'s soft limit to ``limit_bytes`` for the block (inherited by the tools the
    point starts; restored after). The watchdog thread sums ``RssAnon`` over the tree; past the limit it records
    why (:attr:`tripped`), SIGKILLs the descendants (their process groups: the tools run in sessions of their own)
    and, when this process itself is over the limit, raises :class:`_Tripped` in the point's thread (main thread
    only: a signal handler)."""

    def __init__(self, limit_bytes: int, *, rlimit: bool = True, interval: float = GUARD_INTERVAL_S):
        self.limit = int(limit_bytes)
        self.rlimit = rlimit
        self.interval = interval
        self.tripped: Optional[str] = None
        self.peak = 0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._old_rlimit = None
        self._old_handler = None
        self._main = threading.current_thread() is threading.main_thread()

    def describe_limit(self) -> str:
        return f"{self.limit / _GIB:.3g} GiB"

    def __enter__(self) -> MemoryGuard:
        if self._main:
            self._old_handler = signal.signal(signal.SIGUSR2, self._raise)
        # processes this one already had (a pool's resource tracker, a Ray node started here) are not the point's
        self._before = set(_descendants(os.getpid()))
        self._thread = threading.Thread(target=self._watch, name="bitforge-memory-guard", daemon=True)
        self._thread.start()  # before the limit: its stack is a private writable mapping too
        if self.rlimit:
            import resource

            soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
            new = self.limit if hard == resource.RLIM_INFINITY else min(self.limit, hard)
            self._old_rlimit = (soft, hard)
            resource.setrlimit(resource.RLIMIT_DATA, (new, hard))
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._old_rlimit is not None:
            import resource

            resource.setrlimit(resource.RLIMIT_DATA, self._old_rlimit)
        if self._main:
            signal.signal(signal.SIGUSR2, self._old_handler if self._old_handler is not None else signal.SIG_DFL)

    def _raise(self, signum, frame) -> None:
        if self.tripped is not None and not self._stop.is_set():
            raise _Tripped(self.tripped)

    def _watch(self) -> None:
        me = os.getpid()
        while not self._stop.wait(self.interval):
            tree = [me, *(p for p in _descendants(me) if p not in self._before)]
            sizes = {p: _rss_anon(p) for p in tree}
            total = sum(sizes.values())
            self.peak = max(self.peak, total)
            if total <= self.limit:
                continue
            biggest = sorted(sizes, key=sizes.get, reverse=True)[:3]
            parts = ", ".join(f"{_comm(p)} {sizes[p] / _GIB:.2f}" for p in biggest if sizes[p])
            self.tripped = (f"used {total / _GIB:.2f} GiB of resident memory ({parts}), over the memory guard's "
                            f"{self.describe_limit()}")
            for p in tree[1:]:
                with contextlib.suppress(OSError):
                    pgid = os.getpgid(p)
                    if pgid != os.getpgid(0):
                        os.killpg(pgid, signal.SIGKILL)
                with contextlib.suppress(OSError):
                    os.kill(p, signal.SIGKILL)
            if self._main and sizes[me] > self.limit // 2:
                with contextlib.suppress(OSError):
                    os.kill(me, signal.SIGUSR2)
            return


_ALLOC_FAILED = ("MemoryError", "Cannot allocate memory", "can't allocate memory", "out of memory",
                 "std::bad_alloc")


def _guard_message(guard: MemoryGuard, detail: str) -> str:
    return (f"memory guard: the point {detail}; it was stopped. Give each point more memory with --mem-gb "
            f"(now {guard.describe_limit()}) or run fewer at once (--workers), then rerun with --retry-failed")


def guarded_call(limit_bytes: Optional[int], rlimit: bool, fn: Callable, args: tuple) -> Any:
    """``fn(*args)`` under a :class:`MemoryGuard` (none when ``limit_bytes`` is None): what a pool worker or a Ray
    task runs. Past the limit it raises :class:`MemoryGuardExceeded`; a failed row (anything with ``status`` and
    ``reason``) whose reason is a refused allocation gets the guard's explanation in front."""
    if limit_bytes is None:
        return fn(*args)
    guard = MemoryGuard(limit_bytes, rlimit=rlimit)
    try:
        with guard:
            result = fn(*args)
    except _Tripped:
        raise MemoryGuardExceeded(_guard_message(guard, guard.tripped or "went past the limit")) from None
    except MemoryError:
        raise MemoryGuardExceeded(_guard_message(guard, "asked for more memory than the limit (MemoryError)")) \
            from None
    except Exception as e:
        if guard.tripped is not None:
            raise MemoryGuardExceeded(_guard_message(guard, guard.tripped)) from None
        if any(s in str(e) for s in _ALLOC_FAILED):
            raise MemoryGuardExceeded(_guard_message(guard, f"was refused an allocation ({type(e).__name__}: "
                                                     f"{str(e).splitlines()[0][:200]})")) from None
        raise
    if guard.tripped is not None:
        raise MemoryGuardExceeded(_guard_message(guard, guard.tripped))
    reason = getattr(result, "reason", None)
    if getattr(result, "status", None) == "failed" and isinstance(reason, str) \
            and any(s in reason for s in _ALLOC_FAILED):
        import dataclasses

        with contextlib.suppress(TypeError):
            result = dataclasses.replace(result, reason=_guard_message(guard, f"was refused an allocation ({reason})"))
    return result


def default_mem_gb(workers: int) -> float:
    """Each of ``workers`` points may use this much: 80% of the machine's memory, shared evenly."""
    try:
        with open("/proc/meminfo") as f:
            total = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemTotal:"))
    except (OSError, StopIteration, ValueError):
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return max(0.5, round(0.8 * total / max(1, workers) / _GIB, 1))


# -- executors --------------------------------------------------------------------------------------------------

class Executor:
    """Runs calls somewhere and hands back futures. ``name``: "serial", "pool" or "ray"; ``workers``: how many
    one-CPU calls run at once (the driver keeps that many CPUs' worth in flight)."""

    name = "executor"
    workers = 1
    mem_gb: Optional[float] = None

    def submit(self, fn: Callable, *args, num_cpus: int = 1) -> Future:
        raise NotImplementedError

    def close(self) -> None:
        """Stop: queued calls are cancelled, running ones ended (the driver has kept every finished row)."""

    def describe(self) -> str:
        guard = f", memory guard {self.mem_gb:g} GiB per point" if self.mem_gb else ""
        return f"{self.name} ({self.workers} worker{'s' if self.workers != 1 else ''}{guard})"

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class SerialExecutor(Executor):
    """Runs each call in this process, inside ``submit``: the future is done when ``submit`` returns. An exception
    of the call is the future's; ``KeyboardInterrupt`` and ``SystemExit`` leave ``submit``. ``mem_gb`` puts the
    call under the memory guard (``RLIMIT_DATA`` included: this whole process is held to it for the call)."""

    name = "serial"

    def __init__(self, mem_gb: Optional[float] = None):
        self.workers = 1
        self.mem_gb = mem_gb

    def submit(self, fn: Callable, *args, num_cpus: int = 1) -> Future:
        fut: Future = Future()
        fut.set_running_or_notify_cancel()
        limit = int(self.mem_gb * _GIB) if self.mem_gb else None
        try:
            fut.set_result(guarded_call(limit, True, fn, args))
        except Exception as e:  # noqa: BLE001 - the point's own failure belongs to its future
            fut.set_exception(e)
        return fut


def _spawn_context():
    import multiprocessing

    return multiprocessing.get_context("spawn")


def pool_call(marker: str, limit_bytes: Optional[int], fn: Callable, args: tuple) -> Any:
    """What a pool worker runs: note this worker's pid in ``marker`` (so the parent can tell, if the pool breaks,
    whether this task's worker is the one that died), then the call under the memory guard."""
    with open(marker, "w") as f:
        f.write(str(os.getpid()))
    return guarded_call(limit_bytes, True, fn, args)


def _signal_name(code: Optional[int]) -> str:
    if code is None:
        return "died"
    if code < 0:
        with contextlib.suppress(ValueError):
            name = signal.Signals(-code).name
            hint = " (the kernel's out-of-memory killer sends it)" if name == "SIGKILL" else ""
            return f"was killed by {name}{hint}"
        return f"was killed by signal {-code}"
    return f"exited with status {code}"


def _dead(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


class PoolExecutor(Executor):
    """A process pool of ``workers`` spawned processes; every call runs under the memory guard (``mem_gb`` GiB per
    point, :func:`default_mem_gb` when None). Calls with ``num_cpus`` > 1 are the driver's to pace (it keeps at
    most ``workers`` CPUs' worth in flight)."""

    name = "pool"
    #: Times a call is submitted again after a pool broke under it while its own worker lived.
    RETRIES = 3

    def __init__(self, workers: Optional[int] = None, mem_gb: Optional[float] = None):
        import tempfile

        self.workers = int(workers or os.cpu_count() or 1)
        if self.workers < 1:
            raise SweepError(f"--workers {workers}: the number of worker processes must be at least 1")
        self.mem_gb = float(mem_gb) if mem_gb is not None else default_mem_gb(self.workers)
        if self.mem_gb <= 0:
            raise SweepError(f"--mem-gb {mem_gb}: the memory each point may use must be above 0 GiB, e.g. 4")
        self._limit = int(self.mem_gb * _GIB)
        self._lock = threading.RLock()
        self._pool: Optional[ProcessPoolExecutor] = None
        self._generation = 0
        self._live: dict[Future, tuple] = {}  # our future -> (fn, args, attempt, generation, marker)
        self._closed = False
        self._markers = tempfile.mkdtemp(prefix="bitforge-pool-")
        import shutil
        import weakref

        weakref.finalize(self, shutil.rmtree, self._markers, True)  # also when close() is never called
        self._count = 0

    def _ensure_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.workers, mp_context=_spawn_context())
            self._generation += 1
        return self._pool

    def submit(self, fn: Callable, *args, num_cpus: int = 1) -> Future:
        if self._closed:
            raise SweepError("the process pool is closed; make a new executor")
        outer: Future = Future()
        self._launch(outer, fn, args, attempt=0)
        return outer

    def _launch(self, outer: Future, fn: Callable, args: tuple, attempt: int) -> None:
        with self._lock:
            if outer.done():
                return
            self._count += 1
            marker = os.path.join(self._markers, str(self._count))
            for _ in range(2):
                pool = self._ensure_pool()
                try:
                    inner = pool.submit(pool_call, marker, self._limit, fn, args)
                    break
                except (BrokenProcessPool, RuntimeError):  # broken, or shut down by a break being handled
                    self._pool = None
            else:  # pragma: no cover - a fresh pool refused a task
                raise SweepError("the process pool cannot start workers")
            self._live[outer] = (fn, args, attempt, self._generation, marker, pool)
        inner.add_done_callback(lambda f: self._finished(outer, f))

    def _finished(self, outer: Future, inner: Future) -> None:
        with self._lock:
            fn, args, attempt, gen, marker, pool = self._live.pop(outer)
        pid = None
        with contextlib.suppress(OSError, ValueError):
            with open(marker) as f:
                pid = int(f.read())
        with contextlib.suppress(OSError):
            os.unlink(marker)
        if outer.done():
            return
        if inner.cancelled():
            outer.cancel()
            outer.set_running_or_notify_cancel()
            return
        exc = inner.exception()
        if isinstance(exc, BrokenProcessPool) and not self._closed:
            # The futures of a broken pool are failed before its other workers are terminated: the worker that
            # already died is this task's only if the task had started there.
            with self._lock:
                if gen == self._generation and self._pool is pool:
                    self._pool = None  # the next launch builds a fresh pool
            proc = getattr(pool, "_processes", None) or {}
            own_death = pid is not None and (_dead(pid) or (pid in proc and proc[pid].exitcode is not None))
            if not own_death and attempt < self.RETRIES:
                self._launch(outer, fn, args, attempt + 1)
                return
            code = None
            for _ in range(40):  # the pipe closes a moment before the kernel has the exit status
                code = proc[pid].exitcode if pid in proc else None
                if code is not None or pid not in proc:
                    break
                time.sleep(0.05)
            exc = WorkerDied(f"the worker process running this point {_signal_name(code)} before it answered (out "
                             "of memory beyond the guard, or a crash in a native library); lower --workers or --mem-gb "
                             "so the guard stops it first, then rerun with --retry-failed")
        if not outer.set_running_or_notify_cancel():
            return
        if exc is not None:
            outer.set_exception(exc)
        else:
            outer.set_result(inner.result())

    def close(self) -> None:
        self._closed = True
        with self._lock:
            pool, self._pool = self._pool, None
            live = list(self._live)
        for f in live:
            f.cancel()
        if pool is not None:
            procs = list(getattr(pool, "_processes", {}).values())  # stdlib keeps them here; 3.14 adds an API
            pool.shutdown(wait=False, cancel_futures=True)
            for p in procs:
                with contextlib.suppress(Exception):
                    if p.is_alive():
                        p.terminate()  # a point still running: its tools die with it (processes.py's guard)
            for p in procs:
                with contextlib.suppress(Exception):
                    p.join(5)
        import shutil

        shutil.rmtree(self._markers, ignore_errors=True)


# -- Ray --------------------------------------------------------------------------------------------------------

def _import_ray():
    try:
        import ray
    except ImportError:
        raise SweepError(f"--ray needs Ray, which is not installed: {RAY_HINT}") from None
    return ray


def _host_port(address: str) -> Optional[tuple[str, int]]:
    """(host, port) of ``host:port``, ``ray://host:port`` or ``[v6]:port``; None for names Ray resolves itself."""
    text = address.split("://", 1)[1] if "://" in address else address
    text = text.rstrip("/")
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


#: An HTTP/2 connection preface and an empty SETTINGS frame: a gRPC server (Ray's GCS, the Ray Client server)
#: answers it with a SETTINGS frame of its own at once.
_H2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def check_reachable(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Refuse, in at most about twice ``timeout`` seconds, a Ray address nothing answers on, or where something
    that is not a gRPC server answers (``ray.init`` would retry there for minutes: measured, 2 min and still
    going, on a port that accepts and stays silent)."""
    hp = _host_port(address)
    if hp is None:
        return
    where = f"{hp[0]}:{hp[1]}"
    try:
        with socket.create_connection(hp, timeout=timeout) as sock:
            sock.settimeout(timeout)
            try:
                sock.sendall(_H2_HELLO)
                reply = sock.recv(9)
            except OSError:
                reply = b""
    except OSError as e:
        why = "timed out" if isinstance(e, socket.timeout) else (e.strerror or str(e))
        raise SweepError(f"--ray {address}: no Ray cluster answers at {where} ({why}). Start one there "
                         "('ray start --head' prints the address to use), pass --ray auto to join the cluster "
                         "started on this machine, or leave --ray out to run on a local process pool") from None
    if len(reply) < 9 or reply[3] != 4:
        raise SweepError(f"--ray {address}: something answers at {where}, but not a Ray cluster (no gRPC server "
                         "there). Give the head node's address as 'ray start --head' prints it (port 6379 by "
                         "default) or ray://HOST:10001 for the Ray Client server")


def worker_env() -> dict[str, str]:
    """The tool and cache locations a worker must share with this process (absolute paths)."""
    from ..flows.tools import yowasp_cache_dir
    from ..user_cache import cache_dir

    env = {"BITFORGE_CACHE": str(cache_dir().resolve()), "YOWASP_CACHE_DIR": str(yowasp_cache_dir().resolve())}
    if os.environ.get("PATH"):
        env["PATH"] = os.environ["PATH"]
    return env


def ray_task(env: dict, paths: list, limit: Optional[int], payload: bytes) -> Any:
    """What each Ray task runs: this process's environment and import path first, then the pickled call (so a
    runner from a module only the driver's ``sys.path`` reaches unpickles in the worker too)."""
    os.environ.update(env)
    for p in reversed(paths):
        if p not in sys.path:
            sys.path.insert(0, p)
    fn, args = pickle.loads(payload)
    return guarded_call(limit, False, fn, args)


def _chain_text(e: BaseException) -> str:
    """Every message in an exception's cause chain (Ray puts the real reason, as text, a few levels down)."""
    texts, seen = [], set()
    cur: Optional[BaseException] = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        texts.append(f"{type(cur).__name__}: {cur}")
        cur = cur.__cause__ or cur.__context__
    return "\n".join(texts)


def _token_mode() -> None:
    """``ray start --head`` (2.60) turns token authentication on, but a client's ``ray.init`` defaults to no token
    and is refused after some 20 s of retries; the mode is read when Ray is imported. With a token on this machine
    (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``) and no ``RAY_AUTH_MODE`` chosen, use it:
    a token-mode client also joins a cluster without authentication (both measured with Ray 2.60)."""
    if "RAY_AUTH_MODE" in os.environ:
        return
    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH") or \
            (Path.home() / ".ray" / "auth_token").is_file():
        os.environ["RAY_AUTH_MODE"] = "token"


class RayExecutor(Executor):
    """Runs calls as Ray tasks. ``address``: a cluster's ``host:port`` (or ``ray://host:port``), or "auto" (the
    cluster started on this machine with ``ray start``); None starts a local instance of ``num_cpus`` CPUs (the
    test's ``ray.init(num_cpus=2)``). An already initialised Ray in this process is used as it is. The points
    write their folders under OUT, so on a cluster of several machines OUT must be on a file system every node
    mounts at the same path (and bitforge installed in the same environment on each)."""

    name = "ray"

    def __init__(self, address: Optional[str] = None, *, num_cpus: Optional[int] = None,
                 mem_gb: Optional[float] = None):
        if address is not None and "ray" not in sys.modules:
            _token_mode()  # read when Ray is imported
        ray = _import_ray()
        self.address = address
        self._started = False
        if address is not None and address != "auto":
            check_reachable(address)
        if not ray.is_initialized():
            import logging

            kw: dict[str, Any] = dict(log_to_driver=False, logging_level=logging.ERROR, include_dashboard=False,
                                      configure_logging=True)
            os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")  # silence a future-change warning
            try:
                if address is None:
                    # "local": a new instance even where a cluster (or a stale record of one) is on this machine
                    ray.init(address="local", num_cpus=num_cpus or os.cpu_count() or 1, **kw)
                else:
                    ray.init(address=address, **kw)
            except ConnectionError as e:
                if "InvalidAuthToken" in _chain_text(e) or "AuthenticationError" in _chain_text(e):
                    raise SweepError(f"--ray {address}: the cluster refused this client's authentication token. "
                                     "Copy the head node's ~/.ray/auth_token to this machine (or set RAY_AUTH_TOKEN "
                                     "to its content), leave RAY_AUTH_MODE unset (or set it to token), and run "
                                     "again") from None
                first = (str(e).strip().splitlines() or [type(e).__name__])[0].rstrip(".")
                raise SweepError(f"--ray {address}: no Ray cluster to join (Ray: {first}). Start one "
                                 "with 'ray start --head' and give the address it prints, or leave --ray out to run "
                                 "on the local process pool") from None
            self._started = True
        self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self.mem_gb = mem_gb
        self._limit = int(mem_gb * _GIB) if mem_gb else None
        self._env = worker_env()
        self._paths = [p for p in sys.path if p]
        self._remote = ray.remote(ray_task)
        self._refs: dict[Future, Any] = {}

    def submit(self, fn: Callable, *args, num_cpus: int = 1) -> Future:
        import cloudpickle  # comes with Ray

        payload = cloudpickle.dumps((fn, args))
        ref = self._remote.options(num_cpus=num_cpus, max_retries=0).remote(self._env, self._paths, self._limit,
                                                                           payload)
        outer: Future = Future()
        self._refs[outer] = ref
        ref.future().add_done_callback(lambda f: self._finished(outer, f))
        return outer

    def _finished(self, outer: Future, inner: Future) -> None:
        """The call's own exception, not Ray's wrapper (whose text carries the worker's traceback); a cancelled
        task is a cancelled future."""
        self._refs.pop(outer, None)
        ray = _import_ray()
        exc = None if inner.cancelled() else inner.exception()
        if inner.cancelled() or isinstance(exc, (ray.exceptions.TaskCancelledError, CancelledError)):
            outer.cancel()
            outer.set_running_or_notify_cancel()
            return
        if not outer.set_running_or_notify_cancel():
            return
        if exc is None:
            outer.set_result(inner.result())
            return
        cause = getattr(exc, "cause", None)
        if isinstance(exc, ray.exceptions.RayTaskError) and isinstance(cause, BaseException):
            exc = cause
        elif isinstance(exc, ray.exceptions.WorkerCrashedError):
            exc = WorkerDied(f"the Ray worker running this point died: {str(exc).splitlines()[0]}")
        outer.set_exception(exc)

    def close(self) -> None:
        ray = _import_ray()
        for ref in list(self._refs.values()):
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
        self._refs.clear()
        if self._started:
            ray.shutdown()


def make_executor(workers: Optional[int], ray: Optional[str], mem_gb: Optional[float]) -> Executor:
    """The CLI's ``--workers N``, ``--ray ADDRESS|auto|local`` and ``--mem-gb G``: Ray when ``ray`` is given ("local":
    start an instance on this machine with ``workers`` CPUs), else the process pool (``workers`` None: one per
    core; ``--workers 1`` too is a pool of one, so the memory guard and a crash stay out of the bitforge process).
    :class:`SerialExecutor` is for tests and library callers that want the point in their own process."""
    if workers is not None and workers < 1:
        raise SweepError(f"--workers {workers}: the number of points to run at once must be at least 1")
    if mem_gb is not None and mem_gb <= 0:
        raise SweepError(f"--mem-gb {mem_gb}: the memory each point may use must be above 0 GiB, e.g. 4")
    if ray:
        return RayExecutor(None if ray == "local" else ray, num_cpus=workers, mem_gb=mem_gb)
    return PoolExecutor(workers, mem_gb)
