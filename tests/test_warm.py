"""The set-up's warm-up (``python -m bitforge.toolchain.flows.warm``): Verilator's runtime into ccache."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from bitforge.toolchain.flows import warm


def test_warm_up_names_every_tool_it_knows_when_given_an_unknown_one(capsys):
    assert warm.main(["yosys", "modelsim"]) == 2
    err = capsys.readouterr().err
    assert "modelsim" in err and "yosys" in err and "verilator" in err


def _ccache_stats(env: dict) -> dict[str, int]:
    text = subprocess.run(["ccache", "--print-stats"], env=env, capture_output=True, text=True, check=True).stdout
    return {k: int(v) for k, v in (line.split("\t") for line in text.splitlines() if "\t" in line)}


@pytest.mark.slow
def test_verilator_warm_up_fills_ccache_for_the_next_design(tmp_path, monkeypatch):
    """After the warm-up, a first cocotb build of a different design finds Verilator's runtime objects in ccache."""
    import os

    from bitforge.toolchain.verify.simulators import run_cocotb

    assert shutil.which("ccache"), "ccache is missing: make setup installs it with Icarus Verilog"
    monkeypatch.setenv("CCACHE_DIR", str(tmp_path / "ccache"))  # a cold cache of its own
    messages = []
    seconds = warm.warm_tools([warm.VERILATOR], progress=messages.append)
    assert list(seconds) == [warm.VERILATOR] and messages[-1].startswith("verilator: ready after")
    env = dict(os.environ)
    subprocess.run(["ccache", "--zero-stats"], env=env, check=True, capture_output=True)

    design = tmp_path / "other" / "counter.v"
    design.parent.mkdir()
    design.write_text("module counter(input wire clk, output reg [3:0] n);\n  initial n = 0;\n"
                      "  always @(posedge clk) n <= n + 1;\nendmodule\n")
    (design.parent / "counter_test.py").write_text("import cocotb\n\n\n@cocotb.test()\nasync def starts(dut):\n"
                                                     "    pass\n")
    outcome = run_cocotb("verilator", [design], "counter", "counter_test", design.parent, design.parent / "build")
    assert outcome.passed == 1 and outcome.failed == 0
    stats = _ccache_stats(env)
    # verilated.cpp, verilated_dpi.cpp, verilated_vpi.cpp, verilated_threads.cpp: the same for every design
    assert stats["direct_cache_hit"] + stats["preprocessed_cache_hit"] >= 4, stats
