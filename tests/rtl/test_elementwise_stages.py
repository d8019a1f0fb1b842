"""The stages of the element-wise and small ops (backends/rtl/elementwise.py) on both simulators, bit for bit
against emulate.run: ScaleShift, LeakyReLU/PReLU, Clip, HardSigmoid/HardSwish, Table (parallel and folded),
Softmax, ArgMax, Reshape and Transpose.

Every case of elementwise_designs.py streams its vectors (edge codes, whole rows of one code, uniform codes)
through the shared AXI4-Stream bench (random input gaps and output stalls, protocol monitors); its first
samples go in back to back, which measures the latency and II the emitter promised.
"""
from __future__ import annotations

import dataclasses
import os
import subprocess

import numpy as np
import pytest
from bitforge.toolchain import emulate, ir
from bitforge.toolchain.backends.rtl.elementwise import (
    CONST_MUL_MAX_BITS,
    softmax_latency,
    table_latency,
    transpose_sources,
)
from bitforge.toolchain.backends.rtl.verilog import RtlError
from bitforge.toolchain.emulate import clip_codes
from bitforge.toolchain.fixed import FixedType, parse_type
from bitforge.toolchain.verify.simulators import simulator_env
from elementwise_designs import N_FOLDED, N_SAMPLES, cases, emit, golden, inputs, results
from rtl_bench import RTL, SIMULATORS, assert_ok

OPS = ["ScaleShift", "LeakyReLU", "Clip", "HardSigmoid", "Table", "Softmax", "ArgMax", "Reshape", "Transpose"]


def names_of(op: str) -> list[str]:
    found = [name for name, c in cases().items() if c.node.OP == op]
    assert found, f"no {op} case in elementwise_designs.py"
    return found


@pytest.fixture(scope="module", params=SIMULATORS)
def sim(request):
    return results(request.param)


# -- simulation: every case, both simulators ---------------------------------------------------------------------

@pytest.mark.parametrize("op", OPS)
def test_stage_matches_the_golden_model_with_its_promised_timing(sim, op):
    for name in names_of(op):
        r = assert_ok(sim, name)
        st = emit(cases()[name])
        want = N_FOLDED if st.ii > 1 else N_SAMPLES
        assert r["outputs"] == want, f"{name}: {r['outputs']} of {want} outputs checked"
        assert (r["latency"], r["ii_min"], r["ii_max"]) == (st.latency, st.ii, st.ii), (
            f"{name}: measured latency {r['latency']}, II {r['ii_min']}..{r['ii_max']}; the emitter promised "
            f"latency {st.latency}, II {st.ii}")


# -- the cases do what they are there for ---------------------------------------------------------------------

def _exact(name: str) -> tuple:
    case = cases()[name]
    x = inputs(name, case, N_SAMPLES)
    return case, x


def test_scale_shift_case_really_overflows_its_accumulator():
    for name, acc_kind in (("ss_sat_acc", "SAT"), ("ss_unsigned_wrap", "WRAP")):
        case, x = _exact(name)
        n = case.node
        wide = dataclasses.replace(n, accum_type=FixedType(40, 40 - n.accum_type.frac, n.accum_type.signed))
        y40 = FixedType(40, 40 - n.accum_type.frac, n.accum_type.signed)
        g = ir.Graph("wide", ["x"], ["y"], {"x": case.x, "y": ir.TensorSpec("y", case.y.shape, y40)}, [wide])
        sums = emulate.run(g, x.reshape(len(x), *case.x.shape))["y"]
        assert n.accum_type.overflow.value == acc_kind
        assert (sums > n.accum_type.max_code).any(), f"{name}: the accumulator never overflows"


def test_clip_cases_hit_their_corner():
    assert clip_codes(cases()["clip_lo_above_hi_on_grid"].node, parse_type("fixed<8,3>")) == (10, 9)
    case, x = _exact("clip_bounds_past_the_type")
    assert clip_codes(case.node, case.x.dtype)[0] > case.x.dtype.max_code
    assert len(np.unique(golden(case, x))) == 1  # every output is the lower bound


def test_table_cases_clamp_at_both_ends_and_fold():
    for name in ("table_sigmoid", "table_lo_outside_the_type", "table_folded_r4_padded"):
        case, x = _exact(name)
        n = case.node
        index = (x - n.index_lo) >> n.index_shift
        assert (index >= len(n.table)).any(), f"{name}: no input reads past the last entry"
        if name != "table_lo_outside_the_type":  # index_lo lies below the type: index 0 is never reached
            assert (index < 0).any(), f"{name}: no input reads before the first entry"
    assert [emit(cases()[k]).reuse for k in ("table_folded_r4_padded", "table_folded_r3", "table_folded_one_rom")] \
        == [4, 3, 5]


def test_argmax_and_softmax_cases_have_ties_for_the_maximum():
    for name in ("argmax_ties", "argmax_groups_unsigned", "softmax_9_unsigned"):
        case, x = _exact(name)
        k = case.x.shape[-1]
        rows = x.reshape(-1, k)
        tied = (rows == rows.max(axis=1, keepdims=True)).sum(axis=1) > 1
        assert tied.mean() > 0.2, f"{name}: only {tied.mean():.0%} of the rows tie"
        if case.node.OP == "ArgMax":  # a tie where the first maximum is not at index 0 (lowest index kept)
            first = rows.argmax(axis=1)
            assert (tied & (first > 0)).any()


# -- emitter details ----------------------------------------------------------------------------------------------

def test_timing_formulas():
    assert [table_latency(r) for r in (1, 2, 7)] == [1, 4, 9]
    assert [softmax_latency(k) for k in (1, 2, 4, 9, 16)] == [4, 4, 5, 6, 6]
    assert softmax_latency(9, levels_per_stage=1) == 8
    assert emit(cases()["softmax_groups"]).latency == softmax_latency(4, 1) == 6


def test_transpose_sources_are_numpys_transpose():
    x = np.arange(2 * 3 * 4).reshape(2, 3, 4) * 7
    for perm in [(0, 1, 2), (2, 0, 1), (1, 2, 0), (2, 1, 0)]:
        assert np.array_equal(x.ravel()[transpose_sources(x.shape, perm)], x.transpose(perm).ravel())


def test_generated_text_is_deterministic_and_names_the_library_module():
    for name, case in cases().items():
        a, b = emit(case, "p_"), emit(case, "p_")
        assert a.instance == b.instance and a.library == b.library
        module = a.instance.split("\n")[2].split(" ")[0]
        assert f"{module}.v" in a.library and all((RTL / f).is_file() for f in a.library), name
        assert ".out_data(p_out_data)" in a.instance


def test_stages_that_do_not_fold_ignore_reuse():
    case = cases()["clip_relu6"]
    folded = emit(dataclasses.replace(case, reuse=8))
    assert (folded.ii, folded.reuse, folded.instance) == (1, 1, emit(case).instance)


def _with(case, **fields):
    node = dataclasses.replace(case.node, **fields)
    return dataclasses.replace(case, graph=dataclasses.replace(case.graph, nodes=[node]))


def test_refusals_name_the_node_and_the_fix():
    with pytest.raises(RtlError, match="LeakyReLU 'prelu': alpha type fixed<6,8.*frac\\(alpha\\) >= 0"):
        emit(_with(cases()["leaky_prelu"], alpha_type=parse_type("fixed<6,8>")))
    wide = FixedType(CONST_MUL_MAX_BITS + 2, 4)
    with pytest.raises(RtlError, match="ScaleShift 'bn': scale_type .* 32 bits wide; .* at most 30"):
        emit(_with(cases()["ss_coarse_shift_1d"], scale_type=wide, accum_type=FixedType(60, 30)))
    with pytest.raises(RtlError, match="ScaleShift 'bn': accum_type is not set; run the precision pass"):
        emit(_with(cases()["ss_sat_acc"], accum_type=None))
    with pytest.raises(RtlError, match="Softmax 'softmax': exp_table is not set"):
        emit(_with(cases()["softmax_5"], exp_table=None))


# -- lint: the modules off their defaults (test_lib_lint covers every rtl/ file with its defaults) ----------------

VARIANTS = [
    ("bf_permute", {"IDENTITY": 1}),
    ("bf_table_folded", {"R": 5, "N": 5}),
    ("bf_table_folded", {"R": 4, "N": 8, "X_SIGNED": 0}),
    ("bf_table_rom", {"ENTRIES": 1, "X_SIGNED": 0, "SHIFT": 3}),
    ("bf_softmax", {"K": 1, "G": 2}),
    ("bf_softmax", {"K": 9, "LEVELS_PER_STAGE": 1, "X_SIGNED": 0}),
    ("bf_leaky_relu", {"X_SIGNED": 0}),
    ("bf_hard_sigmoid", {"SWISH": 1, "X_SIGNED": 0}),
    ("bf_hard_sigmoid", {"SWISH": 1, "A_SIGNED": 0}),
    ("bf_clip", {"HAS_LO": 0, "HAS_HI": 0}),
    ("bf_argmax", {"K": 1, "OUT_W": 3}),
    ("bf_argmax", {"K": 5, "G": 3, "OUT_W": 3, "X_SIGNED": 0}),
    ("bf_argmax_tree", {"N": 1}),
    ("bf_argmax_tree", {"N": 7, "SIGNED": 0}),
    ("bf_scale_shift", {"HAS_SHIFT": 1, "X_SIGNED": 0, "S_SIGNED": 0, "ACC_SIGNED": 0}),
    ("bf_pipe_valid", {"LATENCY": 3}),
]


@pytest.mark.parametrize("module,params", VARIANTS, ids=[f"{m}-{i}" for i, (m, _) in enumerate(VARIANTS)])
def test_verilator_lint_is_clean_off_the_defaults(module, params):
    env = {**os.environ, **simulator_env("verilator")}
    r = subprocess.run(["verilator", "--lint-only", "-Wall", "-y", str(RTL), "--top-module", module,
                        *[f"-G{k}={v}" for k, v in params.items()], str(RTL / f"{module}.v")],
                       capture_output=True, text=True, env=env, timeout=120, check=False)
    assert r.returncode == 0, f"verilator --lint-only -Wall {module} {params}:\n{r.stderr}"


# -- through the RTL generator: the stages chained in one design ----------------------------------------------------

def chain_graph() -> ir.Graph:
    """Transpose -> ScaleShift -> LeakyReLU -> Clip -> HardSigmoid -> Table -> Reshape -> Softmax -> ArgMax: a wire
    stage first, stages of every latency, and at reuse 3 a folded Table (II 3, no skid buffer after it)."""
    from bitforge.toolchain.tables import build_table, softmax_tables

    t = parse_type
    x8, s9, h8 = t("fixed<8,3,TRN,WRAP>"), t("fixed<9,2>"), t("fixed<8,3>")
    rng = np.random.default_rng(5)
    y1, y2, y3, y4, y5 = (t("fixed<10,4,RND_CONV,SAT>"), t("fixed<8,4,RND,SAT>"), t("fixed<7,3,RND,SAT>"),
                          t("fixed<9,4,RND_CONV,SAT>"), t("ufixed<8,0,RND_CONV,SAT>"))
    y6 = t("fixed<8,2,RND_CONV,SAT>")
    table = build_table("tanh", y4, y4.min_code, y4.max_code, y6, size=64)
    soft = softmax_tables(y6, 6, size=256)
    layers = [
        (ir.Transpose("t", ("x",), ("a",), perm=(1, 0)), ir.TensorSpec("a", (3, 2), x8)),
        (ir.ScaleShift("bn", ("a",), ("b",), scale=rng.integers(-255, 256, 3), shift=rng.integers(-128, 128, 3),
                       scale_type=s9, shift_type=h8, accum_type=t("fixed<18,6>")), ir.TensorSpec("b", (3, 2), y1)),
        (ir.LeakyReLU("prelu", ("b",), ("c",), alpha=np.array([5, -9, 30]), alpha_type=t("fixed<6,0>")),
         ir.TensorSpec("c", (3, 2), y2)),
        (ir.Clip("clip", ("c",), ("d",), lo=-3.2, hi=5.0), ir.TensorSpec("d", (3, 2), y3)),
        (ir.HardSigmoid("hswish", ("d",), ("e",), alpha=1 / 6, beta=0.5, swish=True, alpha_type=t("fixed<14,2>"),
                        alpha_code=round(2 ** 12 / 6), beta_code=2 ** 11), ir.TensorSpec("e", (3, 2), y4)),
        (ir.Table("tanh", ("e",), ("f",), function="tanh", table=table.table, index_lo=table.index_lo,
                  index_shift=table.index_shift), ir.TensorSpec("f", (3, 2), y6)),
        (ir.Reshape("flatten", ("f",), ("g",)), ir.TensorSpec("g", (6,), y6)),
        (ir.Softmax("softmax", ("g",), ("h",), exp_table=soft.exp_table, exp_type=soft.exp_type,
                    exp_shift=soft.exp_shift, recip_table=soft.recip_table, recip_type=soft.recip_type,
                    recip_lo=soft.recip_lo, recip_shift=soft.recip_shift), ir.TensorSpec("h", (6,), y5)),
        (ir.ArgMax("argmax", ("h",), ("y",)), ir.TensorSpec("y", (1,), t("ufixed<3,3>"))),
    ]
    tensors = {"x": ir.TensorSpec("x", (2, 3), x8)} | {s.name: s for _, s in layers}
    return ir.validate(ir.Graph("elementwise_chain", ["x"], ["y"], tensors, [n for n, _ in layers]))


def _chain_design(tmp_path, reuse: int):
    from bitforge.toolchain.compiler import CompileOptions, write_rtl

    g = chain_graph()
    ir.save(g, tmp_path)
    return write_rtl(g, tmp_path, CompileOptions(to=("rtl",), reuse=reuse))


def _run_chain(tmp_path, simulator: str, reuse: int) -> None:
    from bitforge.toolchain.verify.simulate import simulate

    rtl = _chain_design(tmp_path, reuse)
    ops = [layer["op"] for layer in rtl["layers"]]
    assert ops == [n.OP for n in chain_graph().nodes]
    table = next(layer for layer in rtl["layers"] if layer["op"] == "Table")
    assert (table["reuse"], table["ii"]) == (reuse, reuse) and rtl["ii"] == reuse
    g = chain_graph()
    x = np.random.default_rng(2).integers(-128, 128, (400, 2, 3))
    assert len(np.unique(emulate.run(g, x)["y"])) == 6, "set-up: every class should win on some input"
    result = simulate(tmp_path, simulator, vectors=400, seed=2)[simulator]
    assert (result["vectors"], result["mismatches"]) == (400, 0)


def test_chain_streams_bit_exactly_through_the_generated_design_on_icarus(tmp_path):
    _run_chain(tmp_path, "icarus", reuse=3)


@pytest.mark.slow
def test_chain_streams_bit_exactly_through_the_generated_design_on_verilator(tmp_path):
    _run_chain(tmp_path, "verilator", reuse=1)
