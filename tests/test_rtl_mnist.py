"""An MNIST-sized MLP (784-64-10) through ``compile --to rtl``: the scale the shared adder-graph form must handle.

Generation used to grow faster than the weights (208 s of CPU for this model); it now takes a few seconds (the
measured times and the command are in docs/rtl.md). The default test checks that the design is generated with
the structure its report claims; the slow one streams vectors through it on Icarus, bit-exact against the
golden model. No test asserts a time: a busy runner would make it flaky, and the structure is the contract.
"""
from __future__ import annotations

import json
import re

import pytest
import torch
from torch import nn

from bitforge.toolchain.compiler import CompileOptions, compile_model
from bitforge.toolchain.verify.simulate import simulate

SIZES = (784, 64, 10)


@pytest.fixture(scope="module")
def mnist(tmp_path_factory):
    """The compiled 784-64-10 MLP (8-bit, inputs in [0, 1] as MNIST pixels are) and its progress messages."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(SIZES[0], SIZES[1]), nn.ReLU(), nn.Linear(SIZES[1], SIZES[2])).eval()
    root = tmp_path_factory.mktemp("mnist")
    path = root / "mnist.pt2"
    torch.export.save(torch.export.export(model, (torch.rand(4, SIZES[0]),)), str(path))
    messages: list[str] = []
    out = root / "out"
    compile_model(str(path), out, CompileOptions(to=("rtl",), precision="8", input_range=(0.0, 1.0)),
                  progress=messages.append)
    return out, messages


def _blocks(text: str) -> list[str]:
    """The generate blocks of the shared dense stages, in order."""
    starts = [m.start() for m in re.finditer(r"^    if \(1\) begin : ", text, re.M)]
    return [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)])]


def test_mnist_mlp_compiles_to_shared_adder_graphs(mnist):
    out, _ = mnist
    report = json.loads((out / "report.json").read_text())["rtl"]
    layers = report["layers"]
    assert [(x["op"], x["reuse"], x["ii"]) for x in layers] == [("Dense+ReLU", 1, 1), ("Dense", 1, 1)]
    assert report["ii"] == 1
    # Each stage's latency plus one skid buffer per stage (both have II 1).
    assert report["latency_cycles"] == sum(x["latency"] for x in layers) + len(layers)
    text = (out / "rtl" / f"{report['core_top']}.v").read_text()
    blocks = _blocks(text)
    assert len(blocks) == 2
    for (n_in, n_out), layer, block in zip(zip(SIZES, SIZES[1:]), layers, blocks):
        res = layer["resources"]
        assert res["multipliers"] == 0  # shift-add only
        assert res["nonzero_weights"] + res["zero_weights_skipped"] == n_in * n_out
        # Sharing: fewer adders than one per signed digit (what a digit-by-digit multiplier would spend).
        assert 0 < res["adders"] < res["signed_digits"]
        adders = len(re.findall(r"^\s*\(\* keep \*\) wire ", block, re.M))
        negated = len(re.findall(r"^\s*wire \[\d+:0\] sum\d+ = \d+'d0 - ", block, re.M))
        assert adders + negated == res["adders"]  # every counted adder is in the Verilog, and no other
        sums = [int(i) for i in re.findall(r"^\s*wire \[\d+:0\] sum(\d+) = ", block, re.M)]
        assert sums == list(range(n_out))  # one sum, requantizer and output per neuron
        inputs = [int(i) for i in re.findall(r"^\s*wire \[\d+:0\] x(\d+) = ", block, re.M)]
        assert inputs == sorted(inputs) and set(inputs) <= set(range(n_in)) and len(inputs) > n_in // 2
    manifest = json.loads((out / "rtl" / "manifest.json").read_text())
    assert manifest["in_width"] == SIZES[0] * 8 and manifest["out_width"] == SIZES[-1] * 8


def test_mnist_generation_reports_progress_per_layer(mnist):
    _, messages = mnist
    layers = [m for m in messages if m.startswith("Verilog for layer")]
    assert len(layers) == 2
    assert layers[0].startswith("Verilog for layer 1/2: Dense") and "+ ReLU (784 -> 64, reuse 1)" in layers[0]
    assert layers[1].startswith("Verilog for layer 2/2: Dense") and layers[1].endswith("(64 -> 10, reuse 1)")
    assert messages.index("generating Verilog") < messages.index(layers[0])


@pytest.mark.slow
def test_mnist_design_is_bit_exact_on_icarus(mnist):
    # Icarus: about 70 s of CPU for 20 vectors (edge cases first); Verilator's C++ build of the 70,000 adders
    # takes about 9 minutes of CPU before its first vector.
    out, _ = mnist
    result = simulate(out, "icarus", vectors=20)["icarus"]
    assert (result["vectors"], result["mismatches"], result["tlast_errors"]) == (20, 0, 0)
