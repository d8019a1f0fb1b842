"""GPTQ rounding on the uniform grid: error feedback through the Cholesky factor of the inverse Hessian.

GPTQ (Frantar et al., 2022) quantizes the columns of ``W`` one at a time and spreads each column's rounding error
over the columns not yet quantized, so that the layer-output error ``tr((W - Q) H (W - Q)^T)`` with
``H = E[x x^T]`` is (greedily) minimised instead of the plain weight error. With ``U`` the upper Cholesky factor of
``H^-1`` the update after column ``i`` is ``W[:, i:] -= ((w_i - q_i) / U_ii) U_i,i:`` (OBS with the factor instead
of re-inverting). Updates are applied lazily: within a block of columns immediately, to the columns after the
block once per block (one matrix product).

Details as in GPTQ (act-order off): dead inputs (zero Hessian diagonal) get ``H_ii = 1`` and zero weights; the
Hessian is damped by 1 % of its mean diagonal. A group's scale and zero-point are fixed when the group's first
column comes up, from the *updated* weights of that group (min-max for ``gptq``, NeUQI for ``neuqi+gptq``; NeUQI
weighs the group's columns by ``diag(H)``). Blocks are a multiple of the group size, so a group never straddles a
block and its weights are all current when its parameters are chosen.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..errors import BitforgeError
from . import api
from .api import CompressConfig, CompressedLayer, LayerStats, check_group, register
from .neuqi import NEUQI_OPTIONS, NeuqiConfig, neuqi_params
from .uniform import (
    UniformQuantized,
    check_bits,
    check_weight,
    round_codes,
    rtn_params,
    store_params,
    symmetric_option,
    symmetric_params,
)


@dataclass(frozen=True)
class GPTQConfig:
    """``damp``: fraction of the mean Hessian diagonal added to it; ``block``: columns per lazy-update block;
    ``init``: how a group's grid is chosen (``"rtn"`` min-max or ``"neuqi"``)."""

    damp: float = 0.01
    block: int = 128
    init: str = "rtn"
    neuqi: NeuqiConfig = field(default_factory=NeuqiConfig)
    #: min-max grids made symmetric (``uniform.symmetric_params``; init "rtn" only): exports to GGUF Q4_0/Q8_0
    symmetric: bool = False

    def __post_init__(self) -> None:
        if self.init not in ("rtn", "neuqi"):
            raise BitforgeError(f"GPTQ init {self.init!r}: expected 'rtn' or 'neuqi'")
        if not self.damp > 0 or self.block < 1:
            raise BitforgeError(f"GPTQ: damp must be > 0 and block >= 1, got damp={self.damp}, block={self.block}")


def inverse_hessian_factor(H: torch.Tensor, damp: float, layer: str = "") -> torch.Tensor:
    """Upper Cholesky factor of ``(H + damp * mean(diag H) I)^-1`` (float64), retrying with 10x damping if the
    damped Hessian is still numerically indefinite."""
    n = H.shape[0]
    d = damp * float(torch.diagonal(H).mean())
    eye = torch.eye(n, dtype=H.dtype)
    for _ in range(4):
        L, info = torch.linalg.cholesky_ex(H + d * eye)
        if int(info) == 0:
            Hinv = torch.cholesky_inverse(L)
            U, info = torch.linalg.cholesky_ex(Hinv, upper=True)
            if int(info) == 0:
                return U
        d *= 10.0
    where = f"layer {layer}: " if layer else ""
    raise BitforgeError(f"{where}the calibration Hessian is not positive definite even with damping {d:.3g}; "
                        "check the calibration inputs for NaN/inf")


def _group_params(Wg: torch.Tensor, h: torch.Tensor, bits: int, cfg: GPTQConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Float16 (scale, zero) ``[out, 1]`` of one group's current weights."""
    if cfg.init == "neuqi":
        s, z = neuqi_params(Wg, h, bits, None, cfg.neuqi)
    elif cfg.symmetric:
        s, z = symmetric_params(Wg, bits, None)
    else:
        s, z = rtn_params(Wg, bits, None)
    return store_params(s, z)


def gptq_quantize(W: torch.Tensor, stats: LayerStats, bits: int, group: int | None,
                  cfg: GPTQConfig = GPTQConfig()) -> UniformQuantized:
    """GPTQ-rounded uniform quantization of ``W`` ([out, in]) with the grid of ``cfg.init``."""
    layer = stats.name
    method = "gptq" if cfg.init == "rtn" else "neuqi+gptq"
    check_weight(W, layer)
    check_bits(bits, method)
    check_group(W, group, layer)
    out, n_in = W.shape
    H = stats.hessian.to(torch.float64).clone()
    if tuple(H.shape) != (n_in, n_in) or not torch.isfinite(H).all():
        raise BitforgeError(f"layer {layer}: calibration Hessian of shape {tuple(H.shape)} does not match the "
                            f"weight's {n_in} inputs or is not finite")
    h = torch.diagonal(H).clone().to(torch.float32)          # NeUQI's importance: the undamped diagonal
    dead = torch.diagonal(H) == 0
    H[dead, dead] = 1.0
    Wq = W.to(torch.float32).clone()
    Wq[:, dead] = 0.0
    U = inverse_hessian_factor(H, cfg.damp, layer).to(torch.float32)

    g = n_in if group is None else group
    # Per channel the grid is fixed up front, so any block works; with groups a block holds whole groups.
    block = cfg.block if group is None else (g * max(1, cfg.block // g) if g <= cfg.block else g)
    codes = torch.empty(out, n_in, dtype=torch.uint8)
    scales = torch.empty(out, n_in // g, dtype=torch.float16)
    zeros = torch.empty(out, n_in // g, dtype=torch.float16)
    if group is None:
        scales[:], zeros[:] = _group_params(Wq, h, bits, cfg)
    for i1 in range(0, n_in, block):
        i2 = min(i1 + block, n_in)
        W1 = Wq[:, i1:i2].clone()
        Err = torch.zeros_like(W1)
        U1 = U[i1:i2, i1:i2]
        for i in range(i2 - i1):
            col = i1 + i
            if group is not None and col % g == 0:
                scales[:, col // g: col // g + 1], zeros[:, col // g: col // g + 1] = \
                    _group_params(W1[:, i:i + g], h[col:col + g], bits, cfg)
            s = scales[:, col // g].float()
            z = zeros[:, col // g].float()
            w = W1[:, i]
            c = round_codes(w, s, z, bits)
            codes[:, col] = c.to(torch.uint8)
            err = (w - (c + z) * s) / U1[i, i]
            W1[:, i:] -= err[:, None] * U1[i, i:][None, :]
            Err[:, i] = err
        Wq[:, i2:] -= Err @ U[i1:i2, i2:]
    return UniformQuantized(codes, scales, zeros, bits, group)


def _config(cfg: CompressConfig, init: str) -> GPTQConfig:
    opts, method = cfg.options, "gptq" if init == "rtn" else "neuqi+gptq"
    api.check_options(opts, method, ("damp", "block") + (NEUQI_OPTIONS if init == "neuqi" else ("symmetric",)))
    return GPTQConfig(damp=float(opts.get("damp", 0.01)), block=int(opts.get("block", 128)), init=init,
                      neuqi=NeuqiConfig.from_options(opts, method), symmetric=symmetric_option(opts, method))


@register("gptq")
def gptq(W: torch.Tensor, stats: LayerStats, cfg: CompressConfig) -> CompressedLayer:
    """GPTQ with min-max group grids."""
    return gptq_quantize(W, stats, cfg.bits, cfg.group, _config(cfg, "rtn")).to_layer("gptq")


@register("neuqi+gptq")
def neuqi_gptq(W: torch.Tensor, stats: LayerStats, cfg: CompressConfig) -> CompressedLayer:
    """GPTQ with NeUQI group grids chosen on the updated weights."""
    return gptq_quantize(W, stats, cfg.bits, cfg.group, _config(cfg, "neuqi")).to_layer("neuqi+gptq")
