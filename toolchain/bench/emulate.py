"""``bitforge bench emulate``: golden-model throughput against ONNX Runtime, as ratios in one run.

Each design is a compiled fixed-point graph; the golden model (:mod:`..emulate`) and ONNX Runtime run the same
graph (bitforge's own int64 ONNX export) on the same batch. The aim is the golden model within 3x of ONNX
Runtime (``AIM``): it is the reference every other executor is checked against, so it must stay fast enough to
check ten thousand vectors per compile.
"""
from __future__ import annotations

import json
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from .. import emulate

#: golden samples/s over ONNX Runtime's at or above this: within 3x.
AIM = 1 / 3


@dataclass(frozen=True)
class EmulateDesign:
    """A benchmark design: a recipe (or model file) compiled at ``precision`` (None: its own types)."""

    model: str
    precision: Optional[str]
    description: str


DESIGNS: dict[str, EmulateDesign] = {d.model: d for d in (
    EmulateDesign("jet-mlp", None, "16-64-32-32-5 MLP, its QAT types (Dense, ReLU)"),
    EmulateDesign("digits-cnn", "8", "the digits CNN at --precision 8 (Conv, max Pool, Reshape, Dense, Softmax)"),
)}


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
    precision: Optional[str] = None


def _median_seconds(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up: first calls pay for allocation and session set-up
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def design_precision(model: str, precision: Optional[str] = None) -> Optional[str]:
    """``precision``, or when None the precision :data:`DESIGNS` gives ``model`` (None: its own types)."""
    if precision is None and model in DESIGNS:
        return DESIGNS[model].precision
    return precision


def bench_graph(model: str, precision: Optional[str] = None, seed: int = 0):
    """The compiled graph both executors run: ``model`` prepared as ``compile`` does at its precision."""
    from ..compiler import load_model, prepare

    g, _ = prepare(load_model(model, seed), design_precision(model, precision))
    return g


def bench_emulate(model: str = "jet-mlp", batch: int = 10_000, repeats: int = 7, seed: int = 0,
                  precision: Optional[str] = None) -> list[BenchRow]:
    """Golden model vs ONNX Runtime on the same exported model and the same batch of vectors. ``precision``
    None: a design of :data:`DESIGNS` at its precision, any other model at its own types."""
    from ..backends.onnx_backend import make_session, to_onnx
    from ..verify.vectors import make_vectors

    precision = design_precision(model, precision)
    g = bench_graph(model, precision, seed)
    proto = to_onnx(g)
    vectors = make_vectors(g, batch, seed)
    sess = make_session(proto)  # the settings the compile-time verification uses
    t_golden = _median_seconds(lambda: emulate.run(g, vectors), repeats)
    t_ort = _median_seconds(lambda: sess.run(None, vectors), repeats)
    rows = []
    for name, t in (("golden (bitforge.emulate)", t_golden), ("onnxruntime", t_ort)):
        rows.append(BenchRow(name, model, batch, repeats, t, batch / t, t_ort / t, precision))
    return rows


def bench_designs(models: Optional[Sequence[str]] = None, batch: int = 10_000, repeats: int = 7, seed: int = 0,
                  precision: Optional[str] = None,
                  progress: Callable[[str], None] = lambda m: None) -> list[BenchRow]:
    """:func:`bench_emulate` for each model (None: every design of :data:`DESIGNS`), rows in that order."""
    rows: list[BenchRow] = []
    for model in (list(DESIGNS) if models is None else models):
        progress(f"{model}: golden model vs onnxruntime, batch {batch}, median of {repeats}")
        rows += bench_emulate(model, batch, repeats, seed, precision)
    return rows


def summary(rows: Sequence[BenchRow]) -> list[dict]:
    """Per model: the golden model's samples/s over ONNX Runtime's, and whether it is within 3x (:data:`AIM`)."""
    out = []
    for r in rows:
        if r.executor.startswith("golden"):
            out.append({"model": r.model, "precision": r.precision, "golden_over_onnxruntime": round(
                r.ratio_to_onnxruntime, 3), "within_3x": r.ratio_to_onnxruntime >= AIM})
    return out


def table(rows: Sequence[BenchRow]):
    """The rows as a rich table narrow enough for an 80-column log; each golden row's ``x onnxruntime`` is the
    ratio the aim is about."""
    from rich import box
    from rich.table import Table

    batch = f", batch {rows[0].batch:,}" if rows else ""
    t = Table(title=f"bench emulate: golden model vs onnxruntime (aim: >= {AIM:.2f}x){batch}", title_justify="left",
              box=box.SIMPLE_HEAD, padding=(0, 1), collapse_padding=True, pad_edge=False, show_edge=False)
    for col in ("model", "executor", "median s", "samples/s", "x onnxruntime"):
        t.add_column(col, justify="left" if col in ("model", "executor") else "right", no_wrap=True)
    for r in rows:
        name = r.model if r.precision is None else f"{r.model} @{r.precision}"
        t.add_row(name, r.executor, f"{r.seconds_median:.4f}", f"{r.samples_per_s:,.0f}",
                  f"{r.ratio_to_onnxruntime:.2f}")
    return t


def write_json(rows: list[BenchRow], path: Path, extra: dict | None = None) -> None:
    doc = {"rows": [asdict(r) for r in rows], "summary": {"ratios": summary(rows)},
           "host": {"machine": platform.machine(), "python": platform.python_version()}}
    doc.update(extra or {})
    Path(path).write_text(json.dumps(doc, indent=2) + "\n")
