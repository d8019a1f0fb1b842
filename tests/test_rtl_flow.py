"""RTL backend end to end: generated designs stream golden vectors bit-exactly on Icarus and Verilator, the
Verilog is deterministic, and each kind of bad input gives one clear message."""
from __future__ import annotations

import json
import re

import pytest
import torch
from torch import nn

from bitforge.toolchain.backends.rtl.generate import RtlError, RtlOptions, generate
from bitforge.toolchain.cli import main
from bitforge.toolchain.compiler import CompileOptions, compile_model
from bitforge.toolchain.errors import BitforgeError
from bitforge.toolchain.verify.simulate import simulate
from bitforge.toolchain.verify.simulators import SimulationFailed, SimulatorMissing


@pytest.fixture(scope="module")
def small_mlp(tmp_path_factory):
    """A 6-5-3 float MLP exported with torch.export: quantized by --precision, small enough to simulate fast."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3)).eval()
    path = tmp_path_factory.mktemp("mlp") / "mlp.pt2"
    torch.export.save(torch.export.export(model, (torch.randn(4, 6),)), str(path))
    return path


def _compile(model, out, **kw):
    opts = dict(to=("onnx", "rtl"), vectors=500)
    opts.update(kw)
    compile_model(str(model), out, CompileOptions(**opts))
    return json.loads((out / "report.json").read_text())


@pytest.mark.parametrize("reuse", [1, 4])
def test_small_mlp_is_bit_exact_on_both_simulators(small_mlp, tmp_path, reuse):
    out = tmp_path / "out"
    report = _compile(small_mlp, out, precision="8", input_range=(-2.0, 2.0), reuse=reuse)
    assert report["rtl"]["ii"] == reuse and report["rtl"]["latency_cycles"] > 0
    results = simulate(out, "both", vectors=300)
    for sim in ("icarus", "verilator"):
        assert (results[sim]["vectors"], results[sim]["mismatches"], results[sim]["tlast_errors"]) == (300, 0, 0)
    section = json.loads((out / "report.json").read_text())["verification"]["golden_vs_rtl"]
    assert set(section) == {"icarus", "verilator"}
    assert "golden_vs_rtl" in (out / "report.md").read_text() or "RTL, icarus" in (out / "report.md").read_text()


def test_kan_tracker_is_bit_exact_on_both_simulators(tmp_path):
    out = tmp_path / "kt"
    report = _compile("kan-tracker", out)
    assert report["rtl"]["ii"] == 1
    results = simulate(out, "both", vectors=1000)
    assert all(r["mismatches"] == 0 and r["vectors"] == 1000 for r in results.values())


def test_generated_verilog_is_deterministic(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _compile("kan-tracker", a)
    _compile("kan-tracker", b)
    names = sorted(p.name for p in (a / "rtl").iterdir())
    assert names == sorted(p.name for p in (b / "rtl").iterdir())
    for n in names:
        assert (a / "rtl" / n).read_bytes() == (b / "rtl" / n).read_bytes(), n


def test_rtl_mismatch_reports_first_vector_in_hex_and_real(tmp_path, capsys):
    out = tmp_path / "kt"
    _compile("kan-tracker", out)
    layer = next((out / "rtl").glob("kan_tracker_u0_*.v"))
    text = layer.read_text()
    broken = re.sub(r"\.COEFFS\((\d+)'h([0-9a-f])", lambda m: f".COEFFS({m.group(1)}'h{'1' if m.group(2) != '1' else '2'}",
                    text, count=1)
    assert broken != text
    layer.write_text(broken)
    with pytest.raises(SimulationFailed) as e:
        simulate(out, "icarus", vectors=300)
    msg = str(e.value)
    assert "first at vector" in msg and '"hex"' in msg and '"real"' in msg
    section = json.loads((out / "report.json").read_text())["verification"]["golden_vs_rtl"]["icarus"]
    assert section["mismatches"] > 0 and "expected" in section["first_mismatch"]
    code = main(["simulate", str(out), "--simulator", "icarus", "--vectors", "100"])
    assert code == 1


def test_missing_simulator_is_a_clear_error(tmp_path, monkeypatch):
    out = tmp_path / "kt"
    _compile("kan-tracker", out)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(SimulatorMissing, match="apt-get install -y iverilog"):
        simulate(out, "icarus", vectors=10)


def test_simulate_without_rtl_says_how_to_make_it(tmp_path):
    out = tmp_path / "onnx-only"
    compile_model("kan-tracker", out, CompileOptions(vectors=100))
    with pytest.raises(BitforgeError, match="--to rtl"):
        simulate(out, "icarus")


def test_float_graph_has_no_rtl_form(small_mlp, tmp_path):
    from bitforge.toolchain.compiler import load_model
    g = load_model(str(small_mlp)).graph
    with pytest.raises(RtlError, match="float.*--precision"):
        generate(g, RtlOptions())


def test_unknown_target_lists_targets(tmp_path, capsys):
    code = main(["flow", "kan-tracker", "--target", "ice41-up5k", "-o", str(tmp_path / "x"), "--simulator", "none",
                 "--vectors", "100"])
    text = " ".join(capsys.readouterr().err.split())
    assert code == 2 and "ice41-up5k" in text and "ecp5-85f" in text


def test_reuse_auto_needs_a_target():
    with pytest.raises(RtlError, match="needs a --target"):
        RtlOptions(reuse="auto")


@pytest.mark.slow
def test_flow_kan_tracker_ice40_bitstream_is_reproducible(tmp_path, capsys):
    """The issue's acceptance: kan-tracker on an UP5K, both simulators, a real bitstream, the same hash twice."""
    hashes = []
    for run in ("a", "b"):
        out = tmp_path / run
        assert main(["flow", "kan-tracker", "--target", "ice40-up5k", "-o", str(out), "--sim-vectors", "500"]) == 0
        report = json.loads((out / "report.json").read_text())
        t = report["targets"]["ice40-up5k"]
        assert t["status"] == "ok" and (out / t["bitstream"]).stat().st_size > 0
        assert t["ii"] == 1 and t["latency_cycles"] == report["rtl"]["latency_cycles"] and t["fmax_mhz"] > 0
        assert all(v["mismatches"] == 0 for v in report["verification"]["golden_vs_rtl"].values())
        hashes.append(t["sha256"])
    assert hashes[0] == hashes[1]


@pytest.mark.slow
def test_flow_jet_mlp_ecp5_with_reuse_auto(tmp_path):
    """The issue's other acceptance (the README's demo): jet-mlp, reuse chosen for an ECP5-85F, both simulators
    bit-exact, a real bitstream, and the hardware that reuse auto said it would build."""
    out = tmp_path / "jet"
    assert main(["flow", "jet-mlp", "--target", "ecp5-85f", "--reuse", "auto", "-o", str(out),
                 "--sim-vectors", "300"]) == 0
    report = json.loads((out / "report.json").read_text())
    t = report["targets"]["ecp5-85f"]
    assert t["status"] == "ok" and (out / t["bitstream"]).stat().st_size > 0 and t["fmax_mhz"] > 0
    assert all(v["mismatches"] == 0 and v["vectors"] >= 300 for v in report["verification"]["golden_vs_rtl"].values())
    layers = report["rtl"]["layers"]
    assert t["ii"] == max(x["ii"] for x in layers) > 1  # folded: the chosen reuse is the II
    assert t["dsp"] == sum(x["resources"]["multipliers"] for x in layers) <= 156 // 2  # one MULT18X18D each


@pytest.mark.slow
@pytest.mark.parametrize("target", ["ecp5-25f", "gowin-gw1nr9"])
def test_generated_kan_reaches_a_bitstream_on_the_other_parts(tmp_path, target):
    """The generated design (not only the hand-written MAC of test_flows) goes through every bitstream flow."""
    out = tmp_path / "kt"
    _compile("kan-tracker", out)
    from bitforge.toolchain.flows.implement import implement
    r = implement(out, target)
    assert r["status"] == "ok" and (out / r["bitstream"]).stat().st_size > 0 and r["fmax_mhz"] > 0
    assert r["ii"] == 1 and r["latency_cycles"] == json.loads((out / "report.json").read_text())["rtl"]["latency_cycles"]
    assert r["dsp"] >= 1 and r["lut"] > 0


@pytest.mark.slow
def test_timing_failure_is_reported_not_hidden(tmp_path):
    out = tmp_path / "kt"
    _compile("kan-tracker", out)
    from bitforge.toolchain.flows.implement import implement
    with pytest.warns(UserWarning):
        result = implement(out, "ice40-up5k", clock_mhz=400.0)
    assert result["timing_met"] is False and result["fmax_mhz"] < 400


def test_relu_after_dense_is_fused_into_its_stage(small_mlp, tmp_path):
    """Dense -> ReLU becomes one stage: no bf_relu instance, no skid buffer of its own, one cycle less."""
    from bitforge.toolchain.compiler import load_model, prepare
    g, _ = prepare(load_model(str(small_mlp), 0), "8", input_range=(-2.0, 2.0))
    fused, plain = generate(g, RtlOptions()), generate(g, RtlOptions(fuse_relu=False))
    assert [x.op for x in fused.layers] == ["Dense+ReLU", "Dense"]
    assert fused.layers[0].fused == [g.nodes[2].name] and g.nodes[2].OP == "ReLU"
    assert [x.op for x in plain.layers] == ["Dense", "ReLU", "Dense"]
    core = fused.files[f"{fused.top}.v"]
    assert "bf_relu " not in core and ".ACT(1)" in core
    assert fused.latency_cycles == plain.latency_cycles - 2  # the ReLU's register and its skid buffer
