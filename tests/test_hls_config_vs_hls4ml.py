"""An hls4ml configuration means the same numbers in bitforge: the same PyTorch model and HLSConfig, converted by
hls4ml's own PyTorch converter and compiled by bitforge with ``--hls-config``, give bit-identical outputs.

The reference here is not bitforge's project but hls4ml's conversion of the user's model (``convert_from_pytorch_model``
with the user's config, exactly as an hls4ml user runs it), C-simulated with g++: bitforge's golden model must
predict that firmware on 10,000 seeded vectors, edge values included, and so must the C simulation of bitforge's own
project; and every layer's result and accumulator type in bitforge's IR must be the one hls4ml's model gave it.
Four configurations: ``ap_fixed<16,6>`` everywhere (narrow TRN/WRAP accumulators that round every product), per-layer
mixed types (narrow weights, whose decimal text hls4ml rounds), RND/SAT types with a saturating accumulator, and the
generated config as it is, 'auto' everywhere (hls4ml infers full-width Dense results, the ReLUs wrap them to the
default). bitforge reads the whole generated config, as a user dumps it (the module as its repr string, InputShape as
a list). And a CNN's generated config, with every layer class hls4ml infers 'auto' for; a Conv2d + BatchNorm block
under the Model-only config hls4ml generates (hls4ml keeps the BatchNorm as a layer, and so does bitforge), with the
input type's whole range and a narrower declared one; and the digits-cnn recipe under a Model-only and a generated
config (BatchNorms kept, then fused), against hls4ml's conversion of its logits. Each configuration costs two g++
builds (about 15 s on 2 cores): they run in the slow step.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from bitforge.toolchain import emulate, ir
from bitforge.toolchain.compiler import CompileOptions, compile_model
from bitforge.toolchain.fixed import FixedType, parse_type
from bitforge.toolchain.passes.hls_config import hls4ml_aliases
from bitforge.toolchain.verify.vectors import make_vectors


class JetMLP(torch.nn.Module):
    """A 16-32-16-5 MLP with named layers, as users write them (hls4ml names its layers after the attributes)."""

    def __init__(self):
        super().__init__()
        self.fc1, self.act1 = torch.nn.Linear(16, 32), torch.nn.ReLU()
        self.fc2, self.act2 = torch.nn.Linear(32, 16), torch.nn.ReLU()
        self.fc3 = torch.nn.Linear(16, 5)

    def forward(self, x):
        return self.fc3(self.act2(self.fc2(self.act1(self.fc1(x)))))


def _model() -> JetMLP:
    torch.manual_seed(7)
    m = JetMLP().eval()
    with torch.no_grad():  # weights of a trained net's scale, so that narrow types saturate somewhere
        for p in m.parameters():
            p.mul_(2.0)
    return m


def _hls4ml_config(m: torch.nn.Module, model_precision, layers: dict) -> dict:
    """What an hls4ml user has: ``config_from_pytorch_model`` (name granularity), then their own precisions."""
    import hls4ml

    cfg = hls4ml.utils.config_from_pytorch_model(m, input_shape=(16,), granularity="name", backend="Vitis",
                                                 default_precision="ap_fixed<16,6>")
    cfg["Model"]["Precision"] = model_precision
    for name, precision in layers.items():
        cfg["LayerName"][name]["Precision"].update(precision)
    return cfg


CONFIGS = {
    # hls4ml's default everywhere: accumulators of 10 fractional bits round each 20-bit product (TRN) and wrap.
    "default-16-6": ({"default": "ap_fixed<16,6>"}, {
        name: {k: "ap_fixed<16,6>" for k in ("weight", "bias", "accum", "result")} for name in ("fc1", "fc2", "fc3")
    } | {name: {"result": "ap_fixed<16,6>"} for name in ("x", "act1", "act2")}),
    # per-layer mixed types: narrow weights, a wide first accumulator, unsigned ReLU outputs, a narrow last layer.
    "mixed": ({"default": "ap_fixed<16,6>"}, {
        "x": {"result": "ap_fixed<12,4,AP_RND_CONV,AP_SAT>"},
        "fc1": {"weight": "ap_fixed<6,2>", "bias": "ap_fixed<10,4>", "accum": "ap_fixed<24,8>",
                "result": "ap_fixed<14,6,AP_RND,AP_SAT>"},
        "act1": {"result": "ap_ufixed<9,4,AP_RND_CONV,AP_SAT>"},
        "fc2": {"weight": "ap_fixed<8,3>", "bias": "ap_fixed<8,3>", "accum": "ap_fixed<18,7>",
                "result": "ap_fixed<12,5>"},
        "act2": {"result": "ap_ufixed<8,4>"},
        "fc3": {"weight": "ap_fixed<4,1>", "bias": "ap_fixed<8,2>", "accum": "ap_fixed<16,6>",
                "result": "ap_fixed<10,5,AP_RND,AP_SAT>"},
    }),
    # rounding and saturation everywhere, accumulators included: partial sums clip in input order.
    "rnd-sat": ({"default": "ap_fixed<14,5,AP_RND,AP_SAT>"}, {
        name: {k: "ap_fixed<14,5,AP_RND,AP_SAT>" for k in ("weight", "bias", "accum", "result")}
        for name in ("fc1", "fc2", "fc3")
    } | {"x": {"result": "ap_fixed<14,5,AP_RND,AP_SAT>"}, "act1": {"result": "ap_ufixed<12,5,AP_RND,AP_SAT>"},
         "act2": {"result": "ap_ufixed<12,5,AP_RND,AP_SAT>"}}),
    # the generated config untouched: result, weight, bias and accum 'auto' on every layer.
    "auto": ({"default": "ap_fixed<16,6>"}, {}),
}


def _hls4ml_model(m: torch.nn.Module, cfg: dict, folder: Path):
    import hls4ml

    return hls4ml.converters.convert_from_pytorch_model(m, output_dir=str(folder), backend="Vitis",
                                                        hls_config=copy.deepcopy(cfg), io_type="io_parallel")


def _predict(hm, x: np.ndarray) -> np.ndarray:
    hm.compile()
    return np.asarray(hm.predict(np.ascontiguousarray(x)), dtype=np.float64).reshape(len(x), -1)


def _fixed(p) -> FixedType:
    """An hls4ml precision as bitforge's type."""
    from hls4ml.model.types import FixedPrecisionType
    assert isinstance(p, FixedPrecisionType), p
    return FixedType(p.width, p.integer, p.signed, p.rounding_mode.name, p.saturation_mode.name)


def _as_dumped(cfg: dict) -> dict:
    """The generated config as a user writes it to a file: the module as its repr string, the shape as a list."""
    return json.loads(json.dumps(cfg, default=repr))


@pytest.mark.slow
@pytest.mark.parametrize("config", list(CONFIGS))
def test_hls4ml_config_means_the_same_numbers(tmp_path, config):
    m = _model()
    cfg = _hls4ml_config(m, *CONFIGS[config])
    path = tmp_path / ("cfg.yml" if config not in ("mixed", "auto") else "cfg.json")
    mine = _as_dumped(cfg)
    assert isinstance(mine["PytorchModel"], str) and mine["InputShape"] == [16]
    path.write_text(yaml.safe_dump({"HLSConfig": mine}) if path.suffix == ".yml" else json.dumps(mine))
    pt2 = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(m, (torch.randn(2, 16),)), pt2)

    out = tmp_path / "bf"
    report = compile_model(str(pt2), out, CompileOptions(to=("hls",), hls_config=str(path), input_range=(-4.0, 4.0),
                                                          vectors=10_000, seed=3))
    v = report["verification"]["golden_vs_hls_csim"]
    assert (v["vectors"], v["mismatches"]) == (10_000, 0)

    g = ir.load(out)
    hm = _hls4ml_model(m, cfg, tmp_path / "hls4ml")
    # The IR carries the types hls4ml's model has, accumulators included ('auto' as hls4ml inferred it).
    aliases = hls4ml_aliases(g)
    checked = 0
    for name, layer in hm.graph.items():
        if name in g.inputs:  # the graph input's quantizer
            node = next(n for n in g.nodes if isinstance(n, ir.Quantize) and n.input == name)
        else:
            node = g.node(aliases[name.lower()])
        assert g.tensors[node.output].dtype == _fixed(layer.get_output_variable().type.precision), name
        if "accum_t" in layer.types:
            assert node.accum_type == _fixed(layer.types["accum_t"].precision), name
            checked += 1
        for var, precision in CONFIGS[config][1].get(name, {}).items():  # and they are the config's
            want = parse_type(precision)
            got = g.tensors[node.output].dtype if var == "result" else getattr(node, f"{var}_type")
            assert got.to_ap() == want.to_ap(), (name, var)
    assert checked == 3

    inputs = make_vectors(g, 10_000, 3)
    x = np.asarray(inputs[g.inputs[0]], dtype=np.float64).reshape(10_000, -1)
    golden = emulate.run(g, inputs)[g.outputs[0]]
    theirs = _predict(hm, x)
    codes = np.ldexp(theirs, g.tensors[g.outputs[0]].dtype.frac)
    assert np.array_equal(codes, np.rint(codes))
    bad = np.flatnonzero((codes.astype(np.int64) != golden).any(axis=1))
    assert bad.size == 0, f"{bad.size} of 10,000 vectors differ; first row {bad[0] if bad.size else None}"


class JetCNN(torch.nn.Module):
    """A 1-D CNN with one layer of each class hls4ml infers 'auto' for: Conv1d, ReLU, MaxPool, a BatchNorm kept as a
    layer (after a pool), AvgPool, Flatten, PReLU, two Linear branches (one with a BatchNorm that bitforge folds and
    hls4ml fuses, one with a LeakyReLU), their sum, and a last Linear."""

    def __init__(self):
        super().__init__()
        self.conv, self.act, self.pool = torch.nn.Conv1d(2, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool1d(2)
        self.bn, self.apool, self.flat = torch.nn.BatchNorm1d(4), torch.nn.AvgPool1d(2), torch.nn.Flatten()
        self.prelu, self.fc, self.lrelu = torch.nn.PReLU(8), torch.nn.Linear(8, 6), torch.nn.LeakyReLU(0.1)
        self.fc2, self.fcbn, self.out = torch.nn.Linear(8, 6), torch.nn.BatchNorm1d(6), torch.nn.Linear(6, 3)

    def forward(self, x):
        f = self.prelu(self.flat(self.apool(self.bn(self.pool(self.act(self.conv(x)))))))
        return self.out(self.lrelu(self.fc(f)) + self.fcbn(self.fc2(f)))


@pytest.mark.slow
def test_a_generated_cnn_config_means_the_same_numbers(tmp_path):
    """The generated config of a CNN, untouched but for a maximum (so that the output fits a double, which hls4ml's
    predict returns; the cap also narrows the accumulators, which then round): bitforge's IR has hls4ml's type on
    every layer and its golden model predicts hls4ml's firmware on every vector.

    The input range is the input type's whole range: bitforge sizes a BatchNorm's sum from the declared range
    (hls4ml's is full precision), and the edge vectors go beyond any narrower one."""
    import hls4ml

    torch.manual_seed(0)
    m = JetCNN().eval()
    with torch.no_grad():
        for bn in (m.bn, m.fcbn):
            bn.running_mean.uniform_(-0.5, 0.5), bn.running_var.uniform_(0.5, 2.0), bn.bias.uniform_(-0.3, 0.3)
    cfg = hls4ml.utils.config_from_pytorch_model(m, input_shape=(2, 8), granularity="name", backend="Vitis",
                                                 max_precision="ap_fixed<40,16>")
    (tmp_path / "cfg.json").write_text(json.dumps(_as_dumped(cfg)))
    torch.export.save(torch.export.export(m, (torch.randn(2, 2, 8),)), tmp_path / "m.pt2")
    report = compile_model(str(tmp_path / "m.pt2"), tmp_path / "bf",
                           CompileOptions(to=("hls",), hls_config=str(tmp_path / "cfg.json"), input_range=(-32.0, 32.0),
                                          vectors=10_000, seed=3))
    v = report["verification"]["golden_vs_hls_csim"]
    assert (v["vectors"], v["mismatches"]) == (10_000, 0)

    g = ir.load(tmp_path / "bf")
    hm = _hls4ml_model(m, cfg, tmp_path / "hls4ml")
    aliases, checked = hls4ml_aliases(g), 0
    for name, layer in hm.graph.items():
        if name.startswith("transpose_"):
            continue  # hls4ml's channels-last plumbing
        node = next(n for n in g.nodes if isinstance(n, ir.Quantize)) if name in g.inputs else \
            g.node(aliases.get(name, name))
        assert g.tensors[node.output].dtype == _fixed(layer.get_output_variable().type.precision), name
        if "accum_t" in layer.types and getattr(node, "accum_type", None) is not None:
            assert node.accum_type == _fixed(layer.types["accum_t"].precision), name
            checked += 1
    assert checked == 4  # the Conv and the three Dense layers (pools have no accumulator type in bitforge)

    inputs = make_vectors(g, 10_000, 3)
    x = np.asarray(inputs[g.inputs[0]], dtype=np.float64).reshape(10_000, -1)  # 'full': channels first, as given
    golden = emulate.run(g, inputs)[g.outputs[0]]
    codes = np.ldexp(_predict(hm, x), g.tensors[g.outputs[0]].dtype.frac)
    assert np.array_equal(codes, np.rint(codes))
    bad = np.flatnonzero((codes.astype(np.int64) != golden).any(axis=1))
    assert bad.size == 0, f"{bad.size} of 10,000 vectors differ; first row {bad[0] if bad.size else None}"


class BlockCNN(torch.nn.Module):
    """One conv block of the digits CNN, small: Conv2d, BatchNorm2d, ReLU, MaxPool2d, Flatten, Linear."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn = torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.BatchNorm2d(4)
        self.act, self.pool = torch.nn.ReLU(), torch.nn.MaxPool2d(2)
        self.flat, self.fc = torch.nn.Flatten(), torch.nn.Linear(4 * 3 * 3, 5)

    def forward(self, x):
        return self.fc(self.flat(self.pool(self.act(self.bn(self.conv(x))))))


def _compare(g: ir.Graph, hm, tensor: str, seed: int = 3) -> None:
    """bitforge's golden model's ``tensor`` equals hls4ml's output, code for code, on 10,000 seeded vectors."""
    inputs = make_vectors(g, 10_000, seed)
    x = np.asarray(inputs[g.inputs[0]], dtype=np.float64).reshape(10_000, -1)  # 'full': channels first, as given
    golden = emulate.run(g, inputs, keep=True)[tensor].reshape(10_000, -1)
    codes = np.ldexp(_predict(hm, x), g.tensors[tensor].dtype.frac)
    assert np.array_equal(codes, np.rint(codes))
    bad = np.flatnonzero((codes.astype(np.int64) != golden).any(axis=1))
    assert bad.size == 0, f"{bad.size} of 10,000 vectors differ; first row {bad[0] if bad.size else None}"


@pytest.mark.slow
@pytest.mark.parametrize("input_range", [(-32.0, 32.0), (-4.0, 4.0)])  # ap_fixed<16,6>'s whole range; a declared one
def test_a_model_only_config_keeps_the_batchnorm_as_hls4ml_does(tmp_path, input_range):
    """The config hls4ml generates at model granularity, ``ap_fixed<16,6>`` everywhere: the Conv's result is then
    explicit, so hls4ml keeps the BatchNorm as a layer (the Conv's output wraps to ap_fixed<16,6> first) and so does
    bitforge, whose ScaleShift then adds at hls4ml's full precision: no vector wraps its sum, those beyond the
    declared input range (the edge rows reach the input type's ends) included."""
    import hls4ml
    from hls4ml.model.layers import BatchNormalization

    torch.manual_seed(1)
    m = BlockCNN().eval()
    with torch.no_grad():
        m.bn.running_mean.uniform_(-0.5, 0.5), m.bn.running_var.uniform_(0.25, 4.0)
        m.bn.weight.uniform_(0.5, 2.0), m.bn.bias.uniform_(-1.0, 1.0)
    cfg = hls4ml.utils.config_from_pytorch_model(m, input_shape=(2, 6, 6), granularity="model", backend="Vitis",
                                                 default_precision="ap_fixed<16,6>")
    assert "LayerName" not in cfg and "LayerType" not in cfg  # the Model entry is the whole HLSConfig
    (tmp_path / "cfg.json").write_text(json.dumps(_as_dumped(cfg)))
    torch.export.save(torch.export.export(m, (torch.randn(2, 2, 6, 6),)), tmp_path / "m.pt2")
    report = compile_model(str(tmp_path / "m.pt2"), tmp_path / "bf",
                           CompileOptions(to=("hls",), hls_config=str(tmp_path / "cfg.json"), input_range=input_range,
                                          vectors=10_000, seed=3))
    v = report["verification"]["golden_vs_hls_csim"]
    assert (v["vectors"], v["mismatches"]) == (10_000, 0)

    g = ir.load(tmp_path / "bf")
    hm = _hls4ml_model(m, cfg, tmp_path / "hls4ml")
    assert isinstance(hm.graph["bn"], BatchNormalization)  # hls4ml kept it
    bn = g.node(hls4ml_aliases(g)["bn"])
    assert isinstance(bn, ir.ScaleShift) and g.metadata.get("folded_batchnorm") is None
    # its accumulator holds x * scale + shift for every code of the input type (the Conv's ap_fixed<16,6>)
    xt = g.tensors[bn.input].dtype
    ends = [x * int(s) + (int(b) << (bn.accum_type.frac - bn.shift_type.frac))
            for x in (xt.min_code, xt.max_code) for s in (bn.scale.min(), bn.scale.max())
            for b in (bn.shift.min(), bn.shift.max())]
    assert bn.accum_type.min_code <= min(ends) and max(ends) <= bn.accum_type.max_code
    for name, layer in hm.graph.items():
        if not name.startswith("transpose_"):
            node = next(n for n in g.nodes if isinstance(n, ir.Quantize)) if name in g.inputs else \
                g.node(hls4ml_aliases(g).get(name, name))
            assert g.tensors[node.output].dtype == _fixed(layer.get_output_variable().type.precision), name
    _compare(g, hm, g.outputs[0])


@pytest.mark.slow
@pytest.mark.parametrize("config", ["model-only", "generated"])
def test_the_digits_cnn_compiles_under_a_model_only_and_a_generated_config(tmp_path, config):
    """The digits-cnn recipe (two Conv2d + BatchNorm2d + ReLU + MaxPool blocks, Linear, Softmax) under
    ``Model: {Precision: ap_fixed<16,6>}`` (hls4ml keeps both BatchNorms) and under the config hls4ml generates at
    name granularity ('auto': hls4ml fuses both). bitforge's Softmax has its own tables, which a config cannot make
    hls4ml's, and the generated config sets hls4ml's (refused on bitforge's Softmax): that one compiles with
    ``softmax='argmax'``, which leaves the Softmax's entry nothing to set. Either way the logits bitforge's golden
    model computes are those of hls4ml's own conversion of the model without its Softmax, on 10,000 vectors (hls4ml
    also needs ChannelsLastConversion for a CNN, which the generated config has and the Model-only one lacks: it is
    added for hls4ml, and bitforge reads the model's own channels-first order either way)."""
    import hls4ml
    from hls4ml.model.layers import BatchNormalization

    from bitforge.models.cnn import logits
    from bitforge.models.recipes import get_recipe

    module = get_recipe("digits-cnn").build(seed=0).eval()
    if config == "model-only":
        mine = {"Model": {"Precision": "ap_fixed<16,6>"}}
        theirs = {"Model": {**mine["Model"], "ChannelsLastConversion": "full", "TransposeOutputs": False},
                  "InputShape": (1, 8, 8)}
        softmax, kept = "keep", {"batchnorm_1", "batchnorm_5"}
    else:
        theirs = hls4ml.utils.config_from_pytorch_model(module, input_shape=(1, 8, 8), granularity="name",
                                                        backend="Vitis")
        mine = _as_dumped(theirs)
        assert "table" in mine["LayerName"]["_10"]["Precision"]  # the Softmax's entry, refused unless replaced
        theirs["LayerName"].pop("_10")
        softmax, kept = "argmax", set()
    (tmp_path / "cfg.json").write_text(json.dumps(mine))
    # seed 0 trains the recipe's module (the one built here) and seeds the vectors
    options = CompileOptions(to=("hls",), hls_config=str(tmp_path / "cfg.json"), softmax=softmax, vectors=10_000,
                             seed=0)
    report = compile_model("digits-cnn", tmp_path / "bf", options)
    v = report["verification"]["golden_vs_hls_csim"]
    assert (v["vectors"], v["mismatches"]) == (10_000, 0)

    g = ir.load(tmp_path / "bf")
    assert {n.name for n in g.nodes if isinstance(n, ir.ScaleShift)} == kept
    assert {r["scale_shift"] for r in g.metadata.get("folded_batchnorm", [])} == {"batchnorm_1", "batchnorm_5"} - kept
    hm = _hls4ml_model(logits(module), theirs, tmp_path / "hls4ml")
    assert len([layer for layer in hm.graph.values() if isinstance(layer, BatchNormalization)]) == len(kept)
    head = g.node("softmax_10")
    assert head.OP == ("Softmax" if softmax == "keep" else "ArgMax")
    _compare(g, hm, head.input, seed=0)
