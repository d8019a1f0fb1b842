"""Constant matrix-vector products as one shared shift-add graph, with exact widths and a balanced pipeline.

A fully parallel ``y = W x + b`` with constant ``W`` is nothing but additions of shifted inputs: every weight
is a few canonical signed digits (CSD) and every digit is a term ``+-(x_i << k)`` of its output's sum. Built
naively that costs one adder per digit (bf_dense_parallel: a shift-add multiplier per weight, then a tree per
output). Here the terms are shared first:

1. **Terms.** Output o starts as the signed terms of its weights' CSD digits, and its bias as one constant term
   (a constant shifted into place costs the adder any other term costs, and it then rides in the tree).
2. **Pairwise common subexpressions** (Hartley, "Subexpression sharing in filters using canonic signed digit
   multipliers", IEEE TCAS-II 1996; the kernel of the distributed-arithmetic generators such as da4ml): the
   two-term pattern ``+-(s_a << k) +- (s_b << k + d)`` found most often over all outputs becomes one adder (a
   new signal) and each occurrence becomes one term of it; repeat while a pattern occurs twice. A pattern of
   one input (``x_i + (x_i << 2)`` = 5 x_i) is the multiple-constant multiplication of that input's column
   (each odd multiple built once and reused, also inside larger multiples); a pattern of two inputs is a
   two-term sum shared across outputs, the sharing distributed arithmetic exploits. A pick that occurs f
   times saves f - 1 adders; among equally frequent patterns the cheaper adder (fewer result bits) wins.
   ``share="column"`` keeps to the first kind (the per-column MCM alone), ``share="none"`` shares nothing.
   Why one pass over digit pairs rather than a per-column MCM heuristic (Hcub and the like) followed by
   cross-output sharing: it covers both with one rule, and it is what pays: on 16 rows of jet-mlp's first
   layer (8-bit) yosys synth_xilinx counts 3,887 LUTs with it, 4,568 with per-column sharing alone, 4,571
   with none (jet-mlp's layers: 1,202 / 1,380 / 1,603 adders for the first).
   Signs and powers of two cost nothing: a negative term is a subtraction where it is summed, a shift is wiring.
3. **Trees.** Each output sums what is left with a tree that always merges its two shallowest terms (Huffman
   on depth), so its depth is the least its terms allow; among equally deep terms the two narrowest (their
   magnitude, shift included), which keeps partial sums narrow. A merge keeps a positive term positive (the
   subtraction takes the negative one), so an output root is negated only when all its terms are negative.
   A merge that already exists (in another output's tree) is reused.
4. **Widths** are exact: each signal is a linear form over the inputs (plus a constant), and since the
   inputs are independent its interval is exact, not an interval-arithmetic bound. Sums are modular, so a
   signal keeps only the bits its readers take (at most its exact width); when the accumulator wraps, an
   output reads only the accumulator's M low bits (addition modulo 2**M needs only the operands' low bits).
5. **Pipeline** (:func:`pipeline`): registers at cuts between adder levels, at most ``cut_depth`` levels apart
   (the overflow, requantize and fused ReLU after the sums count as ``post_levels``), the fewest cuts that
   allow it, placed where the fewest register bits cross; a signal that crosses a cut is registered there,
   so every path from input to output crosses the same registers and the latency is the number of cuts plus
   the output register.

Everything here is pure Python on integer codes: the planner knows nothing of Verilog
(``dense.py`` and ``templates/dense_shared.v.j2`` turn a plan into an instance).
"""
from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...errors import BitforgeError

SHARE_MODES = ("matrix", "column", "none")
#: Term pairs (over all rows) that whole-matrix sharing may count: a random 64 x 64 matrix of 8-bit weights has
#: 1.0 million and takes about 7 s of CPU (whole-matrix sharing is quadratic in a row's digits). A larger layer
#: shares per column instead, whose pairs grow with a column's digits only.
MAX_PAIRS = 1_500_000


class AdderGraphError(BitforgeError):
    """Bad input to the adder-graph planner (weights that are not integers, an empty input range, ...)."""


# -- canonical signed digits -----------------------------------------------------------------------------------

def csd_digits(v: int) -> list[int]:
    """Canonical signed digits of ``v``, least significant first: digits -1, 0, +1, no two adjacent non-zero."""
    digits = []
    v = int(v)
    while v:
        d = (2 - (v & 3)) if v & 1 else 0
        digits.append(d)
        v = (v - d) >> 1
    return digits


# -- the graph -------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Term:
    """``-(signal << shift)`` when ``negative``, else ``signal << shift``."""

    signal: int
    shift: int
    negative: bool = False


@dataclass(frozen=True)
class Signal:
    """An input code (``kind="input"``, ``index``), a constant (``value``) or one adder/subtractor:
    ``(x << x_shift) + (y << y_shift)``, or minus the second when ``subtract``; one of the shifts is 0."""

    kind: str
    index: int = 0
    value: int = 0
    x: int = -1
    x_shift: int = 0
    y: int = -1
    y_shift: int = 0
    subtract: bool = False

    @property
    def is_add(self) -> bool:
        return self.kind == "add"


@dataclass
class AdderGraph:
    """Signals (inputs first, by index) and, per output, its sum as one term of a signal (None: a zero row)."""

    n_in: int
    signals: list[Signal]
    outputs: list[Term | None]
    level: list[int]  # adders on the longest path from the inputs (inputs and constants: 0)
    ranges: list[tuple[int, int]]  # each signal's exact [lo, hi]
    share: str = "matrix"  # the sharing it was built with (a huge layer falls back to "column")

    @property
    def adders(self) -> int:
        """Adders and subtractors, the negations of all-negative outputs included."""
        return sum(1 for s in self.signals if s.is_add) + sum(1 for t in self.outputs if self.negates(t))

    def negates(self, t: Term | None) -> bool:
        """An output whose sum is a negation (all its terms negative; a constant is negated for free)."""
        return t is not None and t.negative and self.signals[t.signal].kind != "constant"

    def depth(self) -> int:
        """Adder levels to the deepest output (a negated output counts its negation)."""
        return max([0] + [self.level[t.signal] + int(self.negates(t)) for t in self.outputs if t is not None])


@dataclass(frozen=True)
class GraphOptions:
    """``share``: "matrix" (pairwise CSE over the whole matrix: per-column MCM and cross-output sums),
    "column" (per-column MCM only) or "none" (one adder per digit after the first, then the trees)."""

    share: str = "matrix"

    def __post_init__(self) -> None:
        if self.share not in SHARE_MODES:
            raise AdderGraphError(f"adder graph: share={self.share!r} unknown; choose one of {', '.join(SHARE_MODES)}")


class _Builder:
    """Signals with their linear forms, levels and ranges; identical adders are built once."""

    def __init__(self, n_in: int, x_lo: int, x_hi: int):
        self.n_in, self.x_lo, self.x_hi = n_in, x_lo, x_hi
        self.signals: list[Signal] = [Signal("input", index=i) for i in range(n_in)]
        self.forms: list[tuple[dict[int, int], int]] = [({i: 1}, 0) for i in range(n_in)]
        self.level: list[int] = [0] * n_in
        self.column: list[int | None] = list(range(n_in))  # the one input a signal reads, if only one
        self.ranges: list[tuple[int, int]] = [(x_lo, x_hi)] * n_in
        self.made: dict[Signal, int] = {}

    def constant(self, value: int) -> int:
        s = Signal("constant", value=int(value))
        if s not in self.made:
            self.made[s] = self._append(s, ({}, int(value)), 0, None)
        return self.made[s]

    def add(self, x: int, x_shift: int, y: int, y_shift: int, subtract: bool) -> int:
        s = Signal("add", x=x, x_shift=x_shift, y=y, y_shift=y_shift, subtract=subtract)
        if s not in self.made:
            (fx, cx), (fy, cy) = self.forms[x], self.forms[y]
            sign = -1 if subtract else 1
            form = {i: c << x_shift for i, c in fx.items()}
            for i, c in fy.items():
                form[i] = form.get(i, 0) + sign * (c << y_shift)
            form = {i: c for i, c in form.items() if c}
            col = self.column[x] if self.column[x] is not None and self.column[x] == self.column[y] else None
            self.made[s] = self._append(s, (form, (cx << x_shift) + sign * (cy << y_shift)),
                                        1 + max(self.level[x], self.level[y]), col)
        return self.made[s]

    def _append(self, s: Signal, form, level: int, column) -> int:
        self.signals.append(s)
        self.forms.append(form)
        self.level.append(level)
        self.column.append(column)
        self.ranges.append(form_range(form, self.x_lo, self.x_hi))
        return len(self.signals) - 1

    def width(self, s: int) -> int:
        return range_width(*self.ranges[s])


def form_range(form: tuple[dict[int, int], int], x_lo: int, x_hi: int) -> tuple[int, int]:
    """Exact [lo, hi] of ``sum c_i x_i + offset`` for independent inputs in [x_lo, x_hi]."""
    coefs, offset = form
    lo = hi = offset
    for c in coefs.values():
        a, b = c * x_lo, c * x_hi
        lo += min(a, b)
        hi += max(a, b)
    return lo, hi


def range_width(lo: int, hi: int) -> int:
    """Bits of the narrowest two's complement (lo < 0) or unsigned word that holds [lo, hi] (at least 1)."""
    if lo >= 0:
        return max(1, hi.bit_length())
    return 1 + max(hi.bit_length() if hi > 0 else 0, (-lo - 1).bit_length())


# -- pairwise common subexpression elimination ---------------------------------------------------------------------

class _Cse:
    """Hartley's greedy pairwise CSE with incremental pair counts (each pick touches only its outputs' pairs).

    Pairs are only formed within a group of an output's terms: the whole row (``share="matrix"``) or one
    column's terms (``share="column"``); a constant term is in no group (it pairs with nothing). A replaced
    occurrence relinks only the terms of its own group, so a pick costs the size of its group, not of the row:
    per-column sharing stays linear in the digits however wide the layer (a 20000-input row is 20000 small
    groups), and whole-matrix sharing is bounded by MAX_PAIRS.

    ``where[k]`` holds the occurrences (output, term, term) of pattern k, so its count is their number. The
    heap is lazy: a pattern is pushed when its count grows; an entry whose count has since shrunk is pushed
    again at its current count when it surfaces. The picks are those of eager re-pushing (every pattern always
    has an entry at or above its count, so the first current entry popped is the most frequent pattern, ties
    to the cheaper adder, then the smaller pattern).
    """

    def __init__(self, b: _Builder, outputs: list[dict[int, tuple]], share: str):
        self.b, self.outputs, self.share = b, outputs, share
        self.where: dict[tuple, set[tuple[int, int, int]]] = {}
        self.cost: dict[tuple, int] = {}
        self.next_id = 1 + max([0] + [max(t, default=0) for t in outputs])
        self.members: list[dict] = []  # per output: group -> the ids of its terms in that group
        for o, terms in enumerate(outputs):
            groups: dict = {}
            for t in sorted(terms):
                if b.signals[terms[t][0]].kind != "constant":
                    groups.setdefault(self._group(terms[t][0]), []).append(t)
            for ids in groups.values():
                for i, p in enumerate(ids[:-1]):
                    self._link(o, p, ids[i + 1:], +1)
            self.members.append({g: set(ids) for g, ids in groups.items()})
        self.heap = [(-len(occ), self._cost(k), k) for k, occ in self.where.items() if len(occ) >= 2]
        heapq.heapify(self.heap)

    def _group(self, signal: int):
        """Per-column sharing pairs terms of one input only; a pattern of one column's terms is that column's."""
        return self.b.column[signal] if self.share == "column" else 0

    def _link(self, o: int, p: int, others, step: int, grown: set | None = None) -> None:
        """Add (step +1) or remove (-1) the occurrences of term p with each of ``others`` in output o; the
        patterns that gained one go into ``grown``.

        Two terms (signal, shift, negative) have the pattern (a, b, d, subtract) with a at the lower shift (the
        lower signal first on a tie), so that the adder is a +- (b << d) and the pair is +-(it << shift_a); two
        equal terms have none. This loop is the planner's inner loop, hence inlined.
        """
        terms, where = self.outputs[o], self.where
        a, s, n = terms[p]
        for q in others:
            b, s2, n2 = terms[q]
            if s < s2 or (s == s2 and a < b):
                k = (a, b, s2 - s, n != n2)
            elif s == s2 and a == b:
                continue
            else:
                k = (b, a, s - s2, n != n2)
            occ = (o, p, q) if p < q else (o, q, p)
            if step > 0:
                at = where.get(k)
                if at is None:
                    where[k] = {occ}
                else:
                    at.add(occ)
                if grown is not None:
                    grown.add(k)
            else:
                at = where[k]
                at.discard(occ)
                if not at:
                    del where[k]

    def _cost(self, k: tuple) -> int:
        """Result bits the pattern's adder computes (the low d bits of a pass through)."""
        if k not in self.cost:
            a, b, d, sub = k
            fa, fb = self.b.forms[a], self.b.forms[b]
            form = dict(fa[0])
            for i, c in fb[0].items():
                form[i] = form.get(i, 0) + (-1 if sub else 1) * (c << d)
            self.cost[k] = range_width(*form_range((form, 0), self.b.x_lo, self.b.x_hi)) - d
        return self.cost[k]

    def run(self) -> None:
        heap, where = self.heap, self.where
        while heap:
            c, cost, k = heapq.heappop(heap)
            count = len(where.get(k, ()))
            if count != -c:  # a stale entry
                if 2 <= count < -c:
                    heapq.heappush(heap, (-count, cost, k))
                continue  # (a count above -c has its own, earlier entry)
            node = self.b.add(k[0], 0, k[1], k[2], k[3])
            grown: set = set()
            for o, p, q in sorted(where[k]):
                terms = self.outputs[o]
                if p not in terms or q not in terms:
                    continue  # an overlapping occurrence: one of its terms went into an earlier one
                lo = min(terms[p], terms[q], key=lambda t: (t[1], t[0]))
                group = self.members[o][self._group(terms[p][0])]
                group.discard(p)
                group.discard(q)
                self._link(o, p, group, -1)
                self._link(o, q, group, -1)
                self._link(o, p, (q,), -1)
                del terms[p], terms[q]
                new = self.next_id
                self.next_id += 1
                terms[new] = (node, lo[1], lo[2])
                self._link(o, new, group, +1, grown)
                group.add(new)
            for kk in sorted(grown):
                count = len(where.get(kk, ()))
                if count >= 2:
                    heapq.heappush(heap, (-count, self._cost(kk), kk))


# -- trees -----------------------------------------------------------------------------------------------------------

def _merge(b: _Builder, t1: tuple, t2: tuple) -> tuple:
    """One adder for two terms (signal, shift, negative); the result is negative only if both are."""
    (a, s1, n1), (c, s2, n2) = sorted((t1, t2), key=lambda t: (t[1], t[0]))
    lo = s1
    if n1 == n2 or not n1:  # a +- (c << d), signed like a
        return b.add(a, 0, c, s2 - lo, n1 != n2), lo, n1
    return b.add(c, s2 - lo, a, 0, True), lo, False  # (c << d) - a: the positive one stays positive


def _tree(b: _Builder, terms: list[tuple]) -> Term | None:
    """Sum the terms, always merging the two shallowest (then the two narrowest, so partial sums stay narrow:
    Huffman on depth, then on magnitude); None for no terms."""
    if not terms:
        return None
    heap = [(b.level[s], b.width(s) + sh, s, sh, neg) for s, sh, neg in terms]
    heapq.heapify(heap)
    while len(heap) > 1:
        t1, t2 = heapq.heappop(heap)[2:], heapq.heappop(heap)[2:]
        s, sh, neg = _merge(b, t1, t2)
        heapq.heappush(heap, (b.level[s], b.width(s) + sh, s, sh, neg))
    s, sh, neg = heap[0][2:]
    return Term(s, sh, neg)


def build(weight: np.ndarray, x_lo: int, x_hi: int, offsets: Sequence[int] | None = None,
          options: GraphOptions = GraphOptions()) -> AdderGraph:
    """The shared adder graph of ``y = weight @ x + offsets`` for integer inputs in [x_lo, x_hi].

    ``weight`` is (outputs, inputs) of integers; ``offsets`` (one integer per output, in the products' units)
    is added as a constant term.
    """
    w = np.asarray(weight)
    if w.ndim != 2 or w.dtype.kind not in "iuO":
        raise AdderGraphError(f"adder graph: weights must be a 2-D integer matrix, got shape {w.shape} and dtype "
                              f"{w.dtype}")
    if x_lo > x_hi:
        raise AdderGraphError(f"adder graph: empty input range [{x_lo}, {x_hi}]")
    n_out, n_in = w.shape
    if offsets is not None and len(offsets) != n_out:
        raise AdderGraphError(f"adder graph: {len(offsets)} offsets for {n_out} outputs")
    b = _Builder(n_in, int(x_lo), int(x_hi))
    outputs: list[dict[int, tuple]] = []
    for o in range(n_out):
        terms: list[tuple] = []
        for i in range(n_in):
            terms += [(i, k, d < 0) for k, d in enumerate(csd_digits(int(w[o, i]))) if d]
        v = 0 if offsets is None else int(offsets[o])
        if v:
            k = (abs(v) & -abs(v)).bit_length() - 1  # the constant's trailing zeros become the term's shift
            terms.append((b.constant(abs(v) >> k), k, v < 0))
        outputs.append(dict(enumerate(terms)))
    share = options.share
    if share == "matrix" and sum(len(t) * (len(t) - 1) // 2 for t in outputs) > MAX_PAIRS:
        share = "column"
    if share != "none":
        _Cse(b, outputs, share).run()
    roots = [_tree(b, sorted(t.values())) for t in outputs]
    return AdderGraph(n_in, b.signals, roots, b.level, b.ranges, share)


# -- widths ------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Wire:
    """How one signal is built in hardware: ``width`` bits, read as two's complement when ``signed``;
    ``exact`` when those bits hold the whole value (else only its low bits: a wrapping accumulator's)."""

    width: int
    signed: bool
    exact: bool


def output_range(graph: AdderGraph, o: int) -> tuple[int, int]:
    """Exact [lo, hi] of output o's sum."""
    t = graph.outputs[o]
    if t is None:
        return 0, 0
    lo, hi = graph.ranges[t.signal]
    return (-hi << t.shift, -lo << t.shift) if t.negative else (lo << t.shift, hi << t.shift)


def output_width(graph: AdderGraph, o: int, modulus_bits: int | None = None) -> int:
    """Bits of output o's sum as the hardware keeps it: exact, or at most ``modulus_bits`` when it wraps."""
    w = range_width(*output_range(graph, o))
    return w if modulus_bits is None else min(w, modulus_bits)


def wires(graph: AdderGraph, modulus_bits: int | None = None) -> list[Wire]:
    """Each signal's wire: its exact width, or fewer bits when no consumer reads more.

    Sums are modular: an adder that keeps m bits reads only the low m - k bits of an operand at shift k, so
    a signal keeps the most bits any consumer reads (and never more than its exact width, never fewer than
    1). An output reads its sum's exact width, or with ``modulus_bits`` M (a wrapping accumulator) at most M
    bits. So every bit of every wire is read, and a wire narrower than a consumer's need is exact (it is then
    sign- or zero-extended).
    """
    n = len(graph.signals)
    need: list[int | None] = [None] * n  # None: no consumer (an unread input)

    def want(s: int, bits: int) -> None:
        need[s] = max(1, bits) if need[s] is None else max(need[s], bits)

    for o, t in enumerate(graph.outputs):
        if t is not None:
            want(t.signal, output_width(graph, o, modulus_bits) - t.shift)
    out: list[Wire] = [Wire(1, False, True)] * n
    for s in range(n - 1, -1, -1):  # every consumer comes after its operands
        exact = range_width(*graph.ranges[s])
        bits = exact if need[s] is None else min(exact, need[s])
        out[s] = Wire(bits, graph.ranges[s][0] < 0, bits == exact)
        sig = graph.signals[s]
        if sig.is_add:
            want(sig.x, bits - sig.x_shift)
            want(sig.y, bits - sig.y_shift)
    return out


def evaluate(graph: AdderGraph, x: np.ndarray, wire_list: Sequence[Wire] | None = None) -> list:
    """Integer outputs for one input vector, as the graph computes them (Python ints, exact).

    With ``wire_list`` every signal is kept to its wire's bits, as the hardware does (an exact wire read back as
    its signed or unsigned value, a truncated one as its low bits): the tests compare that with ``W x + b``.
    """
    vals: list[int] = []
    for s, sig in enumerate(graph.signals):
        if sig.kind == "input":
            v = int(x[sig.index])
        elif sig.kind == "constant":
            v = sig.value
        else:
            xv, yv = vals[sig.x] << sig.x_shift, vals[sig.y] << sig.y_shift
            v = xv - yv if sig.subtract else xv + yv
        if wire_list is not None:
            w = wire_list[s]
            v &= (1 << w.width) - 1
            if w.signed and v >> (w.width - 1):
                v -= 1 << w.width
        vals.append(v)
    out = []
    for t in graph.outputs:
        if t is None:
            out.append(0)
        else:
            v = vals[t.signal] << t.shift
            out.append(-v if t.negative else v)
    return out


# -- pipeline -------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Pipeline:
    """Cuts (registers after adder level p, for each p in ``cuts``) and what they cost.

    ``stage[s]``: the stage that computes signal s (0 before the first cut); ``last_stage[s]``: the last stage
    that reads it. A signal read after its own stage is registered at every cut in between: ``copies[s][j]`` is
    the width of its copy in stage ``stage[s] + 1 + j``, the most bits any later stage reads (so copies only
    narrow towards the output).
    """

    cuts: tuple[int, ...]
    stage: tuple[int, ...]
    last_stage: tuple[int, ...]
    copies: tuple[tuple[int, ...], ...]
    register_bits: int  # pipeline registers of the adder graph (the output register not included)

    @property
    def latency(self) -> int:
        """Cycles from input to output: one per cut, one for the output register."""
        return len(self.cuts) + 1

    def width_in(self, s: int, stage: int, wire: Wire) -> int:
        """Bits of signal s as stage ``stage`` sees it (its own wire, or its copy there)."""
        return wire.width if stage == self.stage[s] else self.copies[s][stage - self.stage[s] - 1]


def reads(graph: AdderGraph, wire_list: Sequence[Wire], modulus_bits: int | None = None) -> list[list[tuple]]:
    """Per signal, its reads as (adder level of the reader, bits read); an output reads at ``depth() + 1``."""
    out: list[list[tuple]] = [[] for _ in graph.signals]
    for s, sig in enumerate(graph.signals):
        if sig.is_add:
            for op, k in ((sig.x, sig.x_shift), (sig.y, sig.y_shift)):
                bits = min(wire_list[op].width, wire_list[s].width - k)
                if bits > 0:
                    out[op].append((graph.level[s], bits))
    end = graph.depth() + 1
    for o, t in enumerate(graph.outputs):
        if t is not None:
            out[t.signal].append((end, min(wire_list[t.signal].width, output_width(graph, o, modulus_bits) - t.shift)))
    return out


def pipeline(graph: AdderGraph, wire_list: Sequence[Wire], cut_depth: int, post_levels: int = 2,
             modulus_bits: int | None = None) -> Pipeline:
    """The fewest cuts that keep every stage within ``cut_depth`` adder levels, placed to minimise the bits
    that cross them (dynamic programming over the cut positions).

    The outputs' post-processing (the bias is already in the graph; overflow, requantize, a fused ReLU) runs
    after the deepest sum and counts as ``post_levels``; if that alone exceeds ``cut_depth`` the last stage holds
    it. A signal crosses a cut with the most bits a reader after the cut takes. Constants cross for free (they
    are literals in every stage). ``modulus_bits`` as for :func:`wires`.
    """
    if cut_depth < 1:
        raise AdderGraphError(f"adder graph: cut_depth must be at least 1 adder level, got {cut_depth}")
    n = len(graph.signals)
    depth = graph.depth()
    uses = reads(graph, wire_list, modulus_bits)
    live = [s for s in range(n) if graph.signals[s].kind != "constant" and uses[s]]

    def crossing(s: int, p: int) -> int:
        """Bits of s that cross a cut after level p (0 unless s is made by then and read after)."""
        if graph.level[s] > p:
            return 0
        return max([bits for level, bits in uses[s] if level > p], default=0)

    cross = [0] * (depth + 1)  # bits across a cut after level p: each signal's crossing(s, p), summed
    for s in live:
        most: dict[int, int] = {}  # reader level -> the most bits a reader there takes
        for level, bits in uses[s]:
            most[level] = max(most.get(level, 0), bits)
        top = 0  # the most bits any reader after level p takes, p going down
        for p in range(min(depth, max(most) - 1), graph.level[s] - 1, -1):
            top = max(top, most.get(p + 1, 0))
            cross[p] += top
    total, tail = depth + post_levels, max(cut_depth, post_levels)
    m = max(0, -(-(total - tail) // cut_depth))
    cuts = _place_cuts(cross, depth, m, cut_depth, total - tail)
    stage_of = lambda level: sum(1 for p in cuts if p < level)
    stage = tuple(stage_of(graph.level[s]) for s in range(n))
    last_stage = tuple(max([stage[s]] + [stage_of(level) for level, _ in uses[s]]) for s in range(n))
    is_live = set(live)
    copies = tuple(tuple(crossing(s, cuts[c - 1]) for c in range(stage[s] + 1, last_stage[s] + 1))
                   if s in is_live else () for s in range(n))
    return Pipeline(tuple(cuts), stage, last_stage, copies, sum(sum(c) for c in copies))


def _place_cuts(cross: list[int], depth: int, m: int, gap: int, last_at_least: int) -> list[int]:
    """m positions 1 <= p_1 < ... < p_m <= depth, p_1 <= gap, steps <= gap, p_m >= last_at_least, least sum of
    cross[p]; ties go to the later position (registers nearer the output, where the sums are fewer)."""
    if m == 0:
        return []
    inf = float("inf")
    best = [[inf] * (depth + 1) for _ in range(m)]
    back = [[-1] * (depth + 1) for _ in range(m)]
    for p in range(1, min(gap, depth) + 1):
        best[0][p] = cross[p]
    for j in range(1, m):
        for p in range(1, depth + 1):
            for q in range(max(1, p - gap), p):
                c = best[j - 1][q] + cross[p]
                if c <= best[j][p]:
                    best[j][p], back[j][p] = c, q
    ends = [p for p in range(max(1, last_at_least), depth + 1) if best[m - 1][p] < inf]
    if not ends:
        raise AdderGraphError(f"adder graph: no placement of {m} cuts {gap} levels apart covers depth {depth}")
    p = min(ends, key=lambda e: (best[m - 1][e], -e))
    cuts = [p]
    for j in range(m - 1, 0, -1):
        p = back[j][p]
        cuts.append(p)
    return sorted(cuts)
