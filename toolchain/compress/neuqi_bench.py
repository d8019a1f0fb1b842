"""``bitforge bench neuqi``: NeUQI's scale search against RTN, layer by layer, on a real model's layers.

The compression benchmark measures perplexity, one number per setting after an hour of work; tuning NeUQI's search
needs the quantity the search minimises. This benchmark takes the linears of a few decoder blocks (default 0, 10,
20, 29 of SmolLM2: 28 layers), their ``diag(E[x x^T])`` from the float model on the calibration chunks (the
``statistics="float"`` protocol: the same statistics for every variant), and for each bit width and group size
quantizes every layer with RTN and with each NeUQI search configuration given, reporting

* the weighted loss ``sum_i h_i (Q(w_i) - w_i)^2`` summed over the layers (each layer's ``h`` normalised to mean 1,
  so that no single layer's activation scale dominates the sum), as a ratio to RTN's and to the first
  configuration's;
* the time inside the quantizer (the same call ``bitforge quantize`` makes per layer), summed, and its ratio to
  RTN's: the "NeUQI within 5x of RTN" comparison at the level of the method itself.

Configurations are ``NeuqiConfig`` overrides, ``;``-separated: ``default;exact_top=1;exhaustive=true``.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import torch

from ..errors import BitforgeError
from .neuqi import NeuqiConfig, quantize_neuqi, weighted_loss
from .uniform import quantize_uniform

# NeuqiConfig's field types (annotations are strings here) -> accepted JSON values, and how to say so.
_KINDS = {"int": (int, "an integer"), "float": ((int, float), "a number"), "bool": (bool, "true or false")}


@dataclass(frozen=True)
class Variant:
    """A named NeUQI search configuration (``rtn``: the min-max baseline)."""

    name: str
    config: NeuqiConfig | None


def parse_configs(text: str) -> list[Variant]:
    """``default;exact_top=1;coarse=8,refine=16``: one variant per ``;`` item, ``KEY=VALUE`` pairs joined by ``,``."""
    known = {f.name: f.type for f in fields(NeuqiConfig)}
    out = []
    for item in (s.strip() for s in text.split(";")):
        if not item:
            continue
        if item == "default":
            out.append(Variant("default", NeuqiConfig()))
            continue
        kw = {}
        for pair in item.split(","):
            key, sep, value = pair.partition("=")
            key = key.strip()
            if not sep or key not in known:
                raise BitforgeError(f"--neuqi-configs: {pair!r} in {item!r}: expected KEY=VALUE with KEY one of "
                                    f"{', '.join(known)} (e.g. 'default;exact_top=1')")
            text = value.strip().lower()
            try:
                parsed = json.loads(text)
            except json.JSONDecodeError:
                parsed = None
            kind, what = _KINDS[str(known[key])]
            if parsed is None or not isinstance(parsed, kind) or (kind is int and isinstance(parsed, bool)):
                raise BitforgeError(f"--neuqi-configs: {key}={value.strip()}: expected {what}")
            kw[key] = parsed
        out.append(Variant(item, replace(NeuqiConfig(), **kw)))
    if not out:
        raise BitforgeError("--neuqi-configs: give at least one configuration (e.g. 'default')")
    return out


def parse_settings(text: str) -> list[tuple[int, int | None]]:
    """``3:64,2:32`` -> [(3, 64), (2, 32)]; ``ch`` for per-channel."""
    out = []
    for item in (s.strip() for s in text.split(",") if s.strip()):
        bits, sep, group = item.partition(":")
        try:
            out.append((int(bits), None if group in ("ch", "none") else int(group)))
        except ValueError:
            raise BitforgeError(f"--neuqi-settings: {item!r}: expected BITS:GROUP such as 3:64 or 2:ch") from None
        if not sep:
            raise BitforgeError(f"--neuqi-settings: {item!r}: expected BITS:GROUP such as 3:64 or 2:ch")
    return out


@dataclass(frozen=True)
class Layer:
    name: str
    weight: torch.Tensor
    importance: torch.Tensor  # diag(E[x x^T]) normalised to mean 1


@torch.no_grad()
def collect_layers(model, calib: torch.Tensor, blocks: tuple[int, ...], batch_size: int = 4) -> list[Layer]:
    """The linears of ``blocks`` with their float-model input energies (one forward up to the last block)."""
    from .calibration import InputStats
    from .driver import run_block, capture_block_inputs
    from .model_io import block_linears, decoder_blocks

    prefix, all_blocks = decoder_blocks(model)
    bad = [b for b in blocks if not 0 <= b < len(all_blocks)]
    if bad:
        raise BitforgeError(f"--neuqi-blocks {list(bad)}: the model has blocks 0..{len(all_blocks) - 1}")
    batches = capture_block_inputs(model, calib, batch_size)
    layers = []
    for i in range(max(blocks) + 1):
        block = all_blocks[i]
        if i not in blocks:
            batches = run_block(block, batches)
            continue
        linears = block_linears(block)
        with InputStats(linears, block, diag_only=True) as hooks:
            batches = run_block(block, batches)
        for name, st in hooks.stats().items():
            h = st.diag.to(torch.float32)
            layers.append(Layer(f"{prefix}.{i}.{name}", linears[name].weight.detach().to(torch.float32).clone(),
                                h / h.mean().clamp_min(torch.finfo(torch.float32).tiny)))
    return layers


@dataclass
class Row:
    bits: int
    group: int | None
    variant: str
    loss: float
    seconds: float
    loss_vs_rtn: float = 0.0
    loss_vs_first: float = 0.0
    time_vs_rtn: float = 0.0
    config: dict | None = None


@dataclass
class Result:
    model: str
    blocks: list[int]
    n_layers: int
    calib: dict
    rows: list[Row] = field(default_factory=list)


def _timed(fn):
    t0 = time.perf_counter()
    q = fn()
    return q, time.perf_counter() - t0


def measure(layers: list[Layer], settings, variants: list[Variant], progress=None) -> list[Row]:
    """Per setting: RTN, then every variant, over all ``layers`` (sums of loss and quantizer time)."""
    rows = []
    for bits, group in settings:
        rtn = Row(bits, group, "rtn", 0.0, 0.0)
        found = [Row(bits, group, v.name, 0.0, 0.0, config=asdict(v.config)) for v in variants]
        for k, layer in enumerate(layers):
            W, h = layer.weight, layer.importance
            q, t = _timed(lambda: quantize_uniform(W, bits, group, layer=layer.name, method="rtn"))
            rtn.loss += float(weighted_loss(W, q.dequantize(), h, group).sum())
            rtn.seconds += t
            for v, row in zip(variants, found):
                q, t = _timed(lambda: quantize_neuqi(W, h, bits, group, layer.name, v.config))
                row.loss += float(weighted_loss(W, q.dequantize(), h, group).sum())
                row.seconds += t
            if progress:
                progress(k + 1, len(layers), f"W{bits} g{group or 'ch'}: {layer.name}")
        for row in (rtn, *found):
            row.loss_vs_rtn = row.loss / rtn.loss
            row.loss_vs_first = row.loss / found[0].loss
            row.time_vs_rtn = row.seconds / rtn.seconds
        rows += [rtn, *found]
    return rows


def run(model_spec: str, text_cfg, blocks, settings, variants, log=print, progress=None) -> Result:
    from .calibration import prepare_text
    from .model_io import load_model, resolve_model

    source = resolve_model(model_spec)
    lm = load_model(source, log=log)
    split = prepare_text(lm.tokenizer, text_cfg)
    log(f"loaded {source.spec} in {lm.seconds:.1f} s; {split.describe()}")
    t0 = time.perf_counter()
    layers = collect_layers(lm.model, split.calib, tuple(blocks))
    log(f"{len(layers)} layers of blocks {list(blocks)} with their input energies in {time.perf_counter() - t0:.1f} s")
    rows = measure(layers, settings, variants, progress)
    return Result(source.spec, list(blocks), len(layers), text_cfg.to_json(), rows)


def table(result: Result):
    from rich.table import Table

    t = Table(title=f"NeUQI search vs RTN on {result.n_layers} layers of {result.model} (blocks "
                    f"{', '.join(map(str, result.blocks))}); loss = sum h (Q(w) - w)^2, time inside the quantizer",
              title_justify="left")
    for c in ("setting", "variant", "loss / RTN", "loss / first", "seconds", "x RTN time"):
        t.add_column(c, justify="left" if c in ("setting", "variant") else "right")
    for r in result.rows:
        t.add_row(f"W{r.bits} g{r.group or 'ch'}", r.variant, f"{r.loss_vs_rtn:.4f}",
                  "-" if r.variant == "rtn" else f"{r.loss_vs_first:.4f}", f"{r.seconds:.2f}",
                  f"{r.time_vs_rtn:.1f}")
    return t


def write_json(result: Result, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"benchmark": "neuqi", **{k: v for k, v in asdict(result).items() if k != "rows"},
           "rows": [asdict(r) for r in result.rows]}
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)
