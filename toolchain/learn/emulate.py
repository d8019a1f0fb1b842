"""The golden model of online learning: a learner's whole prequential trajectory, bit for bit.

Per sample t (predict, then update on the same sample; arXiv 2602.02056):

1. **Forward** with the current coefficients, exactly :func:`bitforge.toolchain.emulate.kan_fixed` on the
   learner's :meth:`~bitforge.toolchain.learn.spec.Learner.inference_graph` (coefficients read storage -> coeff),
   so an inference RTL that matches ``kan_fixed`` matches the prediction. MLP: ``emulate.dense_stage`` + ReLU.
2. **Error** ``e = y_hat - t`` (exact), requantized into ``formats.error``. The output layer's back-propagated
   error is ``g = e``; the feedback 2e is a free left shift folded into the update shift.
3. **Back-propagation** through layer l with its PRE-update coefficients (read type): KAN
   ``g_x[i] = round_error( (1/h) sum_o g[o] sum_m c[o,i,cell+m] D_m(u) )`` with ``D_m = b^{k-1}_{m-1} -
   b^{k-1}_m`` (:func:`derivative_table`; the B_{k-1} differences, equal to the closed form 2 db/du for k = 3),
   ``1/h`` the index map's own constant ``mult 2**(frac_x - shift - u_bits)``, one rounding at the end, zero
   where the input's position was clamped (the clamped spline is flat). MLP ``g_x = round_error(W^T g)``, then
   the ReLU mask (pre-activation > 0) of the layer below.
4. **Update** of the k+1 active coefficients of every edge (MLP: every weight and bias):
   ``c -= round((2 g b) >> lr_shift)``: the full-width product ``g b`` (frac f_e + f_b), one rounding into the
   storage LSB (d = f_e + f_b + lr_shift - 1 - f_storage discarded bits; a left shift when d < 0), then a
   saturating subtract in the storage type. Skipped where ``learn_enable`` is 0.

Vectorised over R independent runs (seeds, lr shifts, initial states): a Python loop over samples, numpy
over runs, edges and coefficients. Integers stay exact in int64 (bounds are checked up front; the one wide
product, the 1/h scaling of hidden gradients, falls back to Python ints when it must).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Optional, Sequence, Union

import numpy as np

from .. import fixed, ir
from ..bspline import basis_table, cell_and_u
from ..fixed import FixedType
from .spec import LFSR_WIDTH, Learner, LearnerError, LearnerFormats, State, dense_accum_type, kan_accum_type, lane_seeds

__all__ = ["Stepper", "Trajectory", "run", "derivative_table", "lfsr_step", "lfsr_leap", "IndexFn"]

#: ``(x codes (R, in), KAN node) -> (cell, u)``; the default is the IR's :func:`~bitforge.toolchain.bspline.cell_and_u`.
IndexFn = Callable[[np.ndarray, ir.KANLayer], tuple[np.ndarray, np.ndarray]]
_MASK32 = (1 << LFSR_WIDTH) - 1
_LIMIT = 2 ** 62


@dataclass
class Trajectory:
    """Predictions (datapath codes) and errors (error-type codes), ``(n, d_out)`` per run; the final state and
    optional snapshots (state after that many samples). Batched runs add a leading R axis to every array."""

    predictions: np.ndarray
    errors: np.ndarray
    final: State
    snapshots: dict[int, State] = field(default_factory=dict)
    lfsr: list = field(default_factory=list)  # final lane states per layer (stochastic rounding only)


# -- LFSR ------------------------------------------------------------------------------------------------

def lfsr_step(state: int) -> int:
    """One step of the 32-bit Fibonacci LFSR: shift left, new bit 0 = s31 ^ s21 ^ s1 ^ s0."""
    new = ((state >> 31) ^ (state >> 21) ^ (state >> 1) ^ state) & 1
    return ((state << 1) | new) & _MASK32


@lru_cache(maxsize=8)
def _leap_tables(steps: int) -> np.ndarray:
    """``steps`` LFSR steps as a GF(2)-linear map, one 256-entry table per state byte (XOR of four lookups)."""
    images = []
    for j in range(LFSR_WIDTH):
        s = 1 << j
        for _ in range(steps):
            s = lfsr_step(s)
        images.append(s)
    tables = np.zeros((4, 256), dtype=np.uint64)
    for b in range(4):
        for v in range(256):
            acc = 0
            for bit in range(8):
                if v >> bit & 1:
                    acc ^= images[8 * b + bit]
            tables[b, v] = acc
    return tables


def lfsr_leap(states: np.ndarray, steps: int) -> np.ndarray:
    """Every state advanced ``steps`` single steps (uint64 arrays holding 32-bit states)."""
    t = _leap_tables(steps)
    s = states.astype(np.uint64)
    m = np.uint64(255)
    return (t[0][s & m] ^ t[1][(s >> np.uint64(8)) & m] ^ t[2][(s >> np.uint64(16)) & m]
            ^ t[3][(s >> np.uint64(24)) & m])


# -- bases -----------------------------------------------------------------------------------------------

def derivative_table(order: int, u_bits: int, basis_type: FixedType, impl: str) -> np.ndarray:
    """``(2**u_bits, k+1)`` signed codes (frac of ``basis_type``) of db_m/du = b^{k-1}_{m-1}(u) - b^{k-1}_m(u).

    From dB_{j,k}/ds = B_{j,k-1} - B_{j+1,k-1} (cell units); b^{k-1} is the order-(k-1) table of the same
    ``impl`` (its rows sum to exactly 1, so every row here sums to exactly 0, the derivative of the partition
    of unity). For k = 3 the exact values are the closed form 2 db0/du = -(1-u)^2, 2 db1/du = 3u^2 - 4u,
    2 db2/du = -3u^2 + 2u + 1, 2 db3/du = u^2. sum_m c_m D_m = sum_m b^{k-1}_m (c_{m+1} - c_m) exactly, so a
    circuit may multiply coefficient differences by the lower-order bases instead: same integers.
    """
    n = 1 << u_bits
    low = np.ones((n, 1), dtype=np.int64) << basis_type.frac if order == 1 else \
        basis_table(order - 1, u_bits, basis_type, impl)
    pad = np.zeros((n, 1), dtype=np.int64)
    return np.concatenate([pad, low], axis=1) - np.concatenate([low, pad], axis=1)


# -- rounding --------------------------------------------------------------------------------------------

def _round_shift(p: np.ndarray, d: np.ndarray, words: Optional[np.ndarray], rand_bits: int) -> np.ndarray:
    """``p * 2**-d`` rounded: RND_CONV, or with ``words`` floor after adding ``(w << d) >> rand_bits``.

    d <= 0 is an exact left shift. ``d`` broadcasts against ``p`` (one shift per run).
    """
    dp = np.maximum(d, 0)
    left = p << np.maximum(-d, 0)
    if words is not None:
        r = (words << dp) >> rand_bits
        return np.where(d > 0, (p + r) >> dp, left)
    floor = p >> dp
    rem = p - (floor << dp)
    half = (np.int64(1) << dp) >> 1
    inc = (dp > 0) & ((rem > half) | ((rem == half) & ((floor & 1) == 1)))
    return np.where(d > 0, floor + inc, left)


def _bits(v: float) -> float:
    return float(np.log2(max(float(v), 1.0)))


# -- layers ----------------------------------------------------------------------------------------------

class _Kan:
    """One KAN layer of R runs: coefficients ``(R, out, in, G+k)`` of storage codes."""

    def __init__(self, nodes: list[ir.KANLayer], f: LearnerFormats, x_t: FixedType, index_fn: IndexFn):
        n = self.node = nodes[0]
        self.f, self.x_t, self.index_fn = f, x_t, index_fn
        self.C = np.stack([m.coeffs for m in nodes]).astype(np.int64)
        self.table = basis_table(n.order, n.u_bits, f.basis, n.basis_impl)
        self.dtable = derivative_table(n.order, n.u_bits, f.basis, n.basis_impl)
        self.accum = kan_accum_type(f, n.in_features)
        self.k1 = n.order + 1
        self.top = (n.grid_size << n.u_bits) - 1
        # 1/h = mult 2**(frac_x - shift - u_bits): fold mult's power-of-two factor into the shift.
        mult, d = n.index_mult, f.coeff.frac + f.basis.frac + n.index_shift + n.u_bits - x_t.frac
        while mult % 2 == 0:
            mult, d = mult // 2, d - 1
        self.inv_h_mult, self.inv_h_shift = mult, d
        c_max, b_max = 2.0 ** (f.coeff.width - 1), 2.0 ** f.basis.frac
        self.s_bound = 2.0 ** (f.error.width - 1) * c_max * 2 * b_max * n.out_features

    def lanes(self) -> tuple[int, ...]:
        return self.C.shape[1:3] + (self.k1,)

    def update_bound(self) -> tuple[float, int, int]:
        """Largest |g b|, and the fewest and most discarded bits of an update at lr_shift 0."""
        f = self.f
        d = f.error.frac + f.basis.frac - 1 - f.storage.frac
        return 2.0 ** (f.error.width - 1) * 2.0 ** f.basis.frac, d, d

    def forward(self, x: np.ndarray):
        n, f = self.node, self.f
        R, n_out, n_in = self.C.shape[:3]
        cell, u = self.index_fn(x, n)
        raw = ((x - n.index_lo) * n.index_mult) >> n.index_shift
        in_range = (raw >= 0) & (raw <= self.top)
        b = self.table[u]  # (R, I, k+1)
        idx = np.broadcast_to((cell[..., None] + np.arange(self.k1))[:, None], (R, n_out, n_in, self.k1))
        stored = np.take_along_axis(self.C, idx, axis=3)
        c = fixed.requantize(stored, f.storage, f.coeff)
        acc = np.einsum("roik,rik->ro", c, b)
        acc = fixed.apply_overflow(acc, self.accum)
        y = fixed.requantize(acc, self.accum, f.datapath)
        return y, (u, b, idx, stored, c, in_range)

    def backward(self, cache, g: np.ndarray, d: np.ndarray, learn: np.ndarray, words, rand_bits: int,
                 need_grad: bool) -> Optional[np.ndarray]:
        u, b, idx, stored, c, in_range = cache
        f = self.f
        gx = None
        if need_grad:
            D = self.dtable[u]  # (R, I, k+1)
            pd = np.einsum("roik,rik->roi", c, D)
            if self.s_bound < _LIMIT:
                s = np.einsum("ro,roi->ri", g, pd)
            else:
                s = np.einsum("ro,roi->ri", g.astype(object), pd.astype(object))
            if self.s_bound * self.inv_h_mult >= _LIMIT or s.dtype == object:
                s = s.astype(object)
            gx = fixed.shift_round(s * self.inv_h_mult, self.inv_h_shift, f.error.rounding)
            gx = fixed.int_array(fixed.apply_overflow(gx, f.error), 64).astype(np.int64)
            gx = np.where(in_range, gx, 0)
        p = g[:, :, None, None] * b[:, None]
        delta = _round_shift(p, d[:, None, None, None], words, rand_bits)
        new = fixed.apply_overflow(stored - delta, f.storage)
        np.put_along_axis(self.C, idx, np.where(learn[:, None, None, None], new, stored), axis=3)
        return gx

    def state(self) -> list[dict[str, np.ndarray]]:
        return [{"coeffs": self.C[r].copy()} for r in range(self.C.shape[0])]


class _Dense:
    """One Dense layer (+ ReLU after it unless last) of R runs: weight ``(R, out, in)``, bias ``(R, out)``."""

    def __init__(self, nodes: list[ir.Dense], f: LearnerFormats, x_t: FixedType, relu: bool):
        self.f, self.x_t, self.relu = f, x_t, relu
        self.W = np.stack([m.weight for m in nodes]).astype(np.int64)
        self.b = np.stack([m.bias for m in nodes]).astype(np.int64)
        self.accum = dense_accum_type(f, x_t, self.W.shape[2])

    def lanes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return self.W.shape[1:], self.b.shape[1:]

    def update_bound(self) -> tuple[float, int, int]:
        f = self.f
        d_bias, d_weight = f.error.frac - 1 - f.storage.frac, f.error.frac + self.x_t.frac - 1 - f.storage.frac
        return 2.0 ** (f.error.width - 1) * 2.0 ** max(self.x_t.width - 1, 0), min(d_bias, d_weight), \
            max(d_bias, d_weight)

    def forward(self, x: np.ndarray):
        f = self.f
        w = fixed.requantize(self.W, f.storage, f.coeff)
        bias = fixed.requantize(self.b, f.storage, f.coeff)
        acc = np.einsum("roi,ri->ro", w, x) + (bias << (self.accum.frac - f.coeff.frac))
        z = fixed.requantize(fixed.apply_overflow(acc, self.accum), self.accum, f.datapath)
        h = np.maximum(z, 0) if self.relu else z
        return h, (x, w, z)

    def backward(self, cache, g: np.ndarray, d: np.ndarray, learn: np.ndarray, words, rand_bits: int,
                 need_grad: bool) -> Optional[np.ndarray]:
        x, w, z = cache
        f = self.f
        if self.relu:
            g = np.where(z > 0, g, 0)
        gx = None
        gx = self._grad_x(g, w) if need_grad else None
        ww, wb = (None, None) if words is None else words
        dw = d + self.x_t.frac  # products g x carry frac(x) more bits than g alone
        pw = g[:, :, None] * x[:, None, :]
        new_w = fixed.apply_overflow(self.W - _round_shift(pw, dw[:, None, None], ww, rand_bits), f.storage)
        new_b = fixed.apply_overflow(self.b - _round_shift(g, d[:, None], wb, rand_bits), f.storage)
        self.W = np.where(learn[:, None, None], new_w, self.W)
        self.b = np.where(learn[:, None], new_b, self.b)
        return gx

    def _grad_x(self, g: np.ndarray, w: np.ndarray) -> np.ndarray:
        f = self.f
        s = np.einsum("ro,roi->ri", g, w)  # frac f_e + f_coeff, exact
        gx = fixed.shift_round(s, f.coeff.frac, f.error.rounding)
        return fixed.apply_overflow(gx, f.error).astype(np.int64)

    def state(self) -> list[dict[str, np.ndarray]]:
        return [{"weight": self.W[r].copy(), "bias": self.b[r].copy()} for r in range(self.W.shape[0])]


# -- the trajectory ---------------------------------------------------------------------------------------

def _structure(learner: Learner) -> str:
    """Everything that must agree between batched runs: the graph without its arrays, formats, rounding."""
    g = ir.to_json(learner.graph)
    g.pop("metadata")
    s = learner.spec.replace(lr_shift=0, lfsr_seed=0, seed=0, init="zeros", init_scale=None).to_json()
    return json.dumps([g, s], sort_keys=True)


def _per_run(a, R: int, n: Optional[int], width: int, t: FixedType, what: str) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype.kind not in "iu":
        raise LearnerError(f"{what}: expected integer codes of {t}, found dtype {a.dtype} (quantize with "
                           "bitforge.toolchain.fixed.quantize first)")
    if a.ndim == 2:
        a = np.broadcast_to(a[None], (R,) + a.shape)
    if a.ndim != 3 or a.shape[0] != R or a.shape[2] != width or (n is not None and a.shape[1] != n):
        raise LearnerError(f"{what}: expected shape (n, {width}) or ({R}, n, {width}), found {np.shape(a)}")
    if a.size and (a.min() < t.min_code or a.max() > t.max_code):
        raise LearnerError(f"{what}: codes in [{a.min()}, {a.max()}] lie outside {t} [{t.min_code}, {t.max_code}]")
    return a.astype(np.int64)


class Stepper:
    """The golden learner one sample at a time, for closed-loop use where a target depends on earlier
    predictions (A2C on CartPole: the TD target needs V(s')). :func:`run` is this in a loop, so a stepper and a
    trajectory agree bit for bit.

    ``learners``: one learner, or a batch that differs only in state, lr_shift and seeds (arrays then carry a
    leading run axis R; a single learner is run as R = 1 and :meth:`predict`/:meth:`step` still return
    ``(1, d_out)``).
    """

    def __init__(self, learners: Union[Learner, Sequence[Learner]], index_fn: Optional[IndexFn] = None):
        self.single = isinstance(learners, Learner)
        ls = [learners] if self.single else list(learners)
        if not ls:
            raise LearnerError("run() needs at least one learner")
        ref = _structure(ls[0])
        for i, other in enumerate(ls[1:], 1):
            if _structure(other) != ref:
                raise LearnerError(f"learner {i} of the batch differs from learner 0 in more than state, lr_shift "
                                   "and seeds; batch only learners built from the same spec")
        spec, f = ls[0].spec, ls[0].formats
        self.spec, self.formats, self.runs = spec, f, len(ls)
        index_fn = index_fn or (lambda xq, nd: cell_and_u(xq, nd.grid_size, nd.u_bits, nd.index_lo, nd.index_mult,
                                                           nd.index_shift))
        self.layers = []
        x_t = f.input
        per_run_layers = [m.layers() for m in ls]
        for j in range(spec.n_layers):
            nodes = [pl[j] for pl in per_run_layers]
            if spec.kind == "kan":
                self.layers.append(_Kan(nodes, f, x_t, index_fn))
            else:
                self.layers.append(_Dense(nodes, f, x_t, relu=j < spec.n_layers - 1))
            x_t = f.datapath

        lr = np.array([m.rule.lr_shift for m in ls], dtype=np.int64)
        self.stochastic = spec.rule.rounding == "stochastic"
        self.rand_bits = rand_bits = spec.rule.rand_bits
        for layer in self.layers:  # int64 bounds of the update (p + r, or p << -d)
            pmax, d_lo, d_hi = layer.update_bound()
            dmin, dmax = d_lo + int(lr.min()), max(d_hi + int(lr.max()), 0)
            worst = max(pmax * 2.0 ** max(-dmin, 0), pmax + 2.0 ** dmax, 2.0 ** (dmax + rand_bits))  # w << d
            if worst >= _LIMIT:
                raise LearnerError(f"the update products of these formats need {_bits(worst):.0f} bits (error "
                                   f"{f.error}, basis {f.basis}, storage {f.storage}, lr_shift {int(lr.min())}.."
                                   f"{int(lr.max())}); the golden model keeps them in int64: narrow the error or "
                                   "basis format")
        self.lfsr = None
        if self.stochastic:
            seeds = [lane_seeds(m.spec) for m in ls]
            self.lfsr = [tuple(np.stack([s[j][a] for s in seeds]) for a in range(len(seeds[0][j])))
                         for j in range(spec.n_layers)]
        self._word_mask = np.uint64((1 << rand_bits) - 1)
        self._diff_t = FixedType(f.datapath.width + 1, f.datapath.integer + 1, True)
        d_base = f.error.frac + f.basis.frac - 1 - f.storage.frac if spec.kind == "kan" else \
            f.error.frac - 1 - f.storage.frac
        self._d = d_base + lr

    def _forward(self, x: np.ndarray):
        h, caches = x, []
        for layer in self.layers:
            h, cache = layer.forward(h)
            caches.append(cache)
        return h, caches

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Datapath codes ``(R, d_out)`` for input codes ``(R, d_in)``; the state does not change."""
        return self._forward(np.asarray(x, dtype=np.int64))[0]

    def step(self, x: np.ndarray, target: np.ndarray, learn: Optional[np.ndarray] = None):
        """Predict, then update on the same sample: returns (prediction, error) codes ``(R, d_out)``.
        ``x`` ``(R, d_in)`` input codes, ``target`` ``(R, d_out)`` datapath codes, ``learn`` ``(R,)`` booleans."""
        learn = np.ones(self.runs, dtype=bool) if learn is None else np.asarray(learn, dtype=bool)
        h, caches = self._forward(np.asarray(x, dtype=np.int64))
        e = fixed.requantize(h - np.asarray(target, dtype=np.int64), self._diff_t, self.formats.error)
        g = e
        kan = self.spec.kind == "kan"
        for j in range(len(self.layers) - 1, -1, -1):
            words = None
            if self.stochastic:
                w = tuple((s & self._word_mask).astype(np.int64) for s in self.lfsr[j])
                words = w[0] if kan else w
            g = self.layers[j].backward(caches[j], g, self._d, learn, words, self.rand_bits, need_grad=j > 0)
        if self.stochastic:
            self.lfsr = [tuple(lfsr_leap(s, self.rand_bits) for s in lanes) for lanes in self.lfsr]
        return h, e

    def state(self) -> State:
        """The current state (per run stacked on a leading axis unless a single learner was given)."""
        return _stack_state(self.layers, self.single)

    def lfsr_state(self) -> list:
        return [] if self.lfsr is None else [tuple(s[0] if self.single else s for s in lanes) for lanes in self.lfsr]


def run(learners: Union[Learner, Sequence[Learner]], x_codes, target_codes, learn_enable=None, *,
        snapshot_every: Optional[int] = None, index_fn: Optional[IndexFn] = None) -> Trajectory:
    """The prequential trajectory of one learner, or of a batch of learners that differ only in state, lr_shift
    and seeds (one numpy program; arrays of the result gain a leading run axis).

    ``x_codes`` ``(n, d_in)`` (or ``(R, n, d_in)``) are codes of ``formats.input``; ``target_codes`` codes of
    ``formats.datapath``; ``learn_enable`` ``(n,)`` or ``(R, n)`` booleans (default: learn on every sample).
    ``index_fn`` replaces the KAN cell/u computation (to study index arithmetic, e.g. the public HLS code's
    saturating index); the default is the IR's.
    """
    st = Stepper(learners, index_fn)
    spec, f, R = st.spec, st.formats, st.runs
    x = _per_run(x_codes, R, None, spec.sizes[0], f.input, "x_codes")
    n = x.shape[1]
    t = _per_run(target_codes, R, n, spec.sizes[-1], f.datapath, "target_codes")
    le = np.ones((R, n), dtype=bool) if learn_enable is None else np.asarray(learn_enable).astype(bool)
    if le.ndim == 1:
        le = np.broadcast_to(le[None], (R,) + le.shape)
    if le.shape != (R, n):
        raise LearnerError(f"learn_enable: expected shape ({n},) or ({R}, {n}), found {np.shape(learn_enable)}")
    d_out = spec.sizes[-1]
    preds = np.zeros((R, n, d_out), dtype=np.int64)
    errs = np.zeros((R, n, d_out), dtype=np.int64)
    snaps: dict[int, State] = {}
    for step in range(n):
        preds[:, step], errs[:, step] = st.step(x[:, step], t[:, step], le[:, step])
        if snapshot_every and (step + 1) % snapshot_every == 0:
            snaps[step + 1] = st.state()
    if st.single:
        return Trajectory(preds[0], errs[0], st.state(), snaps, st.lfsr_state())
    return Trajectory(preds, errs, st.state(), snaps, st.lfsr_state())


def _stack_state(layers, single: bool) -> State:
    out = []
    for layer in layers:
        per_run = layer.state()
        if single:
            out.append(per_run[0])
        else:
            out.append({k: np.stack([s[k] for s in per_run]) for k in per_run[0]})
    return out
