"""sweep.json, pareto.png and report.html (toolchain/sweep/report.py) from hand-made rows.

The page is read back with the standard library's HTML parser, so the checks see what a browser would show:
cell texts, attributes and links, not substrings of the markup. Sorting in a real browser:
tests/sweep/test_report_browser.py.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from bitforge.toolchain.sweep import report
from bitforge.toolchain.sweep.model import Axis, Constraint, Row, Sampling, SweepSpec
from bitforge.toolchain.sweep.pareto import best, pareto_front

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def make_spec(pareto=(("lut", "error"), ("lut", "fmax_mhz")), constraints=None, name="kan <&> sweep") -> SweepSpec:
    if constraints is None:
        constraints = (Constraint("fits ice40-up5k, lowest error", "error", (("fits", "==", "ice40-up5k"),)),
                       Constraint("latency under 200 ns, fewest LUT", "lut", (("latency_ns", "<", 200),)))
    return SweepSpec(kind="learn", base={"task": "t1", "samples": 4000},
                     axes=(Axis("datapath", ("fixed<16,6>", "fixed<10,3>")), Axis("grid_size", (4, 6)),
                           Axis("target", ("ice40-up5k", "ecp5-25f"))),
                     metrics=("error", "lut", "fmax_mhz", "latency_ns"), stage="pnr", sampling=Sampling("grid"),
                     constraints=constraints, pareto=pareto, name=name, source="/specs/kan.yml", digest="d" * 64)


def make_rows(out: Path | None = None) -> list[Row]:
    """Eight points: six ok, one failed (no metrics, a reason with markup in it), one dominated (synth metrics
    only). With ``out``, each point's report.md is written there (report.json only for even points)."""
    rows = []
    for i, (dp, g, t) in enumerate((dp, g, t) for dp in ("fixed<16,6>", "fixed<10,3>") for g in (4, 6)
                                   for t in ("ice40-up5k", "ecp5-25f")):
        key = f"{i:02d}" + "ab" * 7
        status = {5: "failed", 6: "dominated"}.get(i, "ok")
        metrics = {"error": round(0.3 / (g + i), 6), "lut": 100 * g + 37 * (i % 3), "fmax_mhz": 40.0 + 3 * i,
                   "latency_ns": 120.0 + 20 * i}
        if status == "failed":
            metrics = dict.fromkeys(metrics)
        if status == "dominated":
            metrics.update(fmax_mhz=None, latency_ns=None)
        files = {"report.md": f"points/{key}/report.md", "report.json": f"points/{key}/report.json"}
        rows.append(Row(key=key, index=i, params={"datapath": dp, "grid_size": g, "target": t}, status=status,
                        metrics=metrics, stage="synth" if status == "dominated" else "pnr",
                        reason="yosys: <cell> & \"quotes\" (log: points/x/synth.log)" if status == "failed" else "",
                        folder=f"points/{key}", seconds=1.5 + i, cached=i == 3, files=files))
        if out is not None:
            (out / "points" / key).mkdir(parents=True, exist_ok=True)
            (out / "points" / key / "report.md").write_text(f"# point {i}\n")
            if i % 2 == 0:
                (out / "points" / key / "report.json").write_text("{}\n")
    return rows


INFO = {"executor": "pool", "workers": 2, "seconds": 42.25, "counts": {"done": 7, "cached": 1, "failed": 1}}


class Page(HTMLParser):
    """The parts of report.html the tests look at: every element's attributes by id, the table cells, links."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, dict]] = []
        self.by_id: dict[str, dict] = {}
        self.tables: dict[str, list[list[str]]] = {}  # table id (or class) -> rows of cell texts (th and td)
        self.cell_attrs: dict[str, list[list[dict]]] = {}
        self.links: list[str] = []
        self.text: list[str] = []
        self.images: list[dict] = []
        self.scripts: list[dict] = []
        self.styles: list[dict] = []
        self._table = None
        self._cell = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.by_id[a["id"]] = a
        if tag == "table":
            self._table = a.get("id") or a.get("class")
            self.tables.setdefault(self._table, [])
            self.cell_attrs.setdefault(self._table, [])
        elif tag == "tr" and self._table:
            self.tables[self._table].append([])
            self.cell_attrs[self._table].append([])
        elif tag in ("td", "th") and self._table:
            self._cell = []
            self.cell_attrs[self._table][-1].append(a)
        elif tag == "a":
            self.links.append(a.get("href"))
        elif tag == "img":
            self.images.append(a)
        elif tag == "script":
            self.scripts.append(a)
        elif tag == "link":
            self.styles.append(a)
        if tag not in ("meta", "img", "link", "br", "input"):
            self.stack.append((tag, a))

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self._table:
            self.tables[self._table][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None
        if self.stack and self.stack[-1][0] == tag:
            self.stack.pop()

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        self.text.append(data)


def write(tmp_path: Path, rows=None, spec=None, info=INFO):
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    rows = make_rows(out) if rows is None else rows
    spec = make_spec() if spec is None else spec
    return out, spec, rows, report.write_outputs(out, spec, rows, info)


def test_write_outputs_files(tmp_path):
    out, _, _, paths = write(tmp_path)
    assert paths == {"sweep.json": out / "sweep.json", "pareto.png": out / "pareto.png",
                     "report.html": out / "report.html"}
    assert all(p.is_file() and p.stat().st_size > 0 for p in paths.values())
    assert paths["pareto.png"].read_bytes().startswith(PNG_MAGIC)
    # Written through temporary files and renames: none left behind.
    assert sorted(p.name for p in out.iterdir()) == ["pareto.png", "points", "report.html", "sweep.json"]


def test_sweep_json_round_trip(tmp_path):
    out, spec, rows, paths = write(tmp_path)
    doc = json.loads(paths["sweep.json"].read_text())
    assert [Row.from_json(d) for d in doc["rows"]] == rows
    assert doc["spec"]["name"] == spec.name and doc["spec"]["kind"] == "learn" and doc["spec"]["stage"] == "pnr"
    assert [a["name"] for a in doc["spec"]["axes"]] == ["datapath", "grid_size", "target"]
    assert doc["spec"]["axes"][0]["values"] == ["fixed<16,6>", "fixed<10,3>"]
    assert doc["spec"]["pareto"] == [["lut", "error"], ["lut", "fmax_mhz"]]
    assert {k: doc["info"][k] for k in INFO} == INFO and doc["info"]["bitforge_version"]
    assert doc["pareto"] == [{"x": x, "y": y, "keys": [r.key for r in pareto_front(rows, x, y)]}
                             for x, y in spec.pareto]
    assert [b["key"] for b in doc["best"]] == [best(rows, c).key for c in spec.constraints]


def test_png_deterministic(tmp_path):
    out, spec, rows, paths = write(tmp_path)
    first = paths["pareto.png"].read_bytes()
    report.write_outputs(out, spec, rows, INFO)
    assert paths["pareto.png"].read_bytes() == first
    assert report.plot_png(spec, rows) == first
    # ... and it depends on the rows: one point moved is another picture.
    rows[0].metrics["lut"] += 1000
    assert report.plot_png(spec, rows) != first


def test_outputs_identical_across_processes(tmp_path):
    """Another interpreter (another hash seed) writes the same bytes: nothing depends on set order or state."""
    out, spec, rows, paths = write(tmp_path)
    other = tmp_path / "other"
    shutil.copytree(out / "points", other / "points")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from pathlib import Path; import test_report as t; "
            "from bitforge.toolchain.sweep import report; "
            "report.write_outputs(Path(sys.argv[2]), t.make_spec(), t.make_rows(), t.INFO)")
    subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent), str(other)], check=True,
                   env={**os.environ, "PYTHONHASHSEED": "12345"})
    for name, path in paths.items():
        assert (other / name).read_bytes() == path.read_bytes(), name


def test_png_redrawn_when_a_plotted_value_changes(tmp_path):
    out, spec, rows, paths = write(tmp_path)
    first = paths["pareto.png"].read_bytes()
    # Not plotted (seconds, reason, a metric outside the pairs): the same picture.
    rows[0].seconds, rows[0].reason, rows[0].metrics["latency_ns"] = 99.0, "x", 1.0
    report.write_outputs(out, spec, rows, INFO)
    assert paths["pareto.png"].read_bytes() == first
    # A status (ok -> not ok leaves the fronts) or a plotted value: a new picture, the one a fresh drawing gives.
    for change in (lambda: setattr(rows[1], "status", "timing-not-met"),
                   lambda: rows[2].metrics.update(error=0.001)):
        change()
        report.write_outputs(out, spec, rows, INFO)
        now = paths["pareto.png"].read_bytes()
        assert now != first and now == report.plot_png(spec, rows)
        first = now


def test_png_has_no_software_or_date_metadata(tmp_path):
    data = write(tmp_path)[3]["pareto.png"].read_bytes()
    assert b"matplotlib" not in data.lower() and b"tIME" not in data


def test_html_deterministic(tmp_path):
    out, spec, rows, paths = write(tmp_path)
    first = paths["report.html"].read_text()
    report.write_outputs(out, spec, rows, INFO)
    assert paths["report.html"].read_text() == first
    assert report.render_html(out, spec, rows, {**INFO, "seconds": 1.0}) != first


def test_html_escapes_every_value(tmp_path):
    out, spec, rows, paths = write(tmp_path)
    text = paths["report.html"].read_text()
    # The raw markup never reaches the page; the parsed page shows the values exactly.
    for raw in ("fixed<16,6>", "<cell>", "kan <&> sweep", '"quotes"'):
        assert raw not in text
    page = Page(text)
    table = page.tables["rows"]
    head, body = table[0], table[1:]
    col = {name: i for i, name in enumerate(head)}
    assert [r[col["datapath"]] for r in body] == [r.params["datapath"] for r in rows]
    failed = body[5]
    assert failed[col["reason"]] == rows[5].reason
    assert "kan <&> sweep" in "".join(page.text)
    # No element came from a value: the only scripts are the page's own, the tags balance.
    assert len(page.scripts) == 1 and not page.stack


def test_html_summary(tmp_path):
    out, spec, rows, paths = write(tmp_path)
    page = Page(paths["report.html"].read_text())
    text = " ".join(" ".join(page.text).split())
    for fragment in ("sweep kan <&> sweep", "kind learn", "stage pnr", "executor pool", "workers 2",
                     "wall seconds 42.2", "8 rows: 6 ok, 1 dominated, 1 failed, 1 cached",
                     "driver counts done 7, cached 1, failed 1", "spec file /specs/kan.yml"):
        assert fragment in text, fragment


def test_html_table_rows_and_columns(tmp_path):
    out, spec, rows, paths = write(tmp_path)
    page = Page(paths["report.html"].read_text())
    head, body = page.tables["rows"][0], page.tables["rows"][1:]
    assert head == ["#", "datapath", "grid_size", "target", "error", "lut (LUT)", "fmax_mhz (MHz)",
                    "latency_ns (ns)", "status", "stage", "seconds (s)", "cached", "reason", "files"]
    assert len(body) == len(rows)
    col = {name: i for i, name in enumerate(head)}
    assert [r[col["#"]] for r in body] == [str(r.index) for r in rows]
    assert [r[col["status"]] for r in body] == [r.status for r in rows]
    assert [float(r[col["lut (LUT)"]]) if r[col["lut (LUT)"]] else None for r in body] == \
        [r.metrics["lut"] for r in rows]
    assert body[6][col["fmax_mhz (MHz)"]] == "" and body[6][col["stage"]] == "synth"
    # Sort keys: numeric columns carry numbers (or "" where a row has none), text columns the text.
    attrs = page.cell_attrs["rows"]
    head_attrs = attrs[0]
    assert [a.get("data-type") for a in head_attrs[:-1]] == \
        ["number", "text", "number", "text", "number", "number", "number", "number", "text", "text", "number",
         "text", "text"]
    assert all(a["aria-sort"] == "none" for a in head_attrs[:-1]) and "aria-sort" not in head_attrs[-1]
    sort_err = [a[col["error"]]["data-sort"] for a in attrs[1:]]
    assert [float(s) if s else None for s in sort_err] == [r.metrics["error"] for r in rows]
    assert [a[col["grid_size"]]["data-sort"] for a in attrs[1:]] == [repr(float(r.params["grid_size"])) for r in rows]


def test_html_links_are_relative_and_only_to_written_files(tmp_path):
    out, spec, rows, paths = write(tmp_path)
    page = Page(paths["report.html"].read_text())
    files = [h for h in page.links if h and h.startswith("points/")]
    # Every point's report.md and folder; report.json only where it was written (even points).
    expected = {f"points/{r.key}/report.md" for r in rows} | {f"points/{r.key}/" for r in rows} | \
        {f"points/{r.key}/report.json" for r in rows if r.index % 2 == 0}
    assert set(files) == expected
    assert all((out / h).exists() for h in files)
    # The in-page links (best and fronts) point to rows that exist.
    anchors = {h[1:] for h in page.links if h and h.startswith("#")}
    assert anchors and anchors <= set(page.by_id)


def test_html_best_and_fronts(tmp_path):
    out, spec, rows, paths = write(tmp_path)
    page = Page(paths["report.html"].read_text())
    best_rows = page.tables["best"][1:]
    for c, cells in zip(spec.constraints, best_rows):
        r = best(rows, c)
        assert cells[0] == c.label and cells[3] == f"#{r.index}"
    # Both front tables share the class "front": the parser appends their rows to one list.
    got = [cells[0] for cells in page.tables["front"] if cells[0] != "point"]
    want = [f"#{r.index}" for x, y in spec.pareto for r in pareto_front(rows, x, y)]
    assert want and got == want
    img = page.images[0]
    assert img["src"].startswith("data:image/png;base64,")
    assert base64.b64decode(img["src"].split(",", 1)[1]) == paths["pareto.png"].read_bytes()


def test_html_offline(tmp_path):
    text = write(tmp_path)[3]["report.html"].read_text()
    page = Page(text)
    assert not page.styles and all("src" not in s for s in page.scripts)
    assert all(i["src"].startswith("data:") for i in page.images)
    assert "http://" not in text and "https://" not in text


def test_zero_rows(tmp_path):
    out, spec, rows, paths = write(tmp_path, rows=[])
    page = Page(paths["report.html"].read_text())
    assert "no-rows" in page.by_id and "rows" not in page.tables
    assert "0 rows: 0 ok, 0 failed, 0 cached" in " ".join(" ".join(page.text).split())
    assert json.loads(paths["sweep.json"].read_text())["rows"] == []
    assert paths["pareto.png"].read_bytes().startswith(PNG_MAGIC)
    assert " ".join(" ".join(page.text).split()).count("no row meets it") == 2


def test_no_ok_rows_and_none_metrics(tmp_path):
    rows = [Row(key="a" * 16, index=0, params={"datapath": "fixed<8,2>"}, status="failed",
                metrics={"error": None, "lut": None}, reason="bad value"),
            Row(key="b" * 16, index=1, params={"datapath": "fixed<9,2>"}, status="dominated", stage="synth",
                metrics={"error": 0.5, "lut": 10})]
    out, spec, rows, paths = write(tmp_path, rows=rows)
    page = Page(paths["report.html"].read_text())
    assert len(page.tables["rows"]) == 3
    text = " ".join(" ".join(page.text).split())
    assert "No ok row has both lut and error yet." in text
    assert paths["pareto.png"].read_bytes().startswith(PNG_MAGIC)


def test_no_pareto_pairs_or_constraints(tmp_path):
    spec = make_spec(pareto=(), constraints=())
    out, spec, rows, paths = write(tmp_path, spec=spec)
    page = Page(paths["report.html"].read_text())
    text = " ".join(" ".join(page.text).split())
    assert "The spec asks for no Pareto pairs" in text and "The spec asks for no best points" in text
    assert not page.images and len(page.tables["rows"]) == len(rows) + 1
    assert paths["pareto.png"].read_bytes().startswith(PNG_MAGIC)
    assert json.loads(paths["sweep.json"].read_text())["pareto"] == []


def test_many_pairs_layout(tmp_path):
    spec = make_spec(pareto=(("lut", "error"), ("latency_ns", "error"), ("lut", "fmax_mhz"), ("fmax_mhz", "error")))
    paths = write(tmp_path, spec=spec)[3]
    assert paths["pareto.png"].read_bytes().startswith(PNG_MAGIC)


def test_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    out, spec, rows, paths = write(tmp_path)
    before = {n: p.read_bytes() for n, p in paths.items()}

    def broken(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken)
    rows[0].metrics["lut"] += 1000
    with pytest.raises(OSError, match="disk full"):
        report.write_outputs(out, spec, rows, INFO)
    assert {n: p.read_bytes() for n, p in paths.items()} == before
    assert sorted(p.name for p in out.iterdir()) == ["pareto.png", "points", "report.html", "sweep.json"]


def test_outputs_are_readable_like_any_file_written_here(tmp_path):
    """mkstemp makes 0o600 files; the report is meant to be shared: it gets the umask's mode, as open() would."""
    import os

    from bitforge.toolchain.flows.cache import write_atomic

    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "a.html", "<p>x</p>")
        write_atomic(tmp_path / "b.png", b"\x89PNG")
    finally:
        os.umask(old)
    assert (tmp_path / "a.html").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "b.png").stat().st_mode & 0o777 == 0o644
