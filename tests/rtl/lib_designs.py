"""The devices under test of the rtl/ library tests, all in one wrapper top so that one build per simulator
serves every test_lib_* file (a Verilator build costs 15-40 s; four would dominate the suite).

Each part returns wrapper ports, instance text, bench DUT plans (inputs and the golden model's expected
outputs) and the rtl/ files it needs. Everything is seeded: the same catalogue gives the same top, so the
build is reused until a library file or this catalogue changes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from bitforge.toolchain import emulate, fixed, ir
from bitforge.toolchain.backends.rtl import dense  # noqa: F401  (importing it registers the emitters)
from bitforge.toolchain.backends.rtl.stages import EMITTERS, Ports, Stage, StageRequest
from bitforge.toolchain.backends.rtl.verilog import pack_word as pack
from bitforge.toolchain.backends.rtl.verilog import type_parameters
from bitforge.toolchain.backends.rtl.verilog import unpack_word as unpack
from bitforge.toolchain.fixed import FixedType, Overflow, Rounding, parse_type
from rtl_bench import fields, pipe_ports, random_codes, simulate, stream_ports, top_text

TOP = "rtl_library"
SEED = 7


@dataclass
class Part:
    ports: list[str] = field(default_factory=list)
    body: list[str] = field(default_factory=list)
    duts: list[dict] = field(default_factory=list)
    library: set[str] = field(default_factory=set)


def _params(d: dict) -> str:
    return ", ".join(f".{k}({v})" for k, v in d.items())


def _type_in(t: FixedType) -> dict:
    return {"IN_W": t.width, "IN_FRAC": t.frac, "IN_SIGNED": int(t.signed)}


# -- bf_requant: every rounding x overflow mode -----------------------------------------------------------

EXHAUSTIVE_BITS = 10
WIDE_BITS = 40
#: name -> (input type, output width, integer bits, signed): each one is 28 instances, one per mode pair.
REQUANT_PAIRS = {
    "narrowing_signed": (FixedType(8, 3), 5, 1, True),             # drop 5 bits and 2 integer bits
    "signed_to_unsigned": (FixedType(8, 3), 4, 2, False),           # negatives saturate to 0
    "unsigned_to_signed": (FixedType(8, 3, False), 6, 2, True),     # the top input bit overflows
    "left_shift": (FixedType(7, 2), 6, 4, False),                   # output finer than the input
    "shift_past_width": (FixedType(6, 6), 4, -3, True),             # every input bit is dropped
    "one_bit_sat_sym": (FixedType(5, 1), 1, 1, True),               # SAT_SYM of a 1-bit type is SAT
    "one_bit_input": (FixedType(1, 0), 3, 2, True),
    "widening_unsigned": (FixedType(6, 3, False), 9, 1, False),
    "same_frac_narrower": (FixedType(10, 4), 6, 0, True),           # frac 6 -> 6: overflow only
    "wide": (FixedType(WIDE_BITS, 12), 20, 4, True),               # 40-bit input, 26 bits dropped
}
MODES = [(r, o) for r in Rounding for o in Overflow]


def requant_part(rng: np.random.Generator) -> Part:
    """One latency-0 pipe DUT per type pair: 28 bf_requant instances on one input bus."""
    part = Part(library={"bf_requant.v"})
    for name, (ti, w, i, signed) in REQUANT_PAIRS.items():
        outs = [FixedType(w, i, signed, r, o) for r, o in MODES]
        part.ports += pipe_ports(f"{name}_", ti.width, w * len(outs), en=False)
        for k, to in enumerate(outs):
            part.body.append(f"bf_requant #({_params({**_type_in(ti), **type_parameters('OUT', to)})}) "
                             f"u_{name}_{k} (.in_code({name}_in_bus), "
                             f".out_code({name}_out_bus[{(k + 1) * w - 1}:{k * w}]));")
        if ti.width <= EXHAUSTIVE_BITS:  # every input code
            raw = [int(v) for v in range(1 << ti.width)]
        else:
            raw = [0, 1, (1 << WIDE_BITS) - 1, 1 << (WIDE_BITS - 1), (1 << (WIDE_BITS - 1)) - 1]
            raw += [int(v) & ((1 << WIDE_BITS) - 1) for v in rng.integers(0, 1 << 62, size=400)]
        codes = np.array([unpack(v, 1, ti.width, ti.signed)[0] for v in raw], dtype=np.int64)
        expected = [0] * len(raw)
        for k, to in enumerate(outs):
            for v, c in enumerate(fixed.requantize(codes, ti, to)):
                expected[v] |= (int(c) & ((1 << w) - 1)) << (k * w)
        out_fields = [{**f, "name": to.to_short(), "in": 0} for f, to in zip(fields("y", outs[0], len(outs)), outs)]
        part.duts.append({"kind": "pipe", "name": name, "prefix": f"{name}_", "latency": 0, "has_en": False,
                          "inputs": raw, "expected": expected, "in_fields": fields("x", ti, 1),
                          "out_fields": out_fields})
    return part


# -- bf_mul, bf_adder_tree, bf_bias_requant ------------------------------------------------------------------

N_VECTORS = 400
#: name -> (a type, b type, output type or None for the exact product, OUT_REG)
MULS = {
    "mul_signed_exact_reg": (parse_type("fixed<8,3>"), parse_type("fixed<6,1>"), None, 1),
    "mul_mixed_requant": (parse_type("ufixed<7,2>"), parse_type("fixed<5,1>"),
                          parse_type("fixed<8,2,RND_CONV,SAT>"), 0),
    "mul_unsigned_wrap_reg": (parse_type("ufixed<6,3>"), parse_type("ufixed<5,5>"),
                              parse_type("ufixed<7,6,RND_MIN_INF,WRAP>"), 1),
    "mul_sat_sym": (parse_type("fixed<9,4>"), parse_type("fixed<9,4>"), parse_type("fixed<6,4,RND_ZERO,SAT_SYM>"), 0),
}
#: name -> (N, element type, LEVELS_PER_STAGE)
TREES = {
    "tree7_signed_every_level": (7, parse_type("fixed<9,4>"), 1),
    "tree5_unsigned": (5, parse_type("ufixed<6,6>"), 2),
    "tree1": (1, parse_type("fixed<5,5>"), 1),
    "tree16_deep_stage": (16, parse_type("fixed<7,0>"), 3),
}
#: name -> (sum type, bias type or None, bias code, accumulator type, output type)
BIASES = {
    "bias_sat_acc": (FixedType(14, 7), parse_type("fixed<6,3>"), 21, parse_type("fixed<10,5,TRN,SAT>"),
                     parse_type("fixed<6,3,RND_CONV,SAT>")),
    "bias_unsigned_sum_wrap": (FixedType(12, 6, False), parse_type("ufixed<5,5>"), 19,
                               parse_type("ufixed<11,5,TRN,WRAP>"), parse_type("fixed<7,4,RND,SAT_ZERO>")),
    "no_bias": (FixedType(16, 8), None, 0, parse_type("fixed<12,4,TRN,SAT_SYM>"),
                parse_type("fixed<8,4,TRN_ZERO,SAT>")),
}


#: name -> (a type, constant type): one bf_const_mul per constant (edges, powers of two, random) on one a bus.
CONST_MULS = {
    "const_mul_signed": (parse_type("fixed<8,3>"), parse_type("fixed<8,2>")),
    "const_mul_unsigned_by_signed": (parse_type("ufixed<6,6>"), parse_type("fixed<7,0>")),
    "const_mul_signed_by_unsigned": (parse_type("fixed<5,1>"), parse_type("ufixed<9,3>")),
    "const_mul_one_bit": (parse_type("fixed<7,2>"), parse_type("fixed<1,0>")),
}


def tree_latency(n: int, levels_per_stage: int) -> int:
    """bf_adder_tree's LATENCY: $clog2(N) / LEVELS_PER_STAGE."""
    return (n - 1).bit_length() // levels_per_stage


def _mul(part: Part, name: str, ta: FixedType, tb: FixedType, to, reg: int, rng) -> None:
    pt = fixed.mul_type(ta, tb)
    out = to or pt
    a, b = random_codes(rng, ta, N_VECTORS), np.roll(random_codes(rng, tb, N_VECTORS), 3)  # edges meet others
    prod, _ = fixed.multiply(a, ta, b, tb)
    y = prod if to is None else fixed.requantize(prod, pt, to)
    params = {"A_W": ta.width, "A_FRAC": ta.frac, "A_SIGNED": int(ta.signed),
              "B_W": tb.width, "B_FRAC": tb.frac, "B_SIGNED": int(tb.signed), "OUT_REG": reg,
              **(type_parameters("OUT", to) if to is not None else {})}
    p = f"{name}_"
    part.ports += pipe_ports(p, ta.width + tb.width, out.width, en=True)
    part.body.append(f"bf_mul #({_params(params)}) u_{name} (.clk(clk), .en({p}en), .a({p}in_bus[{ta.width - 1}:0]), "
                     f".b({p}in_bus[{ta.width + tb.width - 1}:{ta.width}]), .p({p}out_bus));")
    part.duts.append({"kind": "pipe", "name": name, "prefix": p, "latency": reg, "has_en": True,
                      "inputs": [pack([int(x)], ta.width) | pack([int(v)], tb.width) << ta.width for x, v in zip(a, b)],
                      "expected": [pack([int(v)], out.width) for v in y],
                      "in_fields": fields("a", ta, 1) + fields("b", tb, 1, lsb=ta.width),
                      "out_fields": fields("p", out, 1)})


def _const_mul(part: Part, name: str, ta: FixedType, tc: FixedType, rng) -> None:
    """Every a code against constants: the type's ends, 0, +-1, powers of two, alternating bits, random."""
    pool = {tc.min_code, tc.max_code, 0, min(1, tc.max_code), max(-1, tc.min_code), tc.max_code // 3,
            tc.min_code // 3 if tc.signed else tc.max_code // 5}
    pool |= {c for k in range(tc.width) for c in (1 << k, -(1 << k)) if tc.min_code <= c <= tc.max_code}
    pool |= {int(c) for c in rng.integers(tc.min_code, tc.max_code, size=6, endpoint=True)}
    consts = sorted(pool)
    pt = fixed.mul_type(ta, tc)
    a = np.arange(ta.min_code, ta.max_code + 1, dtype=np.int64)  # every code of a
    p = f"{name}_"
    part.ports += pipe_ports(p, ta.width, pt.width * len(consts), en=False)
    for k, c in enumerate(consts):
        part.body.append(f"bf_const_mul #(.A_W({ta.width}), .A_SIGNED({int(ta.signed)}), .C_W({tc.width}), "
                         f".C_SIGNED({int(tc.signed)}), .C({tc.width}'d{c & ((1 << tc.width) - 1)})) u_{name}_{k} "
                         f"(.a({p}in_bus), .p({p}out_bus[{(k + 1) * pt.width - 1}:{k * pt.width}]));")
    prods = [fixed.multiply(a, ta, np.full_like(a, c), tc)[0] for c in consts]
    part.duts.append({"kind": "pipe", "name": name, "prefix": p, "latency": 0, "has_en": False,
                      "inputs": [pack([int(v)], ta.width) for v in a],
                      "expected": [pack([int(col[i]) for col in prods], pt.width) for i in range(len(a))],
                      "in_fields": fields("a", ta, 1),
                      "out_fields": [{**f, "name": f"a*{c}", "in": 0}
                                     for f, c in zip(fields("p", pt, len(consts)), consts)]})


def _tree(part: Part, name: str, n: int, t: FixedType, lps: int, rng) -> None:
    x = random_codes(rng, t, (N_VECTORS, n))
    st = fixed.accumulate_type(t, n)
    p = f"{name}_"
    part.ports += pipe_ports(p, n * t.width, st.width, en=True)
    part.body.append(f"bf_adder_tree #(.N({n}), .IN_W({t.width}), .IN_SIGNED({int(t.signed)}), "
                     f".LEVELS_PER_STAGE({lps})) u_{name} (.clk(clk), .en({p}en), .in_data({p}in_bus), "
                     f".out_data({p}out_bus));")
    part.duts.append({"kind": "pipe", "name": name, "prefix": p, "latency": tree_latency(n, lps), "has_en": True,
                      "inputs": [pack(r, t.width) for r in x],
                      "expected": [pack([sum(int(v) for v in r)], st.width) for r in x],
                      "in_fields": fields("x", t, n), "out_fields": fields("sum", st, 1)})


def _bias(part: Part, name: str, st: FixedType, bt, bias: int, acc: FixedType, out: FixedType, rng) -> None:
    s = random_codes(rng, st, N_VECTORS)
    total = s + (bias << (acc.frac - bt.frac) if bt is not None else 0)
    y = fixed.requantize(fixed.apply_overflow(total, acc), acc, out)  # emulate.dense_stage's last two steps
    params = {"SUM_W": st.width, "SUM_SIGNED": int(st.signed), "HAS_BIAS": int(bt is not None),
              "ACC_W": acc.width, "ACC_FRAC": acc.frac, "ACC_SIGNED": int(acc.signed),
              "ACC_OVERFLOW": type_parameters("A", acc)["A_OVERFLOW"], **type_parameters("OUT", out)}
    if bt is not None:
        params.update({"B_W": bt.width, "B_FRAC": bt.frac, "B_SIGNED": int(bt.signed),
                       "BIAS": f"{bt.width}'d{bias & ((1 << bt.width) - 1)}"})
    p = f"{name}_"
    part.ports += pipe_ports(p, st.width, out.width, en=False)
    part.body.append(f"bf_bias_requant #({_params(params)}) u_{name} (.sum({p}in_bus), .out_code({p}out_bus));")
    part.duts.append({"kind": "pipe", "name": name, "prefix": p, "latency": 0, "has_en": False,
                      "inputs": [pack([int(v)], st.width) for v in s],
                      "expected": [pack([int(v)], out.width) for v in y],
                      "in_fields": fields("sum", st, 1), "out_fields": fields("y", out, 1)})


def arith_part(rng: np.random.Generator) -> Part:
    part = Part(library={"bf_mul.v", "bf_const_mul.v", "bf_requant.v", "bf_adder_tree.v", "bf_bias_requant.v"})
    for k, v in MULS.items():
        _mul(part, k, *v, rng)
    for k, v in CONST_MULS.items():
        _const_mul(part, k, *v, rng)
    for k, v in TREES.items():
        _tree(part, k, *v, rng)
    for k, v in BIASES.items():
        _bias(part, k, *v, rng)
    return part


# -- stream modules ------------------------------------------------------------------------------------------

N_SAMPLES = 300
WORD_W, BUS_W = 20, 8
BEATS = -(-WORD_W // BUS_W)
RELU_IN, RELU_OUT = parse_type("fixed<8,3>"), parse_type("ufixed<6,2,RND_CONV,SAT>")
REQ_IN, REQ_OUT = parse_type("fixed<12,4>"), parse_type("fixed<7,3,RND_INF,SAT_SYM>")
FIFO_DEPTH_LOG2 = 2
SER_NAMES = {"in_valid": "s_valid", "in_ready": "s_ready", "in_data": "s_data", "out_valid": "m_tvalid",
             "out_ready": "m_tready", "out_data": "m_tdata", "out_last": "m_tlast"}
DES_NAMES = {"in_valid": "s_tvalid", "in_ready": "s_tready", "in_data": "s_tdata", "in_last": "s_tlast",
             "out_valid": "m_valid", "out_ready": "m_ready", "out_data": "m_data", "out_last": "m_last"}
STREAM_SIGNALS = ("in_valid", "in_ready", "in_data", "out_valid", "out_ready", "out_data", "in_last", "out_last")


def _connect(prefix: str, names: dict | None = None) -> str:
    """Port connections of a stream module to the wrapper ports <prefix><signal> (renamed per ``names``)."""
    names = names or {k: k for k in STREAM_SIGNALS[:6]}
    return ", ".join([".clk(clk)", ".rst(rst)"] + [f".{names[k]}({prefix}{k})" for k in STREAM_SIGNALS if k in names])


def _identity(name: str, width: int, rng, **timing) -> dict:
    data = [int(v) for v in rng.integers(0, 1 << width, size=N_SAMPLES)]
    t = FixedType(width, width, False)
    return {"kind": "stream", "name": name, "prefix": f"{name}_", "inputs": data, "expected": data,
            "in_fields": fields("x", t, 1), "out_fields": fields("y", t, 1), **timing}


def _elementwise(name: str, tin: FixedType, tout: FixedType, n: int, rule, rng) -> dict:
    x = random_codes(rng, tin, (N_SAMPLES, n))
    return {"kind": "stream", "name": name, "prefix": f"{name}_", "latency": 1, "ii": 1,
            "inputs": [pack(r, tin.width) for r in x], "expected": [pack(r, tout.width) for r in rule(x)],
            "in_fields": fields("x", tin, n), "out_fields": fields("y", tout, n)}


def _serdes(rng) -> tuple[dict, dict]:
    words = [int(v) for v in rng.integers(0, 1 << WORD_W, size=N_SAMPLES)]
    beats = [[(w >> (b * BUS_W)) & ((1 << BUS_W) - 1), int(b == BEATS - 1)] for w in words for b in range(BEATS)]
    word_t, beat_t = FixedType(WORD_W, WORD_W, False), FixedType(BUS_W, BUS_W, False)
    ser = {"kind": "stream", "name": "ser", "prefix": "ser_", "last": True, "latency": 1, "ii": BEATS,
           "full_rate": 6, "full_rate_out": 6 * BEATS, "inputs": [[w, 0] for w in words], "expected": beats,
           "in_fields": fields("word", word_t, 1), "out_fields": fields("beat", beat_t, 1)}
    # The deserializer also gets a packet cut short: tlast after 2 of 3 beats ends the word early.
    d_in = beats[:3 * BEATS] + [[0x5a, 0], [0xc3, 1]] + beats[3 * BEATS:]
    d_out = [[w, 1] for w in words[:3]] + [[0xc35a, 1]] + [[w, 1] for w in words[3:]]
    des = {"kind": "stream", "name": "des", "prefix": "des_", "last": True, "latency": BEATS, "ii": 1,
           "full_rate": BEATS, "inputs": d_in, "expected": d_out,
           "in_fields": fields("beat", beat_t, 1), "out_fields": fields("word", word_t, 1)}
    return ser, des


def stream_part(rng: np.random.Generator) -> Part:
    part = Part(library={"bf_skid_buffer.v", "bf_fifo.v", "bf_relu.v", "bf_requant_stage.v", "bf_requant.v",
                         "bf_serialize.v", "bf_deserialize.v"})
    relu_rule = lambda x: fixed.requantize(np.maximum(x, 0), RELU_IN, RELU_OUT)  # noqa: E731 (emulate's ReLU)
    ser, des = _serdes(rng)
    part.duts = [
        _identity("skid", 12, rng, latency=1, ii=1, registered_ready=True),
        _identity("skidfill", 12, rng, capacity=2, full_rate=0),
        _identity("fifo", 9, rng, capacity=1 << FIFO_DEPTH_LOG2, full_rate=0),
        _identity("fiforate", 9, rng, latency=1, ii=1),
        _elementwise("relu", RELU_IN, RELU_OUT, 3, relu_rule, rng),
        _elementwise("req", REQ_IN, REQ_OUT, 2, lambda x: fixed.requantize(x, REQ_IN, REQ_OUT), rng),
        ser, des,
    ]
    for p, w in (("skid_", 12), ("skidfill_", 12), ("fifo_", 9), ("fiforate_", 9)):
        part.ports += stream_ports(p, w, w)
    part.ports += stream_ports("relu_", 3 * RELU_IN.width, 3 * RELU_OUT.width)
    part.ports += stream_ports("req_", 2 * REQ_IN.width, 2 * REQ_OUT.width)
    part.ports += stream_ports("ser_", WORD_W, BUS_W, last=True) + stream_ports("des_", BUS_W, WORD_W, last=True)
    part.body += [
        f"bf_skid_buffer #(.W(12)) u_skid ({_connect('skid_')});",
        f"bf_skid_buffer #(.W(12)) u_skidfill ({_connect('skidfill_')});",
        f"bf_fifo #(.W(9), .DEPTH_LOG2({FIFO_DEPTH_LOG2})) u_fifo ({_connect('fifo_')});",
        f"bf_fifo #(.W(9), .DEPTH_LOG2({FIFO_DEPTH_LOG2})) u_fiforate ({_connect('fiforate_')});",
        f"bf_relu #({_params({'N': 3, **_type_in(RELU_IN), **type_parameters('OUT', RELU_OUT)})}) "
        f"u_relu ({_connect('relu_')});",
        f"bf_requant_stage #({_params({'N': 2, **_type_in(REQ_IN), **type_parameters('OUT', REQ_OUT)})}) "
        f"u_req ({_connect('req_')});",
        f"bf_serialize #(.WORD_W({WORD_W}), .BUS_W({BUS_W})) u_ser ({_connect('ser_', SER_NAMES)});",
        f"bf_deserialize #(.WORD_W({WORD_W}), .BUS_W({BUS_W})) u_des ({_connect('des_', DES_NAMES)});",
    ]
    return part


# -- layers through the emitters (Dense, LowRankDense, ReLU, Requantize) ----------------------------------------

N_DENSE = 160


def _codes(rng, t: FixedType, shape, zeros: float = 0.0) -> np.ndarray:
    c = rng.integers(t.min_code, t.max_code, size=shape, endpoint=True, dtype=np.int64)
    if zeros:
        c[rng.random(shape) < zeros] = 0
    return c


def dense_node(name, n_in, n_out, w, b, acc, rng, zeros=0.0, zero_row=False) -> ir.Dense:
    weight = _codes(rng, w, (n_out, n_in), zeros)
    if zero_row:
        weight[1] = 0
    bias = _codes(rng, b, n_out) if b is not None else None
    return ir.Dense(name, ("x",), ("y",), weight=weight, bias=bias, weight_type=w, bias_type=b, accum_type=acc)


def _low_rank(name, n_in, rank, n_out, w, mid, acc_v, acc, b, rng) -> ir.LowRankDense:
    return ir.LowRankDense(name, ("x",), ("y",), u=_codes(rng, w, (n_out, rank)), v=_codes(rng, w, (rank, n_in)),
                           bias=_codes(rng, b, n_out), u_type=w, v_type=w, bias_type=b, mid_type=mid,
                           accum_v_type=acc_v, accum_type=acc)


def dense_layers(rng: np.random.Generator) -> dict:
    """name -> (node, x type, y type, reuse, emitter options)."""
    f = parse_type
    x8, w6, b8 = f("fixed<8,3>"), f("fixed<6,2>"), f("fixed<8,3>")
    return {
        # Accumulator narrower than the exact sum (17 bits): its wrap acts; zero weights and a zero row. (A SAT
        # accumulator that a partial sum can leave saturates in input order, docs/ir.md: the RTL refuses it.)
        "par_sparse_narrow": (dense_node("fc_sparse", 6, 4, w6, b8, f("fixed<14,5,TRN,WRAP>"), rng, zeros=0.4,
                                      zero_row=True), x8, f("fixed<8,4,RND_CONV,SAT>"), 1, {"levels_per_stage": 1}),
        "par_unsigned_in": (dense_node("fc_relu_in", 5, 3, f("fixed<5,1>"), None, f("fixed<14,5,TRN,WRAP>"), rng),
                            f("ufixed<7,2>"), f("ufixed<6,3,TRN,WRAP>"), 1, {}),
        "par_wrap_acc": (dense_node("fc_wrap", 9, 2, w6, f("fixed<4,1>"), f("fixed<13,4,TRN,WRAP>"), rng), x8,
                         f("fixed<10,6,RND_INF,SAT_SYM>"), 1, {}),
        "fold_r3": (dense_node("fc_r3", 5, 3, w6, b8, f("fixed<15,6,TRN,SAT>"), rng), x8,
                    f("fixed<7,3,RND,SAT>"), 3, {}),
        "fold_r8_wide_lanes": (dense_node("fc_r8", 3, 5, w6, b8, f("fixed<20,11>"), rng), x8,
                               f("fixed<9,5,RND_MIN_INF,SAT_ZERO>"), 8, {}),
        "fold_one_multiplier": (dense_node("fc_r12", 4, 3, w6, None, f("fixed<20,11>"), rng), x8,
                                f("fixed<8,4,TRN_ZERO,SAT>"), 12, {"levels_per_stage": 1}),
        "fold_r7_unsigned": (dense_node("fc_r7u", 6, 4, f("ufixed<5,0>"), f("ufixed<4,2>"),
                                        f("ufixed<14,4,TRN,SAT>"), rng), f("ufixed<6,1>"),
                             f("ufixed<6,3,RND_CONV,SAT>"), 7, {"levels_per_stage": 1}),
        "lowrank_parallel": (_low_rank("lr_par", 6, 2, 5, w6, f("fixed<9,4,RND_CONV,SAT>"), f("fixed<20,11>"),
                                       f("fixed<18,9,TRN,SAT>"), b8, rng), x8, f("fixed<8,4,RND_CONV,SAT>"), 1, {}),
        "lowrank_folded": (_low_rank("lr_fold", 6, 3, 4, w6, f("fixed<7,3,RND,SAT>"), f("fixed<20,11>"),
                                     f("fixed<16,8,TRN,SAT>"), b8, rng), x8, f("fixed<8,4,RND_CONV,SAT>"), 4, {}),
        # A ReLU fused into the dense stage (options["relu_type"]: the ReLU's output type), into another type.
        "par_fused_relu": (dense_node("fc_fused", 6, 4, w6, b8, f("fixed<16,7>"), rng), x8,
                           f("fixed<9,4,RND_CONV,SAT>"), 1, {"relu_type": f("ufixed<6,3,RND,SAT>")}),
        "fold_fused_relu": (dense_node("fc_fused_r3", 5, 4, w6, b8, f("fixed<16,7>"), rng), x8,
                            f("fixed<8,4,TRN,SAT>"), 3, {"relu_type": f("fixed<8,4,TRN,SAT>")}),
        "lowrank_fused_relu": (_low_rank("lr_relu", 6, 2, 5, w6, f("fixed<9,4,RND_CONV,SAT>"), f("fixed<20,11>"),
                                         f("fixed<18,9,TRN,SAT>"), b8, rng), x8, f("fixed<8,4,RND_CONV,SAT>"), 2,
                               {"relu_type": f("ufixed<5,2,RND_INF,SAT>")}),
        "relu_emitted": (ir.ReLU("act", ("x",), ("y",)), f("fixed<8,3>"), f("ufixed<7,3,RND,SAT>"), 1, {}),
        "requantize_emitted": (ir.Requantize("rq", ("x",), ("y",)), f("fixed<10,4>"),
                               f("fixed<6,2,RND_CONV,SAT_SYM>"), 1, {}),
        # Folded by 19 into 2 groups of 2 lanes, 3 cycles a row, 6 passes (18 cycles of work, 1 idle): a
        # padded input, a padded row, and the block-RAM ROM (R >= dense.BLOCK_ROM_MIN_DEPTH).
        "fold_r19_padded": (dense_node("fc_r19", 5, 11, w6, b8, f("fixed<16,7,TRN,SAT>"), rng), x8,
                            f("fixed<8,4,RND_CONV,SAT>"), 19, {}),
        # The shared form (adder_graph.py) with a register after every adder level: a wrapping accumulator far
        # narrower than the sums (wires keep its low bits), an unread input, an all-negative row (a negated
        # sum) and a zero row whose output is its bias.
        "par_shared_wrap_deep": (_odd_rows(dense_node("fc_shared", 12, 6, w6, b8, f("fixed<12,3,TRN,WRAP>"), rng)),
                                 x8, f("fixed<7,2,RND,SAT>"), 1, {"cut_depth": 1}),
        # Per-column sharing only, unsigned inputs, two levels a stage, a fused ReLU.
        "par_shared_column": (dense_node("fc_column", 7, 5, f("fixed<5,1>"), None, f("fixed<14,6,TRN,SAT>"), rng,
                                         zeros=0.2), f("ufixed<6,2>"), f("fixed<8,4,RND_CONV,SAT>"), 1,
                              {"share": "column", "cut_depth": 2, "relu_type": f("ufixed<5,2,RND_INF,SAT>")}),
        # bf_dense_parallel, still selectable (option parallel="per_weight").
        "par_per_weight": (dense_node("fc_per_weight", 6, 4, w6, b8, f("fixed<15,6,TRN,SAT>"), rng, zeros=0.4,
                                      zero_row=True), x8, f("fixed<8,4,RND_CONV,SAT>"), 1, {"parallel": "per_weight"}),
        "lowrank_shared_deep": (_low_rank("lr_deep", 8, 3, 6, w6, f("fixed<9,4,RND_CONV,SAT>"),
                                          f("fixed<13,4,TRN,WRAP>"), f("fixed<18,9,TRN,SAT>"), b8, rng), x8,
                                f("fixed<8,4,RND_CONV,SAT>"), 1, {"cut_depth": 1}),
    }


def _odd_rows(node: ir.Dense) -> ir.Dense:
    """Input 2 unread, row 0 negative powers of two and a negative bias (every term negative, so its sum is a
    negation), row 1 zero (its output is the bias alone)."""
    node.weight[0] = [-(1 << (i % 3)) for i in range(node.weight.shape[1])]
    node.bias[0] = -3
    node.weight[:, 2] = 0
    node.weight[1] = 0
    return node


#: Elements of the element-wise layers' tensors.
N_ELEMENTS = 4


def features(node) -> tuple[int, int]:
    if isinstance(node, (ir.Dense, ir.LowRankDense)):
        return node.in_features, node.out_features
    return N_ELEMENTS, N_ELEMENTS


def golden(node, x: np.ndarray, xt: FixedType, yt: FixedType, relu_type: FixedType | None = None) -> np.ndarray:
    """The golden model's codes for one layer (emulate's rules), then a fused ReLU's if there is one."""
    if relu_type is not None:
        return fixed.requantize(np.maximum(golden(node, x, xt, yt), 0), yt, relu_type)
    if isinstance(node, ir.ReLU):
        return fixed.requantize(np.maximum(x, 0), xt, yt)
    if isinstance(node, ir.Requantize):
        return fixed.requantize(x, xt, yt)
    if isinstance(node, ir.Dense):
        return emulate.dense_stage(x, xt, node.weight, node.weight_type, node.bias, node.bias_type,
                                   node.accum_type, yt)
    h = emulate.dense_stage(x, xt, node.v, node.v_type, None, None, node.accum_v_type, node.mid_type)
    return emulate.dense_stage(h, node.mid_type, node.u, node.u_type, node.bias, node.bias_type, node.accum_type, yt)


def stage_ports(prefix: str) -> Ports:
    return Ports("clk", "rst", *(f"{prefix}{s}" for s in STREAM_SIGNALS[:6]))


def emit(node, xt: FixedType, yt: FixedType, reuse: int, options: dict, prefix: str) -> Stage:
    """The node's stage exactly as the RTL generator would ask for it."""
    n_in, n_out = features(node)
    g = ir.Graph("t", ["x"], ["y"], {"x": ir.TensorSpec("x", (n_in,), xt), "y": ir.TensorSpec("y", (n_out,), yt)},
                 [node])
    options = dict(options)
    relu_type = options.pop("relu_type", None)
    return EMITTERS[node.OP](StageRequest(g, node, xt, n_in, yt, n_out, stage_ports(prefix), f"u_{prefix}dut",
                                          reuse, options, relu_type=relu_type))


def dense_part(rng: np.random.Generator) -> tuple[Part, dict[str, Stage]]:
    part, stages = Part(), {}
    for name, (node, xt, yt, reuse, options) in dense_layers(rng).items():
        p = f"{name}_"
        st = stages[name] = emit(node, xt, yt, reuse, options, p)
        n_in, n_out = features(node)
        x = random_codes(rng, xt, (N_DENSE, n_in))
        relu_type = options.get("relu_type")
        expected = golden(node, x, xt, yt, relu_type)
        yt = relu_type or yt
        part.ports += stream_ports(p, n_in * xt.width, n_out * yt.width)
        part.body.append(st.instance)
        part.library.update(st.library)
        part.duts.append({"kind": "stream", "name": name, "prefix": p, "latency": st.latency, "ii": st.ii,
                          "inputs": [pack(r, xt.width) for r in x],
                          "expected": [pack(r, yt.width) for r in expected],
                          "in_fields": fields("x", xt, n_in), "out_fields": fields("y", yt, n_out)})
    return part, stages


# -- the whole catalogue ------------------------------------------------------------------------------------------

def library_design() -> tuple[str, list[dict], list[str], dict[str, Stage]]:
    """(wrapper text, bench DUT plans, rtl/ files, the emitted dense stages by DUT name)."""
    rng = np.random.default_rng(SEED)
    layers, stages = dense_part(rng)
    parts = [requant_part(rng), arith_part(rng), stream_part(rng), layers]
    ports = [p for part in parts for p in part.ports]
    body = [b for part in parts for b in part.body]
    library = sorted(set().union(*(part.library for part in parts)))
    return top_text(TOP, ports, body), [d for part in parts for d in part.duts], library, stages


_RESULTS: dict[str, dict] = {}


def library_results(simulator: str) -> dict[str, dict]:
    """Per-DUT results of the whole catalogue on ``simulator`` (simulated once per process and pytest run)."""
    if simulator not in _RESULTS:
        top, duts, library, _ = library_design()
        _RESULTS[simulator] = simulate(simulator, TOP, top, library, duts, seed=SEED)
    return _RESULTS[simulator]
