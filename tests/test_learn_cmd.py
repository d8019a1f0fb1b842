"""``bitforge learn`` and ``bitforge bench online``: what they write and what they measure."""
from __future__ import annotations

import json

import pytest
from bitforge.toolchain.learn.bench import (OnlineBenchOptions, OnlineBenchResult, accuracy_rows, kan_flatness, markdown, merge_results, read_results, options_from_args)
from bitforge.toolchain.cli import build_parser, main
from bitforge.toolchain.errors import BitforgeError
from bitforge.toolchain.learn.commands import LearnOptions, resolve
from bitforge.toolchain.learn.spec import load_learner

pytestmark = pytest.mark.usefixtures("one_thread")


def test_reference_learners_follow_the_benchmark_configurations():
    spec, task = resolve(LearnOptions("t1"))
    assert spec.kind == "kan" and spec.sizes == (1, 1) and spec.grid_size == 5 and spec.order == 3
    assert spec.grid_range == (-2.25, 2.25) and spec.rule.lr_shift == 1 and spec.eta == 0.5
    assert spec.formats.datapath.to_short().startswith("fixed<16,6")
    assert spec.formats.guard_bits == 8 and task.name == "t1" and task.n == 1500
    mlp, _ = resolve(LearnOptions("t4", model="mlp"))
    assert mlp.sizes == (16, 16, 1) and mlp.rule.lr_shift == 7
    assert resolve(LearnOptions("t2", lr_shift=5))[0].rule.lr_shift == 5
    notes = []
    assert resolve(LearnOptions("t2", lr=0.1), notes.append)[0].rule.lr_shift == 3
    assert notes == ["--lr 0.1 is not a power of two; using the nearest, 2^-3 = 0.125 (the learner applies its "
                     "learning rate as a right shift)"]
    assert resolve(LearnOptions("t2", lr=0.25), notes.append)[0].rule.lr_shift == 2 and len(notes) == 1


def test_unknown_task_is_a_clear_error():
    with pytest.raises(BitforgeError, match="unknown task 't9'"):
        resolve(LearnOptions("t9"))


def test_learn_writes_states_metrics_plot_and_report(tmp_path):
    out = tmp_path / "t1"
    assert main(["learn", "t1", "--samples", "400", "-o", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["samples"] == 400 and m["fixed"]["mean_mse"] > 0
    # <16,6> with 8 guard bits tracks the float reference closely over the same stream
    assert abs(m["fixed"]["mean_mse"] / m["float"]["mean_mse"] - 1) < 0.05
    assert (out / "learn.png").stat().st_size > 10_000 and "| mean_mse |" in (out / "report.md").read_text()
    initial, final = load_learner(out / "learner"), load_learner(out / "final")
    assert initial.spec == final.spec
    assert (initial.state()[0]["coeffs"] != final.state()[0]["coeffs"]).any()  # it learned
    assert not list(tmp_path.glob(".t1.*"))  # no temporary folder left behind
    # report.json carries the benchmark's accuracy rows (the keys), fixed point and float
    rows = json.loads((out / "report.json").read_text())["accuracy"]
    assert [r["format"] for r in rows] == ["<16,6>", "float"]
    assert set(rows[0]) == ACCURACY_KEYS and rows[0]["params"] == 8
    assert rows[0]["mean_mse"] == m["fixed"]["mean_mse"] and len(rows[0]["steady_mse"]) == 3


def test_learn_rtl_checks_the_trajectory_and_writes_an_implementable_folder(tmp_path):
    out = tmp_path / "t1-rtl"
    assert main(["learn", "t1", "--samples", "300", "--rtl", "--simulator", "icarus", "-o", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    r = report["verification"]["golden_vs_rtl"]["icarus"]
    assert r["samples"] == 300 and r["mismatches"] == 0
    assert all(c["mismatches"] == 0 for c in r["readback"].values())
    manifest = json.loads((out / "rtl" / "manifest.json").read_text())
    assert manifest["ii"] == 1 and manifest["top"] == "t1_kan_board"
    assert all((out / f).is_file() for f in manifest["files"])


ACCURACY_KEYS = {"task", "model", "format", "params", "mean_mse", "steady_mse", "error_rate"}
HARDWARE_KEYS = {"task", "model", "target", "lut", "ff", "dsp", "bram", "fmax_mhz", "latency_cycles", "latency_ns", "ii",
                 "params"}


def test_learn_help_has_examples(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["learn", "--help"])
    assert "bitforge learn t1" in capsys.readouterr().out


def test_bench_online_accuracy_rows_compare_with_float():
    rows = accuracy_rows(OnlineBenchOptions(tasks=("t1",), seeds=(0,), datapaths=("float", "fixed<16,6>")),
                         lambda m: None)
    by = {(r["model"], r["datapath"]): r for r in rows}
    assert set(by) == {("kan", "float"), ("kan", "fixed<16,6>"), ("mlp", "float"), ("mlp", "fixed<16,6>")}
    kan = by[("kan", "fixed<16,6>")]
    assert abs(kan["mse_vs_float"] - 1) < 0.02  # "indistinguishable from float"
    assert kan["steady_mse"][0] <= 0.0010 and kan["steady_mse"][1] <= 0.0015 and kan["steady_mse"][2] <= 0.0006
    assert all(ACCURACY_KEYS <= set(r) for r in rows) and kan["format"] == "<16,6>" and kan["params"] == 8
    assert by[("mlp", "float")]["params"] == 97


def _hw(model, params, lut, target="xcvu9p", **kw):
    return {"task": "t4", "model": model, "target": target, "design": f"{model}{params}",
            "params": params, "lut": lut, "ff": 10, "dsp": 1, "bram": 0, "fmax_mhz": None, "latency_cycles": 2,
            "latency_ns": None, "ii": 1, "status": "ok", **kw}


def test_bench_online_markdown_has_the_tables_and_the_kan_flatness():
    res = OnlineBenchResult(scaling=[_hw("kan", 144, 1000), _hw("kan", 3120, 1080), _hw("mlp", 289, 5000),
                                     _hw("kan", 65536, 9999, target="ecp5-85f", big=True)])
    assert kan_flatness(res.scaling) == {"xcvu9p": (1.08, 1.08)}  # the big learner is not part of the sweep
    shrinking = [_hw("kan", 144, 1000), _hw("kan", 240, 1050), _hw("kan", 432, 800)]
    assert kan_flatness(shrinking) == {"xcvu9p": (1.05, 0.8)}
    page = markdown(res, "bitforge bench online --online-docs docs", {"scaling": "img/online-scaling.png"})
    assert "`bitforge bench online --online-docs docs`" in page and "| kan144 | xcvu9p | 144 | 1,000 | - |" in page
    assert "xcvu9p: largest 1.080x, largest G 1.080x" in page and "![scaling](img/online-scaling.png)" in page


def test_bench_online_sections_are_checked():
    args = build_parser().parse_args(["bench", "online", "--online-parts", "accuracy,hardwre"])
    with pytest.raises(BitforgeError, match="hardwre"):
        options_from_args(args)
    ok = options_from_args(build_parser().parse_args(["bench", "online", "--online-parts", "accuracy",
                                                       "--kan-grids", "6,12"]))
    assert ok.accuracy and not ok.hardware and ok.kan_grids == (6, 12)


def test_bench_online_big_learner_joins_only_the_full_ecp5_sweep_and_the_seed_is_passed():
    def opts(*argv):
        return options_from_args(build_parser().parse_args(["bench", "online", *argv]))

    assert opts("--online-parts", "scaling", "--kan-targets", "ecp5-85f").big
    assert not opts("--online-parts", "scaling", "--kan-targets", "xcvu9p").big
    narrowed = opts("--online-parts", "scaling", "--kan-targets", "ecp5-85f", "--kan-grids", "48", "--pnr-seed", "2")
    assert not narrowed.big and narrowed.pnr_seed == 2 and narrowed.kan_grids == (48,)
    assert opts("--online-parts", "scaling,big", "--kan-grids", "48").big
    assert opts().pnr_seed == 1


def test_scaling_learners_share_formats_and_keep_the_local_coordinate_at_8_bits():
    """Every sweep point: power-of-two grid step (a bit-sliced cell index, no index multiplier), 8 u bits (the same
    basis table; u would otherwise run from 13 bits, beyond the basis ROM, to 8) and 18-bit coefficients."""
    from bitforge.toolchain.learn.bench import (KAN_GRIDS, SCALING_GRID_RANGE, SCALING_U_BITS, _formats, _learner, big_kan_learner, scaling_formats)
    from bitforge.toolchain.bspline import index_params

    for G in KAN_GRIDS:
        L = _learner("t4", "kan", grid_size=G, grid_range=SCALING_GRID_RANGE, formats=scaling_formats(G))
        _, mult, _, u_bits = index_params(*SCALING_GRID_RANGE, G, L.spec.formats.input)
        assert mult == 1 and u_bits == SCALING_U_BITS, G
        f = _formats(L)
        assert (f["datapath"], f["coeff_bits"]) == ("<14,2>", 18)
        assert L.spec.formats.input.width == 16
    # Why the input format follows G: with the big learner's <16,2> at G = 6 the local coordinate would have 12 bits,
    # past the basis ROM's limit.
    from bitforge.toolchain.backends.rtl.learner_kan import ROM_MAX_U_BITS

    one_format = scaling_formats().input
    assert index_params(*SCALING_GRID_RANGE, 6, one_format)[3] == 12 > ROM_MAX_U_BITS
    big = big_kan_learner()
    assert big.n_params == 65_536 and _formats(big) == {"input": "<16,2>", "datapath": "<14,2>", "coeff_bits": 18}
    assert _formats(_learner("t4", "mlp", sizes=(16, 32, 1), formats=scaling_formats()))["coeff_bits"] == 18


@pytest.mark.slow
def test_flow_learn_t1_reaches_an_ecp5_bitstream(tmp_path):
    out = tmp_path / "t1"
    assert main(["flow", "learn:t1", "--target", "ecp5-85f", "--simulator", "icarus", "-o", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    r = report["targets"]["ecp5-85f"]
    assert r["status"] == "ok" and r["ii"] == 1 and r["bitstream"] and r["latency_ns"] < 100
    (hw,) = report["hardware"]
    assert set(hw) == HARDWARE_KEYS and hw["params"] == 8 and hw["latency_ns"] == r["latency_ns"]


@pytest.mark.slow
def test_learn_t1_mlp_on_ecp5_is_time_multiplexed_to_fit(tmp_path):
    """The fully parallel T1 MLP needs 160 multipliers; the ECP5-85F has 156: 11 lanes x 3 rounds instead (half
    the DSP blocks, the rest is routing headroom)."""
    out = tmp_path / "t1-mlp"
    assert main(["learn", "t1", "--model", "mlp", "--target", "ecp5-85f", "--simulator", "icarus",
                 "-o", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["rtl"]["ii"] == 8 and report["rtl"]["resources"]["lanes"] == 11
    assert report["verification"]["golden_vs_rtl"]["icarus"]["mismatches"] == 0
    r = report["targets"]["ecp5-85f"]
    assert r["status"] == "ok" and r["dsp"] <= 156 and r["bitstream"]


def test_bench_online_merges_earlier_runs_section_by_section():
    sweep = OnlineBenchResult(scaling=[_hw("kan", 144, 1000), _hw("kan", 240, 1010)], command="bitforge sweep")
    big = OnlineBenchResult(scaling=[_hw("kan", 65536, 9999, target="ecp5-85f", big=True)], command="bitforge big")
    now = OnlineBenchResult(scaling=[_hw("kan", 240, 1020)], command="bitforge now")  # measured again: replaces
    res = merge_results([sweep, big], now)
    assert sorted((r["params"], r["target"], r["lut"]) for r in res.scaling) == [
        (144, "xcvu9p", 1000), (240, "xcvu9p", 1020), (65536, "ecp5-85f", 9999)]
    assert res.sources == {"scaling": ["bitforge sweep", "bitforge big", "bitforge now"]}
    assert "`bitforge sweep`; `bitforge big`; `bitforge now`" in markdown(res, "bitforge now", {})
    again = merge_results([sweep, big], OnlineBenchResult(scaling=[_hw("kan", 144, 1001), _hw("kan", 240, 1011)],
                                                          command="bitforge again"))  # every sweep row again
    assert again.sources == {"scaling": ["bitforge big", "bitforge again"]}
    old = {k: v for k, v in _hw("kan", 96, 900).items() if k != "params"} | {"parameters": 96}  # an older JSON's row
    (row,) = merge_results([OnlineBenchResult(scaling=[old])], OnlineBenchResult()).scaling
    assert row["params"] == 96 and "parameters" not in row


def test_bench_online_merge_refuses_what_is_not_its_json(tmp_path):
    with pytest.raises(BitforgeError, match="nope.json: cannot read it as JSON"):
        read_results(str(tmp_path / "nope.json"))
    (tmp_path / "other.json").write_text('{"rows": []}')
    with pytest.raises(BitforgeError, match="not a 'bitforge bench online --json' result"):
        read_results(str(tmp_path / "other.json"))


def test_cached_flows_list_a_design_without_a_finished_flow_as_not_run(tmp_path):
    """--cached-flows redraws tables from finished flows: nothing is started, and nothing is recorded as failed."""
    from bitforge.toolchain.learn.bench import _implement_learner, _learner
    from bitforge.toolchain.flows.cache import cached_only

    with cached_only():
        row = _implement_learner(_learner("t1", "kan"), "t1_kan", "ecp5-85f", tmp_path, lambda m: None, "t1", "kan")
    assert row["status"] == "not run" and "no cached result" in row["note"] and row["params"] == 8
    report = tmp_path / "t1_kan" / "report.json"
    assert not report.exists() or "ecp5-85f" not in json.loads(report.read_text()).get("targets", {})


def test_a_failed_rtl_check_keeps_its_artefacts_in_out_failed(tmp_path, monkeypatch):
    """A trajectory mismatch names the simulation's logs: they must still exist (OUT.failed), as compile's do."""
    import bitforge.toolchain.verify.simulate_learner as sl
    from bitforge.toolchain.errors import VerificationFailed
    from bitforge.toolchain.learn.run import learn

    def mismatch(learner, x, t, work, **kw):
        work.mkdir(parents=True, exist_ok=True)
        (work / "icarus.log").write_text("prediction 3 differs\n")
        raise VerificationFailed(f"golden model vs RTL: 1 mismatch (log: {work / 'icarus.log'})")

    monkeypatch.setattr(sl, "simulate_learner", mismatch)
    out = tmp_path / "t1"
    with pytest.raises(VerificationFailed) as e:
        spec, task = resolve(LearnOptions(task="t1", samples=300))
        learn(spec, task, out, rtl=True)
    failed = tmp_path / "t1.failed"
    assert not out.exists() and (failed / "sim" / "icarus.log").read_text() == "prediction 3 differs\n"
    assert str(failed / "sim" / "icarus.log") in str(e.value) and f"artefacts are in {failed}" in str(e.value)


def test_learner_pnr_options_only_where_the_targets_nextpnr_has_them():
    """nextpnr-himbaechel (Gowin) refuses --placer static: a Gowin learner gets nextpnr's defaults."""
    from bitforge.toolchain.bench.rtl import PNR_OPTIONS
    from bitforge.toolchain.learn.run import learner_pnr_options

    assert "--placer" in PNR_OPTIONS
    assert learner_pnr_options("ecp5-25f") == PNR_OPTIONS and learner_pnr_options("ice40-up5k") == PNR_OPTIONS
    assert learner_pnr_options("gowin-gw1nr9") == () and learner_pnr_options("xc7a35t") == ()
