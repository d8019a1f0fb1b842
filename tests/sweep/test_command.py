"""``bitforge sweep``: the command line around the driver (toolchain/sweep/command.py).

A bad spec is refused before any work (exit 2, the key path named, nothing written); ``--dry-run`` lists the points;
a small real sweep (kan-tracker, golden model only, on the process pool) writes its rows and report, and a rerun
answers from the rows without running a point.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from bitforge.toolchain.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_help_has_examples(capsys):
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    text = capsys.readouterr().out
    assert "bitforge sweep examples/sweep-first.yml -o out/sweep-first" in text and "--ray" in text


@pytest.mark.parametrize("name", ["sweep-first.yml", "sweep-kan.yml", "sweep-jet-mlp.yml", "sweep-llm.yml"])
def test_the_shipped_examples_parse_and_list_their_points(name, capsys, tmp_path):
    assert main(["sweep", str(EXAMPLES / name), "-o", str(tmp_path / "out"), "--dry-run"]) == 0
    assert not (tmp_path / "out").exists()
    if name == "sweep-kan.yml":
        out = capsys.readouterr().out
        assert "24 points (grid), up to pnr" in out and "gowin-gw1nr9" in out


def test_a_bad_spec_exits_2_naming_the_key_before_any_work(tmp_path, capsys):
    spec = tmp_path / "bad.yml"
    spec.write_text("kind: learn\nbase: {task: t1}\naxes:\n  grid_size: [4, 0]\nmetrics: [error]\n")
    assert main(["sweep", str(spec), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "axes.grid_size[1]" in err and not (tmp_path / "out").exists()


def test_workers_and_ray_together_are_refused(tmp_path, capsys):
    assert main(["sweep", str(EXAMPLES / "sweep-first.yml"), "-o", str(tmp_path / "o"), "--workers", "2",
                 "--ray", "auto"]) == 2
    assert "give one of --workers and --ray" in capsys.readouterr().err


def test_a_golden_sweep_runs_on_the_pool_and_a_rerun_comes_from_its_rows(tmp_path, capsys):
    spec = tmp_path / "golden.yml"
    spec.write_text("name: golden\nkind: compile\nbase: {model: kan-tracker}\naxes:\n  precision: ['6', '10']\n"
                    "metrics: [error, fidelity]\nbest:\n  - {label: lowest error, best: error}\n")
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "-o", str(out), "--workers", "2"]) == 0
    first = json.loads((out / "sweep.json").read_text())
    rows = first["rows"]
    assert [r["params"]["precision"] for r in rows] == ["6", "10"] and all(r["status"] == "ok" for r in rows)
    assert rows[1]["metrics"]["fidelity"] < rows[0]["metrics"]["fidelity"]  # 10 bits track the float model closer
    assert all((out / r["files"]["report.json"]).is_file() for r in rows)
    assert (out / "report.html").is_file() and (out / "pareto.png").is_file()
    assert "lowest error: precision=10" in capsys.readouterr().out
    assert main(["sweep", str(spec), "-o", str(out), "--workers", "2"]) == 0
    again = json.loads((out / "sweep.json").read_text())["rows"]
    assert all(r["cached"] for r in again)
    strip = [{k: v for k, v in r.items() if k not in ("cached", "seconds")} for r in again]
    assert strip == [{k: v for k, v in r.items() if k not in ("cached", "seconds")} for r in rows]
