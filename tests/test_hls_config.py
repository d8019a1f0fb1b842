"""hls4ml HLSConfig files: read (YAML, JSON, bare or under HLSConfig), resolved as hls4ml resolves them, turned
into a --precision spec whose types land exactly on the IR, and refused by key where bitforge cannot follow."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from bitforge.toolchain import fixed, ir
from bitforge.toolchain.fixed import FixedType, Overflow, Rounding, parse_type
from bitforge.toolchain.passes.hls_config import (HlsConfigError, hls4ml_aliases, hls4ml_constant_type, hls_class,
                                                  hls4ml_text_values, parse_hls_config, parse_hls_type,
                                                  read_hls_config)
from bitforge.toolchain.passes.batchnorm import fold_batchnorm
from bitforge.toolchain.passes.quantize import AUTO, QuantizeError, parse_precision, quantize_graph

T16 = "ap_fixed<16,6>"


def _normal(rng, *shape, scale=0.5) -> np.ndarray:
    return (rng.normal(size=shape) * scale).astype(np.float32)


def mixed_graph(seed: int = 0) -> ir.Graph:
    """One node of each op a config types differently: bias, scale, param, mid, accum, slope, tables."""
    rng = np.random.default_rng(seed)
    g = ir.sequential("mixed", ir.TensorSpec("x", (6,)), [
        (ir.Dense("fc1", ("x",), ("h",), weight=_normal(rng, 8, 6), bias=_normal(rng, 8, scale=0.2)),
         ir.TensorSpec("h", (8,))),
        (ir.ReLU("relu", ("h",), ("r",)), ir.TensorSpec("r", (8,))),
        (ir.ScaleShift("bn", ("r",), ("s",), scale=1 + _normal(rng, 8, scale=0.2), shift=_normal(rng, 8, scale=0.1)),
         ir.TensorSpec("s", (8,))),
        (ir.LowRankDense("lr", ("s",), ("l",), u=_normal(rng, 6, 2), v=_normal(rng, 2, 8), bias=_normal(rng, 6)),
         ir.TensorSpec("l", (6,))),
        (ir.LeakyReLU("leaky", ("l",), ("k",), alpha=np.array([0.125], np.float32)), ir.TensorSpec("k", (6,))),
        (ir.KANLayer("kan", ("k",), ("q",), coeffs=_normal(rng, 4, 6, 8), grid_lo=-4.0, grid_hi=4.0, grid_size=5,
                     order=3), ir.TensorSpec("q", (4,))),
        (ir.HardSigmoid("hsig", ("q",), ("e",), alpha=0.2, beta=0.5), ir.TensorSpec("e", (4,))),
        (ir.Softmax("softmax", ("e",), ("y",)), ir.TensorSpec("y", (4,)))])
    g.metadata["input_range"] = [-1.0, 1.0]
    return ir.validate(g)


def cnn_graph(seed: int = 0) -> ir.Graph:
    rng = np.random.default_rng(seed)
    g = ir.sequential("cnn", ir.TensorSpec("x", (2, 8)), [
        (ir.Conv("conv", ("x",), ("c",), weight=_normal(rng, 4, 2, 3), bias=_normal(rng, 4, scale=0.1), stride=(1,),
                 padding=(1, 1), dilation=(1,)), ir.TensorSpec("c", (4, 8))),
        (ir.Pool("pool", ("c",), ("p",), mode="max", kernel=(2,), stride=(2,), padding=(0, 0)),
         ir.TensorSpec("p", (4, 4))),
        (ir.Pool("gpool", ("p",), ("gp",), mode="max", kernel=(4,), stride=(4,), padding=(0, 0)),
         ir.TensorSpec("gp", (4, 1))),
        (ir.Reshape("flat", ("gp",), ("f",)), ir.TensorSpec("f", (4,))),
        (ir.Dense("fc", ("f",), ("z",), weight=_normal(rng, 3, 4), bias=_normal(rng, 3, scale=0.1)),
         ir.TensorSpec("z", (3,))),
        (ir.Table("sig", ("z",), ("y",), function="sigmoid"), ir.TensorSpec("y", (3,)))])
    g.metadata["input_range"] = [-1.0, 1.0]
    return ir.validate(g)


def T(text: str) -> FixedType:
    return parse_hls_type(text)


# -- reading the file ----------------------------------------------------------------------------------------

BARE = {"Model": {"Precision": {"default": T16, "accum": "auto"}, "ReuseFactor": 2, "Strategy": "Resource",
                  "BramFactor": 1_000_000_000, "TraceOutput": False},
        "LayerType": {"Dense": {"Precision": {"weight": "ap_fixed<8,3>"}, "ReuseFactor": 4}},
        "LayerName": {"fc2": {"Precision": {"accum": "ap_fixed<24,10>", "result": "ap_int<8>"}, "Strategy": "latency",
                              "Trace": True},
                      "x": {"Precision": "ap_fixed<10,4,AP_RND_CONV,AP_SAT>"}}}
WRAPPED = {"Backend": "Vitis", "IOType": "io_stream", "ClockPeriod": 4, "Part": "xcvu13p-flga2577-2-e",
           "HLSConfig": BARE}


def _write(tmp_path: Path, name: str, data) -> Path:
    import yaml
    path = tmp_path / name
    path.write_text(json.dumps(data) if name.endswith(".json") else yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("name", ["cfg.yml", "cfg.yaml", "cfg.json"])
def test_the_bare_and_the_wrapped_form_read_the_same_settings_from_yaml_and_json(tmp_path, name):
    bare = read_hls_config(_write(tmp_path, name, BARE))
    wrapped = read_hls_config(_write(tmp_path, "w" + name, WRAPPED))
    assert bare.model == wrapped.model and bare.layer_types == wrapped.layer_types
    assert bare.layer_names == wrapped.layer_names
    assert bare.model.get("default") == parse_type(T16) and bare.model.get("accum") == AUTO
    assert bare.model.reuse == 2 and bare.model.strategy == "resource" and bare.bram_factor == 1_000_000_000
    assert (bare.backend, bare.io_type, bare.clock_period, bare.part) == (None, None, None, None)
    assert (wrapped.backend, wrapped.io_type, wrapped.clock_period, wrapped.part) == \
        ("vitis", "stream", 4.0, "xcvu13p-flga2577-2-e")


def test_a_yaml_file_as_hls4ml_users_write_it_is_read(tmp_path):
    path = tmp_path / "hls4ml_config.yml"
    path.write_text("Backend: Vivado\nIOType: io_parallel\nClockPeriod: 5\n"
                    "HLSConfig:\n  Model:\n    Precision: ap_fixed<16,6>\n    ReuseFactor: 1\n    Strategy: Latency\n"
                    "  LayerName:\n    fc1:\n      Precision:\n        weight: ap_fixed<8,3>\n"
                    "        accum: ap_fixed<18,8,AP_RND,AP_SAT>\n")
    c = read_hls_config(path)
    assert c.model.get("default") == parse_type(T16) and (c.backend, c.io_type) == ("vivado", "parallel")
    assert dict(c.layer_names)["fc1"].get("accum") == FixedType(18, 8, True, Rounding.RND, Overflow.SAT)


# -- hls4ml's types ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, want", [
    (T16, FixedType(16, 6)), ("fixed<8,3,RND_CONV,SAT>", FixedType(8, 3, True, Rounding.RND_CONV, Overflow.SAT)),
    ("ap_ufixed<8,0,AP_RND,AP_SAT>", FixedType(8, 0, False, Rounding.RND, Overflow.SAT)),
    ("ufixed<4,4>", FixedType(4, 4, False)), ("ap_int<8>", FixedType(8, 8, True, Rounding.TRN_ZERO)),
    ("int<12>", FixedType(12, 12, True, Rounding.TRN_ZERO)), ("ap_uint<6>", FixedType(6, 6, False, Rounding.TRN_ZERO)),
    ("uint<3>", FixedType(3, 3, False, Rounding.TRN_ZERO)), ("auto", AUTO), ("Auto", AUTO)])
def test_hls4ml_type_strings_parse_to_the_types_their_cpp_computes(text, want):
    assert parse_hls_type(text) == want


PROBE = r"""
#include <cstdio>
#include "ap_fixed.h"
#include "ap_int.h"
int main() {
    char kind;
    while (std::scanf(" %c", &kind) == 1) {
        if (kind == 'd') {
            double v; std::scanf("%lf", &v);
            ap_int<8> a = v; ap_uint<6> b = v;
            std::printf("%lld %lld\n", (long long)a.to_int64(), (long long)b.to_uint64());
        } else {
            long long c; std::scanf("%lld", &c);
            ap_fixed<12, 5> x; x.range(11, 0) = c & 0xFFF;
            ap_int<8> a = x; ap_uint<6> b = x;
            std::printf("%lld %lld\n", (long long)a.to_int64(), (long long)b.to_uint64());
        }
    }
}
"""


def test_ap_int_types_round_toward_zero_and_wrap_as_the_ap_int_headers_do(tmp_path):
    """ap_int<8>/ap_uint<6> from doubles and from every ap_fixed<12,5> code, against hls4ml's ap_int headers.

    One quirk of the headers is not a rounding mode: ap_int_base(double) turns a negative double above -0.5 into
    +1 (it sets -1 for a shift past the mantissa, then negates); such doubles are checked to do exactly that, so a
    harness that feeds float inputs to an ap_int input knows to feed codes instead.
    """
    import hls4ml
    gxx = shutil.which("g++")
    assert gxx, "g++ is needed: the ap_int headers are the reference"
    headers = Path(hls4ml.__file__).parent / "templates" / "vivado" / "ap_types"
    (tmp_path / "probe.cpp").write_text(PROBE)
    subprocess.run([gxx, "-O1", "-std=c++14", "-w", f"-I{headers}", str(tmp_path / "probe.cpp"), "-o",
                    str(tmp_path / "probe")], check=True)
    rng = np.random.default_rng(0)
    doubles = np.concatenate([rng.uniform(-1, 1, 1000) * 2.0 ** rng.integers(-40, 70, 1000), np.arange(-600, 600) / 4,
                              [-0.5, 0.5, -0.0, 2.0 ** 53 + 2, -1e300]])
    src = FixedType(12, 5)
    codes = np.arange(src.min_code, src.max_code + 1)
    feed = "".join(f"d {float(v)!r}\n" for v in doubles) + "".join(f"f {c}\n" for c in codes)
    out = subprocess.run([str(tmp_path / "probe")], input=feed, capture_output=True, text=True, check=True).stdout
    got = np.array([[int(v) for v in line.split()] for line in out.splitlines()])
    i8, u6 = T("ap_int<8>"), T("ap_uint<6>")
    want = np.concatenate([np.stack([fixed.quantize(doubles, i8), fixed.quantize(doubles, u6)], axis=1),
                           np.stack([fixed.requantize(codes, src, i8), fixed.requantize(codes, src, u6)], axis=1)])
    quirk = np.concatenate([(doubles < 0) & (doubles > -0.5), np.zeros(codes.size, bool)])
    assert quirk.sum() > 100 and np.array_equal(got[~quirk], want[~quirk])
    assert np.all(got[quirk] == 1)


# -- resolution, against hls4ml's own HLSConfig ---------------------------------------------------------------

ORACLE_CONFIG = {
    "Model": {"Precision": {"default": T16, "weight": "ap_fixed<10,2>", "accum": "ap_fixed<30,12>"},
              "ReuseFactor": 3},
    "LayerType": {"Dense": {"Precision": {"result": "ap_fixed<12,4>", "bias": "ap_fixed<14,5>"}, "ReuseFactor": 8,
                            "Strategy": "Resource"},
                  "Activation": {"Precision": "ap_ufixed<9,3,AP_RND,AP_SAT>"},
                  "BatchNormalization": {"Precision": {"scale": "ap_fixed<11,3>"}},
                  "Softmax": {"Precision": {"result": "ap_ufixed<8,0>"}}},
    "LayerName": {"FC1": {"Precision": "ap_fixed<20,8,AP_RND_CONV,AP_SAT>", "ReuseFactor": 2},
                  "lr": {"Precision": {"accum": "ap_fixed<24,9>", "weight": "ap_int<6>"}, "Strategy": "latency"},
                  "leaky": {"Precision": {"param": "ap_fixed<8,1>"}},
                  "x": {"Precision": {"result": "ap_fixed<12,3>"}}},
}


def _from_hls4ml(p) -> object:
    from hls4ml.model.types import FixedPrecisionType, IntegerPrecisionType, UnspecifiedPrecisionType
    if isinstance(p, UnspecifiedPrecisionType):
        return AUTO
    if isinstance(p, IntegerPrecisionType):
        return FixedType(p.width, p.width, p.signed, Rounding.TRN_ZERO, Overflow.WRAP)
    assert isinstance(p, FixedPrecisionType)
    return FixedType(p.width, p.integer, p.signed, p.rounding_mode.name, p.saturation_mode.name)


def test_every_layer_resolves_to_the_precision_reuse_and_strategy_hls4ml_gives_it():
    from hls4ml.model.graph import HLSConfig

    g = mixed_graph()
    oracle = HLSConfig({"HLSConfig": ORACLE_CONFIG})
    ours = parse_hls_config(ORACLE_CONFIG, "oracle")

    class Layer:
        def __init__(self, name):
            self.name, self.class_name = name, str(hls_class(g, name))

    for name in ["x", *(n.name for n in g.nodes)]:
        for var in ("weight", "bias", "result", "accum", "scale", "param"):
            if name == "kan" and var == "accum":
                continue  # a KANLayer's accumulator is typed only by its own entry (quantize's frac rule)
            assert ours.resolve(g, name, var)[0] == _from_hls4ml(oracle.get_precision(Layer(name), var)[0]), \
                (name, var)
        if name != "x":
            assert ours.reuse(g, name) == oracle.get_reuse_factor(Layer(name))
            assert ours.strategy(g, name) == oracle.get_strategy(Layer(name))


def test_the_precision_spec_types_every_layer_as_resolved():
    g = mixed_graph()
    c = parse_hls_config(ORACLE_CONFIG, "oracle")
    spec = parse_precision(c.precision_spec(g))
    assert spec.default == T(T16) and spec.weight == T("ap_fixed<10,2>") and spec.accum == T("ap_fixed<30,12>")
    want = {("x", "act"): "ap_fixed<12,3>", ("fc1", "weight"): "ap_fixed<20,8,AP_RND_CONV,AP_SAT>",
            ("fc1", "bias"): "ap_fixed<20,8,AP_RND_CONV,AP_SAT>", ("fc1", "act"): "ap_fixed<20,8,AP_RND_CONV,AP_SAT>",
            ("fc1", "accum"): "ap_fixed<20,8,AP_RND_CONV,AP_SAT>", ("relu", "act"): "ap_ufixed<9,3,AP_RND,AP_SAT>",
            ("bn", "weight"): "ap_fixed<11,3>", ("bn", "bias"): T16, ("bn", "act"): T16,
            ("lr", "weight"): "ap_int<6>", ("lr", "bias"): "ap_fixed<14,5>", ("lr", "mid"): "ap_fixed<12,4>",
            ("lr", "act"): "ap_fixed<12,4>", ("lr", "accum"): "ap_fixed<24,9>", ("leaky", "weight"): "ap_fixed<8,1>",
            ("leaky", "act"): T16, ("kan", "weight"): "ap_fixed<10,2>", ("kan", "act"): T16,
            ("hsig", "weight"): "ap_ufixed<16,0>", ("softmax", "act"): "ap_ufixed<8,0>"}
    nodes = {n.name: n for n in g.nodes}
    for (name, field), text in want.items():
        got = spec.lookup(name, field) if name == "x" else spec.for_node(nodes[name], field)
        assert got == T(text), (name, field)
    assert spec.for_node(nodes["kan"], "accum") is None
    # The BatchNorm adds at full precision in hls4ml: its accumulator holds x * scale + bias for every code of the
    # types, at frac 6 + 8 = 14: 511 * -1024 + (-32768 << 4) = -1047552 needs 21 signed bits.
    assert spec.for_node(nodes["bn"], "accum") == FixedType(21, 21 - 14, True, Rounding.TRN, Overflow.WRAP)


def test_model_level_accum_auto_and_weight_auto_mean_inferred_and_the_default():
    g = mixed_graph()
    c = parse_hls_config({"Model": {"Precision": {"default": T16, "accum": "auto", "weight": "auto"}},
                          "LayerName": {"fc1": {"Precision": {"accum": "ap_fixed<40,20>", "bias": "auto"}}}})
    text = c.precision_spec(g)
    spec = parse_precision(text)
    assert text.startswith("fixed<16,6,TRN,WRAP>,accum=auto") and "weight=" not in text.split(",fc1")[0]
    assert spec.for_node(g.node("fc1"), "accum") == T("ap_fixed<40,20>")
    assert spec.for_node(g.node("fc1"), "bias") == T(T16) and spec.for_node(g.node("lr"), "accum") is None


def test_trace_keys_change_nothing():
    g = mixed_graph()
    plain = {"Model": {"Precision": T16}, "LayerName": {"fc1": {"Precision": "ap_fixed<8,3>"}}}
    traced = {"Model": {"Precision": T16, "TraceOutput": True},
              "LayerName": {"fc1": {"Precision": "ap_fixed<8,3>", "Trace": True}}}
    assert parse_hls_config(plain).precision_spec(g) == parse_hls_config(traced).precision_spec(g)


def test_conv_and_pooling_layer_types_match_by_spatial_axes_and_window():
    g = cnn_graph()
    assert [hls_class(g, n) for n in ("x", "conv", "pool", "gpool", "flat", "fc", "sig")] == \
        ["Input", "Conv1D", "Pooling1D", "GlobalPooling1D", "Reshape", "Dense", "Activation"]
    c = parse_hls_config({"Model": {"Precision": T16},
                          "LayerType": {"Conv1D": {"Precision": {"weight": "ap_fixed<6,1>"}, "ReuseFactor": 4},
                                        "GlobalPooling1D": {"Precision": "ap_fixed<9,4>"},
                                        "Conv2D": {"Precision": "ap_fixed<5,1>"}}})
    spec = parse_precision(c.precision_spec(g))
    assert spec.for_node(g.node("conv"), "weight") == T("ap_fixed<6,1>")
    assert spec.for_node(g.node("gpool"), "act") == T("ap_fixed<9,4>")
    assert spec.for_node(g.node("pool"), "act") == T(T16)
    assert c.layer_reuse(g) == {"conv": 4, "pool": 1, "gpool": 1, "flat": 1, "fc": 1, "sig": 1}
    c = parse_hls_config({"Model": {"Precision": {"default": T16, "accum": "auto"}},
                          "LayerType": {"Conv1D": {"Precision": {"accum": "ap_fixed<36,16>"}}}})
    q = quantize_graph(g, c.precision_spec(g))
    assert q.node("conv").accum_type == T("ap_fixed<36,16>") and q.node("conv").weight_type == T(T16)
    assert q.node("fc").accum_type.frac == 20 and q.tensors["p"].dtype == T(T16)


def test_the_types_land_exactly_on_the_quantized_graph():
    g = mixed_graph()
    c = parse_hls_config({"Model": {"Precision": T16},
                          "LayerType": {"Activation": {"Precision": "ap_fixed<12,4,AP_RND,AP_SAT>"}},
                          "LayerName": {"fc1": {"Precision": {"weight": "ap_fixed<8,3>",
                                                              "accum": "ap_fixed<18,8,AP_RND,AP_SAT>"}},
                                        "x": {"Precision": "ap_fixed<8,2,AP_RND_CONV,AP_SAT>"}}})
    q = quantize_graph(g, c.precision_spec(g))
    fc1, bn, lr, kan, hsig = (q.node(n) for n in ("fc1", "bn", "lr", "kan", "hsig"))
    assert q.tensors["x_q"].dtype == T("ap_fixed<8,2,AP_RND_CONV,AP_SAT>")
    assert (fc1.weight_type, fc1.bias_type) == (T("ap_fixed<8,3>"), T(T16))
    assert fc1.accum_type == T("ap_fixed<18,8,AP_RND,AP_SAT>")
    assert q.tensors["r"].dtype == T("ap_fixed<12,4,AP_RND,AP_SAT>")  # signed as given after a ReLU
    assert (bn.scale_type, bn.shift_type) == (T(T16), T(T16))
    assert (lr.u_type, lr.v_type, lr.bias_type, lr.mid_type) == (T(T16),) * 4
    assert kan.coeff_type == T(T16) and hsig.alpha_type == FixedType(16, 0, False)
    assert all(q.tensors[t].dtype == T(T16) for t in ("h", "s", "l", "k", "q", "e", "y"))
    assert lr.accum_v_type == lr.accum_type == T(T16)  # hls4ml's default accumulator, narrow as it is
    assert bn.accum_type.frac == q.tensors["r"].dtype.frac + bn.scale_type.frac  # inferred: no accum in hls4ml
    assert kan.accum_type.frac == kan.coeff_type.frac + kan.basis_type.frac


# -- refusals ----------------------------------------------------------------------------------------------------

M = {"Precision": T16}


@pytest.mark.parametrize("data, path, problem", [
    ({"Model": M, "LayerName": {"sig": {"table_size": 512}}}, "LayerName.sig.table_size", "does not understand"),
    ({"Model": M, "LayerName": {"fc1": {"TableSize": 0}}}, "LayerName.fc1.TableSize", "positive integer"),
    ({"Model": M, "LayerName": {"fc1": {"Precision": {"maximum": "ap_fixed<32,16>"}}}},
     "LayerName.fc1.Precision.maximum", "Model.Precision only"),
    ({"Model": {"Precision": {"default": T16, "maximum": "auto"}}}, "Model.Precision.maximum", "must be a type"),
    ({"Model": {"Precision": {"default": T16, "recurrent_weight": T16}}}, "Model.Precision.recurrent_weight",
     "does not map this Precision variable"),
    ({"Model": M, "LayerName": {"fc1": {"Precision": {"table": "float"}}}}, "LayerName.fc1.Precision.table",
     "ap_int<W>"),
    ({"Model": {"Precision": {"default": "auto"}}}, "Model.Precision.default", "must be a type"),
    ({"Model": {"Precision": {"weight": T16, "result": T16}}, "LayerName": {"fc1": {"Precision": {"bias": "auto"}}}},
     "LayerName.fc1.Precision", "model default"),
    ({"Model": {"Precision": {"weight": T16}}}, "Model.Precision", "give a default type"),
    ({"Model": {"ReuseFactor": 1}}, "Model.Precision", "missing"),
    ({"LayerName": {}}, "Model", "missing"),
    ({"Model": {"Precision": T16, "ReuseFactor": 0}}, "Model.ReuseFactor", "positive integer"),
    ({"Model": {"Precision": T16, "ReuseFactor": "4"}}, "Model.ReuseFactor", "positive integer"),
    ({"Model": {"Precision": T16, "ReuseFactor": True}}, "Model.ReuseFactor", "positive integer"),
    ({"Model": M, "LayerName": {"fc1": {"ReuseFactor": 2.5}}}, "LayerName.fc1.ReuseFactor", "positive integer"),
    ({"Model": {"Precision": T16, "Strategy": "Distributed_Arithmetic"}}, "Model.Strategy", "Latency or Resource"),
    ({"Model": {"Precision": T16, "BramFactor": -1}}, "Model.BramFactor", "positive integer"),
    ({"Model": {"Precision": T16, "TraceOutput": "yes"}}, "Model.TraceOutput", "true or false"),
    ({"Model": {"Precision": T16, "TargetCycles": 10}}, "Model.TargetCycles", "does not understand"),
    ({"Model": M, "LayerName": {"conv": {"ConvImplementation": "Encoded"}}}, "LayerName.conv.ConvImplementation",
     "hls4ml's default, 'LineBuffer'"),
    ({"Model": M, "LayerName": {"conv": {"ParallelizationFactor": 2}}}, "LayerName.conv.ParallelizationFactor",
     "hls4ml's default, 1"),
    ({"Model": M, "LayerName": {"sm": {"Skip": 0}}}, "LayerName.sm.Skip", "hls4ml's default, False"),
    ({"Model": {"Precision": T16, "ChannelsLastConversion": "Full"}}, "Model.ChannelsLastConversion",
     "full, internal or off"),
    ({"Model": {"Precision": T16, "TransposeOutputs": "no"}}, "Model.TransposeOutputs", "true or false"),
    ({"Model": M, "InputShape": 16}, "InputShape", "without the batch axis"),
    ({"Model": M, "InputShape": [16, 0]}, "InputShape", "without the batch axis"),
    ({"Model": M, "InputShape": [[16], "8"]}, "InputShape", "without the batch axis"),
    ({"HLSConfig": {"Model": M, "InputShape": [16]}, "InputShape": [8]}, "HLSConfig.InputShape", "keep one"),
    ({"Model": M, "LayerType": {"ReLU": {"Precision": T16}}}, "LayerType.ReLU", "write LayerType.Activation"),
    ({"Model": M, "LayerType": {"Linear": {"ReuseFactor": 2}}}, "LayerType.Linear", "write LayerType.Dense"),
    ({"Model": M, "LayerType": {"Frobnicator": {"ReuseFactor": 2}}}, "LayerType.Frobnicator",
     "not an hls4ml layer class"),
    ({"Model": M, "LayerName": {"fc1": {"Precision": "ap_fixed<16>"}}}, "LayerName.fc1.Precision", "2 to 5"),
    ({"Model": M, "LayerName": {"fc1": {"Precision": {"weight": "float"}}}}, "LayerName.fc1.Precision.weight",
     "ap_int<W>"),
    ({"Model": M, "LayerName": {"fc1": {"Precision": {"weight": "ap_int<8,RND>"}}}},
     "LayerName.fc1.Precision.weight", "one argument"),
    ({"Model": M, "LayerName": {"fc1": {"Precision": {"weight": 8}}}}, "LayerName.fc1.Precision.weight",
     "type string"),
    ({"Model": M, "LayerName": {"fc1": {"ReuseFactor": 2}, "FC1": {"ReuseFactor": 4}}}, "LayerName.FC1",
     "without regard to case"),
    ({"Model": M, "Flows": ["vivado:write"]}, "Flows", "runs hls4ml's flow itself"),
    ({"Model": M, "Backend": "Vitis"}, "Backend", "beside HLSConfig"),
    ({"HLSConfig": {"Model": M}, "OutputDir": "prj"}, "OutputDir", "-o"),
    ({"HLSConfig": {"Model": M}, "KerasJson": "m.json"}, "KerasJson", "MODEL argument"),
    ({"HLSConfig": {"Model": M}, "Backend": "Quartus"}, "Backend", "Vivado or Vitis"),
    ({"HLSConfig": {"Model": M}, "IOType": "io_serial"}, "IOType", "io_parallel or io_stream"),
    ({"HLSConfig": {"Model": M}, "ClockPeriod": 0}, "ClockPeriod", "positive number"),
    ({"HLSConfig": {"Model": M}, "Part": ""}, "Part", "part name"),
    ({"HLSConfig": {"Model": M, "Backend": "Vitis"}}, "HLSConfig.Backend", "beside HLSConfig"),
    (["Model"], None, "expected a mapping"),
])
def test_bad_configs_are_refused_naming_the_file_and_the_key(data, path, problem):
    with pytest.raises(HlsConfigError) as e:
        parse_hls_config(data, "cfg.yml")
    message = str(e.value)
    assert message.startswith(f"cfg.yml: {path}: " if path else "cfg.yml: ") and problem in message, message


@pytest.mark.parametrize("layer_name, path, problem", [
    ({"fc9": {"Precision": T16}}, "LayerName.fc9", "no layer 'fc9' (its layers: x, fc1, relu, bn, lr"),
    ({"relu": {"Precision": {"weight": T16}}}, "LayerName.relu.Precision.weight", "ReLU 'relu' has no weight"),
    ({"bn": {"Precision": {"accum": T16}}}, "LayerName.bn.Precision.accum", "BatchNormalization"),
    ({"softmax": {"Precision": {"accum": T16}}}, "LayerName.softmax.Precision.accum", "own tables"),
    ({"x": {"ReuseFactor": 2}}, "LayerName.x.ReuseFactor", "input layer"),
    ({"fc1": {"Precision": {"param": T16}}}, "LayerName.fc1.Precision.param", "Dense 'fc1' has no param"),
])
def test_settings_the_graph_cannot_take_are_refused_naming_the_key(layer_name, path, problem):
    c = parse_hls_config({"Model": M, "LayerName": layer_name}, "cfg.yml")
    with pytest.raises(HlsConfigError) as e:
        c.precision_spec(mixed_graph())
    assert str(e.value).startswith(f"cfg.yml: {path}: ") and problem in str(e.value), str(e.value)


def test_layer_type_settings_the_graph_cannot_take_are_refused():
    c = parse_hls_config({"Model": M, "LayerType": {"Pooling1D": {"Precision": {"accum": T16}}}}, "cfg.yml")
    with pytest.raises(HlsConfigError, match=r"LayerType.Pooling1D.Precision.accum: Pool 'pool' has no accumulator"):
        c.precision_spec(cnn_graph())
    c = parse_hls_config({"Model": M, "LayerName": {"flat": {"Precision": T16}}}, "cfg.yml")
    with pytest.raises(HlsConfigError, match="Reshape 'flat' moves data only"):
        c.precision_spec(cnn_graph())


def test_a_bram_factor_below_a_weight_count_is_refused():
    g = mixed_graph()
    c = parse_hls_config({"Model": {"Precision": T16, "BramFactor": 40}}, "cfg.yml")
    with pytest.raises(HlsConfigError, match=r"Model.BramFactor: Dense 'fc1': its weight has 48 elements"):
        c.precision_spec(g)
    largest = max(a.size for n in g.nodes for a in n.array_fields().values())
    assert parse_hls_config({"Model": {"Precision": T16, "BramFactor": largest}}).precision_spec(g)
    with pytest.raises(HlsConfigError, match=f"at least {largest}"):
        parse_hls_config({"Model": {"Precision": T16, "BramFactor": largest - 1}}).precision_spec(g)


def test_a_kan_accumulator_with_the_wrong_frac_is_refused_by_the_pass():
    g = mixed_graph()
    c = parse_hls_config({"Model": {"Precision": {"default": T16, "accum": "auto"}},
                          "LayerName": {"kan": {"Precision": {"accum": "ap_fixed<40,10>"}}}})
    with pytest.raises(QuantizeError, match=r"KANLayer 'kan'.*frac\(coeff\) \+ frac\(basis\) = 10 \+ 16 = 26"):
        quantize_graph(g, c.precision_spec(g))


@pytest.mark.parametrize("name, text, problem", [
    ("cfg.txt", "Model: {}", "a .yml, .yaml or .json file"),
    ("cfg.yml", "Model: [unclosed", "not valid YAML"),
    ("cfg.json", "{\"Model\": ", "not valid JSON"),
])
def test_unreadable_files_are_refused_naming_the_file(tmp_path, name, text, problem):
    (tmp_path / name).write_text(text)
    with pytest.raises(HlsConfigError, match=problem) as e:
        read_hls_config(tmp_path / name)
    assert name in str(e.value)
    with pytest.raises(HlsConfigError, match="gone.yml: no such file"):
        read_hls_config(tmp_path / "gone.yml")


# -- what hls4ml's config generators write -----------------------------------------------------------------------

def generated(layer_names: dict, **model) -> dict:
    """The shape of ``hls4ml.utils.config_from_pytorch_model(..., granularity='name')``'s output, dumped to a file."""
    return {"Model": {"Precision": {"default": T16}, "ReuseFactor": 1, "ChannelsLastConversion": "full",
                      "TransposeOutputs": False, "Strategy": "Latency", "BramFactor": 1_000_000_000,
                      "TraceOutput": False, **model},
            "PytorchModel": "Net(\n  (fc1): Linear(in_features=6, out_features=8, bias=True)\n)",
            "InputShape": [6], "LayerName": layer_names}


AUTO4 = {"Trace": False, "Precision": {"result": "auto", "weight": "auto", "bias": "auto", "accum": "auto"},
         "ReuseFactor": 1}
ACT = {"Trace": False, "Precision": {"result": "auto", "table": "fixed<18,8,TRN,WRAP,0>"}, "ReuseFactor": 1,
       "TableSize": 1024}


def test_a_generated_config_is_read_whole_and_its_extra_keys_change_nothing():
    g = mixed_graph()
    layers = {"x": {"Precision": {"result": T16}}, "fc1": {"Precision": {"result": T16, "accum": T16}},
              "relu": {"Precision": {"result": T16}}, "lr": {"Precision": {"result": T16}},
              "kan": {"Precision": {"result": T16}}}
    plain = parse_hls_config({"Model": {"Precision": {"default": T16}}, "LayerName": layers})
    full = generated({name: {**entry, "Trace": False} for name, entry in layers.items()})
    full["LayerName"]["relu"].update(TableSize=1024, Precision={"result": T16, "table": "fixed<18,8,TRN,WRAP,0>"})
    full["LayerName"]["fc1"].update(ReuseFactor=1, ParallelizationFactor=1, TableSize=512)
    c = parse_hls_config(full)
    assert c.input_shapes == ((6,),) and (c.channels_last, c.transpose_outputs) == ("full", False)
    assert c.precision_spec(g) == plain.precision_spec(g)
    wrapped = parse_hls_config({"Backend": "Vitis", "InputShape": [6], "PytorchModel": "Net()",
                                "HLSConfig": {k: v for k, v in full.items() if k not in ("InputShape",
                                                                                         "PytorchModel")}})
    assert wrapped.input_shapes == ((6,),) and wrapped.precision_spec(g) == plain.precision_spec(g)
    assert parse_hls_config({"Model": M, "InputShape": [[2, 8], [3]]}).input_shapes == ((2, 8), (3,))


@pytest.mark.parametrize("extra, graph, path, problem", [
    ({"InputShape": [8]}, mixed_graph, "InputShape", "[8] is not the input shape of graph 'mixed' (x: [6]"),
    ({"InputShape": [[6], [6]]}, mixed_graph, "InputShape", "is not the input shape"),
    ({"Model": {"Precision": T16, "ChannelsLastConversion": "internal"}}, cnn_graph, "Model.ChannelsLastConversion",
     "expects the caller to feed it channels last"),
    ({"Model": {"Precision": T16, "ChannelsLastConversion": "off"}}, cnn_graph, "Model.ChannelsLastConversion",
     "write full"),
])
def test_shapes_and_orders_other_than_the_graphs_are_refused(extra, graph, path, problem):
    c = parse_hls_config({"Model": M, **extra}, "cfg.yml")
    with pytest.raises(HlsConfigError) as e:
        c.precision_spec(graph())
    assert str(e.value).startswith(f"cfg.yml: {path}: ") and problem in str(e.value), str(e.value)


def conv_out_graph() -> ir.Graph:
    """A graph whose output has two axes (channels, length)."""
    rng = np.random.default_rng(1)
    g = ir.sequential("convout", ir.TensorSpec("x", (2, 8)), [
        (ir.Conv("conv", ("x",), ("c",), weight=_normal(rng, 4, 2, 3), bias=_normal(rng, 4), stride=(1,),
                 padding=(1, 1), dilation=(1,)), ir.TensorSpec("c", (4, 8)))])
    g.metadata["input_range"] = [-1.0, 1.0]
    return ir.validate(g)


def test_channels_last_settings_are_read_where_they_keep_the_models_order():
    """'full' reads channels first (what bitforge reads); 'internal'/'off' only matter with more than one axis;
    TransposeOutputs false leaves a multi-axis output channels last in hls4ml, true gives the model's order."""
    for mode in ("full", "internal", "off"):
        parse_hls_config({"Model": {"Precision": T16, "ChannelsLastConversion": mode}}).precision_spec(mixed_graph())
    parse_hls_config({"Model": {"Precision": T16, "ChannelsLastConversion": "full"}}).precision_spec(cnn_graph())
    parse_hls_config({"Model": {"Precision": T16, "TransposeOutputs": False}}).precision_spec(cnn_graph())
    parse_hls_config({"Model": {"Precision": T16, "TransposeOutputs": True}}).precision_spec(conv_out_graph())
    with pytest.raises(HlsConfigError, match=r"Model.TransposeOutputs: false: output 'c' has shape \[4, 8\].*"
                                             "write true"):
        parse_hls_config({"Model": {"Precision": T16, "TransposeOutputs": False}}).precision_spec(conv_out_graph())


def test_table_settings_are_ignored_on_layers_without_a_table_and_refused_on_bitforges_tables():
    g = mixed_graph()
    plain = parse_hls_config({"Model": M}).precision_spec(g)
    for entry in ({"relu": ACT}, {"fc1": {"TableSize": 64, "Precision": {"table": T16}}}, {"leaky": ACT}):
        assert parse_hls_config({"Model": M, "LayerName": entry}).precision_spec(g) == plain
    for data, path in [
        ({"Model": M, "LayerName": {"softmax": {"Precision": {"exp_table": "ap_fixed<18,8>"}}}},
         "LayerName.softmax.Precision.exp_table"),
        ({"Model": M, "LayerName": {"softmax": {"TableSize": 512}}}, "LayerName.softmax.TableSize"),
        ({"Model": {"Precision": {"default": T16, "table": T16}}}, "Model.Precision.table"),
    ]:
        with pytest.raises(HlsConfigError) as e:
            parse_hls_config(data, "cfg.yml").precision_spec(g)
        assert str(e.value).startswith(f"cfg.yml: {path}: Softmax 'softmax': bitforge builds its own lookup tables")
    c = parse_hls_config({"Model": M, "LayerType": {"Activation": ACT}}, "cfg.yml")
    with pytest.raises(HlsConfigError, match=r"cfg.yml: LayerType.Activation.Precision.table: Table 'sig': bitforge "
                                             r"builds its own lookup tables \(their size: --precision"):
        c.precision_spec(cnn_graph())
    assert parse_hls_config({"Model": {"Precision": {"default": T16, "table": T16}}}).precision_spec(conv_out_graph())


def test_hls4ml_aliases_name_the_layers_as_hls4ml_names_a_pytorch_model():
    g = ir.sequential("seq", ir.TensorSpec("input", (4,)), [
        (ir.Dense("dense_fc1", ("input",), ("h",), weight=np.ones((4, 4), np.float32)), ir.TensorSpec("h", (4,))),
        (ir.ReLU("relu_0", ("h",), ("r",)), ir.TensorSpec("r", (4,))),
        (ir.Dense("dense_layers_1", ("r",), ("a",), weight=np.ones((4, 4), np.float32)), ir.TensorSpec("a", (4,))),
        (ir.ReLU("relu_layers_1", ("a",), ("y",)), ir.TensorSpec("y", (4,)))])
    aliases = hls4ml_aliases(g)
    assert aliases["fc1"] == "dense_fc1" and aliases["_0"] == aliases["0"] == "relu_0"
    assert aliases["input_1"] == "input"
    assert "layers_1" not in aliases  # two layers would answer to it: the key must use the graph's own name
    c = parse_hls_config({"Model": M, "LayerName": {"FC1": {"Precision": {"weight": "ap_fixed<8,3>"}},
                                                    "_0": {"Precision": "ap_ufixed<8,4>"},
                                                    "input_1": {"Precision": "ap_fixed<10,3>"}}})
    spec = parse_precision(c.precision_spec(g))
    assert spec.for_node(g.node("dense_fc1"), "weight") == T("ap_fixed<8,3>")
    assert spec.for_node(g.node("relu_0"), "act") == T("ap_ufixed<8,4>") and spec.lookup("input", "act") == \
        T("ap_fixed<10,3>")
    with pytest.raises(HlsConfigError, match="no layer 'layers_1'"):
        parse_hls_config({"Model": M, "LayerName": {"layers_1": {"ReuseFactor": 2}}}).precision_spec(g)


# -- 'auto', as hls4ml infers it -----------------------------------------------------------------------------------

def test_auto_results_and_accumulators_follow_hls4mls_rules():
    """fc1: 6 inputs, x fixed<12,3>, weight and bias the default <16,6>: the sum needs 16 + 12 + 3 bits with
    6 + 3 + 3 integer bits, one more integer bit for the bias; the ReLU takes the default; ScaleShift the
    BatchNormalization rule; the LeakyReLU's one slope the narrowest type for 0.125."""
    g = mixed_graph()
    c = parse_hls_config({"Model": {"Precision": {"default": T16, "result": "auto", "accum": "auto"}},
                          "LayerName": {"x": {"Precision": {"result": "ap_fixed<12,3>"}},
                                        "leaky": {"Precision": {"param": "auto"}},
                                        "lr": {"Precision": {"result": T16}}, "kan": {"Precision": {"result": T16}}}})
    types = c.types(g)
    assert types["x"]["act"] == T("ap_fixed<12,3>")
    assert types["fc1"]["accum"] == types["fc1"]["act"] == FixedType(32, 13)
    assert types["relu"]["act"] == T(T16)
    assert types["bn"]["act"] == FixedType(33, 13)  # 16+16 bits, 12 integer; + the shift: 13 integer, 20 frac
    assert types["leaky"]["weight"] == FixedType(1, -2, False)  # 0.125 exactly: one bit at 2**-3
    assert types["lr"]["accum"] is None and types["kan"]["accum"] is None
    q = quantize_graph(g, c.precision_spec(g))
    assert q.node("fc1").accum_type == FixedType(32, 13) and q.tensors["h"].dtype == FixedType(32, 13)
    assert q.node("leaky").alpha_type == FixedType(1, -2, False) and q.tensors["s"].dtype == FixedType(33, 13)


def test_an_explicit_result_keeps_hls4mls_auto_accumulator_and_maximum_caps_both():
    g = mixed_graph()
    c = parse_hls_config({"Model": {"Precision": {"default": T16, "accum": "auto", "maximum": "ap_fixed<24,10>"}},
                          "LayerName": {"fc1": {"Precision": {"result": "ap_fixed<12,4>"}},
                                        "bn": {"Precision": {"result": "auto"}}}})
    types = c.types(g)
    assert types["fc1"]["act"] == T("ap_fixed<12,4>")
    assert types["fc1"]["accum"] == FixedType(24, 10)  # fixed<36,16> capped: width 24, integer 10
    assert types["bn"]["act"] == FixedType(24, 10)
    q = quantize_graph(g, c.precision_spec(g))
    assert q.node("fc1").accum_type == FixedType(24, 10)


def test_auto_for_add_concat_pool_and_data_movers_follows_hls4ml():
    rng = np.random.default_rng(3)
    x = ir.TensorSpec("x", (2, 8))
    g = ir.Graph("branches", ["x"], ["y"], {t.name: t for t in [
        x, ir.TensorSpec("c", (2, 8)), ir.TensorSpec("s", (2, 8)), ir.TensorSpec("p", (2, 4)),
        ir.TensorSpec("f", (8,)), ir.TensorSpec("r", (8,)), ir.TensorSpec("y", (16,))]}, [
        ir.Conv("conv", ("x",), ("c",), weight=_normal(rng, 2, 2, 3), bias=None, stride=(1,), padding=(1, 1),
                dilation=(1,)),
        ir.Add("add", ("c", "x"), ("s",)),
        ir.Pool("pool", ("s",), ("p",), mode="avg", kernel=(2,), stride=(2,), padding=(0, 0)),
        ir.Reshape("flat", ("p",), ("f",)),
        ir.ReLU("relu", ("f",), ("r",)),
        ir.Concat("cat", ("f", "r"), ("y",), axis=0)])
    g.metadata["input_range"] = [-1.0, 1.0]
    ir.validate(g)
    c = parse_hls_config({"Model": {"Precision": {"default": T16, "result": "auto"}},
                          "LayerName": {"x": {"Precision": {"result": "ap_ufixed<8,2,AP_RND,AP_SAT>"}},
                                        "relu": {"Precision": {"result": "ap_ufixed<8,4,AP_RND>"}},
                                        "pool": {"Precision": {"accum": "auto"}}}})
    types = c.types(g)
    # conv: 2 channels x 3 taps, ufixed<8,2> x fixed<16,6>: 16 + 8 + 3 bits, 6 + 2 + 3 integer (frac 16); the bias
    # hls4ml gives it (the model has none) adds an integer bit: fixed<28,12>
    conv = FixedType(28, 12)
    assert types["conv"]["act"] == conv and "bias" not in types["conv"]
    assert types["conv"]["accum"] == T(T16)  # not auto: the model default, narrow as it is
    add = FixedType(29, 13)  # max(12, 2 + 1 for the unsigned operand) + 1 integer bits, frac max(16, 6)
    assert types["add"]["act"] == add and types["pool"]["act"] == add
    # 13 integer bits (the unsigned ReLU's 4 + 1 fewer), frac 16; the first operand's TRN gives way to the RND
    cat = FixedType(29, 13, True, Rounding.RND, Overflow.WRAP)
    assert types["cat"]["act"] == cat
    q = quantize_graph(g, c.precision_spec(g))
    assert q.tensors["f"].dtype == add and q.tensors["y"].dtype == cat


def test_the_constant_type_of_a_leaky_relu_slope_is_hls4mls():
    from hls4ml.model.optimizer.passes.infer_precision import _get_precision_from_constant

    for value in (0.1, 0.01, 0.125, 0.3, 1.0, 2.0, 5.5, -0.2, -3.0, 0.0, float(np.float32(0.01)), 1e-12, 1234.5):
        assert hls4ml_constant_type(value) == _from_hls4ml(_get_precision_from_constant(value)), value


@pytest.mark.parametrize("layers, path, problem", [
    ({"lr": {"Precision": {"result": "auto"}}, "kan": {"Precision": {"result": T16}}}, "LayerName.lr.Precision.result",
     "'auto' for the result of LowRankDense 'lr': no layer of hls4ml's computes this op"),
    ({"lr": {"Precision": {"result": T16}}, "kan": {"Precision": "auto"}}, "LayerName.kan.Precision.default",
     "KANLayer 'kan'"),
    ({"lr": {"Precision": {"result": T16}}}, "Model.Precision.result", "KANLayer 'kan'"),
])
def test_auto_results_no_hls4ml_rule_infers_are_refused(layers, path, problem):
    c = parse_hls_config({"Model": {"Precision": {"default": T16, "result": "auto"}}, "LayerName": layers}, "cfg.yml")
    with pytest.raises(HlsConfigError) as e:
        c.precision_spec(mixed_graph())
    assert str(e.value).startswith(f"cfg.yml: {path}: ") and problem in str(e.value), str(e.value)


def test_auto_results_need_a_model_default_where_hls4ml_takes_it():
    c = parse_hls_config({"Model": {"Precision": {"weight": T16, "result": "auto"}}}, "cfg.yml")
    with pytest.raises(HlsConfigError, match=r"cfg.yml: Model.Precision.result: 'auto' for a graph input means "
                                             "Model.Precision.default"):
        c.precision_spec(mixed_graph())


def test_pool_accumulators_read_auto_where_hls4mls_mean_is_bitforges():
    def pooled(mode, kernel, padding=(0, 0), count_include_pad=False):
        g = ir.sequential("p", ir.TensorSpec("x", (2, 12)), [
            (ir.Pool("pool", ("x",), ("y",), mode=mode, kernel=(kernel,), stride=(kernel,), padding=padding,
                     count_include_pad=count_include_pad), ir.TensorSpec("y", (2, (12 + sum(padding)) // kernel)))])
        g.metadata["input_range"] = [-1.0, 1.0]
        return ir.validate(g)

    c = parse_hls_config({"Model": M, "LayerName": {"pool": {"Precision": {"result": "auto", "accum": "auto"}}}},
                         "cfg.yml")
    # windows of 3 (max), 4, 2 counting the pad, 1 and 2 at the padded ends, 2 and 4
    for g in (pooled("max", 3), pooled("avg", 4), pooled("avg", 2, (1, 1), True), pooled("avg", 2, (1, 1)),
              pooled("avg", 4, (2, 2))):
        assert parse_precision(c.precision_spec(g)).for_node(g.node("pool"), "act") == T(T16)
    for g, n in ((pooled("avg", 3), 3), (pooled("avg", 4, (1, 1)), 3), (pooled("avg", 3, (0, 2), True), 3)):
        with pytest.raises(HlsConfigError) as e:
            c.precision_spec(g)
        assert f"cfg.yml: LayerName.pool.Precision.accum: Pool 'pool' is an average over {n} values" in str(e.value)
    explicit = parse_hls_config({"Model": M, "LayerName": {"pool": {"Precision": {"accum": T16}}}})
    with pytest.raises(HlsConfigError, match="has no accumulator type in bitforge"):
        explicit.precision_spec(pooled("max", 3))


def test_auto_types_are_the_ones_hls4mls_own_converter_infers(tmp_path):
    """A PyTorch model with one layer of each class 'auto' has a rule for, converted by hls4ml with its generated
    config (nothing compiled): every type hls4ml's model holds is the one bitforge resolves for the same layer."""
    import hls4ml
    import torch

    from bitforge.toolchain.compiler import load_model

    class Zoo(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.act, self.pool = torch.nn.Conv1d(2, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool1d(2)
            self.bn, self.apool, self.prelu = torch.nn.BatchNorm1d(4), torch.nn.AvgPool1d(2), torch.nn.PReLU(4)
            self.flat, self.fc, self.lrelu = torch.nn.Flatten(), torch.nn.Linear(8, 6), torch.nn.LeakyReLU(0.1)
            self.fc2, self.fcbn, self.out = torch.nn.Linear(8, 6), torch.nn.BatchNorm1d(6), torch.nn.Linear(12, 3)

        def forward(self, x):
            f = self.flat(self.prelu(self.apool(self.bn(self.pool(self.act(self.conv(x)))))))
            b = self.fcbn(self.fc2(f))  # folded into fc2 by bitforge, fused into it by hls4ml ('auto' result)
            return self.out(torch.cat([self.lrelu(self.fc(f)) + b, b], dim=-1))

    torch.manual_seed(0)
    m = Zoo().eval()
    with torch.no_grad():
        for bn in (m.bn, m.fcbn):
            bn.running_mean.uniform_(-0.5, 0.5), bn.running_var.uniform_(0.5, 2.0), bn.bias.uniform_(-0.3, 0.3)
    cfg = hls4ml.utils.config_from_pytorch_model(m, input_shape=(2, 8), granularity="name", backend="Vitis",
                                                 max_precision="ap_fixed<40,16>")
    cfg["Model"]["TransposeOutputs"] = True  # the output is 1-D: either value is read
    mine = parse_hls_config(json.loads(json.dumps(cfg, default=repr)), "generated")
    hm = hls4ml.converters.convert_from_pytorch_model(m, output_dir=str(tmp_path / "zoo"), backend="Vitis",
                                                      hls_config=cfg, io_type="io_parallel")
    torch.export.save(torch.export.export(m, (torch.randn(2, 2, 8),)), tmp_path / "zoo.pt2")
    g = fold_batchnorm(load_model(str(tmp_path / "zoo.pt2")).graph)
    assert [r["scale_shift"] for r in g.metadata["folded_batchnorm"]] == ["batchnorm_fcbn"]
    types = mine.types(g)
    aliases = hls4ml_aliases(g)
    fields = {"weight": ("weight_t", "scale_t", "param_t"), "bias": ("bias_t",), "accum": ("accum_t",)}
    compared = 0
    for name, layer in hm.graph.items():
        if name.startswith("transpose_"):
            continue  # hls4ml's channels-last plumbing: moves data only
        ours = types[aliases.get(name, name)]
        theirs = _from_hls4ml(layer.get_output_variable().type.precision)
        assert ours.get("act", theirs) == theirs, name
        for field_, names in fields.items():
            for t in names:
                if field_ in ours and t in layer.types and ours[field_] is not None:
                    assert ours[field_] == _from_hls4ml(layer.types[t].precision), (name, t)
                    compared += 1
    assert compared == 16 and len(hm.graph) == 16  # 3 Dense + Conv x 3, BatchNorm x 2, PReLU, LeakyReLU; 2 transposes
    assert types["dense_out"]["accum"].width == 40  # capped by maximum


# -- the weights hls4ml writes -------------------------------------------------------------------------------------

def test_weight_values_are_the_decimals_hls4ml_writes():
    """Against hls4ml's own WeightVariable, which formats each float32 weight for the firmware's C++."""
    from hls4ml.model.types import FixedPrecisionType, IntegerPrecisionType, WeightVariable

    rng = np.random.default_rng(5)
    values = np.concatenate([rng.normal(size=3000) * 3, rng.normal(size=1000) * 1e-3,
                             [0.12499, -0.12499, 0.125, 0.375, 0.145, -0.145, 0.0, -0.0, 2.5, 1e-9]]).astype(np.float32)
    for text in ("ap_fixed<8,3>", "ap_fixed<16,6>", "ap_ufixed<6,0>", "ap_fixed<4,6>", "ap_fixed<30,2>", "ap_int<5>"):
        t = T(text)
        p = IntegerPrecisionType(t.width, t.signed) if t.rounding == Rounding.TRN_ZERO else \
            FixedPrecisionType(t.width, t.integer, t.signed)
        theirs = np.array([float(v) for v in WeightVariable("w", "w_t", p, values.reshape(10, -1))])
        ours = hls4ml_text_values(values.reshape(10, -1), t)
        assert ours.dtype == np.float64 and np.array_equal(ours.ravel(), theirs), text
    two = FixedType(8, 6)  # two decimals: the exact binary value decides, half to even on exact ties
    assert hls4ml_text_values(np.float32([0.145, 0.125, 0.375, -0.125]), two).tolist() == [0.14, 0.12, 0.38, -0.12]


def dense_graph(weight: np.ndarray) -> ir.Graph:
    g = ir.sequential("d", ir.TensorSpec("x", (weight.shape[1],)), [
        (ir.Dense("fc", ("x",), ("y",), weight=weight.astype(np.float32), bias=np.zeros(weight.shape[0], np.float32)),
         ir.TensorSpec("y", (weight.shape[0],)))])
    g.metadata["input_range"] = [-1.0, 1.0]
    return ir.validate(g)


def test_a_weight_whose_decimal_text_crosses_a_code_boundary_gets_hls4mls_code():
    """0.12499 with 4 fractional bits: hls4ml writes 0.1250, which is code 2; the float itself truncates to 1."""
    g = dense_graph(np.array([[0.12499, -0.12499, 0.3]]))
    c = parse_hls_config({"Model": {"Precision": {"default": T16, "weight": "ap_fixed<8,4>"}}})
    spec = c.precision_spec(g)
    written = c.as_hls4ml_writes(g)
    assert written.node("fc").weight.tolist() == [[0.125, -0.125, 0.3]]
    assert quantize_graph(written, spec).node("fc").weight.tolist() == [[2, -2, 4]]
    assert quantize_graph(g, spec).node("fc").weight.tolist() == [[1, -2, 4]]  # TRN: -0.12499 -> -2 either way
    assert g.node("fc").weight.dtype == np.float32 and g.node("fc").weight[0, 0] == np.float32(0.12499)


def test_every_array_hls4ml_writes_gets_its_own_types_decimals():
    g = mixed_graph()
    c = parse_hls_config({"Model": {"Precision": {"default": "ap_fixed<12,4>", "accum": "auto"}},
                          "LayerName": {"fc1": {"Precision": {"weight": "ap_fixed<6,2>", "bias": "ap_fixed<10,7>"}},
                                        "bn": {"Precision": {"scale": "ap_fixed<8,2>", "bias": "ap_fixed<7,3>"}},
                                        "lr": {"Precision": {"weight": "ap_fixed<9,2>", "bias": "ap_int<4>"}},
                                        "leaky": {"Precision": {"param": "ap_fixed<4,1>"}}}})
    written = c.as_hls4ml_writes(g)
    want = {("fc1", "weight"): "ap_fixed<6,2>", ("fc1", "bias"): "ap_fixed<10,7>", ("bn", "scale"): "ap_fixed<8,2>",
            ("bn", "shift"): "ap_fixed<7,3>", ("lr", "u"): "ap_fixed<9,2>", ("lr", "v"): "ap_fixed<9,2>",
            ("lr", "bias"): "ap_int<4>"}
    for (name, array), text in want.items():
        got, source = getattr(written.node(name), array), getattr(g.node(name), array)
        assert got.dtype == np.float64 and np.array_equal(got, hls4ml_text_values(source, T(text))), (name, array)
        assert not np.array_equal(got, source.astype(np.float64)), (name, array)  # the decimals change something
    # hls4ml writes a LeakyReLU's one slope at full precision, and has no KAN layer: both keep their values
    assert np.array_equal(written.node("leaky").alpha, g.node("leaky").alpha)
    assert np.array_equal(written.node("kan").coeffs, g.node("kan").coeffs)
    assert g.node("fc1").weight.dtype == np.float32  # the float model itself is left as it was
    quantize_graph(written, c.precision_spec(g))


def test_a_prelus_slopes_are_written_at_their_type_and_a_fixed_graph_is_dequantized_first():
    rng = np.random.default_rng(2)
    g = ir.sequential("p", ir.TensorSpec("x", (3, 4)), [
        (ir.LeakyReLU("prelu", ("x",), ("y",), alpha=np.float32([0.12345678, 0.2, 0.05126])),
         ir.TensorSpec("y", (3, 4)))])
    g.metadata["input_range"] = [-1.0, 1.0]
    c = parse_hls_config({"Model": {"Precision": {"default": T16, "param": "ap_fixed<8,1>"}}})
    assert c.as_hls4ml_writes(g).node("prelu").alpha.tolist() == [0.1234568, 0.2, 0.05126]  # 7 decimals
    q = quantize_graph(dense_graph(rng.normal(size=(3, 4))), "ap_fixed<16,6>")
    written = c.as_hls4ml_writes(q)
    assert all(t.is_float for t in written.tensors.values())
    codes = q.node("fc").weight
    assert np.array_equal(written.node("fc").weight, hls4ml_text_values(np.ldexp(codes.astype(np.float64), -10),
                                                                          T(T16)))


# -- BatchNorms folded where hls4ml fuses them ---------------------------------------------------------------------

def bn_graph() -> ir.Graph:
    """Dense -> BatchNorm -> ReLU, named as the torch frontend names a model's fc1, bn1 and act1."""
    rng = np.random.default_rng(4)
    g = ir.sequential("bn", ir.TensorSpec("x", (6,)), [
        (ir.Dense("dense_fc1", ("x",), ("h",), weight=_normal(rng, 8, 6), bias=_normal(rng, 8)),
         ir.TensorSpec("h", (8,))),
        (ir.ScaleShift("batchnorm_bn1", ("h",), ("s",), scale=1 + _normal(rng, 8, scale=0.2), shift=_normal(rng, 8)),
         ir.TensorSpec("s", (8,))),
        (ir.ReLU("relu_act1", ("s",), ("y",)), ir.TensorSpec("y", (8,)))])
    g.metadata["input_range"] = [-1.0, 1.0]
    return ir.validate(g)


def cnn_bn_graph() -> ir.Graph:
    """Conv -> BatchNorm -> ReLU -> Reshape -> Dense -> BatchNorm, and a BatchNorm after the ReLU (no layer to fold
    into), named as the torch frontend names a model's conv, bn, act, flat, fc, fcbn and bn2."""
    rng = np.random.default_rng(5)
    g = ir.sequential("cnnbn", ir.TensorSpec("x", (2, 4)), [
        (ir.Conv("conv_conv", ("x",), ("c",), weight=_normal(rng, 3, 2, 3), bias=_normal(rng, 3), stride=(1,),
                 padding=(1, 1), dilation=(1,)), ir.TensorSpec("c", (3, 4))),
        (ir.ScaleShift("batchnorm_bn", ("c",), ("b",), scale=1 + _normal(rng, 3, scale=0.2), shift=_normal(rng, 3)),
         ir.TensorSpec("b", (3, 4))),
        (ir.ReLU("relu_act", ("b",), ("r",)), ir.TensorSpec("r", (3, 4))),
        (ir.ScaleShift("batchnorm_bn2", ("r",), ("b2",), scale=1 + _normal(rng, 3, scale=0.2),
                       shift=_normal(rng, 3)), ir.TensorSpec("b2", (3, 4))),
        (ir.Reshape("reshape_flat", ("b2",), ("f",)), ir.TensorSpec("f", (12,))),
        (ir.Dense("dense_fc", ("f",), ("d",), weight=_normal(rng, 5, 12), bias=_normal(rng, 5)),
         ir.TensorSpec("d", (5,))),
        (ir.ScaleShift("batchnorm_fcbn", ("d",), ("y",), scale=1 + _normal(rng, 5, scale=0.2),
                       shift=_normal(rng, 5)), ir.TensorSpec("y", (5,)))])
    g.metadata["input_range"] = [-1.0, 1.0]
    return ir.validate(g)


@pytest.mark.parametrize("layer_names, kept", [
    ({}, {"batchnorm_bn", "batchnorm_fcbn"}),  # Model-only: every result explicit, hls4ml fuses nothing
    ({"conv": {"Precision": {"result": "auto"}}}, {"batchnorm_fcbn"}),
    ({"fc": {"Precision": {"result": "auto"}}, "conv": {"Precision": {"result": "auto"}}}, set()),
    ({"fc": {"Precision": {"result": "auto", "accum": T16}}, "bn": {"Precision": {"result": "auto"}}},
     {"batchnorm_bn"}),  # the BatchNorm's own entry does not decide: the layer before it does
])
def test_kept_batchnorms_are_the_ones_after_an_explicit_result(layer_names, kept):
    """hls4ml fuses a BatchNormalization only into a Dense/Conv whose result is 'auto' (FuseBatchNormalization);
    one after a ReLU has no layer to fuse into either way, and folding never touches it."""
    g = cnn_bn_graph()
    c = parse_hls_config({"Model": M, "LayerName": layer_names})
    assert c.kept_batchnorms(g) == kept
    folded = fold_batchnorm(g, keep=c.kept_batchnorms(g))
    assert {n.name for n in folded.nodes if isinstance(n, ir.ScaleShift)} == kept | {"batchnorm_bn2"}
    c.precision_spec(folded)  # every fold left is one hls4ml makes: nothing refused


def test_kept_batchnorms_read_layer_type_entries_and_refuse_unknown_names():
    g = cnn_bn_graph()
    c = parse_hls_config({"Model": M, "LayerType": {"Conv1D": {"Precision": {"result": "auto"}}}})
    assert c.kept_batchnorms(g) == {"batchnorm_fcbn"}
    with pytest.raises(HlsConfigError, match="cfg.yml: LayerName.fc9: graph 'cnnbn' has no layer 'fc9'"):
        parse_hls_config({"Model": M, "LayerName": {"fc9": {"Precision": T16}}}, "cfg.yml").kept_batchnorms(g)


def test_a_batchnorm_folded_after_an_explicit_result_is_refused_and_after_auto_read():
    """A graph folded without the kept BatchNorms (fold_batchnorm alone, or an output folder compiled without
    the config) holds a fold hls4ml would not make: refused, naming the key that made the result explicit."""
    g = fold_batchnorm(bn_graph())
    with pytest.raises(HlsConfigError, match=r"cfg.yml: Model.Precision.default: BatchNorm 'batchnorm_bn1' follows "
                                             r"Dense 'dense_fc1', whose result type is ap_fixed<16,6>: hls4ml then "
                                             r"keeps the BatchNormalization.*folded into 'dense_fc1'.*"
                                             r"keep=HlsConfig.kept_batchnorms\(g\)"):
        parse_hls_config({"Model": M}, "cfg.yml").precision_spec(g)
    with pytest.raises(HlsConfigError, match="cfg.yml: LayerName.fc1.Precision.result: BatchNorm 'batchnorm_bn1'"):
        parse_hls_config({"Model": M, "LayerName": {"fc1": {"Precision": {"result": T16}}}}, "cfg.yml") \
            .precision_spec(g)
    c = parse_hls_config(generated({"x": {"Precision": {"result": "auto"}}, "fc1": AUTO4,
                                    "bn1": {"Precision": {"result": "auto", "scale": "ap_fixed<4,1>", "bias": "auto"}},
                                    "act1": ACT}))
    assert c.kept_batchnorms(bn_graph()) == frozenset()
    types = c.types(g)
    assert types["dense_fc1"]["act"] == FixedType(16 + 16 + 3 + 1, 6 + 6 + 3 + 1)  # the fused layer's 'auto'
    assert "batchnorm_bn1" not in types  # hls4ml fused it too: its entry types nothing
    kept = parse_hls_config({"Model": M})
    assert kept.kept_batchnorms(bn_graph()) == {"batchnorm_bn1"}
    kept.precision_spec(fold_batchnorm(bn_graph(), keep=kept.kept_batchnorms(bn_graph())))  # a layer of its own


def _full_sum_codes(x: FixedType, s: FixedType, b: FixedType) -> tuple[int, int]:
    """The least and greatest ``x * scale + bias`` codes over every code of the three types, by brute force
    over the types' extreme codes and zero (the sum is monotone in each operand)."""
    frac = x.frac + s.frac
    sums = [xc * sc + (bc << (frac - b.frac)) for xc in (x.min_code, 0, x.max_code)
            for sc in (s.min_code, 0, s.max_code) for bc in (b.min_code, 0, b.max_code)]
    return min(sums), max(sums)


@pytest.mark.parametrize("x, scale, bias", [
    (T16, T16, T16), ("ap_ufixed<9,3>", "ap_fixed<11,3>", T16), ("ap_fixed<8,8>", "ap_ufixed<6,1>", "ap_fixed<4,4>"),
    ("ap_fixed<24,10>", "ap_fixed<18,2>", "ap_ufixed<30,8>"),
])
def test_a_kept_batchnorm_gets_an_accumulator_that_holds_its_whole_sum(x, scale, bias):
    """hls4ml's BatchNormalization adds at full precision; the spec gives bitforge's ScaleShift an accumulator
    at frac(x) + frac(scale) that holds the sum for every code of the types, and no narrower one."""
    g = ir.sequential("b", ir.TensorSpec("x", (3,)), [
        (ir.ScaleShift("bn", ("x",), ("y",), scale=np.array([1.5, -0.25, 0.75], np.float32),
                       shift=np.array([0.5, -1.0, 0.0], np.float32)), ir.TensorSpec("y", (3,)))])
    c = parse_hls_config({"Model": M, "LayerName": {"x": {"Precision": {"result": x}},
                                                    "bn": {"Precision": {"scale": scale, "bias": bias}}}})
    accum = parse_precision(c.precision_spec(g)).for_node(g.node("bn"), "accum")
    assert c.types(g)["bn"]["accum"] == accum
    xt, st, bt = T(x), T(scale), T(bias)
    lo, hi = _full_sum_codes(xt, st, bt)
    assert accum.frac == xt.frac + st.frac and accum.signed and accum.overflow == Overflow.WRAP
    assert accum.min_code <= lo and hi <= accum.max_code
    assert not (accum.min_code // 2 <= lo and hi <= accum.max_code // 2)  # one bit fewer would not hold it


def test_a_batchnorm_bias_finer_than_its_product_is_refused_naming_the_key():
    """hls4ml adds such a bias at full precision; bitforge's ScaleShift adds its shift to the exact product."""
    g = ir.validate(ir.sequential("bn", ir.TensorSpec("x", (2,)), [
        (ir.ScaleShift("batchnorm_bn1", ("x",), ("y",), scale=np.array([1.5, -0.25], np.float32),
                       shift=np.array([0.5, -0.375], np.float32)), ir.TensorSpec("y", (2,)))]))
    c = parse_hls_config({"Model": M, "LayerName": {"x": {"Precision": {"result": "ap_fixed<8,8>"}},
                                                   "bn1": {"Precision": {"bias": "ap_fixed<16,2>"}}}}, "cfg.yml")
    with pytest.raises(HlsConfigError, match=r"cfg.yml: LayerName.bn1.Precision.bias: ScaleShift 'batchnorm_bn1': "
                                             r"bias type ap_fixed<16,2> has 14 fractional bits, more than the "
                                             r"product.*0 \+ 10 = 10.*at most 10"):
        c.types(g)
    ok = parse_hls_config({"Model": M, "LayerName": {"x": {"Precision": {"result": "ap_fixed<8,4>"}},
                                                    "bn1": {"Precision": {"bias": "ap_fixed<16,2>"}}}})
    assert ok.types(g)["batchnorm_bn1"]["bias"] == T("ap_fixed<16,2>")  # 14 = 4 + 10: exact, accepted


def test_a_softmax_replaced_by_argmax_takes_no_settings():
    """--softmax argmax computes the ArgMax of the logits: the generated config's Softmax entry (its tables, accum and
    result) has nothing to set, as it would be refused on bitforge's own Softmax."""
    from bitforge.toolchain.passes.heads import argmax_head

    g = mixed_graph()
    sm = {"Trace": False, "Precision": {"result": "auto", "table": "fixed<18,8,TRN,WRAP,0>", "accum": T16},
          "TableSize": 1024, "Implementation": "stable", "Skip": False}
    c = parse_hls_config({"Model": M, "LayerName": {"softmax": sm}}, "cfg.yml")
    with pytest.raises(HlsConfigError, match="cfg.yml: LayerName.softmax"):
        c.precision_spec(g)
    head = argmax_head(g)
    assert c.precision_spec(head) == parse_hls_config({"Model": M}).precision_spec(head)
