"""One sweep point -> one :class:`~.model.Row`, through the library functions the commands themselves run.

A point of a "compile" sweep is ``bitforge compile`` (:func:`..compiler.compile_model`), then
``bitforge simulate`` (:func:`..verify.simulate.simulate`), then yosys (:func:`..flows.implement.synthesize_target`
and the fit check) and ``bitforge implement`` (:func:`..flows.implement.implement`); a point of a "learn" sweep is
``bitforge learn`` (:func:`..learn.commands.resolve` + :func:`..learn.run.learn`, with ``rtl`` for the simulation
stage), then the same synthesis and implementation on the learner's folder. No second flow: a point's folder is
what the commands would have written, so ``bitforge implement``, ``bitforge simulate`` or ``bitforge report`` work
on it too.

Layout of the point folder ``OUT/points/<key>/`` (the driver's: it also writes ``row.json`` there)::

    run/          the command's output folder (report.json, report.md, metrics.json, rtl/, sim/, impl/<T>/)
    runner.log    what each call did: the commands' progress messages, stage times, warnings, tracebacks

``run/`` goes through :func:`..outputs.output_folder` like any command's output, so its temporary folder is made
beside it, inside the point folder: nothing is written outside the point folder. A later call on the same folder
(a higher ``upto``: the driver's early stop runs every point to ``synth`` first and only some to ``pnr``) reuses
what is there: the compiled or learned folder when ``run/sweep_point.json`` records the same options, a
simulation already in ``report.json``, and the flow's own stage caches in ``run/impl/<T>/cache`` (synthesis is not
run again for place and route).

Simulator: Icarus. Each point is a new design simulated once, so Verilator's C++ build is never amortised: a T1
KAN learner over 400 samples takes 2.8 s on Icarus and 4.8 s on Verilator (whole ``learn`` call); jet-mlp at
--precision 6, --reuse 4 takes 87 s for 250 vectors on Icarus and 377 s for 2,000 on Verilator, the build nearly
all of it (ccache does not help: every point's Verilog differs). Compiled points simulate :data:`SIM_VECTORS`.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable, Optional

from ..errors import BitforgeError, VerificationFailed
from .model import STAGES, Point, Row, SweepError, SweepSpec, point_key, stage_index

__all__ = ["run_point", "SIMULATOR", "SIM_VECTORS", "WORK", "LOG", "STAMP", "RUNNER_KEYS", "compile_options",
           "learn_options", "compile_metrics", "learn_metrics"]

#: The one simulator every point uses (module docstring: why Icarus).
SIMULATOR = "icarus"
#: The command's output folder inside the point folder, the runner's log beside it, and the record of the options
#: the output was made with (inside the output, so replacing the output replaces the record).
WORK = "run"
LOG = "runner.log"
STAMP = "sweep_point.json"
#: Base keys the runner reads itself (not command options): the RTL simulation's vector count (a compiled model;
#: default :data:`SIM_VECTORS`), nextpnr's seed (default 1, as ``bitforge implement``) and the clock P&R is asked to
#: meet (default: the target's).
RUNNER_KEYS = {"compile": ("sim_vectors", "pnr_seed", "clock_mhz"), "learn": ("pnr_seed", "clock_mhz")}
#: RTL simulation vectors of a compiled point: ``bitforge flow``'s floor (:func:`..compiler.default_sim_vectors`),
#: edge values first. Every point of a sweep is simulated, so the flow's 2,000 would dominate a sweep of wide
#: designs: jet-mlp at --precision 6, --reuse 4 simulates 250 vectors in 87 s on Icarus (2,000: about ten minutes;
#: Verilator: 377 s, nearly all of it the C++ build). kan-tracker: 2,000 vectors in 2.2 s.
SIM_VECTORS = 250
#: Set by the runner, never by a spec: which backends/simulators run follows from the stage.
_COMPILE_RUNNER_SET = ("to", "hls")
_LEARN_RUNNER_SET = ("rtl", "simulator", "hls")
#: Longest reason kept in a row (one line; the log has the rest).
REASON_CHARS = 600


class _PointFailed(Exception):
    """Internal: a point's own failure, already turned into a status and a reason."""

    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


def run_point(spec: SweepSpec, point: Point, folder: str, upto: str) -> Row:
    """Run ``point`` of ``spec`` into ``folder`` (absolute; the driver's ``OUT/points/<key>``) up to stage ``upto``.

    Returns the row; a failure of the point itself (it does not fit, misses timing, a tool fails, a value only this
    point has is refused, the RTL disagrees with the golden model) is a row with that status and a one-line reason
    naming the log, never an exception. Raised: :class:`SweepError` for a call the driver should not make (kind
    "llm", which ``llm_search`` runs; an ``upto`` that is not a stage or is past ``spec.stage``), and
    ``KeyboardInterrupt`` (Ctrl-C, SIGTERM), after the commands have removed their temporary folders."""
    where = spec.source or spec.name
    if spec.kind not in _KINDS:
        other = "llm_search.run_llm_sweep runs it" if spec.kind == "llm" else "not a sweep kind"
        raise SweepError(f"{where}: runners.run_point runs kinds {', '.join(_KINDS)}; kind {spec.kind!r}: {other}")
    if spec.stage not in STAGES or upto not in STAGES or stage_index(upto) > stage_index(spec.stage):
        allowed = STAGES[:stage_index(spec.stage) + 1] if spec.stage in STAGES else STAGES
        raise SweepError(f"{where}: upto must be one of {', '.join(allowed)} (the spec's stage is {spec.stage}), "
                         f"got {upto!r}")
    t0 = time.perf_counter()
    folder_path = Path(folder).resolve()
    folder_path.mkdir(parents=True, exist_ok=True)
    key = point_key(spec, point)
    run = _Run(spec, point, folder_path, upto)
    run.log(f"--- point {point.index} ({point.label()}), key {key}, up to {upto}, "
            f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')}")
    row = Row(key=key, index=point.index, params=dict(point.params), status="ok",
              metrics={m: None for m in _asked(spec)}, stage=upto, folder=run.rel(folder_path))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                _KINDS[spec.kind](run)
            finally:
                for w in caught:
                    run.warning(f"{w.category.__name__}: {w.message}")
        row.stage = upto
    except KeyboardInterrupt:
        run.log("interrupted")
        raise
    except _PointFailed as e:
        row.status, row.reason, row.stage = e.status, e.reason, run.done or "golden"
    except Exception as e:  # noqa: BLE001 - a point's failure is its row, never the sweep's
        row.status, row.stage = "failed", run.done or "golden"
        row.reason = run.failure_reason(e)
    row.metrics.update({k: v for k, v in run.metrics.items() if k in row.metrics})
    row.synth = {k: v for k, v in run.synth.items() if k in row.metrics}
    if row.status == "ok" and run.notes:
        row.reason = _one_line("; ".join(dict.fromkeys(run.notes)))
    row.files = {name: run.rel(run.work / name) for name in ("report.md", "report.json", "metrics.json")
                 if (run.work / name).is_file()}
    row.seconds = round(time.perf_counter() - t0, 3)
    run.log(f"row: status {row.status}, stage {row.stage}, {row.seconds:.1f} s"
            + (f"; {row.reason}" if row.reason else ""))
    return row


def _asked(spec: SweepSpec) -> list[str]:
    names = list(spec.metrics)
    return names if "error" in names else ["error", *names]


class _Run:
    """One call's state: where things go, what completed, the metrics so far and the notes for the reason."""

    def __init__(self, spec: SweepSpec, point: Point, folder: Path, upto: str):
        self.spec, self.point, self.folder, self.upto = spec, point, folder, upto
        self.work = folder / WORK
        self.out = folder.parent.parent  # the sweep's OUT: row paths are relative to it
        self.done: Optional[str] = None
        self.metrics: dict[str, Any] = {}
        self.synth: dict[str, Any] = {}  # yosys's counts (Row.synth)
        self.notes: list[str] = []
        self.stage = "golden"
        self._log = folder / LOG
        self.options = {**spec.base, **point.params}

    def wants(self, stage: str) -> bool:
        return stage_index(self.upto) >= stage_index(stage)

    def rel(self, path: Path | str) -> str:
        return Path(os.path.relpath(Path(path), self.out)).as_posix()

    def log(self, line: str) -> None:
        try:
            with open(self._log, "a") as f:
                f.write(line.rstrip("\n") + "\n")
        except OSError:  # a full disk shows in the point's own stages; the log is not worth a crashed sweep
            pass

    def progress(self, message: str) -> None:
        self.log(f"  {message}")

    def warning(self, message: str) -> None:
        self.log(f"  warning: {message}")

    def begin(self, stage: str) -> float:
        self.stage = stage
        self.log(f"stage {stage}")
        return time.perf_counter()

    def end(self, stage: str, t0: float) -> None:
        self.done = stage
        self.log(f"stage {stage} done in {time.perf_counter() - t0:.2f} s")

    def failure_reason(self, e: BaseException) -> str:
        """``<stage>: <message> (log: <path>)``, the path relative to OUT; the traceback goes to the runner's log."""
        self.log("".join(traceback.format_exception(e)).rstrip())
        log = getattr(e, "log", None)
        where = self.rel(log) if isinstance(log, (str, Path)) and str(log) else self.rel(self._log)
        message = str(e) if isinstance(e, (BitforgeError, VerificationFailed)) else f"{type(e).__name__}: {e}"
        return _one_line(f"{self.stage}: {message}", f" (log: {where})")


def _one_line(text: str, tail: str = "") -> str:
    text = " ".join(str(text).split())
    room = REASON_CHARS - len(tail)
    return (text if len(text) <= room else text[:room - 3] + "...") + tail


# -- the parts both kinds share --------------------------------------------------------------------------------

def _resolve_input(spec: SweepSpec, value: str) -> str:
    """A relative input path against the spec file's folder (the spec parser may already have done it)."""
    if not value or os.path.isabs(value) or not spec.source:
        return value
    candidate = Path(spec.source).resolve().parent / value
    return str(candidate) if candidate.exists() else value


def _stamp_matches(work: Path, record: dict) -> bool:
    try:
        return json.loads((work / STAMP).read_text()) == record
    except (OSError, ValueError):
        return False


def _write_stamp(work: Path, record: dict) -> None:
    from ..flows.cache import write_atomic

    write_atomic(work / STAMP, json.dumps(record, indent=2, sort_keys=True) + "\n")


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=lambda v: list(v) if isinstance(v, (tuple, set)) else str(v)))


def _target(run: _Run) -> str:
    target = run.options.get("target")
    if not target:
        raise _PointFailed("failed", f"{run.stage}: stage {run.stage} needs a target; add a target axis or "
                                     "base.target (e.g. target: ice40-up5k)")
    return target


def _hardware(run: _Run, pnr_options: tuple[str, ...] = ()) -> None:
    """Synthesis with the fit check, then place and route: the stages after the design's folder exists."""
    from ..flows.implement import TimingWarning, implement, read_manifest, synthesize_target
    from ..flows.targets import RESOURCES, DoesNotFit, check_fit, get_target

    if not run.wants("synth"):
        return
    target = _target(run)
    t0 = run.begin("synth")
    t = get_target(target)
    workdir, synth = synthesize_target(run.work, target, progress=run.progress)
    run.log(f"  synthesis {'cached' if synth.run.cached else 'ran'} ({synth.run.tool_seconds:.1f} s of yosys)")
    run.metrics.update({r: synth.resources[r] for r in RESOURCES})
    run.synth = {r: synth.resources[r] for r in RESOURCES}
    try:
        check_fit(t, {**synth.resources, "io": synth.io_pins}, read_manifest(run.work).top)
    except DoesNotFit as e:
        run.done = "synth"
        raise _PointFailed("does-not-fit", _one_line(f"synth: {e}", f" (log: {run.rel(workdir / synth.run.log)})"))
    run.end("synth", t0)
    if not run.wants("pnr"):
        return
    t0 = run.begin("pnr")
    seed = run.options.get("pnr_seed", 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TimingWarning)
        try:
            entry = implement(run.work, target, seed=seed, clock_mhz=run.options.get("clock_mhz"),
                              progress=run.progress, pnr_options=pnr_options)
        except DoesNotFit as e:  # nextpnr's own count (after packing) can exceed the budget yosys's did not
            raise _PointFailed("does-not-fit", run.failure_reason(e)) from None
    for w in caught:
        run.warning(f"{w.category.__name__}: {w.message}")
    run.log(f"  synthesis {'cached' if entry['stages']['synth']['cached'] else 'ran again'} for place and route")
    run.metrics.update({r: entry.get(r) for r in RESOURCES})
    run.metrics.update(fmax_mhz=entry.get("fmax_mhz"), latency_ns=entry.get("latency_ns"),
                       latency_cycles=entry.get("latency_cycles"), ii=entry.get("ii"), power_mw=None)
    run.end("pnr", t0)
    if entry.get("timing_met") is False:
        log = entry.get("logs", {}).get("nextpnr")
        raise _PointFailed("timing-not-met", _one_line(
            "pnr: " + "; ".join(w for w in entry.get("warnings", []) if "timing" in w),
            f" (log: {run.rel(run.work / log)})" if log else ""))
    run.notes += [w for w in entry.get("warnings", []) if "timing" not in w]


def _finite(value: Any) -> Optional[float]:
    """A metric as JSON can carry it: a diverged learner's infinite or NaN MSE becomes None (noted in the reason)."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


# -- compile -----------------------------------------------------------------------------------------------------

def compile_options(spec: SweepSpec, point: Point, rtl: bool):
    """(model, :class:`..compiler.CompileOptions`) of a compile point: base + params, the runner's keys and
    ``to`` left out; without ``rtl`` the RTL-only options (target, reuse, weights) too, which the golden model does
    not read and ``CompileOptions`` refuses without the RTL backend."""
    from ..compiler import CompileOptions

    opts = {**spec.base, **point.params}
    model = opts.pop("model", None)
    if not isinstance(model, str) or not model:
        raise SweepError(f"{spec.source or spec.name}: base.model: expected a recipe name or a model path, "
                         f"got {model!r}")
    for k in (*RUNNER_KEYS["compile"], *_COMPILE_RUNNER_SET):
        opts.pop(k, None)
    fields = {f.name for f in dataclasses.fields(CompileOptions)}
    unknown = sorted(set(opts) - fields)
    if unknown:
        raise SweepError(f"{spec.source or spec.name}: {', '.join(unknown)}: not an option of bitforge compile "
                         f"(CompileOptions fields: {', '.join(sorted(fields - set(_COMPILE_RUNNER_SET)))})")
    if opts.get("input_range") is not None:
        opts["input_range"] = tuple(float(v) for v in opts["input_range"])
    for k in ("calibration", "hls_config"):
        if opts.get(k):
            opts[k] = _resolve_input(spec, opts[k])
    # ONNX too: the golden model checked against ONNX Runtime costs no measurable time next to the fidelity and
    # task scores (jet-mlp at --precision 8: 1.4 s with it, 1.5 s without) and the point's report is the command's.
    if rtl:
        opts["to"] = ("onnx", "rtl")
    else:
        for k in ("target", "reuse", "weights"):
            opts.pop(k, None)
        opts["to"] = ("onnx",)
    return _resolve_input(spec, model), CompileOptions(**opts)


def _run_compile(run: _Run) -> None:
    from ..compiler import compile_model
    from ..report.file import read_report

    # RTL generation costs well under a second: made at once when the point is going past the golden model, so
    # a later call with a higher ``upto`` does not compile again.
    rtl = stage_index(run.spec.stage) >= stage_index("sim")
    model, opts = compile_options(run.spec, run.point, rtl)
    record = {"kind": "compile", "model": model, "options": _jsonable(dataclasses.asdict(opts))}
    t0 = run.begin("golden")
    if _stamp_matches(run.work, record) and (run.work / "report.json").is_file():
        run.log("  compiled folder reused (same options)")
        report = read_report(run.work)
    else:
        report = compile_model(model, run.work, opts, progress=run.progress, force=True)
        _write_stamp(run.work, record)
    run.metrics.update(compile_metrics(report))
    run.end("golden", t0)
    if not run.wants("sim"):
        return
    t0 = run.begin("sim")
    rtl_section = report.get("rtl", {})
    run.metrics.update(latency_cycles=rtl_section.get("latency_cycles"), ii=rtl_section.get("ii"))
    vectors = int(run.options.get("sim_vectors") or SIM_VECTORS)
    previous = report.get("verification", {}).get("golden_vs_rtl", {}).get(SIMULATOR, {})
    if previous.get("vectors") == vectors and previous.get("mismatches") == 0 and "cycles" in previous:
        run.log(f"  {SIMULATOR} simulation reused ({vectors} vectors, 0 mismatches)")
        run.metrics["sim_mismatches"] = 0
    else:
        from ..verify.simulate import simulate

        try:
            result = simulate(run.work, SIMULATOR, vectors, opts.seed, progress=run.progress)[SIMULATOR]
        except VerificationFailed:
            entry = read_report(run.work).get("verification", {}).get("golden_vs_rtl", {}).get(SIMULATOR, {})
            run.metrics["sim_mismatches"] = entry.get("mismatches")
            raise
        run.metrics["sim_mismatches"] = int(result.get("mismatches", 0))
    run.end("sim", t0)
    _hardware(run)


def compile_metrics(report: dict) -> dict:
    """error, accuracy, float_error (a recipe's held-out scores), fidelity (max |fixed - float| over the
    verification set's outputs), params."""
    m: dict[str, Any] = {"params": report.get("graph", {}).get("parameters")}
    fid = report.get("fidelity", {})
    if "skipped" in fid:
        # a float compile is the float model (difference 0); otherwise nothing was measured
        m["fidelity"] = 0.0 if not report.get("graph", {}).get("fixed_point", True) else None
    else:
        sets = fid.get("sets", {})
        chosen = sets.get("verification") or next(iter(sets.values()), {})
        errors = [o["max_abs_error"] for o in chosen.get("outputs", {}).values() if "max_abs_error" in o]
        m["fidelity"] = max(errors) if errors else None
    scores = report.get("task_scores")
    if scores:
        compiled, reference = scores.get("compiled", {}), scores.get("reference", {})
        if "accuracy" in compiled:
            m["accuracy"] = compiled["accuracy"]
            m["error"] = round(1.0 - compiled["accuracy"], 9)
            m["float_error"] = round(1.0 - reference["accuracy"], 9) if "accuracy" in reference else None
        elif "rmse" in compiled:
            m["error"], m["float_error"] = compiled["rmse"], reference.get("rmse")
    else:  # a model without labels: its error is the fidelity to the float model
        m["error"] = m["fidelity"]
    return m


# -- learn -------------------------------------------------------------------------------------------------------

def learn_options(spec: SweepSpec, point: Point, rtl: bool):
    """The :class:`..learn.commands.LearnOptions` of a learn point: base + params, the runner's keys and the
    target (an implementation setting, not a learner option) left out; ``rtl`` with the runner's simulator."""
    from ..learn.commands import LearnOptions

    opts = {**spec.base, **point.params}
    for k in (*RUNNER_KEYS["learn"], *_LEARN_RUNNER_SET, "target"):
        opts.pop(k, None)
    fields = {f.name for f in dataclasses.fields(LearnOptions)}
    unknown = sorted(set(opts) - fields)
    if unknown:
        raise SweepError(f"{spec.source or spec.name}: {', '.join(unknown)}: not an option of bitforge learn "
                         f"(LearnOptions fields: {', '.join(sorted(fields - set(_LEARN_RUNNER_SET)))})")
    if opts.get("data") is not None:
        opts.setdefault("task", None)
        opts["data"] = ",".join(_resolve_input(spec, p) for p in str(opts["data"]).split(","))
    for k in ("layers", "grid_range"):
        if opts.get(k) is not None:
            opts[k] = tuple(opts[k])
    return LearnOptions(**opts, rtl=rtl, simulator=SIMULATOR)


def _run_learn(run: _Run) -> None:
    from ..learn.commands import resolve
    from ..learn.run import learn

    rtl = run.wants("sim")
    opts = learn_options(run.spec, run.point, rtl)
    t0 = run.begin("golden" if not rtl else "sim")
    spec, task = resolve(opts, run.progress)
    lanes = opts.mlp_lanes
    target = run.options.get("target")
    if rtl and target and spec.kind == "mlp" and lanes is None:  # what learn() does when it is given the target
        from ..backends.rtl.learner_mlp import choose_lanes
        from ..flows.targets import get_target
        from ..learn.spec import build_learner

        lanes = choose_lanes(build_learner(spec), get_target(target).budget.dsp)
    record = {"kind": "learn", "options": _jsonable(dataclasses.asdict(opts)), "mlp_lanes": lanes}
    metrics_file = run.work / "metrics.json"
    richer = {**record, "options": {**record["options"], "rtl": True}}  # a run with the RTL has the golden too
    if metrics_file.is_file() and (_stamp_matches(run.work, record) or not rtl and _stamp_matches(run.work, richer)):
        run.log("  learner folder reused (same options)")
        metrics = json.loads(metrics_file.read_text())
    else:
        inputs = tuple(p for p in (opts.data or "").split(",") if p)
        learn(spec, task, run.work, rtl=rtl, simulator=SIMULATOR, basis=opts.basis, mlp_lanes=lanes,
              progress=run.progress, force=True, inputs=inputs)
        _write_stamp(run.work, record)
        metrics = json.loads(metrics_file.read_text())  # JSON types, as the row keeps them
    run.metrics.update(learn_metrics(metrics))
    fixed = metrics["fixed"]
    if run.metrics["error"] is None:
        run.notes.append(f"the fixed-point learner diverged (mean MSE {fixed.get('mean_mse')})")
    saturated = {k: v for k, v in metrics.get("saturated", {}).items() if v}
    if saturated:
        run.notes.append("saturated " + ", ".join(f"{v:,} {k}" for k, v in saturated.items()))
    if rtl:
        run.done = "golden"
        run.end("sim", t0)
    else:
        run.end("golden", t0)
    from ..learn.run import learner_pnr_options

    _hardware(run, learner_pnr_options(run.options.get("target")))


def learn_metrics(metrics: dict) -> dict:
    """error and mse (the fixed-point learner's prequential mean MSE), score, float_error (the float reference's
    mean MSE on the same stream), params; with the RTL: latency_cycles, ii and sim_mismatches (predictions and
    coefficient read-back words that differ from the golden trajectory) from ``metrics.json``."""
    fixed, flt = metrics["fixed"], metrics["float"]
    m = {"error": _finite(fixed.get("mean_mse")), "mse": _finite(fixed.get("mean_mse")),
         "score": _finite(fixed.get("score")), "float_error": _finite(flt.get("mean_mse")),
         "params": metrics.get("params")}
    r = metrics.get("rtl")
    if r is not None:
        sims = r.get("golden_vs_rtl", {})
        sim = sims.get(SIMULATOR) or next(iter(sims.values()), None)
        m.update(latency_cycles=r.get("latency_cycles"), ii=r.get("ii"),
                 sim_mismatches=None if sim is None else int(sim["mismatches"]) + sum(
                     int(c["mismatches"]) for c in sim.get("readback", {}).values()))
    return m


_KINDS: dict[str, Callable[[_Run], None]] = {"compile": _run_compile, "learn": _run_learn}

