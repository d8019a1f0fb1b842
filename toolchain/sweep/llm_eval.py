"""The LLM search's expensive fidelity: quantize the model with a per-layer (bits, group, rank) assignment through
the compress driver and measure perplexity.

One :class:`Session` per search holds the float model, its text split and a float-statistics cache, so the
calibration forwards run once and every evaluation only re-quantizes the layers (the compress benchmark's
protocol with ``statistics="float"``; docs/compress.md measured QERA W3 g64 r16 at 23.83 with float statistics
against 23.80 sequential). The proxies are computed from the same statistics, so an allocation's ``W_hat`` per
layer is exactly the one its proxy scored.

Per-layer settings go through the existing driver unchanged: :class:`PerLayer` is a compression method (the
registry's protocol) that looks each layer up by name and calls the registered Q + LR method with that layer's
bits, group and rank (rank 0: its base quantizer alone). It is registered under a unique name only for the
duration of one :func:`quantize_model` call.

Three disjoint token ranges: calibration (the compress split's), evaluation (its first ``eval_chunks``) and
*selection*, the evaluation part's next ``select_chunks`` windows: survivors are ranked on selection perplexity, so
the allocation a search picks is not chosen on the numbers it is then reported with.
"""
from __future__ import annotations

import hashlib
import itertools
import time
from dataclasses import dataclass, replace

import torch

from ..compress import api
from ..compress.api import CompressConfig, CompressedLayer
from ..compress.calibration import TextConfig, load_text, split_tokens, tokenize
from ..compress.driver import StatsCache, quantize_model, restore_weights, snapshot_weights
from ..compress.model_io import compressible_linears, load_model
from ..compress.perplexity import perplexity
from .model import SweepError

_counter = itertools.count()


@dataclass
class Session:
    model: torch.nn.Module
    calib: torch.Tensor
    eval: torch.Tensor
    select: torch.Tensor
    text: TextConfig
    snapshot: dict
    cache: StatsCache
    batch_size: int = 4
    stats: dict | None = None     # full layer name -> LayerStats (float statistics), once collected
    load_seconds: float = 0.0
    stats_seconds: float = 0.0

    def weights_digest(self) -> str:
        """sha256 of every compressible linear's float weights: the proxy cache's key for "the same model"."""
        h = hashlib.sha256()
        for name, w in sorted(self.snapshot.items()):
            h.update(name.encode())
            h.update(w.to(torch.float32).contiguous().numpy().tobytes())
        return h.hexdigest()


def open_session(model: str, text: TextConfig, select_chunks: int, batch_size: int = 4, loader=None) -> Session:
    """Load MODEL (``loader(model) -> (nn.Module, tokenizer)`` replaces :func:`load_model`, for tests) and split
    the text into calibration, evaluation and selection chunks."""
    t0 = time.perf_counter()
    if loader is None:
        loaded = load_model(model)
        net, tok = loaded.model, loaded.tokenizer
    else:
        net, tok = loader(model)
    ids = tokenize(tok, load_text(text.text))
    split = split_tokens(ids, text)
    start, stop = text.eval_chunks * text.ctx, (text.eval_chunks + select_chunks) * text.ctx
    if select_chunks < 1 or stop > split.eval_end:
        raise SweepError(f"llm sweep: select_chunks {select_chunks}: expected >= 1, and the evaluation part of the "
                         f"text ({split.eval_end:,} tokens) must hold eval_chunks + select_chunks = "
                         f"{text.eval_chunks + select_chunks} windows of {text.ctx}; use fewer chunks or a longer "
                         f"text")
    select = ids[start:stop].reshape(select_chunks, text.ctx)
    return Session(net, split.calib, split.eval, select, text, snapshot_weights(net), StatsCache(), batch_size,
                   load_seconds=time.perf_counter() - t0)


class PerLayer:
    """A compression method that gives each layer its own (bits, group, rank) of one Q + LR method."""

    def __init__(self, method: str, assignment: dict[str, tuple[int, int | None, int]], options: dict, seed: int):
        self.method, self.assignment, self.options, self.seed = method, assignment, dict(options), int(seed)

    def __call__(self, W: torch.Tensor, stats, cfg: CompressConfig) -> CompressedLayer:
        from ..compress import lowrank

        if stats.name not in self.assignment:
            raise SweepError(f"llm allocation has no setting for layer {stats.name}; the proxy table and the model "
                             f"disagree (delete the cached proxy table under OUT/llm and rerun)")
        bits, group, rank = self.assignment[stats.name]
        lcfg = CompressConfig(self.method, bits=bits, group=group, rank=rank, seed=self.seed, options=self.options)
        if rank == 0:
            return lowrank.base_quantize(W, stats, replace(lcfg, rank=0), self.method)
        return api.METHODS[self.method](W, stats, lcfg)


class _Identity:
    """Leaves every weight as it is: running the driver with it only fills the float statistics cache."""

    def __call__(self, W, stats, cfg):
        return CompressedLayer(W, {}, {"method": "identity", "bpw": 32.0, "packing": "none"})


def _run_driver(session: Session, fn, group) -> object:
    name = f"llm-search-{next(_counter)}"
    api.METHODS[name] = fn
    try:
        return quantize_model(session.model, session.calib, CompressConfig(name, group=group), statistics="float",
                              batch_size=session.batch_size, cache=session.cache)
    finally:
        api.METHODS.pop(name, None)


def collect_stats(session: Session) -> dict:
    """Float statistics of every compressible linear (``x x^T`` over the calibration chunks), computed once."""
    if session.stats is None:
        t0 = time.perf_counter()
        _run_driver(session, _Identity(), None)
        restore_weights(session.model, session.snapshot)
        names = list(compressible_linears(session.model))
        flat = {}
        for i, block in sorted(session.cache.blocks.items()):
            for short, st in block.items():
                flat[f"{_prefix(names)}.{i}.{short}"] = st
        missing = [n for n in names if n not in flat]
        if missing:
            raise RuntimeError(f"float statistics missing for {missing[:3]}")
        session.stats = {n: flat[n] for n in names}
        session.stats_seconds = time.perf_counter() - t0
    return session.stats


def _prefix(names: list[str]) -> str:
    # "model.layers.3.self_attn.q_proj" -> "model.layers"
    first = names[0].split(".")
    for j, part in enumerate(first):
        if part.isdigit():
            return ".".join(first[:j])
    raise RuntimeError(f"no block index in layer name {names[0]}")


def evaluate(session: Session, method: str, assignment: dict[str, tuple[int, int | None, int]], options: dict,
             seed: int, select: bool = True) -> dict:
    """Quantize with ``assignment`` and measure: ``{"ppl", "select_ppl" (None unless ``select``), "bpw",
    "stored_bits", "weights", "quantize_seconds", "eval_seconds"}``. The model's weights are restored after."""
    collect_stats(session)
    t0 = time.perf_counter()
    try:
        result = _run_driver(session, PerLayer(method, assignment, options, seed), None)
        t1 = time.perf_counter()
        ppl = perplexity(session.model, session.eval).ppl
        sel = perplexity(session.model, session.select).ppl if select else None
    finally:
        restore_weights(session.model, session.snapshot)
    bits = sum(int(round(float(r.meta["bpw"]) * r.shape[0] * r.shape[1])) for r in result.layers.values())
    return {"ppl": ppl, "select_ppl": sel, "bpw": bits / result.n_weights, "stored_bits": bits,
            "weights": result.n_weights, "quantize_seconds": round(t1 - t0, 2),
            "eval_seconds": round(time.perf_counter() - t1, 2)}


def output_fisher(session: Session, batch_size: int = 2) -> dict[str, torch.Tensor]:
    """``E[g_o^2]`` per output channel of every compressible linear, ``g`` the gradient of the calibration
    chunks' next-token loss (summed over tokens) with respect to the layer's output: the diagonal empirical Fisher
    of the loss in the layer's output space.

    Why: a layer's output error ``tr(D H D^T)`` says how far its outputs move, not how much the loss cares; the
    second-order estimate of the loss increase is ``1/2 E[dy^T F dy]`` with ``F`` the Fisher of the output.
    Diagonal ``F`` and ``dy`` independent of ``g`` give ``1/2 sum_o E[g_o^2] (D H D^T)_oo`` per token, a proxy that
    adds up across layers in the loss's own units (the fisher proxy of :func:`.llm_proxy.layer_table`). One
    forward and backward over the calibration chunks; no weight gradient is formed (the graph starts at the
    embedding's output)."""
    import torch.nn.functional as F

    model = session.model
    linears = compressible_linears(model)
    acc = {n: torch.zeros(lin.out_features, dtype=torch.float64) for n, lin in linears.items()}
    tokens = [0]
    handles = []

    def watch(name):
        def grad(g):
            acc[name].add_(g.detach().reshape(-1, g.shape[-1]).double().square().sum(0))

        def fwd(_m, _inp, out):
            if out.requires_grad:
                out.register_hook(grad)
        return fwd

    for name, lin in linears.items():
        handles.append(lin.register_forward_hook(watch(name)))
    emb = model.get_input_embeddings()
    handles.append(emb.register_forward_hook(lambda _m, _i, out: out.detach().requires_grad_(True)))
    try:
        with torch.enable_grad():
            for i in range(0, session.calib.shape[0], batch_size):
                x = session.calib[i:i + batch_size]
                logits = model(input_ids=x, use_cache=False).logits
                loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), x[:, 1:].reshape(-1),
                                       reduction="sum")
                loss.backward()
                tokens[0] += x[:, 1:].numel()
    finally:
        for h in handles:
            h.remove()
    return {n: a / max(tokens[0], 1) for n, a in acc.items()}
