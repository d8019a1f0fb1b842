"""``bitforge bench rtl`` without synthesis: rows, ratios, design slicing, the da4ml baseline and its wrapper.

The benchmark itself (yosys on designs of thousands of LUTs) is not a test; here every piece it is built from
is checked on small inputs: da4ml's rounding and overflow against ``fixed.requantize`` code by code, its
interpreter against the golden model on a 4 -> 3 layer, and the wrapped da4ml core through the cocotb bench.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bitforge.toolchain import fixed, ir
from bitforge.toolchain.bench import rtl as bench_rtl
from bitforge.toolchain.bench import da4ml as da
from bitforge.toolchain.cli import main
from bitforge.toolchain.fixed import parse_type
from bitforge.toolchain.passes.precision import infer_precision


def tiny_graph(seed: int = 1, out_type: str = "fixed<5,2,RND_CONV,SAT>", relu: bool = False) -> ir.Graph:
    """Quantize -> Dense 4 -> 3 (-> ReLU), typed, with input range [-2, 2]."""
    rng = np.random.default_rng(seed)
    x_t = parse_type("fixed<6,2,RND_CONV,SAT>")
    dense = ir.Dense("d", ("xq",), ("y",), weight=rng.integers(-32, 32, (3, 4)), bias=rng.integers(-100, 100, 3),
                     weight_type=parse_type("fixed<6,1,RND_CONV,SAT>"), bias_type=parse_type("fixed<10,4,RND_CONV,SAT>"))
    layers = [(ir.Quantize("q", ("x",), ("xq",)), ir.TensorSpec("xq", (4,), x_t)),
              (dense, ir.TensorSpec("y", (3,), parse_type(out_type)))]
    if relu:
        layers.append((ir.ReLU("r", ("y",), ("z",)), ir.TensorSpec("z", (3,), parse_type("ufixed<4,2,RND_CONV,SAT>"))))
    g = ir.sequential("tiny", ir.TensorSpec("x", (4,), None), layers)
    g.metadata["input_range"] = [-2.0, 2.0]
    return ir.validate(infer_precision(g))


def two_dense_graph() -> ir.Graph:
    rng = np.random.default_rng(3)
    t8 = parse_type("fixed<8,3,RND_CONV,SAT>")
    w_t, b_t = parse_type("fixed<8,1,RND_CONV,SAT>"), parse_type("fixed<12,4,RND_CONV,SAT>")

    def dense(name: str, i: str, o: str, n_in: int, n_out: int) -> ir.Dense:
        return ir.Dense(name, (i,), (o,), weight=rng.integers(-128, 128, (n_out, n_in)),
                        bias=rng.integers(-500, 500, n_out), weight_type=w_t, bias_type=b_t)
    g = ir.sequential("two", ir.TensorSpec("x", (3,), None), [
        (ir.Quantize("q", ("x",), ("xq",)), ir.TensorSpec("xq", (3,), t8)),
        (dense("d1", "xq", "h", 3, 4), ir.TensorSpec("h", (4,), t8)),
        (ir.ReLU("r", ("h",), ("hr",)), ir.TensorSpec("hr", (4,), parse_type("ufixed<8,3,RND_CONV,SAT>"))),
        (dense("d2", "hr", "y", 4, 2), ir.TensorSpec("y", (2,), t8))])
    g.metadata["input_range"] = [-4.0, 4.0]
    return ir.validate(infer_precision(g))


# -- da4ml arithmetic -------------------------------------------------------------------------------------------

def _da4ml_requantize_all_codes(src: fixed.FixedType, dst: fixed.FixedType) -> tuple[np.ndarray, np.ndarray]:
    """(da4ml, bitforge) results of requantizing every code of ``src`` to ``dst``."""
    from da4ml.trace import FixedVariableArray, HWConfig, comb_trace

    k, i, f = da.kif(src)
    inp = FixedVariableArray.from_kif(np.array([k]), np.array([i]), np.array([f]), HWConfig(1, -1, -1))
    comb = comb_trace(inp, da.requantize(inp, dst, "test"))
    codes = np.arange(src.min_code, src.max_code + 1, dtype=np.int64)[:, None]
    return da.interpret(comb, codes, src, dst)[:, 0], fixed.requantize(codes[:, 0], src, dst)


@pytest.mark.parametrize("rounding", ["TRN", "RND", "RND_CONV", "RND_MIN_INF"])
@pytest.mark.parametrize("overflow", ["WRAP", "SAT", "SAT_SYM"])
def test_da4ml_requantize_matches_fixed_on_every_code(rounding, overflow):
    src = parse_type("fixed<9,5>")  # 4 fraction bits dropped to 1: every tie and carry pattern occurs
    dst = parse_type(f"fixed<5,4,{rounding},{overflow}>")
    got, expected = _da4ml_requantize_all_codes(src, dst)
    assert np.array_equal(got, expected), f"first difference at src code {np.flatnonzero(got != expected)[0]}"


def test_da4ml_requantize_signed_to_unsigned_saturates_like_fixed():
    got, expected = _da4ml_requantize_all_codes(parse_type("fixed<7,3>"), parse_type("ufixed<4,2,RND_CONV,SAT>"))
    assert np.array_equal(got, expected)


def test_rounding_without_a_da4ml_form_names_the_node():
    g = tiny_graph(out_type="fixed<5,2,RND_ZERO,SAT>")
    with pytest.raises(da.Da4mlError, match=r"Dense 'd'.*RND_ZERO"):
        da.trace(g)


def test_saturate_to_zero_has_no_da4ml_form():
    g = tiny_graph(out_type="fixed<5,2,RND_CONV,SAT_ZERO>")
    with pytest.raises(da.Da4mlError, match=r"Dense 'd'.*SAT_ZERO"):
        da.trace(g)


# -- equivalence on whole layers ---------------------------------------------------------------------------------

@pytest.mark.parametrize("make", [tiny_graph, lambda: tiny_graph(relu=True), two_dense_graph],
                         ids=["dense", "dense-relu", "dense-relu-dense"])
def test_da4ml_interpreter_equals_golden_model(make):
    g = make()
    eq = da.check_equivalence(g, da.trace(g), vectors=300, seed=0)
    assert (eq.vectors, eq.mismatches, eq.equivalent) == (300, 0, True)


def test_equivalence_check_reports_a_different_function():
    g, other = tiny_graph(seed=1), tiny_graph(seed=2)  # same types, other weights
    eq = da.check_equivalence(g, da.trace(other), vectors=100, seed=0)
    assert not eq.equivalent and eq.mismatches > 0
    assert set(eq.first_mismatch) == {"vector", "input", "expected", "got"}
    assert eq.first_mismatch["expected"] != eq.first_mismatch["got"]


# -- wrapper ------------------------------------------------------------------------------------------------------

def test_element_maps_align_binary_points():
    maps = da.element_maps(3, (5, 2, True), (8, 4), "output 'y'")
    assert [(m.src_lo, m.dst_lo, m.shift) for m in maps] == [(0, 0, 2), (5, 8, 2), (10, 16, 2)]
    with pytest.raises(da.Da4mlError, match="output 'y'.*losing bits"):
        da.element_maps(1, (5, 4, True), (8, 2), "output 'y'")


def test_wrapper_places_elements_with_sign_extension_and_zero_fill():
    env = da._template_env()
    text = env.get_template("da4ml_core.v.j2").render(
        graph="g", name="core", da_top="pipe", da4ml_version=da.DA4ML_VERSION, da_latency=3, depth=8,
        depth_log2=3, in_w=8, out_w=16, count_in=1, count_out=2, in_w_elem=8, out_w_elem=8, in_tensor="x",
        out_tensor="y", in_type="fixed<8,3>", out_type="fixed<8,3>", da_in_elem=8, da_out_elem=5, da_in_w=8,
        da_out_w=10, in_maps=da.element_maps(1, (8, 5, True), (8, 5), "in"),
        out_maps=da.element_maps(2, (5, 3, True), (8, 5), "out") + [], latency=4, bus_w=8)
    assert "assign da_in[7:0] = s_axis_tdata[7:0];" in text
    # 5 bits with 3 fraction bits into 8 bits with 5: two zeros below, one sign bit above
    assert "assign y[7:0] = {{1{da_out[4]}}, da_out[4:0], 2'b0};" in text
    assert "assign y[15:8] = {{1{da_out[9]}}, da_out[9:5], 2'b0};" in text


def test_generated_design_lists_every_file_and_its_latency(tmp_path):
    g = tiny_graph()
    comb = da.trace(g)
    design = da.generate(g, comb, da.Da4mlOptions(latency_cutoff=2))
    out = da.write_design(g, design, tmp_path / "d", da.Da4mlOptions(latency_cutoff=2),
                          da.check_equivalence(g, comb, 50))
    man = json.loads((out / "rtl" / "manifest.json").read_text())
    assert man["top"] == "tiny_da4ml_board" and man["core_top"] == "tiny_da4ml" and man["ii"] == 1
    assert all((out / f).is_file() for f in man["files"])
    assert {"rtl/bf_serialize.v", "rtl/bf_deserialize.v", "rtl/bf_fifo.v"} <= set(man["files"])
    # register layers: one before each da4ml stage and one at its output, then the FIFO's cycle
    assert man["latency_cycles"] == man["da4ml"]["pipeline_stages"] + 2
    assert ir.load(out).name == "tiny"
    assert "da4ml" in (out / "report.md").read_text()


def test_generation_is_deterministic():
    g = tiny_graph()
    a = da.generate(g, da.trace(g)).files
    b = da.generate(g, da.trace(g)).files
    assert a == b


def test_wrapped_da4ml_design_is_verilator_lint_clean_and_icarus_2005(tmp_path):
    import os
    import shutil
    import subprocess

    from bitforge.toolchain.verify.simulators import simulator_env

    g = tiny_graph(relu=True)
    design = da.generate(g, da.trace(g))
    for name, text in design.files.items():
        (tmp_path / name).write_text(text)
    sources = sorted(str(tmp_path / n) for n in design.files)
    env = {**os.environ, **simulator_env("verilator")}
    lint = subprocess.run([shutil.which("verilator", path=env["PATH"]), "--lint-only", "-Wall", "--top-module",
                           design.board_top, *sources], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert lint.returncode == 0, lint.stderr
    icarus = subprocess.run(["iverilog", "-g2005", "-s", design.board_top, "-o", str(tmp_path / "a.vvp"), *sources],
                            capture_output=True, text=True, timeout=120, check=False)
    assert icarus.returncode == 0, icarus.stderr


def test_wrapped_da4ml_core_is_bit_exact_under_backpressure_on_icarus(tmp_path):
    """The credit counter, the valid/tlast pipes, the layouts and the latency, checked by the cocotb bench."""
    from bitforge.toolchain.verify.simulate import simulate

    g = tiny_graph(relu=True)
    comb = da.trace(g)
    opts = da.Da4mlOptions(latency_cutoff=2)  # a few stages, so samples are in flight together
    out = da.write_design(g, da.generate(g, comb, opts), tmp_path / "d", opts, da.check_equivalence(g, comb, 50))
    r = simulate(out, "icarus", 300, 0)["icarus"]
    assert (r["vectors"], r["mismatches"], r["tlast_errors"]) == (300, 0, 0)


# -- designs, rows, ratios ----------------------------------------------------------------------------------------

def test_slice_keeps_the_quantize_and_the_first_dense_layers():
    g = bench_rtl.slice_graph(two_dense_graph(), 1, "first")
    assert [n.name for n in g.nodes] == ["q", "d1"] and g.outputs == ["h"] and g.name == "first"
    assert set(g.tensors) == {"x", "xq", "h"}
    with pytest.raises(bench_rtl.BenchError, match="2 Dense layers, fewer than the 3"):
        bench_rtl.slice_graph(two_dense_graph(), 3, "x")


def test_parse_designs():
    assert bench_rtl.parse_designs(None) == list(bench_rtl.DESIGNS)
    assert bench_rtl.parse_designs("jet-mlp-layer1") == ["jet-mlp-layer1"]
    with pytest.raises(bench_rtl.BenchError, match="unknown design.*nope.*jet-mlp-layer1"):
        bench_rtl.parse_designs("jet-mlp,nope")


def _row(generator: str, target: str, lut, fmax) -> bench_rtl.BenchRow:
    return bench_rtl.BenchRow("d", generator, "8", target, lut=lut, ff=10, dsp=0, fmax_mhz=fmax)


def test_ratios_are_bitforge_over_da4ml_per_design_and_target():
    rows = [_row("bitforge", "xcvu9p", 900, None), _row("da4ml", "xcvu9p", 1000, None),
            _row("bitforge", "ecp5-85f", 3000, 120.0), _row("da4ml", "ecp5-85f", 2000, 100.0)]
    by_target = {q["target"]: q for q in bench_rtl.ratios(rows)}
    assert by_target["xcvu9p"]["lut_ratio"] == 0.9 and by_target["xcvu9p"]["fmax_ratio"] is None
    assert by_target["xcvu9p"]["lut_at_or_below_da4ml"] is True
    assert by_target["xcvu9p"]["fmax_at_or_above_da4ml"] is None
    assert by_target["ecp5-85f"]["lut_ratio"] == 1.5 and by_target["ecp5-85f"]["fmax_ratio"] == 1.2
    assert by_target["ecp5-85f"]["lut_at_or_below_da4ml"] is False


def test_ratio_is_null_without_a_da4ml_row():
    assert bench_rtl.ratios([_row("bitforge", "xcvu9p", 900, None)]) == []


def test_row_from_an_implement_entry_has_the_issue_fields():
    entry = {"lut": 100, "ff": 50, "dsp": 0, "bram": 0, "fmax_mhz": 123.4, "latency_cycles": 5, "latency_ns": 40.5,
             "ii": 1, "seconds": 3.0, "warnings": ["timing not met"], "resources_from": "nextpnr"}
    row = bench_rtl.row_from_entry(bench_rtl.DESIGNS["jet-mlp"], "da4ml", "ecp5-85f", entry)
    doc = bench_rtl.BenchResult([row], [], {}).to_json()["rows"][0]
    assert {k: doc[k] for k in bench_rtl.ROW_FIELDS} == {
        "design": "jet-mlp", "generator": "da4ml", "precision": "4", "target": "ecp5-85f", "lut": 100, "ff": 50,
        "dsp": 0, "fmax_mhz": 123.4, "latency_cycles": 5, "latency_ns": 40.5, "ii": 1}
    assert doc["status"] == "ok" and doc["note"] == "timing not met"


def test_row_of_a_design_too_big_keeps_its_synthesis_numbers(tmp_path):
    from bitforge.toolchain.flows.targets import DoesNotFit

    (tmp_path / "rtl").mkdir()
    (tmp_path / "rtl" / "top.v").write_text("module top; endmodule\n")
    (tmp_path / "rtl" / "manifest.json").write_text(json.dumps(
        {"top": "top", "files": ["rtl/top.v"], "latency_cycles": 7, "ii": 1}))
    impl = tmp_path / "impl" / "ecp5-85f"
    impl.mkdir(parents=True)
    (impl / "stat.json").write_text(json.dumps({"design": {"num_cells_by_type": {
        "LUT4": 90000, "CCU2C": 10, "TRELLIS_FF": 500, "MULT18X18D": 2}}}))
    err = DoesNotFit("design 'top' does not fit ecp5-85f: needs 90020 LUT", "ecp5-85f", {"lut": (90020, 83640)})
    row = bench_rtl.row_does_not_fit(bench_rtl.DESIGNS["jet-mlp"], "bitforge", "ecp5-85f", tmp_path, err)
    assert (row.status, row.lut, row.ff, row.dsp, row.fmax_mhz, row.latency_cycles) == (
        "does-not-fit", 90020, 500, 2, None, 7)
    assert "does not fit" in row.note


def test_unchanged_design_folder_is_kept_with_its_caches(tmp_path):
    from bitforge.toolchain.errors import OutputError
    from bitforge.toolchain.outputs import write_marker

    def design(folder: Path, text: str) -> Path:
        (folder / "rtl").mkdir(parents=True)
        (folder / "rtl" / "a.v").write_text(text)
        write_marker(folder, "bench rtl")
        return folder
    dest = design(tmp_path / "dest", "module a; endmodule\n")
    (dest / "impl").mkdir()
    assert not bench_rtl.keep_or_replace(design(tmp_path / "new1", "module a; endmodule\n"), dest)
    assert (dest / "impl").is_dir() and not (tmp_path / "new1").exists()
    assert bench_rtl.keep_or_replace(design(tmp_path / "new2", "module b; endmodule\n"), dest)
    assert not (dest / "impl").exists() and (dest / "rtl" / "a.v").read_text() == "module b; endmodule\n"

    mine = tmp_path / "mine"  # a --work folder holding the user's files where a design folder would go
    (mine / "notes.txt").parent.mkdir()
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(OutputError, match="bitforge did not write"):
        bench_rtl.keep_or_replace(design(tmp_path / "new3", "module c; endmodule\n"), mine)
    assert (mine / "notes.txt").read_text() == "keep"
    assert bench_rtl.keep_or_replace(tmp_path / "new3", mine, force=True)
    assert (mine / "rtl" / "a.v").read_text() == "module c; endmodule\n"


# -- CLI ------------------------------------------------------------------------------------------------------------

def test_cli_help_lists_the_rtl_suite_and_its_own_flags(capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", "--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    assert all(f"    {suite} " in text for suite in ("emulate", "rtl", "compress", "neuqi", "online")), text
    assert "--no-pnr" not in text and "--online-parts A,B" not in text  # each suite's flags live under it
    with pytest.raises(SystemExit):
        main(["bench", "rtl", "--help"])
    text = capsys.readouterr().out
    assert "--designs" in text and "bench rtl --designs jet-mlp-layer1" in text and "--online-parts" not in text


def test_cli_unknown_design_is_a_user_error(capsys):
    assert main(["bench", "rtl", "--designs", "nope"]) == 2
    assert "unknown design(s) nope" in capsys.readouterr().err


# -- the digits CNN (bitforge only) -------------------------------------------------------------------------------

CNN = bench_rtl.DESIGNS["digits-cnn"]


def test_design_list_has_the_digits_cnn_with_its_reuse_and_no_da4ml_reason():
    assert "digits-cnn" in bench_rtl.parse_designs(None) and bench_rtl.parse_designs("digits-cnn") == ["digits-cnn"]
    assert (CNN.model, CNN.precision, CNN.reuse, CNN.dense_layers) == ("digits-cnn", "8", 1, None)
    assert "da4ml" in CNN.no_da4ml and "Conv" in CNN.no_da4ml
    assert all(bench_rtl.DESIGNS[n].no_da4ml is None for n in ("jet-mlp", "jet-mlp-layer1"))


def test_a_design_without_da4ml_has_an_na_row_and_no_ratio():
    bf = bench_rtl.row_from_entry(CNN, "bitforge", "ecp5-85f", {
        "lut": 30000, "ff": 9000, "dsp": 10, "bram": 3, "fmax_mhz": 50.0, "latency_cycles": 127, "ii": 64})
    na = bench_rtl.row_no_da4ml(CNN, "ecp5-85f")
    assert (na.generator, na.status, na.note, na.lut, na.fmax_mhz) == ("da4ml", "n/a", CNN.no_da4ml, None, None)
    assert bench_rtl.ratios([bf, na]) == []
    doc = bench_rtl.BenchResult([bf, na], [], {}).to_json()["rows"]
    assert all(set(bench_rtl.ROW_FIELDS) | {"bram", "reuse", "status", "note"} <= set(d) for d in doc)
    assert doc[0]["bram"] == 3


def test_table_shows_bram_the_na_row_its_reason_and_a_reuse_other_than_1():
    import io

    from rich.console import Console

    bf = bench_rtl.row_from_entry(CNN, "bitforge", "ecp5-85f", {"lut": 50565, "ff": 21381, "dsp": 10, "bram": 2.5,
                                                               "fmax_mhz": 36.3, "latency_cycles": 127, "ii": 64})
    bf.reuse = 4
    mlp = _row("bitforge", "ecp5-85f", 22913, 39.2)
    mlp.design = "jet-mlp-layer1"  # the longest design name
    text = io.StringIO()
    Console(file=text, width=80).print(bench_rtl.table(bench_rtl.BenchResult(
        [bf, bench_rtl.row_no_da4ml(CNN, "xcvu9p"), mlp], [], {})))
    out = text.getvalue()
    assert "…" not in out  # nothing cut at 80 columns
    assert "BRAM" in out and "2.5" in out and "50,565" in out and "36.3" in out
    assert "bitforge / da4ml" not in out  # no ratios, no ratio table
    assert "digits-cnn: bitforge at --reuse 4" in out
    assert "digits-cnn: da4ml n/a: " + CNN.no_da4ml[:40] in out
    lines = [line.split() for line in out.splitlines() if line.split()[:3] == ["digits-cnn", "xcvu9p", "da4ml"]]
    assert len(lines) == 1 and lines[0][3:] == ["-"] * 8 + ["n/a"]  # LUT ... eq, then the status


@pytest.fixture(scope="module")
def cnn_run(tmp_path_factory):
    """run_bench on the digits CNN with implement replaced by the manifest's numbers: the real IR and RTL (no
    synthesis), and da4ml made unavailable to show the CNN does not need it."""
    from bitforge.toolchain.flows.implement import read_manifest

    def no_da4ml():
        raise AssertionError("the CNN rows must not need da4ml")

    def fake_implement(design, generator, target, folder, clock_mhz, progress):
        man = read_manifest(folder)
        return bench_rtl.row_from_entry(design, generator, target, {
            "lut": 1, "ff": 1, "dsp": 0, "bram": 0, "latency_cycles": man.latency_cycles, "ii": man.ii})

    work = tmp_path_factory.mktemp("bench")
    mp = pytest.MonkeyPatch()
    mp.setattr(da, "require_da4ml", no_da4ml)
    mp.setattr(bench_rtl, "implement_row", fake_implement)
    try:
        res = bench_rtl.run_bench(bench_rtl.BenchOptions(designs=("digits-cnn",), work=work / "w", vectors=50))
    finally:
        mp.undo()
    return res, work / "w" / "digits-cnn"


def test_cnn_bench_graph_is_the_fixed_point_cnn(cnn_run):
    g = ir.load(cnn_run[1] / "bitforge")  # bench_graph's result, as compile saved it
    ops = [type(n).__name__ for n in g.nodes]
    assert ops.count("Conv") == 2 and ops.count("Pool") == 2 and "Softmax" in ops
    assert g.name == "digits_cnn" and g.tensors[g.inputs[0]].shape == (1, 8, 8)
    assert g.is_fixed


def test_cnn_rows_come_from_its_rtl_at_reuse_1_with_da4ml_na(cnn_run):
    res, folder = cnn_run
    man = json.loads((folder / "bitforge" / "rtl" / "manifest.json").read_text())
    assert "reuse_auto" not in man and all(layer["reuse"] == 1 for layer in man["layers"])
    conv0 = next(layer for layer in man["layers"] if layer["node"] == "conv_0")
    # one output position per clock: the first conv's 8x8 positions set the II
    assert conv0["ii"] == conv0["resources"]["positions"] == 64 and man["ii"] == 64
    assert not (folder / "da4ml").exists()
    assert [(r.generator, r.target, r.status) for r in res.rows] == [
        ("bitforge", "xcvu9p", "ok"), ("da4ml", "xcvu9p", "n/a"),
        ("bitforge", "ecp5-85f", "ok"), ("da4ml", "ecp5-85f", "n/a")]
    for r in res.rows:
        assert (r.design, r.precision) == ("digits-cnn", "8")
        if r.generator == "bitforge":
            assert (r.latency_cycles, r.ii, r.reuse) == (man["latency_cycles"], 64, 1)
        else:
            assert r.note == CNN.no_da4ml and r.lut is None and r.reuse is None
    assert res.ratios == [] and res.settings["bitforge"]["reuse"] == {"digits-cnn": 1}
    report = json.loads((folder / "bitforge" / "report.json").read_text())
    assert report["verification"]["golden_vs_onnxruntime"]["mismatches"] == 0


@pytest.mark.slow
def test_cnn_synthesis_row_on_ecp5(tmp_path):
    """The real yosys synth_ecp5 row of the CNN (no place and route): a few minutes."""
    res = bench_rtl.run_bench(bench_rtl.BenchOptions(designs=("digits-cnn",), targets=("ecp5-85f",),
                                                     work=tmp_path / "w", vectors=50, no_pnr=True))
    bf, na = res.rows
    assert (bf.generator, bf.status, na.status) == ("bitforge", "synth-only", "n/a")
    assert bf.lut > 1000 and bf.ff > 1000 and bf.dsp is not None and bf.bram is not None
    assert bf.lut <= 83640 and bf.ff <= 83640 and bf.dsp <= 156 and bf.bram <= 208  # fits the ECP5-85F
    man = json.loads((tmp_path / "w" / "digits-cnn" / "bitforge" / "rtl" / "manifest.json").read_text())
    assert (bf.latency_cycles, bf.ii, bf.reuse) == (man["latency_cycles"], man["ii"], 1)
    assert "synth_ecp5" in bf.resources_from
