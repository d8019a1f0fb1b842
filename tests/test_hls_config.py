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
from bitforge.toolchain.passes.hls_config import (HlsConfigError, hls_class, parse_hls_config, parse_hls_type,
                                                  read_hls_config)
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
    assert spec.for_node(nodes["kan"], "accum") is None and spec.for_node(nodes["bn"], "accum") is None


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
    ({"Model": M, "LayerName": {"fc1": {"Precision": {"table": "ap_fixed<18,8>"}}}},
     "LayerName.fc1.Precision.table", "bitforge builds its own lookup tables"),
    ({"Model": M, "LayerName": {"sm": {"Precision": {"exp_table": "ap_fixed<18,8>"}}}},
     "LayerName.sm.Precision.exp_table", "table_size=N"),
    ({"Model": M, "LayerName": {"sig": {"table_size": 512}}}, "LayerName.sig.table_size", "table_size=N"),
    ({"Model": {"Precision": {"default": T16, "maximum": "ap_fixed<32,16>"}}}, "Model.Precision.maximum",
     "caps hls4ml's 'auto'"),
    ({"Model": {"Precision": {"default": T16, "recurrent_weight": T16}}}, "Model.Precision.recurrent_weight",
     "does not map this Precision variable"),
    ({"Model": M, "LayerName": {"fc1": {"Precision": {"result": "auto"}}}}, "LayerName.fc1.Precision.result",
     "'auto' for a result"),
    ({"Model": M, "LayerType": {"Dense": {"Precision": "auto"}}}, "LayerType.Dense.Precision", "'auto' for a result"),
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
     "does not understand"),
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
    ({"HLSConfig": {"Model": {"Precision": {"default": T16, "table": T16}}}}, "HLSConfig.Model.Precision.table",
     "lookup tables"),
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
