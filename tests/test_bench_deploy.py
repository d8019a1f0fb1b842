"""bitforge bench deploy: the computed rows from the timing model, the wrapper-cycle fit, a short run on the
simulated board whose every answer is checked against the golden model and whose cycle counts must agree with
wire_timing, and (slow) the real thing on jet-mlp and the T1 learner with place and route on one board."""
import json
import re

import numpy as np
import pytest

from bitforge.runtime.sim_board import harness_source
from bitforge.toolchain import ir
from bitforge.toolchain.bench.deploy import board_rows, computed
from bitforge.toolchain.bench.deploy_measure import SimRow, fit_wrapper_cycles, harness_idle_tail
from bitforge.toolchain.bench.wire_timing import DeviceShape, round_trip
from bitforge.toolchain.cli import main

from test_device import dense_graph

JET = DeviceShape(in_bytes=32, out_bytes=10, latency_cycles=83, ii=16, max_payload=488, clock_hz=12e6)
FITS = {("jet", 1): {"a": 58.0, "b_per_clks_per_bit": -0.25}, ("jet", 15): {"a": 298.0, "b_per_clks_per_bit": -0.25}}


def test_the_idle_tail_subtracted_per_request_is_the_harness_default():
    """The cycles of a request are counted as total minus baseline minus one idle tail: the formula must be the
    harness's own default, or every measured number would be off by the difference."""
    line = re.search(r"o\.idle_tail = (.+);", harness_source()).group(1)
    assert line.replace(" ", "") == "256>20*kClksPerBit?256:20*kClksPerBit"
    assert [harness_idle_tail(c) for c in (4, 12, 13, 104)] == [256, 256, 260, 2080]


def _sim_row(cpb, batch, wrapper):
    return SimRow(model="jet", operation="infer", clks_per_bit=cpb, batch=batch, samples=1, requests=1,
                  host_samples_per_s=1, host_latency_ms_median=1, host_latency_ms_p95=1, verilator_cycles_per_s=1,
                  host_retries=0,
                  cycle_requests=1, request_bytes=1, answer_bytes=1, cycles_per_request=1, model_cycles_per_request=1,
                  model_ratio=1, wrapper_cycles=wrapper, random_payload_model_cycles=1, sim_clock_hz=12e6,
                  sim_baud=3e6, sim_latency_us=1, sim_samples_per_s=1, wire_share=1, core_share=0, golden_checked=1,
                  latency_cycles=83, ii=16, max_batch=15)


def test_the_wrapper_fit_separates_the_bit_time_part():
    rows = [_sim_row(c, k, a + b * c) for k, a, b in ((1, 58, -0.25), (15, 298, -0.5)) for c in (4, 8, 16)]
    fits = fit_wrapper_cycles(rows)
    assert fits[("jet", 1)]["a"] == pytest.approx(58) and fits[("jet", 1)]["b_per_clks_per_bit"] == pytest.approx(-0.25)
    assert fits[("jet", 15)]["a"] == pytest.approx(298)
    assert fits[("jet", 15)]["b_per_clks_per_bit"] == pytest.approx(-0.5)
    assert fits[("jet", 1)]["max_residual_cycles"] < 1e-9
    one = fit_wrapper_cycles([_sim_row(4, 1, 60.0)])[("jet", 1)]
    assert (one["a"], one["b_per_clks_per_bit"]) == (60.0, 0.0)


def test_computed_request_is_the_timing_model_with_the_fitted_wrapper():
    d = computed(JET, FITS[("jet", 1)], 1, 115_200)
    rt = round_trip(JET, 1, 115_200, wrapper_cycles=58 - 0.25 * 12e6 / 115_200)
    assert d["seconds"] == pytest.approx(rt.seconds) and d["samples_per_s"] == pytest.approx(1 / rt.seconds)
    assert d["latency_ms"] == pytest.approx(1e3 * rt.seconds)
    assert d["wire_share"] + d["core_share"] + d["wrapper_share"] == pytest.approx(1.0)
    assert 0.99 < d["wire_share"] < 1.0  # one word at 115,200 baud is all wire, but not more than all


def test_board_rows_cover_every_board_baud_and_batch():
    rows = board_rows(JET, "jet", FITS, ("icebreaker", "ulx3s", "tangnano9k"), (115_200, 3_000_000), {})
    assert len(rows) == 3 * 2 * 2
    by = {(r["board"], r["baud"], r["batch"]): r for r in rows}
    assert {r["core_clock_hz"] for r in rows} == {12e6, 25e6, 27e6}
    for (board, baud, k), r in by.items():
        one = by[(board, baud, 1)]
        assert r["samples_per_s_vs_batch_1"] == pytest.approx(r["samples_per_s"] / one["samples_per_s"])
        if k == 15:
            assert r["samples_per_s"] > one["samples_per_s"]  # a batch shares the frame's overhead
        assert r["request_bytes"] >= k * 32 + 7 and r["answer_bytes"] >= k * 10 + 7
    # 3 Mbaud: 12 MHz / 4 and 27 MHz / 9 are exact; 25 MHz / 8 is 4 % fast, which the board flow refuses
    assert by[("icebreaker", 3_000_000, 1)]["achievable"] and by[("tangnano9k", 3_000_000, 1)]["achievable"]
    assert not by[("ulx3s", 3_000_000, 1)]["achievable"] and "2 %" in by[("ulx3s", 3_000_000, 1)]["note"]
    assert by[("ulx3s", 115_200, 1)]["clks_per_bit"] == 217
    # a faster link, the same bytes: 3 Mbaud is more than 20x 115,200 for one word
    assert by[("icebreaker", 3_000_000, 1)]["samples_per_s"] > 20 * by[("icebreaker", 115_200, 1)]["samples_per_s"]
    assert by[("icebreaker", 3_000_000, 1)]["wire_share"] < by[("icebreaker", 115_200, 1)]["wire_share"]


def test_bad_command_lines_are_refused(tmp_path, capsys):
    assert main(["bench", "deploy", "--parts", "boards", "--work", str(tmp_path)]) == 2
    assert "needs sim" in capsys.readouterr().err
    assert main(["bench", "deploy", "--models", "learn:t9", "--parts", "sim", "--work", str(tmp_path)]) == 2
    assert "learn:t9" in capsys.readouterr().err
    for bad in (["--clks-per-bit", "3"], ["--parts", "sim,fast"], ["--boards", "arty"]):
        with pytest.raises(SystemExit) as e:
            main(["bench", "deploy", *bad])
        assert e.value.code == 2


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A short real run on a tiny compiled model and the T1 learner: simulated board and computed boards."""
    tmp = tmp_path_factory.mktemp("bench-deploy")
    src = tmp / "tiny-ir"
    src.mkdir()
    ir.save(dense_graph(11), src)
    out = tmp / "bench.json"
    rc = main(["bench", "deploy", "--models", f"{src},learn:t1", "--reuse", "1", "--parts", "sim,boards", "--quick",
               "--samples", "150", "--cycle-requests", "6", "--work", str(tmp / "work"), "--json", str(out)])
    assert rc == 0
    return json.loads(out.read_text()), tmp


def test_tiny_run_measures_every_model_divider_and_batch(tiny_run):
    doc, tmp = tiny_run
    sim = doc["sim"]
    assert {(r["model"].split("/")[-1], r["clks_per_bit"], r["batch"] > 1) for r in sim} == {
        (m, c, big) for m in ("tiny-ir", "learn:t1") for c in (4, 8) for big in (False, True)}
    for r in sim:
        # every sample of the wall session and of the cycle session was compared with the golden model
        assert r["golden_checked"] == 150 + min(6, 150 // r["batch"]) * r["batch"]
        assert r["cycle_requests"] * r["batch"] == r["golden_checked"] - r["samples"]
        # the stated factor: the device needs the wire, the core and a little more, never less, within 10 %
        assert 1.0 < r["model_ratio"] < 1.10, r
        assert r["wrapper_cycles"] > 0
        assert r["sim_samples_per_s"] == pytest.approx(r["batch"] * r["sim_clock_hz"] / r["cycles_per_request"])
        assert r["host_samples_per_s"] > 0 and r["host_latency_ms_median"] > 0
        assert 0 < r["core_share"] < 1 - r["wire_share"]  # the rest is the wrapper's
    learner = next(m for m in doc["models"] if m["model"] == "learn:t1")
    assert learner["operation"] == "learn" and learner["max_batch"] == 488 // 5
    assert all(m["bundle"].endswith(".bfb") for m in doc["models"])  # Device.open(bundle) for both
    # the wrapper's cycles grow with the batch (it moves every byte through its buffers)
    fits = {(f["model"], f["batch"]): f for f in doc["wrapper_fits"]}
    assert fits[("learn:t1", 97)]["a"] > fits[("learn:t1", 1)]["a"]


def test_tiny_run_json_has_the_issues_rows_and_a_plot(tiny_run):
    doc, tmp = tiny_run
    assert doc["benchmark"] == "deploy" and doc["command"].startswith("bitforge bench deploy")
    assert doc["versions"]["verilator"] and doc["host"]["cpus"]
    boards = doc["boards"]
    assert {(r["board"], r["baud"]) for r in boards} == {
        (b, baud) for b in ("icebreaker", "ulx3s", "tangnano9k") for baud in (115_200, 3_000_000)}
    for r in boards:
        assert r["samples_per_s"] > 0 and r["latency_ms"] > 0 and 0 < r["wire_share"] <= 1
    png = tmp / "bench.png"
    assert doc["plot"] == str(png) and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_wrong_answer_fails_the_benchmark(tiny_run):
    """A benchmark that returns wrong numbers is worthless: one wrong golden code must stop it."""
    from bitforge.toolchain.bench.deploy import compiled_workload
    from bitforge.toolchain.bench.deploy_measure import run_session
    from bitforge.toolchain.errors import VerificationFailed

    _, tmp = tiny_run
    work = tmp / "work"
    folder = next(p for p in work.iterdir() if p.name.startswith("tiny-ir-r1") and p.is_dir())
    w = compiled_workload("tiny", folder, tmp, 20, 0, lambda m: None)
    w.golden = w.golden.copy()
    w.golden[13, 1] += 1
    with pytest.raises(VerificationFailed, match=r"1 of 20 infer results .* first sample 13"):
        run_session(w, 4, 5, 20)


@pytest.mark.slow
def test_the_deploy_benchmark_on_jet_mlp_and_the_t1_learner(tmp_path):
    """The real models, every part, place and route on the iCEBreaker only (--quick)."""
    out = tmp_path / "bench.json"
    assert main(["bench", "deploy", "--quick", "--work", str(tmp_path / "work"), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert {(r["model"], r["batch"]) for r in doc["sim"]} == {("jet-mlp", 1), ("jet-mlp", 15), ("learn:t1", 1),
                                                              ("learn:t1", 97)}
    assert all(1.0 < r["model_ratio"] < 1.10 for r in doc["sim"])
    assert len(doc["boards"]) == 2 * 3 * 2 * 2
    (wrapper,) = doc["wrapper"]
    assert wrapper["status"] == "ok" and wrapper["board"] == "icebreaker" and wrapper["timing_met"]
    assert wrapper["bram"] == 2 and 300 < wrapper["lut"] < 3000 and wrapper["dsp"] == 0  # two 512-byte buffers
    assert wrapper["fmax_mhz"] >= 12 and wrapper["clks_per_bit"] == 104
    (ratio,) = doc["weights_ratios"]
    assert ratio["target"] == "ice40-up5k" and ratio["lut_ram_vs_rom"] >= 1.0
    assert np.isfinite(ratio["fmax_mhz_ram_vs_rom"])
