"""The driver: rows in point order, the row cache (rerun, resume, extension, retry), early stop and its dominance
rule, OUT's safety, the reports after every row, the progress display; the fake runner stands in for the real one
and the points are built here (tests/sweep/fake_runner.py), so these tests need neither spec.py nor runners.py."""
from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path

import pytest

from bitforge.toolchain.errors import OutputError
from bitforge.toolchain.sweep import driver
from bitforge.toolchain.sweep.driver import dominated_by, dominates, reusable, run_sweep
from bitforge.toolchain.sweep.executors import PoolExecutor, SerialExecutor
from bitforge.toolchain.sweep.model import Axis, Point, Row, SweepSpec, point_key

from . import fake_runner

METRICS = ("error", "lut", "ff", "fmax_mhz", "latency_ns")


def make_spec(tmp_path: Path, axes: dict, stage: str = "synth", **base) -> SweepSpec:
    return SweepSpec(kind="learn", base={"calls": str(tmp_path / "calls.txt"), **base},
                     axes=tuple(Axis(k, tuple(v)) for k, v in axes.items()), metrics=METRICS, stage=stage,
                     name="t", source="", digest="0123456789abcdef")


def grid(spec: SweepSpec) -> list[Point]:
    names = [a.name for a in spec.axes]
    combos = itertools.product(*(a.values for a in spec.axes))
    return [Point(i, dict(zip(names, vals))) for i, vals in enumerate(combos)]


def calls(tmp_path: Path) -> list[tuple[int, str]]:
    path = tmp_path / "calls.txt"
    if not path.exists():
        return []
    return [(int(i), upto) for i, upto in (line.split() for line in path.read_text().splitlines())]


def clear_calls(tmp_path: Path) -> None:
    (tmp_path / "calls.txt").unlink(missing_ok=True)


@pytest.fixture
def reports(monkeypatch):
    """report.write_outputs replaced by a recorder: (number of rows, counts) per call."""
    seen: list[tuple[int, dict]] = []

    def write_outputs(out, spec, rows, info):
        assert [r.index for r in rows] == sorted(r.index for r in rows)
        seen.append((len(rows), info["counts"]))
        return {}

    monkeypatch.setattr(driver, "_default_write_outputs", lambda: write_outputs)
    return seen


def sweep(spec, out, executor=None, **kw):
    kw.setdefault("points", grid(spec))
    return run_sweep(spec, out, executor or SerialExecutor(), runner=fake_runner.run_point, progress=False, **kw)


def comparable(rows: list[Row]) -> list[dict]:
    return [{k: v for k, v in r.to_json().items() if k not in ("seconds", "cached")} for r in rows]


def test_rows_in_point_order_saved_per_point_and_reported_after_every_row(tmp_path, reports):
    spec = make_spec(tmp_path, {"a": [1, 2, 3], "b": [0, 1]})
    res = sweep(spec, tmp_path / "out")
    assert [r.index for r in res.rows] == list(range(6))
    for r, p in zip(res.rows, grid(spec)):
        assert r.key == point_key(spec, p) and r.folder == f"points/{r.key}" and not r.cached
        assert r.metrics["lut"] == fake_runner.metric_value("lut", p.params["a"], p.params["b"])
        assert r.metrics["fmax_mhz"] is None  # a P&R metric: the sweep stopped at synthesis
        saved = json.loads((tmp_path / "out" / r.folder / "row.json").read_text())
        assert Row.from_json(saved) == replace(r, cached=False)
    assert [n for n, _ in reports] == [1, 2, 3, 4, 5, 6, 6]  # after every row, and once at the end
    assert res.counts == {"points": 6, "done": 6, "cached": 0, "ok": 6, "does-not-fit": 0, "timing-not-met": 0,
                          "dominated": 0, "failed": 0}
    assert json.loads((tmp_path / "out" / ".bitforge.json").read_text())["command"] == "sweep"


def test_rerun_comes_from_the_cache_without_running_a_point(tmp_path, reports):
    spec = make_spec(tmp_path, {"a": [1, 2], "b": [0, 1]})
    first = sweep(spec, tmp_path / "out")
    clear_calls(tmp_path)
    again = sweep(spec, tmp_path / "out")
    assert calls(tmp_path) == []
    assert all(r.cached for r in again.rows)
    assert [replace(r, cached=False) for r in again.rows] == first.rows
    assert again.counts["cached"] == 4 and again.counts["done"] == 0


def test_an_interrupted_sweep_resumes_with_only_the_rest(tmp_path, reports):
    spec = make_spec(tmp_path, {"a": [1, 2, 3, 4, 5]}, interrupt_at=3)
    with pytest.raises(KeyboardInterrupt):
        sweep(spec, tmp_path / "out")
    assert [i for i, _ in calls(tmp_path)] == [0, 1, 2, 3]
    clear_calls(tmp_path)
    spec = replace(spec, base={k: v for k, v in spec.base.items() if k != "interrupt_at"})
    res = sweep(spec, tmp_path / "out")
    assert calls(tmp_path) == [(3, "synth"), (4, "synth")]
    assert [r.cached for r in res.rows] == [True, True, True, False, False]
    assert [r.status for r in res.rows] == ["ok"] * 5


def test_a_pool_sweep_cancelled_after_two_rows_resumes_with_only_the_rest(tmp_path, monkeypatch):
    """Ctrl-C in the driver (here: raised by the report after the second row) while pool workers run."""
    spec = make_spec(tmp_path, {"a": [1, 2, 3, 4, 5, 6], "sleep": [0.3]})
    reported = []

    def interrupt_after_two(out, spec, rows, info):
        reported.append(len(rows))
        if len(rows) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(driver, "_default_write_outputs", lambda: interrupt_after_two)
    with PoolExecutor(2, mem_gb=1) as ex, pytest.raises(KeyboardInterrupt):
        sweep(spec, tmp_path / "out", ex)
    saved = {p.index for p in grid(spec) if (tmp_path / "out/points" / point_key(spec, p) / "row.json").exists()}
    assert len(saved) >= 2
    ran_before = {i for i, _ in calls(tmp_path)}
    assert len(ran_before) < 6  # the sweep stopped: not every point was started
    clear_calls(tmp_path)
    monkeypatch.setattr(driver, "_default_write_outputs", lambda: lambda *a: {})
    res = sweep(spec, tmp_path / "out")
    assert sorted(i for i, _ in calls(tmp_path)) == sorted(set(range(6)) - saved)
    assert [r.cached for r in res.rows] == [i in saved for i in range(6)]


def test_extending_an_axis_runs_only_the_new_points(tmp_path, reports):
    small = make_spec(tmp_path, {"a": [1, 3], "b": [0, 1]})
    first = sweep(small, tmp_path / "out")
    clear_calls(tmp_path)
    big = make_spec(tmp_path, {"a": [1, 2, 3], "b": [0, 1, 2]})
    res = sweep(big, tmp_path / "out")
    new = [p for p in grid(big) if p.params["a"] == 2 or p.params["b"] == 2]
    assert sorted(i for i, _ in calls(tmp_path)) == [p.index for p in new]
    by_params = {json.dumps(r.params, sort_keys=True): r for r in first.rows}
    for r in res.rows:
        old = by_params.get(json.dumps(r.params, sort_keys=True))
        assert r.cached == (old is not None)
        if old is not None:  # same key, same row, under its new index
            assert (r.key, r.metrics, r.index) == (old.key, old.metrics, grid(big)[r.index].index)


def test_a_rerun_asking_fewer_metrics_is_cached_and_one_asking_more_runs_again(tmp_path, reports):
    spec = make_spec(tmp_path, {"a": [1, 2]}, fail_at=[1])
    sweep(replace(spec, metrics=("error", "lut")), tmp_path / "out")
    clear_calls(tmp_path)
    fewer = sweep(replace(spec, metrics=("error",)), tmp_path / "out")
    assert calls(tmp_path) == [] and [r.metrics for r in fewer.rows] == [{"error": 0.5}, {"error": None}]
    more = sweep(spec, tmp_path / "out")  # + ff, fmax_mhz, latency_ns: the ok point runs, the failed one stays
    assert calls(tmp_path) == [(0, "synth")]
    assert set(more.rows[0].metrics) == set(METRICS) and more.rows[1].metrics == {m: None for m in METRICS}


def test_failed_points_are_rows_kept_unless_retry_failed(tmp_path, reports):
    spec = make_spec(tmp_path, {"a": [1, 2, 3]}, fail_at=[1])
    points = [Point(0, {"a": 1}), Point(1, {"a": 2}), Point(2, {"a": 3, "raise": True})]
    res = sweep(spec, tmp_path / "out", points=points)
    assert [r.status for r in res.rows] == ["ok", "failed", "failed"]
    assert res.rows[1].reason == "fake failure asked by the point"
    assert res.rows[2].reason == "RuntimeError: fake runner asked to raise at point 2"
    assert res.rows[2].metrics == {m: None for m in METRICS} and res.rows[2].folder == f"points/{res.rows[2].key}"
    clear_calls(tmp_path)
    fixed = replace(spec, base={k: v for k, v in spec.base.items() if k != "fail_at"})
    kept = sweep(fixed, tmp_path / "out", points=points)
    assert calls(tmp_path) == [] and [r.status for r in kept.rows] == ["ok", "failed", "failed"]
    retried = sweep(fixed, tmp_path / "out", points=points, retry_failed=True)
    assert calls(tmp_path) == [(1, "synth"), (2, "synth")]
    assert [r.status for r in retried.rows] == ["ok", "ok", "failed"]


def test_pool_rows_equal_serial_rows_but_for_seconds_and_cached(tmp_path, reports):
    spec = make_spec(tmp_path, {"a": [1, 2, 3], "c": [0, 1], "fits": [True, False]}, stage="pnr")
    serial = sweep(spec, tmp_path / "serial")
    with PoolExecutor(2, mem_gb=1) as ex:
        pool = sweep(spec, tmp_path / "pool", ex)
    assert comparable(pool.rows) == comparable(serial.rows)
    assert {r.status for r in serial.rows} >= {"ok", "does-not-fit", "dominated"}


# -- early stop -------------------------------------------------------------------------------------------------

def row(i: int, target: str = "ice40-up5k", status: str = "ok", stage: str = "synth", **metrics) -> Row:
    return Row(key=f"k{i}", index=i, params={"target": target}, status=status, metrics=metrics, stage=stage)


def test_dominance_rule_on_rows():
    ms = ("error", "lut", "fmax_mhz")
    a = row(0, error=0.1, lut=100, fmax_mhz=50.0)
    assert not dominates(a, a, ms)  # equal everywhere: not strictly better in one
    assert dominates(a, row(1, error=0.1, lut=101, fmax_mhz=50.0), ms)
    assert not dominates(a, row(1, error=0.09, lut=200, fmax_mhz=50.0), ms)  # worse in error
    assert dominates(a, row(1, error=0.1, lut=100, fmax_mhz=49.0), ms)  # fmax: higher is better
    assert not dominates(a, row(1, error=0.1, lut=100, fmax_mhz=51.0), ms)
    assert not dominates(a, row(1, error=0.2, lut=None, fmax_mhz=40.0), ms)  # a missing metric: no verdict
    assert not dominates(row(0, error=float("nan"), lut=1, fmax_mhz=99.0), row(1, error=1, lut=2, fmax_mhz=1.0), ms)


def test_dominated_by_compares_synthesis_metrics_on_the_same_target_only():
    spec = SweepSpec(kind="compile", base={"target": "ice40-up5k"}, axes=(), stage="pnr",
                     metrics=("error", "lut", "dsp", "fmax_mhz", "latency_ns"))
    small = row(0, error=0.1, lut=100, dsp=1)
    worse = row(1, error=0.1, lut=150, dsp=1)
    assert dominated_by(worse, [small, worse], spec) is small
    assert dominated_by(small, [small, worse], spec) is None
    # fmax/latency are P&R metrics: not compared after synthesis (None there anyway)
    assert dominated_by(row(1, error=0.1, lut=150, dsp=1, fmax_mhz=None), [small], spec) is small
    assert dominated_by(replace(worse, params={"target": "ecp5-25f"}), [small], spec) is None  # another device
    assert dominated_by(worse, [replace(small, status="failed")], spec) is None
    assert dominated_by(worse, [replace(small, status="does-not-fit")], spec) is None
    assert dominated_by(worse, [row(0, error=0.1, lut=100, dsp=2)], spec) is None  # worse in dsp: no
    no_axis = replace(small, params={})
    assert dominated_by(worse, [no_axis], spec) is no_axis  # the base's target is the same


def test_early_stop_runs_pnr_only_for_points_that_fit_and_are_not_dominated(tmp_path, reports):
    spec = make_spec(tmp_path, {"a": [1, 2], "c": [0, 1], "fits": [True, False]}, stage="pnr")
    pts = grid(spec)
    res = sweep(spec, tmp_path / "out")
    ran = calls(tmp_path)
    assert sorted(i for i, u in ran if u == "synth") == list(range(8))  # phase 1: every point to synthesis
    pnr = sorted(i for i, u in ran if u == "pnr")
    for r, p in zip(res.rows, pts):
        if p.params["fits"] is False:
            assert r.status == "does-not-fit" and r.index not in pnr
        elif p.params["c"] == 1:  # the same a with c = 0 is better in error, lut and ff
            twin = next(q for q in pts if q.params == {**p.params, "c": 0})
            assert r.status == "dominated" and r.index not in pnr and r.stage == "synth"
            assert r.reason.startswith(f"early stop: P&R skipped, point {twin.index} (")
            assert r.metrics["fmax_mhz"] is None and r.metrics["lut"] is not None
        else:
            assert r.status == "ok" and r.stage == "pnr" and r.index in pnr and r.metrics["fmax_mhz"] is not None
    assert len(pnr) == 2 and res.counts["dominated"] == 2 and res.counts["does-not-fit"] == 4


def test_dominated_rows_rerun_cached_and_run_pnr_when_early_stop_is_off(tmp_path, reports):
    spec = make_spec(tmp_path, {"a": [1, 2, 3], "c": [0, 1]}, stage="pnr")
    first = sweep(spec, tmp_path / "out")
    dominated = [r.index for r in first.rows if r.status == "dominated"]
    assert dominated
    clear_calls(tmp_path)
    again = sweep(spec, tmp_path / "out")
    assert calls(tmp_path) == [] and comparable(again.rows) == comparable(first.rows)
    full = sweep(spec, tmp_path / "out", early_stop=False)
    assert sorted(i for i, _ in calls(tmp_path)) == dominated
    assert all(u == "pnr" for _, u in calls(tmp_path))
    assert all(r.status == "ok" and r.stage == "pnr" for r in full.rows)


def test_a_rerun_decides_early_stop_as_the_first_run_did(tmp_path, reports):
    """After P&R a row's LUTs are nextpnr's, not yosys's: compared with the dominated points' synthesis numbers,
    a rerun would find them no longer dominated and place and route them. Early stop compares ``Row.synth``."""
    spec = make_spec(tmp_path, {"a": [1, 2, 3], "c": [0, 1]}, stage="pnr")
    spec = replace(spec, base={**spec.base, "pnr_lut_extra": 1000})
    first = sweep(spec, tmp_path / "out")
    assert [r.status for r in first.rows].count("dominated") == 3
    assert all(r.synth["lut"] + 1000 == r.metrics["lut"] for r in first.rows if r.status == "ok")
    clear_calls(tmp_path)
    again = sweep(spec, tmp_path / "out")
    assert calls(tmp_path) == [] and comparable(again.rows) == comparable(first.rows)


def test_reusable_rule():
    r = row(0, stage="synth", error=1.0, lut=2)
    assert reusable(r, "synth", ("error", "lut")) and reusable(r, "golden", ("error",))
    assert not reusable(r, "pnr", ("error",))  # a later stage was asked
    assert not reusable(r, "synth", ("error", "ff"))  # a metric the row does not have
    assert reusable(replace(r, status="does-not-fit"), "pnr", ("error", "ff"))
    assert reusable(replace(r, status="failed"), "pnr", ()) and not reusable(replace(r, status="failed"), "pnr", (),
                                                                           retry_failed=True)


# -- OUT --------------------------------------------------------------------------------------------------------

def test_out_that_bitforge_did_not_write_is_refused_and_kept_force_writes_beside_it(tmp_path, reports):
    spec = make_spec(tmp_path, {"a": [1]})
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match=r"a folder bitforge did not write .* holding notes\.txt.*--force"):
        sweep(spec, out)
    assert calls(tmp_path) == [] and sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    res = sweep(spec, out, force=True)
    assert res.rows[0].status == "ok" and (out / "notes.txt").read_text() == "mine"


def test_another_commands_output_is_refused_and_a_folder_holding_the_spec_always(tmp_path, reports):
    other = tmp_path / "compiled"
    other.mkdir()
    (other / ".bitforge.json").write_text(json.dumps({"written_by": "bitforge", "command": "compile"}))
    (other / "model.v").write_text("module m; endmodule\n")
    spec = make_spec(tmp_path, {"a": [1]})
    with pytest.raises(OutputError, match="the output of bitforge compile"):
        sweep(spec, other)
    assert (other / "model.v").exists()
    holder = tmp_path / "specs"
    holder.mkdir()
    (holder / "s.yml").write_text("kind: learn\n")
    with pytest.raises(OutputError, match="holds the input"):
        sweep(replace(spec, source=str(holder / "s.yml")), holder, force=True)


# -- progress ---------------------------------------------------------------------------------------------------

def test_progress_counts_and_eta():
    p = driver._Progress(False, total=10, workers=2, title="t")
    assert p.eta() is None  # nothing measured yet
    p.update(replace(row(0, error=1.0), cached=True))
    p.update(replace(row(1, error=1.0), seconds=4.0))
    p.update(replace(row(2, status="failed"), seconds=2.0), running=2)
    assert (p.done, p.cached, p.failed, p.running) == (2, 1, 1, 2)
    assert p.eta() == pytest.approx(3.0 * 4)  # 7 left, 2 at a time: 4 rounds of the mean 3 s
    assert p.note() == "done 2 · running 2 · cached 1 · failed 1 · ETA 12s"


def test_progress_lines_when_not_a_terminal(tmp_path, reports, capsys):
    spec = make_spec(tmp_path, {"a": [1, 2]})
    run_sweep(spec, tmp_path / "out", SerialExecutor(), runner=fake_runner.run_point, points=grid(spec), progress=True)
    err = capsys.readouterr().err
    assert "t: to synth: 2/2 [ok] a=2" in err and "done 2 · running 0 · cached 0 · failed 0" in err
