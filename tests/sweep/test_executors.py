"""Executors: serial, process pool with its memory guard, and Ray's refusals (the Ray run itself: test_ray.py)."""
from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import time

import pytest

from bitforge.toolchain.sweep import executors
from bitforge.toolchain.sweep.driver import run_sweep
from bitforge.toolchain.sweep.executors import (MemoryGuardExceeded, PoolExecutor, SerialExecutor, WorkerDied,
                                                make_executor)
from bitforge.toolchain.sweep.model import Axis, Point, SweepError, SweepSpec

from . import fake_runner


def spec(**base) -> SweepSpec:
    return SweepSpec(kind="learn", base=dict(base), axes=(Axis("a", (1, 2)),), metrics=("error", "lut"),
                     stage="synth", name="t", digest="d" * 16)


def test_serial_runs_in_this_process_a_points_exception_is_its_future_and_ctrl_c_leaves_submit(tmp_path):
    ex = SerialExecutor()
    assert ex.submit(os.getpid).result() == os.getpid()
    fut = ex.submit(fake_runner.run_point, spec(), Point(0, {"raise": True}), str(tmp_path), "golden")
    assert isinstance(fut.exception(), RuntimeError)
    with pytest.raises(KeyboardInterrupt):
        ex.submit(fake_runner.run_point, spec(), Point(1, {"interrupt": True}), str(tmp_path), "golden")


def test_pool_point_over_the_guard_is_a_failed_row_with_the_reason_and_the_next_point_runs(tmp_path):
    """In-process allocation past the limit (RLIMIT_DATA refuses it) and a tree over the limit (the watchdog
    kills the point's tool) each end as a failed row naming the guard; a normal point on the same workers runs."""
    s = spec()
    points = [Point(0, {"a": 1, "mem_mb": 2048}), Point(1, {"a": 2}),
              Point(2, {"a": 3, "mem_mb": 250, "child_mem_mb": 400}), Point(3, {"a": 4}),
              Point(4, {"a": 5, "torch_mb": 2048})]
    with PoolExecutor(1, mem_gb=0.5) as ex:
        res = run_sweep(s, tmp_path / "out", ex, runner=fake_runner.run_point, points=points, progress=False)
    over, ok1, tree, ok2, big_tensor = res.rows
    assert [r.status for r in res.rows] == ["failed", "ok", "failed", "ok", "failed"]
    assert big_tensor.reason.startswith("memory guard: the point was refused an allocation (RuntimeError: ")
    assert over.reason.startswith("memory guard:") and "MemoryError" in over.reason and "--mem-gb" in over.reason
    assert tree.reason.startswith("memory guard: the point used") and "over the memory guard's 0.5 GiB" in tree.reason
    assert "python" in tree.reason  # names the process that held the memory
    assert ok1.metrics == {m: fake_runner.metric_value(m, 2, 0) for m in ("error", "lut")}
    assert ok2.metrics["lut"] == fake_runner.metric_value("lut", 4, 0)


def test_guard_watchdog_stops_a_child_and_raises_in_the_caller(tmp_path):
    """The watchdog alone (no RLIMIT_DATA, as on Ray), in this process: the child is killed within a second."""
    t0 = time.monotonic()
    with pytest.raises(MemoryGuardExceeded, match=r"over the memory guard's 0\.3 GiB"):
        executors.guarded_call(int(0.3 * 2**30), False, subprocess.run,
                               ([sys.executable, "-c", fake_runner.TOUCH + "; import time; time.sleep(30)", "600"],))
    assert time.monotonic() - t0 < 20  # the child would sleep 30 s: it was killed, not waited for


def test_guard_restores_rlimit_data_after_the_point():
    before = resource.getrlimit(resource.RLIMIT_DATA)
    assert executors.guarded_call(1 << 31, True, resource.getrlimit, (resource.RLIMIT_DATA,))[0] == 1 << 31
    assert resource.getrlimit(resource.RLIMIT_DATA) == before


def test_yosys_nextpnr_and_torch_run_under_the_guard_and_rlimit_as_would_break_them(tmp_path):
    """Why the guard is RLIMIT_DATA and a watchdog: the same 2 GiB as RLIMIT_AS stops yosys (wasmtime reserves
    address space it never touches), while under the guard yosys, nextpnr and torch run."""
    with PoolExecutor(1, mem_gb=2) as ex:
        got = ex.submit(fake_runner.tools_point, str(tmp_path)).result(timeout=300)
    assert got["cells"] > 8 and got["asc_bytes"] > 1000
    torch = pytest.importorskip("torch")
    x = torch.arange(64 * 64, dtype=torch.float32).reshape(64, 64) / 4096
    assert got["torch"] == float((x @ x).sum())  # the same float32 matmul as in this process

    def cap_as():
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, resource.RLIM_INFINITY))

    from bitforge.toolchain.flows.tools import get_tool

    r = subprocess.run(get_tool("yosys").argv(["-V"]), preexec_fn=cap_as, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0, "yosys ran under RLIMIT_AS: the module docstring's reason no longer holds"


def test_a_point_that_kills_its_worker_fails_alone_and_the_others_finish():
    with PoolExecutor(2, mem_gb=1) as ex:
        futs = [ex.submit(fake_runner.run_point, spec(), Point(0, {"die": True}), "/nonexistent", "golden"),
                ex.submit(time.sleep, 0.5), ex.submit(os.getpid)]
        assert isinstance(futs[0].exception(timeout=60), WorkerDied)
        assert "was killed by SIGKILL" in str(futs[0].exception())
        assert futs[1].result(timeout=60) is None
        assert futs[2].result(timeout=60) != os.getpid()


def test_make_executor_refuses_bad_settings_and_picks_the_pool():
    with pytest.raises(SweepError, match="--workers 0"):
        make_executor(0, None, None)
    with pytest.raises(SweepError, match="--mem-gb"):
        make_executor(2, None, 0)
    ex = make_executor(3, None, 1.5)
    try:
        assert (ex.name, ex.workers, ex.mem_gb) == ("pool", 3, 1.5)
        assert ex.describe() == "pool (3 workers, memory guard 1.5 GiB per point)"
    finally:
        ex.close()
    assert 0.5 <= executors.default_mem_gb(2) <= executors.default_mem_gb(1)


def test_ray_missing_is_a_sweep_error_with_the_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(SweepError, match=r"pip install 'bitforge\[ray\]'"):
        make_executor(None, "auto", None)


def test_unreachable_ray_address_is_refused_within_seconds():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    t0 = time.monotonic()
    with pytest.raises(SweepError, match=rf"--ray 127\.0\.0\.1:{port}: no Ray cluster answers"):
        make_executor(None, f"127.0.0.1:{port}", None)
    with pytest.raises(SweepError, match="no Ray cluster answers"):
        make_executor(None, f"ray://127.0.0.1:{port}", None)
    assert time.monotonic() - t0 < 15  # import ray (a few seconds) + two refused connects; no retry loop


def test_importing_the_driver_and_executors_leaves_ray_and_torch_unimported():
    code = ("import sys, bitforge.toolchain.sweep.driver, bitforge.toolchain.sweep.executors; "
            "print(sorted(m for m in ('ray', 'torch', 'cloudpickle') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
