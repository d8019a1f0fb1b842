"""Perplexity over fixed, non-overlapping ``ctx``-token chunks (no sliding window, no carried context).

Each chunk of ``ctx`` tokens is one independent sequence: the model predicts tokens 2..ctx from their prefixes,
so ``n * (ctx - 1)`` predictions in all, and ``ppl = exp(total negative log-likelihood / predictions)``. This is
the protocol of the issue's reference numbers (ctx 512, 8 chunks).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Perplexity:
    ppl: float
    nll: float
    predictions: int
    chunks: int
    ctx: int
    seconds: float

    def to_json(self) -> dict:
        return {"ppl": self.ppl, "nll_mean": self.nll / max(self.predictions, 1), "predictions": self.predictions,
                "chunks": self.chunks, "ctx": self.ctx, "seconds": round(self.seconds, 2)}


@torch.no_grad()
def perplexity(model: nn.Module, chunks: torch.Tensor, batch_size: int = 2, progress=None) -> Perplexity:
    """Perplexity of ``model`` on ``chunks`` (``[n, ctx]`` token ids). Logits are reduced in float32 per batch."""
    t0 = time.perf_counter()
    device = next(model.parameters()).device
    nll, count = 0.0, 0
    for i in range(0, chunks.shape[0], batch_size):
        x = chunks[i:i + batch_size].to(device)
        logits = model(input_ids=x, use_cache=False).logits
        targets = x[:, 1:]
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), targets.reshape(-1),
                               reduction="sum")
        nll += float(loss)
        count += targets.numel()
        if progress:
            progress(min(i + batch_size, chunks.shape[0]), chunks.shape[0])
    return Perplexity(math.exp(nll / count), nll, count, int(chunks.shape[0]), int(chunks.shape[1]),
                      time.perf_counter() - t0)
