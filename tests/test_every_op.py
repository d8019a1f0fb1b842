"""Every IR op through every stage, so an op cannot be half-added.

The ops are discovered from ``toolchain/ir.py`` (every ``Node`` subclass defined there), so a new op class is
picked up here without editing this file, and then fails until

1. :data:`FIXED` has a builder for it (a small fixed-point graph with that op), and :data:`FLOAT` one for its
   float form, or :data:`UNSUPPORTED` says why it has none;
2. every stage has a rule for it, or :data:`UNSUPPORTED` names the stage and says why it deliberately has none.

The stages: the IR itself (``ir.OPS``, validate, save/load), the precision pass (it sizes the builders'
accumulators), the golden model (``emulate``), the interval analysis (sound: every golden value lies inside its
tensor's bounds), the ONNX backend (ONNX Runtime agrees with the golden model bit for bit; float graphs within
the stated float tolerance) and the RTL backend (a stage of the op's own; in the slow step, a short Icarus
simulation of the design, bit-exact). An op listed as unsupported by a stage must really be refused by it with
a user-facing error, so the list stays true when support is added.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pytest

from bitforge.toolchain import emulate, ir
from bitforge.toolchain.backends.onnx_backend import run_onnxruntime, to_onnx
from bitforge.toolchain.backends.rtl.generate import RtlOptions, generate
from bitforge.toolchain.bspline import index_params
from bitforge.toolchain.compiler import CompileOptions, write_rtl
from bitforge.toolchain.errors import BitforgeError
from bitforge.toolchain.fixed import FixedType, parse_type
from bitforge.toolchain.passes.intervals import analyze
from bitforge.toolchain.passes.precision import infer_precision
from bitforge.toolchain.verify.compare import FLOAT_ATOL, FLOAT_RTOL
from bitforge.toolchain.verify.simulate import simulate


def ir_ops() -> list[type[ir.Node]]:
    """Every op class of the IR: the Node subclasses defined in toolchain/ir.py."""
    found, todo = [], [ir.Node]
    while todo:
        for c in todo.pop().__subclasses__():
            todo.append(c)
            if c.__module__ == ir.__name__:
                found.append(c)
    return sorted(found, key=lambda c: c.OP)


OPS = [c.OP for c in ir_ops()]
ROWS = 400  # vectors per graph: random codes with every input's edge codes mixed in
SIM_VECTORS = 40

# -- small graphs, one per op ---------------------------------------------------------------------------------

T = parse_type


def _codes(rng: np.random.Generator, t: FixedType, shape) -> np.ndarray:
    return rng.integers(t.min_code, t.max_code, size=shape, endpoint=True, dtype=np.int64)


def _graph(name: str, inputs: list[ir.TensorSpec], layers: list[tuple[ir.Node, ir.TensorSpec]]) -> ir.Graph:
    tensors = {s.name: s for s in inputs} | {s.name: s for _, s in layers}
    g = ir.Graph(name, [s.name for s in inputs], [layers[-1][1].name], tensors, [n for n, _ in layers])
    return ir.validate(infer_precision(ir.validate(g)))  # the precision pass sizes any accumulator left unset


X8 = T("fixed<8,3,TRN,WRAP>")
W6, B8 = T("fixed<6,1>"), T("fixed<8,3>")
OUT = T("fixed<10,4,RND_CONV,SAT>")


def fixed_quantize(rng) -> ir.Graph:
    return _graph("op_quantize", [ir.TensorSpec("x", (5,))],
                  [(ir.Quantize("q", ("x",), ("y",)), ir.TensorSpec("y", (5,), T("fixed<8,3,RND_CONV,SAT>")))])


def fixed_requantize(rng) -> ir.Graph:
    return _graph("op_requantize", [ir.TensorSpec("x", (5,), T("fixed<10,4>"))],
                  [(ir.Requantize("rq", ("x",), ("y",)), ir.TensorSpec("y", (5,), T("fixed<6,2,RND,SAT>")))])


def fixed_relu(rng) -> ir.Graph:
    return _graph("op_relu", [ir.TensorSpec("x", (5,), X8)],
                  # signed: a ReLU that forgot max(x, 0) would keep the negative codes (an unsigned type's
                  # saturation would hide that)
                  [(ir.ReLU("relu", ("x",), ("y",)), ir.TensorSpec("y", (5,), T("fixed<7,3,RND,SAT>")))])


def fixed_add(rng) -> ir.Graph:
    return _graph("op_add", [ir.TensorSpec("a", (5,), X8), ir.TensorSpec("b", (5,), T("fixed<6,1>"))],
                  [(ir.Add("add", ("a", "b"), ("y",)), ir.TensorSpec("y", (5,), T("fixed<8,4,RND,SAT>")))])


def fixed_dense(rng) -> ir.Graph:
    node = ir.Dense("fc", ("x",), ("y",), weight=_codes(rng, W6, (4, 6)), bias=_codes(rng, B8, 4), weight_type=W6,
                    bias_type=B8)
    return _graph("op_dense", [ir.TensorSpec("x", (6,), X8)], [(node, ir.TensorSpec("y", (4,), OUT))])


def fixed_low_rank_dense(rng) -> ir.Graph:
    node = ir.LowRankDense("lr", ("x",), ("y",), u=_codes(rng, W6, (4, 2)), v=_codes(rng, W6, (2, 6)),
                           bias=_codes(rng, B8, 4), u_type=W6, v_type=W6, bias_type=B8,
                           mid_type=T("fixed<10,4,RND,SAT>"))
    return _graph("op_low_rank_dense", [ir.TensorSpec("x", (6,), X8)], [(node, ir.TensorSpec("y", (4,), OUT))])


def fixed_kan(rng) -> ir.Graph:
    lo, hi, size, order = -2.0, 2.0, 4, 3
    index_lo, mult, shift, u_bits = index_params(lo, hi, size, X8)
    ct, bt = T("fixed<8,2>"), T("ufixed<10,1>")
    node = ir.KANLayer("kan", ("x",), ("y",), coeffs=_codes(rng, ct, (2, 3, size + order)), grid_lo=lo, grid_hi=hi,
                       grid_size=size, order=order, coeff_type=ct, basis_type=bt, u_bits=u_bits, index_lo=index_lo,
                       index_mult=mult, index_shift=shift)
    return _graph("op_kan", [ir.TensorSpec("x", (3,), X8)], [(node, ir.TensorSpec("y", (2,), OUT))])


def _f(rng, *shape) -> np.ndarray:
    return rng.normal(0, 0.5, shape).astype(np.float32)


def float_relu(rng) -> ir.Graph:
    return _graph("float_relu", [ir.TensorSpec("x", (5,))],
                  [(ir.ReLU("relu", ("x",), ("y",)), ir.TensorSpec("y", (5,)))])


def float_add(rng) -> ir.Graph:
    return _graph("float_add", [ir.TensorSpec("a", (5,)), ir.TensorSpec("b", (5,))],
                  [(ir.Add("add", ("a", "b"), ("y",)), ir.TensorSpec("y", (5,)))])


def float_dense(rng) -> ir.Graph:
    node = ir.Dense("fc", ("x",), ("y",), weight=_f(rng, 4, 6), bias=_f(rng, 4))
    return _graph("float_dense", [ir.TensorSpec("x", (6,))], [(node, ir.TensorSpec("y", (4,)))])


def float_low_rank_dense(rng) -> ir.Graph:
    node = ir.LowRankDense("lr", ("x",), ("y",), u=_f(rng, 4, 2), v=_f(rng, 2, 6), bias=_f(rng, 4))
    return _graph("float_low_rank_dense", [ir.TensorSpec("x", (6,))], [(node, ir.TensorSpec("y", (4,)))])


def float_kan(rng) -> ir.Graph:
    node = ir.KANLayer("kan", ("x",), ("y",), coeffs=_f(rng, 2, 3, 4 + 3), grid_lo=-2.0, grid_hi=2.0, grid_size=4,
                       order=3)
    return _graph("float_kan", [ir.TensorSpec("x", (3,))], [(node, ir.TensorSpec("y", (2,)))])


# The ops of the models people bring. Each builder makes the op's awkward cases happen: padding, strides and
# groups for Conv, a divisor that is not a power of two for the average pool, negative codes for the slopes.
IMG = (3, 5, 4)  # (C, H, W)


def _one(name: str, x: ir.TensorSpec, node: ir.Node, out_shape, out_type) -> ir.Graph:
    return _graph(name, [x], [(node, ir.TensorSpec("y", tuple(out_shape), out_type))])


def fixed_conv(rng) -> ir.Graph:
    wt, bt = T("fixed<5,1>"), T("fixed<8,3>")
    node = ir.Conv("conv", ("x",), ("y",), weight=_codes(rng, wt, (4, 1, 3, 2)), bias=_codes(rng, bt, 4),
                   stride=(2, 1), padding=(1, 0, 1, 1), dilation=(1, 2), groups=2, weight_type=wt, bias_type=bt)
    x = ir.TensorSpec("x", (2, 5, 4), X8)
    return _one("op_conv", x, node, (4, 3, 3), OUT)


def fixed_pool(rng) -> ir.Graph:
    node = ir.Pool("pool", ("x",), ("y",), mode="avg", kernel=(3, 2), stride=(2, 2), padding=(1, 0, 1, 1),
                   count_include_pad=False, recip_frac=12)
    return _one("op_pool", ir.TensorSpec("x", IMG, X8), node, (3, 3, 2), OUT)


def fixed_scale_shift(rng) -> ir.Graph:
    st, ht = T("fixed<9,2>"), T("fixed<8,3>")
    node = ir.ScaleShift("bn", ("x",), ("y",), scale=_codes(rng, st, 3), shift=_codes(rng, ht, 3), scale_type=st,
                         shift_type=ht)
    return _one("op_scale_shift", ir.TensorSpec("x", (3, 4), X8), node, (3, 4), OUT)


def fixed_leaky_relu(rng) -> ir.Graph:
    at = T("fixed<6,0>")
    node = ir.LeakyReLU("prelu", ("x",), ("y",), alpha=np.array([3, -5, 13]), alpha_type=at)
    return _one("op_leaky_relu", ir.TensorSpec("x", (3, 4), X8), node, (3, 4), OUT)


def fixed_clip(rng) -> ir.Graph:
    node = ir.Clip("relu6", ("x",), ("y",), lo=-1.3, hi=6.0)  # -1.3 is no code: ceil to the input's grid
    return _one("op_clip", ir.TensorSpec("x", (6,), X8), node, (6,), T("fixed<7,4,RND,SAT>"))


def fixed_hard_sigmoid(rng) -> ir.Graph:
    at = T("fixed<14,2>")
    node = ir.HardSigmoid("hswish", ("x",), ("y",), alpha=1 / 6, beta=0.5, swish=True, alpha_type=at,
                          alpha_code=round(2 ** 12 / 6), beta_code=2 ** 11)
    return _one("op_hard_sigmoid", ir.TensorSpec("x", (6,), X8), node, (6,), OUT)


def fixed_table(rng) -> ir.Graph:
    from bitforge.toolchain.tables import build_table

    yt = T("ufixed<8,0,RND_CONV,SAT>")
    t = build_table("sigmoid", X8, -100, 90, yt, size=64)  # 191 codes in buckets of 4: the index shifts
    node = ir.Table("sigmoid", ("x",), ("y",), function="sigmoid", table=t.table, index_lo=t.index_lo,
                    index_shift=t.index_shift)
    return _one("op_table", ir.TensorSpec("x", (6,), X8), node, (6,), yt)


def fixed_softmax(rng) -> ir.Graph:
    from bitforge.toolchain.tables import softmax_tables

    st = softmax_tables(X8, 5, T("ufixed<12,1,RND_CONV,SAT>"), T("ufixed<12,1,RND_CONV,SAT>"), size=256)
    node = ir.Softmax("softmax", ("x",), ("y",), exp_table=st.exp_table, exp_type=st.exp_type,
                      exp_shift=st.exp_shift, recip_table=st.recip_table, recip_type=st.recip_type,
                      recip_lo=st.recip_lo, recip_shift=st.recip_shift)
    return _one("op_softmax", ir.TensorSpec("x", (5,), X8), node, (5,), T("ufixed<10,1,RND_CONV,SAT>"))


def fixed_argmax(rng) -> ir.Graph:
    return _one("op_argmax", ir.TensorSpec("x", (6,), T("fixed<3,1>")),  # few codes: ties happen
                ir.ArgMax("argmax", ("x",), ("y",)), (1,), T("ufixed<3,3>"))


def fixed_reshape(rng) -> ir.Graph:
    return _one("op_reshape", ir.TensorSpec("x", (2, 3), X8), ir.Reshape("flatten", ("x",), ("y",)), (6,), X8)


def fixed_transpose(rng) -> ir.Graph:
    return _one("op_transpose", ir.TensorSpec("x", (2, 3, 2), X8),
                ir.Transpose("transpose", ("x",), ("y",), perm=(2, 0, 1)), (2, 2, 3), X8)


def fixed_concat(rng) -> ir.Graph:
    return _graph("op_concat", [ir.TensorSpec("a", (2, 3), X8), ir.TensorSpec("b", (1, 3), T("fixed<6,1>"))],
                  [(ir.Concat("concat", ("a", "b"), ("y",), axis=0), ir.TensorSpec("y", (3, 3), OUT))])


def float_conv(rng) -> ir.Graph:
    node = ir.Conv("conv", ("x",), ("y",), weight=_f(rng, 4, 1, 3, 2), bias=_f(rng, 4), stride=(2, 1),
                   padding=(1, 0, 1, 1), dilation=(1, 2), groups=2)
    return _one("float_conv", ir.TensorSpec("x", (2, 5, 4)), node, (4, 3, 3), None)


def float_pool(rng) -> ir.Graph:
    node = ir.Pool("pool", ("x",), ("y",), mode="max", kernel=(3, 2), stride=(2, 2), padding=(1, 0, 1, 1))
    return _one("float_pool", ir.TensorSpec("x", IMG), node, (3, 3, 2), None)


def float_scale_shift(rng) -> ir.Graph:
    node = ir.ScaleShift("bn", ("x",), ("y",), scale=_f(rng, 3), shift=_f(rng, 3))
    return _one("float_scale_shift", ir.TensorSpec("x", (3, 4)), node, (3, 4), None)


def float_leaky_relu(rng) -> ir.Graph:
    node = ir.LeakyReLU("leaky", ("x",), ("y",), alpha=np.array([0.01], dtype=np.float32))
    return _one("float_leaky_relu", ir.TensorSpec("x", (3, 4)), node, (3, 4), None)


def float_clip(rng) -> ir.Graph:
    return _one("float_clip", ir.TensorSpec("x", (6,)), ir.Clip("relu6", ("x",), ("y",), lo=0.0, hi=6.0), (6,), None)


def float_hard_sigmoid(rng) -> ir.Graph:
    return _one("float_hard_sigmoid", ir.TensorSpec("x", (6,)),
                ir.HardSigmoid("hsig", ("x",), ("y",), alpha=0.2, beta=0.5), (6,), None)


def float_table(rng) -> ir.Graph:
    return _one("float_table", ir.TensorSpec("x", (6,)), ir.Table("gelu", ("x",), ("y",), function="gelu"), (6,), None)


def float_softmax(rng) -> ir.Graph:
    return _one("float_softmax", ir.TensorSpec("x", (5,)), ir.Softmax("softmax", ("x",), ("y",)), (5,), None)


def float_argmax(rng) -> ir.Graph:
    return _one("float_argmax", ir.TensorSpec("x", (6,)), ir.ArgMax("argmax", ("x",), ("y",)), (1,), None)


def float_reshape(rng) -> ir.Graph:
    return _one("float_reshape", ir.TensorSpec("x", (2, 3)), ir.Reshape("flatten", ("x",), ("y",)), (6,), None)


def float_transpose(rng) -> ir.Graph:
    return _one("float_transpose", ir.TensorSpec("x", (2, 3, 2)),
                ir.Transpose("transpose", ("x",), ("y",), perm=(2, 0, 1)), (2, 2, 3), None)


def float_concat(rng) -> ir.Graph:
    return _graph("float_concat", [ir.TensorSpec("a", (2, 3)), ir.TensorSpec("b", (1, 3))],
                  [(ir.Concat("concat", ("a", "b"), ("y",), axis=0), ir.TensorSpec("y", (3, 3)))])


#: op -> a small graph with that op on fixed-point tensors (the one node under test is the graph's last).
FIXED: dict[str, Callable[[np.random.Generator], ir.Graph]] = {
    "Quantize": fixed_quantize, "Requantize": fixed_requantize, "ReLU": fixed_relu, "Add": fixed_add,
    "Dense": fixed_dense, "LowRankDense": fixed_low_rank_dense, "KANLayer": fixed_kan,
    "Conv": fixed_conv, "Pool": fixed_pool, "ScaleShift": fixed_scale_shift, "LeakyReLU": fixed_leaky_relu,
    "Clip": fixed_clip, "HardSigmoid": fixed_hard_sigmoid, "Table": fixed_table, "Softmax": fixed_softmax,
    "ArgMax": fixed_argmax, "Reshape": fixed_reshape, "Transpose": fixed_transpose, "Concat": fixed_concat,
}
#: op -> the same on float tensors.
FLOAT: dict[str, Callable[[np.random.Generator], ir.Graph]] = {
    "ReLU": float_relu, "Add": float_add, "Dense": float_dense, "LowRankDense": float_low_rank_dense,
    "KANLayer": float_kan,
    "Conv": float_conv, "Pool": float_pool, "ScaleShift": float_scale_shift, "LeakyReLU": float_leaky_relu,
    "Clip": float_clip, "HardSigmoid": float_hard_sigmoid, "Table": float_table, "Softmax": float_softmax,
    "ArgMax": float_argmax, "Reshape": float_reshape, "Transpose": float_transpose, "Concat": float_concat,
}
#: (op, stage) -> why that stage deliberately has no rule for the op. Stage "float": the op has no float form.
UNSUPPORTED: dict[tuple[str, str], str] = {
    ("Quantize", "float"): "it is the float -> fixed boundary: its output is fixed point by definition",
    ("Requantize", "float"): "it converts between fixed-point types; validate rejects a float Requantize",
    ("Quantize", "rtl"): "the host quantizes the input: a design takes fixed-point codes (generate drops an "
                         "input Quantize, so a Quantize alone leaves no hardware)",
    ("Add", "rtl"): "the RTL backend builds single-input chains of layers; a two-input Add is not a chain "
                    "(docs/rtl.md)",
    ("Concat", "rtl"): "the RTL backend builds single-input chains of layers; a two-input Concat is not a chain "
                       "(docs/rtl.md)",
}


def _build(table: dict, op: str) -> ir.Graph:
    if op not in table:
        pytest.fail(f"op {op} has no test graph: add a builder to tests/test_every_op.py "
                    f"({'FIXED' if table is FIXED else 'FLOAT'}), or list it in UNSUPPORTED with the reason")
    g = table[op](np.random.default_rng(sum(map(ord, op))))
    assert g.nodes[-1].OP == op, f"the {op} builder must end its graph with the {op} node"
    return g


def _inputs(g: ir.Graph, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """ROWS vectors per graph input: random codes with every edge code, or floats inside and outside the range."""
    out = {}
    for name in g.inputs:
        spec = g.tensors[name]
        if spec.is_float:
            out[name] = rng.uniform(-6, 6, (ROWS, *spec.shape)).astype(np.float32)
            continue
        t = spec.dtype
        codes = _codes(rng, t, (ROWS, *spec.shape))
        edges = np.array(sorted({t.min_code, t.min_code + 1, -1, 0, 1, t.max_code - 1, t.max_code} &
                                set(range(t.min_code, t.max_code + 1))), dtype=np.int64)
        codes[: len(edges)] = edges.reshape(-1, *(1,) * len(spec.shape))  # an edge code fills a whole vector
        out[name] = codes
    return out


def _supported(op: str, stage: str) -> bool:
    return (op, stage) not in UNSUPPORTED


# -- the stages ---------------------------------------------------------------------------------------------

def test_ops_are_discovered_and_registered_for_loading():
    assert {"Quantize", "Dense", "KANLayer"} <= set(OPS)
    assert set(ir.OPS) == set(OPS), "ir.OPS (what ir.load reads) must list every op class"
    stale = {op for op, _ in UNSUPPORTED} - set(OPS)
    assert not stale, f"UNSUPPORTED names ops that no longer exist: {stale}"


@pytest.mark.parametrize("op", OPS)
def test_ir_saves_and_loads_the_op(op, tmp_path):
    g = _build(FIXED, op)
    ir.save(g, tmp_path)
    back = ir.load(tmp_path)
    assert ir.to_json(back) == ir.to_json(g)
    for name, a in ir.arrays_of(g).items():
        assert np.array_equal(ir.arrays_of(back)[name], a), name


def _golden(g: ir.Graph) -> tuple[dict, dict]:
    """(the inputs, every tensor's golden values)."""
    feeds = _inputs(g, np.random.default_rng(1))
    return feeds, emulate.run(g, feeds, keep=True)


@pytest.mark.parametrize("op", OPS)
def test_golden_values_lie_inside_the_interval_bounds(op):
    g = _build(FIXED, op)
    feeds, env = _golden(g)
    bounds = analyze(g).tensors
    for name, values in env.items():
        b = bounds[name]
        if b.is_float:
            assert np.all(values >= b.lo) and np.all(values <= b.hi), f"{op}: tensor '{name}' leaves its bounds"
        else:
            assert np.all(values >= b.lo.astype(np.int64)) and np.all(values <= b.hi.astype(np.int64)), \
                f"{op}: codes of tensor '{name}' leave their bounds"
    y = env[g.outputs[0]]
    assert len(np.unique(y)) > 1, f"test set-up: the {op} graph's output should vary with its input"


@pytest.mark.parametrize("op", OPS)
def test_onnx_runtime_matches_the_golden_model_bit_for_bit(op):
    g = _build(FIXED, op)
    feeds, env = _golden(g)
    got = run_onnxruntime(to_onnx(g), feeds)
    y = g.outputs[0]
    assert got[f"{y}_code"].dtype == np.int64
    assert np.array_equal(got[f"{y}_code"], env[y]), f"{op}: ONNX Runtime codes differ from the golden model"


@pytest.mark.parametrize("op", OPS)
def test_float_form_runs_through_emulate_intervals_and_onnx(op):
    if not _supported(op, "float"):
        with pytest.raises(BitforgeError):
            ir.validate(_float_variant_of_fixed(op))
        return
    g = _build(FLOAT, op)
    feeds = _inputs(g, np.random.default_rng(2))
    gold = emulate.run(g, feeds, keep=True)
    bounds = analyze(g, input_range=(-6, 6)).tensors
    for name, values in gold.items():
        b = bounds[name]
        assert np.all(values >= b.lo) and np.all(values <= b.hi), f"{op}: tensor '{name}' leaves its bounds"
    y = g.outputs[0]
    got = run_onnxruntime(to_onnx(g), feeds)[y]
    np.testing.assert_allclose(got, gold[y], rtol=FLOAT_RTOL, atol=FLOAT_ATOL, err_msg=f"{op}: float ONNX")


def _float_variant_of_fixed(op: str) -> ir.Graph:
    """The op's fixed test graph with every tensor made float: what an op without a float form refuses."""
    g = FIXED[op](np.random.default_rng(0))
    return ir.Graph(g.name, g.inputs, g.outputs, {k: ir.TensorSpec(k, s.shape) for k, s in g.tensors.items()},
                    g.nodes)


@pytest.mark.parametrize("op", OPS)
def test_rtl_backend_builds_a_stage_for_the_op(op):
    g = _build(FIXED, op)
    if not _supported(op, "rtl"):
        with pytest.raises(BitforgeError):
            generate(g, RtlOptions())
        return
    design = generate(g, RtlOptions())
    assert [layer.op for layer in design.layers] == [op]
    # Conv and Pool compute one output position a clock (docs/rtl.md): their stage's II is the output's spatial
    # size; every other op's stage takes a sample a clock.
    windows = int(np.prod(g.tensors[g.outputs[0]].shape[1:])) if op in ("Conv", "Pool") else 1
    assert design.latency_cycles >= 1 and design.ii == windows
    assert f"module {design.top}" in design.files[f"{design.top}.v"]


@pytest.mark.slow
@pytest.mark.parametrize("op", [op for op in OPS if _supported(op, "rtl")])
def test_rtl_design_streams_bit_exactly_on_icarus(op, tmp_path):
    """The generated Verilog computes what the golden model computes: a short stream through Icarus (the
    cocotb bench of ``bitforge simulate``, random stalls on both sides). Slow: about 6 s per op, mostly the
    simulator's start; tests/rtl and tests/test_rtl_flow.py simulate these ops in the fast run."""
    g = _build(FIXED, op)
    ir.save(g, tmp_path)
    write_rtl(g, tmp_path, CompileOptions(to=("rtl",)))
    result = simulate(tmp_path, "icarus", vectors=SIM_VECTORS)["icarus"]
    assert (result["vectors"], result["mismatches"]) == (SIM_VECTORS, 0)
