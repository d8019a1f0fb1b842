"""The PyTorch reference path: ``y = x W^T`` computed from a compressed layer's *packed* tensors.

This is the ground truth the GPU kernels are tested against and the CPU path of :mod:`.modules`. One function per
stored layout (the manifest's ``packing``), each reading the layout module of :mod:`bitforge.runtime.formats`:

``uniform-v1``         RTN, NeUQI, GPTQ, NeUQI+GPTQ and OSAQ+any of them: unpack the codes, dequantize, matmul.
``nvfp4-v1``           NVFP4 (both variants): ``(e2m1 * e4m3) * fp32`` dequantized, matmul.
``binary-lowrank-v1``  LittleBit-2: every stored path (primary, residual) applied in factored form,
                       ``((((x v2) V) latent) U^T) u1``; the dense ``[out, in]`` matrix is never formed.
Q + low-rank           SRR and QERA: the base layout's forward on the ``q.`` tensors plus ``(x R^T) L^T`` with
                       ``lr_left = L [out, r]`` and ``lr_right = R [r, in]``: two small matmuls, never ``L R``.

Arithmetic is float32 whatever ``x``'s dtype (the result is cast back to it), so a bfloat16 model computes with
the exact decoded weights. The results agree with ``checkpoint.decode_layer`` followed by a dense matmul up to
float32 rounding: uniform and NVFP4 dequantize exactly as the decoders do (same function, bit for bit), the
factored forms only re-associate sums (tests/compress/test_packed_modules.py bounds the difference).

:func:`expected_tensors` says which tensors (shape, dtype) a layer of a given manifest entry must store, so a
checkpoint whose manifest and tensors disagree is refused when it is loaded, naming the layer, not deep inside a
matmul.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from bitforge.runtime.formats import binary, nvfp4, uniform
from bitforge.toolchain.errors import BitforgeError

Forward = Callable[[torch.Tensor, dict[str, torch.Tensor], dict], torch.Tensor]
LOWRANK_METHODS = ("srr", "qera")
LOWRANK = "lowrank-v1"   # the name of the low-rank correction term ``(x R^T) L^T`` in the kernel registry
BASE_PREFIX = "q."


class PackedLayerError(BitforgeError):
    """A layer's manifest entry and its stored tensors disagree, or its packing is unknown."""


def _linear32(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float32) @ w.to(torch.float32).T


# -- one forward per layout ----------------------------------------------------------------------------

def unpack_uniform(packed: torch.Tensor, bits: int, shape: tuple[int, int]) -> torch.Tensor:
    """``uniform.unpack_codes`` with a fast path for 1, 2, 4 and 8 bits, where no code straddles a byte: code
    ``j`` of byte ``b`` is ``(b >> j * bits) & mask`` in uint8 arithmetic (about 10x faster than the general
    int64 bit-stream unpacking, which matters when every generated token unpacks every layer). Other widths use the
    layout module's own function; tests/compress/test_packed_modules.py checks both give the same codes."""
    if 8 % bits:
        return uniform.unpack_codes(packed, bits, shape)
    out, n_in = shape
    if packed.dtype != torch.uint8 or tuple(packed.shape) != (out, uniform.row_bytes(n_in, bits)):
        return uniform.unpack_codes(packed, bits, shape)   # raises its own message
    shifts = torch.arange(0, 8, bits, dtype=torch.uint8, device=packed.device)
    codes = (packed.unsqueeze(-1) >> shifts) & ((1 << bits) - 1)
    return codes.reshape(out, -1)[:, :n_in]


def uniform_forward(x: torch.Tensor, tensors: dict[str, torch.Tensor], meta: dict) -> torch.Tensor:
    """``uniform-v1``: unpack, ``(code + zero) * scale`` (the decoder's own function), float32 matmul."""
    shape = tuple(meta["shape"])
    codes = unpack_uniform(tensors["codes"], int(meta["bits"]), shape)
    return _linear32(x, uniform.dequantize(codes, tensors["scale"], tensors["zero"], meta.get("group")))


def nvfp4_forward(x: torch.Tensor, tensors: dict[str, torch.Tensor], meta: dict) -> torch.Tensor:
    """``nvfp4-v1``: dequantize in the kernel's order, float32 matmul."""
    w = nvfp4.dequantize(nvfp4.NVFP4Weight.from_tensors(tensors, tuple(meta["shape"]), meta["variant"]))
    return _linear32(x, w)


def binary_lowrank_forward(x: torch.Tensor, tensors: dict[str, torch.Tensor], meta: dict) -> torch.Tensor:
    """``binary-lowrank-v1``: the sum of the stored paths, each in factored order (``BinaryLowRankPath.apply``)."""
    y = None
    for name in meta["paths"]:
        part = binary.BinaryLowRankPath.from_tensors(tensors, name).apply(x)
        y = part if y is None else y + part
    return y


def lowrank_term(x: torch.Tensor, tensors: dict[str, torch.Tensor], meta: dict) -> torch.Tensor:
    """``(x R^T) L^T``: the low-rank correction of a Q + L R layer as two small float32 matmuls."""
    t = x.to(torch.float32) @ tensors["lr_right"].to(torch.float32).T
    return t @ tensors["lr_left"].to(torch.float32).T


#: packing -> reference forward of a plain (no low-rank) layer
FORWARDS: dict[str, Forward] = {
    uniform.LAYOUT: uniform_forward,
    nvfp4.LAYOUT: nvfp4_forward,
    binary.LAYOUT: binary_lowrank_forward,
    LOWRANK: lowrank_term,
}


# -- splitting a layer into its parts ------------------------------------------------------------------

def is_lowrank(meta: dict) -> bool:
    return meta.get("method") in LOWRANK_METHODS


def fused_format(meta: dict) -> str | None:
    """The registry name of a kernel that computes a whole Q + L R layer in one pass (``"uniform-v1+lowrank-v1"``),
    or None for a plain layer. A device with such a kernel runs it instead of the parts of :func:`split_layer`."""
    return f"{meta.get('packing')}+{LOWRANK}" if is_lowrank(meta) else None


def split_layer(tensors: dict[str, torch.Tensor], meta: dict) -> list[tuple[str, dict[str, torch.Tensor], dict]]:
    """The layer as ``[(format, tensors, meta), ...]`` whose forwards sum to ``x W^T``: one part for a plain layer,
    the base (``q.`` tensors, the base method's meta) plus the ``lowrank-v1`` term for SRR/QERA."""
    if not is_lowrank(meta):
        return [(meta.get("packing"), tensors, meta)]
    base_tensors = {k[len(BASE_PREFIX):]: t for k, t in tensors.items() if k.startswith(BASE_PREFIX)}
    base_meta = {**meta, "method": meta.get("base")}
    lr = {k: tensors[k] for k in ("lr_left", "lr_right") if k in tensors}
    return [(meta.get("packing"), base_tensors, base_meta), (LOWRANK, lr, meta)]


def forward(x: torch.Tensor, tensors: dict[str, torch.Tensor], meta: dict) -> torch.Tensor:
    """``x W^T`` of one compressed layer from its packed ``tensors`` (short names) and manifest entry ``meta``.

    float32 result; the caller casts. Raises :class:`PackedLayerError` for a packing with no reference forward."""
    y = None
    for fmt, part_tensors, part_meta in split_layer(tensors, meta):
        if fmt not in FORWARDS:
            raise PackedLayerError(f"packing {fmt!r} (method {meta.get('method')!r}) has no reference forward; "
                                   f"known: {', '.join(sorted(FORWARDS))}")
        part = FORWARDS[fmt](x, part_tensors, part_meta)
        y = part if y is None else y + part
    return y


# -- what a layer must store ---------------------------------------------------------------------------

Spec = dict[str, tuple[tuple[int, ...], torch.dtype]]


def _uniform_spec(meta: dict, out: int, n_in: int) -> Spec:
    bits, group = int(meta["bits"]), meta.get("group")
    if not 1 <= bits <= 8:
        raise PackedLayerError(f"uniform-v1 with bits {bits}; expected 1..8")
    g = n_in if group is None else int(group)
    if g <= 0 or n_in % g:
        raise PackedLayerError(f"uniform-v1 group {group} does not divide the input dimension {n_in}")
    return {"codes": ((out, uniform.row_bytes(n_in, bits)), torch.uint8),
            "scale": ((out, n_in // g), torch.float16), "zero": ((out, n_in // g), torch.float16)}


def _nvfp4_spec(meta: dict, out: int, n_in: int) -> Spec:
    variant = meta.get("variant")
    if variant not in nvfp4.VARIANTS:
        raise PackedLayerError(f"nvfp4-v1 variant {variant!r}; expected one of {nvfp4.VARIANTS}")
    if n_in % nvfp4.BLOCK:
        raise PackedLayerError(f"nvfp4-v1 needs an input dimension that is a multiple of {nvfp4.BLOCK}, got {n_in}")
    glob = (1, 1) if variant == "tensor" else (out, -(-n_in // nvfp4.OUTER_BLOCK))
    return {"codes": ((out, n_in // 2), torch.uint8), "block_scales": ((out, n_in // nvfp4.BLOCK), torch.uint8),
            "global_scales": (glob, torch.float32)}


def _binary_spec(meta: dict, out: int, n_in: int) -> Spec:
    r = int(meta["rank"])
    spec: Spec = {}
    for p in meta.get("paths") or []:
        spec.update({f"{p}.u_signs": ((r, -(-out // 8)), torch.uint8),
                     f"{p}.v_signs": ((r, -(-n_in // 8)), torch.uint8),
                     f"{p}.u1": ((out,), torch.float16), f"{p}.latent": ((r,), torch.float16),
                     f"{p}.v2": ((n_in,), torch.float16)})
    if not spec:
        raise PackedLayerError("binary-lowrank-v1 layer lists no paths in its manifest entry")
    return spec


def _lowrank_spec(meta: dict, out: int, n_in: int) -> Spec:
    r = int(meta["rank"])
    return {"lr_left": ((out, r), torch.float16), "lr_right": ((r, n_in), torch.float16)}


SPECS: dict[str, Callable[[dict, int, int], Spec]] = {
    uniform.LAYOUT: _uniform_spec, nvfp4.LAYOUT: _nvfp4_spec, binary.LAYOUT: _binary_spec, LOWRANK: _lowrank_spec,
}


def expected_tensors(meta: dict) -> Spec:
    """Short tensor name -> (shape, dtype) that a layer with manifest entry ``meta`` stores."""
    try:
        out, n_in = (int(v) for v in meta["shape"])
    except (KeyError, TypeError, ValueError):
        raise PackedLayerError(f"manifest entry has no [out, in] shape (got {meta.get('shape')!r})") from None
    fmt = meta.get("packing")
    if fmt not in SPECS or fmt == LOWRANK:
        raise PackedLayerError(f"unknown packing {fmt!r} (method {meta.get('method')!r}); this bitforge runs "
                               f"{', '.join(k for k in sorted(SPECS) if k != LOWRANK)} packed (eval-ppl --dense "
                               "still evaluates a layer whose method registered a checkpoint decoder)")
    base = SPECS[fmt](meta, out, n_in)
    if not is_lowrank(meta):
        return base
    return {**{BASE_PREFIX + k: v for k, v in base.items()}, **_lowrank_spec(meta, out, n_in)}


def check_tensors(name: str, tensors: dict[str, torch.Tensor], meta: dict) -> None:
    """Raise :class:`PackedLayerError` naming layer ``name`` when ``tensors`` are not what ``meta`` describes."""
    try:
        spec = expected_tensors(meta)
    except PackedLayerError as e:
        raise PackedLayerError(f"layer {name}: {e}") from None
    missing = sorted(set(spec) - set(tensors))
    if missing:
        raise PackedLayerError(f"layer {name}: the checkpoint lacks tensors {missing} that its manifest entry "
                               f"({meta.get('method')}, {meta.get('packing')}) needs; re-run bitforge quantize")
    extra = sorted(set(tensors) - set(spec))
    if extra:
        raise PackedLayerError(f"layer {name}: unexpected tensors {extra} for {meta.get('method')} "
                               f"({meta.get('packing')}); expected {sorted(spec)}")
    for tname, (shape, dtype) in spec.items():
        t = tensors[tname]
        if tuple(t.shape) != shape or t.dtype != dtype:
            raise PackedLayerError(f"layer {name}: tensor {tname} is {t.dtype} {tuple(t.shape)}, the manifest "
                                   f"({meta.get('method')}, shape {list(meta['shape'])}) implies {dtype} {shape}")
