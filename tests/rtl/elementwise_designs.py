"""The element-wise and small-op stages under test (backends/rtl/elementwise.py), all in one wrapper top so that
one build per simulator serves every case (as lib_designs.py does for the rtl/ library).

Each case is a one-node graph with awkward types (saturating and wrapping accumulators, unsigned sides,
bounds outside the input type, tables whose index clamps at both ends, ties for the maximum, ...). Its stage is
emitted exactly as the RTL generator asks for it, and the bench's expected outputs are ``emulate.run`` on that
graph: the golden model itself, not a re-implementation. Everything is seeded, so the same catalogue gives the
same top and the build is reused until a library file or this catalogue changes.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from bitforge.toolchain import emulate, ir
from bitforge.toolchain.backends.rtl import elementwise  # noqa: F401  (importing it registers the emitters)
from bitforge.toolchain.backends.rtl.stages import EMITTERS, Ports, Stage, StageRequest
from bitforge.toolchain.backends.rtl.verilog import pack_word as pack
from bitforge.toolchain.fixed import FixedType, parse_type
from bitforge.toolchain.tables import build_table, softmax_tables
from rtl_bench import fields, random_codes, simulate, stream_ports, top_text

TOP = "rtl_elementwise"
SEED = 11
N_SAMPLES = 300
#: A folded stage takes R cycles a sample: fewer samples keep its share of the run near the others'.
N_FOLDED = 120
T = parse_type
X8 = T("fixed<8,3,TRN,WRAP>")


@dataclass(frozen=True)
class Case:
    """One DUT: a one-node graph, the reuse factor and emitter options it is built with."""

    graph: ir.Graph
    reuse: int = 1
    options: tuple = ()

    @property
    def node(self) -> ir.Node:
        return self.graph.nodes[0]

    @property
    def x(self) -> ir.TensorSpec:
        return self.graph.tensors[self.node.inputs[0]]

    @property
    def y(self) -> ir.TensorSpec:
        return self.graph.tensors[self.node.output]


def _graph(name: str, x_shape, x_type: FixedType, node: ir.Node, y_shape, y_type: FixedType) -> ir.Graph:
    g = ir.Graph(name, ["x"], ["y"], {"x": ir.TensorSpec("x", tuple(x_shape), x_type),
                                      "y": ir.TensorSpec("y", tuple(y_shape), y_type)}, [node])
    return ir.validate(g)


def _same(name: str, shape, xt: FixedType, node: ir.Node, yt: FixedType, **kw) -> Case:
    return Case(_graph(name, shape, xt, node, shape, yt), **kw)


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng([SEED, *map(ord, name)])


def _codes(rng, t: FixedType, n: int, ends: bool = True) -> np.ndarray:
    c = rng.integers(t.min_code, t.max_code, size=n, endpoint=True, dtype=np.int64)
    if ends and n >= 2:
        c[0], c[-1] = t.min_code, t.max_code  # the extreme constants meet every input
    return c


def _node(op, name, **fields_) -> ir.Node:
    return op(name, ("x",), ("y",), **fields_)


# -- the cases ------------------------------------------------------------------------------------------------

def scale_shift_cases() -> dict[str, Case]:
    out = {}
    st, ht = T("fixed<9,2>"), T("fixed<8,3>")
    r = _rng("ss_sat")
    # Exact sums need 18 bits at frac 12; the accumulator keeps 14: its SAT acts on large products.
    out["ss_sat_acc"] = _same("ss_sat_acc", (3, 4), X8, _node(
        ir.ScaleShift, "bn", scale=_codes(r, st, 3), shift=_codes(r, ht, 3), scale_type=st, shift_type=ht,
        accum_type=T("fixed<14,2,TRN,SAT>")), T("fixed<10,4,RND_CONV,SAT>"))
    r = _rng("ss_wrap")
    su = T("ufixed<5,1>")
    out["ss_unsigned_wrap"] = _same("ss_unsigned_wrap", (2, 3), T("ufixed<6,2>"), _node(
        ir.ScaleShift, "bn", scale=_codes(r, su, 2), scale_type=su, accum_type=T("ufixed<9,1,TRN,WRAP>")),
        T("fixed<7,3,RND_INF,SAT_SYM>"))
    r = _rng("ss_1d")
    s5, h0 = T("fixed<6,3>"), T("fixed<5,5>")
    out["ss_coarse_shift_1d"] = _same("ss_coarse_shift_1d", (4,), X8, _node(
        ir.ScaleShift, "bn", scale=np.array([-32, -1, 31, 7]), shift=_codes(r, h0, 4), shift_type=h0, scale_type=s5,
        accum_type=T("fixed<16,8>")), T("ufixed<6,3,RND,SAT>"))  # negatives saturate to 0
    return out


def leaky_relu_cases() -> dict[str, Case]:
    a6 = T("fixed<6,0>")
    return {
        "leaky_prelu": _same("leaky_prelu", (3, 4), X8, _node(ir.LeakyReLU, "prelu", alpha=np.array([3, -5, 13]),
                                                              alpha_type=a6), T("fixed<10,4,RND_CONV,SAT>")),
        # One unsigned slope 1/8 (a power of two), an output that wraps.
        "leaky_scalar_pow2": _same("leaky_scalar_pow2", (6,), T("fixed<7,5>"), _node(
            ir.LeakyReLU, "leaky", alpha=np.array([2]), alpha_type=T("ufixed<4,0>")), T("fixed<6,3,RND_ZERO,WRAP>")),
        # Unsigned input: never negative, so only the requantize (no multiplier is built).
        "leaky_unsigned_input": _same("leaky_unsigned_input", (5,), T("ufixed<6,3>"), _node(
            ir.LeakyReLU, "leaky", alpha=np.array([-77]), alpha_type=T("fixed<8,1>")), T("ufixed<5,2,RND,SAT>")),
    }


def clip_cases() -> dict[str, Case]:
    return {
        "clip_relu6": _same("clip_relu6", (6,), X8, _node(ir.Clip, "relu6", lo=-1.3, hi=6.0),
                            T("fixed<7,4,RND,SAT>")),
        # On the grid of 1/32, ceil(0.3 * 32) = 10 > floor(0.31 * 32) = 9: hi wins, as max then min gives.
        "clip_lo_above_hi_on_grid": _same("clip_lo_above_hi_on_grid", (4,), X8,
                                          _node(ir.Clip, "clip", lo=0.3, hi=0.31), T("fixed<6,2,RND,SAT>")),
        # Both bounds above the input type's range (max 15.875): every output is 20.
        "clip_bounds_past_the_type": _same("clip_bounds_past_the_type", (3,), X8,
                                           _node(ir.Clip, "clip", lo=20.0, hi=30.0), T("fixed<9,6,TRN,SAT>")),
        "clip_open_below_unsigned": _same("clip_open_below_unsigned", (5,), T("ufixed<6,3>"),
                                          _node(ir.Clip, "clip", hi=2.5), T("ufixed<5,2,RND_CONV,WRAP>")),
        "clip_hardtanh": _same("clip_hardtanh", (2, 3), T("fixed<10,4>"), _node(ir.Clip, "hardtanh", lo=-1.0, hi=1.0),
                               T("fixed<8,1,RND_CONV,SAT_SYM>")),
    }


def hard_sigmoid_cases() -> dict[str, Case]:
    a10, a14 = T("fixed<10,1>"), T("fixed<14,2>")
    return {
        # ONNX's alpha 0.2, beta 0.5; h = 1 saturates in ufixed<8,0>.
        "hsig_onnx": _same("hsig_onnx", (6,), X8, _node(ir.HardSigmoid, "hsig", alpha=0.2, beta=0.5, alpha_type=a10,
                                                        alpha_code=round(0.2 * 2 ** 9), beta_code=2 ** 8),
                           T("ufixed<8,0,RND_CONV,SAT>")),
        "hswish_torch": _same("hswish_torch", (6,), X8, _node(
            ir.HardSigmoid, "hswish", alpha=1 / 6, beta=0.5, swish=True, alpha_type=a14,
            alpha_code=round(2 ** 12 / 6), beta_code=2 ** 11), T("fixed<10,4,RND_CONV,SAT>")),
        "hswish_unsigned": _same("hswish_unsigned", (4,), T("ufixed<7,3>"), _node(
            ir.HardSigmoid, "hswish", alpha=43 / 256, beta=0.5, swish=True, alpha_type=T("ufixed<8,0>"),
            alpha_code=43, beta_code=128), T("fixed<8,4,RND_INF,WRAP>")),
        "hsig_negative_beta": _same("hsig_negative_beta", (5,), T("fixed<6,4>"), _node(
            ir.HardSigmoid, "hsig", alpha=13 / 64, beta=-0.5, alpha_type=T("fixed<8,2>"), alpha_code=13,
            beta_code=-32), T("fixed<6,1,TRN_ZERO,SAT_SYM>")),
    }


def _table(name: str, function: str, xt: FixedType, lo: int, hi: int, yt: FixedType, size: int, n: int,
           reuse: int = 1, shape=None) -> Case:
    t = build_table(function, xt, lo, hi, yt, size=size)
    node = _node(ir.Table, function, function=function, table=t.table, index_lo=t.index_lo,
                 index_shift=t.index_shift)
    return _same(name, shape or (n,), xt, node, yt, reuse=reuse)


def table_cases() -> dict[str, Case]:
    u8 = T("ufixed<8,0,RND_CONV,SAT>")
    hand = _node(ir.Table, "elu", function="elu", table=np.array([-7, -5, -2, 0, 3, 9, 20, 31]),
                 index_lo=-200, index_shift=5)  # index 2 .. 10 over fixed<8,3>: clamps at the top only
    return {
        "table_sigmoid": _table("table_sigmoid", "sigmoid", X8, -100, 90, u8, 64, 6),
        "table_tanh_unsigned_in": _table("table_tanh_unsigned_in", "tanh", T("ufixed<7,3>"), 5, 100,
                                         T("fixed<8,1,RND_CONV,SAT>"), 32, 4),
        "table_lo_outside_the_type": _same("table_lo_outside_the_type", (3,), X8, hand, T("fixed<6,6>")),
        # Folded: 10 elements in 3 ROMs of 4 (2 padded places), 6 in 2 of 3, 5 in one (reuse 8 clamps to 5).
        "table_folded_r4_padded": _table("table_folded_r4_padded", "sigmoid", X8, -100, 90, u8, 64, 10, reuse=4,
                                         shape=(2, 5)),
        "table_folded_r3": _table("table_folded_r3", "gelu", X8, -128, 127, T("fixed<9,4,RND,SAT>"), 128, 6, reuse=3),
        "table_folded_one_rom": _table("table_folded_one_rom", "silu", T("fixed<6,2>"), -32, 31,
                                       T("fixed<7,3,RND_CONV,SAT>"), 16, 5, reuse=8),
    }


def _softmax(name: str, shape, xt: FixedType, yt: FixedType, exp_t: str | None = None, recip_t: str | None = None,
             size: int = 1024, options: tuple = ()) -> Case:
    kw = {}
    if exp_t:
        kw = {"exp_type": T(exp_t), "recip_type": T(recip_t)}
    st = softmax_tables(xt, shape[-1], size=size, **kw)
    node = _node(ir.Softmax, "softmax", exp_table=st.exp_table, exp_type=st.exp_type, exp_shift=st.exp_shift,
                 recip_table=st.recip_table, recip_type=st.recip_type, recip_lo=st.recip_lo,
                 recip_shift=st.recip_shift)
    return _same(name, shape, xt, node, yt, options=options)


def softmax_cases() -> dict[str, Case]:
    u12 = "ufixed<12,1,RND_CONV,SAT>"
    return {
        "softmax_5": _softmax("softmax_5", (5,), X8, T("ufixed<10,1,RND_CONV,SAT>"), u12, u12, size=256),
        # Three softmaxes of 4 (the last axis), the default 18-bit tables, a register after every tree level.
        "softmax_groups": _softmax("softmax_groups", (3, 4), T("fixed<6,2>"), T("ufixed<8,0,RND,SAT>"),
                                   options=(("levels_per_stage", 1),)),
        "softmax_9_unsigned": _softmax("softmax_9_unsigned", (9,), T("ufixed<4,2>"), T("ufixed<10,1,RND_CONV,SAT>"),
                                       u12, "ufixed<10,1,RND_CONV,SAT>", size=128),
        "softmax_of_one": _softmax("softmax_of_one", (3, 1), X8, T("ufixed<6,1,TRN,SAT>"), u12, u12, size=64),
    }


def argmax_cases() -> dict[str, Case]:
    return {
        "argmax_ties": Case(_graph("argmax_ties", (6,), T("fixed<3,1>"), _node(ir.ArgMax, "argmax"), (1,),
                                   T("ufixed<3,3>"))),
        "argmax_groups_unsigned": Case(_graph("argmax_groups_unsigned", (3, 5), T("ufixed<3,3>"),
                                              _node(ir.ArgMax, "argmax"), (3, 1), T("ufixed<3,3>"))),
        "argmax_wide_out": Case(_graph("argmax_wide_out", (7,), X8, _node(ir.ArgMax, "argmax"), (1,),
                                       T("ufixed<5,5>"))),
    }


def wiring_cases() -> dict[str, Case]:
    return {
        "reshape_flatten": Case(_graph("reshape_flatten", (2, 3), X8, _node(ir.Reshape, "flatten"), (6,), X8)),
        "transpose_3d": Case(_graph("transpose_3d", (2, 3, 2), X8, _node(ir.Transpose, "t", perm=(2, 0, 1)),
                                    (2, 2, 3), X8)),
        "transpose_2d_unsigned": Case(_graph("transpose_2d_unsigned", (3, 4), T("ufixed<5,1>"),
                                             _node(ir.Transpose, "t", perm=(1, 0)), (4, 3), T("ufixed<5,1>"))),
    }


@functools.cache
def cases() -> dict[str, Case]:
    return {**scale_shift_cases(), **leaky_relu_cases(), **clip_cases(), **hard_sigmoid_cases(), **table_cases(),
            **softmax_cases(), **argmax_cases(), **wiring_cases()}


# -- stages, vectors, the wrapper --------------------------------------------------------------------------------

def stage_ports(prefix: str) -> Ports:
    return Ports("clk", "rst", *(f"{prefix}{s}" for s in ("in_valid", "in_ready", "in_data", "out_valid",
                                                          "out_ready", "out_data")))


def emit(case: Case, prefix: str = "") -> Stage:
    """The case's stage exactly as the RTL generator asks for it."""
    x, y = case.x, case.y
    req = StageRequest(case.graph, case.node, x.dtype, math.prod(x.shape), y.dtype, math.prod(y.shape),
                       stage_ports(prefix), f"u_{prefix}dut", case.reuse, dict(case.options))
    return EMITTERS[case.node.OP](req)


def inputs(name: str, case: Case, n: int) -> np.ndarray:
    """(n, elements) input codes: every edge code of the type first, whole rows of one code (ties for the
    maximum), then uniform codes."""
    t, count = case.x.dtype, math.prod(case.x.shape)
    rng = _rng(name)
    x = random_codes(rng, t, (n, count))
    for i, c in enumerate((t.min_code, t.max_code, 0 if t.signed else t.max_code // 2)):
        x[-1 - i] = c
    return x


def golden(case: Case, x: np.ndarray) -> np.ndarray:
    """emulate.run on the case's graph, flattened per sample."""
    y = emulate.run(case.graph, x.reshape(len(x), *case.x.shape))["y"]
    return y.reshape(len(x), -1)


def design() -> tuple[str, list[dict], list[str], dict[str, Stage]]:
    """(wrapper text, bench DUT plans, rtl/ files, each case's stage)."""
    ports, body, duts, library, stages = [], [], [], set(), {}
    for name, case in cases().items():
        p = f"{name}_"
        st = stages[name] = emit(case, p)
        xt, yt = case.x.dtype, case.y.dtype
        n_in, n_out = math.prod(case.x.shape), math.prod(case.y.shape)
        x = inputs(name, case, N_FOLDED if st.ii > 1 else N_SAMPLES)
        ports += stream_ports(p, n_in * xt.width, n_out * yt.width)
        body.append(st.instance)
        library.update(st.library)
        duts.append({"kind": "stream", "name": name, "prefix": p, "latency": st.latency, "ii": st.ii,
                     "inputs": [pack(r, xt.width) for r in x], "expected": [pack(r, yt.width) for r in golden(case, x)],
                     "in_fields": fields("x", xt, n_in), "out_fields": fields("y", yt, n_out)})
    return top_text(TOP, ports, body), duts, sorted(library), stages


_RESULTS: dict[str, dict] = {}


def results(simulator: str) -> dict[str, dict]:
    """Per-case bench results on ``simulator`` (simulated once per process and pytest run)."""
    if simulator not in _RESULTS:
        top, duts, library, _ = design()
        _RESULTS[simulator] = simulate(simulator, TOP, top, library, duts, seed=SEED)
    return _RESULTS[simulator]
