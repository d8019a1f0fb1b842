"""Conv and Pool stages (toolchain/backends/rtl/conv.py) on Icarus and Verilator, bit-exact with emulate.run.

Every stage below is emitted exactly as the RTL generator emits it (a StageRequest per node) into one wrapper
top, one build per simulator, and streamed through the library bench (cocotb_lib_bench.py): the first samples
back to back with the output always ready measure latency and II against what the emitter promised, the rest
come with random input gaps and output stalls, every output checked against the golden model and the
AXI4-Stream rules. The cases cover 1-D and 2-D windows, stride, asymmetric padding, dilation, groups (depthwise),
a folded conv (reuse > 1, grouped: one bf_dense_folded per group in lockstep) with a fused ReLU, saturating and
wrapping accumulators, max pooling over padding, and average pools whose divisors are not powers of two (one
with reciprocals wider than bf_const_mul's 30 bits, one counting the padding, unsigned).
"""
from __future__ import annotations

import functools
import math
import os
import subprocess

import numpy as np
import pytest
from bitforge.toolchain import emulate, ir
from bitforge.toolchain.backends.rtl import conv
from bitforge.toolchain.backends.rtl.generate import RtlOptions, generate
from bitforge.toolchain.backends.rtl.reuse import Budget, choose_reuse
from bitforge.toolchain.backends.rtl.stages import EMITTERS, FOLDABLE, MULTIPLIES, Ports, Stage, StageRequest
from bitforge.toolchain.backends.rtl.verilog import RtlError
from bitforge.toolchain.backends.rtl.verilog import pack_word as pack
from bitforge.toolchain.backends.rtl.weights_layout import WeightsError, weight_layout
from bitforge.toolchain.fixed import FixedType, parse_type
from bitforge.toolchain.passes.precision import infer_precision
from bitforge.toolchain.verify.simulators import simulator_env
from rtl_bench import RTL, SIMULATORS, assert_ok, fields, random_codes, simulate, stream_ports, top_text

T = parse_type
X8 = T("fixed<8,3>")
W6, B8 = T("fixed<6,1>"), T("fixed<8,3>")
TOP = "window_stages"
SEED = 11


def _graph(name: str, x: ir.TensorSpec, layers: list[tuple[ir.Node, ir.TensorSpec]]) -> ir.Graph:
    tensors = {x.name: x} | {s.name: s for _, s in layers}
    g = ir.Graph(name, [x.name], [layers[-1][1].name], tensors, [n for n, _ in layers])
    return ir.validate(infer_precision(ir.validate(g)))


def _codes(rng, t: FixedType, shape) -> np.ndarray:
    return rng.integers(t.min_code, t.max_code, size=shape, endpoint=True, dtype=np.int64)


def _conv(rng, name, x_shape, w_shape, out_shape, out_type, accum=None, relu_type=None, x_type=X8, **attrs):
    node = ir.Conv(name, ("x",), ("y",), weight=_codes(rng, W6, w_shape), bias=_codes(rng, B8, w_shape[0]),
                   weight_type=W6, bias_type=B8, accum_type=accum, **attrs)
    layers = [(node, ir.TensorSpec("y", out_shape, out_type))]
    if relu_type is not None:
        layers.append((ir.ReLU("relu", ("y",), ("z",)), ir.TensorSpec("z", out_shape, relu_type)))
    return _graph(name, ir.TensorSpec("x", x_shape, x_type), layers)


def _pool(name, x_shape, out_shape, out_type, x_type=X8, **attrs):
    node = ir.Pool(name, ("x",), ("y",), **attrs)
    return _graph(name, ir.TensorSpec("x", x_shape, x_type), [(node, ir.TensorSpec("y", out_shape, out_type))])


#: Accumulators narrow enough to overflow often (frac = frac(x) + frac(W) = 10), both wrapping: a saturating one
#: that a partial sum can leave saturates in input order (docs/ir.md), which the RTL refuses (tests/test_accumulate).
ACC_NARROW = FixedType(13, 3)
ACC_WRAP = FixedType(12, 2)


def cases() -> dict[str, tuple[ir.Graph, int, int]]:
    """name -> (graph, reuse, vectors)."""
    rng = np.random.default_rng(SEED)
    return {
        "conv1d_stride_pad_dilation": (_conv(rng, "conv1d_stride_pad_dilation", (3, 13), (4, 3, 3), (4, 6),
                                             T("fixed<8,3,RND_CONV,SAT>"), ACC_NARROW, stride=(2,), padding=(2, 1),
                                             dilation=(2,)), 1, 200),
        "conv2d_depthwise_asym_pads": (_conv(rng, "conv2d_depthwise_asym_pads", (4, 5, 6), (4, 1, 3, 3), (4, 6, 3),
                                             T("fixed<7,2,RND,SAT_SYM>"), ACC_WRAP, stride=(1, 2),
                                             padding=(1, 0, 2, 1), dilation=(1, 1), groups=4), 1, 150),
        # groups 2, reuse 3: each group's 12 x 3 window Dense folded by 3 (a bf_dense_folded per group)
        "conv2d_grouped_folded": (_conv(rng, "conv2d_grouped_folded", (4, 4, 5), (6, 2, 2, 3), (6, 4, 4),
                                        T("fixed<8,3,RND_CONV,SAT>"), stride=(1, 1), padding=(0, 1, 1, 0),
                                        dilation=(1, 1), groups=2), 3, 60),
        "conv1d_folded_relu": (_conv(rng, "conv1d_folded_relu", (2, 9), (5, 2, 4), (5, 9),
                                     T("fixed<9,4,RND,SAT>"), relu_type=T("ufixed<7,3,RND,SAT>"), stride=(1,),
                                     padding=(1, 2), dilation=(1,)), 4, 80),
        "max2d_padded": (_pool("max2d_padded", (3, 5, 6), (3, 3, 3), T("fixed<6,2,RND,SAT>"), mode="max",
                               kernel=(3, 2), stride=(2, 2), padding=(1, 0, 1, 1)), 1, 200),
        # divisors 2 (the edges) and 3: reciprocals of 32 and 31 bits at recip_frac 32
        "avg1d_wide_reciprocals": (_pool("avg1d_wide_reciprocals", (2, 7), (2, 7), T("fixed<9,4,RND_CONV,SAT>"),
                                         mode="avg", kernel=(3,), stride=(1,), padding=(1, 1),
                                         count_include_pad=False, recip_frac=32), 1, 200),
        "avg2d_include_pad_unsigned": (_pool("avg2d_include_pad_unsigned", (2, 6, 6), (2, 3, 3),
                                             T("ufixed<6,3,RND,SAT>"), x_type=T("ufixed<8,4>"), mode="avg",
                                             kernel=(3, 3), stride=(2, 2), padding=(1, 1, 0, 0),
                                             count_include_pad=True, recip_frac=10), 1, 200),
    }


CASES = list(cases())


def request(g: ir.Graph, reuse: int, ports: Ports, instance: str) -> StageRequest:
    n = g.nodes[0]
    relu = g.nodes[1] if len(g.nodes) > 1 else None
    x, y = g.tensors[n.inputs[0]], g.tensors[(relu or n).output]
    return StageRequest(g, n, x.dtype, math.prod(x.shape), g.tensors[n.output].dtype, math.prod(y.shape), ports,
                        instance, reuse, relu_type=y.dtype if relu else None)


def emit(g: ir.Graph, reuse: int = 1, prefix: str = "", instance: str = "u0") -> Stage:
    ports = Ports("clk", "rst", *(f"{prefix}{s}" for s in ("in_valid", "in_ready", "in_data", "out_valid",
                                                             "out_ready", "out_data")))
    return EMITTERS[g.nodes[0].OP](request(g, reuse, ports, instance))


@functools.lru_cache(maxsize=1)
def design() -> tuple[str, tuple[str, ...], tuple[dict, ...], dict[str, Stage]]:
    """The wrapper top (with the generated sequencers after it), its rtl/ files, the bench plan, the stages."""
    ports, body, duts, library, stages, modules = [], [], [], set(), {}, []
    rng = np.random.default_rng(SEED + 1)
    for name, (g, reuse, count) in cases().items():
        p = f"{name}_"
        st = emit(g, reuse, p, f"u_{name}")
        stages[name] = st
        x, y = g.tensors[g.inputs[0]], g.tensors[g.outputs[0]]
        n_in, n_out = math.prod(x.shape), math.prod(y.shape)
        xs = random_codes(rng, x.dtype, (count, *x.shape))
        ys = emulate.run(g, {g.inputs[0]: xs})[g.outputs[0]]
        ports += stream_ports(p, n_in * x.dtype.width, n_out * y.dtype.width)
        body.append(st.instance)
        modules += list(st.generated.values())
        library.update(st.library)
        duts.append({"kind": "stream", "name": name, "prefix": p, "latency": st.latency, "ii": st.ii,
                     "inputs": [pack(r.ravel(), x.dtype.width) for r in xs],
                     "expected": [pack(r.ravel(), y.dtype.width) for r in ys],
                     "in_fields": fields("x", x.dtype, n_in), "out_fields": fields("y", y.dtype, n_out)})
    top = top_text(TOP, ports, body) + "".join(modules)
    return top, tuple(sorted(library)), tuple(duts), stages


@pytest.fixture(scope="module", params=SIMULATORS)
def results(request):
    top, library, duts, _ = design()
    return simulate(request.param, TOP, top, library, list(duts), SEED)


# -- simulation -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES)
def test_stage_matches_golden_model_under_backpressure(results, case):
    r = assert_ok(results, case)
    assert r["outputs"] == cases()[case][2]


@pytest.mark.parametrize("case", CASES)
def test_measured_latency_and_ii_equal_the_emitters(results, case):
    """II is the steady rate. The sequencer holds a tensor while its last window waits, so at the start of a
    burst a folded stage (reuse R) takes its second tensor 2 (R - 1) cycles early, then one every II."""
    r, st = assert_ok(results, case), design()[3][case]
    assert (r["latency"], r["ii_min"], r["ii_max"]) == (st.latency, st.ii - 2 * (st.reuse - 1), st.ii)


# -- what the emitters promise ------------------------------------------------------------------------------------

def test_one_output_position_per_clock_or_per_reuse_cycles():
    stages = design()[3]
    positions = {name: math.prod(g.tensors[g.outputs[0]].shape[1:]) for name, (g, _, _) in cases().items()}
    for name, st in stages.items():
        assert st.resources["positions"] == positions[name]
        assert st.ii == positions[name] * st.reuse, name
    assert stages["conv2d_grouped_folded"].reuse == 3 and stages["conv1d_folded_relu"].reuse == 4


def test_folded_grouped_conv_has_one_folded_dense_per_group_and_reuse_auto_counts_its_multipliers():
    g, reuse, _ = cases()["conv2d_grouped_folded"]
    n = g.nodes[0]
    st = design()[3]["conv2d_grouped_folded"]
    assert st.instance.count("bf_dense_folded #(") == n.groups == 2
    assert st.resources["multipliers"] == FOLDABLE["Conv"](n, reuse) == 2 * -(-(12 * 3) // 3)
    assert MULTIPLIES["Conv"](n) == n.weight.size and FOLDABLE["Conv"](n, 1) == n.weight.size
    # --reuse auto on a budget of 8 multipliers: the count it budgets is the one the emitted stage builds
    choice = choose_reuse(g, g.nodes, Budget(dsp=16, lut=0), (8, 6))
    r = choice.reuse[n.name]
    assert choice.multipliers <= choice.capacity == 8
    assert emit(g, r).resources["multipliers"] == choice.multipliers
    assert FOLDABLE["Conv"](n, r - 1) > 8  # and it is the smallest reuse that fits


def test_a_group_of_one_product_does_not_fold():
    """A 1x1 depthwise kernel: one product per group and window, so --reuse 4 leaves it at reuse 1 (the shared
    graph, II = positions) rather than folding the block-diagonal zeros, and reuse auto counts it so."""
    g = _conv(np.random.default_rng(3), "dw1x1", (3, 4), (3, 1, 1), (3, 4), X8, stride=(1,), padding=(0, 0),
              dilation=(1,), groups=3)
    st = emit(g, 4)
    assert (st.reuse, st.ii) == (1, 4) and "bf_dense_folded" not in st.instance
    assert FOLDABLE["Conv"](g.nodes[0], 4) == g.nodes[0].weight.size == 3


def test_reuse_1_conv_is_one_shared_graph_of_constant_multipliers_for_every_position():
    st = design()[3]["conv2d_depthwise_asym_pads"]
    assert st.reuse == 1 and st.resources["multipliers"] == 0 and "bf_dense_folded" not in st.instance
    g = cases()["conv2d_depthwise_asym_pads"][0]
    # depthwise: the window Dense is block-diagonal, its zeros are not built
    assert st.resources["nonzero_weights"] == np.count_nonzero(g.nodes[0].weight)


def test_fused_relu_changes_the_output_type():
    g = cases()["conv1d_folded_relu"][0]
    d = generate(g, RtlOptions(reuse=4))
    assert [layer.op for layer in d.layers] == ["Conv+ReLU"] and d.layers[0].fused == ["relu"]


def test_emitted_text_is_deterministic():
    a, b = emit(cases()["max2d_padded"][0]), emit(cases()["max2d_padded"][0])
    assert a.instance == b.instance and a.generated == b.generated
    c = cases()["avg1d_wide_reciprocals"][0]
    assert emit(c).generated == emit(c).generated


def test_average_pool_reciprocals_are_the_golden_models():
    g = cases()["avg1d_wide_reciprocals"][0]
    st = emit(g)
    recips = sorted({int(r) for r in emulate.pool_reciprocals(g.nodes[0], (7,))})
    assert recips == [round(2 ** 32 / 3), 2 ** 31]
    width = max(r.bit_length() for r in recips)
    assert f".REC_W({width})" in st.instance and width > 30 and f".D({len(recips)})" in st.instance


def test_weights_ram_is_refused_for_conv():
    g = cases()["conv1d_stride_pad_dilation"][0]
    with pytest.raises(WeightsError, match="Conv"):
        weight_layout(g, 1)
    from bitforge.toolchain.backends.rtl.stages import WritePort

    req = request(g, 1, Ports(*["p"] * 8), "u0")
    with pytest.raises(RtlError, match="--weights ram is not built for Conv"):
        EMITTERS["Conv"](StageRequest(**{**req.__dict__, "write_port": WritePort(8, 8, {"weight": 0})}))


# -- lint -----------------------------------------------------------------------------------------------------------

def test_verilator_lint_is_clean(tmp_path):
    """The wrapper (only instances) and each generated sequencer in a file of its own name."""
    _, library, _, stages = design()
    ports, body = [], []
    for name, st in stages.items():
        for file, text in st.generated.items():
            (tmp_path / file).write_text(text)
        g = cases()[name][0]
        ports += stream_ports(f"{name}_", math.prod(g.tensors[g.inputs[0]].shape) * g.tensors[g.inputs[0]].dtype.width,
                              math.prod(g.tensors[g.outputs[0]].shape) * g.tensors[g.outputs[0]].dtype.width)
        body.append(st.instance)
    (tmp_path / f"{TOP}.v").write_text(top_text(TOP, ports, body))
    env = {**os.environ, **simulator_env("verilator")}
    r = subprocess.run(["verilator", "--lint-only", "-Wall", "--top-module", TOP, *map(str, tmp_path.glob("*.v")),
                        *(str(RTL / f) for f in library)], capture_output=True, text=True, env=env, check=False)
    assert r.returncode == 0 and "%Warning" not in r.stderr, r.stderr[:4000]
