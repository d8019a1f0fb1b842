"""NeUQI: scale and float zero-point that minimise the diagonal-Hessian-weighted quantization error.

Objective per group (arXiv 2505.17595): ``sum_i h_i (Q(w_i) - w_i)^2`` with
``h = diag(E[x x^T])`` over the group's input columns and ``Q(w) = (clamp(round(w/s - z), 0, q) + z) s``,
``q = 2^b - 1``.

**Exact zero-point for a given scale** (:func:`exact_zero`). In units of the scale (``x = w/s``) the loss is
``f(z) = sum_i h_i dist(z, P_i)^2`` with ``P_i = {x_i - k : k = 0..q}``: the code nearest ``x_i - z`` picks the point
of ``P_i`` nearest ``z``. ``f`` is piecewise quadratic, every piece with curvature ``H = sum h``, delimited by the
breakpoints ``x_i - k - 1/2``. With the codes of a piece fixed the best ``z`` is ``sum h (x - c) / H`` and the loss
is ``H`` times the weighted variance of the residuals ``x - c``. Each piece's parabola lies above ``f`` everywhere
(``f`` is their lower envelope), so ``min f`` is the smallest *unconstrained* piece minimum: no check that the
stationary point falls inside its piece is needed.

*Transition-point reduction* (our own derivation). Write ``x_i - 1/2 = m_i + phi_i`` (integer ``m_i``, fraction
``phi_i``). Every breakpoint of element ``i`` is ``L + phi_i`` for an integer level ``L``, so sorting the ``n``
fractions once orders the breakpoints of every level: on level ``L`` the pieces are the ``n + 1`` prefixes of that
order, with codes ``clamp(m_i - L + [rank_i >= j], 0, q)``. Only elements not clipped at ``L``
(``0 <= m_i - L < q``) change code along a level, so a level costs one prefix sum over the sorted elements instead
of a sort of ``n q`` breakpoints.

*Which levels.* The sweep starts with the two levels around a Lloyd-refined centre and is certified by two convex
lower bounds evaluated at the window's ends: ``F(z) = sum h_i dist(z, [x_i - q, x_i])^2`` (clipping alone) and
``P_min + G(z)``, where ``P_min`` is the minimum of the periodic, clip-free loss
``P(t) = sum h_i dist(t, x_i + Z)^2`` and ``G(z) = sum h_i max(0, dist(z, span_i)^2 - 1/4)`` (an element's interior
rounding loss is at most ``h_i/4``, which is what its clipping loss must exceed before it adds to ``P``). A window
end is certified when a bound there exceeds the best piece found and slopes outwards; otherwise the window grows on
that side by one level and the ends are checked again; groups still uncertified then sweep every remaining level of
the full range (beyond which ``f`` is monotone) in one batched call, rather than growing the window round after
round for the last few groups. The result is the exact optimum over ``z``; the tests check it against brute force.

**Scale search** (:func:`neuqi_params`). ``s = s_minmax * i / T`` with ``T = 2048``: 12 coarse points evenly over
``i`` in ``[T/4, T]`` (140 apart), then a pattern search from the best coarse point: try ``i +- 64``, move if better,
halve the step, down to 1 (14 more points). Candidate scales are rounded to float16 before ``z`` is solved, so ``z``
is optimal for the scale the checkpoint stores. Solving ``z`` exactly at every candidate costs about 10x the whole
default search (``exhaustive`` against ``compiled=false`` in ``bitforge bench neuqi``), so candidates are scored with
two Lloyd steps (:func:`lloyd_zero`): on the coarse grid from two starts (``starts``: the centred grid shifted by -1/4
and +1/4 step), in the pattern search warm from the current point's offset ``z s``. The exact solver runs once per
group, at the pattern search's end point, and finally a group keeps the min-max grid if that is better after the
float16 rounding of ``z``, so NeUQI is never worse than RTN on its own objective. ``exact_top = k`` also solves ``z``
exactly at the ``k`` best coarse points and starts the pattern search from the best of them;
``NeuqiConfig(exhaustive=True)`` solves ``z`` exactly everywhere.

**Two implementations.** The search runs in a C kernel (``neuqi_search.c`` through :mod:`.neuqi_kernel`: one group
at a time, its elements in registers, threads over groups) wherever a C compiler can build it; the PyTorch code
below is the reference it is tested against (the same candidates, Lloyd steps and exact solver; only float32 sums
run in another order, so a few groups whose candidates tie to float32 precision may end on another scale) and the
path for ``exhaustive``, for ``compiled=false`` and where no compiler works.

Why this search (``bitforge bench neuqi``; the history in docs/compress.md): a single Lloyd start ranks coarse scales
badly where clipping one end pays off, which is why the previous default solved ``z`` exactly at the 3 best coarse
points (``exact_top = 3``) at twice the cost of the rest of the search. Two starts per coarse scale rank them about as
well: on the 28 linears of SmolLM2's blocks 0, 10, 20 and 29 the weighted loss is within -0.5 % .. +0.1 % of the
previous default's settings (``exact_top=3,starts=1,coarse=16,refine=32``: W3 g64, W2 g32, W2 g64) in 0.46-0.49 of
their time, both in PyTorch (12 coarse points and a first pattern step of 64 instead of 16 and 32: 38 Lloyd-scored
candidates instead of 44). Earlier changes, measured the same way: the paper's shape (32 coarse points over ``(0,
T]``, every step within 15 of the coarse winner, exact ``z`` at the best 3 of each stage) spent 7 of its 32 coarse
points below ``s_minmax / 4``, where few groups end (4 of 221,184 groups at W3 g64 on the layers above), and its fine
stage explored under half of the gap between coarse points; the pattern search reached a 1-2 % lower loss in 1.4-1.6x
less time.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import torch

from ..errors import BitforgeError
from . import api, neuqi_kernel
from .api import CompressConfig, CompressedLayer, LayerStats, check_group, register
from .uniform import (
    FP16_TINY,
    UniformQuantized,
    check_bits,
    check_weight,
    grouped,
    minmax_params,
    quantize_uniform,
)

# Groups handled together: keeps the [groups, n] temporaries cache-sized (about 64k floats).
_CHUNK_ELEMENTS = 1 << 16
# Elements scored per Lloyd call (several candidate scales at once: fewer, larger tensor operations).
_LLOYD_BLOCK = 1 << 18


@dataclass(frozen=True)
class NeuqiConfig:
    """Scale search on the grid ``s = s_minmax * i / T``: ``coarse`` evenly spaced ``i`` over ``[low T, T]``, then a
    pattern search from the best of them (steps ``refine``, ``refine / 2``, ..., 1 either side, moving while it
    improves). Candidates are scored with ``lloyd_iters`` Lloyd steps (from ``starts`` shifted grids on the coarse
    grid); the final point and the ``exact_top`` best coarse ones get the exact zero-point. ``exhaustive`` solves
    ``z`` exactly at every candidate instead. ``compiled`` runs the search in the C kernel (``neuqi_kernel``) where
    one can be built; ``compiled=false`` (and ``exhaustive``) run this module's PyTorch search, its reference."""

    T: int = 2048
    coarse: int = 12
    low: float = 0.25
    refine: int = 64
    exact_top: int = 0
    lloyd_iters: int = 2
    starts: int = 2
    exhaustive: bool = False
    compiled: bool = True

    @staticmethod
    def from_options(options: dict, method: str = "neuqi") -> NeuqiConfig:
        """The search settings among ``--option KEY=VALUE`` (other keys are the caller's to check)."""
        kw = {}
        for f in fields(NeuqiConfig):
            if f.name not in options:
                continue
            v, kind = options[f.name], {"int": int, "float": float, "bool": bool}[str(f.type)]
            ok = isinstance(v, bool) if kind is bool else isinstance(v, (int, float)) and not isinstance(v, bool)
            if not ok or (kind is int and float(v) != int(v)):
                raise BitforgeError(f"{method}: --option {f.name}={v!r}: expected {kind.__name__}")
            kw[f.name] = kind(v)
        return NeuqiConfig(**kw)

    def __post_init__(self) -> None:
        if (self.coarse < 2 or not 0.0 < self.low < 1.0 or self.refine < 0 or self.exact_top < 0
                or self.lloyd_iters < 1 or self.starts < 1 or self.T < self.coarse):
            raise BitforgeError(f"NeUQI search: coarse >= 2, 0 < low < 1, refine >= 0, exact_top >= 0, "
                                f"lloyd_iters >= 1, starts >= 1, T >= coarse; got {self}")


#: ``--option`` keys that reach the search (``neuqi``, and the grids of ``neuqi+gptq``).
NEUQI_OPTIONS = tuple(f.name for f in fields(NeuqiConfig))


class _Phases:
    """One batch of groups with their elements sorted by the fractional phase ``phi`` (see module docstring)."""

    def __init__(self, x: torch.Tensor, h: torch.Tensor, q: int):
        self.q = q
        a = x - 0.5
        m = torch.floor(a)
        phi = a - m
        order = _argsort_rows(phi)
        self.ps = phi.gather(-1, order)
        self.hs = h.gather(-1, order)
        self.ms = m.gather(-1, order)
        self.xs = self.ms + self.ps + 0.5
        self.H = self.hs.sum(-1)
        self.invH = 1.0 / self.H
        self.hp2 = 2.0 * self.hs * self.ps
        self.w1 = 2.0 * self.ps + 1.0
        # Sums of the level where every element is interior and takes its lower code (residual phi + 1/2).
        self.M1P = 0.5 * (self.hp2.sum(-1) + self.H)
        self.M2P = (self.hs * (self.ps + 0.5) ** 2).sum(-1)

    def subset(self, idx: torch.Tensor) -> _Phases:
        new = object.__new__(_Phases)
        new.q = self.q
        for k in ("ps", "hs", "ms", "xs", "H", "invH", "hp2", "w1", "M1P", "M2P"):
            setattr(new, k, getattr(self, k)[idx])
        return new

    def _scan(self, M1_0, M2_0, ha, hpa, L):
        """Best piece of each level from its base sums and the sorted active weights (j = 0..n): ``M1_0``,
        ``M2_0``, ``L`` are ``[G, k]`` (k levels per group), ``ha``, ``hpa`` ``[G, k, n]``."""
        invH = self.invH[:, None]
        cs1 = ha.cumsum(-1)
        cs2 = hpa.cumsum(-1)
        c1 = M1_0 - cs1[..., -1]
        c2 = M2_0 - cs2[..., -1]
        M1 = cs1.add_(c1[..., None])
        M2 = cs2.add_(c2[..., None])
        V = M2.sub_(M1 * M1 * invH[..., None])
        v, j = V.min(-1)
        t = M1.gather(-1, j[..., None]).squeeze(-1) * invH
        v0 = c2 - c1 * c1 * invH
        first = v0 < v
        return torch.where(first, v0, v), L + torch.where(first, c1 * invH, t)

    def levels(self, L: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Smallest piece minimum on each level of ``L`` (``[G, k]``) and its ``z``, both ``[G, k]``."""
        q = self.q
        u = self.ms[:, None, :] - L[..., None]
        r = u - u.clamp(0, q)                    # how far a clipped element lies beyond the grid, in steps
        act = (u >= 0).logical_and_(u < q)
        hs = self.hs[:, None, :]
        hr = hs * r
        M1_0 = self.M1P[:, None] + hr.sum(-1)
        M2_0 = self.M2P[:, None] + hr.mul_(self.w1[:, None, :] + r).sum(-1)
        return self._scan(M1_0, M2_0, hs * act, self.hp2[:, None, :] * act, L)

    def best_level(self, L: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The best piece over the levels ``L`` (``[G, k]``): (loss, z), ``[G]`` each."""
        v, z = self.levels(L)
        i = v.argmin(-1, keepdim=True)
        return v.gather(-1, i).squeeze(-1), z.gather(-1, i).squeeze(-1)

    def periodic_min(self) -> torch.Tensor:
        """``P_min``: the loss with clipping ignored (every element interior), minimised over the phase."""
        v, _ = self._scan(self.M1P[:, None], self.M2P[:, None], self.hs[:, None], self.hp2[:, None],
                          torch.zeros_like(self.M1P[:, None]))
        return v[:, 0].clamp_(min=0)

    def bounds(self, z: torch.Tensor, pmin: torch.Tensor):
        """Lower bounds of ``f`` valid beyond ``z``: (F, F' sign, P_min + G, G' sign)."""
        above = torch.relu(z[:, None] - self.xs)
        below = torch.relu(self.xs - self.q - z[:, None])
        d = above + below
        d2 = d * d
        slope = (above - below).mul_(self.hs)
        F = (self.hs * d2).sum(-1)
        G = (self.hs * torch.relu(d2 - 0.25)).sum(-1)
        return F, slope.sum(-1), pmin + G, (slope * (d > 0.5)).sum(-1)

    def centre(self, iters: int = 2) -> torch.Tensor:
        """A local minimum of ``f`` (Lloyd's fixed point) from the centred min-max grid: where the sweep starts."""
        z = 0.5 * (self.xs.amin(-1) + self.xs.amax(-1) - self.q)
        for _ in range(iters):
            c = torch.round(self.xs - z[:, None]).clamp_(0, self.q)
            z = (self.hs * c.neg_().add_(self.xs)).sum(-1) * self.invH
        return z


def _argsort_rows(phi: torch.Tensor) -> torch.Tensor:
    """Row-wise argsort of values in [0, 1): numpy's vectorised sort of (float bits << 16 | index) keys, several
    times faster here than ``torch.argsort`` (non-negative float32 bit patterns order like the floats)."""
    n = phi.shape[-1]
    if n >= 1 << 16:
        return torch.argsort(phi, dim=-1)
    key = (phi.contiguous().numpy().view(np.int32).astype(np.int64) << 16) | np.arange(n, dtype=np.int64)
    key.sort(axis=-1)
    return torch.from_numpy(key & 0xFFFF)


def _exact(S: _Phases) -> tuple[torch.Tensor, torch.Tensor]:
    G = S.H.shape[0]
    lo = torch.floor(S.centre() - 0.5)
    full_lo = torch.floor(S.xs.amin(-1) - S.q - 0.5)
    full_hi = torch.floor(S.xs.amax(-1) + 0.5) + 1
    lo = torch.clamp(lo, min=full_lo)
    # Levels [lo, hi) are swept (wider first windows certify more groups at once but were slower on SmolLM2's
    # layers in a hand check).
    hi = lo + 2
    best, bz = S.best_level(torch.stack([lo, lo + 1], 1))
    pmin = S.periodic_min()
    todo = torch.arange(G)
    for step in (1, 2):
        sub = S if todo.numel() == G else S.subset(todo)
        bt = best[todo]
        tol = 1e-6 * (bt + sub.H)
        l, h = lo[todo], hi[todo]
        Fl, dFl, Gl, dGl = sub.bounds(l, pmin[todo])
        Fh, dFh, Gh, dGh = sub.bounds(h, pmin[todo])
        done = bt <= 1e-7 * sub.H                     # a zero loss (to float32 precision) cannot be beaten
        ok_l = done | (l <= full_lo[todo]) | ((Fl >= bt + tol) & (dFl <= 0)) | ((Gl >= bt + tol) & (dGl <= 0))
        ok_h = done | (h >= full_hi[todo]) | ((Fh >= bt + tol) & (dFh >= 0)) | ((Gh >= bt + tol) & (dGh >= 0))
        checked, todo = todo, todo[~(ok_l & ok_h)]
        if not todo.numel() or step == 2:
            break
        for ok, edge in ((ok_l, "lo"), (ok_h, "hi")):
            grow = checked[~ok]
            if not grow.numel():
                continue
            part = S.subset(grow)
            ks = torch.arange(step, dtype=lo.dtype)
            L = lo[grow, None] - 1 - ks if edge == "lo" else hi[grow, None] + ks
            _keep_best(best, bz, grow, *part.best_level(L))
            if edge == "lo":
                lo[grow] -= step
            else:
                hi[grow] += step
    if todo.numel():
        _sweep_rest(S, todo, lo, hi, full_lo, full_hi, best, bz)
    return best.clamp_(min=0), bz


def _keep_best(best, bz, rows, v, z) -> None:
    b = v < best[rows]
    best[rows] = torch.where(b, v, best[rows])
    bz[rows] = torch.where(b, z, bz[rows])


def _sweep_rest(S: _Phases, todo, lo, hi, full_lo, full_hi, best, bz) -> None:
    """Every level of ``[full_lo, full_hi)`` outside the swept window ``[lo, hi)``, for the groups in ``todo``."""
    width = int((full_hi[todo] - full_lo[todo]).max())
    ks = torch.arange(width, dtype=lo.dtype)
    per = max(1, _CHUNK_ELEMENTS * 4 // (width * S.ps.shape[-1]))
    for i in range(0, todo.numel(), per):
        rows = todo[i:i + per]
        L = full_lo[rows, None] + ks
        swept = (L >= lo[rows, None]) & (L < hi[rows, None]) | (L >= full_hi[rows, None])
        L = torch.where(swept, lo[rows, None], L)     # an already swept level changes nothing
        _keep_best(best, bz, rows, *S.subset(rows).best_level(L))


def _chunks(n_rows: int, n_cols: int):
    step = max(1, _CHUNK_ELEMENTS // max(n_cols, 1))
    for start in range(0, n_rows, step):
        yield slice(start, min(start + step, n_rows))


def exact_zero(x: torch.Tensor, h: torch.Tensor, q: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact ``min_z sum_i h_i (clamp(round(x_i - z), 0, q) + z - x_i)^2`` per row of ``x`` ([G, n]).

    ``x`` is the weight in units of the scale, ``h >= 0`` with a positive sum per row. Returns (loss, z), float32.
    """
    x = x.to(torch.float32)
    h = h.to(torch.float32)
    loss, z = torch.empty(x.shape[0]), torch.empty(x.shape[0])
    for sl in _chunks(*x.shape):
        loss[sl], z[sl] = _exact(_Phases(x[sl], h[sl], q))
    return loss, z


def lloyd_zero(x: torch.Tensor, h: torch.Tensor, q: int, z: torch.Tensor | None = None,
               iters: int = 2, starts: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Cheap score of a scale: ``iters`` Lloyd steps (round to the grid at ``z``, then move ``z`` to the best offset
    for those codes, ``z <- z + sum h (y - c) / H`` with ``y = x - z``; no step increases the loss) from ``z``.
    Returns (the loss of the last codes at their best ``z``, that ``z``): an upper bound of the loss at ``z``,
    computed from the last step's sums (``sum h (e - dz)^2`` with ``e = y - c`` small, so float32 does not cancel
    against ``z^2``) instead of rounding once more: 2 steps cost 14 tensor passes instead of 21. ``x``:
    ``[..., n]``, ``h`` broadcastable to it; ``iters >= 1``.

    Without ``z`` the steps start from the centred min-max grid, or, with ``starts = K > 1``, from ``K`` grids
    shifted by ``(j + 1/2) / K - 1/2`` steps around it, keeping the best: Lloyd stops in the local minimum nearest
    its start, and the pieces of the loss repeat with period one step, so starts spread over one step see the
    minima that a single start misses (where clipping at one end pays off)."""
    if z is None:
        z = 0.5 * (x.amin(-1) + x.amax(-1) - q)
        if starts > 1:    # one start at a time: faster here than a [..., starts, n] broadcast
            loss, best = lloyd_zero(x, h, q, z + (0.5 / starts - 0.5), iters)
            for j in range(1, starts):
                other, zj = lloyd_zero(x, h, q, z + ((j + 0.5) / starts - 0.5), iters)
                better = other < loss
                loss, best = torch.where(better, other, loss), torch.where(better, zj, best)
            return loss, best
    invH = 1.0 / h.sum(-1)
    for _ in range(iters):
        y = x - z.unsqueeze(-1)
        e = torch.round(y).clamp_(0, q)
        e = torch.sub(y, e, out=e)                # y - c(z), in the codes' buffer
        he = h * e
        s1 = he.sum(-1)
        dz = s1 * invH
        z = z + dz
    return (he.mul_(e).sum(-1) - s1 * dz).clamp_(min=0), z


def _fp16_scale(smm: torch.Tensor, i: torch.Tensor, T: int) -> torch.Tensor:
    """``s_minmax * i / T`` as the float16 the checkpoint will store (``smm`` is already a valid float16 range)."""
    s = smm.reshape(smm.shape + (1,) * (i.dim() - smm.dim())) * i.to(torch.float32) / T
    return s.clamp_(min=FP16_TINY).half().float()


def coarse_steps(cfg: NeuqiConfig) -> torch.Tensor:
    """The coarse grid's ``i`` (``s = s_minmax * i / T``)."""
    return torch.linspace(cfg.low * cfg.T, cfg.T, cfg.coarse).round().long()


class _Search:
    """Coarse grid, then pattern search, for one chunk of groups (see module docstring).

    State per group: the best exact (loss, step, offset) so far; ``offset = z * s`` is the grid's offset in weight
    units, which carries a zero-point from one scale to a nearby one as a warm start."""

    def __init__(self, w: torch.Tensor, h: torch.Tensor, smm: torch.Tensor, q: int, cfg: NeuqiConfig):
        self.w, self.h, self.smm, self.q, self.cfg = w, h, smm, q, cfg
        self.best = torch.full((w.shape[0],), float("inf"))
        self.i = torch.full((w.shape[0],), cfg.T, dtype=torch.long)
        self.offset = torch.zeros(w.shape[0])

    def _exact(self, steps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Exact (loss, offset) at one step per group."""
        s = _fp16_scale(self.smm, steps, self.cfg.T)
        loss, z = _exact(_Phases(self.w / s[:, None], self.h, self.q))
        return loss * s * s, z * s

    def _keep(self, steps: torch.Tensor, loss: torch.Tensor, offset: torch.Tensor) -> None:
        better = loss < self.best
        self.best = torch.where(better, loss, self.best)
        self.i = torch.where(better, steps, self.i)
        self.offset = torch.where(better, offset, self.offset)

    def _score(self, steps: torch.Tensor, warm: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss, offset) at ``steps`` ([groups, C]): exact with ``exhaustive``, else Lloyd steps from the centred
        grid (``warm`` None) or from the offsets ``warm`` ([groups])."""
        if self.cfg.exhaustive:
            pairs = [self._exact(steps[:, c]) for c in range(steps.shape[1])]
            return torch.stack([p[0] for p in pairs], 1), torch.stack([p[1] for p in pairs], 1)
        scales = _fp16_scale(self.smm, steps, self.cfg.T)
        loss, offset = torch.empty(steps.shape), torch.empty(steps.shape)
        starts = self.cfg.starts if warm is None else 1
        block = max(1, _LLOYD_BLOCK // self.w.numel())
        for c in range(0, steps.shape[1], block):
            s = scales[:, c:c + block]
            x = self.w.unsqueeze(1) / s.unsqueeze(-1)
            z0 = None if warm is None else warm.unsqueeze(-1) / s
            l, z = lloyd_zero(x, self.h.unsqueeze(1), self.q, z0, self.cfg.lloyd_iters, starts)
            loss[:, c:c + block], offset[:, c:c + block] = l * s * s, z * s
        return loss, offset

    def run(self) -> tuple[torch.Tensor, torch.Tensor]:
        cfg = self.cfg
        G = self.w.shape[0]
        coarse = coarse_steps(cfg).expand(G, -1)
        loss, offset = self._score(coarse, None)
        if cfg.exhaustive or cfg.exact_top == 0:
            pick = loss.argmin(1, keepdim=True)
            start = coarse.gather(1, pick)[:, 0], loss.gather(1, pick)[:, 0], offset.gather(1, pick)[:, 0]
            if cfg.exhaustive:
                self._keep(*start)
        else:
            for c in loss.topk(min(cfg.exact_top, cfg.coarse), 1, largest=False).indices.T:
                steps = coarse.gather(1, c[:, None])[:, 0]
                self._keep(steps, *self._exact(steps))
            start = self.i, self.best, self.offset
        # The pattern search starts from the best exact point (or, with exact_top = 0, the best Lloyd-scored one).
        # Its z is a fixed point of Lloyd's step, so Lloyd scores of nearby scales, warm-started from its offset,
        # compare fairly with its loss.
        at, cur, cur_off = (t.clone() for t in start)
        step = cfg.refine
        while step >= 1:
            cand = torch.stack([at - step, at + step], 1).clamp_(1, cfg.T)
            loss, offset = self._score(cand, cur_off)
            pick = loss.argmin(1, keepdim=True)
            v = loss.gather(1, pick)[:, 0]
            moved = v < cur
            at = torch.where(moved, cand.gather(1, pick)[:, 0], at)
            cur_off = torch.where(moved, offset.gather(1, pick)[:, 0], cur_off)
            cur = torch.where(moved, v, cur)
            if cfg.exhaustive:
                self._keep(at, cur, cur_off)
            step //= 2
        if not cfg.exhaustive:
            self._keep(at, *self._exact(at))
        s = _fp16_scale(self.smm, self.i, cfg.T)
        return s, self.offset / s


def neuqi_params(W: torch.Tensor, h: torch.Tensor, bits: int, group: int | None,
                 cfg: NeuqiConfig = NeuqiConfig()) -> tuple[torch.Tensor, torch.Tensor]:
    """NeUQI's (scale, zero) per group, float32 ``[out, groups]`` (scales already float16-representable).

    ``h``: importance of each input column (``LayerStats.diag``), length ``in``.
    """
    if h.dim() != 1 or h.numel() != W.shape[1] or not torch.isfinite(h).all() or (h < 0).any():
        raise BitforgeError(f"NeUQI: the importance vector must hold {W.shape[1]} finite non-negative values (one per "
                            f"input column), got shape {tuple(h.shape)}")
    q = (1 << bits) - 1
    Wg = grouped(W.to(torch.float32), group)
    out, ng, g = Wg.shape
    hg = h.to(torch.float32).reshape(1, ng, g).expand(out, ng, g).reshape(out * ng, g)
    # A group whose inputs are all dead (h = 0) has no preference: weigh its errors equally.
    hg = torch.where((hg.sum(-1) <= 0)[:, None], torch.ones_like(hg), hg)
    hg = hg / hg.amax(-1, keepdim=True)              # per-group scale is irrelevant to the argmin; keeps float32 sane
    Wg = Wg.reshape(out * ng, g)
    smm = minmax_params(Wg, bits, None)[0].squeeze(-1)
    lib = neuqi_kernel.library() if cfg.compiled and not cfg.exhaustive else None
    if lib is not None:
        scale, zero = neuqi_kernel.search(lib, Wg, hg, smm, q, cfg, coarse_steps(cfg))
    else:
        scale, zero = torch.empty(out * ng), torch.empty(out * ng)
        for sl in _chunks(out * ng, g):
            scale[sl], zero[sl] = _Search(Wg[sl], hg[sl].contiguous(), smm[sl], q, cfg).run()
    return scale.reshape(out, ng), zero.reshape(out, ng)


def weighted_loss(W: torch.Tensor, What: torch.Tensor, h: torch.Tensor, group: int | None) -> torch.Tensor:
    """NeUQI's objective per (row, group): ``sum_i h_i (What_i - W_i)^2``, float64 ``[out, groups]``."""
    d = What.double().sub_(W)                       # in place: a third of the time of the out-of-place chain
    return grouped(d.square_().mul_(h.double()), group).sum(-1)


def keep_better(W: torch.Tensor, h: torch.Tensor, a: UniformQuantized, b: UniformQuantized) -> UniformQuantized:
    """Per group, whichever of two quantizations has the lower weighted loss (ties go to ``a``)."""
    pick_b = weighted_loss(W, b.dequantize(), h, b.group) < weighted_loss(W, a.dequantize(), h, a.group)
    g = W.shape[1] // a.scale.shape[1]
    codes = torch.where(pick_b.repeat_interleave(g, dim=1), b.codes, a.codes)
    return UniformQuantized(codes, torch.where(pick_b, b.scale, a.scale), torch.where(pick_b, b.zero, a.zero),
                            a.bits, a.group)


def quantize_neuqi(W: torch.Tensor, h: torch.Tensor, bits: int, group: int | None, layer: str = "",
                   cfg: NeuqiConfig = NeuqiConfig()) -> UniformQuantized:
    """Round to nearest on NeUQI's grid; per group never worse than min-max on the weighted objective."""
    check_weight(W, layer)
    check_bits(bits, "neuqi")
    check_group(W, group, layer)
    scale, zero = neuqi_params(W, h, bits, group, cfg)
    ours = quantize_uniform(W, bits, group, scale, zero, layer=layer, method="neuqi")
    return keep_better(W, h, ours, quantize_uniform(W, bits, group, layer=layer, method="neuqi"))


@register("neuqi")
def neuqi(W: torch.Tensor, stats: LayerStats, cfg: CompressConfig) -> CompressedLayer:
    """NeUQI initialisation, round to nearest."""
    api.check_options(cfg.options, "neuqi", NEUQI_OPTIONS)
    return quantize_neuqi(W, stats.diag, cfg.bits, cfg.group, layer=stats.name,
                          cfg=NeuqiConfig.from_options(cfg.options)).to_layer("neuqi")


neuqi.statistics = "diag"  # the driver then sums x_i^2 only (see LayerStats)
