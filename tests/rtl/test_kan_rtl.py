"""KAN layers in hardware: bf_kan_layer through its emitter, bit-exact with the golden model on both simulators.

Each design is the emitter's generated wrapper plus the rtl/ library; the bench (cocotb_kan.py) checks the
promised latency, II = 1 at full rate, and every vector under random input gaps and output backpressure.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from bitforge.toolchain import emulate, fixed, ir
from bitforge.toolchain.backends.rtl import kan as kan_rtl
from bitforge.toolchain.backends.rtl.generate import RtlError
from bitforge.toolchain.backends.rtl.stages import Ports, Stage, StageRequest
from bitforge.toolchain.backends.rtl.verilog import packed_parameter
from bitforge.toolchain.bspline import basis_table, index_params
from bitforge.toolchain.compiler import load_model, prepare
from bitforge.toolchain.fixed import FixedType, parse_type
from bitforge.toolchain.passes.precision import infer_precision
from bitforge.toolchain.resources import rtl_library
from bitforge.toolchain.verify.simulators import run_cocotb, simulator_env

HERE = Path(__file__).parent
PORTS = Ports("clk", "rst", "in_valid", "in_ready", "in_data", "out_valid", "out_ready", "out_data")


# -- designs ---------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _kan_tracker() -> ir.Graph:
    g, _ = prepare(load_model("kan-tracker"), None)
    return g


def kan_tracker() -> ir.Graph:
    """The recipe's KAN as `bitforge compile` sees it: torch frontend, then infer_precision."""
    return _kan_tracker().copy()


def random_layer(order: int, basis_impl: str = "closed_form", seed: int = 0, accum: FixedType | None = None,
                 out_type: str = "fixed<12,4,RND_CONV,SAT>", x_type: str = "fixed<12,4,RND_CONV,SAT>",
                 grid: tuple[float, float] = (-1.7, 2.3), size: int = 6) -> ir.Graph:
    """3 inputs, 2 outputs; the default grid's cells are not a power of two of input LSBs (index_mult != 1)."""
    rng = np.random.default_rng(seed)
    x_t, c_t, b_t = parse_type(x_type), parse_type("fixed<10,3>"), parse_type("ufixed<11,1>")
    lo, mult, shift, u_bits = index_params(*grid, size, x_t)
    node = ir.KANLayer("kan", ("x",), ("y",), coeffs=fixed.quantize(rng.normal(0, 1.5, size=(2, 3, size + order)), c_t),
                       grid_lo=grid[0], grid_hi=grid[1], grid_size=size, order=order, coeff_type=c_t, basis_type=b_t,
                       u_bits=u_bits, index_lo=lo, index_mult=mult, index_shift=shift, accum_type=accum,
                       basis_impl=basis_impl)
    g = ir.Graph(f"kan_k{order}", ["x"], ["y"], {"x": ir.TensorSpec("x", (3,), x_t),
                                                 "y": ir.TensorSpec("y", (2,), parse_type(out_type))}, [node])
    return infer_precision(ir.validate(g))


def kan_node(g: ir.Graph) -> ir.KANLayer:
    return next(n for n in g.nodes if isinstance(n, ir.KANLayer))


def request(g: ir.Graph, options: dict | None = None) -> StageRequest:
    n = kan_node(g)
    x, y = g.tensors[n.input], g.tensors[n.output]
    return StageRequest(g, n, x.dtype, int(np.prod(x.shape)), y.dtype, int(np.prod(y.shape)), PORTS, "u0_kan",
                        options=options or {})


def emit(g: ir.Graph, options: dict | None = None) -> Stage:
    return kan_rtl.emit_kan(request(g, options))


def sources(stage: Stage, folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in stage.generated.items():
        (folder / name).write_text(text)
        paths.append(folder / name)
    lib = rtl_library()
    for name in stage.library:
        assert lib.joinpath(name).is_file(), f"rtl/{name} is missing (the KAN stage instantiates it)"
        paths.append(Path(str(lib.joinpath(name))))
    return paths


def top_module(stage: Stage) -> str:
    (name,) = stage.generated
    return name[:-2]


# -- vectors ----------------------------------------------------------------------------------------------

def edge_codes(n: ir.KANLayer, t: FixedType) -> np.ndarray:
    """Type ends, zero, and one code either side of every knot (where the cell changes) and of the grid ends."""
    knots = [n.grid_lo + j * (n.grid_hi - n.grid_lo) / n.grid_size for j in range(n.grid_size + 1)]
    near = fixed.quantize(np.array(knots), t.with_(overflow="SAT"))
    codes = np.concatenate([[t.min_code, t.max_code, 0, -1, 1], near - 1, near, near + 1])
    return np.clip(codes, t.min_code, t.max_code).astype(np.int64)


def vectors(g: ir.Graph, count: int, seed: int) -> np.ndarray:
    """Edge codes on every input first, then uniform codes over the whole type (much of it outside the grid)."""
    n = kan_node(g)
    t = g.tensors[n.input].dtype
    edges = edge_codes(n, t)
    rng = np.random.default_rng(seed)
    rows = [np.full(n.in_features, e) for e in edges] + [rng.permutation(edges)[:n.in_features]
                                                         for _ in range(len(edges))]
    rest = rng.integers(t.min_code, t.max_code + 1, size=(max(0, count - len(rows)), n.in_features))
    return np.vstack([np.array(rows, dtype=np.int64), rest])[:count]


def golden(g: ir.Graph, xs: np.ndarray) -> np.ndarray:
    """The KAN node alone in the golden model, fed the codes of its input tensor."""
    n = kan_node(g)
    sub = ir.Graph("kan_only", [n.input], [n.output], {t: g.tensors[t] for t in (n.input, n.output)}, [n])
    return emulate.run(sub, xs)[n.output]


# -- running the bench ------------------------------------------------------------------------------------

def run_bench(simulator: str, g: ir.Graph, xs: np.ndarray, work: Path, options: dict | None = None,
              seed: int = 1, p_gap: float = 0.25, p_stall: float = 0.3) -> dict:
    stage = emit(g, options)
    n = kan_node(g)
    tx, ty = g.tensors[n.input].dtype, g.tensors[n.output].dtype
    ys = golden(g, xs)
    work.mkdir(parents=True, exist_ok=True)
    np.savez(work / "vectors.npz", inputs=xs, expected=ys)
    cfg = {"vectors": str(work / "vectors.npz"), "result": str(work / "result.json"), "seed": seed,
           "in_width": tx.width, "in_frac": tx.frac, "out_width": ty.width, "out_frac": ty.frac,
           "out_signed": ty.signed, "out_count": n.out_features, "latency": stage.latency, "burst": 64,
           "p_input_gap": p_gap, "p_output_stall": p_stall, "max_cycles": 4 * len(xs) + 100}
    (work / "bench.json").write_text(json.dumps(cfg))
    outcome = run_cocotb(simulator, sources(stage, work / "src"), top_module(stage), "cocotb_kan", HERE,
                         work / f"build_{simulator}", extra_env={"KAN_BENCH": str(work / "bench.json")})
    assert outcome.failed == 0 and outcome.passed == 2, (
        f"{simulator}: {outcome.passed} passed, {outcome.failed} failed: {outcome.failures} (log in {work})")
    return json.loads((work / "result.json").read_text())


# -- emitter ------------------------------------------------------------------------------------------------

def test_kan_tracker_indexes_by_bit_slice_and_uses_the_closed_form_circuit():
    g = kan_tracker()
    params = dict(kan_rtl.layer_parameters(kan_node(g), g.tensors[kan_node(g).input].dtype,
                                           g.tensors[kan_node(g).output].dtype, kan_rtl.plan(kan_node(g))))
    assert (params["INDEX_MULT"], params["INDEX_SHIFT"], params["U"]) == ("1'h1", "0", "10")
    assert params["BASIS_CLOSED"] == "1" and "BASIS_TABLE" not in params
    stage = emit(g)
    assert stage.latency == 1 + 4 + 3 and stage.ii == 1 and stage.reuse == 1
    assert stage.resources["multipliers"] == 4 + 2  # k+1 coefficient products, u^2 and u^3


def test_latency_formula_per_index_map_and_basis():
    assert emit(random_layer(1)).latency == 2 + 1 + 3  # index multiply, closed form k=1, tail
    assert emit(random_layer(2)).latency == 2 + 2 + 3
    assert emit(random_layer(3)).latency == 2 + 4 + 3
    assert emit(random_layer(3, basis_impl="table")).latency == 2 + 1 + 3  # ROM
    assert emit(random_layer(3), {"kan_basis": "rom"}).latency == 2 + 1 + 3


def test_generated_verilog_is_deterministic_and_instantiates_the_wrapper():
    a, b = emit(random_layer(3, seed=4)), emit(random_layer(3, seed=4))
    assert a.generated == b.generated and a.instance == b.instance
    (name, text), = a.generated.items()
    assert name == "kan_k3_u0_kan.v" and "module kan_k3_u0_kan (" in text and "bf_kan_layer #(" in text
    assert a.instance.startswith("kan_k3_u0_kan u0_kan (") and ".out_data(out_data)" in a.instance


def test_rom_holds_the_closed_form_table_when_forced():
    g = random_layer(3)
    n = kan_node(g)
    text = next(iter(emit(g, {"kan_basis": "rom"}).generated.values()))
    table = basis_table(3, n.u_bits, n.basis_type, "closed_form")
    packed = packed_parameter(table.ravel(), n.basis_type.width)
    assert f".BASIS_TABLE({packed})" in text and ".BASIS_CLOSED(0)" in text


def test_missing_accumulator_type_is_a_clear_error():
    g = random_layer(3)
    g.nodes[0] = dataclasses.replace(g.nodes[0], accum_type=None)
    with pytest.raises(RtlError, match="KANLayer 'kan': accum_type is not set; run the precision pass"):
        emit(g)


def test_unknown_basis_option_is_a_clear_error():
    with pytest.raises(RtlError, match="KAN basis option 'lut' unknown; expected one of auto, rom"):
        emit(random_layer(3), {"kan_basis": "lut"})


# -- lint -----------------------------------------------------------------------------------------------------

LINT_CASES = ["k1", "k2_sat_accum", "k3", "k3_rom_table", "k2_unsigned_input", "k3_shift_only", "k3_one_lsb_cells",
              "kan_tracker"]


def lint_design(case: str) -> Stage:
    return emit(kan_tracker() if case == "kan_tracker" else random_case(case))


@pytest.mark.parametrize("case", LINT_CASES)
def test_verilator_lint_is_clean(tmp_path, case):
    stage = lint_design(case)
    env = {**os.environ, **simulator_env("verilator")}
    r = subprocess.run(["verilator", "--lint-only", "-Wall", "--top-module", top_module(stage),
                        *map(str, sources(stage, tmp_path))], capture_output=True, text=True, env=env, check=False)
    assert r.returncode == 0 and "%Warning" not in r.stderr, r.stderr


@pytest.mark.parametrize("case", ["k2_sat_accum", "k3", "k3_rom_table", "k3_one_lsb_cells"])
def test_icarus_accepts_it_as_verilog_2005(tmp_path, case):
    stage = lint_design(case)
    simulator_env("icarus")  # a clear message when Icarus is missing
    r = subprocess.run(["iverilog", "-g2005", "-Wall", "-o", str(tmp_path / "a.vvp"), "-s", top_module(stage),
                        *map(str, sources(stage, tmp_path))], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr


# -- simulation: kan-tracker ----------------------------------------------------------------------------------

def kan_tracker_sweep(step: int) -> tuple[ir.Graph, np.ndarray]:
    g = kan_tracker()
    t = g.tensors[kan_node(g).input].dtype
    codes = np.arange(t.min_code, t.max_code + 1, step, dtype=np.int64)
    return g, np.concatenate([edge_codes(kan_node(g), t), codes])[:, None]


@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
def test_kan_tracker_every_input_code(tmp_path, simulator):
    """All 65,536 codes of fixed<16,6>: every u of every cell, both grid ends, far outside the grid."""
    g, xs = kan_tracker_sweep(step=1)
    res = run_bench(simulator, g, xs, tmp_path, p_gap=0.15, p_stall=0.15)
    assert res["stream_with_backpressure"]["vectors"] == len(xs)
    assert res["latency_and_full_rate"]["latency"] == emit(g).latency


# -- simulation: random 3-in / 2-out layers, index multiply ------------------------------------------------

NARROW_SAT_ACCUM = FixedType(14, 14 - 7 - 10, True, overflow="SAT")  # frac 7 + 10; saturates often


def random_case(case: str) -> ir.Graph:
    return {"k1": lambda: random_layer(1, seed=11),
            "k2_sat_accum": lambda: random_layer(2, seed=12, accum=NARROW_SAT_ACCUM, out_type="fixed<8,2,RND,SAT_SYM>"),
            "k3": lambda: random_layer(3, seed=13),
            "k3_rom_table": lambda: random_layer(3, basis_impl="table", seed=14, out_type="ufixed<10,3,RND_INF,WRAP>"),
            # unsigned input (after a ReLU), grid not starting at zero
            "k2_unsigned_input": lambda: random_layer(2, seed=15, x_type="ufixed<10,3>", grid=(0.3, 5.1), size=5),
            # a cell of 2**18 LSBs: u_bits is capped at 12, so the index map is a plain shift (mult 1, shift 6)
            "k3_shift_only": lambda: random_layer(3, seed=16, x_type="fixed<20,4,RND_CONV,SAT>", grid=(-4.0, 4.0),
                                                  size=2),
            # cells of one LSB: u_bits = 0, so the basis is a one-row ROM whatever basis_impl says
            "k3_one_lsb_cells": lambda: random_layer(3, seed=17, x_type="fixed<6,6>", grid=(-8.0, 8.0), size=16),
            }[case]()


INDEX_MAPS = {"k2_unsigned_input": lambda n: n.index_mult != 1, "k3_shift_only": lambda n: (n.index_mult, n.index_shift,
              n.u_bits) == (1, 6, 12), "k3_one_lsb_cells": lambda n: (n.index_mult, n.index_shift, n.u_bits) == (1, 0, 0)}


def test_narrow_accumulator_case_really_overflows():
    g = random_case("k2_sat_accum")
    n = kan_node(g)
    wide = dataclasses.replace(n, accum_type=FixedType(40, 40 - n.accum_type.frac))
    sums = golden(dataclasses.replace(g, nodes=[wide], tensors={**g.tensors, "y": ir.TensorSpec(
        "y", (2,), FixedType(40, 40 - n.accum_type.frac))}), vectors(g, 1500, 3))
    assert (sums > n.accum_type.max_code).any() and (sums < n.accum_type.min_code).any()


@pytest.mark.parametrize("case", ["k1", "k2_sat_accum", "k3", "k3_rom_table", "k2_unsigned_input", "k3_shift_only",
                                  "k3_one_lsb_cells"])
def test_random_layer_on_icarus(tmp_path, case):
    g = random_case(case)
    assert INDEX_MAPS.get(case, lambda n: n.index_mult != 1)(kan_node(g)), "the case lost the index map it tests"
    run_bench("icarus", g, vectors(g, 1500, seed=3), tmp_path)


def test_random_cubic_layer_on_verilator(tmp_path):
    g = random_case("k3")
    run_bench("verilator", g, vectors(g, 3000, seed=5), tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["k1", "k2_sat_accum", "k3_rom_table", "k2_unsigned_input", "k3_shift_only",
                                  "k3_one_lsb_cells"])
def test_random_layer_on_verilator(tmp_path, case):
    g = random_case(case)
    run_bench("verilator", g, vectors(g, 5000, seed=6), tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
def test_random_cubic_layer_many_vectors(tmp_path, simulator):
    g = random_case("k3")
    run_bench(simulator, g, vectors(g, 20000, seed=8), tmp_path)


# -- the exact division by 3 of the closed-form cubic ----------------------------------------------------------

@pytest.mark.parametrize("width", [2, 3, 6, 14])
def test_div3_is_exact_for_every_input(tmp_path, width):
    """Widths around the doubling steps of the shift-add multiply (S = 3, 5, 9, 17)."""
    src = Path(str(rtl_library().joinpath("bf_kan_div3.v")))
    outcome = run_cocotb("icarus", [src], "bf_kan_div3", "cocotb_kan_div3", HERE, tmp_path / "build",
                         parameters={"W": width})
    assert outcome.failed == 0 and outcome.passed == 1, outcome.failures


# -- synthesis: the kan-tracker layer must fit an iCE40 UP5K (8 DSP blocks) ------------------------------------

@pytest.mark.slow
def test_kan_tracker_layer_fits_the_up5k_dsp_blocks(tmp_path):
    """u^2, u^3 and the k+1 coefficient products take DSPs; the division by 3 must not (bf_kan_div3)."""
    stage = emit(kan_tracker())
    names = [p.name for p in sources(stage, tmp_path)]
    for p in sources(stage, tmp_path):
        if p.parent != tmp_path:
            shutil.copy(p, tmp_path / p.name)  # YoWASP sees relative paths only
    from bitforge.toolchain.flows.tools import (
        get_tool,  # finds the YoWASP wheel whether or not the venv is on PATH
    )

    script = f"read_verilog {' '.join(names)}; synth_ice40 -dsp -top {top_module(stage)}; tee -o stat.txt stat"
    r = subprocess.run(get_tool("yosys").argv(["-q", "-p", script]), cwd=tmp_path, capture_output=True, text=True,
                       timeout=600, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    stat = (tmp_path / "stat.txt").read_text()
    dsp = int(re.search(r"(\d+)\s+SB_MAC16", stat).group(1))
    assert dsp <= 8, f"{dsp} SB_MAC16 for the kan-tracker layer; the UP5K has 8\n{stat}"


# -- through the RTL backend: the whole generated design ---------------------------------------------------------

def test_kan_tracker_design_matches_the_golden_model_through_bitforge_simulate(tmp_path):
    """compile --to rtl, then the generic AXI-stream bench: the KAN stage inside the generated top and board."""
    from bitforge.toolchain.compiler import CompileOptions, compile_model
    from bitforge.toolchain.verify.simulate import simulate

    out = tmp_path / "kt"
    report = compile_model("kan-tracker", out, CompileOptions(to=("rtl",)))
    (layer,) = report["rtl"]["layers"]
    assert (layer["op"], layer["latency"], layer["ii"]) == ("KANLayer", emit(kan_tracker()).latency, 1)
    res = simulate(out, "icarus", vectors=2000, seed=4)
    assert res["icarus"]["mismatches"] == 0 and res["icarus"]["vectors"] == 2000
