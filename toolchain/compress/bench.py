"""``bitforge bench compress``: every registered method on one model, one text, one set of chunks, in one run.

The model is loaded and the text tokenised once; the base weights are snapshotted and restored before each
setting. With ``statistics="sequential"`` (default) each setting recalibrates block by block on the inputs the
already compressed blocks produce, like ``bitforge quantize`` does (the GPTQ protocol; ``true-sequential``: linear
by linear, see :mod:`.driver`). ``float`` computes the
float model's statistics once and reuses them for every method (:class:`.driver.StatsCache`): much faster, but
error-feedback methods then fit each layer to inputs it will not see. Measured on SmolLM2 at W3 g64: GPTQ 32.1
sequential vs 46.1 float (RTN: 42.7), although with float statistics GPTQ still lowers every layer's own error on
held-out tokens 1.1-9x below RTN's (a hand check, layer by layer): the compensation is what does not carry over. ``seconds`` is the time spent inside the method (summed
over layers; what "NeUQI within 5x of RTN" compares), ``wall_seconds`` the whole compression including forwards.
A method that is not registered is skipped with a note; a setting the method refuses (BitforgeError) is listed;
any other exception marks the run failed (exit 1) but the remaining settings still run.
"""
from __future__ import annotations

import contextlib
import copy
import json
import traceback
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from ..errors import BitforgeError
from .api import CompressConfig

QUICK_CALIB_CHUNKS = 4
# LittleBit-2 + distillation rows: steps of one 512-token chunk (see distill.py; 17-21 s a step on 2 shared cores).
DISTILL_STEPS, QUICK_DISTILL_STEPS, DISTILL_LR = 50, 10, 1e-2

# Measured on SmolLM2-135M (Q4_1 dequantized) and this text, ctx 512, 8 x 512 tokens (the reference points).
REFERENCES = {("base", None, None): 14.70, ("rtn", 4, 64): 19.43, ("rtn", 3, 64): 42.96, ("rtn", 2, 32): 30329.0}


@dataclass(frozen=True)
class Setting:
    method: str
    bits: int = 4
    group: int | None = 64
    rank: int = 0
    bpw: float | None = None
    distill: int = 0  # distillation steps after the post-training fit (LittleBit-2's QAT step)

    @property
    def name(self) -> str:
        """What ``--methods`` selects: the method, ``+kd`` for its distilled rows."""
        return self.method + ("+kd" if self.distill else "")

    @property
    def label(self) -> str:
        if self.bpw is not None:
            return f"{self.method} {self.bpw:g} bpw" + (f" + KD {self.distill}" if self.distill else "")
        if self.method.startswith("nvfp4"):
            return self.method
        g = f"g{self.group}" if self.group else "ch"
        return f"{self.method} W{self.bits} {g}" + (f" r{self.rank}" if self.rank else "")

    def config(self) -> CompressConfig:
        return CompressConfig(method=self.method, bits=self.bits, group=self.group, rank=self.rank, bpw=self.bpw)


UNIFORM = ("rtn", "neuqi", "gptq", "neuqi+gptq")


def settings(quick: bool = False) -> list[Setting]:
    """The issue's benchmark grid (quick: one setting per method at 3 bits)."""
    if quick:
        return [*(Setting(m, 3, 64) for m in UNIFORM), Setting("qera", 3, 64, 16), Setting("srr", 3, 64, 16),
                Setting("osaq+rtn", 3, 64), Setting("osaq+gptq", 3, 64), Setting("littlebit2", 1, None, bpw=0.55),
                Setting("littlebit2", 1, None, bpw=0.55, distill=QUICK_DISTILL_STEPS), Setting("nvfp4", 4, 16)]
    grid = [Setting("rtn", 4, 64)]
    for bits, group in ((3, 64), (2, 32), (2, 64)):
        grid += [Setting(m, bits, group) for m in UNIFORM]
    for rank in (16, 32):
        grid += [Setting("qera", 3, 64, rank), Setting("srr", 3, 64, rank)]
    grid += [Setting("osaq+rtn", 3, 64), Setting("osaq+gptq", 3, 64)]
    grid += [Setting("littlebit2", 1, None, bpw=b) for b in (1.0, 0.55, 0.3)]
    grid += [Setting("littlebit2", 1, None, bpw=b, distill=DISTILL_STEPS) for b in (1.0, 0.55, 0.3)]
    grid += [Setting("nvfp4", 4, 16), Setting("nvfp4-b128", 4, 16)]
    return grid


@dataclass(frozen=True)
class BenchOptions:
    model: str = "smollm2"
    methods: tuple[str, ...] = ()
    quick: bool = False
    calib_chunks: int | None = None
    eval_chunks: int = 8
    statistics: str = "sequential"
    ctx: int = 512
    batch_size: int = 4
    text: str = "pydoc_data.topics"


@dataclass
class Row:
    """One JSON row: the issue's keys first, then context."""

    method: str
    bits: int | None
    group: int | None
    rank: int
    bpw: float | None
    ppl: float | None
    seconds: float
    label: str = ""
    wall_seconds: float = 0.0
    eval_seconds: float = 0.0
    reference_ppl: float | None = None
    status: str = "ok"
    distill: dict | None = None  # LittleBit-2 + KD rows: steps, KL first/last, seconds (included in wall_seconds)
    source: str = ""  # the earlier run's JSON a merged row comes from ("" = measured by this run)


@dataclass
class BenchResult:
    model: str
    text: dict
    statistics: str
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    load_seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return any(r.status.startswith("failed") for r in self.rows)


def run(opts: BenchOptions, log=print, progress_factory=None, on_row=None) -> BenchResult:
    """Every setting of the grid on one loaded model; ``on_row(result)`` after each finished row (the CLI rewrites
    its JSON then, so a run stopped after hours keeps the rows it measured)."""
    from .calibration import prepare_text
    from .driver import StatsCache, restore_weights, snapshot_weights
    from .methods import describe_missing, load_all
    from .model_io import load_model, resolve_model
    from .perplexity import perplexity

    registry = load_all()
    unknown = [m for m in opts.methods if m not in registry and m not in {s.name for s in settings()} | {"none"}]
    if unknown:
        raise BitforgeError(f"--methods: unknown {', '.join(unknown)}; registered: {', '.join(sorted(registry))}")
    text_cfg = text_config(opts)
    source = resolve_model(opts.model)

    lm = load_model(source, log=log)
    log(f"loaded {source.spec} in {lm.seconds:.1f} s")
    split = prepare_text(lm.tokenizer, text_cfg)
    log(split.describe())
    result = BenchResult(source.spec, text_cfg.to_json(), opts.statistics, load_seconds=lm.seconds)
    note = describe_missing()
    if note:
        result.notes.append(note)

    base = perplexity(lm.model, split.eval, batch_size=max(1, opts.batch_size // 2))
    result.rows.append(Row("base", None, None, 0, lm.source_bpw, base.ppl, 0.0, "base (as loaded)",
                           eval_seconds=base.seconds, reference_ppl=_reference("base", None, None, opts)))
    log(f"base: perplexity {base.ppl:.3f} ({base.seconds:.1f} s)")

    snapshot = snapshot_weights(lm.model)
    cache = StatsCache()
    try:
        for s in settings(opts.quick):
            if opts.methods and s.name not in opts.methods:
                continue
            if s.method not in registry:
                result.notes.append(f"{s.label}: skipped, method {s.method!r} is not registered")
                continue
            restore_weights(lm.model, snapshot)
            result.rows.append(_run_setting(lm.model, split, s, opts, cache, log, progress_factory))
            if on_row is not None:
                on_row(result)
    finally:
        restore_weights(lm.model, snapshot)
    return result


def measured_labels(opts: BenchOptions) -> set[str]:
    """The settings a run with these options measures (its grid filtered by ``--methods``)."""
    return {s.label for s in settings(opts.quick) if not opts.methods or s.name in opts.methods}


def text_config(opts: BenchOptions):
    from .calibration import TextConfig

    calib_chunks = opts.calib_chunks or (QUICK_CALIB_CHUNKS if opts.quick else TextConfig().calib_chunks)
    return TextConfig(text=opts.text, ctx=opts.ctx, eval_chunks=opts.eval_chunks, calib_chunks=calib_chunks)


def read_earlier(paths: list[str]) -> dict[str, dict]:
    """The JSON documents named by ``--merge``, parsed once (a missing or unreadable file is a BitforgeError)."""
    docs = {}
    for name in paths:
        path = Path(name)
        if not path.is_file():
            raise BitforgeError(f"--merge {name}: no such file; give the JSON of an earlier bitforge bench compress "
                                "run")
        try:
            docs[name] = json.loads(path.read_text())
        except ValueError as e:
            raise BitforgeError(f"--merge {name}: not a bench compress JSON ({e})") from None
    return docs


def check_mergeable(opts: BenchOptions, earlier: dict[str, dict]) -> None:
    """Refuse, before any model is loaded, earlier runs measured another way (see :func:`merge_rows`)."""
    from .model_io import resolve_model

    mine = BenchResult(resolve_model(opts.model).spec, text_config(opts).to_json(), opts.statistics)
    merge_rows(mine, earlier)


def merge_rows(result: BenchResult, earlier: dict[str, dict], skip: set[str] = frozenset()) -> BenchResult:
    """A copy of ``result`` plus the rows of earlier runs' JSON (``{name: document}``) for settings it neither
    measured nor will measure (``skip``), in the grid's order. The earlier runs must have used the same model,
    text, chunks and statistics (else BitforgeError): so the docs' one table can be refreshed method by method,
    and every merged row names the file it came from (``source``)."""
    order = {s.label: i for i, s in enumerate(settings())}
    rows = list(result.rows)
    have = {r.label for r in rows} | set(skip)
    names = {f.name for f in fields(Row)}
    for name, doc in earlier.items():
        for key in ("model", "text", "statistics"):
            mine = getattr(result, key)
            if doc.get(key) != mine:
                raise BitforgeError(f"--merge {name}: its {key} {doc.get(key)!r} differs from this run's {mine!r}; "
                                    "only rows measured the same way can share a table")
        for raw in doc.get("rows", []):
            row = Row(**{k: v for k, v in raw.items() if k in names})
            if row.method == "base" or row.label in have:
                continue
            row.source = row.source or name
            rows.append(row)
            have.add(row.label)
    rows.sort(key=lambda r: -1 if r.method == "base" else order.get(r.label, len(order)))
    return BenchResult(result.model, result.text, result.statistics, rows, list(result.notes), result.load_seconds)


def _reference(method, bits, group, opts: BenchOptions) -> float | None:
    if opts.model != "smollm2" or opts.ctx != 512 or opts.eval_chunks != 8 or opts.text != "pydoc_data.topics":
        return None
    return REFERENCES.get((method, bits, group))


def _run_setting(model, split, s: Setting, opts: BenchOptions, cache, log, progress_factory) -> Row:
    from .driver import quantize_model
    from .perplexity import perplexity

    row = Row(s.method, s.bits, s.group, s.rank, None, None, 0.0, s.label,
              reference_ppl=_reference(s.method, s.bits, s.group, opts))
    try:
        cfg = s.config()
        teacher = copy.deepcopy(model) if s.distill else None
        bar, callback = progress_factory(s.label) if progress_factory else (contextlib.nullcontext(), None)
        with bar:
            q = quantize_model(model, split.calib, cfg, opts.statistics, opts.batch_size, cache, callback)
        row.bpw, row.seconds, row.wall_seconds = q.bpw, q.method_seconds, q.wall_seconds
        if teacher is not None:
            from .distill import DistillConfig, distill

            bar, callback = (progress_factory(f"{s.label}: distillation") if progress_factory
                             else (contextlib.nullcontext(), None))
            with bar:
                report = distill(model, teacher, q, split.calib, DistillConfig(s.distill, DISTILL_LR), callback)
            row.distill = report.to_json()
            row.wall_seconds += report.seconds
        ppl = perplexity(model, split.eval, batch_size=max(1, opts.batch_size // 2))
        row.ppl, row.eval_seconds = ppl.ppl, ppl.seconds
        kd = (f" (distillation {row.distill['seconds']:.1f} s, KL {row.distill['kl_first']:.2f} -> "
              f"{row.distill['kl_last']:.2f})") if row.distill else ""
        log(f"{s.label}: {q.bpw:.3f} bpw, perplexity {ppl.ppl:.3f}, method {q.method_seconds:.1f} s, "
            f"wall {row.wall_seconds:.1f} s{kd}")
    except BitforgeError as e:
        row.status = f"refused: {e}"
        log(f"{s.label}: refused: {e}")
    except Exception as e:  # noqa: BLE001 - one broken method must not hide the others' numbers
        row.status = f"failed: {type(e).__name__}: {e}"
        log(f"{s.label}: FAILED\n{traceback.format_exc()}")
    return row


def table(result: BenchResult):
    from rich.table import Table

    t = Table(title=f"bench compress: {result.model}, ctx {result.text['ctx']}, {result.text['eval_chunks']} "
                    f"eval chunks, {result.text['calib_chunks']} calibration chunks, {result.statistics} statistics",
              title_justify="left")
    merged = any(r.source for r in result.rows)
    for col in ("setting", "bpw", "ppl", "reference", "method s", "wall s", "eval s", "status") + (
            ("from",) if merged else ()):
        t.add_column(col, justify="left" if col in ("setting", "status", "from") else "right",
                     no_wrap=col != "status")
    for r in result.rows:
        t.add_row(r.label, f"{r.bpw:.3f}" if r.bpw is not None else "-", _fmt_ppl(r.ppl), _fmt_ppl(r.reference_ppl),
                  f"{r.seconds:.1f}", f"{r.wall_seconds:.1f}", f"{r.eval_seconds:.1f}",
                  r.status if len(r.status) < 60 else r.status[:57] + "...",
                  *((r.source or "this run",) if merged else ()))
    return t


def comparisons(result: BenchResult) -> list[str]:
    """The issue's targets as ratios of rows of this run: NeUQI vs RTN (perplexity and method time), SRR vs QERA at
    equal bits and rank, OSAQ vs its quantizer alone."""
    by = {(r.method, r.bits, r.group, r.rank): r for r in result.rows if r.ppl is not None}
    out = []
    for (m, b, g, k), r in sorted(by.items(), key=lambda kv: str(kv[0])):
        base = {"neuqi": "rtn", "srr": "qera", "osaq+rtn": "rtn", "osaq+gptq": "gptq"}.get(m)
        other = by.get((base, b, g, k)) if base else None
        if other is None:
            continue
        ratio = (f"{other.ppl / r.ppl:.2f}x lower" if r.ppl <= other.ppl else f"{r.ppl / other.ppl:.4f}x higher")
        line = f"{r.label} vs {other.label}: perplexity {r.ppl:,.3f} vs {other.ppl:,.3f} ({ratio})"
        if m == "neuqi" and other.seconds > 0:
            line += f"; method time {r.seconds:.1f} s vs {other.seconds:.1f} s ({r.seconds / other.seconds:.0f}x)"
        out.append(line)
    return out


def _fmt_ppl(p: float | None) -> str:
    if p is None:
        return "-"
    return f"{p:,.0f}" if p >= 1000 else f"{p:.2f}"


def write_json(result: BenchResult, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"benchmark": "compress", "model": result.model, "text": result.text, "statistics": result.statistics,
           "load_seconds": round(result.load_seconds, 2), "notes": result.notes,
           "rows": [asdict(r) for r in result.rows], "comparisons": comparisons(result)}
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)  # rewritten after every row: a reader never sees half a file


def write_plot(result: BenchResult, path: Path) -> None:
    """Perplexity (log) against effective bits per weight, one marker per method; the base as a dashed line."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(8, 5.5))
    rows = [r for r in result.rows if r.ppl is not None and r.method != "base" and r.bpw is not None]
    markers = "osD^v<>Pp*hX"
    def series(r: Row) -> str:
        return r.method + (" + KD" if r.distill else "")

    for i, name in enumerate(sorted({series(r) for r in rows})):
        pts = sorted((r.bpw, r.ppl, r.label) for r in rows if series(r) == name)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], markers[i % len(markers)], label=name, alpha=0.85)
        for x, y, label in pts:
            ax.annotate(label.replace(name.split(" ")[0], "").strip(), (x, y), fontsize=6, xytext=(3, 3),
                        textcoords="offset points")
    base = next((r for r in result.rows if r.method == "base" and r.ppl is not None), None)
    if base is not None:
        ax.axhline(base.ppl, color="grey", ls="--", lw=1, label=f"base {base.ppl:.2f}")
        if base.bpw is not None:
            ax.plot([base.bpw], [base.ppl], "k*", ms=10)
    ax.set_yscale("log")
    ax.set_xlabel("effective bits per weight (every scale, zero-point and factor counted)")
    ax.set_ylabel(f"perplexity (ctx {result.text['ctx']}, {result.text['eval_chunks']} chunks)")
    ax.set_title(f"{result.model}: perplexity vs bits ({result.statistics} calibration statistics)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
