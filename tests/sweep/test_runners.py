"""runners.run_point: one sweep point through the commands' library functions, into the driver's point folder.

What is checked: each metric comes from the number the command itself wrote (metrics.json, report.json), the
stages go as far as ``upto`` and a later call reuses what an earlier one made, a point's own failure is a row (does
not fit, a refused value), nothing is printed and nothing is written outside the point folder. The place-and-route
test (slow) checks that the early stop's second call reuses synthesis and fills Fmax and latency in ns.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from bitforge.toolchain.sweep import runners
from bitforge.toolchain.sweep.model import Axis, Point, Row, SweepError, SweepSpec, point_key

LEARN_METRICS = ("error", "mse", "score", "float_error", "params", "sim_mismatches", "latency_cycles", "ii", "lut",
                 "dsp")
COMPILE_METRICS = ("error", "accuracy", "fidelity", "float_error", "params", "sim_mismatches", "latency_cycles",
                   "ii", "lut", "fmax_mhz", "latency_ns", "power_mw")


def spec_of(kind: str, base: dict, params: dict, metrics: tuple, stage: str) -> SweepSpec:
    return SweepSpec(kind=kind, base=base, axes=tuple(Axis(k, (v,)) for k, v in params.items()), metrics=metrics,
                     stage=stage, name="test", digest=f"test-{kind}-{json.dumps(base, sort_keys=True)}")


def run(spec: SweepSpec, params: dict, out: Path, upto: str) -> tuple[Row, Path]:
    point = Point(0, params)
    folder = out / "points" / point_key(spec, point)
    return runners.run_point(spec, point, str(folder), upto), folder


def files_outside(out: Path, folder: Path) -> list[Path]:
    return [p for p in out.rglob("*") if not p.is_relative_to(folder) and p not in folder.parents]


def learn_spec(stage: str, **base) -> SweepSpec:
    return spec_of("learn", {"task": "t1", "samples": 400, **base}, {}, LEARN_METRICS, stage)


def test_learn_point_golden_then_sim_reads_the_learners_metrics(tmp_path, capfd):
    spec = learn_spec("sim")
    params = {"datapath": "fixed<12,4>", "grid_size": 6}
    row, folder = run(spec, params, tmp_path, "golden")
    assert row.status == "ok" and row.stage == "golden", row.reason
    assert row.key == point_key(spec, Point(0, params)) and row.folder == f"points/{row.key}"
    assert set(row.metrics) == set(LEARN_METRICS)
    m = json.loads((tmp_path / row.files["metrics.json"]).read_text())
    assert m["spec"]["grid_size"] == 6 and m["samples"] == 400 and "fixed<12,4" in m["spec"]["formats"]["datapath"]
    assert row.metrics["error"] == row.metrics["mse"] == m["fixed"]["mean_mse"]
    assert row.metrics["score"] == m["fixed"]["score"] and row.metrics["float_error"] == m["float"]["mean_mse"]
    assert row.metrics["params"] == m["params"] > 0
    assert row.metrics["sim_mismatches"] is None and row.metrics["lut"] is None and "rtl" not in m
    sim_row, same = run(spec, params, tmp_path, "sim")
    assert same == folder and sim_row.status == "ok" and sim_row.stage == "sim", sim_row.reason
    m = json.loads((tmp_path / sim_row.files["metrics.json"]).read_text())
    rtl = m["rtl"]
    assert set(rtl["golden_vs_rtl"]) == {runners.SIMULATOR}
    assert rtl["golden_vs_rtl"][runners.SIMULATOR]["samples"] == 400
    assert sim_row.metrics["sim_mismatches"] == 0
    assert (sim_row.metrics["latency_cycles"], sim_row.metrics["ii"]) == (rtl["latency_cycles"], rtl["ii"])
    assert sim_row.metrics["error"] == row.metrics["error"]  # the same golden trajectory
    assert sim_row.metrics["lut"] is None
    assert Row.from_json(json.loads(json.dumps(sim_row.to_json(), allow_nan=False))) == sim_row  # row.json as is
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    assert files_outside(tmp_path, folder) == []
    assert "stage sim done" in (folder / runners.LOG).read_text()


def test_learn_golden_after_sim_reuses_the_richer_folder(tmp_path):
    spec = learn_spec("sim")
    params = {"grid_size": 4}
    first, folder = run(spec, params, tmp_path, "sim")
    assert first.status == "ok", first.reason
    stamp = (folder / runners.WORK / runners.STAMP).stat().st_mtime_ns
    again, _ = run(spec, params, tmp_path, "golden")
    assert again.status == "ok" and again.metrics["error"] == first.metrics["error"]
    assert (folder / runners.WORK / runners.STAMP).stat().st_mtime_ns == stamp  # not learned again
    assert "learner folder reused" in (folder / runners.LOG).read_text()


def compile_spec(stage: str, model: str = "kan-tracker", **base) -> SweepSpec:
    return spec_of("compile", {"model": model, **base}, {}, COMPILE_METRICS, stage)


def test_compile_point_golden_then_sim_reads_the_compile_report(tmp_path, capfd):
    spec = compile_spec("sim", sim_vectors=300)
    params = {"precision": "8", "reuse": 1}
    row, folder = run(spec, params, tmp_path, "golden")
    assert row.status == "ok" and row.stage == "golden", row.reason
    report = json.loads((tmp_path / row.files["report.json"]).read_text())
    assert report["options"]["precision"] == "8"
    scores = report["task_scores"]
    assert row.metrics["error"] == scores["compiled"]["rmse"]
    assert row.metrics["float_error"] == scores["reference"]["rmse"]
    assert row.metrics["accuracy"] is None  # kan-tracker is a fit, not a classifier
    outputs = report["fidelity"]["sets"]["verification"]["outputs"]
    assert row.metrics["fidelity"] == max(o["max_abs_error"] for o in outputs.values()) > 0
    assert row.metrics["params"] == report["graph"]["parameters"]
    assert row.metrics["sim_mismatches"] is None
    stamp = (folder / runners.WORK / runners.STAMP).stat().st_mtime_ns
    sim_row, _ = run(spec, params, tmp_path, "sim")
    assert sim_row.status == "ok" and sim_row.stage == "sim", sim_row.reason
    assert (folder / runners.WORK / runners.STAMP).stat().st_mtime_ns == stamp  # the compiled folder was reused
    report = json.loads((tmp_path / sim_row.files["report.json"]).read_text())
    sim = report["verification"]["golden_vs_rtl"][runners.SIMULATOR]
    assert sim["mismatches"] == 0 and sim["vectors"] == 300 and sim_row.metrics["sim_mismatches"] == 0
    assert (sim_row.metrics["latency_cycles"], sim_row.metrics["ii"]) == (report["rtl"]["latency_cycles"],
                                                                          report["rtl"]["ii"])
    assert sim_row.metrics["error"] == row.metrics["error"] and sim_row.metrics["lut"] is None
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    assert files_outside(tmp_path, folder) == []


def test_classifier_error_is_one_minus_accuracy(tmp_path):
    spec = compile_spec("golden", model="jet-mlp")
    row, _ = run(spec, {"precision": "8", "reuse": 4, "target": "ice40-up5k"}, tmp_path, "golden")
    assert row.status == "ok", row.reason  # reuse and target are RTL settings: the golden stage leaves them out
    scores = json.loads((tmp_path / row.files["report.json"]).read_text())["task_scores"]
    assert 0.5 < row.metrics["accuracy"] == scores["compiled"]["accuracy"] < 1
    assert row.metrics["error"] == pytest.approx(1 - scores["compiled"]["accuracy"], abs=1e-12)
    assert row.metrics["float_error"] == pytest.approx(1 - scores["reference"]["accuracy"], abs=1e-12)


def test_metric_mapping_without_labels_uses_the_fidelity():
    report = {"graph": {"parameters": 12, "fixed_point": True},
              "fidelity": {"sets": {"verification": {"outputs": {"y": {"max_abs_error": 0.25},
                                                                 "z": {"max_abs_error": 0.5}}}}}}
    assert runners.compile_metrics(report) == {"params": 12, "fidelity": 0.5, "error": 0.5}
    float_model = {"graph": {"parameters": 3, "fixed_point": False}, "fidelity": {"skipped": "float"}}
    assert runners.compile_metrics(float_model)["error"] == 0.0


def test_diverged_learner_has_no_error_number():
    metrics = {"fixed": {"mean_mse": float("inf"), "score": float("nan")}, "float": {"mean_mse": 0.1}, "params": 9}
    m = runners.learn_metrics(metrics)
    assert m["error"] is None and m["score"] is None and m["float_error"] == 0.1


def test_a_point_that_cannot_be_built_is_a_failed_row(tmp_path):
    spec = learn_spec("sim")
    row, folder = run(spec, {"layers": [2, 1]}, tmp_path, "sim")
    assert row.status == "failed" and "\n" not in row.reason
    assert "do not fit the stream" in row.reason and f"log: points/{row.key}/{runners.LOG}" in row.reason
    assert "Traceback" in (folder / runners.LOG).read_text()
    assert all(v is None for v in row.metrics.values()) and row.files == {}
    spec = compile_spec("sim")  # --reuse auto needs a target to size the multipliers for
    row, _ = run(spec, {"precision": "8", "reuse": "auto"}, tmp_path, "sim")
    assert row.status == "failed" and "--target" in row.reason and row.stage == "golden"


def test_does_not_fit_is_a_row_with_the_synthesis_numbers(tmp_path):
    spec = spec_of("learn", {"task": "t1", "samples": 300}, {}, LEARN_METRICS, "synth")
    row, folder = run(spec, {"datapath": "fixed<12,4>", "target": "ice40-up5k"}, tmp_path, "synth")
    assert row.status == "does-not-fit" and row.stage == "synth", row.reason
    assert row.metrics["dsp"] > 8 and "ice40-up5k has 8" in row.reason  # the UP5K's 8 SB_MAC16
    assert f"log: points/{row.key}/{runners.WORK}/impl/ice40-up5k/yosys.log" in row.reason
    assert (folder / runners.WORK / "impl" / "ice40-up5k" / "yosys.log").is_file()
    assert row.metrics["sim_mismatches"] == 0 and row.metrics["error"] is not None
    assert files_outside(tmp_path, folder) == []


def test_calls_the_driver_must_not_make_raise():
    spec = learn_spec("sim")
    with pytest.raises(SweepError, match="upto"):
        runners.run_point(spec, Point(0, {}), "/nonexistent/points/x", "synth")
    llm = SweepSpec(kind="llm", base={}, axes=(), metrics=("error",), stage="golden")
    with pytest.raises(SweepError, match="llm_search"):
        runners.run_point(llm, Point(0, {}), "/nonexistent/points/x", "golden")


@pytest.mark.slow
def test_pnr_after_synth_reuses_synthesis(tmp_path):
    spec = compile_spec("pnr")
    params = {"precision": "8", "target": "ice40-up5k"}
    first, folder = run(spec, params, tmp_path, "synth")
    assert first.status == "ok" and first.stage == "synth", first.reason
    assert first.metrics["lut"] > 0 and first.metrics["fmax_mhz"] is None and first.metrics["power_mw"] is None
    second, _ = run(spec, params, tmp_path, "pnr")
    assert second.status == "ok" and second.stage == "pnr", second.reason
    report = json.loads((tmp_path / second.files["report.json"]).read_text())
    assert report["verification"]["golden_vs_rtl"][runners.SIMULATOR]["vectors"] == runners.SIM_VECTORS
    entry = report["targets"]["ice40-up5k"]
    assert entry["stages"]["synth"]["cached"] is True and entry["stages"]["pnr"]["cached"] is False
    assert second.metrics["fmax_mhz"] == entry["fmax_mhz"] > 0
    assert second.metrics["latency_ns"] == entry["latency_ns"] == pytest.approx(
        entry["latency_cycles"] * 1000 / entry["fmax_mhz"], abs=1e-3)
    assert second.metrics["lut"] == entry["lut"] and second.metrics["power_mw"] is None
    assert files_outside(tmp_path, folder) == []
    fast = compile_spec("pnr", clock_mhz=1000)  # no iCE40 design closes at 1 GHz
    slow_row, _ = run(fast, params, tmp_path, "pnr")
    assert slow_row.status == "timing-not-met" and slow_row.stage == "pnr", slow_row.reason
    assert slow_row.metrics["fmax_mhz"] is not None and slow_row.metrics["latency_ns"] is not None
    assert "timing not met" in slow_row.reason and "nextpnr.log" in slow_row.reason
