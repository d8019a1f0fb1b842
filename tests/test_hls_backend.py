"""``compile --to hls``: hls4ml's C simulation of the written project equals the golden model bit for bit.

Each C simulation is a real g++ build of hls4ml's firmware (5-10 s on 2 cores), so the fast run keeps one model per
kind of layer (the quantized jet MLP on 10,000 vectors as the issue asks, a low-rank MLP, a 2-D CNN); the other
hls4ml settings (1-D convolution, io_stream, Resource with reuse, the Vivado backend) run in the slow step.
Refusals need no build and all run in the fast one.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from bitforge.models.lowrank import LowRankLinear
from bitforge.models.quant import QuantLinear
from bitforge.toolchain import ir
from bitforge.toolchain.errors import BitforgeError
from bitforge.toolchain.backends.hls.convert import HlsError, HlsOptions, to_layer_list
from bitforge.toolchain.compiler import CompileError, CompileOptions, LoadedModel, compile_model, prepare
from bitforge.toolchain.fixed import parse_type
from bitforge.toolchain.frontends.torch_frontend import from_torch
from bitforge.toolchain.verify.hls_csim import write_and_check_hls


def _graph(module: torch.nn.Module, example: torch.Tensor, precision: str = "8", lo: float = -2.0, hi: float = 2.0,
           name: str = "m") -> ir.Graph:
    torch.manual_seed(0)
    g = from_torch(module.eval(), example, name=name)
    g.metadata["input_range"] = [lo, hi]
    return prepare(LoadedModel(g, {}), precision)[0]


def _check(g: ir.Graph, tmp_path: Path, options: HlsOptions = HlsOptions(), vectors: int = 2000) -> dict:
    entry, _ = write_and_check_hls(g, tmp_path, options, vectors, seed=1)
    r = entry["golden_vs_hls_csim"]
    assert r["vectors"] == vectors and r["exact"]
    assert r["mismatches"] == 0, r.get("first_mismatch")
    return entry


def _cnn(dim: int) -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    if dim == 2:
        return torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                   torch.nn.Conv2d(4, 3, 3), torch.nn.Flatten(), torch.nn.Linear(12, 5)), \
            torch.randn(4, 2, 8, 8)
    return torch.nn.Sequential(torch.nn.Conv1d(2, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool1d(2),
                               torch.nn.Conv1d(4, 3, 3, stride=2), torch.nn.Flatten(), torch.nn.Linear(9, 5)), \
        torch.randn(4, 2, 16)


# -- bit-exact C simulation ---------------------------------------------------------------------------------------

def test_quantized_mlp_csim_equals_golden_on_10000_vectors(tmp_path):
    """jet-mlp is a QAT model with its own 8-bit weights and 16-bit activations: its types go to hls4ml as they
    are, and the C simulation of the written project agrees with the golden model on every one of 10,000 vectors."""
    out = tmp_path / "jet"
    report = compile_model("jet-mlp", out, CompileOptions(to=("hls",), vectors=10_000))
    v = report["verification"]["golden_vs_hls_csim"]
    assert (v["vectors"], v["mismatches"], v["exact"]) == (10_000, 0, True)
    assert report["hls"]["vendor_tools_run"] is False
    assert json.loads((out / "report.json").read_text())["verification"]["golden_vs_hls_csim"]["mismatches"] == 0
    # Every layer's types are the IR's, written per layer into the project hls4ml reads back.
    g = ir.load(out)
    text = (out / "hls" / "hls4ml_config.yml").read_text()
    for n in g.nodes:
        if isinstance(n, ir.Dense):
            for t in (n.weight_type, n.bias_type, n.accum_type, g.tensors[n.output].dtype):
                assert t.to_ap() in text
    readme = (out / "hls" / "README.md").read_text()
    assert "was not run by bitforge" in readme and "build_prj.tcl" in readme and "csynth.rpt" in readme
    assert (out / "hls" / "tb_data" / "tb_input_features.dat").is_file()


def test_float_mlp_at_hls4ml_default_type_is_bit_exact_in_onnx_and_csim(tmp_path):
    """``--precision 'ap_fixed<16,6>'``: hls4ml's default for every weight, bias, activation and accumulator. Each
    accumulator has 10 fractional bits while the products have 20, so every product is truncated before it is
    summed (hls4ml's arithmetic, the IR's accumulation rule); ONNX Runtime and the C simulation both agree."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.ReLU(), torch.nn.Linear(24, 5))
    g = _graph(m, torch.randn(4, 16), "ap_fixed<16,6>", -4.0, 4.0)
    dense = [n for n in g.nodes if isinstance(n, ir.Dense)]
    assert all(n.accum_type == parse_type("ap_fixed<16,6>") for n in dense)
    assert all(n.accum_type.frac < g.tensors[n.input].dtype.frac + n.weight_type.frac for n in dense)
    _check(g, tmp_path, vectors=10_000)
    from bitforge.toolchain.backends.onnx_backend import run_onnxruntime, to_onnx
    from bitforge.toolchain.verify.compare import compare_outputs
    from bitforge.toolchain.verify.vectors import make_vectors
    vectors = make_vectors(g, 10_000, 1)
    assert compare_outputs(g, vectors, run_onnxruntime(to_onnx(g), vectors), "onnxruntime").mismatches == 0


def test_kan_layer_through_the_extension_api(tmp_path):
    """kan-tracker: a KAN layer as bitforge's hls4ml extension layer (its C++ in the package's hls/ folder)."""
    out = tmp_path / "kt"
    report = compile_model("kan-tracker", out, CompileOptions(to=("hls",), vectors=10_000))
    assert report["verification"]["golden_vs_hls_csim"]["mismatches"] == 0
    assert report["hls"]["layers"]["kan_1"] == ["kan_1"]
    assert "bitforge_kan.h" in (out / "hls" / "firmware" / "bitforge_model.cpp").read_text() + "".join(
        p.read_text() for p in (out / "hls" / "firmware").glob("*.h"))


@pytest.mark.slow
def test_digits_cnn_with_softmax_head(tmp_path):
    """The digits CNN at 8 bits: BatchNorm folded, native Conv2D and max pooling, the softmax an extension layer."""
    report = compile_model("digits-cnn", tmp_path / "cnn", CompileOptions(to=("hls",), precision="8", vectors=3000))
    assert report["verification"]["golden_vs_hls_csim"]["mismatches"] == 0


def test_lowrank_mlp_is_two_dense_layers_and_bit_exact(tmp_path):
    torch.manual_seed(0)
    m = torch.nn.Sequential(LowRankLinear(12, 16, rank=3), torch.nn.ReLU(), QuantLinear(16, 4))
    g = _graph(m, torch.randn(4, 12), "w6a10")
    conv = to_layer_list(g)
    lr = next(n for n in g.nodes if isinstance(n, ir.LowRankDense))
    assert conv.layer_names[lr.name] == [f"{lr.name}_v", lr.name]
    assert conv.layer_config[f"{lr.name}_v"]["Precision"]["result"] == lr.mid_type.to_ap()
    _check(g, tmp_path)


def test_cnn_2d_with_padding_pool_and_flatten_is_bit_exact(tmp_path):
    """hls4ml's convolution kernels are channels last; the converter transposes in and out, so the model reads
    and writes the IR's channels-first order and the golden vectors feed it unchanged."""
    m, x = _cnn(2)
    g = _graph(m, x)
    conv = to_layer_list(g)
    assert [layer["class_name"] for layer in conv.layers if layer["class_name"] == "Transpose"] == ["Transpose"] * 2
    _check(g, tmp_path)


@pytest.mark.slow
def test_cnn_1d_with_stride_is_bit_exact(tmp_path):
    m, x = _cnn(1)
    _check(_graph(m, x), tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("options", [HlsOptions(io="stream"), HlsOptions(strategy="resource", reuse=4),
                                     HlsOptions(backend="vivado")], ids=["io_stream", "resource-reuse4", "vivado"])
def test_hls4ml_settings_keep_the_bits(tmp_path, options):
    m = torch.nn.Sequential(QuantLinear(10, 16), torch.nn.ReLU(), QuantLinear(16, 8), torch.nn.ReLU(),
                            QuantLinear(8, 3))
    entry = _check(_graph(m, torch.randn(4, 10), "w6a12"), tmp_path, options)
    assert (entry["backend"], entry["io"], entry["strategy"]) == (options.backend, options.io, options.strategy)


@pytest.mark.slow
def test_written_project_is_reproducible(tmp_path):
    """Same model and options, same bytes: no temporary path and no random stamp in the project."""
    outs = []
    for i in range(2):
        out = tmp_path / f"r{i}"
        compile_model("jet-mlp", out, CompileOptions(to=("hls",), vectors=300))
        outs.append(out)
    files = sorted(p.relative_to(outs[0]) for p in outs[0].rglob("*") if p.is_file() and p.name != "run.json")
    assert files == sorted(p.relative_to(outs[1]) for p in outs[1].rglob("*") if p.is_file() and p.name != "run.json")
    for f in files:
        assert (outs[0] / f).read_bytes() == (outs[1] / f).read_bytes(), f
    assert "bitforge-hls-" not in (outs[0] / "hls" / "hls4ml_config.yml").read_text()


# -- refusals (no build) ------------------------------------------------------------------------------------------

def test_float_graph_is_refused_with_the_way_out():
    torch.manual_seed(0)
    g = from_torch(torch.nn.Sequential(torch.nn.Linear(4, 2)).eval(), torch.randn(2, 4), name="f")
    with pytest.raises(HlsError, match="--precision SPEC or --hls-config"):
        to_layer_list(g)


def test_io_stream_refuses_a_convolution_naming_it():
    m, x = _cnn(2)
    g = _graph(m, x)
    with pytest.raises(HlsError, match=r"Conv 'conv_0'.*--io parallel"):
        to_layer_list(g, HlsOptions(io="stream"))


def test_grouped_convolution_is_refused():
    torch.manual_seed(0)
    g = _graph(torch.nn.Sequential(torch.nn.Conv1d(4, 4, 3, groups=2), torch.nn.Flatten(), torch.nn.Linear(8, 2)),
               torch.randn(2, 4, 4))
    with pytest.raises(HlsError, match=r"Conv '.*': hls4ml's Conv1D/Conv2D have no groups"):
        to_layer_list(g)


def test_padded_max_pool_is_refused():
    torch.manual_seed(0)
    g = _graph(torch.nn.Sequential(torch.nn.MaxPool1d(2, padding=1), torch.nn.Flatten()), torch.randn(2, 2, 6))
    with pytest.raises(HlsError, match=r"Pool '.*': hls4ml's max pooling pads with zeros"):
        to_layer_list(g)


def test_resource_strategy_refuses_a_saturating_accumulator_it_would_sum_in_another_order():
    """hls4ml's Resource strategy sums a layer's products strided by the reuse factor; with a saturating accumulator
    that can clip a partial sum, that order changes the bits, so the converter refuses it (and accepts the same
    layer under Latency, where hls4ml sums in input order as the IR does)."""
    m = torch.nn.Sequential(torch.nn.Linear(16, 4))
    g = _graph(m, torch.randn(2, 16), "ap_fixed<10,3,AP_RND,AP_SAT>", -4.0, 4.0)
    with pytest.raises(HlsError, match=r"Dense '.*': the Resource strategy with reuse 4 .* saturates partial sums"):
        to_layer_list(g, HlsOptions(strategy="resource", reuse=4))
    to_layer_list(g, HlsOptions(strategy="latency", reuse=4))
    to_layer_list(g, HlsOptions(strategy="resource", reuse=1))


def test_bad_hls_options_are_named():
    with pytest.raises(HlsError, match="--io must be one of parallel, stream"):
        HlsOptions(io="axi")
    with pytest.raises(HlsError, match="--reuse for the HLS backend must be a positive integer"):
        HlsOptions(reuse=0)


def test_hls_options_without_the_hls_backend_are_refused():
    with pytest.raises(CompileError, match="only apply to the HLS backend; add --to hls"):
        CompileOptions(to=("onnx",), hls=HlsOptions(io="stream"))
    with pytest.raises(CompileError, match="--hls-config and --precision both set"):
        CompileOptions(to=("hls",), precision="8", hls_config="c.yml")


def test_missing_gxx_is_a_clear_error(tmp_path, monkeypatch):
    g = _graph(torch.nn.Sequential(QuantLinear(4, 2)), torch.randn(2, 4))
    monkeypatch.setenv("PATH", str(tmp_path))  # no g++ on it
    with pytest.raises(BitforgeError, match=r"g\+\+.* not found on PATH.*apt-get install -y g\+\+"):
        write_and_check_hls(g, tmp_path, HlsOptions(), 10, 0)
    assert not any((tmp_path / "hls").glob("*.so"))


def test_every_type_is_explicit_per_layer():
    """No layer is left to hls4ml's default or 'auto' type: the config carries each IR type by layer name."""
    m = torch.nn.Sequential(QuantLinear(6, 5), torch.nn.ReLU(), QuantLinear(5, 2))
    g = _graph(m, torch.randn(2, 6), "w5a9")
    conv = to_layer_list(g)
    for n in g.nodes[1:]:
        entry = conv.layer_config[n.name]["Precision"]
        assert parse_type(entry["result"]) == g.tensors[n.output].dtype
        if isinstance(n, ir.Dense):
            assert (parse_type(entry["weight"]), parse_type(entry["accum"])) == (n.weight_type, n.accum_type)
    assert "auto" not in json.dumps(conv.layer_config)
    assert os.environ.get("PATH")  # the environment is untouched here
