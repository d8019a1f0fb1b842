"""The generated device (frame engine + core) against the wire protocol: cocotb on Icarus and Verilator.

Two designs: a tiny compiled Dense model and the T1 online learner (KAN [1, 1]). Each is driven through its
byte-level top (``<name>_protocol``, the UART's byte streams) on both simulators, and once through the UART pins
of ``<name>_device`` at CLKS_PER_BIT 4. The cocotb tests (``cocotb_device.py``) check hello against the manifest,
infer and infer_batch against the golden model, learn and read_state against the learner's golden trajectory,
one error frame per error code followed by a good answer, the kept answer for a repeated request, and a short
fuzz run (the long one is on the simulated board: tests/test_device_fuzz.py).
"""
from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from bitforge.runtime.protocol import ErrorCode, FrameType, RESPONSE_BIT
from bitforge.toolchain import ir
from bitforge.toolchain.backends.rtl.device import (
    DEFAULT_CLKS_PER_BIT, TIMEOUT_BIT_TIMES, DeviceSpec, device_for_learner, device_for_model, generate_device,
    write_device)
from bitforge.toolchain.backends.rtl.generate import generate, library_source
from bitforge.toolchain.fixed import parse_type
from bitforge.toolchain.passes.precision import infer_precision
from bitforge.toolchain.verify.simulate import golden_codes
from bitforge.toolchain.verify.simulators import run_cocotb
from rtl_bench import REPO, RTL, SIMULATORS

HERE = Path(__file__).resolve().parent
BUILD = REPO / "build" / "test_device"


def tiny_graph(seed: int = 1) -> ir.Graph:
    """Quantize -> Dense 4 -> 3 -> ReLU: 24-bit input words, 12-bit output words (odd byte counts)."""
    rng = np.random.default_rng(seed)
    dense = ir.Dense("d", ("xq",), ("y",), weight=rng.integers(-32, 32, (3, 4)), bias=rng.integers(-100, 100, 3),
                     weight_type=parse_type("fixed<6,1,RND_CONV,SAT>"), bias_type=parse_type("fixed<10,4,RND_CONV,SAT>"))
    g = ir.sequential("tiny", ir.TensorSpec("x", (4,), None), [
        (ir.Quantize("q", ("x",), ("xq",)), ir.TensorSpec("xq", (4,), parse_type("fixed<6,2,RND_CONV,SAT>"))),
        (dense, ir.TensorSpec("y", (3,), parse_type("fixed<5,2,RND_CONV,SAT>"))),
        (ir.ReLU("r", ("y",), ("z",)), ir.TensorSpec("z", (3,), parse_type("ufixed<4,2,RND_CONV,SAT>")))])
    g.metadata["input_range"] = [-2.0, 2.0]
    return ir.validate(infer_precision(g))


def t1_learner():
    from bitforge.models.online_learners import reference_spec
    from bitforge.toolchain.learn.spec import LearnerFormats, build_learner
    spec = reference_spec("t1", "kan", formats=LearnerFormats.make("fixed<16,6>", guard_bits=8))
    return build_learner(spec, name="t1-kan")


def _write_sources(folder: Path, files: dict, library) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in sorted(files.items()):
        (folder / name).write_text(text)
    for name in library:
        (folder / name).write_text(library_source(name))


@pytest.fixture(scope="module")
def model_design(tmp_path_factory):
    """A compiled model's output folder: rtl/ with the device, the device manifest, golden vectors."""
    out = tmp_path_factory.mktemp("tiny")
    g = tiny_graph()
    design = generate(g)
    _write_sources(out / "rtl", design.files, design.library)
    man = design.manifest()
    device = write_device(out / "rtl", device_for_model(g, man))
    xs, ys = golden_codes(g, man, 400, seed=3)
    np.savez(out / "vectors.npz", inputs=xs, expected=ys)
    return {"kind": "model", "out": out, "device": device, "vectors": str(out / "vectors.npz")}


@pytest.fixture(scope="module")
def ram_design(tmp_path_factory):
    """The tiny model built with --weights ram, and model B (same architecture, other weights) to load."""
    from bitforge.toolchain.backends.rtl.generate import RtlOptions
    from bitforge.toolchain.backends.rtl.weights_layout import Layout, pack_weight_words
    from bitforge.toolchain.identity import model_id
    out = tmp_path_factory.mktemp("tiny-ram")
    g, b = tiny_graph(), tiny_graph(seed=2)
    design = generate(g, RtlOptions(weights="ram"))
    _write_sources(out / "rtl", design.files, design.library)
    man = design.manifest()
    device = write_device(out / "rtl", device_for_model(g, man))
    xs, ys = golden_codes(g, man, 400, seed=3)
    np.savez(out / "vectors.npz", inputs=xs, expected=ys)
    xb, yb = golden_codes(b, man, 100, seed=4)
    np.savez(out / "vectors_b.npz", inputs=xb, expected=yb)
    reload = {"words": [int(w) for w in pack_weight_words(b, Layout.from_json(man["weights"]))],
              "model_id": model_id(b)[:32], "vectors": str(out / "vectors_b.npz")}
    return {"kind": "model", "out": out, "device": device, "vectors": str(out / "vectors.npz"), "reload": reload}


@pytest.fixture(scope="module")
def learner_design(tmp_path_factory):
    from bitforge.toolchain.learn.spec import save_learner
    from bitforge.toolchain.verify.simulate_learner import generate_learner, write_sources
    out = tmp_path_factory.mktemp("t1")
    learner = t1_learner()
    design = generate_learner(learner)
    write_sources(design, out / "rtl")
    save_learner(learner, out / "learner")
    device = write_device(out / "rtl", device_for_learner(learner, design))
    return {"kind": "learner", "out": out, "device": device, "learner": str(out / "learner")}


def run_bench(design: dict, simulator: str, mode: str = "bytes", **cfg) -> dict[str, tuple[str, str]]:
    """Runs cocotb_device.py on the design; returns test name -> (outcome, message)."""
    dev = design["device"]
    top = dev["top"] if mode == "pins" else dev["protocol_top"]
    tag = "-".join([design["kind"] + ("-ram" if "reload" in design else ""), simulator, mode] + [f"{k}{v}" for k, v in sorted(cfg.items())])
    work = BUILD / tag
    work.mkdir(parents=True, exist_ok=True)
    config = {"kind": design["kind"], "device": dev, "mode": mode, "clks_per_bit": DEFAULT_CLKS_PER_BIT,
              "timeout_clks": TIMEOUT_BIT_TIMES * DEFAULT_CLKS_PER_BIT, "infer_vectors": 40, "fuzz_frames": 0,
              "probe_every": 50, "vectors": design.get("vectors"), "learner": design.get("learner"), **cfg}
    if "reload" in design:
        config["reload"] = design["reload"]
    (work / "bench.json").write_text(json.dumps(config))
    sources = [design["out"] / f for f in dev["files"]]
    outcome = run_cocotb(simulator, sources, top, "cocotb_device", HERE, work / "build",
                         extra_env={"BITFORGE_DEVICE_BENCH": str(work / "bench.json")})
    results = {}
    for case in ET.parse(outcome.results_xml).getroot().iter("testcase"):
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        if case.find("skipped") is not None:
            results[case.get("name")] = ("skipped", "")
        elif bad is not None:
            results[case.get("name")] = ("failed", (bad.get("message") or "") + (bad.text or ""))
        else:
            results[case.get("name")] = ("passed", "")
    return results


def assert_passed(results: dict, name: str) -> None:
    assert name in results, f"cocotb test {name} did not run: {sorted(results)}"
    outcome, message = results[name]
    assert outcome == "passed", f"{name}: {outcome}: {message}"


MODEL_TESTS = ["hello_answers_the_manifest", "infer_matches_the_golden_model", "infer_batch_matches_the_golden_model",
               "every_bad_frame_gets_one_error_then_the_device_answers", "a_repeated_request_is_answered_from_the_kept_copy",
               "fuzzed_frames_never_hang_the_device"]
LEARNER_TESTS = MODEL_TESTS[:5] + ["learn_follows_the_golden_trajectory_and_read_state_its_state"]


@pytest.fixture(scope="module", params=SIMULATORS)
def model_results(request, model_design):
    return run_bench(model_design, request.param, fuzz_frames=300)


@pytest.fixture(scope="module", params=SIMULATORS)
def learner_results(request, learner_design):
    return run_bench(learner_design, request.param)


@pytest.mark.parametrize("name", MODEL_TESTS)
def test_compiled_model_device(model_results, name):
    assert_passed(model_results, name)


@pytest.mark.parametrize("name", LEARNER_TESTS)
def test_learner_device(learner_results, name):
    assert_passed(learner_results, name)


@pytest.mark.parametrize("simulator", SIMULATORS)
def test_weights_ram_device_loads_another_model(ram_design, simulator):
    results = run_bench(ram_design, simulator, infer_vectors=5)
    for name in ("write_and_commit_weights_load_another_model", "hello_answers_the_manifest",
                 "every_bad_frame_gets_one_error_then_the_device_answers"):
        assert_passed(results, name)


@pytest.mark.parametrize("kind", ["model", "learner"])
def test_device_through_the_uart_pins(kind, model_design, learner_design):
    design = model_design if kind == "model" else learner_design
    results = run_bench(design, "icarus", "pins", infer_vectors=4)
    for name in ("hello_answers_the_manifest", "infer_matches_the_golden_model",
                 "a_repeated_request_is_answered_from_the_kept_copy"):
        assert_passed(results, name)


# -- the generator ----------------------------------------------------------------------------------------------

def test_engine_defaults_are_the_protocol_constants():
    """bf_frame_engine's parameter defaults (used when it is instantiated by hand) equal runtime/protocol.py's."""
    text = (RTL / "bf_frame_engine.v").read_text()
    found = dict(re.findall(r"parameter \[7:0\] ([TE]_\w+|RESPONSE_BIT) = 8'[hd](\w+)", text))
    want = {f"T_{t.name}": t.value for t in FrameType} | {f"E_{e.name}": e.value for e in ErrorCode}
    want["RESPONSE_BIT"] = RESPONSE_BIT
    base = {k: 16 if k.startswith("T_") or k == "RESPONSE_BIT" else 10 for k in want}
    assert {k: int(v, base[k]) for k, v in found.items()} == want


def test_device_text_is_deterministic(model_design):
    g = tiny_graph()
    man = generate(g).manifest()
    a, b = generate_device(device_for_model(g, man)), generate_device(device_for_model(g, man))
    assert a.files == b.files and a.manifest == b.manifest
    assert a.manifest == model_design["device"]


def test_device_manifest_lists_every_file_and_the_hello(model_design):
    dev = model_design["device"]
    assert dev["top"] == "tiny_device" and dev["protocol_version"] == 1
    assert all((model_design["out"] / f).is_file() for f in dev["files"])
    assert {"rtl/tiny_board.v", "rtl/tiny_device.v", "rtl/bf_frame_engine.v", "rtl/bf_uart_rx.v"} <= set(dev["files"])
    h = dev["hello"]
    assert (h["in_bits"], h["out_bits"], h["in_count"], h["out_count"]) == (24, 12, 4, 3)
    assert (dev["in_bytes"], dev["out_bytes"], dev["max_payload"]) == (3, 2, 488)
    assert h["capabilities"] == 1 and h["state_words"] == 0 and h["weight_words"] == 0


# -- resources --------------------------------------------------------------------------------------------------

ECHO_BOARD = """`default_nettype none
module echo_board (input wire clk, input wire rst, input wire s_tvalid, output wire s_tready, input wire [7:0] s_tdata,
                   input wire s_tlast, output wire m_tvalid, input wire m_tready, output wire [7:0] m_tdata,
                   output wire m_tlast);
    assign m_tvalid = s_tvalid;
    assign s_tready = m_tready;
    assign m_tdata = s_tdata;
    assign m_tlast = s_tlast;
endmodule
`default_nettype wire
"""


def wrapper_resources(target_name: str) -> dict:
    """The device wrapper alone (UART, frame engine, 512-byte buffers) around a pass-through 'core', synthesised
    for ``target_name`` as the flows do: the target's units (LUT, FF, BRAM, DSP)."""
    import subprocess
    from bitforge.toolchain.fixed import FixedType
    from bitforge.toolchain.flows.targets import get_target
    from bitforge.toolchain.flows.tools import get_tool
    from bitforge.toolchain.flows.yosys import read_cell_census

    work = BUILD / f"yosys-{target_name}"  # YoWASP cannot see /tmp: relative paths in the repository's build folder
    work.mkdir(parents=True, exist_ok=True)
    t8 = FixedType(8, 0, True)
    spec = DeviceSpec("echo", "echo_board", ("rtl/echo_board.v",), 8, 8, 1, t8, 1, t8, 0, 1, "00" * 32, "11" * 32)
    (work / "rtl").mkdir(exist_ok=True)
    (work / "rtl" / "echo_board.v").write_text(ECHO_BOARD)
    dev = write_device(work / "rtl", spec)
    target = get_target(target_name)
    files = " ".join(dev["files"])
    (work / "synth.ys").write_text(f"read_verilog {files}\n{target.synth} -top echo_device\ntee -q -o stat.json stat -json\n")
    r = subprocess.run(get_tool("yosys").argv(["-q", "-l", "synth.log", "-s", "synth.ys"]), cwd=work,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"yosys failed: {work / 'synth.log'}"
    return target.count_cells(read_cell_census(work / "stat.json"))


@pytest.mark.slow
@pytest.mark.parametrize("target", ["ice40-up5k", "ecp5-25f"])
def test_wrapper_buffers_are_block_ram_and_the_logic_is_small(target):
    used = wrapper_resources(target)
    assert used["bram"] == 2, used  # the RX and TX buffers, one block RAM each
    assert used["lut"] < 2000 and used["ff"] < 700 and used.get("dsp", 0) == 0, used
