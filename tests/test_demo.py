"""``bitforge demo`` (what ``make demo`` runs): the default example end to end, quiet and complete.

The slow test runs the demo as a user does (a separate process, Python's default warning filters) and reads
what it leaves: a bitstream that is the one report.json names, and every verification with no mismatch.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest

from bitforge.toolchain.cli import DEFAULT_DEMO, DEMO_TARGET
from bitforge.toolchain.compiler import load_model, prepare
from bitforge.toolchain.flows.targets import get_target

#: The first bytes of every iCE40 bitstream that icepack writes: a comment block, then the sync word.
ICE40_SYNC = b"\x7e\xaa\x99\x7e"


def test_the_demo_example_compiles_without_a_precision_warning():
    _, warnings = prepare(load_model(DEFAULT_DEMO), None)
    assert [w.message for w in warnings] == []


def test_the_demo_target_makes_a_bitstream():
    assert get_target(DEMO_TARGET).flow is not None  # not a synthesis-only estimate


def _table_rows(markdown: str, header_start: str) -> list[list[str]]:
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


@pytest.mark.slow
def test_demo_runs_end_to_end_without_a_warning(tmp_path):
    out = tmp_path / "demo"
    run = subprocess.run([sys.executable, "-m", "bitforge.toolchain.cli", "demo", "-o", str(out)],
                         capture_output=True, text=True, cwd=tmp_path, timeout=900)
    printed = run.stdout + run.stderr
    assert run.returncode == 0, printed
    assert "warning" not in printed.lower(), printed

    report = json.loads((out / "report.json").read_text())
    assert report["model"]["name"] == DEFAULT_DEMO and report["precision"]["warnings"] == []
    target = report["targets"][DEMO_TARGET]
    assert target["status"] == "ok" and target["timing_met"] is True and target["warnings"] == []
    bitstream = (out / target["bitstream"]).read_bytes()
    assert len(bitstream) == target["bitstream_bytes"] > 0
    assert hashlib.sha256(bitstream).hexdigest() == target["sha256"]
    if DEMO_TARGET.startswith("ice40"):
        assert ICE40_SYNC in bitstream[:64]

    v = report["verification"]
    assert (v["golden_vs_onnxruntime"]["vectors"], v["golden_vs_onnxruntime"]["mismatches"]) == (10_000, 0)
    rtl = v["golden_vs_rtl"]
    assert sorted(rtl) == ["icarus", "verilator"]
    assert all(r["vectors"] == 2000 and r["mismatches"] == r["protocol_errors"] == 0 for r in rtl.values())

    md = (out / "report.md").read_text()
    checks = _table_rows(md, "| executor |")
    assert all(row[1] != "0" and row[2] == "0" for row in checks), checks  # vectors, mismatches
    executors = " ".join(row[0] for row in checks)
    assert all(name in executors for name in ("ONNX Runtime", "icarus", "verilator")), executors
    targets = _table_rows(md, "| target |")
    assert [row[0] for row in targets] == [DEMO_TARGET] and targets[0][-1] == target["bitstream"]
    assert "next: bitforge emulate" in run.stdout
