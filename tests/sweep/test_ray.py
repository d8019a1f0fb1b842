"""Ray and the process pool give the same rows: a local Ray instance (``ray.init(num_cpus=2)``: Ray's local mode is
gone) runs a small sweep with the fake runner, early stop included, and the pool runs it again."""
from __future__ import annotations

import os
import time

from bitforge.toolchain.sweep import driver
from bitforge.toolchain.sweep.driver import run_sweep
from bitforge.toolchain.sweep.executors import PoolExecutor, RayExecutor, worker_env

from . import fake_runner
from .test_driver import calls, comparable, grid, make_spec


def test_ray_and_the_pool_give_identical_rows(tmp_path, monkeypatch, capfd):
    monkeypatch.setattr(driver, "_default_write_outputs", lambda: lambda *a: {})
    spec = make_spec(tmp_path, {"a": [1, 2, 3], "c": [0, 1], "fits": [True, False]}, stage="pnr")
    t0 = time.monotonic()
    ex = RayExecutor(num_cpus=2)  # ray.init(num_cpus=2), quiet
    started = time.monotonic() - t0
    try:
        assert (ex.name, ex.workers) == ("ray", 2)
        ray_res = run_sweep(spec, tmp_path / "ray", ex, runner=fake_runner.run_point, points=grid(spec),
                            progress=False)
        seen = ex.submit(fake_runner.worker_env_seen).result(timeout=60)  # a worker's tool and cache folders
    finally:
        ex.close()
    ray_calls = sorted(calls(tmp_path))
    (tmp_path / "calls.txt").unlink()
    with PoolExecutor(2, mem_gb=1) as pool:
        pool_res = run_sweep(spec, tmp_path / "pool", pool, runner=fake_runner.run_point, points=grid(spec),
                             progress=False)
    assert comparable(ray_res.rows) == comparable(pool_res.rows)
    assert sorted(calls(tmp_path)) == ray_calls  # the same points went to P&R
    assert {r.status for r in ray_res.rows} == {"ok", "dominated", "does-not-fit"}
    assert ray_res.counts == pool_res.counts
    assert seen["BITFORGE_CACHE"] == worker_env()["BITFORGE_CACHE"]
    assert seen["YOWASP_CACHE_DIR"] == worker_env()["YOWASP_CACHE_DIR"]
    assert seen["pid"] not in (None, os.getpid())
    out = capfd.readouterr()
    assert "Started a local Ray instance" not in out.out + out.err  # ray.init's chatter stays out of the CLI
    print(f"ray start {started:.1f} s, sweep {ray_res.seconds:.1f} s; pool sweep {pool_res.seconds:.1f} s")
