"""The shared shift-add planner (toolchain/backends/rtl/adder_graph.py) and the dense stage it becomes.

The planner is checked on its own terms: the graph computes W x + b exactly, every wire holds what the
hardware keeps (exact, or the accumulator's low bits when it wraps), the sharing finds the patterns it is
named for, and the pipeline is balanced, within its depth budget and the cheapest placement. The rendered
stage is checked for lint (verilator -Wall) and Verilog-2005 (Icarus); its bit-exactness under backpressure
is test_lib_dense.py's, over the layers in lib_designs.dense_layers().
"""
from __future__ import annotations

import itertools
import os
import shutil
import subprocess

import numpy as np
import pytest
from bitforge.toolchain.backends.rtl import adder_graph as ag
from bitforge.toolchain.backends.rtl import dense
from bitforge.toolchain.backends.rtl.generate import RtlError
from bitforge.toolchain.fixed import parse_type
from bitforge.toolchain.verify.simulators import simulator_env
from lib_designs import dense_layers, emit, features, stage_ports
from rtl_bench import RTL, stream_ports, top_text


def random_matrix(rng, n_out, n_in, lo, hi, zeros=0.3):
    w = rng.integers(lo, hi, size=(n_out, n_in), endpoint=True)
    w[rng.random(w.shape) < zeros] = 0
    return w


def exact(w, x, offsets=None):
    y = [sum(int(a) * int(b) for a, b in zip(row, x)) for row in w]
    return [v + int(o) for v, o in zip(y, offsets)] if offsets is not None else y


def vertex_inputs(rng, n_in, x_lo, x_hi, count):
    """Inputs at the ends of their range (where the extremes of every sum lie) and random ones between."""
    ends = rng.choice([x_lo, x_hi], size=(count, n_in))
    mid = rng.integers(x_lo, x_hi, size=(count, n_in), endpoint=True)
    return np.concatenate([ends, mid])


CASES = {  # name -> (outputs, inputs, weight range, input range, with offsets)
    "signed_8bit": (7, 5, (-128, 127), (-128, 127), True),
    "unsigned_inputs": (4, 6, (-8, 7), (0, 15), False),
    "positive_weights": (3, 4, (0, 63), (-32, 31), True),
    "one_input": (5, 1, (-100, 100), (-8, 7), False),
    "wide": (3, 3, (-(1 << 40), 1 << 40), (-(1 << 20), (1 << 20) - 1), True),
}


@pytest.mark.parametrize("share", ag.SHARE_MODES)
@pytest.mark.parametrize("case", CASES)
def test_graph_computes_w_x_plus_b_exactly(case, share):
    n_out, n_in, (wl, wh), (xl, xh), has_offsets = CASES[case]
    rng = np.random.default_rng(sorted(CASES).index(case))
    w = random_matrix(rng, n_out, n_in, wl, wh).astype(object)
    w[0] = 0  # a zero row
    w[-1] = -abs(w[-1]) if n_out > 1 else w[-1]  # an all-negative row: its sum is a negation
    offsets = [int(v) for v in rng.integers(-5000, 5000, size=n_out)] if has_offsets else None
    g = ag.build(w, xl, xh, offsets, ag.GraphOptions(share))
    wl_ = ag.wires(g)
    for x in vertex_inputs(rng, n_in, xl, xh, 40):
        assert ag.evaluate(g, x) == exact(w, x, offsets)
        assert ag.evaluate(g, x, wl_) == exact(w, x, offsets)  # every wire wide enough


def test_ranges_are_exact_and_tight():
    """Each signal's interval holds every value it takes and both ends are reached (inputs are independent,
    so the extremes lie where every input sits at the end its coefficient's sign picks)."""
    rng = np.random.default_rng(1)
    w = random_matrix(rng, 6, 4, -40, 40)
    g = ag.build(w, -16, 15, [3, -7, 0, 11, 0, 1])
    values = {s: set() for s in range(len(g.signals))}
    for x in itertools.product([-16, 15], repeat=4):  # every vertex
        vals = _signal_values(g, np.array(x))
        for s, v in enumerate(vals):
            values[s].add(v)
    for s, (lo, hi) in enumerate(g.ranges):
        assert min(values[s]) == lo and max(values[s]) == hi, (s, g.signals[s], (lo, hi))


def _signal_values(g, x):
    vals = []
    for sig in g.signals:
        if sig.kind == "input":
            vals.append(int(x[sig.index]))
        elif sig.kind == "constant":
            vals.append(sig.value)
        else:
            a, b = vals[sig.x] << sig.x_shift, vals[sig.y] << sig.y_shift
            vals.append(a - b if sig.subtract else a + b)
    return vals


def test_wrapping_accumulator_keeps_only_its_low_bits():
    """Modulo 2**M every wire needs at most M bits (fewer below a shift), and the sums still agree mod 2**M."""
    rng = np.random.default_rng(2)
    w = random_matrix(rng, 8, 6, -127, 127, zeros=0.1)
    offsets = [int(v) << 3 for v in rng.integers(-100, 100, size=8)]
    g = ag.build(w, -128, 127, offsets)
    m = 12
    exact_wires, wrapped = ag.wires(g), ag.wires(g, m)
    assert max(x.width for x in exact_wires) > m  # the case is not vacuous: exact sums need more
    assert all(x.width <= m for x in wrapped)
    assert any(not x.exact for x in wrapped)
    for x in vertex_inputs(rng, 6, -128, 127, 40):
        got, want = ag.evaluate(g, x, wrapped), exact(w, x, offsets)
        assert all((a - b) % (1 << m) == 0 for a, b in zip(got, want))


def test_every_wire_bit_is_read():
    """A wire keeps only bits some consumer reads: the most any consumer needs, at most its exact width."""
    rng = np.random.default_rng(3)
    w = random_matrix(rng, 6, 5, -60, 60)
    g = ag.build(w, -64, 63)
    for modulus in (None, 11):
        wl = ag.wires(g, modulus)
        reads = {s: 0 for s in range(len(g.signals))}
        for o, t in enumerate(g.outputs):
            if t is not None:
                reads[t.signal] = max(reads[t.signal], ag.output_width(g, o, modulus) - t.shift)
        for s, sig in enumerate(g.signals):
            if sig.is_add:
                reads[sig.x] = max(reads[sig.x], wl[s].width - sig.x_shift)
                reads[sig.y] = max(reads[sig.y], wl[s].width - sig.y_shift)
        for s in range(len(g.signals)):
            if reads[s] > 0:
                assert wl[s].width == min(reads[s], ag.range_width(*g.ranges[s])), s
                assert wl[s].exact or wl[s].width == reads[s]


# -- sharing ------------------------------------------------------------------------------------------------------

def test_a_two_input_sum_is_shared_across_outputs_only_in_matrix_mode():
    # Both rows hold x2 + x3; the trees alone would pair x0 + x2 and x1 + x2 (they merge the lowest ids first).
    w = np.array([[1, 0, 1, 1], [0, 1, 1, 1]])
    adders = {share: ag.build(w, -8, 7, options=ag.GraphOptions(share)).adders for share in ag.SHARE_MODES}
    assert adders == {"matrix": 3, "column": 4, "none": 4}


def test_a_column_multiple_is_built_once():
    # 5 x1 in both rows (x1 + (x1 << 2)), beside x0 and 2 x0: one adder for 5 x1, one per row for the rest.
    w = np.array([[1, 5], [2, 5]])
    adders = {share: ag.build(w, -8, 7, options=ag.GraphOptions(share)).adders for share in ag.SHARE_MODES}
    assert adders == {"matrix": 3, "column": 3, "none": 4}


def test_signs_and_powers_of_two_cost_nothing():
    # 5x, -10x, 20x, -5x: one adder for 5x, the rest are shifts and signs; only the all-negative sums (-10x,
    # -5x) pay a negation, as the output's sum is the negative of a shared wire.
    g = ag.build(np.array([[5], [-10], [20], [-5]]), -8, 7)
    assert sum(1 for s in g.signals if s.is_add) == 1
    assert [t.shift for t in g.outputs] == [0, 1, 2, 0] and [t.negative for t in g.outputs] == [False, True,
                                                                                                  False, True]
    assert len({t.signal for t in g.outputs}) == 1 and g.adders == 3


def test_a_row_with_a_positive_digit_is_never_negated():
    # Without sharing the terms are the weights' digits, and a positive weight's top digit is positive; a merge
    # keeps a positive term positive, so only all-negative rows end in a negation.
    rng = np.random.default_rng(4)
    w = random_matrix(rng, 20, 6, -30, 30)
    g = ag.build(w, -8, 7, options=ag.GraphOptions("none"))
    for row, t in zip(w, g.outputs):
        if (row > 0).any():
            assert not t.negative


def test_matrix_sharing_needs_fewer_adders_than_digits_on_a_dense_matrix():
    rng = np.random.default_rng(5)
    w = random_matrix(rng, 32, 16, -7, 7, zeros=0.1)
    digits = sum(sum(1 for d in ag.csd_digits(int(v)) if d) for v in w.ravel())
    n = {share: ag.build(w, -8, 7, options=ag.GraphOptions(share)).adders for share in ag.SHARE_MODES}
    assert n["matrix"] < n["column"] <= n["none"] < digits


def recounted_cse(w, x_lo, x_hi, offsets, share):
    """The greedy CSE done the slow, obvious way: recount every pair of every output before each pick.

    Returns the signals it creates (inputs, constants, then one adder per pick), which must be the planner's
    first signals: its incremental counts, group-local relinking and lazy heap only make it faster.
    """
    n_out, n_in = w.shape
    signals = [ag.Signal("input", index=i) for i in range(n_in)]
    forms, column, made = [{i: 1} for i in range(n_in)], list(range(n_in)), {}

    def signal(s, form, col):
        if s not in made:
            made[s] = len(signals)
            signals.append(s), forms.append(form), column.append(col)
        return made[s]

    outputs = []
    for o in range(n_out):
        terms = [(i, k, d < 0) for i in range(n_in) for k, d in enumerate(ag.csd_digits(int(w[o, i]))) if d]
        if offsets[o]:
            v = abs(offsets[o])
            k = (v & -v).bit_length() - 1
            terms.append((signal(ag.Signal("constant", value=v >> k), {}, None), k, offsets[o] < 0))
        outputs.append(dict(enumerate(terms)))
    next_id = 1 + max([0] + [max(t, default=0) for t in outputs])

    def combined(a, b, d, sub):
        form = dict(forms[a])
        for i, c in forms[b].items():
            form[i] = form.get(i, 0) + (-1 if sub else 1) * (c << d)
        return {i: c for i, c in form.items() if c}

    def cost(k):  # the adder's result bits above the d it passes through
        return ag.range_width(*ag.form_range((combined(*k), 0), x_lo, x_hi)) - k[2]

    while True:
        occurrences = {}
        for o, terms in enumerate(outputs):
            ids = sorted(t for t in terms if signals[terms[t][0]].kind != "constant")
            for i, p in enumerate(ids):
                for q in ids[i + 1:]:
                    (a, s1, n1), (b, s2, n2) = sorted((terms[p], terms[q]), key=lambda t: (t[1], t[0]))
                    if (a, s1) != (b, s2) and (share == "matrix" or column[a] == column[b]):
                        occurrences.setdefault((a, b, s2 - s1, n1 != n2), []).append((o, p, q))
        frequent = [k for k, occ in occurrences.items() if len(occ) >= 2]
        if not frequent:
            return signals
        best = min(frequent, key=lambda k: (-len(occurrences[k]), cost(k), k))
        a, b, d, sub = best
        node = signal(ag.Signal("add", x=a, y=b, y_shift=d, subtract=sub), combined(*best),
                      column[a] if column[a] == column[b] else None)
        for o, p, q in sorted(occurrences[best]):
            terms = outputs[o]
            if p in terms and q in terms:  # else it overlaps an occurrence replaced before it
                lo = min(terms[p], terms[q], key=lambda t: (t[1], t[0]))
                del terms[p], terms[q]
                terms[next_id] = (node, lo[1], lo[2])
                next_id += 1


@pytest.mark.parametrize("share", ["matrix", "column"])
@pytest.mark.parametrize("seed", range(4))
def test_incremental_sharing_picks_what_recounting_picks(share, seed):
    rng = np.random.default_rng(100 + seed)
    n_out, n_in = (9, 6) if seed % 2 else (5, 11)
    w = random_matrix(rng, n_out, n_in, -21, 21, zeros=0.2)  # few digit patterns: many ties and overlaps
    offsets = [int(v) for v in rng.integers(-300, 300, size=n_out)]
    want = recounted_cse(w, -16, 15, offsets, share)
    g = ag.build(w, -16, 15, offsets, ag.GraphOptions(share))
    assert sum(s.is_add for s in want) >= 5  # the case shares something
    assert g.signals[:len(want)] == want


# -- pipeline -----------------------------------------------------------------------------------------------------

def _check_balanced(g, wl, p, cut_depth, post):
    for s, sig in enumerate(g.signals):
        if sig.is_add:
            for op in (sig.x, sig.y):  # every operand reaches its adder's stage, through a register per cut
                assert g.signals[op].kind == "constant" or p.stage[op] <= p.stage[s] <= p.last_stage[op]
    for t in g.outputs:
        if t is not None and g.signals[t.signal].kind != "constant":
            assert p.last_stage[t.signal] == len(p.cuts)  # the outputs leave together
    bounds = [0, *p.cuts, g.depth() + post]
    assert all(b - a <= max(cut_depth, post) for a, b in itertools.pairwise(bounds))
    assert all(b - a <= cut_depth for a, b in itertools.pairwise(bounds[:-1]))
    for s in range(len(g.signals)):  # a copy per cut crossed, no wider than its wire, narrowing towards the end
        assert len(p.copies[s]) == (p.last_stage[s] - p.stage[s] if g.signals[s].kind != "constant" else 0)
        assert all(wl[s].width >= a >= b for a, b in zip(p.copies[s], p.copies[s][1:] + (0,)))
    assert p.register_bits == sum(map(sum, p.copies))


@pytest.mark.parametrize("cut_depth", [1, 2, 3, 5, 50])
def test_pipeline_is_balanced_within_its_depth_and_uses_the_fewest_cuts(cut_depth):
    rng = np.random.default_rng(6)
    w = random_matrix(rng, 10, 8, -100, 100)
    g = ag.build(w, -128, 127, [int(v) for v in rng.integers(-999, 999, size=10)])
    wl = ag.wires(g)
    p = ag.pipeline(g, wl, cut_depth, post_levels=2)
    _check_balanced(g, wl, p, cut_depth, 2)
    total = g.depth() + 2
    assert len(p.cuts) == max(0, -(-(total - max(cut_depth, 2)) // cut_depth))
    assert p.latency == len(p.cuts) + 1


def test_cuts_are_placed_where_the_fewest_bits_cross():
    rng = np.random.default_rng(7)
    w = random_matrix(rng, 12, 6, -90, 90)
    g = ag.build(w, -128, 127)
    wl = ag.wires(g)
    p = ag.pipeline(g, wl, 2, post_levels=1)
    depth, m = g.depth(), len(p.cuts)
    best = None
    for cuts in itertools.combinations(range(1, depth + 1), m):  # every placement that keeps the budget
        bounds = [0, *cuts, depth + 1]
        if all(b - a <= 2 for a, b in itertools.pairwise(bounds)):
            bits = _bits(g, wl, cuts)
            best = bits if best is None else min(best, bits)
    assert p.register_bits == best


def _bits(g, wl, cuts):
    """Register bits of a placement: at each cut, every signal made before it and read after it, with the most
    bits a reader after it takes."""
    uses = ag.reads(g, wl)
    return sum(max([bits for level, bits in uses[s] if level > p], default=0)
               for p in cuts for s in range(len(g.signals))
               if g.signals[s].kind != "constant" and g.level[s] <= p)


def test_bad_input_is_a_clear_error():
    with pytest.raises(ag.AdderGraphError, match="2-D integer matrix"):
        ag.build(np.array([[0.5, 1.0]]), -8, 7)
    with pytest.raises(ag.AdderGraphError, match=r"empty input range \[3, 2\]"):
        ag.build(np.array([[1]]), 3, 2)
    with pytest.raises(ag.AdderGraphError, match="share='rows' unknown; choose one of matrix, column, none"):
        ag.GraphOptions("rows")
    g = ag.build(np.array([[3]]), -8, 7)
    with pytest.raises(ag.AdderGraphError, match="cut_depth must be at least 1"):
        ag.pipeline(g, ag.wires(g), 0)


# -- the rendered stage -------------------------------------------------------------------------------------------

f = parse_type
X8, W6 = f("fixed<8,3>"), f("fixed<6,2>")
#: name -> (DenseSpec, options for dense_instance): the corners the template spells differently.
SPECS = {
    # Wrapping accumulator narrower than the sums: truncated wires; a zero column leaves an input unread.
    "wrap_truncated": (dense.DenseSpec("wrap", np.array([[5, 0, -31, 17], [-9, 0, 22, 31], [0, 0, 0, 0]]),
                                       np.array([3, -2, 7]), X8, W6, f("fixed<6,3>"), f("fixed<11,2,TRN,WRAP>"),
                                       f("fixed<6,2,RND,SAT>")), {"cut_depth": 1}),
    # Unsigned inputs, an all-negative row (negated sum), a zero row without bias, a fused ReLU.
    "unsigned_negated_relu": (dense.DenseSpec("neg", np.array([[-3, -7, -1], [0, 0, 0], [4, -6, 9]]), None,
                                              f("ufixed<5,2>"), W6, None, f("fixed<16,9,TRN,SAT>"),
                                              f("fixed<8,4,RND_CONV,SAT>"), f("ufixed<6,3,RND,SAT>")), {}),
    "column_only": (dense.DenseSpec("col", np.array([[7, 7], [14, -7], [21, 1]]), None, X8, W6, None,
                                    f("fixed<20,11>"), f("fixed<8,3,TRN,SAT_SYM>")), {"share": "column"}),
}


def _render(name):
    spec, options = SPECS[name]
    st = dense.dense_instance(spec, f"u_{name}", stage_ports("d_"), 1, **options)
    ports = stream_ports("d_", spec.n_in * spec.x_type.width, spec.n_out * spec.y_type.width)
    return st, top_text("lint_top", ports, [st.text])


@pytest.mark.parametrize("name", SPECS)
def test_rendered_stage_is_verilator_lint_clean(tmp_path, name):
    _, top = _render(name)
    (tmp_path / "lint_top.v").write_text(top)
    env = {**os.environ, **simulator_env("verilator")}
    r = subprocess.run([shutil.which("verilator", path=env["PATH"]), "--lint-only", "-Wall", "-y", str(RTL),
                        "--top-module", "lint_top", str(tmp_path / "lint_top.v")], capture_output=True, text=True,
                       env=env, timeout=120, check=False)
    assert r.returncode == 0 and "%Warning" not in r.stderr, r.stderr


@pytest.mark.parametrize("name", SPECS)
def test_rendered_stage_is_verilog_2005(tmp_path, name):
    _, top = _render(name)
    (tmp_path / "lint_top.v").write_text(top)
    simulator_env("icarus")
    r = subprocess.run(["iverilog", "-g2005", "-Wall", "-y", str(RTL), "-s", "lint_top", "-o", str(tmp_path / "a"),
                        str(tmp_path / "lint_top.v")], capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0 and "warning" not in r.stderr.lower(), r.stderr


def test_stage_reports_the_plans_latency_and_resources():
    spec, options = SPECS["wrap_truncated"]
    st = dense.dense_instance(spec, "u", stage_ports("d_"), 1, **options)
    plan = dense.shared_plan(spec, cut_depth=1)
    assert st.latency == plan.latency == len(plan.pipe.cuts) + 1 > 2 and st.ii == 1
    assert st.resources["adders"] == plan.graph.adders and st.resources["multipliers"] == 0
    assert st.resources["register_bits"] == plan.pipe.register_bits + 3 * 6
    assert (st.resources["nonzero_weights"], st.resources["zero_weights_skipped"]) == (6, 6)  # zeros cost nothing
    assert "bf_dense_parallel" not in st.text and st.library == dense.SHARED_LIBRARY


def test_per_weight_form_is_still_selectable():
    spec, _ = SPECS["column_only"]
    st = dense.dense_instance(spec, "u", stage_ports("d_"), 1, parallel="per_weight")
    assert "bf_dense_parallel #(" in st.text and st.library == dense.PARALLEL_LIBRARY
    with pytest.raises(RtlError, match="parallel form 'tree' unknown; choose one of shared, per_weight"):
        dense.dense_instance(spec, "u", stage_ports("d_"), 1, parallel="tree")


def test_rendering_is_deterministic():
    assert _render("wrap_truncated")[1] == _render("wrap_truncated")[1]


def test_catalogue_layers_use_the_shared_form_by_default():
    for name, (node, xt, yt, reuse, options) in dense_layers(np.random.default_rng(0)).items():
        if reuse == 1 and node.OP == "Dense" and "parallel" not in options:
            st = emit(node, xt, yt, reuse, options, "d_")
            assert "if (1) begin : u_d_dut" in st.instance and "bf_dense_parallel" not in st.instance, name
            assert features(node)[1] * (options.get("relu_type") or yt).width <= st.resources["register_bits"]


def test_a_layer_with_too_many_pairs_shares_per_column(monkeypatch):
    rng = np.random.default_rng(8)
    w = random_matrix(rng, 6, 5, -50, 50)
    pairs = sum(n * (n - 1) // 2 for n in (sum(_digits(v) for v in row) for row in w))
    monkeypatch.setattr(ag, "MAX_PAIRS", pairs - 1)
    g = ag.build(w, -8, 7)
    assert g.share == "column"
    for x in vertex_inputs(rng, 5, -8, 7, 10):
        assert ag.evaluate(g, x) == exact(w, x)
    monkeypatch.setattr(ag, "MAX_PAIRS", pairs)
    assert ag.build(w, -8, 7).share == "matrix"


def _digits(v):
    return sum(1 for d in ag.csd_digits(int(v)) if d)
