"""Text generation from a model with packed layers: a plain token loop with a KV cache, streaming as it goes.

Greedy (argmax) when ``temperature`` is 0, so the same checkpoint and prompt give the same text on every run;
otherwise softmax sampling at ``temperature`` from a ``torch.Generator`` seeded with ``seed``. Text is streamed
through ``on_text`` piece by piece: the tokens generated so far are decoded as a whole and only the new suffix is
emitted, so a character split over several byte-level tokens appears once it is complete (the approach of
``transformers.TextStreamer``, without its line buffering).
"""
from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from bitforge.toolchain.errors import BitforgeError


@dataclass(frozen=True)
class Generation:
    text: str
    tokens: list[int]
    prompt_tokens: int
    seconds: float     # the generation loop, prompt prefill included

    @property
    def tokens_per_second(self) -> float:
        return len(self.tokens) / self.seconds if self.seconds > 0 else 0.0


class _Streamer:
    def __init__(self, tokenizer, on_text: Callable[[str], None] | None):
        self.tokenizer, self.on_text, self.ids, self.shown = tokenizer, on_text, [], ""

    def put(self, token: int) -> None:
        self.ids.append(token)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):   # an incomplete multi-byte character: wait for the rest
            return
        if self.on_text and len(text) > len(self.shown):
            self.on_text(text[len(self.shown):])
        self.shown = text

    def finish(self) -> str:
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if self.on_text and len(text) > len(self.shown):
            self.on_text(text[len(self.shown):])
        return text


@torch.no_grad()
def generate(model: nn.Module, tokenizer, prompt: str, max_new_tokens: int = 32, temperature: float = 0.0,
             seed: int = 0, on_text: Callable[[str], None] | None = None) -> Generation:
    """Generate up to ``max_new_tokens`` after ``prompt`` (stopping early at the tokenizer's end-of-sequence)."""
    if max_new_tokens < 1:
        raise BitforgeError(f"max_new_tokens {max_new_tokens}: expected at least 1")
    if temperature < 0:
        raise BitforgeError(f"temperature {temperature}: expected 0 (greedy) or a positive number")
    device = next(model.parameters()).device
    ids = tokenizer(prompt, return_tensors="pt").input_ids.to(device)
    if ids.shape[1] == 0:
        raise BitforgeError("the prompt encodes to no tokens; give some text with --prompt")
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if limit and ids.shape[1] + max_new_tokens > limit:
        raise BitforgeError(f"prompt ({ids.shape[1]} tokens) + max_new_tokens ({max_new_tokens}) exceeds the "
                            f"model's context of {limit} tokens; shorten the prompt or lower --max-new-tokens")
    gen = torch.Generator(device="cpu").manual_seed(seed)
    eos = tokenizer.eos_token_id
    stream = _Streamer(tokenizer, on_text)
    t0 = time.perf_counter()
    # transformers 5 renamed the KV-cache argument and output from past_key_values to cache.
    cache_arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    past, step_ids = None, ids
    for _ in range(max_new_tokens):
        out = model(input_ids=step_ids, use_cache=True, **{cache_arg: past})
        past = out.get("cache", None)
        if past is None:
            past = out.past_key_values
        logits = out.logits[0, -1].float().cpu()
        if temperature == 0:
            token = int(torch.argmax(logits))
        else:
            token = int(torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=gen))
        if eos is not None and token == eos:
            break
        stream.put(token)
        step_ids = torch.tensor([[token]], device=device)
    seconds = time.perf_counter() - t0
    return Generation(stream.finish(), list(stream.ids), int(ids.shape[1]), seconds)
