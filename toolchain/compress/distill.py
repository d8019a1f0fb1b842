"""Short knowledge distillation after LittleBit-2's post-training fit (the papers' QAT step, optional).

Post-training LittleBit-2 leaves 45-70 % relative weight error per layer at 1 bit per weight and below, and the
errors of 210 layers compound: the model's perplexity is far above its vocabulary size (docs/compress.md). The
papers recover with quantization-aware training against the float model. This module is that step, scaled to a
CPU: the student is the compressed model, the teacher the model as loaded, the loss the KL divergence of the
teacher's next-token distribution to the student's over every position of the calibration chunks (the text the
evaluation never sees), Adam on the three scale vectors of every path (``u1``, ``latent``, ``v2``), parametrised
as ``s0 exp(theta)`` so that a step is relative and a scale never changes sign (the stored format keeps them as
float16 magnitudes).

The signs stay those of the post-training fit. Training them too (latent real factors at ``+-1`` behind a
straight-through ``sign``, as LittleBit's QAT does) was tried: in 30 steps at the default step no sign can cross
zero, so it only adds 48M Adam parameters (SmolLM2 at 0.55 bpw, a scratch check: the same KL and perplexity,
2,648 vs 2,650); making
it pay needs a longer run with a smaller latent start than a CPU session affords.

Nothing else changes: the ranks, the packed layout and so the bits per weight stay those of the post-training fit.
At the end every layer is written back through the checkpoint format (signs packed, scales rounded to float16)
and the model computes with exactly what the checkpoint decodes.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize

from ...runtime.formats.binary import BinaryLowRankPath
from ..errors import BitforgeError

METHODS = ("littlebit2",)


@dataclass(frozen=True)
class DistillConfig:
    steps: int = 0
    lr: float = 1e-2
    batch: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        if self.steps < 0 or self.batch < 1 or not self.lr > 0:
            raise BitforgeError(f"distillation: steps >= 0, batch >= 1 and lr > 0 expected, got steps {self.steps}, "
                                f"batch {self.batch}, lr {self.lr}")


@dataclass
class DistillReport:
    steps: int
    kl: list[float] = field(default_factory=list)  # mean KL per token (nats) at each step, before its update
    seconds: float = 0.0
    layers: int = 0
    parameters: int = 0

    def to_json(self) -> dict:
        return {"steps": self.steps, "kl_first": self.kl[0] if self.kl else None,
                "kl_last": self.kl[-1] if self.kl else None, "seconds": round(self.seconds, 2),
                "layers": self.layers, "parameters": self.parameters}


class TrainablePaths(nn.Module):
    """``sum_p diag(u1) U diag(latent) V^T diag(v2)`` with trainable log-scales and fixed signs; used as a
    parametrisation of the layer's weight."""

    def __init__(self, paths: list[BinaryLowRankPath]):
        super().__init__()
        self.n = len(paths)
        for k, p in enumerate(paths):
            U, V = p.signs()
            self.register_buffer(f"U{k}", U)
            self.register_buffer(f"V{k}", V)
            for name in ("u1", "latent", "v2"):
                base = getattr(p, name).float()
                self.register_buffer(f"{name}0_{k}", base)
                self.register_parameter(f"{name}_{k}", nn.Parameter(torch.zeros_like(base)))

    def factors(self, k: int) -> tuple[torch.Tensor, ...]:
        u1, latent, v2 = (getattr(self, f"{n}0_{k}") * torch.exp(getattr(self, f"{n}_{k}"))
                          for n in ("u1", "latent", "v2"))
        return u1, getattr(self, f"U{k}"), latent, getattr(self, f"V{k}"), v2

    def forward(self, _weight: torch.Tensor) -> torch.Tensor:
        total = 0
        for k in range(self.n):
            u1, U, latent, V, v2 = self.factors(k)
            total = total + (U * (u1[:, None] * latent)) @ (V * v2[:, None]).T
        return total

    @torch.no_grad()
    def stored(self) -> list[BinaryLowRankPath]:
        out = []
        for k in range(self.n):
            u1, U, latent, V, v2 = self.factors(k)
            out.append(BinaryLowRankPath.from_factors(u1, U, latent, V, v2))
        return out


def _kl_per_token(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    s = F.log_softmax(student_logits.float(), -1)
    t = F.log_softmax(teacher_logits.float(), -1)
    return F.kl_div(s.flatten(0, 1), t.flatten(0, 1), log_target=True, reduction="batchmean")


def distill(model: nn.Module, teacher: nn.Module, quantized, chunks: torch.Tensor, cfg: DistillConfig,
            progress=None) -> DistillReport:
    """Train the compressed layers of ``quantized`` (a :class:`.driver.QuantizedModel` whose records belong to
    ``model``) towards ``teacher`` on ``chunks`` (``[n, ctx]`` token ids); rewrites the records and the model's
    weights in place. ``progress(step, steps, message)`` after every step."""
    from .driver import LayerRecord
    from .littlebit import decode_paths
    from .model_io import compressible_linears

    method = quantized.config.method
    if method not in METHODS:
        raise BitforgeError(f"--distill-steps: distillation trains LittleBit-2's scale vectors; method {method} has "
                            f"no trainable form here (supported: {', '.join(METHODS)})")
    report = DistillReport(cfg.steps)
    if cfg.steps == 0:
        return report
    linears = compressible_linears(model)
    mods: dict[str, TrainablePaths] = {}
    for name, rec in quantized.layers.items():
        paths = [BinaryLowRankPath.from_tensors(rec.tensors, p) for p in rec.meta["paths"]]
        mods[name] = TrainablePaths(paths)
        parametrize.register_parametrization(linears[name], "weight", mods[name], unsafe=True)
    params = [p for m in mods.values() for p in m.parameters()]
    report.layers, report.parameters = len(mods), sum(p.numel() for p in params)
    opt = torch.optim.Adam(params, lr=cfg.lr)
    gen = torch.Generator().manual_seed(cfg.seed)
    t0 = time.perf_counter()
    teacher.eval()
    try:
        with torch.enable_grad():
            for step in range(cfg.steps):
                ids = chunks[torch.randint(0, chunks.shape[0], (cfg.batch,), generator=gen)]
                with torch.no_grad():
                    target = teacher(input_ids=ids, use_cache=False).logits
                loss = _kl_per_token(model(input_ids=ids, use_cache=False).logits, target)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                report.kl.append(float(loss.detach()))
                if progress:
                    progress(step + 1, cfg.steps, f"KL {report.kl[-1]:.3f} nats/token")
    finally:
        for name, m in mods.items():
            stored = m.stored()
            parametrize.remove_parametrizations(linears[name], "weight", leave_parametrized=False)
            with torch.no_grad():
                linears[name].weight.copy_(decode_paths(stored))
            rec = quantized.layers[name]
            tensors = dict(rec.tensors)
            for pname, path in zip(rec.meta["paths"], stored):
                tensors.update(path.tensors(pname))
            quantized.layers[name] = LayerRecord(tensors, {**rec.meta, "distilled": True}, rec.shape, rec.seconds)
    report.seconds = time.perf_counter() - t0
    return report
