"""RTL forms of the element-wise and small ops: ScaleShift, LeakyReLU, Clip, HardSigmoid (and HardSwish), Table,
Softmax, ArgMax, Reshape and Transpose. Each is one instance of an ``rtl/`` library module whose parameters
come from the node (templates/elementwise.v.j2), computing exactly the op's rule in ``emulate._FIXED_RULES``.

Every rounding and overflow step goes through ``bf_requant`` (directly, or inside ``bf_bias_requant`` and
``bf_mul``): no stage rounds in a way of its own. Constant multiplies (ScaleShift's scales, LeakyReLU's slopes,
HardSigmoid's alpha) are ``bf_const_mul`` shift-add graphs, as a dense layer's constant weights are at reuse 1;
they build no DSP block, so these ops register no ``multiplies`` for ``--reuse auto`` (which budgets DSP
blocks). The variable multiplies are HardSwish's ``x * h`` and Softmax's ``e * r``, one per element: the
stage's ``resources`` count them (``stages.MULTIPLIES`` sees a node without its tensor shapes, so it cannot).

Timing (also in each module's header): the pipelined stages run at II 1 with one stall signal for all their
registers (``bf_pipe_valid``). Latency: Clip, ArgMax and Table 1; ScaleShift, LeakyReLU and HardSigmoid 2;
Softmax 4 + clog2(K) // levels_per_stage. Reshape and Transpose are wiring (``bf_permute``): latency 0, valid,
ready and data pass straight through, and the generator's skid buffer after them is their only register.
Table is the one op that folds: at reuse R, R elements share a ROM (``bf_table_folded``, II R, latency R + 2).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ...emulate import clip_codes
from ...fixed import FixedType, clog2, signed_bits
from ...ir import ArgMax, Clip, HardSigmoid, LeakyReLU, Reshape, ScaleShift, Softmax, Table, Transpose
from .stages import Stage, StageRequest, emitter
from .verilog import (
    OVERFLOW_CODE,
    UNTYPED,
    RtlError,
    packed_parameter,
    signed_width,
    templates,
    type_parameters,
    verilog_literal,
)

#: bf_const_mul recodes its constant on Verilog integers: at most this many bits.
CONST_MUL_MAX_BITS = 30
#: Adder levels between the registers of Softmax's sum tree (option ``levels_per_stage``), as a dense tree's.
LEVELS_PER_STAGE = 2
#: Every pipelined stage's stall control.
CONTROL = ("bf_pipe_valid.v",)
TABLE_LIBRARY = ("bf_table.v", "bf_table_rom.v") + CONTROL
TABLE_FOLDED_LIBRARY = ("bf_table_folded.v", "bf_table_rom.v")


@dataclass(frozen=True)
class Module:
    """One library instance: its module, parameters (name, Verilog text), timing and cost."""

    name: str
    params: list[tuple[str, object]]
    latency: int
    library: tuple[str, ...]
    summary: str
    ii: int = 1
    resources: Optional[dict] = None
    reuse: int = 1


def _stage(req: StageRequest, m: Module) -> Stage:
    text = templates().get_template("elementwise.v.j2").render(
        where=req.node.describe(), summary=m.summary, x_type=req.in_type.to_short(), y_type=req.out_type.to_short(),
        n_in=req.in_count, n_out=req.out_count, latency=m.latency, ii=m.ii, module=m.name,
        params=[(k, str(v)) for k, v in m.params], instance=req.instance_name, ports=req.ports)
    return Stage(text, m.latency, m.ii, m.library, resources=m.resources or {"multipliers": 0}, reuse=m.reuse)


def _shape(req: StageRequest) -> tuple[int, ...]:
    return tuple(req.graph.tensors[req.node.inputs[0]].shape)


def _x(prefix: str, t: FixedType, frac: bool = True) -> list[tuple[str, object]]:
    """``<P>_W``, ``<P>_FRAC`` (if asked) and ``<P>_SIGNED`` of a type."""
    out = [(f"{prefix}_W", t.width)]
    if frac:
        out.append((f"{prefix}_FRAC", t.frac))
    return out + [(f"{prefix}_SIGNED", int(t.signed))]


def _out(t: FixedType) -> list[tuple[str, object]]:
    return list(type_parameters("OUT", t).items())


def _same_count(req: StageRequest) -> None:
    if req.in_count != req.out_count:
        raise RtlError(f"{req.node.describe()}: {req.in_count} inputs but {req.out_count} outputs; an element-wise "
                       "op keeps the shape")


def _const_width(req: StageRequest, field: str, t: FixedType) -> None:
    if t.width > CONST_MUL_MAX_BITS:
        raise RtlError(f"{req.node.describe()}: {field} {t} is {t.width} bits wide; the RTL's constant multipliers "
                       f"take at most {CONST_MUL_MAX_BITS} (quantize it to a narrower type)")


def _channels(req: StageRequest, count: int) -> tuple[int, int]:
    """(C, SPAN) for ``count`` per-channel constants: SPAN elements per constant, channels-first; one constant
    covers the whole tensor."""
    if count == 1:
        return 1, req.in_count
    shape = _shape(req)
    if shape[0] != count:
        raise RtlError(f"{req.node.describe()}: {count} per-channel values for {shape[0]} channels")
    return count, math.prod(shape[1:])


# -- ScaleShift, LeakyReLU, Clip, HardSigmoid ------------------------------------------------------------------

@emitter("ScaleShift")
def emit_scale_shift(req: StageRequest) -> Stage:
    n: ScaleShift = req.node
    _same_count(req)
    x, st = req.in_type, n.need("scale_type", *UNTYPED)
    acc = n.need("accum_type", *UNTYPED)
    _const_width(req, "scale_type", st)
    if acc.frac != x.frac + st.frac:
        raise RtlError(f"{n.describe()}: accumulator {acc} must have frac(x) + frac(scale) = {x.frac + st.frac} "
                       "fractional bits (run ir.validate)")
    c, span = _channels(req, len(n.scale))
    params: list = [("N", req.in_count), ("C", c), ("SPAN", span), *_x("X", x, frac=False), *_x("S", st, frac=False),
                    ("SCALE", packed_parameter(np.asarray(n.scale).ravel(), st.width))]
    if n.shift is not None:
        ht = n.need("shift_type", *UNTYPED)
        if ht.frac > acc.frac:
            raise RtlError(f"{n.describe()}: shift type {ht} is finer than the accumulator {acc}")
        params += [("HAS_SHIFT", 1), *_x("H", ht), ("SHIFT", packed_parameter(np.asarray(n.shift).ravel(), ht.width))]
    params += [*_x("ACC", acc), ("ACC_OVERFLOW", OVERFLOW_CODE[acc.overflow.value]), *_out(req.out_type)]
    return _stage(req, Module("bf_scale_shift", params, 2, ("bf_scale_shift.v", "bf_const_mul.v", "bf_bias_requant.v",
                                                            "bf_requant.v") + CONTROL,
                              f"x * scale[c] + shift[c], {c} channel(s) of {span}, accumulator {acc.to_short()}"))


@emitter("LeakyReLU")
def emit_leaky_relu(req: StageRequest) -> Stage:
    n: LeakyReLU = req.node
    _same_count(req)
    x, at = req.in_type, n.need("alpha_type", *UNTYPED)
    _const_width(req, "alpha_type", at)
    if at.frac < 0:
        raise RtlError(f"{n.describe()}: alpha type {at} has {at.frac} fractional bits; x >= 0 is kept exactly at "
                       "frac(x) + frac(alpha), which needs frac(alpha) >= 0")
    c, span = _channels(req, len(n.alpha))
    params = [("N", req.in_count), ("C", c), ("SPAN", span), *_x("X", x), *_x("A", at),
              ("ALPHA", packed_parameter(np.asarray(n.alpha).ravel(), at.width)), *_out(req.out_type)]
    return _stage(req, Module("bf_leaky_relu", params, 2, ("bf_leaky_relu.v", "bf_const_mul.v", "bf_requant.v")
                              + CONTROL, f"x >= 0 ? x : x * alpha[c], {c} slope(s)"))


@emitter("Clip")
def emit_clip(req: StageRequest) -> Stage:
    n: Clip = req.node
    _same_count(req)
    x = req.in_type
    lo, hi = clip_codes(n, x)
    # A bound that no input code passes changes nothing: it costs no comparator.
    lo = None if lo is not None and lo <= x.min_code else lo
    hi = None if hi is not None and hi >= x.max_code else hi
    v_w = max([x.width + (0 if x.signed else 1)] + [signed_bits(b) for b in (lo, hi) if b is not None]) + 1
    params = [("N", req.in_count), *_x("X", x), ("V_W", v_w),
              ("HAS_LO", int(lo is not None)), ("LO", verilog_literal(lo or 0, v_w)),
              ("HAS_HI", int(hi is not None)), ("HI", verilog_literal(hi or 0, v_w)), *_out(req.out_type)]
    shown = lambda b: "open" if b is None else f"code {b}"  # noqa: E731
    return _stage(req, Module("bf_clip", params, 1, ("bf_clip.v", "bf_requant.v") + CONTROL,
                              f"min(max(x, lo), hi), lo {shown(lo)}, hi {shown(hi)}"))


def hard_sigmoid_sum_width(x: FixedType, at: FixedType, beta_x: int) -> int:
    """Bits of t = x * alpha + beta_x (signed) that also hold 2**F + 1, F = frac(x) + frac(alpha)."""
    p_w = x.width + at.width + (0 if (x.signed or at.signed) else 1)
    return max(p_w, signed_bits(beta_x), x.frac + at.frac + 2) + 1


@emitter("HardSigmoid")
def emit_hard_sigmoid(req: StageRequest) -> Stage:
    n: HardSigmoid = req.node
    _same_count(req)
    x, at = req.in_type, n.need("alpha_type", *UNTYPED)
    _const_width(req, "alpha_type", at)
    f = x.frac + at.frac
    if x.frac < 0 or f < 0:
        raise RtlError(f"{n.describe()}: frac(x) = {x.frac} and frac(x) + frac(alpha) = {f} must both be >= 0 "
                       "(the clamp's 1 is 2**F codes)")
    beta_x = int(n.beta_code) << x.frac
    t_w = hard_sigmoid_sum_width(x, at, beta_x)
    params = [("N", req.in_count), *_x("X", x), *_x("A", at), ("ALPHA", verilog_literal(int(n.alpha_code), at.width)),
              ("T_W", t_w), ("BETA_X", verilog_literal(beta_x, t_w)), ("SWISH", int(n.swish)), *_out(req.out_type)]
    what = "x * clamp(alpha x + beta, 0, 1) (HardSwish)" if n.swish else "clamp(alpha x + beta, 0, 1)"
    library = ("bf_hard_sigmoid.v", "bf_const_mul.v", "bf_mul.v", "bf_requant.v") + CONTROL
    return _stage(req, Module("bf_hard_sigmoid", params, 2, library, f"{what}, alpha code {n.alpha_code}, beta code "
                              f"{n.beta_code} of {at.to_short()}",
                              resources={"multipliers": req.in_count if n.swish else 0}))


# -- tables: Table, Softmax --------------------------------------------------------------------------------------

def _table_parameters(x: FixedType, table: np.ndarray, y_w: int, lo: int, shift: int) -> list[tuple[str, object]]:
    """bf_table_rom's parameters (bf_table and bf_table_folded take the same)."""
    lo_w = signed_width(lo)
    return [("X_W", x.width), ("X_SIGNED", int(x.signed)), ("LO_W", lo_w), ("INDEX_LO", verilog_literal(lo, lo_w)),
            ("SHIFT", shift), ("ENTRIES", len(table)), ("Y_W", y_w),
            ("TABLE", packed_parameter(np.asarray(table).ravel(), y_w))]


def table_latency(reuse: int) -> int:
    """bf_table (reuse 1): the ROM register; bf_table_folded: accept, R issue cycles, the last shift."""
    return 1 if reuse == 1 else reuse + 2


@emitter("Table")
def emit_table(req: StageRequest) -> Stage:
    """A ROM per element, or with ``--reuse R`` one ROM per R elements (II R)."""
    n: Table = req.node
    _same_count(req)
    if n.table is None:
        raise RtlError(f"{n.describe()}: a fixed-point Table needs its table of output codes (the quantization "
                       "pass builds it)")
    y = req.out_type
    reuse = max(1, min(req.reuse, req.in_count))
    rom = _table_parameters(req.in_type, n.table, y.width, int(n.index_lo), int(n.index_shift))
    lanes = -(-req.in_count // reuse)
    resources = {"multipliers": 0, "roms": lanes, "rom_bits": lanes * len(n.table) * y.width}
    what = (f"{n.function} table of {len(n.table)} entries, index clamp((x - {n.index_lo}) >> {n.index_shift}, 0, "
            f"{len(n.table) - 1})")
    if reuse == 1:
        return _stage(req, Module("bf_table", [("N", req.in_count), *rom], 1, TABLE_LIBRARY,
                                  f"{what}, a ROM per element", resources=resources))
    return _stage(req, Module("bf_table_folded", [("N", req.in_count), ("R", reuse), *rom], table_latency(reuse),
                              TABLE_FOLDED_LIBRARY, f"{what}, {lanes} ROM(s) of {reuse} elements each", ii=reuse,
                              resources=resources, reuse=reuse))


def softmax_latency(k: int, levels_per_stage: int = LEVELS_PER_STAGE) -> int:
    """bf_softmax: max, exp ROM, the sum tree's registers, reciprocal ROM, product and output."""
    return 4 + clog2(k) // levels_per_stage


@emitter("Softmax")
def emit_softmax(req: StageRequest) -> Stage:
    n: Softmax = req.node
    _same_count(req)
    for field in ("exp_table", "recip_table"):
        if getattr(n, field) is None:
            raise RtlError(f"{n.describe()}: {field} is not set; the quantization pass builds the softmax tables")
    et, rt = n.need("exp_type", *UNTYPED), n.need("recip_type", *UNTYPED)
    lps = int(req.options.get("levels_per_stage", LEVELS_PER_STAGE))
    if lps < 1:
        raise RtlError(f"{n.describe()}: levels_per_stage must be at least 1, got {lps}")
    k = _shape(req)[-1]
    g = req.in_count // k
    recip_lo = int(n.recip_lo)
    rlo_w = signed_width(recip_lo)
    params = [("G", g), ("K", k), ("X_W", req.in_type.width), ("X_SIGNED", int(req.in_type.signed)),
              ("E_ENTRIES", len(n.exp_table)), ("E_W", et.width), ("E_FRAC", et.frac), ("EXP_SHIFT", n.exp_shift),
              ("EXP_TABLE", packed_parameter(np.asarray(n.exp_table).ravel(), et.width)),
              ("R_ENTRIES", len(n.recip_table)), ("R_W", rt.width), ("R_FRAC", rt.frac),
              ("RLO_W", rlo_w), ("RECIP_LO", verilog_literal(recip_lo, rlo_w)), ("RECIP_SHIFT", n.recip_shift),
              ("RECIP_TABLE", packed_parameter(np.asarray(n.recip_table).ravel(), rt.width)),
              ("LEVELS_PER_STAGE", lps), *_out(req.out_type)]
    library = ("bf_softmax.v", "bf_argmax_tree.v", "bf_table_rom.v", "bf_adder_tree.v", "bf_mul.v", "bf_requant.v") \
        + CONTROL
    rom_bits = req.in_count * len(n.exp_table) * et.width + g * len(n.recip_table) * rt.width
    return _stage(req, Module("bf_softmax", params, softmax_latency(k, lps), library,
                              f"softmax over {g} group(s) of {k}: exp table {len(n.exp_table)} x {et.to_short()}, "
                              f"reciprocal table {len(n.recip_table)} x {rt.to_short()}",
                              resources={"multipliers": req.in_count, "roms": req.in_count + g, "rom_bits": rom_bits}))


# -- ArgMax, Reshape, Transpose ----------------------------------------------------------------------------------

@emitter("ArgMax")
def emit_argmax(req: StageRequest) -> Stage:
    n: ArgMax = req.node
    k = _shape(req)[-1]
    g = req.in_count // k
    y = req.out_type
    if req.out_count != g or y.frac != 0 or y.max_code < k - 1:
        raise RtlError(f"{n.describe()}: the output must be {g} integer code(s) that hold 0..{k - 1}, found "
                       f"{req.out_count} of {y} (run ir.validate)")
    params = [("G", g), ("K", k), ("X_W", req.in_type.width), ("X_SIGNED", int(req.in_type.signed)), ("OUT_W", y.width)]
    return _stage(req, Module("bf_argmax", params, 1, ("bf_argmax.v", "bf_argmax_tree.v") + CONTROL,
                              f"index of the first maximum of each of {g} group(s) of {k}"))


def _wiring(req: StageRequest, source: Optional[np.ndarray], summary: str) -> Stage:
    """bf_permute: out element i = in element source[i] (None: the identity)."""
    if req.in_type != req.out_type or req.in_count != req.out_count:
        raise RtlError(f"{req.node.describe()}: moves data only, so the output ({req.out_count} x {req.out_type}) "
                       f"must be the input's ({req.in_count} x {req.in_type})")
    iw = max(1, clog2(req.in_count))
    params: list = [("N", req.in_count), ("W", req.in_type.width), ("IW", iw)]
    params += [("IDENTITY", 1)] if source is None else [("PERM", packed_parameter(source, iw))]
    return _stage(req, Module("bf_permute", params, 0, ("bf_permute.v",), summary))


def transpose_sources(shape: tuple[int, ...], perm: tuple[int, ...]) -> np.ndarray:
    """For each C-order element of the transposed tensor, the C-order index it comes from."""
    return np.arange(math.prod(shape)).reshape(shape).transpose(perm).ravel()


@emitter("Reshape")
def emit_reshape(req: StageRequest) -> Stage:
    n: Reshape = req.node
    out = req.graph.tensors[n.output].shape
    return _wiring(req, None, f"{_shape(req)} -> {tuple(out)}: the same C-order elements, wiring")


@emitter("Transpose")
def emit_transpose(req: StageRequest) -> Stage:
    n: Transpose = req.node
    return _wiring(req, transpose_sources(_shape(req), tuple(n.perm)),
                   f"perm {tuple(n.perm)} of {_shape(req)}: a wire permutation")


__all__ = ["emit_scale_shift", "emit_leaky_relu", "emit_clip", "emit_hard_sigmoid", "emit_table", "emit_softmax",
           "emit_argmax", "emit_reshape", "emit_transpose", "table_latency", "softmax_latency",
           "transpose_sources", "hard_sigmoid_sum_width", "CONST_MUL_MAX_BITS", "LEVELS_PER_STAGE"]
