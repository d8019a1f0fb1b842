"""``bitforge bench``: throughput measurements, compared in one run as ratios against named baselines."""
from __future__ import annotations

import json
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from .. import emulate


@dataclass
class BenchRow:
    """One measured executor: samples per second at a batch size, and its speed relative to the baseline."""

    executor: str
    model: str
    batch: int
    repeats: int
    seconds_median: float
    samples_per_s: float
    ratio_to_onnxruntime: float


def _median_seconds(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up: first calls pay for allocation and session set-up
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def bench_emulate(model: str = "jet-mlp", batch: int = 10_000, repeats: int = 7, seed: int = 0) -> list[BenchRow]:
    """Golden model vs ONNX Runtime on the same exported model and the same batch of vectors."""
    from ..backends.onnx_backend import make_session, to_onnx
    from ..compiler import load_model, prepare
    from ..verify.vectors import make_vectors

    g, _ = prepare(load_model(model, seed), None)
    proto = to_onnx(g)
    vectors = make_vectors(g, batch, seed)
    sess = make_session(proto)  # the settings the compile-time verification uses
    t_golden = _median_seconds(lambda: emulate.run(g, vectors), repeats)
    t_ort = _median_seconds(lambda: sess.run(None, vectors), repeats)
    rows = []
    for name, t in (("golden (bitforge.emulate)", t_golden), ("onnxruntime", t_ort)):
        rows.append(BenchRow(name, model, batch, repeats, t, batch / t, t_ort / t))
    return rows


def write_json(rows: list[BenchRow], path: Path, extra: dict | None = None) -> None:
    doc = {"rows": [asdict(r) for r in rows], "host": {"machine": platform.machine(), "python": platform.python_version()}}
    doc.update(extra or {})
    Path(path).write_text(json.dumps(doc, indent=2) + "\n")
