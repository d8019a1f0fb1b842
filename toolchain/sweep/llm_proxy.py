"""The LLM search's cheap fidelity: the calibration output error of every (layer, bits, group, rank) candidate.

For a layer ``W`` (``[out, in]``) and its calibration second moment ``H = E[x x^T]`` the proxy of a candidate is the
objective the Q + LR methods themselves minimise, ``tr(D H D^T)`` with ``D = W - W_hat``
(:func:`..compress.lowrank.output_error`), where ``W_hat`` is bit for bit what ``--method qera|srr --bits B
--group G --rank R`` stores for that layer (rank 0: the base quantizer alone, which is what a Q + LR layer with no
correction is). Its cost is the layer's stored bits, counted as the checkpoint does (``meta["bpw"] * out * in``:
codes, scales, zero-points and the float16 factors), so the allocator's budget is the checkpoint's bpw exactly.

Why not call the method once per candidate: QERA's rank-r factors are the top r of one SVD of the scaled
quantization error, which depends on the bits and the group but not on r; SRR's preserved part is the top k of one
SVD of ``W S``, and its residual's error depends on (bits, group, k) only. Reusing those decompositions across the
rank list makes a layer's whole table cost about one method call per bit width instead of one per candidate
(SmolLM2-135M: minutes instead of an hour for SRR). The tests check every ``W_hat`` against the registered method.
"""
from __future__ import annotations

from dataclasses import replace

import torch

from ..compress import lowrank
from ..compress.api import CompressConfig, LayerStats
from ..errors import BitforgeError

METHODS = ("qera", "srr")


def _svd(A: torch.Tensor):
    return torch.linalg.svd(A, full_matrices=False)


def _stored_bits(bpw: float, n: int) -> int:
    """A layer's stored bits from its manifest bpw (every stored bit / (out * in), so the product is an integer)."""
    return int(round(bpw * n))


class LayerCandidates:
    """Builds ``W_hat`` for every candidate of one layer, sharing the decompositions the candidates have in common."""

    def __init__(self, W: torch.Tensor, stats: LayerStats, method: str, options: dict, seed: int):
        if method not in METHODS:
            raise BitforgeError(f"llm search: method {method!r}; expected one of {', '.join(METHODS)} (the Q + LR "
                                f"methods whose bits and rank the search allocates)")
        self.W = W.to(torch.float32)
        self.W64 = self.W.to(torch.float64)
        self.stats, self.method, self.options, self.seed = stats, method, dict(options), int(seed)
        self.H = lowrank.checked_hessian(stats, W.shape[1], method)
        self.scaling = lowrank.input_scaling(stats, W.shape[1], self.options.get("scaling", "approx"),
                                             float(self.options.get("damp", 0.01)), method)
        self._q: dict = {}
        self._err_svd: dict = {}
        self._svd_w = None
        self._probe = None
        self._preserved: dict = {}

    def config(self, bits: int, group: int | None, rank: int) -> CompressConfig:
        return CompressConfig(self.method, bits=bits, group=group, rank=rank, seed=self.seed, options=self.options)

    # -- shared pieces --------------------------------------------------------------------------------------
    def _preserve(self, k: int):
        """SRR's preserved rank-k part (float16 factors) and the residual the quantizer then sees."""
        if k not in self._preserved:
            n_out, n_in = self.W64.shape
            if k:
                if self._svd_w is None:
                    self._svd_w = _svd(self.scaling.scale(self.W64))
                L1, R1 = lowrank.lowrank_fit(self.W64, k, self.scaling, self._svd_w)
            else:
                L1, R1 = self.W64.new_zeros(n_out, 0), self.W64.new_zeros(0, n_in)
            L1h = lowrank.to_fp16(L1, "lr_left", self.stats.name)
            R1h = lowrank.to_fp16(R1, "lr_right", self.stats.name)
            residual = self.W64 - L1h.to(torch.float64) @ R1h.to(torch.float64)
            self._preserved[k] = (L1h, R1h, residual)
        return self._preserved[k]

    def _quantized(self, bits: int, group: int | None, k: int):
        key = (bits, group, k)
        if key not in self._q:
            residual = self._preserve(k)[2]
            self._q[key] = lowrank.base_quantize(residual, self.stats, self.config(bits, group, 0), self.method)
        return self._q[key]

    def _error_svd(self, bits: int, group: int | None, k: int):
        key = (bits, group, k)
        if key not in self._err_svd:
            residual = self._preserve(k)[2]
            err = residual - self._quantized(bits, group, k).weight_hat.to(torch.float64)
            self._err_svd[key] = (err, _svd(self.scaling.scale(err)))
        return self._err_svd[key]

    def _reconstruct(self, bits: int, group: int | None, rank: int, k: int) -> torch.Tensor:
        """``lowrank.reconstruct``'s ``weight_hat`` for split k, from the cached pieces (same operations, same
        order, so the same bits)."""
        L1h, R1h, _ = self._preserve(k)
        q = self._quantized(bits, group, k)
        err, svd = self._error_svd(bits, group, k)
        L2, R2 = lowrank.lowrank_fit(err, rank - k, self.scaling, svd)
        left = torch.cat([L1h, lowrank.to_fp16(L2, "lr_left", self.stats.name)], 1)
        right = torch.cat([R1h, lowrank.to_fp16(R2, "lr_right", self.stats.name)], 0)
        return q.weight_hat.to(torch.float32) + left.to(torch.float32) @ right.to(torch.float32)

    def _srr_k(self, rank: int) -> int:
        if "k" in self.options:
            k = int(self.options["k"])
            if not 0 <= k <= rank:
                raise BitforgeError(f"layer {self.stats.name or '?'}: method srr: option k={k} must lie in "
                                    f"0..{rank} for every candidate rank; drop the option or the smaller ranks")
            return k
        if self._svd_w is None:
            self._svd_w = _svd(self.scaling.scale(self.W64))
        if self._probe is None:
            probe = lowrank.probe_matrix(tuple(self.W64.shape), self.seed).to(self.W64.device)
            self._probe = torch.linalg.svdvals(self.scaling.scale(probe))
        crit = lowrank.srr_criterion(self._svd_w[1], self._probe, rank)
        return lowrank.choose_k(crit, float(self.options.get("k_tol", 0.01)))

    # -- the candidates -------------------------------------------------------------------------------------
    def weight_hat(self, bits: int, group: int | None, rank: int) -> tuple[torch.Tensor, float]:
        """(``W_hat``, bpw) of one candidate: what the layer's method stores and decodes at these settings."""
        n_out, n_in = self.W.shape
        if rank == 0:
            q = self._quantized(bits, group, 0)
            return q.weight_hat.to(torch.float32), q.bpw
        lowrank.check_rank(self.W, rank, self.method, self.stats.name)
        if self.method == "qera":
            w_hat = self._reconstruct(bits, group, rank, 0)
        else:
            k = self._srr_k(rank)
            w_hat = self._reconstruct(bits, group, rank, k)
            if k and "k" not in self.options and self.options.get("check_k0", True):
                qera = self._reconstruct(bits, group, rank, 0)
                if lowrank.output_error(self.W64, qera, self.H) < lowrank.output_error(self.W64, w_hat, self.H):
                    w_hat = qera
        bpw = self._quantized(bits, group, 0).bpw + 16.0 * rank * (n_out + n_in) / (n_out * n_in)
        return w_hat, bpw

    def error(self, w_hat: torch.Tensor) -> float:
        return lowrank.output_error(self.W64, w_hat, self.H)


def layer_table(name: str, W: torch.Tensor, stats: LayerStats, method: str, bits: list[int],
                groups: list[int | None], ranks: list[int], options: dict, seed: int,
                fisher: torch.Tensor | None = None) -> dict:
    """The proxy table of one layer: ``{"name", "shape", "weights", "ref", "candidates": [{bits, group, rank, bpw,
    cost, error, fisher}]}``. ``error = tr(D H D^T)``; ``fisher = 1/2 sum_o f_o (D H D^T)_oo`` with ``f`` the
    output Fisher diagonal (:func:`.llm_eval.output_fisher`; None when not given): the estimated loss increase per
    token. ``ref = tr(W H W^T)`` (the layer's output energy) lets the allocator weigh layers by relative error;
    ``cost`` is the stored bits. A rank above ``min(out, in)`` has no candidate for this layer."""
    stats = LayerStats(stats.xtx, stats.n_tokens, name)
    lc = LayerCandidates(W, stats, method, options, seed)
    n_out, n_in = W.shape
    n = n_out * n_in
    rows = []
    for group in groups:
        for b in bits:
            for r in ranks:
                if r > min(n_out, n_in):
                    continue
                w_hat, bpw = lc.weight_hat(int(b), group, int(r))
                row = {"bits": int(b), "group": group, "rank": int(r), "bpw": bpw, "cost": _stored_bits(bpw, n),
                       "error": lc.error(w_hat), "fisher": None}
                if fisher is not None:
                    D = lc.W64 - w_hat.to(torch.float64)
                    row["fisher"] = 0.5 * float(((D @ lc.H) * D).sum(1) @ fisher.to(torch.float64))
                rows.append(row)
    ref = lowrank.output_error(lc.W64, torch.zeros_like(lc.W), lc.H)
    return {"name": name, "shape": [n_out, n_in], "weights": n, "ref": ref, "candidates": rows}


def proxy_job(layers: list[tuple], method: str, bits: list[int], groups: list[int | None], ranks: list[int],
              options: dict, seed: int, threads: int = 1) -> list[dict]:
    """One executor job: the proxy tables of a few layers (one decoder block's linears, which share their
    statistics), each given as (name, W, LayerStats[, output Fisher diagonal]). Top-level and fed plain tensors, so
    it pickles to a worker process or a Ray task; it runs with ``threads`` torch threads (the executor's
    ``num_cpus``) and restores the caller's setting."""
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, int(threads)))
    try:
        with torch.no_grad():
            return [layer_table(lay[0], lay[1], lay[2], method, bits, groups, ranks, options, seed,
                                lay[3] if len(lay) > 3 else None) for lay in layers]
    finally:
        torch.set_num_threads(before)


def check_against_method(W: torch.Tensor, stats: LayerStats, cfg: CompressConfig) -> tuple[torch.Tensor, float]:
    """``W_hat`` and bpw straight from the registered method (rank 0: its base quantizer): what
    :class:`LayerCandidates` must reproduce (the tests compare the two)."""
    from ..compress.api import METHODS

    if cfg.rank == 0:
        q = lowrank.base_quantize(W.to(torch.float64), stats, replace(cfg, rank=0), cfg.method)
        return q.weight_hat.to(torch.float32), q.bpw
    out = METHODS[cfg.method](W.to(torch.float32).clone(), stats, cfg)
    return out.weight_hat, out.bpw
