"""``bitforge bench hls``: the rows it reports (times, C-sim and golden samples/s on the same batch, their ratio,
vectors compared and mismatches), through the CLI. The timings themselves are not asserted (a busy machine varies
them); what is asserted is that the C simulation and the golden model ran the same vectors and agreed code for
code, that a disagreement is counted (and fails the command), and that a design hls4ml cannot take gets the
reason instead of a number."""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from bitforge.toolchain.backends.hls import project
from bitforge.toolchain.backends.hls.convert import HlsError
from bitforge.toolchain.bench import hls as bench
from bitforge.toolchain.cli import main

NUMBERS = ("convert_write_s", "gxx_compile_s", "csim_seconds_median", "golden_seconds_median", "csim_samples_per_s",
           "golden_samples_per_s", "golden_over_csim")


def _run(tmp_path, *args) -> tuple[int, dict]:
    path = tmp_path / "bench.json"
    rc = main(["bench", "hls", *args, "--json", str(path)])
    return rc, json.loads(path.read_text())


def _check_rates(row: dict) -> None:
    assert row["csim_samples_per_s"] == pytest.approx(row["vectors"] / row["csim_seconds_median"])
    assert row["golden_samples_per_s"] == pytest.approx(row["vectors"] / row["golden_seconds_median"])
    assert row["golden_over_csim"] == pytest.approx(row["golden_samples_per_s"] / row["csim_samples_per_s"])


def test_cli_jet_mlp_csim_agrees_with_the_golden_model_and_reports_the_ratio(tmp_path, capsys):
    rc, doc = _run(tmp_path, "--designs", "jet-mlp", "--batch", "200", "--repeats", "1")
    assert rc == 0
    out = capsys.readouterr().out
    assert "jet-mlp" in out and "hls4ml vitis/parallel/latency" in out and "golden/C-sim" in out
    assert doc["benchmark"] == "hls" and doc["command"].startswith("bitforge ")
    assert doc["host"]["cpus"] >= 1 and doc["host"]["hls4ml"]
    (row,) = doc["rows"]
    assert (row["design"], row["precision"], row["batch"], row["repeats"]) == ("jet-mlp", None, 200, 1)
    assert (row["flow"], row["backend"], row["io"], row["strategy"]) == ("hls4ml", "vitis", "parallel", "latency")
    assert row["status"] == "ok" and row["head"] is None and row["note"] is None
    assert (row["vectors"], row["mismatches"], row["first_mismatch"]) == (200, 0, None)
    assert row["ir_ops"] == ["Quantize"] + ["Dense", "ReLU"] * 3 + ["Dense"]
    assert row["layers"] == len(row["ir_ops"])  # one hls4ml layer per IR node (the input layer for Quantize)
    assert all(row[k] > 0 for k in NUMBERS)
    _check_rates(row)


def _golden_as_csim(flip_row=None):
    """A stand-in for g++ and hls4ml's predict: the golden model's codes (one flipped with ``flip_row``)."""
    from bitforge.toolchain import emulate

    def compile_csim(hm):
        return SimpleNamespace(hm=hm, compile_seconds=1.5)

    def csim_codes(lib, x):
        g = lib.hm.graph
        (name,) = g.inputs
        codes = np.array(emulate.run(g, {name: x.reshape(len(x), *g.tensors[name].shape)})[g.outputs[0]])
        if flip_row is not None:
            codes[flip_row, 0] += 1
        return codes
    return compile_csim, csim_codes


def test_a_csim_disagreement_is_counted_and_fails_the_command(tmp_path, monkeypatch, capsys):
    compile_csim, csim_codes = _golden_as_csim(flip_row=3)
    monkeypatch.setattr(project, "compile_csim", compile_csim)
    monkeypatch.setattr(project, "csim_codes", csim_codes)
    rc, doc = _run(tmp_path, "--designs", "jet-mlp", "--batch", "50", "--repeats", "1")
    assert rc == 1
    (row,) = doc["rows"]
    assert (row["status"], row["vectors"], row["mismatches"]) == ("mismatch", 50, 1)
    assert row["first_mismatch"]["row"] == 3 and row["gxx_compile_s"] == 1.5


def _refuse_softmax(real_build):
    def build_model(g, options, output_dir, tb_data=None):
        if any(type(n).__name__ == "Softmax" for n in g.nodes):
            raise HlsError(f"graph '{g.name}': no softmax today")
        return real_build(g, options, output_dir, tb_data)
    return build_model


def test_digits_cnn_falls_back_to_the_argmax_head_when_its_softmax_is_refused(tmp_path, monkeypatch):
    compile_csim, csim_codes = _golden_as_csim()
    monkeypatch.setattr(project, "compile_csim", compile_csim)
    monkeypatch.setattr(project, "csim_codes", csim_codes)
    monkeypatch.setattr(project, "build_model", _refuse_softmax(project.build_model))
    row = bench.bench_design("digits-cnn", batch=40, repeats=1)
    assert (row.status, row.head, row.precision) == ("ok", "argmax", "8")
    assert "no softmax today" in row.note and "--softmax argmax" in row.note
    assert row.ir_ops[-1] == "ArgMax" and "Softmax" not in row.ir_ops
    assert (row.vectors, row.mismatches) == (40, 0)


def test_a_design_hls4ml_cannot_take_is_na_with_the_reason_and_no_numbers(monkeypatch):
    def refuse(g, options, output_dir, tb_data=None):
        raise HlsError(f"graph '{g.name}': refused here")
    monkeypatch.setattr(project, "build_model", refuse)
    row = bench.bench_design("digits-cnn", batch=40, repeats=1)
    assert row.status == "n/a" and row.head is None
    assert row.note.count("refused here") == 2 and row.note.startswith("softmax: ") and "argmax: " in row.note
    assert all(getattr(row, k) is None for k in NUMBERS + ("vectors", "mismatches", "layers"))
    from rich.console import Console
    console = Console(width=200, record=True)
    console.print(bench.table([row]))
    text = console.export_text()
    assert "n/a" in text and "refused here" in text


def test_t1_learner_trajectory_agrees_with_the_golden_learner(tmp_path):
    rc, doc = _run(tmp_path, "--designs", "t1-learner", "--batch", "300", "--repeats", "1")
    assert rc == 0
    (row,) = doc["rows"]
    assert (row["design"], row["flow"], row["precision"], row["status"]) == (
        "t1-learner", "bitforge learner templates", "<16,6>", "ok")
    assert (row["vectors"], row["mismatches"], row["state_mismatches"], row["lane_mismatches"]) == (300, 0, 0, 0)
    assert row["state_codes"] == 8  # G + k coefficients of the one edge
    assert row["ir_ops"] == ["KANLayer"] and row["layers"] == 1
    assert all(row[k] > 0 for k in NUMBERS)
    _check_rates(row)


def test_t1_learner_too_short_a_stream_is_na_with_the_tasks_reason():
    row = bench.bench_design("t1-learner", batch=200, repeats=1)
    assert row.status == "n/a" and "--batch 200" in row.note and "t1" in row.note
    assert row.vectors is None and row.golden_over_csim is None


def test_unknown_design_is_refused_with_the_choices(capsys):
    with pytest.raises(bench.HlsBenchError, match="jet-mlp, digits-cnn, t1-learner"):
        bench.parse_designs("jet-mlp,nope")
    assert bench.parse_designs(None) == bench.parse_designs("all") == list(bench.DESIGNS)
    assert main(["bench", "hls", "--designs", "nope"]) == 2
    assert "nope" in capsys.readouterr().err
