"""Golden trajectories of online learners against a slow scalar reference, and the learning behaviour they promise.

The reference (``ScalarLearner``) is written from the update rule's definition with Python ints and
Fractions, one sample, layer, edge and coefficient at a time; its LFSR steps bit by bit. It shares with
the module under test only the definitions a hardware generator also reads: the basis table, the index
parameters on the nodes, the accumulator types and the lane seeds.
"""
from __future__ import annotations

import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
from bitforge.toolchain import emulate
from bitforge.toolchain.bspline import basis_table
from bitforge.toolchain.learn.emulate import Stepper, _round_shift, derivative_table, lfsr_leap, lfsr_step, run
from bitforge.toolchain.fixed import FixedType, Overflow, Rounding, quantize, to_float
from bitforge.toolchain.learn.spec import (LearnerFormats, LearnerSpec, LearnerWarning, UpdateRule, build_learner, dense_accum_type, kan_accum_type, lane_seeds, load_learner, save_learner)

# -- the scalar reference ------------------------------------------------------------------------------

def ref_round(v: Fraction, mode: Rounding) -> int:
    fl = math.floor(v)
    d = v - fl
    if d == 0 or mode == Rounding.TRN:
        return fl
    if d != Fraction(1, 2):
        return fl + 1 if d > Fraction(1, 2) else fl
    return {Rounding.RND: fl + 1, Rounding.RND_CONV: fl + (fl % 2)}[mode]


def cast(value: Fraction, t: FixedType) -> int:
    """Exact real value -> saturated code of ``t``."""
    q = ref_round(value * 2 ** t.frac, t.rounding)
    lo = -t.max_code if t.overflow == Overflow.SAT_SYM else t.min_code
    return min(max(q, lo), t.max_code)


def val(code: int, t: FixedType) -> Fraction:
    return Fraction(code) / 2 ** t.frac if t.frac >= 0 else Fraction(code * 2 ** -t.frac)


def lfsr_bitwise(s: int) -> int:
    taps = [31, 21, 1, 0]
    new = 0
    for b in taps:
        new ^= (s >> b) & 1
    return ((s << 1) & 0xFFFFFFFF) | new


class ScalarLearner:
    """One run, sample by sample, with Python ints: the update rule as written in the docs."""

    def __init__(self, learner, index=None):
        self.spec, self.f = learner.spec, learner.formats
        self.nodes = learner.layers()
        self.state = [{k: v.tolist() for k, v in n.array_fields().items()} for n in self.nodes]
        self.index = index
        self.lanes = [[[int(s) for s in a.ravel()] for a in layer] for layer in lane_seeds(self.spec)]

    def update(self, code: int, g: int, b_code: int, b_frac: int, word: int) -> int:
        """c - round(2 g b eta) in storage LSBs, rounded as the rule says, saturated."""
        f, rule = self.f, self.spec.rule
        exact = Fraction(2 * g * b_code * 2 ** f.storage.frac, 2 ** (f.error.frac + b_frac + rule.lr_shift))
        d = f.error.frac + b_frac + rule.lr_shift - 1 - f.storage.frac  # bits below the storage LSB
        if rule.rounding == "nearest" or d <= 0:
            delta = ref_round(exact, Rounding.RND_CONV)
        else:  # floor(exact + r 2**-d): the word's top bits fill the d discarded bits
            r = (word << d) >> rule.rand_bits
            delta = math.floor(exact + Fraction(r, 2 ** d))
        return min(max(code - delta, f.storage.min_code), f.storage.max_code)

    def step(self, x: list[int], t: list[int], learn: bool) -> list[int]:
        f, spec = self.f, self.spec
        words = [[[s & ((1 << spec.rule.rand_bits) - 1) for s in arr] for arr in layer] for layer in self.lanes]
        acts, caches = [x], []
        x_t = f.input
        for j, node in enumerate(self.nodes):
            st = self.state[j]
            if spec.kind == "kan":
                n_out, n_in, _ = np.shape(st["coeffs"])
                tab = basis_table(node.order, node.u_bits, f.basis, node.basis_impl)
                cells, us, inr = [], [], []
                for i in range(n_in):
                    raw = ((x[i] - node.index_lo) * node.index_mult) >> node.index_shift
                    s = min(max(raw, 0), node.grid_size * 2 ** node.u_bits - 1)
                    cells.append(s >> node.u_bits)
                    us.append(s & (2 ** node.u_bits - 1))
                    inr.append(s == raw)
                if self.index is not None:
                    cells, us = (list(a) for a in self.index(np.array([x]), node))
                    cells, us = [int(v) for v in cells[0]], [int(v) for v in us[0]]
                def read(o, i, m, st=st, cells=cells):
                    return val(cast(val(st["coeffs"][o][i][cells[i] + m], f.storage), f.coeff), f.coeff)

                y = []
                acc_t = kan_accum_type(f, n_in)
                for o in range(n_out):
                    acc = sum(read(o, i, m) * val(int(tab[us[i]][m]), f.basis)
                              for i in range(n_in) for m in range(node.order + 1))
                    y.append(cast(val(cast(acc, acc_t), acc_t), f.datapath))
                caches.append((cells, us, inr, read, tab))
            else:
                W, B = st["weight"], st["bias"]
                acc_t = dense_accum_type(f, x_t, len(x))

                def rw(v):
                    return val(cast(val(v, f.storage), f.coeff), f.coeff)
                z = [cast(val(cast(sum(rw(W[o][i]) * val(x[i], x_t) for i in range(len(x))) + rw(B[o]), acc_t), acc_t),
                          f.datapath) for o in range(len(W))]
                relu = j < len(self.nodes) - 1
                y = [max(v, 0) for v in z] if relu else z
                caches.append((z, relu, rw, x_t))
            x, x_t = y, f.datapath
            acts.append(x)
        e = [cast(val(yo - to, f.datapath), f.error) for yo, to in zip(x, t)]
        g = e
        for j in range(len(self.nodes) - 1, -1, -1):
            node, st, xin = self.nodes[j], self.state[j], acts[j]
            x_t = f.input if j == 0 else f.datapath
            if spec.kind == "kan":
                cells, us, inr, read, tab = caches[j]
                n_out, n_in, _ = np.shape(st["coeffs"])
                k = node.order
                low = [[1 << f.basis.frac]] * (2 ** node.u_bits) if k == 1 else \
                    basis_table(k - 1, node.u_bits, f.basis, node.basis_impl).tolist()
                gx = []
                if j > 0:
                    inv_h = Fraction(node.index_mult * 2 ** x_t.frac, 2 ** (node.index_shift + node.u_bits))
                    for i in range(n_in):
                        lo_row = [0] + list(low[us[i]]) + [0]
                        slope = [val(lo_row[m] - lo_row[m + 1], f.basis) for m in range(k + 1)]
                        s = sum(val(g[o], f.error) * sum(read(o, i, m) * slope[m] for m in range(k + 1))
                                for o in range(n_out)) * inv_h
                        gx.append(cast(s, f.error) if inr[i] else 0)
                if learn:
                    for o in range(n_out):
                        for i in range(n_in):
                            for m in range(k + 1):
                                c = cells[i] + m
                                st["coeffs"][o][i][c] = self.update(st["coeffs"][o][i][c], g[o], int(tab[us[i]][m]),
                                                                    f.basis.frac,
                                                                    words[j][0][(o * n_in + i) * (k + 1) + m])
            else:
                z, relu, rw, _ = caches[j]
                W, B = st["weight"], st["bias"]
                if relu:
                    g = [go if zo > 0 else 0 for go, zo in zip(g, z)]
                gx = [cast(sum(val(g[o], f.error) * rw(W[o][i]) for o in range(len(W))), f.error)
                      for i in range(len(xin))] if j > 0 else []
                if learn:
                    for o in range(len(W)):
                        for i in range(len(xin)):
                            W[o][i] = self.update(W[o][i], g[o], xin[i], x_t.frac, words[j][0][o * len(xin) + i])
                        B[o] = self.update(B[o], g[o], 1, 0, words[j][1][o])
            g = gx
        for layer in self.lanes:
            for arr in layer:
                for n in range(len(arr)):
                    for _ in range(spec.rule.rand_bits):
                        arr[n] = lfsr_bitwise(arr[n])
        return x

    def run(self, xs, ts, learn):
        return np.array([self.step([int(v) for v in x], [int(v) for v in t], bool(le))
                         for x, t, le in zip(xs, ts, learn)])


# -- helpers -------------------------------------------------------------------------------------------

def small_learner(kind="kan", sizes=(2, 3, 1), order=3, impl="closed_form", rounding="nearest", lr=2, seed=0,
                  datapath="fixed<10,3>", guard=4, coeff=None, rand_bits=16, grid=(-2.0, 2.0), G=4):
    fm = LearnerFormats.make(datapath, guard_bits=guard, coeff=coeff)
    spec = LearnerSpec(kind, sizes, grid, G, order, impl, fm, UpdateRule(lr, rounding, lfsr_seed=seed + 7,
                                                                         rand_bits=rand_bits),
                       seed=seed, init="normal" if kind == "kan" else None, init_scale=0.3 if kind == "kan" else None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LearnerWarning)
        return build_learner(spec)


def stream(learner, n, seed=0, spread=2.6, amp=2.5):
    """Inputs partly outside the grid (clamping) and targets that push coefficients into saturation."""
    rng = np.random.default_rng(seed)
    f, spec = learner.formats, learner.spec
    x = rng.uniform(-spread, spread, size=(n, spec.sizes[0]))
    t = amp * np.sin(2 * x.sum(axis=1, keepdims=True) + np.arange(spec.sizes[-1])) + 0.5 * rng.normal(size=(n, 1))
    return quantize(x, f.input), quantize(np.clip(t, -3.9, 3.9), f.datapath), rng.random(n) > 0.15


# -- bit-exactness -------------------------------------------------------------------------------------

@pytest.mark.parametrize("order,impl,rounding", [(3, "closed_form", "nearest"), (3, "closed_form", "stochastic"),
                                                 (2, "table", "stochastic"), (1, "closed_form", "nearest")])
def test_kan_trajectory_equals_scalar_reference(order, impl, rounding):
    L = small_learner(order=order, impl=impl, rounding=rounding, coeff="fixed<10,1>", rand_bits=12)
    x, t, le = stream(L, 60)
    tr = run(L, x, t, le)
    ref = ScalarLearner(L)
    np.testing.assert_array_equal(tr.predictions, ref.run(x, t, le))
    for got, want in zip(tr.final, ref.state):
        np.testing.assert_array_equal(got["coeffs"], np.array(want["coeffs"]))
    # The stream exercises saturation of the storage (coeff range +-1, 3 hidden edges, targets up to 3.9).
    st = L.formats.storage
    assert any((s["coeffs"] == st.max_code).any() or (s["coeffs"] == st.min_code).any() for s in tr.final)


@pytest.mark.parametrize("rounding", ["nearest", "stochastic"])
def test_mlp_trajectory_equals_scalar_reference(rounding):
    L = small_learner("mlp", sizes=(2, 4, 1), rounding=rounding, lr=3, coeff="fixed<10,2>")
    x, t, le = stream(L, 60, seed=3)
    tr = run(L, x, t, le)
    ref = ScalarLearner(L)
    np.testing.assert_array_equal(tr.predictions, ref.run(x, t, le))
    for got, want in zip(tr.final, ref.state):
        np.testing.assert_array_equal(got["weight"], np.array(want["weight"]))
        np.testing.assert_array_equal(got["bias"], np.array(want["bias"]))


def test_batched_runs_equal_runs_one_at_a_time():
    base = small_learner(rounding="stochastic")
    learners = [base, base.with_rule(lr_shift=4, lfsr_seed=99),
                small_learner(rounding="stochastic", seed=5).with_rule(lr_shift=1)]
    xs, ts = zip(*[stream(L, 40, seed=i)[:2] for i, L in enumerate(learners)])
    le = np.random.default_rng(1).random((3, 40)) > 0.2
    batched = run(learners, np.stack(xs), np.stack(ts), le, snapshot_every=10)
    for r, L in enumerate(learners):
        one = run(L, xs[r], ts[r], le[r], snapshot_every=10)
        np.testing.assert_array_equal(batched.predictions[r], one.predictions)
        np.testing.assert_array_equal(batched.errors[r], one.errors)
        for a, b in zip(batched.final, one.final):
            np.testing.assert_array_equal(a["coeffs"][r], b["coeffs"])
        assert sorted(batched.snapshots) == sorted(one.snapshots) == [10, 20, 30, 40]
    assert not np.array_equal(batched.predictions[0], batched.predictions[1])


@pytest.mark.parametrize("kind", ["kan", "mlp"])
def test_stepper_predictions_have_no_side_effects(kind):
    """Closed-loop use (A2C asks for V(s') between updates) must not perturb the trajectory: a stepper that
    predicts other inputs between its steps follows run() bit for bit, LFSR lanes included."""
    L = small_learner(kind, sizes=(2, 3, 1), rounding="stochastic", lr=3, coeff="fixed<10,2>")
    x, t, le = stream(L, 50, seed=7)
    want = run(L, x, t, le)
    st = Stepper(L)
    probe = quantize(np.random.default_rng(2).uniform(-2, 2, size=(50, 1, 2)), L.formats.input)
    for i in range(50):
        before = st.predict(x[i][None])
        st.predict(probe[i])
        pred, err = st.step(x[i][None], t[i][None], le[i:i + 1])
        np.testing.assert_array_equal(pred, before)  # the update uses the prediction it was asked for
        np.testing.assert_array_equal(pred[0], want.predictions[i])
        np.testing.assert_array_equal(err[0], want.errors[i])
    for a, b in zip(st.state(), want.final):
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])


def test_batch_of_different_structures_is_refused():
    with pytest.raises(Exception, match="differs from learner 0"):
        run([small_learner(), small_learner(order=2)], *stream(small_learner(), 5)[:2])


def test_save_load_round_trip_reproduces_the_trajectory(tmp_path):
    L = small_learner(rounding="stochastic")
    x, t, le = stream(L, 50)
    first = run(L, x, t, le)
    again = run(load_learner(save_learner(L, tmp_path / "l")), x, t, le)
    np.testing.assert_array_equal(first.predictions, again.predictions)
    # A learner saved mid-trajectory continues where it stopped (deterministic rounding: no LFSR state).
    Ln = small_learner(rounding="nearest")
    whole = run(Ln, x, t, le)
    half = run(Ln, x[:25], t[:25], le[:25])
    resumed = load_learner(save_learner(Ln.with_state(half.final), tmp_path / "half"))
    np.testing.assert_array_equal(run(resumed, x[25:], t[25:], le[25:]).predictions, whole.predictions[25:])


# -- the forward pass is the inference golden model ------------------------------------------------------

@pytest.mark.parametrize("kind", ["kan", "mlp"])
def test_predictions_are_emulate_run_on_the_current_inference_graph(kind):
    L = small_learner(kind, sizes=(2, 3, 1))
    x, t, _ = stream(L, 30)
    tr = run(L, x, t, snapshot_every=1)
    states = [L.state()] + [tr.snapshots[s] for s in range(1, 30)]
    for step in (0, 1, 7, 29):
        g = L.with_state(states[step]).inference_graph()
        want = emulate.run(g, x[step:step + 1])["y"]
        np.testing.assert_array_equal(tr.predictions[step:step + 1], want)
    frozen = run(L, x, t, learn_enable=np.zeros(30, bool))
    np.testing.assert_array_equal(frozen.predictions, emulate.run(L.inference_graph(), x)["y"])


# -- sparse update -------------------------------------------------------------------------------------

@pytest.mark.parametrize("order", [1, 2, 3])
def test_update_touches_exactly_k_plus_1_coefficients_per_edge(order):
    L = small_learner(sizes=(3, 2), order=order, lr=0, datapath="fixed<16,6>", guard=8, G=6)
    node = L.layers()[0]
    x = quantize(np.array([[-1.37, 0.21, 1.9]]), L.formats.input)
    before = L.state()[0]["coeffs"]
    after = run(L, x, quantize(np.array([[3.0, -3.0]]), L.formats.datapath)).final[0]["coeffs"]
    raw = ((x[0] - node.index_lo) * node.index_mult) >> node.index_shift
    cells, u = raw >> node.u_bits, raw & ((1 << node.u_bits) - 1)
    assert (u > 0).all()  # every one of the k+1 bases is non-zero, so every active coefficient moves
    for o in range(2):
        for i in range(3):
            changed = np.flatnonzero(after[o, i] != before[o, i])
            np.testing.assert_array_equal(changed, cells[i] + np.arange(order + 1))


# -- bases ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("order,impl", [(1, "closed_form"), (2, "closed_form"), (3, "closed_form"), (3, "table"),
                                        (4, "table")])
def test_partition_of_unity_and_derivative_rows(order, impl):
    bt = FixedType(17, 1, False, Rounding.RND_CONV, Overflow.SAT)
    tab = basis_table(order, 6, bt, impl)
    assert (tab.sum(axis=1) == 1 << bt.frac).all() and (tab >= 0).all()
    d = derivative_table(order, 6, bt, impl)
    assert (d.sum(axis=1) == 0).all()


def test_cubic_derivative_is_the_closed_form():
    bt = FixedType(17, 1, False, Rounding.RND_CONV, Overflow.SAT)
    u = np.arange(64) / 64
    want = np.stack([-(1 - u) ** 2, 3 * u ** 2 - 4 * u, -3 * u ** 2 + 2 * u + 1, u ** 2], axis=1) / 2
    got = derivative_table(3, 6, bt, "closed_form") / 2.0 ** bt.frac
    np.testing.assert_allclose(got, want, atol=2 * 2.0 ** -bt.frac)


# -- rounding and the dead zone ------------------------------------------------------------------------

@pytest.mark.parametrize("d", [1, 3, 8])
def test_stochastic_rounding_is_exactly_unbiased_over_all_words(d):
    rb = 8
    p = np.array([-301, -5, -1, 0, 1, 3, 77, 255], dtype=np.int64)[:, None]
    words = np.arange(1 << rb, dtype=np.int64)[None, :]
    out = _round_shift(np.broadcast_to(p, (8, 1 << rb)), np.full((8, 1 << rb), d), words, rb)
    np.testing.assert_array_equal(out.sum(axis=1) * 2 ** d, p[:, 0] * (1 << rb))


def test_nearest_rounding_is_ties_to_even():
    p = np.array([2, 6, -2, -6, 3, -3], dtype=np.int64)  # /4: 0.5, 1.5, -0.5, -1.5, 0.75, -0.75
    np.testing.assert_array_equal(_round_shift(p, np.full(6, 2), None, 16), [0, 2, 0, -2, 1, -1])


def test_dead_zone_nearest_loses_small_updates_stochastic_does_not():
    """A constant error whose update is 0.3 storage LSB: lost forever with nearest rounding, tracked on
    average with stochastic rounding (the error shrinks to within a datapath LSB)."""
    fm = LearnerFormats.make("fixed<12,4>", guard_bits=0)
    base = LearnerSpec("kan", (1, 1), (-1.0, 1.0), 4, 1, "closed_form", fm, UpdateRule(0, "nearest"), init="zeros")
    # k = 1 at u = 0: b = (1, 0). Update = 2 e 2**-lr in LSBs of the 8-frac-bit storage; e = 3 LSB.
    lr = 5  # 2 * 3 / 32 = 0.1875 LSB per sample
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LearnerWarning)
        near = build_learner(base.replace(lr_shift=lr))
        stoch = build_learner(base.replace(lr_shift=lr, rounding="stochastic"))
    n = 400
    x = np.zeros((n, 1), dtype=np.int64)  # x = 0: a grid point, u = 0
    t = np.full((n, 1), -3, dtype=np.int64)  # target -3 LSB; the prediction starts at 0
    a, b = run(near, x, t), run(stoch, x, t)
    assert (a.errors == 3).all() and (a.final[0]["coeffs"] == 0).all()
    assert np.abs(b.errors[-50:]).max() <= 1
    # Each LSB of progress takes ~1/(update in LSBs) samples: 5 at e = 3, 8 at e = 2, 16 at e = 1.
    assert np.flatnonzero(b.errors[:, 0] == 0)[0] > 10


# -- LFSR ----------------------------------------------------------------------------------------------

def test_lfsr_is_maximal_length():
    period = 2 ** 32 - 1
    # Leap tables of huge step counts are built by stepping, so test the order with repeated squaring.
    cols = [1 << j for j in range(32)]

    def apply(m, v):
        out = 0
        for j in range(32):
            if v >> j & 1:
                out ^= m[j]
        return out

    def compose(a, b):  # a after b
        return [apply(a, c) for c in b]

    step = [lfsr_step(c) for c in cols]

    def power(e):
        result, base = list(cols), step
        while e:
            if e & 1:
                result = compose(base, result)
            base = compose(base, base)
            e >>= 1
        return result

    assert power(period) == cols
    for p in (3, 5, 17, 257, 65537):
        assert power(period // p) != cols


def test_lfsr_leap_equals_single_steps():
    s = np.array([1, 0xDEADBEEF, 0x80000000, 0x12345678], dtype=np.uint64)
    want = [int(v) for v in s]
    for _ in range(13):
        want = [lfsr_bitwise(v) for v in want]
    np.testing.assert_array_equal(lfsr_leap(s, 13), np.array(want, dtype=np.uint64))
    assert [lfsr_step(int(v)) for v in s] == [lfsr_bitwise(int(v)) for v in s]


# -- the index: clamp the position, never the datapath --------------------------------------------------

def _saturating_index(xq, node):
    """The public HLS code's index: the table row (0..2**U - 1) held in the <16,6> datapath type, which
    saturates at 31.99, so rows above 31 are never read (docs/references.md)."""
    raw = ((xq - node.index_lo) * node.index_mult) >> node.index_shift
    s = np.clip(raw, 0, (node.grid_size << node.u_bits) - 1)
    row = s & ((1 << node.u_bits) - 1)
    dp = FixedType(16, 6, True, Rounding.TRN, Overflow.SAT)
    row_in_datapath = np.minimum(row << dp.frac, dp.max_code) >> dp.frac
    return s >> node.u_bits, row_in_datapath


def t1_task():
    from bitforge.models.online_tasks import make_task
    return make_task("t1", 0)


def t1_learner(lr=1, guard=8, grid=(-2.0, 2.0), G=5, order=3):
    fm = LearnerFormats.make("fixed<16,6>", guard_bits=guard)
    return build_learner(LearnerSpec("kan", (1, 1), grid, G, order, "closed_form", fm, UpdateRule(lr, "nearest")))


def steady(task, pred_codes, t):
    from bitforge.models.online_tasks import prequential_metrics
    return prequential_metrics(task, to_float(pred_codes, t))


def test_index_saturation_bug_costs_tens_of_times_the_mse():
    task = t1_task()
    L = t1_learner()
    x, t = quantize(task.x, L.formats.input), quantize(task.target, L.formats.datapath)
    node = L.layers()[0]
    assert node.u_bits == 8  # 256 table rows per cell, as in the public design
    ours, bug = run(L, x, t), run(L, x, t, index_fn=_saturating_index)
    rows_used = np.unique(_saturating_index(x[:, 0], node)[1])
    assert len(rows_used) <= 33 and len(np.unique((x[:, 0] - node.index_lo) * node.index_mult >> node.index_shift
                                                   & 255)) > 200
    good, bad = steady(task, ours.predictions, L.formats.datapath), steady(task, bug.predictions, L.formats.datapath)
    for g, b in zip(good["steady_mse"], bad["steady_mse"]):
        assert b > 8 * g
    assert bad["mean_mse"] > 2 * good["mean_mse"]


# -- T1 against the float reference --------------------------------------------------------------------

def test_t1_kan_16_6_is_indistinguishable_from_float():
    """The float reference's T1 KAN (G=5, k=3, its grid and eta) at a <16,6> datapath with 8 guard bits."""
    from bitforge.models.online_learners import reference_spec, run_prequential
    from bitforge.models.online_tasks import prequential_metrics
    task = t1_task()
    ref = reference_spec("t1", "kan")  # one spec for both learners; its default formats are <16,6>, 8 guard bits
    assert ref.sizes == (1, 1) and ref.formats == LearnerFormats.make("fixed<16,6>", guard_bits=8)
    L = build_learner(ref)
    fixed_m = steady(task, run(L, quantize(task.x, L.formats.input),
                               quantize(task.target, L.formats.datapath)).predictions, L.formats.datapath)
    float_m = prequential_metrics(task, run_prequential(ref, task))
    np.testing.assert_allclose(fixed_m["steady_mse"], float_m["steady_mse"], rtol=0.05)
    np.testing.assert_allclose(fixed_m["mean_mse"], float_m["mean_mse"], rtol=0.02)
    assert fixed_m["steady_mse"][0] <= 0.0010 and fixed_m["steady_mse"][1] <= 0.0015 \
        and fixed_m["steady_mse"][2] <= 0.0006  # the issue's targets
