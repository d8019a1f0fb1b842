"""yosys (the YoWASP wheel, as the flows run it) accepts every rtl/*.v, and maps the dense forms as designed:
the parallel form's constant multipliers to adders (no DSP block), the folded form's multipliers one DSP each.
"""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from bitforge.toolchain.flows.tools import get_tool
from bitforge.toolchain.flows.yosys import read_cell_census
from lib_designs import dense_layers, emit, features
from rtl_bench import BUILD_ROOT, RTL, top_text

WORK = BUILD_ROOT / "yosys"  # YoWASP cannot see /tmp: run in the repository's build folder, relative paths


def _yosys(script: str, name: str) -> subprocess.CompletedProcess:
    WORK.mkdir(parents=True, exist_ok=True)
    for f in RTL.glob("*.v"):
        shutil.copy(f, WORK / f.name)
    (WORK / f"{name}.ys").write_text(script)
    return subprocess.run(get_tool("yosys").argv(["-q", "-l", f"{name}.log", "-s", f"{name}.ys"]), cwd=WORK,
                          capture_output=True, text=True, timeout=600)


def _failure(r: subprocess.CompletedProcess, name: str) -> str:
    log = WORK / f"{name}.log"
    errors = [ln for ln in (log.read_text().splitlines() if log.exists() else []) if "ERROR" in ln]
    return f"yosys failed ({WORK / name}.log): {errors[:3] or r.stderr[-2000:]}"


def test_yosys_elaborates_every_library_module():
    files = " ".join(sorted(p.name for p in RTL.glob("*.v")))
    script = "".join(f"design -reset\nread_verilog -defer {files}\nhierarchy -check -top {p.stem}\nproc\nopt_clean\n"
                     for p in sorted(RTL.glob("*.v")))
    r = _yosys(script, "elaborate")
    assert r.returncode == 0, _failure(r, "elaborate")


@pytest.fixture(scope="module")
def dense_cells():
    """ECP5 cell counts of two emitted layers: par_sparse_narrow (parallel) and fold_r3 (folded by 3)."""
    layers = dense_layers(np.random.default_rng(7))
    script, stages = [], {}
    for name in ("par_sparse_narrow", "fold_r3"):
        node, xt, yt, reuse, options = layers[name]
        st = stages[name] = emit(node, xt, yt, reuse, options, "d_")
        n_in, n_out = features(node)
        ports = ["input wire d_in_valid", "output wire d_in_ready", f"input wire [{n_in * xt.width - 1}:0] d_in_data",
                 "output wire d_out_valid", "input wire d_out_ready",
                 f"output wire [{n_out * yt.width - 1}:0] d_out_data"]
        WORK.mkdir(parents=True, exist_ok=True)
        (WORK / f"{name}.v").write_text(top_text(name, ports, [st.instance]))
        files = " ".join([*st.library, f"{name}.v"])
        script.append(f"design -reset\nread_verilog -defer {files}\nsynth_ecp5 -top {name}\n"
                      f"tee -q -o {name}.stat.json stat -json\n")
    r = _yosys("".join(script), "dense")
    assert r.returncode == 0, _failure(r, "dense")
    return {name: read_cell_census(WORK / f"{name}.stat.json") for name in stages}, stages


def test_parallel_dense_uses_no_dsp_block(dense_cells):
    cells, _ = dense_cells
    assert cells["par_sparse_narrow"].get("MULT18X18D", 0) == 0
    assert cells["par_sparse_narrow"].get("CCU2C", 0) > 0  # the shift-and-add adders are carry chains


def test_folded_dense_uses_one_dsp_block_per_multiplier(dense_cells):
    cells, stages = dense_cells
    assert cells["fold_r3"].get("MULT18X18D", 0) == stages["fold_r3"].resources["multipliers"] == 5
