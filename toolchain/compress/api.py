"""The contract between compression methods, the layer-by-layer driver and the checkpoint writer.

A method sees one linear layer at a time: its weight ``W`` (``[out, in]``, float32, as ``nn.Linear`` stores it)
and the statistics of that layer's calibration inputs. It returns the weight the model will compute with
(``weight_hat``, dequantized, for evaluation), the tensors a checkpoint stores (packed codes, scales, zero-points,
factors) and a manifest entry whose ``bpw`` counts every stored bit per weight.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from ..errors import BitforgeError


@dataclass(frozen=True)
class LayerStats:
    """Calibration statistics of one linear layer's input ``x`` (``in`` features).

    ``xtx`` is the float64 sum of ``x x^T`` over ``n_tokens`` calibration tokens; the second-moment matrix
    (GPTQ's and NeUQI's Hessian up to a factor 2) is ``xtx / n_tokens``. For methods that declare
    ``fn.statistics = "diag"`` (they read only ``diag``) ``xtx`` is 1-D, the sums of ``x_i^2``: accumulating the
    full matrix costs more than such a method's search (``x x^T`` of ``down_proj``'s 1536-wide input over 8k
    tokens is about 39 GFLOP in float64).
    """

    xtx: torch.Tensor
    n_tokens: int
    name: str = ""

    @property
    def diag_only(self) -> bool:
        return self.xtx.dim() == 1

    @property
    def hessian(self) -> torch.Tensor:
        """E[x x^T] as float64: the proxy Hessian of the layer-output loss."""
        if self.diag_only:
            raise RuntimeError(f"layer {self.name}: the method reads the full Hessian but declared "
                               "statistics = 'diag', so only its diagonal was collected")
        return self.xtx / max(self.n_tokens, 1)

    @property
    def diag(self) -> torch.Tensor:
        """diag(E[x x^T]): NeUQI's per-input importance h_i."""
        d = self.xtx if self.diag_only else torch.diagonal(self.xtx)
        return d / max(self.n_tokens, 1)

    @staticmethod
    def identity(n_in: int, name: str = "") -> "LayerStats":
        """Statistics of white inputs: every method then minimises the plain weight error."""
        return LayerStats(torch.eye(n_in, dtype=torch.float64), 1, name)


@dataclass(frozen=True)
class CompressConfig:
    """What to do to each layer. ``group=None`` means per output channel; ``rank`` is for low-rank methods;
    ``bpw`` is the bit budget of budget-driven methods (LittleBit-2)."""

    method: str
    bits: int = 4
    group: int | None = 64
    rank: int = 0
    bpw: float | None = None
    seed: int = 0
    options: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 1 <= self.bits <= 16:
            raise BitforgeError(f"--bits {self.bits}: expected 1..16")
        if self.group is not None and self.group <= 0:
            raise BitforgeError(f"--group {self.group}: expected a positive group size (or none for per-channel)")
        if self.rank < 0:
            raise BitforgeError(f"--rank {self.rank}: expected >= 0")


@dataclass
class CompressedLayer:
    """One compressed linear layer.

    ``weight_hat``: the float32 ``[out, in]`` weight evaluation computes with (what the stored tensors decode to).
    ``tensors``: name -> tensor as stored in the checkpoint (safetensors; names relative to the layer).
    ``meta``: the manifest entry: at least ``method``, ``bits``, ``group``, ``zero_point``, ``rank``, ``packing``,
    ``bpw`` (every stored scale, zero-point and factor counted, divided by ``out * in``).
    """

    weight_hat: torch.Tensor
    tensors: dict[str, torch.Tensor]
    meta: dict

    @property
    def bpw(self) -> float:
        return float(self.meta["bpw"])


def bits_per_weight(parts: dict[str, tuple[int, int]], n_weights: int) -> float:
    """Effective bits per weight: ``parts`` maps a stored tensor's name to (number of elements, bits each)."""
    return sum(numel * bits for numel, bits in parts.values()) / n_weights


Method = Callable[[torch.Tensor, LayerStats, CompressConfig], CompressedLayer]
METHODS: dict[str, Method] = {}


def register(name: str) -> Callable[[Method], Method]:
    """Decorator: make a method available to ``bitforge quantize --method NAME``."""
    def wrap(fn: Method) -> Method:
        if name in METHODS:
            raise RuntimeError(f"compression method {name!r} registered twice")
        METHODS[name] = fn
        return fn
    return wrap


def check_group(W: torch.Tensor, group: int | None, layer: str = "") -> None:
    """A group must divide the input dimension (SmolLM2's 576 takes 32 or 64, not 128)."""
    if group is not None and W.shape[1] % group:
        where = f"layer {layer}: " if layer else ""
        divisors = [g for g in (16, 32, 64, 128, 256) if W.shape[1] % g == 0]
        raise BitforgeError(f"{where}--group {group} does not divide the input dimension {W.shape[1]}; "
                            f"use one of {divisors or 'per-channel (no group)'}")


def check_options(options: dict, method: str, known=()) -> None:
    """Refuse ``--option`` keys the method does not read: a misspelt setting must not be ignored silently."""
    known = list(known)
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise BitforgeError(f"{method}: unknown --option {', '.join(unknown)}; "
                            + (f"known: {', '.join(known)}" if known else "it takes none"))
