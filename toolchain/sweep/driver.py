"""Run a sweep: schedule its points on an executor, keep every finished row on disk, skip what is already known.

* **OUT** is a folder bitforge writes in place, point by point (not replaced whole like a compile's output: an
  interrupted sweep keeps its rows), and never deletes anything in. It carries ``.bitforge.json`` (command
  "sweep"); a non-empty folder that is not a sweep's is refused unless ``force`` (which writes beside its files);
  :func:`bitforge.toolchain.outputs.check_output` refuses the protected folders (``/``, home, the current folder,
  one holding the spec) whatever ``force`` says.
* **Cache and resume**: each point works in ``OUT/points/<key>/`` (``model.point_key``: the spec's digest and the
  point's params) and its ``row.json`` is written atomically the moment its row arrives. A rerun, an extended
  sweep (more axis values: the old points keep their keys) or a sweep interrupted half-way reuses every row that
  already answers the question: its stage reaches the stage asked and it has every metric asked, or its status is
  final (does-not-fit; failed, unless ``retry_failed``). Reused rows are marked ``cached``; the runner reuses the
  stage caches in a point's folder for the rest (a point synthesised before is not synthesised again for P&R).
* **Early stop** (stage ``pnr`` only): phase 1 runs every point up to synthesis; phase 2 runs place and route only
  for the points that fit and that no other point dominates (:func:`dominates`); the others become "dominated"
  rows holding their synthesis metrics.
* After every row, and at the end, ``report.write_outputs`` rewrites sweep.json, pareto.png and report.html, so
  OUT always shows the rows so far.
"""
from __future__ import annotations

import json
import math
import os
import time
from concurrent.futures import FIRST_COMPLETED, CancelledError, Future, wait
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

from ..errors import OutputError
from ..flows.cache import write_atomic
from .model import METRICS, STAGES, Point, Row, SweepError, SweepSpec, point_key, stage_index

__all__ = ["SweepResult", "run_sweep", "dominates", "dominated_by", "load_row", "reusable", "prepare_out",
           "ROW_FILE", "FINAL_STATUSES"]

ROW_FILE = "row.json"
#: Statuses a rerun does not run again at any stage ("failed" only without ``retry_failed``).
FINAL_STATUSES = ("does-not-fit", "failed")
#: Statuses whose row holds every metric of its stage.
_COMPLETE = ("ok", "timing-not-met", "dominated")
_MARKER_KIND = "sweep"


@dataclass
class SweepResult:
    """What :func:`run_sweep` returns. ``rows``: one per point, in point order; ``counts``: ``points``, ``done``
    (rows computed by this run), ``cached`` (rows reused), and the number of rows of each status (``ok``,
    ``failed``, ...); ``seconds``: wall time; ``executor``: its description; ``out``: the folder written;
    ``files``: what ``report.write_outputs`` last wrote."""

    rows: list[Row]
    counts: dict
    seconds: float
    executor: str
    out: Path
    files: dict = field(default_factory=dict)


# -- OUT --------------------------------------------------------------------------------------------------------

def prepare_out(out: Path, *, force: bool = False, inputs: Sequence = ()) -> Path:
    """Check OUT, create it with the marker, and return its real path. Nothing in it is ever deleted.

    An earlier sweep's folder is kept (its points are the cache). A non-empty folder that is not a sweep's (no
    marker, or another bitforge command's output) is refused unless ``force``, which writes the sweep beside its
    files. The protected folders (``/``, home, the current folder, a folder holding the spec) are refused always."""
    from .. import outputs

    real = outputs.check_output(out, force=True, inputs=[p for p in inputs if p])
    if real.is_dir() and any(real.iterdir()) and not force:
        command = None
        if outputs.is_bitforge_output(real):
            try:
                command = json.loads((real / outputs.MARKER).read_text()).get("command")
            except (OSError, ValueError):
                pass
        if command != _MARKER_KIND:
            what = (f"the output of bitforge {command}" if command
                    else f"a folder bitforge did not write (no {outputs.MARKER})")
            names = sorted(os.listdir(real))
            listed = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            raise OutputError(f"-o {out}: {what}, holding {listed}; a sweep writes its points and reports into its "
                              "folder and keeps what is there. Choose a new folder or an earlier sweep's, or pass "
                              "--force to write the sweep beside these files (none is deleted)")
    real.mkdir(parents=True, exist_ok=True)
    outputs.write_marker(real, _MARKER_KIND)
    (real / "points").mkdir(exist_ok=True)
    return real


def _write_json_atomic(path: Path, data: dict) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def load_row(folder: Path) -> Optional[Row]:
    """The row a point's folder holds, or None (no row.json, or one this version cannot read: the point reruns)."""
    try:
        return Row.from_json(json.loads((folder / ROW_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def reusable(row: Row, upto: str, metrics: Iterable[str], retry_failed: bool = False) -> bool:
    """Whether a stored row answers a point asked up to stage ``upto`` for ``metrics`` (see the module doc)."""
    if row.status == "failed":
        return not retry_failed
    if row.status == "does-not-fit":
        return True
    if row.status not in _COMPLETE or row.stage not in STAGES:
        return False
    return stage_index(row.stage) >= stage_index(upto) and all(m in row.metrics for m in metrics)


# -- early stop -------------------------------------------------------------------------------------------------

def _known_by(stage: str, metrics: Iterable[str]) -> list[str]:
    """The metrics asked that a row at ``stage`` has: what dominance may compare."""
    return [m for m in metrics if m in METRICS and stage_index(METRICS[m].stage) <= stage_index(stage)]


def _target(row: Row, spec: SweepSpec):
    return row.params.get("target", spec.base.get("target"))


def dominates(a: Row, b: Row, metrics: Sequence[str]) -> bool:
    """True when ``a`` is at least as good as ``b`` in every metric of ``metrics`` (each metric's goal) and
    strictly better in one. A metric missing (None) in either row cannot be compared: no dominance."""
    better = False
    for m in metrics:
        x, y = a.metrics.get(m), b.metrics.get(m)
        if x is None or y is None or (isinstance(x, float) and math.isnan(x)) or \
                (isinstance(y, float) and math.isnan(y)):
            return False
        if METRICS[m].goal == "max":
            x, y = -x, -y
        if x > y:
            return False
        better = better or x < y
    return better


def dominated_by(row: Row, others: Sequence[Row], spec: SweepSpec) -> Optional[Row]:
    """The first row of ``others`` (ok after synthesis, same target) that dominates ``row`` in ``error`` and every
    other metric asked that synthesis already gives (resources, and the simulated latency cycles and II); None
    when P&R must run. Points on different targets are never compared: a point that is worse than one on a larger
    device may still be the best that fits its own."""
    metrics = _known_by("synth", ("error", *[m for m in spec.metrics if m != "error"]))
    mine = _at_synthesis(row)
    for other in others:
        if other is row or other.status not in _COMPLETE or other.stage not in STAGES \
                or stage_index(other.stage) < stage_index("synth") or _target(other, spec) != _target(row, spec):
            continue
        if dominates(_at_synthesis(other), mine, metrics):
            return other
    return None


def _at_synthesis(row: Row) -> Row:
    """``row`` with the resource counts synthesis gave (``Row.synth``), also after place and route replaced them
    with nextpnr's: every comparison of the early stop is between yosys numbers, in the first run and in a rerun
    whose other rows went through P&R since."""
    return replace(row, metrics={**row.metrics, **row.synth}) if row.synth else row


# -- progress ---------------------------------------------------------------------------------------------------

class _Progress:
    """The display: points done / running / cached / failed and an ETA (the mean time of the points this run
    finished, over the workers); a rich bar on a terminal, one line per finished point otherwise."""

    def __init__(self, enabled: bool, total: int, workers: int, title: str):
        self.enabled = enabled
        self.total = total
        self.workers = max(1, workers)
        self.title = title
        self.done = self.cached = self.failed = self.running = 0
        self.run_seconds: list[float] = []
        self.started = time.monotonic()
        self._bar = None
        self._task = None
        if not enabled:
            return
        from .. import console

        self._console = console
        if console.console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("{task.fields[note]}"), console=console.console,
                                 transient=False)
            self._task = self._bar.add_task(title, total=total, note="")
            self._bar.start()

    def eta(self) -> Optional[float]:
        left = self.total - self.done - self.cached
        if not self.run_seconds or left <= 0:
            return None if left > 0 else 0.0
        mean = sum(self.run_seconds) / len(self.run_seconds)
        return mean * math.ceil(left / self.workers)

    def note(self) -> str:
        eta = self.eta()
        text = f"done {self.done} · running {self.running} · cached {self.cached} · failed {self.failed}"
        if eta is not None and self.total > self.done + self.cached:
            text += f" · ETA {_duration(eta)}"
        return text

    def update(self, row: Optional[Row] = None, running: Optional[int] = None) -> None:
        if running is not None:
            self.running = running
        if row is not None:
            if row.cached:
                self.cached += 1
            else:
                self.done += 1
                self.run_seconds.append(row.seconds)
            self.failed += row.status == "failed"
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done + self.cached, note=self.note())
        elif row is not None and not row.cached:
            count = f"{self.done + self.cached}/{self.total}" if self.total else f"{self.done + self.cached}"
            self._console.progress(f"{self.title}: {count} [{row.status}] "
                                   f"{_params_text(row)} ({row.seconds:.1f} s) - {self.note()}")

    def phase(self, title: str, total: int) -> None:
        self.title, self.total = title, total
        self.done = self.cached = self.failed = 0
        if self._bar is not None:
            self._bar.update(self._task, description=title, total=total, completed=0, note=self.note())

    def message(self, text: str) -> None:
        """A line about the run between points (the LLM search's phases: statistics, proxies, evaluations)."""
        if self.enabled:  # the bar's console is this one: rich prints the line above a live bar
            self._console.progress(text)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def _duration(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def _params_text(row: Row) -> str:
    return ", ".join(f"{k}={v}" for k, v in row.params.items())


# -- the sweep --------------------------------------------------------------------------------------------------

def _failed_row(spec: SweepSpec, point: Point, key: str, exc: BaseException, seconds: float) -> Row:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    reason = first if isinstance(exc, SweepError) else f"{type(exc).__name__}: {first}".rstrip(": ")
    return Row(key=key, index=point.index, params=dict(point.params), status="failed",
               metrics={m: None for m in spec.metrics}, stage="golden", reason=reason,
               folder=f"points/{key}", seconds=round(seconds, 3))


class _Run:
    """One call of :func:`run_sweep`: the rows so far, the executor, the reports."""

    def __init__(self, spec: SweepSpec, out: Path, executor, runner: Callable, retry_failed: bool,
                 progress: _Progress, write_outputs: Callable):
        self.spec, self.out, self.executor, self.runner = spec, out, executor, runner
        self.retry_failed = retry_failed
        self.progress = progress
        self.write_outputs = write_outputs
        self.rows: dict[int, Row] = {}
        self.ran = 0
        self.started = time.monotonic()
        self.files: dict = {}

    def key(self, point: Point) -> str:
        return point_key(self.spec, point)

    def folder(self, point: Point) -> Path:
        return self.out / "points" / self.key(point)

    def cached(self, point: Point, upto: str) -> Optional[Row]:
        row = load_row(self.folder(point))
        if row is None or row.key != self.key(point) or not reusable(row, upto, self.spec.metrics,
                                                                      self.retry_failed):
            return None
        metrics = {m: row.metrics.get(m) for m in self.spec.metrics}  # an earlier sweep may have asked for more
        return replace(row, index=point.index, params=dict(point.params), folder=f"points/{self.key(point)}",
                       metrics=metrics, cached=True)

    def keep(self, row: Row, *, save: bool) -> None:
        """A finished row: saved to its point's folder (when computed now), shown, reported."""
        self.rows[row.index] = row
        if save:
            _write_json_atomic(self.out / "points" / row.key / ROW_FILE, replace(row, cached=False).to_json())
        self.progress.update(row)
        self.report()

    def counts(self) -> dict:
        rows = list(self.rows.values())
        counts = {"points": len(rows), "done": sum(not r.cached for r in rows), "cached": sum(r.cached for r in rows)}
        for status in ("ok", "does-not-fit", "timing-not-met", "dominated", "failed"):
            counts[status] = sum(r.status == status for r in rows)
        return counts

    def info(self) -> dict:
        from ..version import bitforge_version

        return {"executor": self.executor.name, "workers": self.executor.workers,
                "mem_gb": getattr(self.executor, "mem_gb", None), "seconds": round(time.monotonic() - self.started, 3),
                "counts": self.counts(), "bitforge_version": bitforge_version()}

    def report(self) -> None:
        rows = [self.rows[i] for i in sorted(self.rows)]
        self.files = self.write_outputs(self.out, self.spec, rows, self.info()) or {}

    def run(self, points: Sequence[Point], upto: str) -> None:
        """Run ``points`` up to ``upto``: at most the executor's CPUs' worth in flight, each row kept as it
        arrives. Ctrl-C (or any exception here) cancels what has not started and leaves."""
        todo = list(points)
        cpus = _cpus_for(upto)
        flight: dict[Future, tuple[Point, float]] = {}
        budget = max(1, self.executor.workers)
        try:
            while todo or flight:
                while todo and (not flight or (len(flight) + 1) * cpus <= budget):
                    point = todo.pop(0)
                    folder = self.folder(point)
                    folder.mkdir(parents=True, exist_ok=True)
                    start = time.monotonic()
                    fut = self.executor.submit(self.runner, self.spec, point, str(folder), upto, num_cpus=cpus)
                    flight[fut] = (point, start)
                    self.progress.update(running=len(flight))
                done, _ = wait(list(flight), return_when=FIRST_COMPLETED)
                for fut in sorted(done, key=lambda f: flight[f][0].index):
                    point, start = flight.pop(fut)
                    try:
                        row = fut.result()
                    except CancelledError:
                        continue
                    except Exception as e:  # noqa: BLE001 - a point's failure is its row, not the sweep's end
                        row = _failed_row(self.spec, point, self.key(point), e, time.monotonic() - start)
                    key = self.key(point)  # the runner's row, under the driver's names for it
                    row = replace(row, key=key, index=point.index, folder=f"points/{key}", cached=False)
                    self.ran += 1
                    self.progress.update(running=len(flight))
                    self.keep(row, save=True)
        finally:
            for fut in flight:
                fut.cancel()


def _cpus_for(upto: str) -> int:
    """The CPUs a point declares: place and route's (:data:`executors.PNR_CPUS`) for a P&R point, else one."""
    if upto == "pnr":
        from .executors import PNR_CPUS

        return PNR_CPUS
    return 1


def _default_write_outputs():
    from .report import write_outputs

    return write_outputs


def _default_runner():
    from .runners import run_point

    return run_point


def run_sweep(spec: SweepSpec, out: Path, executor, *, force: bool = False, early_stop: bool = True,
              retry_failed: bool = False, progress: bool = True, runner: Optional[Callable] = None,
              points: Optional[Sequence[Point]] = None) -> SweepResult:
    """Run every point of ``spec`` (``points``: ``sampling.sample(spec)`` when None) into ``out`` on ``executor``.

    ``runner``: ``runners.run_point`` when None (a top-level function: it is pickled to the workers).
    ``early_stop``: the two phases for a P&R sweep; ``retry_failed``: run failed points again; ``progress``: the
    rich display (off in tests). Raises :class:`SweepError`/:class:`OutputError` before any work for a bad OUT;
    a point's failure is a row, never an exception; Ctrl-C leaves every finished row on disk for the rerun."""
    started = time.monotonic()
    out = prepare_out(Path(out), force=force, inputs=[spec.source] if spec.source else [])
    write_outputs = _default_write_outputs()
    if spec.kind == "llm":
        return _run_llm(spec, out, executor, progress, write_outputs, started)
    if runner is None:
        runner = _default_runner()
    if points is None:
        from .sampling import sample

        points = sample(spec)
    points = list(points)
    if not points:
        raise SweepError(f"{spec.source or spec.name}: the spec has no points to run")
    two_phase = early_stop and spec.stage == "pnr"
    first = "synth" if two_phase else spec.stage
    display = _Progress(progress, len(points), executor.workers,
                        f"{spec.name}: to {first}" + (" (phase 1 of 2)" if two_phase else ""))
    run = _Run(spec, out, executor, runner, retry_failed, display, write_outputs)
    try:
        todo = []
        for p in points:
            row = run.cached(p, first)  # a P&R row answers synthesis too
            if row is None:
                todo.append(p)
            else:
                run.rows[p.index] = row
                display.update(row)
        if len(todo) < len(points):
            run.report()
        run.run(todo, first)
        if two_phase:
            _phase_two(run, points, display)
        run.report()
    finally:
        display.close()
    rows = [run.rows[p.index] for p in points]
    return SweepResult(rows=rows, counts=run.counts(), seconds=round(time.monotonic() - started, 3),
                       executor=executor.describe() if hasattr(executor, "describe") else executor.name, out=out,
                       files=run.files)


def _phase_two(run: _Run, points: Sequence[Point], display: _Progress) -> None:
    """P&R for the points that fit and are not dominated; the dominated ones get their status and why."""
    synth_ok = [run.rows[p.index] for p in points if run.rows[p.index].status in _COMPLETE]
    as_ok = [replace(r, status="ok") if r.status == "dominated" else r for r in synth_ok]
    todo = []
    for p in points:
        row = run.rows[p.index]
        if row.status not in _COMPLETE or stage_index(row.stage) >= stage_index("pnr"):
            continue
        better = dominated_by(replace(row, status="ok"), as_ok, run.spec)
        if better is None:
            todo.append(p)
            continue
        reason = (f"early stop: P&R skipped, point {better.index} ({_params_text(better)}) is at least as good after "
                  "synthesis in every metric compared and better in one")
        dominated = replace(row, status="dominated", reason=reason)
        if dominated != row:
            run.rows[p.index] = dominated
            _write_json_atomic(run.out / "points" / row.key / ROW_FILE, replace(dominated, cached=False).to_json())
    if not todo:
        return
    display.phase(f"{run.spec.name}: P&R (phase 2 of 2)", len(todo))
    run.report()
    run.run(todo, "pnr")


def _run_llm(spec: SweepSpec, out: Path, executor, progress: bool, write_outputs: Callable,
             started: float) -> SweepResult:
    """kind "llm": the joint bit-width and rank search (llm_search) on the same executor, reported the same way."""
    from .llm_search import run_llm_sweep

    display = _Progress(progress, 0, executor.workers, f"{spec.name}: allocations")
    run = _Run(spec, out, executor, None, False, display, write_outputs)

    def on_row(row: Row) -> None:
        run.rows[row.index] = row
        display.update(row)
        run.report()

    try:
        rows = run_llm_sweep(spec, out, executor, on_row, log=display.message)
        run.rows = {r.index: r for r in rows}
        run.report()
    finally:
        display.close()
    rows = [run.rows[i] for i in sorted(run.rows)]
    return SweepResult(rows=rows, counts=run.counts(), seconds=round(time.monotonic() - started, 3),
                       executor=executor.describe() if hasattr(executor, "describe") else executor.name, out=out,
                       files=run.files)
