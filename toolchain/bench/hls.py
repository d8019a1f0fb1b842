"""``bitforge bench hls``: what the HLS backend costs and how fast its C simulation runs, against the golden model.

Per design: generating and writing the HLS project (for a model: the conversion to hls4ml and hls4ml's project, as
``compile --to hls`` writes it), the g++ build of its C simulation (once), then the C simulation and the golden
model on the same inputs in the same process, as samples/s and their ratio, with every output compared code for
code. No vendor tool runs here: these are C simulations built with g++, not what the firmware does on a chip.

Designs (:data:`DESIGNS`): the jet MLP at its QAT types and the digits CNN at ``--precision 8`` through hls4ml;
their C simulation is hls4ml's own ``predict`` (one ctypes call per sample, as an hls4ml user runs it) against
:func:`..emulate.run`. The digits CNN's softmax head is a bitforge extension layer; were it refused, the row would be
the ``--softmax argmax`` head, and were that refused too, ``n/a`` with the reason. The T1 online learner's HLS C++
comes from bitforge's learner templates (:mod:`..backends.hls.learner`); its C simulation is the testbench's own
loop over a whole trajectory (C++ only) against the golden learner (:func:`..learn.emulate.run`), predictions,
final state and LFSR lanes compared.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from ..errors import BitforgeError
from .names import pick_names

__all__ = ["HlsBenchError", "HlsDesign", "HlsRow", "DESIGNS", "parse_designs", "bench_design", "run_bench",
           "add_arguments", "table", "write_json", "host_info"]

#: Timed runs after the warm-up (the project is converted and compiled once); vectors per run.
DEFAULT_REPEATS = 3
DEFAULT_BATCH = 10_000


class HlsBenchError(BitforgeError):
    """A ``bench hls`` option that names no design; the message lists the designs."""


@dataclass(frozen=True)
class HlsDesign:
    """A benchmark design: a recipe compiled at ``precision`` (None: its own types), or an online learner."""

    name: str
    kind: str  # "graph" (a compiled model) or "learner" (an online learner's trajectory)
    precision: Optional[str]
    description: str


DESIGNS: dict[str, HlsDesign] = {d.name: d for d in (
    HlsDesign("jet-mlp", "graph", None, "16-64-32-32-5 MLP, its QAT types (Dense, ReLU)"),
    HlsDesign("digits-cnn", "graph", "8", "the digits CNN at --precision 8 (Conv, max Pool, Reshape, Dense, Softmax)"),
    HlsDesign("t1-learner", "learner", None, "the T1 online KAN learner: predict, error and update per step"),
)}


@dataclass
class HlsRow:
    """One design's measurements; ``status`` "n/a" rows carry the reason in ``note`` and no numbers."""

    design: str
    precision: Optional[str]
    backend: str
    io: str
    strategy: str
    batch: int
    repeats: int
    status: str = "ok"  # ok | mismatch | n/a
    flow: str = "hls4ml"  # what wrote the HLS C++: hls4ml, or bitforge's learner templates
    csim_timing: str = "hls4ml's predict (one ctypes call per sample)"
    note: Optional[str] = None
    head: Optional[str] = None  # digits-cnn: "softmax" or "argmax" (the --softmax argmax fallback)
    layers: Optional[int] = None  # hls4ml layers in the project
    ir_ops: list = field(default_factory=list)
    convert_write_s: Optional[float] = None
    gxx_compile_s: Optional[float] = None
    csim_seconds_median: Optional[float] = None
    golden_seconds_median: Optional[float] = None
    csim_samples_per_s: Optional[float] = None
    golden_samples_per_s: Optional[float] = None
    golden_over_csim: Optional[float] = None
    vectors: Optional[int] = None
    mismatches: Optional[int] = None
    first_mismatch: Optional[dict] = None
    state_mismatches: Optional[int] = None  # learner: stored coefficients that differ after the trajectory
    state_codes: Optional[int] = None  # learner: stored coefficients compared
    lane_mismatches: Optional[int] = None  # learner: LFSR lanes that differ (stochastic rounding)


def parse_designs(text: Optional[str]) -> list[str]:
    """``--designs a,b`` -> names in the order given; None or ``all`` -> every design."""
    return pick_names(text, DESIGNS, "--designs", HlsBenchError)


def timed(fn: Callable[[], object], repeats: int) -> tuple[object, float]:
    """``fn``'s first result (an untimed warm-up: loading, allocation) and the median wall time of ``repeats``
    further calls. The warm-up's result is the one compared, so the timed calls measure the same work."""
    first = fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return first, float(np.median(times))


def _graphs(design: HlsDesign, seed: int):
    """The design's compiled graph, then (for a softmax head hls4ml cannot take) the ``--softmax argmax`` one:
    ``(head, graph)`` pairs, built lazily, in the order they are tried."""
    from ..compiler import load_model, prepare
    from ..ir import Softmax

    loaded = load_model(design.name, seed)
    g, _ = prepare(loaded, design.precision)
    has_softmax = any(isinstance(n, Softmax) and n.output in g.outputs for n in g.nodes)
    yield ("softmax" if has_softmax else None), g
    if has_softmax:
        from ..passes.heads import argmax_head
        loaded.graph = argmax_head(loaded.graph)  # before quantization, as compile --softmax argmax does
        yield "argmax", prepare(loaded, design.precision)[0]


def _build(design: HlsDesign, options, seed: int, tmp: Path, progress: Callable[[str], None]):
    """Convert and write the first graph of the design hls4ml takes; returns ``(head, graph, model, seconds,
    notes)`` or, when none converts, ``(None, None, None, None, reasons)``."""
    from ..backends.hls.project import build_model, write_project

    reasons = []
    for i, (head, g) in enumerate(_graphs(design, seed)):
        label = f"{design.name}" + (f" ({head} head)" if head else "")
        progress(f"{label}: converting to hls4ml ({options.backend}, io_{options.io}, {options.strategy}) and "
                 "writing the project")
        t0 = time.perf_counter()
        try:
            hm = build_model(g, options, tmp / f"prj{i}")
            write_project(hm, tmp / f"out{i}")
        except BitforgeError as e:  # HlsError, or an extension layer's refusal: the reason, named by the error
            reasons.append(f"{head or 'graph'}: {e}")
            continue
        return head, g, hm, time.perf_counter() - t0, reasons
    return None, None, None, None, reasons


def _graph_row(design: HlsDesign, batch: int, repeats: int, seed: int, options,
               progress: Callable[[str], None]) -> HlsRow:
    from .. import emulate
    from ..backends.hls.project import compile_csim, csim_codes
    from ..verify.compare import compare_outputs
    from ..verify.vectors import make_vectors

    row = HlsRow(design.name, design.precision, options.backend, options.io, options.strategy, batch, repeats)
    with tempfile.TemporaryDirectory(prefix="bitforge-bench-hls-") as tmp:
        head, g, hm, convert_s, reasons = _build(design, options, seed, Path(tmp), progress)
        if hm is None:
            row.status, row.note = "n/a", "; ".join(reasons)
            return row
        row.head = head
        row.note = "; ".join(f"{r} -> the --softmax argmax head" for r in reasons) or None
        row.ir_ops = [type(n).__name__ for n in g.nodes]
        row.layers = len(list(hm.model.get_layers()))
        row.convert_write_s = convert_s
        progress(f"{design.name}: building hls4ml's C simulation with g++")
        lib = compile_csim(hm)
        row.gxx_compile_s = lib.compile_seconds
        inputs = make_vectors(g, batch, seed)
        (name,) = g.inputs
        x = np.asarray(inputs[name], dtype=np.float64).reshape(batch, -1)
        progress(f"{design.name}: C simulation vs golden model, batch {batch:,}, warm-up + median of {repeats}")
        codes, row.csim_seconds_median = timed(lambda: csim_codes(lib, x), repeats)
        _, row.golden_seconds_median = timed(lambda: emulate.run(g, inputs), repeats)
    out = g.outputs[0]
    cmp = compare_outputs(g, inputs, {f"{out}_code": codes}, "hls4ml C simulation")
    row.vectors, row.mismatches = cmp.vectors, cmp.mismatches
    row.first_mismatch = cmp.first_mismatch
    row.status = "ok" if cmp.mismatches == 0 else "mismatch"
    _rates(row)
    return row


def _learner_row(design: HlsDesign, batch: int, repeats: int, seed: int, options,
                 progress: Callable[[str], None]) -> HlsRow:
    """The T1 learner (``bitforge learn t1``'s reference KAN) on a T1 stream of ``batch`` steps: its HLS C++
    (:mod:`..backends.hls.learner`, bitforge's templates, not hls4ml) written and built with g++ once, then
    :func:`~..backends.hls.learner.csim_vs_golden` per run: the testbench's loop over the trajectory against the
    golden learner (:func:`..learn.emulate.run`), every prediction, the final state and the LFSR lanes compared."""
    from ..backends.hls import learner as hls_learner
    from ..fixed import quantize
    from ..learn.commands import LearnOptions, resolve
    from ..learn.run import format_label
    from ..learn.spec import build_learner
    from bitforge.models.online_tasks import TaskError

    row = HlsRow(design.name, design.precision, "vitis", "n/a", "n/a", batch, repeats,
                 flow="bitforge learner templates", csim_timing="the testbench's loop over the steps (C++ only)")
    try:
        spec, task = resolve(LearnOptions(task="t1", samples=batch, seed=seed))
    except TaskError as e:
        row.status, row.note = "n/a", f"--batch {batch}: {e}"
        return row
    learner = build_learner(spec, name="t1-kan")
    f = spec.formats
    x, t = quantize(task.x, f.input), quantize(task.target, f.datapath)
    row.precision = format_label(f.datapath, spec.rule.rounding)
    row.ir_ops = [type(n).__name__ for n in learner.layers()]
    row.layers = len(row.ir_ops)
    with tempfile.TemporaryDirectory(prefix="bitforge-bench-hls-") as tmp:
        work = Path(tmp) / "t1"
        progress(f"{design.name}: writing the HLS learner (KAN {list(spec.sizes)}, {row.precision})")
        t0 = time.perf_counter()
        hls_learner.write_hls_learner(learner, work)
        row.convert_write_s = time.perf_counter() - t0
        progress(f"{design.name}: building its C simulation with g++")
        build = hls_learner.build_csim(work)
        row.gxx_compile_s = build.seconds
        progress(f"{design.name}: C simulation vs golden learner, {batch:,} steps, warm-up + median of {repeats}")
        runs = [hls_learner.csim_vs_golden(learner, x, t, work=work, build=build) for _ in range(1 + repeats)]
    first = runs[0]
    row.vectors, row.mismatches, row.first_mismatch = first["vectors"], first["mismatches"], first["first_mismatch"]
    row.state_mismatches, row.lane_mismatches = first["state_mismatches"], first["lane_mismatches"]
    row.state_codes = first["state_codes"]
    bad = any(r[k] for r in runs for k in ("mismatches", "state_mismatches", "lane_mismatches"))
    row.status = "mismatch" if bad else "ok"
    row.csim_seconds_median = float(np.median([r["csim_seconds"] for r in runs[1:]]))
    row.golden_seconds_median = float(np.median([r["golden_seconds"] for r in runs[1:]]))
    _rates(row)
    return row


def _rates(row: HlsRow) -> None:
    row.csim_samples_per_s = row.vectors / row.csim_seconds_median
    row.golden_samples_per_s = row.vectors / row.golden_seconds_median
    row.golden_over_csim = row.golden_samples_per_s / row.csim_samples_per_s


def bench_design(name: str, batch: int = DEFAULT_BATCH, repeats: int = DEFAULT_REPEATS, seed: int = 0,
                 options=None, progress: Callable[[str], None] = lambda m: None) -> HlsRow:
    """One row of the benchmark (``options``: an :class:`~..backends.hls.convert.HlsOptions`, None: defaults)."""
    from ..backends.hls.convert import HlsOptions

    design = DESIGNS[parse_designs(name)[0]]
    options = HlsOptions() if options is None else options
    make = _learner_row if design.kind == "learner" else _graph_row
    return make(design, batch, repeats, seed, options, progress)


def run_bench(designs: Optional[Sequence[str]] = None, batch: int = DEFAULT_BATCH, repeats: int = DEFAULT_REPEATS,
              seed: int = 0, options=None, progress: Callable[[str], None] = lambda m: None) -> list[HlsRow]:
    """:func:`bench_design` for each design (None: all of :data:`DESIGNS`), rows in that order."""
    return [bench_design(d, batch, repeats, seed, options, progress)
            for d in (list(DESIGNS) if designs is None else designs)]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``bench hls`` options (``--json`` comes with every suite)."""
    from ..cli_types import repeat_count, vector_count

    p.add_argument("--designs", metavar="A,B", help=f"designs to run, comma-separated (default all: "
                   f"{', '.join(DESIGNS)})")
    p.add_argument("--batch", type=vector_count, default=DEFAULT_BATCH,
                   help=f"vectors per timed run (learner: steps of the trajectory; default {DEFAULT_BATCH})")
    p.add_argument("--repeats", type=repeat_count, default=DEFAULT_REPEATS,
                   help=f"timed runs after a warm-up, the median is reported (default {DEFAULT_REPEATS}); the "
                        "project is converted and compiled once")


def _gxx_version() -> Optional[str]:
    gxx = shutil.which("g++")
    if gxx is None:
        return None
    try:
        out = subprocess.run([gxx, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0] if out else None


def host_info() -> dict:
    """What the numbers depend on: the machine, its cores, g++ and hls4ml."""
    try:
        from importlib.metadata import version
        hls4ml_version = version("hls4ml")
    except Exception:  # noqa: BLE001 - not installed: the rows say n/a with the reason
        hls4ml_version = None
    return {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "gxx": _gxx_version(), "hls4ml": hls4ml_version}


def _num(v: Optional[float], fmt: str) -> str:
    return "n/a" if v is None else format(v, fmt)


def _ratio(v: Optional[float]) -> str:
    """Two decimals, or two significant digits below 0.1 (the learner's C++ loop is hundreds of times faster)."""
    return "n/a" if v is None else f"{v:.2f}" if v >= 0.1 else f"{v:.2g}"


def _flow(r: HlsRow) -> str:
    if r.flow == "hls4ml":
        return f"hls4ml {r.backend}/{r.io}/{r.strategy}"
    return f"bitforge ({r.backend})"


def table(rows: Sequence[HlsRow]):
    """The rows as one rich table; a caption gives each n/a row's reason and each substituted head."""
    from rich import box
    from rich.table import Table

    batch = f", batch {rows[0].batch:,}, median of {rows[0].repeats}" if rows else ""
    t = Table(title=f"bench hls: HLS C simulation vs golden model{batch}", title_justify="left",
              box=box.SIMPLE_HEAD, padding=(0, 1), collapse_padding=True, pad_edge=False, show_edge=False)
    cols = ("design", "HLS C++", "layers", "convert+write s", "g++ s", "C-sim/s", "golden/s", "golden/C-sim",
            "vectors", "mismatches")
    for col in cols:
        t.add_column(col, justify="left" if col in ("design", "HLS C++") else "right", no_wrap=True)
    notes = []
    for r in rows:
        name = r.design if r.precision is None else f"{r.design} @{r.precision}"
        if r.head == "argmax":
            name += " (argmax)"
        if r.note:
            notes.append(f"{r.design}: {r.note}")
        if r.state_mismatches is not None:
            notes.append(f"{r.design}: mismatches counts predictions; after the trajectory {r.state_mismatches} of "
                         f"{r.state_codes} stored codes and {r.lane_mismatches} LFSR lanes differ")
        if r.status == "n/a":
            t.add_row(name, _flow(r), *(["n/a"] * (len(cols) - 2)))
            continue
        t.add_row(name, _flow(r), str(r.layers), _num(r.convert_write_s, ".2f"),
                  _num(r.gxx_compile_s, ".1f"), _num(r.csim_samples_per_s, ",.0f"),
                  _num(r.golden_samples_per_s, ",.0f"), _ratio(r.golden_over_csim),
                  _num(r.vectors, ","), _num(r.mismatches, ","))
    timings = sorted({(_flow(r).split()[0], r.csim_timing) for r in rows if r.status != "n/a"})
    notes += [f"C-sim/s of {flow}: {how}" for flow, how in timings]
    if notes:
        t.caption = "\n".join(notes)
        t.caption_justify = "left"
    return t


def write_json(rows: Sequence[HlsRow], path: Path, command: Optional[str] = None) -> None:
    doc = {"benchmark": "hls", "command": command, "rows": [asdict(r) for r in rows], "host": host_info()}
    Path(path).write_text(json.dumps(doc, indent=2) + "\n")
