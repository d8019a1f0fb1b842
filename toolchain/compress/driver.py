"""Compress every linear layer of a decoder-only LM, block by block (the GPTQ protocol).

The calibration chunks are embedded once and the inputs of the first decoder block captured (a pre-hook that
stops the forward). Then, for each block in turn:

1. run the block on its calibration inputs with :class:`.calibration.InputStats` hooks: ``x x^T`` per linear
   (q/k/v and gate/up share one sum); with sequential statistics this pass stops as soon as the last linear
   (``down_proj``) has seen its input: its outputs are not used;
2. compress each of the block's linears with the method and write ``weight_hat`` into the model;
3. ``statistics="sequential"`` (default): run the block again, now compressed, and feed its outputs to the next
   block, so later layers are calibrated on the inputs they will really see; ``statistics="float"``: feed the
   float block's outputs from step 1 (statistics do not depend on the method then, and :class:`StatsCache`
   keeps them so a benchmark computes them once for all methods).

``statistics="true-sequential"`` (GPTQ's ``--true-sequential``, AutoGPTQ's default) goes one step further: each
block runs **once**, on all calibration chunks as one batch, and each linear is compressed in its forward pre-hook
from the input it receives there, which already comes from the block's compressed linears before it (q/k/v, then
o, then gate/up, then down); the forward then continues through the compressed linear, and its output feeds the next
block. One block forward instead of about 1.75 (the statistics pass stops before ``down_proj``), and every linear,
not only the first of each block, is calibrated on the inputs it will see. The price: the whole calibration set's
activations are held at once (SmolLM2 at 16 x 512 tokens: about 0.3 GB by the estimate of
:func:`check_true_sequential_memory`, which refuses sets estimated above 8 GiB before any forward).

Embeddings, norms and ``lm_head`` are not touched. A bad setting raised by the method (bit budget, bits) surfaces
in block 0, before the other blocks' work; a group that does not divide a layer is refused before any forward.
A method that ignores calibration may declare ``fn.uses_calibration = False``: the driver then runs no forward
at all and passes identity statistics. A method that reads only ``diag(E[x x^T])`` may declare
``fn.statistics = "diag"``: the hooks then sum ``x_i^2`` instead of the full ``x x^T`` (NeUQI, LittleBit-2).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from torch import nn

from ..errors import BitforgeError
from .api import CompressConfig, CompressedLayer, LayerStats, check_group
from .calibration import InputStats, StatsComplete
from .model_io import block_linears, compressible_linears, decoder_blocks

STATISTICS = ("sequential", "float", "true-sequential")
#: Activation memory above which true-sequential statistics are refused (the estimate is rough: a few tensors of
#: the widest layer per token).
TRUE_SEQUENTIAL_MAX_BYTES = 8 << 30


@dataclass(frozen=True)
class LayerRecord:
    """What the checkpoint keeps of a compressed layer (``weight_hat`` lives in the model)."""

    tensors: dict[str, torch.Tensor]
    meta: dict
    shape: tuple[int, int]
    seconds: float


@dataclass
class QuantizedModel:
    """The outcome of :func:`quantize_model`; the model itself now computes with every ``weight_hat``."""

    config: CompressConfig
    statistics: str
    layers: dict[str, LayerRecord] = field(default_factory=dict)
    method_seconds: float = 0.0
    wall_seconds: float = 0.0

    @property
    def n_weights(self) -> int:
        return sum(r.shape[0] * r.shape[1] for r in self.layers.values())

    @property
    def bpw(self) -> float:
        """Bits per weight over all compressed linears, weighted by their sizes."""
        return sum(float(r.meta["bpw"]) * r.shape[0] * r.shape[1] for r in self.layers.values()) / max(
            self.n_weights, 1)


class StatsCache:
    """Per-block float statistics, reusable by every method of one run (``statistics="float"`` only)."""

    def __init__(self) -> None:
        self.blocks: dict[int, dict[str, LayerStats]] = {}
        self.key: tuple | None = None


def get_method(name: str):
    from .methods import describe_missing, load_all

    methods = load_all()
    if name not in methods:
        note = describe_missing()
        raise BitforgeError(f"--method {name}: unknown; available: {', '.join(sorted(methods)) or 'none'}"
                            + (f" ({note})" if note else ""))
    return methods[name]


def check_model(model: nn.Module, cfg: CompressConfig) -> dict[str, nn.Linear]:
    """Cheap checks before any forward: known method, group dividing every compressible layer."""
    get_method(cfg.method)
    linears = compressible_linears(model)
    if not linears:
        raise BitforgeError(f"{type(model).__name__}: no linear layers inside the decoder blocks to compress")
    for name, lin in linears.items():
        check_group(lin.weight, cfg.group, name)
    return linears


class _Captured(Exception):
    pass


@torch.no_grad()
def capture_block_inputs(model: nn.Module, chunks: torch.Tensor, batch_size: int) -> list[tuple[torch.Tensor, dict]]:
    """The first block's (hidden states, keyword arguments) for each calibration batch: everything the model
    computes before its blocks (embedding, rotary tables, causal mask) is reused as is."""
    _, blocks = decoder_blocks(model)
    device = next(model.parameters()).device
    batches: list[tuple[torch.Tensor, dict]] = []

    def stop(_module, args, kwargs):
        hidden = args[0] if args else kwargs.pop("hidden_states")
        batches.append((hidden, {k: v for k, v in kwargs.items() if k != "hidden_states"}))
        raise _Captured

    handle = blocks[0].register_forward_pre_hook(stop, with_kwargs=True)
    try:
        for i in range(0, chunks.shape[0], batch_size):
            try:
                model(input_ids=chunks[i:i + batch_size].to(device), use_cache=False)
            except _Captured:
                pass
    finally:
        handle.remove()
    return batches


def _block_out(out):
    return out[0] if isinstance(out, (tuple, list)) else out


@torch.no_grad()
def run_block(block: nn.Module, batches: list[tuple[torch.Tensor, dict]]) -> list[tuple[torch.Tensor, dict]]:
    """``block``'s output on every batch, each with the keyword arguments it came with: the next block's inputs."""
    return [(_block_out(block(h, **kw)), kw) for h, kw in batches]


@torch.no_grad()
def _feed_block(block: nn.Module, batches: list[tuple[torch.Tensor, dict]]) -> None:
    """Run ``block`` on every batch until its :class:`InputStats` hooks (``stop_when_complete``) have seen all."""
    for h, kw in batches:
        try:
            block(h, **kw)
        except StatsComplete:
            pass


def check_true_sequential_memory(model: nn.Module, n_tokens: int) -> None:
    """Refuse a calibration set whose activations (held at once by true-sequential statistics) would not fit."""
    cfg = getattr(model, "config", None)
    width = max(int(getattr(cfg, "hidden_size", 0) or 0), int(getattr(cfg, "intermediate_size", 0) or 0))
    need = n_tokens * width * 4 * 6                     # float32; inputs, q/k/v or gate/up outputs, temporaries
    if need > TRUE_SEQUENTIAL_MAX_BYTES:
        raise BitforgeError(f"--statistics true-sequential holds all {n_tokens:,} calibration tokens' activations at "
                            f"once (about {need / 2**30:.1f} GiB for width {width:,}, above "
                            f"{TRUE_SEQUENTIAL_MAX_BYTES / 2**30:.0f} GiB); use --statistics sequential or fewer "
                            f"--calib-chunks")


def quantize_model(model: nn.Module, calib: torch.Tensor | None, cfg: CompressConfig, statistics: str = "sequential",
                   batch_size: int = 4, cache: StatsCache | None = None, progress=None) -> QuantizedModel:
    """Compress ``model`` in place with ``cfg.method`` (see the module docstring for the protocol).

    ``calib``: ``[n, ctx]`` calibration token ids (may be None only for methods with ``uses_calibration=False`` or
    when ``cache`` already holds every block). ``progress(done_blocks, n_blocks, message)`` is called per block.
    """
    if statistics not in STATISTICS:
        raise BitforgeError(f"--statistics {statistics}: expected one of {', '.join(STATISTICS)}")
    t_start = time.perf_counter()
    method = get_method(cfg.method)
    check_model(model, cfg)
    prefix, blocks = decoder_blocks(model)
    uses_calibration = getattr(method, "uses_calibration", True)
    diag_only = getattr(method, "statistics", "full") == "diag"
    use_cache = cache is not None and statistics == "float" and uses_calibration
    cache_hit = False
    if use_cache:
        key = None if calib is None else (id(model), tuple(calib.shape), int(calib.sum()), diag_only)
        same = cache.key == key if key is not None else (cache.key is None or cache.key[-1] == diag_only)
        cache_hit = len(cache.blocks) == len(blocks) and same
        if not cache_hit:
            cache.blocks.clear()
            cache.key = key
    need_forward = uses_calibration and not cache_hit
    if need_forward and calib is None:
        raise RuntimeError("quantize_model needs calibration chunks for this method")
    true_seq = need_forward and statistics == "true-sequential"
    if true_seq:
        check_true_sequential_memory(model, int(calib.numel()))
        batch_size = calib.shape[0]                     # one batch: each linear sees every token in one call
    batches = capture_block_inputs(model, calib, batch_size) if need_forward else []

    result = QuantizedModel(cfg, statistics if uses_calibration else "none")
    for i, block in enumerate(blocks):
        linears = block_linears(block)
        outputs = None

        def compress(name: str, st: LayerStats, i=i, linears=linears) -> None:
            full = f"{prefix}.{i}.{name}"
            record = compress_linear(linears[name], LayerStats(st.xtx, st.n_tokens, full), cfg, method, full)
            result.layers[full] = record
            result.method_seconds += record.seconds

        if true_seq:
            # each linear is compressed in its pre-hook, before its matmul; the block's output feeds the next block
            with InputStats(linears, block, diag_only=diag_only, on_first_input=compress) as hooks:
                batches = run_block(block, batches)
            missing = [n for n in linears if n not in hooks.reported]
            if missing:
                raise RuntimeError(f"block {i}: {', '.join(missing)} never ran: not on the forward path")
        else:
            if not uses_calibration:
                stats = {n: LayerStats.identity(lin.in_features, n) for n, lin in linears.items()}
            elif cache_hit:
                stats = cache.blocks[i]
            else:
                # sequential: this pass only gathers statistics (the next block's inputs come from the compressed
                # block), so it stops once the block's last linear has seen its input.
                with InputStats(linears, block, diag_only=diag_only,
                                stop_when_complete=statistics != "float") as hooks:
                    outputs = run_block(block, batches) if statistics == "float" else _feed_block(block, batches)
                stats = hooks.stats()
                if use_cache:
                    cache.blocks[i] = stats
            for name in linears:
                compress(name, stats[name])
        if need_forward and i + 1 < len(blocks) and not true_seq:
            # float: the next block sees the float block's outputs; sequential: those of the compressed block
            # (the last block's outputs feed nothing: no forward for them).
            batches = outputs if statistics == "float" else run_block(block, batches)
        del outputs
        if progress:
            progress(i + 1, len(blocks), f"block {i}: {len(linears)} linears compressed, method time "
                                          f"{result.method_seconds:.1f} s")
    result.wall_seconds = time.perf_counter() - t_start
    return result


def compress_linear(lin: nn.Linear, stats: LayerStats, cfg: CompressConfig, method, name: str) -> LayerRecord:
    """Run the method on one layer, check what it returned, and write ``weight_hat`` into the layer."""
    W = lin.weight.detach().to(torch.float32)
    # Private copies: a method that works in place must not change the weight it is compared against, nor the
    # statistics that sibling layers (q/k/v share one sum) and later methods (StatsCache) read.
    private = LayerStats(stats.xtx.clone(), stats.n_tokens, stats.name)
    t0 = time.perf_counter()
    out: CompressedLayer = method(W.clone(), private, cfg)
    seconds = time.perf_counter() - t0
    w_hat = out.weight_hat
    if tuple(w_hat.shape) != tuple(W.shape):
        raise RuntimeError(f"method {cfg.method} returned weight_hat of shape {tuple(w_hat.shape)} for layer {name} "
                           f"of shape {tuple(W.shape)}")
    if not torch.isfinite(w_hat).all():
        raise RuntimeError(f"method {cfg.method} returned a non-finite weight_hat for layer {name}")
    for key in ("method", "bpw", "packing"):
        if key not in out.meta:
            raise RuntimeError(f"method {cfg.method}: manifest entry of {name} lacks {key!r}")
    with torch.no_grad():
        lin.weight.copy_(w_hat.to(lin.weight.dtype))
    meta = dict(out.meta)
    meta.setdefault("shape", list(W.shape))
    tensors = {k: v.detach().contiguous().cpu() for k, v in out.tensors.items()}
    return LayerRecord(tensors, meta, tuple(W.shape), seconds)


def snapshot_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """A copy of every compressible linear's weight, so several methods can start from the same base."""
    return {n: lin.weight.detach().clone() for n, lin in compressible_linears(model).items()}


@torch.no_grad()
def restore_weights(model: nn.Module, snapshot: dict[str, torch.Tensor]) -> None:
    for n, lin in compressible_linears(model).items():
        lin.weight.copy_(snapshot[n])
