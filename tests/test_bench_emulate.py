"""``bitforge bench emulate``: its designs (the MLP and the digits CNN at --precision 8), the rows and ratios it
reports, and the CLI's table and JSON. The timings themselves are not asserted (a busy machine varies them);
what is asserted is that both executors ran the same compiled fixed-point graph on the same batch."""
from __future__ import annotations

import json

import numpy as np
import pytest

from bitforge.toolchain.bench import emulate as bench
from bitforge.toolchain.cli import main


def test_designs_are_the_mlp_and_the_cnn_at_precision_8():
    assert list(bench.DESIGNS) == ["jet-mlp", "digits-cnn"]
    assert bench.DESIGNS["digits-cnn"].precision == "8" and bench.DESIGNS["jet-mlp"].precision is None
    assert bench.design_precision("digits-cnn") == "8"
    assert bench.design_precision("digits-cnn", "16") == "16"  # an explicit --precision wins
    assert bench.design_precision("kan-tracker") is None


def test_bench_designs_runs_every_design_by_default(monkeypatch):
    calls = []

    def fake(model, batch, repeats, seed, precision):
        calls.append((model, batch, repeats, seed, precision))
        return [bench.BenchRow("golden (bitforge.emulate)", model, batch, repeats, 1.0, batch, 0.5,
                               bench.design_precision(model, precision))]
    monkeypatch.setattr(bench, "bench_emulate", fake)
    rows = bench.bench_designs(batch=10, repeats=2)
    assert calls == [("jet-mlp", 10, 2, 0, None), ("digits-cnn", 10, 2, 0, None)]
    assert [(r.model, r.precision) for r in rows] == [("jet-mlp", None), ("digits-cnn", "8")]
    bench.bench_designs(["kan-tracker"], batch=5, repeats=1, precision="16")
    assert calls[-1] == ("kan-tracker", 5, 1, 0, "16")


def _rows(model: str, precision, golden_s: float, ort_s: float) -> list[bench.BenchRow]:
    return [bench.BenchRow(name, model, 100, 3, t, 100 / t, ort_s / t, precision)
            for name, t in (("golden (bitforge.emulate)", golden_s), ("onnxruntime", ort_s))]


def test_summary_is_one_ratio_per_model_against_the_3x_aim():
    rows = _rows("jet-mlp", None, 0.5, 1.0) + _rows("digits-cnn", "8", 4.0, 1.0) + _rows("x", None, 3.0, 1.0)
    assert bench.summary(rows) == [
        {"model": "jet-mlp", "precision": None, "golden_over_onnxruntime": 2.0, "within_3x": True},
        {"model": "digits-cnn", "precision": "8", "golden_over_onnxruntime": 0.25, "within_3x": False},
        {"model": "x", "precision": None, "golden_over_onnxruntime": 0.333, "within_3x": True}]


def test_cnn_graph_is_the_compiled_fixed_point_cnn_and_both_executors_agree_on_it():
    from bitforge.toolchain import emulate
    from bitforge.toolchain.backends.onnx_backend import make_session, to_onnx
    from bitforge.toolchain.verify.vectors import make_vectors

    g = bench.bench_graph("digits-cnn")
    ops = [type(n).__name__ for n in g.nodes]
    assert g.is_fixed and ops.count("Conv") == 2 and ops.count("Pool") == 2
    proto = to_onnx(g)
    assert proto.graph.output[0].type.tensor_type.elem_type == 7  # int64 codes: the ONNX model bench runs
    vectors = make_vectors(g, 64, 0)
    golden = emulate.run(g, vectors)
    ort = make_session(proto).run(None, vectors)
    out = g.outputs[0]
    np.testing.assert_array_equal(np.asarray(golden[out]), ort[0])


def test_cli_runs_the_cnn_and_writes_its_ratio(tmp_path, capsys):
    path = tmp_path / "b.json"
    assert main(["bench", "emulate", "--model", "digits-cnn", "--batch", "50", "--repeats", "1",
                 "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "digits-cnn @8" in out and "onnxruntime" in out and "aim" in out
    doc = json.loads(path.read_text())
    assert doc["benchmark"] == "emulate"
    golden, ort = doc["rows"]
    assert (golden["model"], golden["precision"], golden["batch"], golden["repeats"]) == ("digits-cnn", "8", 50, 1)
    assert ort["executor"] == "onnxruntime" and ort["ratio_to_onnxruntime"] == 1.0
    assert golden["ratio_to_onnxruntime"] == pytest.approx(ort["seconds_median"] / golden["seconds_median"])
    (ratio,) = doc["summary"]["ratios"]
    assert ratio["model"] == "digits-cnn" and ratio["within_3x"] == (golden["ratio_to_onnxruntime"] >= bench.AIM)
