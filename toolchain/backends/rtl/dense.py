"""RTL forms of ``Dense``, ``LowRankDense``, ``ReLU`` and ``Requantize``: instances of the ``rtl/`` library.

A dense layer at reuse 1 is fully parallel, by default as one shared shift-add graph (``parallel="shared"``:
adder_graph.py plans it, templates/dense_shared.v.j2 spells it inline in the parent module, with
registers only at depth cuts), or as ``bf_dense_parallel`` (``parallel="per_weight"``: a shift-add multiplier
and a product register per weight, an adder tree per output). At reuse R > 1 it is ``bf_dense_folded``
(about products / R multipliers fed from a weight ROM, II R). All compute exactly ``emulate.dense_stage``.
``LowRankDense`` is two dense stages, V then U, joined by a stream of the node's ``mid_type``. ReLU and
Requantize are one registered requantizer per element.

Emitter options (``StageRequest.options``): ``parallel``, ``share`` ("matrix", "column", "none": what the
shared graph shares, adder_graph.GraphOptions), ``cut_depth`` (adder levels between its registers) and
``levels_per_stage`` (the adder trees of the per-weight and folded forms).

Latency and II come from the same formulas as the modules' header comments (the shared form's from its
pipeline plan), so ``report.json`` states what the hardware does; the cocotb tests in ``tests/rtl`` measure
both against these numbers.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ...accumulate import exact_accumulation
from ...fixed import FixedType, Overflow, clog2
from ...ir import Dense, LowRankDense
from . import adder_graph
from .adder_graph import AdderGraph, GraphOptions, Pipeline, Wire, csd_digits, range_width
from .stages import Ports, Stage, StageRequest, WritePort, emitter
from .verilog import OVERFLOW_CODE, UNTYPED, RtlError, packed_parameter, templates, type_parameters

#: Tree levels between pipeline registers in the dense adder trees (option ``levels_per_stage``).
LEVELS_PER_STAGE = 2
#: Bits of one input index in bf_dense_parallel's TERM_INDEX.
INDEX_BITS = 16
#: The fully parallel forms (option ``parallel``): "shared" (one shared shift-add graph, adder_graph.py) or
#: "per_weight" (bf_dense_parallel: a shift-add multiplier per weight, an adder tree per output).
PARALLEL_FORMS = ("shared", "per_weight")
#: At most this many adder levels between two pipeline registers of the shared form (option ``cut_depth``):
#: about the 5 adder delays per stage of da4ml's documented latency cutoff, so the stages are as deep as its.
CUT_DEPTH = 5
#: Adder levels the shared form's output logic counts for (rounding increment, then saturation and a fused
#: ReLU's select): it runs in the last stage, after the deepest sum.
POST_LEVELS = 2
SHARED_LIBRARY = ("bf_bias_requant.v", "bf_activation.v", "bf_requant.v")
PARALLEL_LIBRARY = ("bf_dense_parallel.v", "bf_const_mul.v", "bf_mul.v", "bf_adder_tree.v", "bf_bias_requant.v",
                    "bf_activation.v", "bf_requant.v")
FOLDED_LIBRARY = ("bf_dense_folded.v", "bf_mul.v", "bf_adder_tree.v", "bf_bias_requant.v", "bf_activation.v",
                  "bf_requant.v")
FOLDED_RAM_LIBRARY = ("bf_dense_folded_ram.v",) + FOLDED_LIBRARY[1:]
ELEMENTWISE_LIBRARY = ("bf_requant_stage.v", "bf_requant.v")


@dataclass(frozen=True)
class DenseSpec:
    """One ``W x + b`` stage with its types: a Dense node, or one half of a LowRankDense."""

    where: str  # names the node (and half) in error messages
    weight: np.ndarray  # (out, in) integer codes
    bias: Optional[np.ndarray]
    x_type: FixedType
    w_type: FixedType
    b_type: Optional[FixedType]
    acc_type: FixedType
    out_type: FixedType
    relu_type: Optional[FixedType] = None  # a fused ReLU's output type (the stage then outputs this type)

    @property
    def y_type(self) -> FixedType:
        """The type the stage outputs: the fused ReLU's, or the layer's own."""
        return self.relu_type if self.relu_type is not None else self.out_type

    @property
    def n_in(self) -> int:
        return int(self.weight.shape[1])

    @property
    def n_out(self) -> int:
        return int(self.weight.shape[0])


# -- timing formulas (the modules' header comments state the same) ----------------------------------------

def parallel_latency(terms: int, levels_per_stage: int = LEVELS_PER_STAGE) -> int:
    """bf_dense_parallel: product register, tree registers, output register."""
    return 2 + clog2(terms) // levels_per_stage


@dataclass(frozen=True)
class FoldedTiling:
    """bf_dense_folded's schedule: G groups of S multipliers; a group finishes one output row every T
    cycles, so Q passes of T cycles (C = Q * T <= R) cover the rows, G at a time."""

    s: int
    g: int
    t: int
    q: int

    @property
    def lanes(self) -> int:
        return self.s * self.g

    @property
    def cycles(self) -> int:
        return self.q * self.t


def folded_tiling(n_in: int, n_out: int, reuse: int) -> FoldedTiling:
    """The module's tiling(): the T in 1 .. min(R, n_in) with the fewest multipliers, then the fewest groups
    (each group has its own accumulator and requantizer), then the smallest T."""
    best: Optional[tuple[int, int]] = None  # (multipliers, groups): the first T that reaches it wins
    top, t = min(reuse, n_in), 1
    while t <= top:  # only where ceil(n_in / T) or R // T changes: between, T costs the same and comes later
        a, r = -(-n_in // t), reuse // t
        g = -(-n_out // r)
        if best is None or (a * g, g) < best:
            best, t0 = (a * g, g), t
        t = min((n_in - 1) // (a - 1) if a > 1 else top, reuse // r, top) + 1
    g = best[1]
    s = -(-n_in // t0)
    return FoldedTiling(s=s, g=g, t=-(-n_in // s), q=-(-n_out // g))


def folded_latency(n_in: int, n_out: int, reuse: int, levels_per_stage: int = LEVELS_PER_STAGE) -> int:
    """bf_dense_folded: accept, C issue cycles, product register, tree registers, accumulator, output."""
    tiling = folded_tiling(n_in, n_out, reuse)
    return tiling.cycles + 3 + clog2(tiling.s) // levels_per_stage


def folded_multipliers(n_in: int, n_out: int, reuse: int) -> int:
    """Multipliers of the folded form: ceil(products / R) when R divides the outputs or is a multiple of
    them, a few more when it divides neither (the tiling pads rows or inputs with zero weights)."""
    return folded_tiling(n_in, n_out, reuse).lanes


#: Smallest reuse factor whose weight ROM asks synthesis for block RAM: shallower ROMs cost about one LUT
#: per bit as logic, less than a block RAM (an ECP5 EBR holds 512 words of 36 bits, an iCE40 one 256 x 16).
BLOCK_ROM_MIN_DEPTH = 16


def constant_multiplier_adders(c: int) -> int:
    """Adders bf_const_mul spends on ``x * c``: one per non-zero digit after the first (a lone -1 digit is
    a negation, which costs one too)."""
    digits = csd_digits(int(c))
    nonzero = sum(1 for d in digits if d)
    if nonzero == 0:
        return 0
    return nonzero - 1 + (0 if any(d > 0 for d in digits) else 1)


# -- checks ---------------------------------------------------------------------------------------------------

def _check_spec(s: DenseSpec) -> None:
    """The hardware sums exact products at frac(x) + frac(W) and applies the accumulator's overflow once: the IR's
    accumulation (hls4ml's, docs/ir.md) only where ``accumulate.exact_accumulation`` says it is that sum, and
    for accumulators at exactly that frac with the bias no finer."""
    _check_codes(s.where, "weight", s.weight, s.w_type)
    if s.bias is not None:
        _check_codes(s.where, "bias", s.bias, s.b_type)
    frac = s.x_type.frac + s.w_type.frac
    acc = s.acc_type
    alt = "or compile the model --to onnx or --to hls, which implement every accumulator"
    reason = exact_accumulation(s.x_type, s.weight, s.w_type, s.bias, s.b_type, acc)
    if reason is not None:
        raise RtlError(f"{s.where}: accumulator {acc} {reason}; the RTL backend builds exact accumulators only: give "
                       f"it frac(x) + frac(W) = {frac} fractional bits and WRAP overflow (e.g. "
                       f"{_at_frac(acc, frac, Overflow.WRAP)}, or run infer_precision to size it), {alt}")
    if acc.frac != frac:
        raise RtlError(f"{s.where}: accumulator {acc} has {acc.frac} fractional bits; its sums are exact, but the RTL "
                       f"backend builds accumulators with exactly frac(x) + frac(W) = {frac} (x {s.x_type}, W "
                       f"{s.w_type}): give it {frac} (e.g. {_at_frac(acc, frac, acc.overflow)}), {alt}")
    if s.bias is not None and s.b_type.frac > s.acc_type.frac:
        raise RtlError(f"{s.where}: bias type {s.b_type} is finer than the accumulator {s.acc_type} (its codes "
                       "lose nothing, but the hardware aligns a bias by appending bits only); give the bias at most "
                       f"{s.acc_type.frac} fractional bits, or compile the model --to onnx or --to hls")
    if s.n_in >= 1 << INDEX_BITS:
        raise RtlError(f"{s.where}: {s.n_in} inputs exceed the {1 << INDEX_BITS} that bf_dense_parallel indexes")


def _at_frac(t: FixedType, frac: int, overflow: Overflow) -> str:
    """``t`` with ``frac`` fractional bits and the same integer bits (a suggestion for a message)."""
    width = t.integer + frac
    return t.with_(width=width, overflow=overflow).to_short() if width >= 1 else f"a type with {frac} fractional bits"


def _check_codes(where: str, what: str, codes: np.ndarray, t: FixedType) -> None:
    codes = np.asarray(codes)
    if codes.dtype.kind not in "iuO":
        raise RtlError(f"{where}: {what} must be integer codes of {t}, found dtype {codes.dtype} "
                       "(run the quantize pass)")
    if codes.size and (int(codes.min()) < t.min_code or int(codes.max()) > t.max_code):
        raise RtlError(f"{where}: {what} codes span [{int(codes.min())}, {int(codes.max())}], outside {t} "
                       f"[{t.min_code}, {t.max_code}]; requantize the weights to their type")


# -- parameters -------------------------------------------------------------------------------------------------

Parameters = list[tuple[str, object]]


def _common_parameters(s: DenseSpec, levels_per_stage: int) -> tuple[Parameters, Parameters]:
    """The parameters both dense modules share: (those before the weights, those after)."""
    x, w, acc, y = s.x_type, s.w_type, s.acc_type, s.out_type
    head: Parameters = [("N_IN", s.n_in), ("N_OUT", s.n_out),
                        ("IN_W", x.width), ("IN_FRAC", x.frac), ("IN_SIGNED", int(x.signed)),
                        ("W_W", w.width), ("W_FRAC", w.frac), ("W_SIGNED", int(w.signed))]
    # The accumulator's rounding never acts (its frac is the products' frac): only its overflow is passed.
    tail: Parameters = [("HAS_BIAS", int(s.bias is not None)), *_bias_parameters(s),
                        ("ACC_W", acc.width), ("ACC_FRAC", acc.frac), ("ACC_SIGNED", int(acc.signed)),
                        ("ACC_OVERFLOW", OVERFLOW_CODE[acc.overflow.value]),
                        *type_parameters("OUT", y).items(), ("ACT", int(s.relu_type is not None)),
                        *type_parameters("Y", s.y_type).items(), ("LEVELS_PER_STAGE", levels_per_stage)]
    return head, tail


def _bias_parameters(s: DenseSpec) -> Parameters:
    if s.bias is None:
        return []
    b = s.b_type
    return [("B_W", b.width), ("B_FRAC", b.frac), ("B_SIGNED", int(b.signed)),
            ("BIAS", packed_parameter(np.asarray(s.bias).ravel(), b.width))]


def sparse_rows(weight: np.ndarray) -> tuple[int, list[list[tuple[int, int]]]]:
    """Each row's non-zero (input index, weight code) terms, and TERMS: the longest row (at least 1)."""
    rows = [[(int(i), int(row[i])) for i in np.flatnonzero(row)] for row in np.asarray(weight)]
    return max([1] + [len(r) for r in rows]), rows


def parallel_parameters(s: DenseSpec, levels_per_stage: int) -> tuple[Parameters, int, int]:
    """bf_dense_parallel's parameters, TERMS and the count of non-zero weights."""
    terms, rows = sparse_rows(s.weight)
    index, weights = [], []
    for row in rows:
        padded = row + [(0, 0)] * (terms - len(row))  # zero weights cost nothing and keep the trees equal
        index += [i for i, _ in padded]
        weights += [c for _, c in padded]
    head, tail = _common_parameters(s, levels_per_stage)
    head += [("TERMS", terms), ("TERM_INDEX", packed_parameter(index, INDEX_BITS)),
             ("TERM_WEIGHT", packed_parameter(weights, s.w_type.width))]
    return head + tail, terms, sum(len(r) for r in rows)


def folded_parameters(s: DenseSpec, reuse: int, levels_per_stage: int) -> Parameters:
    head, tail = _common_parameters(s, levels_per_stage)
    head += [("R", reuse), ("WEIGHTS", packed_parameter(np.asarray(s.weight).ravel(), s.w_type.width))]
    return head + tail + [("ROM_STYLE", int(reuse >= BLOCK_ROM_MIN_DEPTH))]


@dataclass(frozen=True)
class FoldedRam:
    """bf_dense_folded_ram's memories: ``weight_rows`` words of ``tiling.lanes`` weights (word c: what the ROM's
    word c holds) and ``bias_rows`` words of ``tiling.g`` biases (word p: the biases of pass p's rows); both
    depths are powers of two, so a word address is a bit field of the write address."""

    tiling: FoldedTiling
    weight_rows: int
    bias_rows: int


def folded_ram(n_in: int, n_out: int, reuse: int) -> FoldedRam:
    """The memories of a dense half at ``reuse`` (clamped to its products, as the emitter clamps it)."""
    tiling = folded_tiling(n_in, n_out, min(reuse, n_in * n_out))
    return FoldedRam(tiling, 1 << clog2(tiling.cycles), 1 << clog2(tiling.q))


def folded_ram_parameters(s: DenseSpec, reuse: int, levels_per_stage: int, port: WritePort,
                          keys: tuple[str, str]) -> Parameters:
    """bf_dense_folded_ram's parameters: the folded ones (initial contents included), where its two regions
    start in the device's weight address space (``keys``: the node's weight and bias array names), and
    block RAM for memories of BLOCK_ROM_MIN_DEPTH words or more (the ROM's rule)."""
    head, tail = _common_parameters(s, levels_per_stage)
    head += [("R", reuse), ("WEIGHTS", packed_parameter(np.asarray(s.weight).ravel(), s.w_type.width))]
    rows = folded_ram(s.n_in, s.n_out, reuse).weight_rows
    return head + tail + [("RAM_STYLE", int(rows >= BLOCK_ROM_MIN_DEPTH)), ("ADDR_W", port.addr_bits),
                          ("DATA_W", port.word_bits), ("W_BASE", port.bases[keys[0]]),
                          ("B_BASE", port.bases.get(keys[1], 0) if s.bias is not None else 0)]


def folded_rom_bits(s: DenseSpec, reuse: int) -> int:
    """Bits of bf_dense_folded's ROM: R words of the lanes' weights, three flags and the groups' biases."""
    tiling = folded_tiling(s.n_in, s.n_out, reuse)
    bias = tiling.g * s.b_type.width if s.bias is not None else 0
    return reuse * (tiling.lanes * s.w_type.width + 3 + bias)


# -- the shared form: one adder graph for the whole matrix (adder_graph.py) -------------------------------------

@dataclass(frozen=True)
class SharedPlan:
    """The shared form of one dense stage: the graph, each signal's wire, the pipeline."""

    graph: AdderGraph
    wires: tuple[Wire, ...]
    pipe: Pipeline
    modulus: int | None  # the accumulator's width when it wraps (sums are kept to its low bits)
    share: str
    cut_depth: int

    @property
    def latency(self) -> int:
        return self.pipe.latency


def shared_plan(s: DenseSpec, share: str = "matrix", cut_depth: int = CUT_DEPTH) -> SharedPlan:
    """Plan ``W x + b`` as one shift-add graph: the bias is a constant term in its output's sum (aligned to
    the accumulator's LSB), the sums are exact, or kept modulo 2**ACC_W when the accumulator wraps (what its
    overflow keeps anyway)."""
    x, acc = s.x_type, s.acc_type
    offsets = None
    if s.bias is not None:
        offsets = [int(b) << (acc.frac - s.b_type.frac) for b in np.asarray(s.bias).ravel()]
    try:
        graph = adder_graph.build(s.weight, x.min_code, x.max_code, offsets, GraphOptions(share))
        modulus = acc.width if acc.overflow == Overflow.WRAP else None
        wires = adder_graph.wires(graph, modulus)
        pipe = adder_graph.pipeline(graph, wires, cut_depth, POST_LEVELS, modulus)
    except adder_graph.AdderGraphError as e:
        raise RtlError(f"{s.where}: {e}") from None
    return SharedPlan(graph, tuple(wires), pipe, modulus, graph.share, cut_depth)


def _signal_name(plan: SharedPlan, sig: int, stage: int) -> str:
    """The wire that holds signal ``sig`` in ``stage``: its own (x<i>, a<id>) or a register copy (_r<stage>)."""
    g = plan.graph
    base = f"x{g.signals[sig].index}" if g.signals[sig].kind == "input" else f"a{sig}"
    return base if stage == plan.pipe.stage[sig] else f"{base}_r{stage}"


def _operand(plan: SharedPlan, sig: int, shift: int, width: int, stage: int) -> str:
    """``sig << shift`` in ``width`` bits, as Verilog: its low bits, sign- or zero-extended above when its wire
    is narrower (only an exact wire is), zeros below. Spelled here rather than by template macros: every adder
    has two (an 8-bit 784 x 64 layer has some 70,000 adders), and Jinja macro calls cost more than planning."""
    g, w = plan.graph, plan.wires[sig]
    if g.signals[sig].kind == "constant":
        return _constant(width, g.signals[sig].value << shift)
    room = width - shift
    if room <= 0:  # shifted past the kept bits: nothing left of it modulo 2**width
        return f"{width}'d0"
    src, have = _signal_name(plan, sig, stage), plan.pipe.width_in(sig, stage, w)
    take = min(have, room)
    parts = []
    if room > have:
        if not (w.exact and have == w.width):  # wires() and pipeline() rule it out: a reader gets what it needs
            raise RtlError(f"internal: signal {sig} has {have} bits in stage {stage} but is read as {room}")
        ext = room - have
        if not w.signed:
            parts.append(f"{ext}'d0")
        elif ext == 1:
            parts.append(f"{src}[{have - 1}]")
        else:
            parts.append(f"{{ {ext}{{ {src}[{have - 1}]}} }}")
    parts.append(src if take == have else f"{src}[{take - 1}:0]")
    if shift:
        parts.append(f"{shift}'d0")
    return parts[0] if len(parts) == 1 else "{" + ", ".join(parts) + "}"


def _constant(width: int, value: int) -> str:
    """``value`` modulo 2**width as a sized hex literal."""
    return f"{width}'h{value % (1 << width):x}"


def _output_sum(plan: SharedPlan, s: DenseSpec, o: int) -> dict:
    """The sum wire bf_bias_requant reads for output o: exact, or the accumulator's low bits when it wraps."""
    g, last = plan.graph, len(plan.pipe.cuts)
    t = g.outputs[o]
    lo, hi = adder_graph.output_range(g, o)
    width = adder_graph.output_width(g, o, plan.modulus)
    # Past the accumulator's width only its low bits are kept: read them as it reads them.
    signed = int(lo < 0) if width == range_width(lo, hi) else int(s.acc_type.signed)
    row = {"index": o, "sum_w": width, "sum_signed": signed, "negate": False}
    if t is None or g.signals[t.signal].kind == "constant":  # no weights: the bias (or zero) is the sum
        value = lo  # lo == hi
        return {**row, "sum": _constant(width, value)}
    return {**row, "negate": t.negative, "sum": _operand(plan, t.signal, t.shift, width, last)}


def shared_context(s: DenseSpec, plan: SharedPlan, ports: Ports) -> dict:
    """What dense_shared.v.j2 renders: inputs, adders and registers per stage, the output logic."""
    g, pipe, wires = plan.graph, plan.pipe, plan.wires
    n_stages = len(pipe.cuts) + 1
    read_by_any = {op for n in g.signals if n.is_add for op in (n.x, n.y)} | {
        t.signal for t in g.outputs if t is not None}
    read = [i for i in range(g.n_in) if i in read_by_any]
    is_read = set(read)
    inputs = [{"name": f"x{i}", "lsb": i * s.x_type.width, "width": wires[i].width} for i in read]
    unread = []
    for i in range(g.n_in):
        kept = wires[i].width if i in is_read else 0
        if kept < s.x_type.width:
            unread.append({"lo": i * s.x_type.width + kept, "hi": (i + 1) * s.x_type.width - 1})
    levels = [0, *pipe.cuts, g.depth()]
    stages = [{"index": k, "first_level": levels[k] + 1 if k else 1, "last_level": levels[k + 1], "adders": [],
               "registers": []} for k in range(n_stages)]
    for sig, node in enumerate(g.signals):
        k = pipe.stage[sig]
        if node.is_add:
            w = wires[sig]
            lo, hi = g.ranges[sig]
            stages[k]["adders"].append({
                "name": _signal_name(plan, sig, k), "width": w.width, "subtract": node.subtract, "lo": lo, "hi": hi,
                "truncated": not w.exact,
                "x": _operand(plan, node.x, node.x_shift, w.width, k),
                "y": _operand(plan, node.y, node.y_shift, w.width, k)})
        for j, bits in enumerate(pipe.copies[sig]):  # the copy of stage c is registered at the end of stage c - 1
            c = k + 1 + j
            stages[c - 1]["registers"].append({"name": _signal_name(plan, sig, c), "width": bits,
                                               "src": _signal_name(plan, sig, c - 1),
                                               "narrows": bits < pipe.width_in(sig, c - 1, wires[sig])})
    acc, y = s.acc_type, s.out_type
    requant = [("ACC_W", acc.width), ("ACC_FRAC", acc.frac), ("ACC_SIGNED", int(acc.signed)),
               ("ACC_OVERFLOW", OVERFLOW_CODE[acc.overflow.value]), *type_parameters("OUT", y).items()]
    activation = [("ACT", int(s.relu_type is not None)), ("IN_W", y.width), ("IN_FRAC", y.frac),
                  ("IN_SIGNED", int(y.signed)), *type_parameters("OUT", s.y_type).items()]
    weights = np.asarray(s.weight)
    return {"inputs": inputs, "unread": unread, "stages": stages, "requant": requant, "activation": activation,
            "outputs": [_output_sum(plan, s, o) for o in range(s.n_out)], "out_w": y.width, "y_w": s.y_type.width,
            "adders": g.adders, "nonzero": int(np.count_nonzero(weights)),
            "digits": sum(sum(1 for d in csd_digits(int(c)) if d) for c in weights.ravel()), "share": plan.share,
            "wraps": plan.modulus is not None, "cuts": list(pipe.cuts), "depth": g.depth(),
            "cut_depth": plan.cut_depth, "register_bits": pipe.register_bits, "latency": plan.latency}


# -- stages ---------------------------------------------------------------------------------------------------------

@dataclass
class DenseStage:
    """One rendered dense instance and what it costs."""

    text: str
    latency: int
    ii: int
    reuse: int
    library: tuple[str, ...]
    resources: dict


def dense_instance(s: DenseSpec, instance: str, ports: Ports, reuse: int,
                   levels_per_stage: int = LEVELS_PER_STAGE, parallel: str = "shared", share: str = "matrix",
                   cut_depth: int = CUT_DEPTH, write_port: Optional[WritePort] = None,
                   keys: tuple[str, str] = ("weight", "bias")) -> DenseStage:
    """Render one dense stage: parallel for reuse 1 (``parallel`` picks the form), else folded with reuse
    clamped to the product count.

    With a ``write_port`` (``--weights ram``) the stage is always ``bf_dense_folded_ram``, reuse 1 included:
    a weight that can change cannot be a shift-add graph of its digits, so reuse 1 becomes one multiplier per
    weight fed from registers (the folded form with one-word memories, II 1). That is what reuse 1 means,
    and it is what a small layer wants; a layer too big for that many multipliers needs a reuse factor
    (``--reuse auto`` picks one that fits the target, counting these multipliers). ``keys`` name the node's
    weight and bias arrays in ``write_port.bases``."""
    _check_spec(s)
    if reuse < 1:
        raise RtlError(f"{s.where}: reuse factor must be at least 1, got {reuse}")
    if levels_per_stage < 1:
        raise RtlError(f"{s.where}: levels_per_stage must be at least 1, got {levels_per_stage}")
    if parallel not in PARALLEL_FORMS:
        raise RtlError(f"{s.where}: parallel form {parallel!r} unknown; choose one of {', '.join(PARALLEL_FORMS)}")
    products = s.n_in * s.n_out
    reuse = min(reuse, products)
    ctx = dict(where=s.where, instance=instance, ports=ports, n_in=s.n_in, n_out=s.n_out,
               x_type=s.x_type.to_short(), w_type=s.w_type.to_short(), acc_type=s.acc_type.to_short(),
               out_type=s.out_type.to_short(), products=products,
               relu_type=s.relu_type.to_short() if s.relu_type is not None else None)
    if write_port is not None:
        return _folded_ram_instance(s, ctx, reuse, levels_per_stage, write_port, keys)
    if reuse == 1 and parallel == "shared":
        plan = shared_plan(s, share, cut_depth)
        shared = shared_context(s, plan, ports)
        text = templates().get_template("dense_shared.v.j2").render(**{**ctx, **shared})
        nonzero = shared["nonzero"]
        return DenseStage(text, plan.latency, 1, 1, SHARED_LIBRARY,
                          {"multipliers": 0, "nonzero_weights": nonzero, "zero_weights_skipped": products - nonzero,
                           "signed_digits": shared["digits"], "adders": plan.graph.adders,
                           "register_bits": plan.pipe.register_bits + s.n_out * s.y_type.width})
    if reuse == 1:
        params, terms, nonzero = parallel_parameters(s, levels_per_stage)
        latency = parallel_latency(terms, levels_per_stage)
        text = templates().get_template("dense_parallel.v.j2").render(
            **ctx, params=params, latency=latency, nonzero=nonzero, terms=terms)
        shift_add = sum(constant_multiplier_adders(c) for c in np.asarray(s.weight).ravel())
        return DenseStage(text, latency, 1, 1, PARALLEL_LIBRARY,
                          {"multipliers": nonzero, "zero_weights_skipped": products - nonzero,
                           "shift_add_adders": shift_add, "tree_adders": s.n_out * (terms - 1)})
    latency = folded_latency(s.n_in, s.n_out, reuse, levels_per_stage)
    tiling = folded_tiling(s.n_in, s.n_out, reuse)
    params = folded_parameters(s, reuse, levels_per_stage)
    rom_bits = folded_rom_bits(s, reuse)
    text = templates().get_template("dense_folded.v.j2").render(
        **ctx, params=params, latency=latency, reuse=reuse, multipliers=tiling.lanes, tiling=tiling,
        rom_bits=rom_bits, block_rom=dict(params)["ROM_STYLE"] == 1)
    return DenseStage(text, latency, reuse, reuse, FOLDED_LIBRARY,
                      {"multipliers": tiling.lanes, "rom_bits": rom_bits})


def _folded_ram_instance(s: DenseSpec, ctx: dict, reuse: int, levels_per_stage: int, port: WritePort,
                         keys: tuple[str, str]) -> DenseStage:
    latency = folded_latency(s.n_in, s.n_out, reuse, levels_per_stage)
    ram = folded_ram(s.n_in, s.n_out, reuse)
    params = folded_ram_parameters(s, reuse, levels_per_stage, port, keys)
    bits = ram.weight_rows * ram.tiling.lanes * s.w_type.width + (
        ram.bias_rows * ram.tiling.g * s.b_type.width if s.bias is not None else 0)
    text = templates().get_template("dense_folded.v.j2").render(
        **ctx, params=params, latency=latency, reuse=reuse, multipliers=ram.tiling.lanes, tiling=ram.tiling,
        rom_bits=bits, block_rom=dict(params)["RAM_STYLE"] == 1, ram=ram)
    return DenseStage(text, latency, reuse, reuse, FOLDED_RAM_LIBRARY,
                      {"multipliers": ram.tiling.lanes, "ram_bits": bits})


def _levels(req: StageRequest) -> int:
    return int(req.options.get("levels_per_stage", LEVELS_PER_STAGE))


def form_options(req: StageRequest) -> dict:
    """The dense options of a request: ``levels_per_stage`` (folded and per-weight forms), ``parallel``,
    ``share`` and ``cut_depth`` (the fully parallel forms)."""
    o = req.options
    return {"levels_per_stage": _levels(req), "parallel": str(o.get("parallel", "shared")),
            "share": str(o.get("share", "matrix")), "cut_depth": int(o.get("cut_depth", CUT_DEPTH))}


def merge_resources(*resources: dict) -> dict:
    """The sum of stages' resource counts (a conv's groups, a low-rank layer's two halves)."""
    out: dict = {}
    for r in resources:
        for k, v in r.items():
            out[k] = out.get(k, 0) + v
    return out


@emitter("Dense", multiplies=lambda n: int(n.weight.size), fuses_relu=True,
         folded_multipliers=lambda n, r: folded_multipliers(n.in_features, n.out_features, r) if r > 1 else n.weight.size)
def emit_dense(req: StageRequest) -> Stage:
    n: Dense = req.node
    spec = DenseSpec(n.describe(), n.weight, n.bias, req.in_type, n.need("weight_type", *UNTYPED),
                     n.need("bias_type", *UNTYPED) if n.bias is not None else None,
                     n.need("accum_type", *UNTYPED), req.out_type, req.relu_type)
    d = dense_instance(spec, req.instance_name, req.ports, req.reuse, **form_options(req),
                       write_port=req.write_port)
    return Stage(d.text, d.latency, d.ii, d.library, resources=d.resources, reuse=d.reuse)


@emitter("LowRankDense", multiplies=lambda n: int(n.u.size + n.v.size), fuses_relu=True,
         folded_multipliers=lambda n, r: (folded_multipliers(n.in_features, n.rank, r)
                                          + folded_multipliers(n.rank, n.out_features, r)) if r > 1
         else int(n.u.size + n.v.size))
def emit_low_rank_dense(req: StageRequest) -> Stage:
    """V x into ``mid_type``, then U h + b: two dense stages joined by an internal stream."""
    n: LowRankDense = req.node
    mid = n.need("mid_type", *UNTYPED)
    v = DenseSpec(f"{n.describe()} (V)", n.v, None, req.in_type, n.need("v_type", *UNTYPED), None,
                  n.need("accum_v_type", *UNTYPED), mid)
    u = DenseSpec(f"{n.describe()} (U)", n.u, n.bias, mid, n.need("u_type", *UNTYPED),
                  n.need("bias_type", *UNTYPED) if n.bias is not None else None,
                  n.need("accum_type", *UNTYPED), req.out_type, req.relu_type)
    base = req.instance_name
    link = Ports(req.ports.clk, req.ports.rst, f"{base}_mid_valid", f"{base}_mid_ready", f"{base}_mid_data",
                 f"{base}_mid_valid", f"{base}_mid_ready", f"{base}_mid_data")
    first = dense_instance(v, f"{base}_v", Ports(req.ports.clk, req.ports.rst, req.ports.in_valid,
                                                 req.ports.in_ready, req.ports.in_data, link.out_valid,
                                                 link.out_ready, link.out_data), req.reuse, **form_options(req),
                           write_port=req.write_port, keys=("v", ""))
    second = dense_instance(u, f"{base}_u", Ports(req.ports.clk, req.ports.rst, link.in_valid, link.in_ready,
                                                  link.in_data, req.ports.out_valid, req.ports.out_ready,
                                                  req.ports.out_data), req.reuse, **form_options(req),
                            write_port=req.write_port, keys=("u", "bias"))
    text = templates().get_template("dense_lowrank.v.j2").render(
        where=n.describe(), base=base, rank=n.rank, mid_w=n.rank * mid.width, mid_type=mid.to_short(),
        first=first.text, second=second.text, latency=first.latency + second.latency)
    return Stage(text, first.latency + second.latency, max(first.ii, second.ii),
                 tuple(dict.fromkeys(first.library + second.library)),
                 resources=merge_resources(first.resources, second.resources), reuse=max(first.reuse, second.reuse))


def _elementwise(req: StageRequest, template: str) -> Stage:
    x, y = req.in_type, req.out_type
    if req.in_count != req.out_count:
        raise RtlError(f"{req.node.describe()}: {req.in_count} inputs but {req.out_count} outputs; an element-wise "
                       "op keeps the shape")
    params = [("N", req.in_count), ("IN_W", x.width), ("IN_FRAC", x.frac), ("IN_SIGNED", int(x.signed)),
              *type_parameters("OUT", y).items(), ("REG", 1)]
    text = templates().get_template(template).render(
        where=req.node.describe(), instance=req.instance_name, ports=req.ports, params=params,
        x_type=x.to_short(), out_type=y.to_short(), n=req.in_count)
    library = (("bf_relu.v", "bf_activation.v") if template.startswith("relu") else ()) + ELEMENTWISE_LIBRARY
    return Stage(text, 1, 1, library, resources={"multipliers": 0})


@emitter("ReLU")
def emit_relu(req: StageRequest) -> Stage:
    return _elementwise(req, "relu.v.j2")


@emitter("Requantize")
def emit_requantize(req: StageRequest) -> Stage:
    return _elementwise(req, "requant.v.j2")


__all__ = ["DenseSpec", "DenseStage", "dense_instance", "emit_dense", "emit_low_rank_dense", "emit_relu",
           "emit_requantize", "parallel_latency", "folded_latency", "FoldedTiling", "folded_tiling",
           "folded_multipliers", "folded_rom_bits", "BLOCK_ROM_MIN_DEPTH", "FoldedRam", "folded_ram",
           "folded_ram_parameters", "sparse_rows", "csd_digits",
           "constant_multiplier_adders", "SharedPlan", "shared_plan", "shared_context", "PARALLEL_FORMS",
           "CUT_DEPTH", "POST_LEVELS"]
