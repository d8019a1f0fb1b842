"""Calibration and evaluation text, and the per-layer input statistics the compression methods consume.

Text: by default CPython's own documentation topics (``pydoc_data.topics``: the ``topics`` dict's values in order,
joined by blank lines; about 465k characters, 113k SmolLM2 tokens), so everything runs offline. The whole text is
tokenised once and split *by tokens* into two disjoint parts:

* evaluation: the first ``eval_fraction`` (default 25%) of the tokens; perplexity chunks are consecutive,
  non-overlapping windows of ``ctx`` tokens from its start. With 8 x 512 this is the protocol of the issue's
  reference numbers (the dequantized Q4_1 SmolLM2 measures 14.70 on it);
* calibration: the remaining tokens; calibration chunks are ``ctx``-token windows spread evenly over this part
  (non-overlapping), so a few chunks still see many topics.

Statistics: :class:`InputStats` hooks the ``nn.Linear`` layers of a module and sums ``x x^T`` in float64 over all
calibration tokens (``LayerStats.xtx``). Linears fed the very same tensor (q/k/v, gate/up in a Llama block) share
one sum: it is computed once and the ``LayerStats`` objects point at the same matrix.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..errors import BitforgeError
from .api import LayerStats

DEFAULT_TEXT = "pydoc_data.topics"
EVAL_FRACTION = 0.25


@dataclass(frozen=True)
class TextConfig:
    """Which text, how it is split and how many ``ctx``-token chunks each part gives."""

    text: str = DEFAULT_TEXT
    ctx: int = 512
    eval_chunks: int = 8
    calib_chunks: int = 16
    eval_fraction: float = EVAL_FRACTION

    def __post_init__(self) -> None:
        if self.ctx < 2:
            raise BitforgeError(f"--ctx {self.ctx}: a perplexity window needs at least 2 tokens")
        if self.eval_chunks < 1 or self.calib_chunks < 1:
            raise BitforgeError(f"--eval-chunks {self.eval_chunks} / --calib-chunks {self.calib_chunks}: "
                                "expected at least 1 each")
        if not 0.0 < self.eval_fraction < 1.0:
            raise BitforgeError(f"eval fraction {self.eval_fraction}: expected strictly between 0 and 1")

    def to_json(self) -> dict:
        return {"text": self.text, "ctx": self.ctx, "eval_chunks": self.eval_chunks,
                "calib_chunks": self.calib_chunks, "eval_fraction": self.eval_fraction,
                "split": "evaluation = first eval_fraction of the tokens (chunks from its start); calibration = "
                         "the rest (chunks spread evenly)"}


def load_text(name: str = DEFAULT_TEXT) -> str:
    """The default text (``pydoc_data.topics``) or a UTF-8 text file."""
    if name == DEFAULT_TEXT:
        import pydoc_data.topics

        return "\n\n".join(pydoc_data.topics.topics.values())
    path = Path(name)
    if not path.is_file():
        raise BitforgeError(f"--text {name}: no such file; give a UTF-8 text file or leave the default "
                            f"({DEFAULT_TEXT}, CPython's documentation)")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise BitforgeError(f"--text {name}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def tokenize(tokenizer, text: str) -> torch.Tensor:
    """One 1-D ``int64`` tensor of token ids for the whole text (no special tokens added)."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return torch.tensor(ids, dtype=torch.long)


@dataclass(frozen=True)
class TextSplit:
    """The calibration and evaluation chunks, ``[n, ctx]`` each, from disjoint parts of one text."""

    calib: torch.Tensor
    eval: torch.Tensor
    n_tokens: int
    eval_end: int

    def describe(self) -> str:
        return (f"{self.n_tokens:,} tokens: evaluation tokens [0, {self.eval_end:,}) -> {self.eval.shape[0]} x "
                f"{self.eval.shape[1]}, calibration [{self.eval_end:,}, {self.n_tokens:,}) -> "
                f"{self.calib.shape[0]} x {self.calib.shape[1]}")


def split_tokens(ids: torch.Tensor, cfg: TextConfig) -> TextSplit:
    """Split a token stream as documented above; too short a text is a :class:`BitforgeError`."""
    n = int(ids.numel())
    eval_end = int(n * cfg.eval_fraction)
    need_eval, need_calib = cfg.eval_chunks * cfg.ctx, cfg.calib_chunks * cfg.ctx
    if need_eval > eval_end or need_calib > n - eval_end:
        raise BitforgeError(
            f"text {cfg.text!r} is too short: {n:,} tokens give {eval_end:,} for evaluation and {n - eval_end:,} "
            f"for calibration, but {cfg.eval_chunks} x {cfg.ctx} = {need_eval:,} and {cfg.calib_chunks} x "
            f"{cfg.ctx} = {need_calib:,} are needed; use a longer --text, fewer --eval-chunks/--calib-chunks or "
            f"a smaller --ctx")
    evaluation = ids[:need_eval].reshape(cfg.eval_chunks, cfg.ctx)
    span = n - eval_end
    # Evenly spaced starts; consecutive windows never overlap because span >= calib_chunks * ctx.
    starts = [eval_end + (i * (span - cfg.ctx)) // max(cfg.calib_chunks - 1, 1) for i in range(cfg.calib_chunks)]
    calib = torch.stack([ids[s:s + cfg.ctx] for s in starts])
    return TextSplit(calib, evaluation, n, eval_end)


def prepare_text(tokenizer, cfg: TextConfig) -> TextSplit:
    return split_tokens(tokenize(tokenizer, load_text(cfg.text)), cfg)


class StatsComplete(Exception):
    """Raised by :class:`InputStats` (``stop_when_complete``) when a forward has fed every watched linear."""


class InputStats:
    """Forward hooks that sum ``x x^T`` (float64) of every watched linear's input.

    Inside one forward of a ``scope`` module (each decoder block), a tensor already seen by another watched
    linear is not summed again: the later layer is recorded as an alias and shares the earlier sum.
    Use as a context manager around the forward passes; :meth:`stats` then returns one ``LayerStats`` per layer.
    ``diag_only``: sum ``x_i^2`` only (1-D ``LayerStats.xtx``) for methods that read nothing else.
    ``stop_when_complete``: once every watched linear has seen its input in a scope's forward, raise
    :class:`StatsComplete` from the last one's hook: a caller that only wants the statistics skips the rest of
    the forward (in a Llama block, ``down_proj``'s matmul: a quarter of the block's linear work).
    ``on_first_input(name, stats)``: called once per layer, in its pre-hook right after its first input was
    recorded and before its matmul: true-sequential statistics compress the layer there (the whole calibration set
    is then one batch, so the statistics are complete).
    """

    def __init__(self, linears: dict[str, nn.Linear], scopes: nn.Module | list[nn.Module], diag_only: bool = False,
                 stop_when_complete: bool = False, on_first_input=None):
        self.linears = linears
        self.diag_only = diag_only
        self.stop_when_complete = stop_when_complete
        self.on_first_input = on_first_input
        self.reported: set[str] = set()
        self._fired: set[str] = set()
        self.scopes = scopes if isinstance(scopes, (list, tuple)) else [scopes]
        self.xtx: dict[str, torch.Tensor] = {}
        self.tokens: dict[str, int] = {}
        self.alias: dict[str, str] = {}
        self._seen: dict[int, tuple[torch.Tensor, str]] = {}
        self._handles: list = []

    def __enter__(self) -> InputStats:
        for scope in self.scopes:
            self._handles.append(scope.register_forward_pre_hook(lambda *_: self._new_forward()))
        for name, lin in self.linears.items():
            self._handles.append(lin.register_forward_pre_hook(self._hook(name)))
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._new_forward()

    def _new_forward(self) -> None:
        self._seen.clear()
        self._fired.clear()

    def _hook(self, name: str):
        def hook(_module, inputs):
            self._record(name, inputs[0])
            self._fired.add(name)
            if self.on_first_input is not None and name not in self.reported:
                self.reported.add(name)
                self.on_first_input(name, self.layer_stats(name))
            if self.stop_when_complete and len(self._fired) == len(self.linears):
                raise StatsComplete

        return hook

    def _record(self, name: str, x: torch.Tensor) -> None:
        seen = self._seen.get(id(x))
        if seen is not None and seen[0] is x:
            self.alias.setdefault(name, seen[1])
            return
        self._seen[id(x)] = (x, name)  # the reference keeps id(x) from being reused within this forward
        flat = x.detach().reshape(-1, x.shape[-1])
        if self.diag_only:
            # float32 sums of squares (about 1e-7 relative) accumulated in float64: a float64 copy of the activations
            # costs about 3x as much (the command in docs/compress.md, "Driver").
            part = flat.float().square().sum(0).double()
            self.xtx[name] = self.xtx[name].add_(part) if name in self.xtx else part
        else:
            flat = flat.double()
            if name in self.xtx:
                self.xtx[name].addmm_(flat.T, flat)
            else:
                self.xtx[name] = flat.T @ flat
        self.tokens[name] = self.tokens.get(name, 0) + flat.shape[0]

    def layer_stats(self, name: str) -> LayerStats:
        """The statistics of one layer gathered so far (its hook must have fired)."""
        owner = self.alias.get(name, name)
        return LayerStats(self.xtx[owner], self.tokens[owner], name)

    def stats(self) -> dict[str, LayerStats]:
        """``LayerStats`` per watched layer; a layer that never ran is a bug in the caller (RuntimeError)."""
        for name in self.linears:
            if self.alias.get(name, name) not in self.xtx:
                raise RuntimeError(f"layer {name} saw no calibration input: it is not on the forward path")
        return {name: self.layer_stats(name) for name in self.linears}
