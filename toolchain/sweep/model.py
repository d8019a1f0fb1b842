"""The sweep's data at its boundaries: a parsed spec, its points and the rows they produce.

Every other sweep module reads or writes these types and nothing else crosses module lines: ``spec`` parses a file
into a :class:`SweepSpec`, ``sampling`` turns it into :class:`Point` s, ``runners`` turns a point into a
:class:`Row` (in a worker process: all of these pickle), ``driver`` schedules points on an executor and keeps the
rows, ``pareto`` and ``report`` read rows. A row is a plain JSON dict on disk (``sweep.json``, each point's
``row.json``); :meth:`Row.to_json` / :meth:`Row.from_json` are the only conversions.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from ..errors import BitforgeError

__all__ = ["SweepError", "KINDS", "STAGES", "stage_index", "Metric", "METRICS", "Axis", "Sampling", "Constraint",
           "SweepSpec", "Point", "Row", "STATUSES", "point_key"]


class SweepError(BitforgeError):
    """A spec, point or executor setting that cannot run as asked (the CLI exits 2 when raised before any work)."""


#: What a sweep explores: a compiled model (an ONNX/.pt2 file, a bitforge folder or a recipe: ``bitforge compile``),
#: an online learner on a built-in task or a user stream (``bitforge learn``), or the LLM-side joint bit-width and
#: rank allocation (``bitforge quantize`` + ``eval-ppl``).
KINDS = ("compile", "learn", "llm")

#: How far each point goes; each stage implies the ones before it. "golden": the golden model's task metrics only;
#: "sim": + RTL simulation checked bit for bit against it; "synth": + yosys resource counts; "pnr": + nextpnr
#: place and route and the packer (Fmax, latency in ns, bitstream).
STAGES = ("golden", "sim", "synth", "pnr")


def stage_index(stage: str) -> int:
    return STAGES.index(stage)


@dataclass(frozen=True)
class Metric:
    """One column a point can report. ``goal``: "min" or "max" (which way is better, for Pareto fronts);
    ``stage``: the first stage that produces it; ``kinds``: the sweep kinds that have it."""

    name: str
    goal: str
    stage: str
    kinds: tuple[str, ...]
    unit: str = ""
    description: str = ""


_HW = ("compile", "learn")
#: Every metric name a spec may ask for. ``error`` is each kind's task error, lower is better: a recipe's
#: held-out error (1 - accuracy for a classifier, RMSE for a fit), a learner's prequential mean MSE, an LLM
#: allocation's perplexity. The runners fill the others by these exact names; a metric a tool does not report
#: for a point (power from an open-source flow, Fmax of a synthesis-only target) is ``None`` in the row.
METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("error", "min", "golden", KINDS, "", "task error: 1 - accuracy, RMSE, mean MSE or perplexity"),
    Metric("accuracy", "max", "golden", ("compile",), "", "a classifier recipe's held-out accuracy"),
    Metric("fidelity", "min", "golden", ("compile",), "",
           "max |fixed - float| of the compiled model's outputs against the float model, in output units"),
    Metric("float_error", "min", "golden", _HW, "", "the float model's task error on the same data"),
    Metric("mse", "min", "golden", ("learn",), "", "prequential mean MSE of the fixed-point learner"),
    Metric("score", "min", "golden", ("learn",), "", "the task's benchmark score of the fixed-point learner"),
    Metric("params", "min", "golden", _HW, "", "trainable parameters (learner) or weights (model)"),
    Metric("bpw", "min", "golden", ("llm",), "bits", "bits per weight, scales and low-rank factors counted"),
    Metric("ppl", "min", "golden", ("llm",), "", "perplexity on the evaluation text"),
    Metric("proxy", "min", "golden", ("llm",), "", "layer-wise proxy loss of the allocation"),
    Metric("sim_mismatches", "min", "sim", _HW, "", "RTL simulation outputs that differ from the golden model"),
    Metric("lut", "min", "synth", _HW, "LUT"),
    Metric("ff", "min", "synth", _HW, "FF"),
    Metric("dsp", "min", "synth", _HW, "DSP"),
    Metric("bram", "min", "synth", _HW, "BRAM"),
    Metric("latency_cycles", "min", "sim", _HW, "cycles"),
    Metric("ii", "min", "sim", _HW, "cycles", "initiation interval"),
    Metric("fmax_mhz", "max", "pnr", _HW, "MHz"),
    Metric("latency_ns", "min", "pnr", _HW, "ns"),
    Metric("power_mw", "min", "pnr", _HW, "mW", "only where a tool reports it (the open-source flow does not)"),
)}


@dataclass(frozen=True)
class Axis:
    """One swept setting: ``name`` (an option of the kind's command, see ``spec.AXES``) and its values, in the
    spec's order (a range is expanded to its values when the spec is parsed)."""

    name: str
    values: tuple


@dataclass(frozen=True)
class Sampling:
    """``method``: "grid" (every combination), "random" or "lhs" (Latin hypercube over the axes' value indices);
    ``n``: points to draw (random/lhs; ignored by grid); ``seed``: the draw's seed."""

    method: str = "grid"
    n: Optional[int] = None
    seed: int = 0


@dataclass(frozen=True)
class Constraint:
    """A "best point" question for the report: among ok rows with every ``where`` bound met
    (metric -> (op, value), op one of "<=", "<", ">=", ">", "=="; or the pseudo-metric ``fits`` -> target name:
    the point was implemented on that target without a does-not-fit), the row with the best ``best`` metric
    (its goal decides min or max). ``label`` is what the report prints, e.g. "fits ice40-up5k, lowest error"."""

    label: str
    best: str
    where: tuple[tuple[str, str, Any], ...] = ()


@dataclass(frozen=True)
class SweepSpec:
    """A parsed, validated sweep. ``base``: the kind's fixed options (compile: ``model`` plus any CompileOptions
    field not swept; learn: ``task`` or ``data`` plus LearnOptions fields; llm: ``model``, ``budget_bpw``, ...),
    JSON values only. ``axes`` in spec order; ``metrics`` the columns to report (``error`` always included);
    ``stage`` how far each point goes; ``pareto`` the metric pairs to draw fronts for (x, y); ``source``: the spec
    file, for messages; ``digest``: sha256 of the kind, the base options (input files by content) and bitforge's
    version: what every point's key shares. Not the stage: a point asked for a later stage than a previous sweep
    ran keeps its key, its folder and its stage caches (synthesis is not redone for P&R)."""

    kind: str
    base: dict
    axes: tuple[Axis, ...]
    metrics: tuple[str, ...]
    stage: str
    sampling: Sampling = Sampling()
    constraints: tuple[Constraint, ...] = ()
    pareto: tuple[tuple[str, str], ...] = ()
    name: str = "sweep"
    source: str = ""
    digest: str = ""

    def axis(self, name: str) -> Axis:
        for a in self.axes:
            if a.name == name:
                return a
        raise KeyError(name)


@dataclass(frozen=True)
class Point:
    """One design to evaluate: ``index`` in the sampled order, ``params`` axis name -> value (every axis)."""

    index: int
    params: dict

    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.params.items())


#: A row's status. "ok": every asked stage ran; "does-not-fit": synthesis showed the design exceeds the target;
#: "timing-not-met": P&R's Fmax is below the requested clock (metrics still filled); "dominated": synthesis ran and
#: P&R was skipped because another point is at least as good in every reported metric (early stop); "failed": the
#: point could not be built or a tool failed (``reason`` says which, and the log).
STATUSES = ("ok", "does-not-fit", "timing-not-met", "dominated", "failed")


@dataclass
class Row:
    """What one point produced. ``metrics``: metric name -> number or None (every metric the spec asks for);
    ``stage``: the last stage that completed; ``folder``: the point's work folder relative to the sweep's OUT
    (its report.md/report.json or metrics.json live there); ``seconds``: wall time of the run that produced the
    row; ``cached``: this sweep reused the row without running anything."""

    key: str
    index: int
    params: dict
    status: str
    metrics: dict = field(default_factory=dict)
    stage: str = "golden"
    reason: str = ""
    folder: str = ""
    seconds: float = 0.0
    cached: bool = False
    files: dict = field(default_factory=dict)  # "report.md" / "report.json" / "metrics.json" -> path under OUT
    #: The synthesis resource counts (yosys), kept when place and route replaces them in ``metrics`` with nextpnr's:
    #: early stop compares these, so a rerun decides as the first run did (both see synthesis numbers only).
    synth: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_json(d: dict) -> Row:
        return Row(**d)


def point_key(spec: SweepSpec, point: Point) -> str:
    """Content hash naming a point's work folder and cache entry: the spec's digest (kind, base options and input
    file contents, bitforge's version; not the stage) and the point's params. Two sweeps that share a point share
    its result; a later stage asked of the same point reuses its folder and stage caches."""
    text = json.dumps({"spec": spec.digest, "params": point.params}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
