"""A sweep's outputs in OUT: ``sweep.json`` (every row, for programs), ``pareto.png`` (the fronts, for a glance) and
``report.html`` (one page for people: the summary, the best point per constraint, the fronts, every row).

The driver calls :func:`write_outputs` after every finished row and at the end, so each file is written
atomically (a temporary file and a rename: a browser or a program reading OUT during a sweep sees the previous
version or the new one, never half of one), and the page works with what there is: no ok rows yet, rows without
a metric, a spec with no Pareto pairs. The same rows give the same bytes (no dates, no software versions in
the PNG; the page embeds nothing that is not in the rows, the spec or ``info``), so OUT can be compared across
runs and executors.

The page is self-contained: CSS and the sorting script inline, the plot inline as a base64 data URI; it opens
offline from the file system and each row links its point's report.md / report.json / metrics.json by a path
relative to OUT (where the page is).
"""
from __future__ import annotations

import base64
import dataclasses
import io
import json
import math
from pathlib import Path
from typing import Any, Optional
from urllib.parse import quote

from ..flows.cache import write_atomic
from ..templating import environment
from ..version import bitforge_version
from .model import METRICS, STATUSES, Constraint, Row, SweepSpec
from .pareto import best, pareto_front, value

__all__ = ["JSON", "PNG", "HTML", "DPI", "write_outputs", "sweep_json", "plot_png", "render_html", "describe"]

JSON, PNG, HTML = "sweep.json", "pareto.png", "report.html"
DPI = 100


def write_outputs(out: Path, spec: SweepSpec, rows: list[Row], info: dict) -> dict[str, Path]:
    """Write ``sweep.json``, ``pareto.png`` and ``report.html`` into ``out`` (created if missing), each
    atomically; returns file name -> path. ``info``: what the driver knows about the run (executor, workers,
    seconds, counts, ...; JSON values), shown in the summary and kept in sweep.json as given, plus
    ``bitforge_version`` when absent."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if not info.get("bitforge_version"):
        info = {**info, "bitforge_version": bitforge_version()}
    fronts = [(x, y, pareto_front(rows, x, y)) for x, y in spec.pareto]
    bests = [(c, best(rows, c, _base_target(spec))) for c in spec.constraints]
    png = _plot_once(spec, rows, fronts)
    paths = {JSON: out / JSON, PNG: out / PNG, HTML: out / HTML}
    write_atomic(paths[JSON], sweep_json(spec, rows, info, fronts, bests))
    write_atomic(paths[PNG], png)
    write_atomic(paths[HTML], render_html(out, spec, rows, info, fronts, bests, png))
    return paths


def _base_target(spec: SweepSpec) -> Optional[str]:
    t = spec.base.get("target")
    return None if t is None else str(t)


# ----------------------------------------------------------------------------------------------------- sweep.json
def sweep_json(spec: SweepSpec, rows: list[Row], info: dict, fronts=None, bests=None) -> str:
    """The text of sweep.json: ``spec`` (its fields), ``info``, ``rows`` (each :meth:`Row.to_json`; read back with
    :meth:`Row.from_json`), and the report's answers by row key: ``pareto`` (x, y, keys on the front, in x order)
    and ``best`` (label, key or null)."""
    if fronts is None:
        fronts = [(x, y, pareto_front(rows, x, y)) for x, y in spec.pareto]
    if bests is None:
        bests = [(c, best(rows, c, _base_target(spec))) for c in spec.constraints]
    doc = {"spec": dataclasses.asdict(spec), "info": info, "rows": [r.to_json() for r in rows],
           "pareto": [{"x": x, "y": y, "keys": [r.key for r in front]} for x, y, front in fronts],
           "best": [{"label": c.label, "best": c.best, "key": r.key if r else None} for c, r in bests]}
    return json.dumps(doc, indent=1, default=str) + "\n"


# ------------------------------------------------------------------------------------------------------ pareto.png
def _axis_label(name: str) -> str:
    m = METRICS[name]
    unit = f" ({m.unit})" if m.unit else ""
    return f"{name}{unit}, {'lower' if m.goal == 'min' else 'higher'} is better"


def _finite(row: Row, name: str) -> Optional[float]:
    v = value(row, name)
    return v if v is not None and math.isfinite(v) else None


def plot_png(spec: SweepSpec, rows: list[Row], fronts=None) -> bytes:
    """pareto.png's bytes: a subplot per ``spec.pareto`` pair (x, y). Every row with both metrics is a point (ok
    rows blue; other statuses, e.g. dominated or timing-not-met, grey crosses: they compete on no front); the
    front is a red staircase, its points labelled with their point index (the "#" column of the page). The
    staircase is the edge of what the front dominates: a horizontal step first when lower x is better, a
    vertical one first when higher x is better. Deterministic: a Figure of its own, fixed size and DPI, no
    software metadata."""
    from matplotlib.figure import Figure

    if fronts is None:
        fronts = [(x, y, pareto_front(rows, x, y)) for x, y in spec.pareto]
    title = spec.name.replace("$", r"\$")  # a "$" would start matplotlib's math text
    if not fronts:
        fig = Figure(figsize=(6, 1.5), dpi=DPI)
        fig.text(0.5, 0.5, f"{title}: the spec asks for no Pareto pairs", ha="center", va="center")
        return _png(fig)
    cols = min(len(fronts), 3)
    nrows = math.ceil(len(fronts) / cols)
    fig = Figure(figsize=(5.4 * cols, 4.4 * nrows + 0.4), dpi=DPI)
    axes = fig.subplots(nrows, cols, squeeze=False).ravel()
    ok = sum(r.status == "ok" for r in rows)
    fig.suptitle(f"{title}: Pareto fronts ({ok} ok of {len(rows)} rows)", fontsize=11)
    for ax, (x, y, front) in zip(axes, fronts):
        points = [(_finite(r, x), _finite(r, y), r.status == "ok") for r in rows]
        points = [p for p in points if p[0] is not None and p[1] is not None]
        good = [p for p in points if p[2]]
        other = [p for p in points if not p[2]]
        if other:
            ax.scatter([p[0] for p in other], [p[1] for p in other], marker="x", color="0.65", s=24, zorder=2,
                       label="not ok (dominated, timing, ...)")
        if good:
            ax.scatter([p[0] for p in good], [p[1] for p in good], color="tab:blue", alpha=0.6, s=24, zorder=3,
                       label="ok")
        line = [(_finite(r, x), _finite(r, y), r.index) for r in front]
        line = [p for p in line if p[0] is not None and p[1] is not None]
        if line:
            steps = "steps-post" if METRICS[x].goal == "min" else "steps-pre"
            ax.plot([p[0] for p in line], [p[1] for p in line], drawstyle=steps, color="tab:red", marker="o",
                    markersize=5, lw=1.5, zorder=4, label="Pareto front")
            for px, py, index in line:
                ax.annotate(f"#{index}", (px, py), xytext=(4, 4), textcoords="offset points", fontsize=7,
                            color="tab:red", zorder=5)
        if points:
            ax.legend(loc="best", fontsize=7, framealpha=0.9)
        else:
            ax.text(0.5, 0.5, f"no row has both {x} and {y} yet", transform=ax.transAxes, ha="center",
                    va="center", color="0.4")
        ax.set_xlabel(_axis_label(x), fontsize=9)
        ax.set_ylabel(_axis_label(y), fontsize=9)
        ax.set_title(f"{y} against {x}", fontsize=10)
        ax.grid(color="0.92", zorder=0)
    for ax in axes[len(fronts):]:
        ax.set_visible(False)
    fig.tight_layout()
    return _png(fig)


#: The last plot drawn in this process, by what it shows: the driver rewrites the outputs after every row and a few
#: times more at the end (after the cached rows, after each phase); only a row that moves a point redraws it.
_LAST_PLOT: dict[str, bytes] = {}


def _plot_once(spec: SweepSpec, rows: list[Row], fronts) -> bytes:
    """:func:`plot_png`, reusing the last drawing when everything it draws is the same: the title, the pairs, and
    per row its index, whether it is ok and the values of the pairs' metrics (the fronts follow from those)."""
    names = sorted({m for pair in spec.pareto for m in pair})
    key = json.dumps([spec.name, spec.pareto, [(r.index, r.status == "ok", [value(r, m) for m in names])
                                               for r in rows]])
    if key not in _LAST_PLOT:
        png = plot_png(spec, rows, fronts)
        _LAST_PLOT.clear()
        _LAST_PLOT[key] = png
    return _LAST_PLOT[key]


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


# ----------------------------------------------------------------------------------------------------- report.html
def _text(v: Any) -> str:
    """A value as the page shows it: None empty, whole floats without ".0", others to 6 significant digits."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if math.isfinite(v) and v.is_integer() and abs(v) < 1e15:
            return str(int(v))
        return f"{v:.6g}"
    if isinstance(v, (list, tuple, dict)):
        return json.dumps(v, separators=(", ", ": "), default=str)
    return str(v)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _sort_key(v: Any, numeric: bool) -> str:
    """The cell's data-sort: a number JavaScript's parseFloat reads, or the text; "" for no value (sorts last)."""
    if v is None:
        return ""
    if numeric:
        if not _number(v) or math.isnan(v):  # a metric a tool wrote as text sorts with the missing ones
            return ""
        return repr(float(v)) if math.isfinite(v) else ("Infinity" if v > 0 else "-Infinity")
    return _text(v)


def describe(c: Constraint) -> str:
    """A constraint's bounds in words: "fits ice40-up5k, latency_ns < 200"."""
    parts = [f"fits {b}" if name == "fits" else f"{name} {op} {_text(b)}" for name, op, b in c.where]
    return ", ".join(parts) if parts else "no bound"


def _heading(name: str) -> dict:
    m = METRICS.get(name)
    return {"label": name, "unit": m.unit if m and m.unit else "", "title": m.description if m else ""}


def _columns(spec: SweepSpec, rows: list[Row]) -> tuple[list[str], list[str]]:
    """Param and metric column names: the spec's order first, then any a row has beyond it (first seen)."""
    params = [a.name for a in spec.axes]
    metrics = list(spec.metrics)
    for r in rows:
        params += [k for k in r.params if k not in params]
        metrics += [k for k in r.metrics if k not in metrics]
    return params, metrics


def _links(out: Path, row: Row) -> list[dict]:
    """The point's files as links relative to OUT; a listed file that is not there is shown, unlinked."""
    links = [{"name": name, "href": quote(path), "exists": (out / path).is_file()}
             for name, path in sorted(row.files.items())]
    if row.folder:
        links.append({"name": "folder", "href": quote(row.folder.rstrip("/") + "/"),
                      "exists": (out / row.folder).is_dir()})
    return links


def _table(out: Path, spec: SweepSpec, rows: list[Row]) -> dict:
    params, metrics = _columns(spec, rows)
    head = [{"label": "#", "unit": "", "title": "point index, in sampled order", "numeric": True}]
    for p in params:
        numeric = all(_number(r.params.get(p)) for r in rows if r.params.get(p) is not None)
        head.append({"label": p, "unit": "", "title": "swept setting", "numeric": numeric})
    head += [{**_heading(m), "numeric": True} for m in metrics]
    head += [{"label": "status", "unit": "", "title": "", "numeric": False},
             {"label": "stage", "unit": "", "title": "last stage completed", "numeric": False},
             {"label": "seconds", "unit": "s", "title": "wall time of the run that made the row", "numeric": True},
             {"label": "cached", "unit": "", "title": "reused without running", "numeric": False},
             {"label": "reason", "unit": "", "title": "why a point is not ok", "numeric": False}]
    body = []
    for r in rows:
        values = [r.index, *(r.params.get(p) for p in params), *(r.metrics.get(m) for m in metrics),
                  r.status, r.stage, r.seconds, "yes" if r.cached else None, r.reason or None]
        cells = [{"text": _text(v), "sort": _sort_key(v, h["numeric"]),
                  "kind": h["label"] if h["label"] in ("status", "reason") else "num" if h["numeric"] else "text"}
                 for v, h in zip(values, head)]
        body.append({"key": r.key, "status": r.status, "cells": cells, "links": _links(out, r)})
    return {"head": head, "body": body}


def _sampling(spec: SweepSpec) -> str:
    s = spec.sampling
    return s.method if s.method == "grid" else f"{s.method}, n={s.n}, seed={s.seed}"


def _summary(spec: SweepSpec, rows: list[Row], info: dict) -> list[tuple[str, str]]:
    counts = {s: sum(r.status == s for r in rows) for s in STATUSES}
    shown = [f"{counts[s]} {s}" for s in STATUSES if counts[s] or s in ("ok", "failed")]
    shown.append(f"{sum(r.cached for r in rows)} cached")
    items = [("sweep", spec.name), ("spec file", spec.source or "(none)"), ("kind", spec.kind),
             ("stage", spec.stage), ("sampling", _sampling(spec)),
             ("axes", "; ".join(f"{a.name}: {', '.join(_text(v) for v in a.values)}" for a in spec.axes) or "(none)"),
             ("points", f"{len(rows)} rows: {', '.join(shown)}")]
    known = {"executor": "executor", "workers": "workers", "mem_gb": "memory guard (GB per point)",
             "seconds": "wall seconds", "counts": "driver counts", "bitforge_version": "bitforge"}
    for k, label in known.items():
        v = info.get(k)
        if v is not None:
            text = ", ".join(f"{n} {_text(c)}" for n, c in v.items()) if isinstance(v, dict) else _text(v)
            items.append((label, text if k != "seconds" or not _number(v) else f"{v:.1f}"))
    items += [(k, _text(v)) for k, v in info.items() if k not in known and v is not None]
    return items


def render_html(out: Path, spec: SweepSpec, rows: list[Row], info: dict, fronts=None, bests=None,
                png: Optional[bytes] = None) -> str:
    """report.html's text (see the module docstring). ``out``: the folder the page is written to (links are
    relative to it; a listed point file that is missing there is shown without a link)."""
    out = Path(out)
    if fronts is None:
        fronts = [(x, y, pareto_front(rows, x, y)) for x, y in spec.pareto]
    if bests is None:
        bests = [(c, best(rows, c, _base_target(spec))) for c in spec.constraints]
    params, _ = _columns(spec, rows)
    label = lambda r: ", ".join(f"{p}={_text(r.params[p])}" for p in params if p in r.params)  # noqa: E731
    best_rows = [{"label": c.label, "bounds": describe(c), "metric": _heading(c.best),
                  "row": None if r is None else {"key": r.key, "index": r.index, "params": label(r),
                                                 "value": _text(r.metrics.get(c.best)), "status": r.status}}
                 for c, r in bests]
    front_tables = [{"x": _heading(x), "y": _heading(y),
                     "goals": f"{x}: {METRICS[x].goal}, {y}: {METRICS[y].goal}",
                     "rows": [{"key": r.key, "index": r.index, "params": label(r), "x": _text(r.metrics.get(x)),
                               "y": _text(r.metrics.get(y))} for r in front]} for x, y, front in fronts]
    return environment("bitforge.toolchain.sweep").get_template("report.html.j2").render(
        name=spec.name, summary=_summary(spec, rows, info), bests=best_rows, fronts=front_tables,
        table=_table(out, spec, rows), plot=base64.b64encode(png).decode("ascii") if png and spec.pareto else None,
        pairs=[f"{y} against {x}" for x, y in spec.pareto])
