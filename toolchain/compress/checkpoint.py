"""The compressed-model checkpoint: ``weights.safetensors`` + ``manifest.json`` in one folder (docs/compress.md).

``weights.safetensors`` holds every compressed layer's stored tensors under ``"<module path>.<tensor name>"``
(e.g. ``model.layers.0.self_attn.q_proj.codes``); nothing else, in particular no dense copy of the weights.
``manifest.json`` says where the base model comes from, the method configuration, the calibration protocol, one
entry per layer (the method's meta: method, bits, group, zero_point, rank, packing, bpw, shape, plus the list of
its tensor names) and the whole-model bits per weight. Everything not listed (embeddings, norms, ``lm_head``) is
the base model's. The folder is written through :func:`bitforge.toolchain.outputs.output_folder`: a temporary
sibling renamed into place, and a folder bitforge did not write is never replaced without ``force``.

Loading rebuilds the model as *base model + decoded layers*: a decoder turns a layer's stored tensors back into
its float32 weight. Decoders are looked up by the layer's ``meta["method"]`` first, then by ``meta["packing"]``
(:func:`register_decoder`), so a method that stores a shared layout plus extras (Q + low-rank) can register under
its own name. When a checkpoint is written, every layer with a decoder is decoded and compared with the weight
the model was evaluated with; a mismatch is a bug (:class:`VerificationFailed`), a missing decoder is recorded.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from ..errors import BitforgeError, VerificationFailed
from ..outputs import check_output as check_output_path
from ..outputs import output_folder

FORMAT = "bitforge-compressed-lm"
VERSION = 1
MANIFEST = "manifest.json"
WEIGHTS = "weights.safetensors"
# A decoded layer may differ from the evaluated weight by float rounding of a different evaluation order; more
# than this fraction of the layer's largest |weight| means the decoder does not decode what the method stored.
DECODE_RTOL = 1e-4

Decoder = Callable[[dict[str, torch.Tensor], dict], torch.Tensor]
DECODERS: dict[str, Decoder] = {}
# Built-in decoders apply only to layers storing exactly the tensors of their layout (a Q + low-rank layer that
# reuses the uniform packing for its Q part also stores factors, and needs its method's own decoder).
_BUILTIN: dict[str, tuple[Decoder, frozenset]] = {}


def register_decoder(name: str) -> Callable[[Decoder], Decoder]:
    """Decorator: ``fn(tensors, meta) -> float32 [out, in]`` decodes layers whose method or packing is ``name``.

    ``tensors`` are the layer's stored tensors by their short names (as in ``CompressedLayer.tensors``) and
    ``meta`` its manifest entry (with ``shape``)."""
    def wrap(fn: Decoder) -> Decoder:
        if name in DECODERS:
            raise RuntimeError(f"checkpoint decoder {name!r} registered twice")
        DECODERS[name] = fn
        return fn
    return wrap


def find_decoder(meta: dict, tensor_names) -> Decoder | None:
    for key in (meta.get("method"), meta.get("packing")):
        if key in DECODERS:
            return DECODERS[key]
    for key in (meta.get("method"), meta.get("packing")):
        if key in _BUILTIN and _BUILTIN[key][1] == frozenset(tensor_names):
            return _BUILTIN[key][0]
    return None


def _decode_uniform(tensors: dict[str, torch.Tensor], meta: dict) -> torch.Tensor:
    """``uniform-v1`` (:mod:`bitforge.runtime.formats.uniform`): unpack the codes, ``(code + zero) * scale``."""
    from ...runtime.formats import uniform as fmt

    shape = tuple(meta["shape"])
    codes = fmt.unpack_codes(tensors["codes"], int(meta["bits"]), shape)
    return fmt.dequantize(codes, tensors["scale"], tensors["zero"], meta.get("group"))


def _register_builtin() -> None:
    """The decoder of the one layout whose decoding rule is a public function of :mod:`bitforge.runtime.formats`;
    a method module registering the same name through :func:`register_decoder` takes precedence."""
    from ...runtime.formats import uniform as fmt

    _BUILTIN[fmt.LAYOUT] = (_decode_uniform, frozenset({"codes", "scale", "zero"}))


_register_builtin()


def decode_layer(name: str, tensors: dict[str, torch.Tensor], meta: dict) -> torch.Tensor:
    fn = find_decoder(meta, tensors)
    if fn is None:
        raise BitforgeError(f"layer {name}: no decoder for method {meta.get('method')!r} / packing "
                            f"{meta.get('packing')!r}; known: {', '.join(sorted({*DECODERS, *_BUILTIN}))}. The "
                            "method's module must register one (checkpoint.register_decoder)")
    w = fn(tensors, meta)
    if tuple(w.shape) != tuple(meta["shape"]):
        raise VerificationFailed(f"layer {name}: decoder returned shape {tuple(w.shape)}, manifest says "
                                 f"{tuple(meta['shape'])}")
    return w.to(torch.float32)


# -- writing ------------------------------------------------------------------------------------------

def _json_safe(value):
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def check_output(out: Path, force: bool = False, inputs=()) -> None:
    """Refuse, before any long work, an output path that :func:`save_checkpoint` would refuse (a file, a
    non-empty folder bitforge did not write unless ``force``, a protected folder, one holding an input)."""
    check_output_path(out, force=force, inputs=inputs)


def verify_decoding(layers: dict, model: nn.Module) -> dict:
    """Decode each layer that has a decoder and compare with the weight ``model`` computes with."""
    modules = dict(model.named_modules())
    worst, undecodable = 0.0, set()
    for name, rec in layers.items():
        if find_decoder(rec.meta, rec.tensors) is None:
            undecodable.add(f"{rec.meta.get('method')} ({rec.meta.get('packing')})")
            continue
        w = modules[name].weight.detach().to(torch.float32).cpu()
        got = decode_layer(name, rec.tensors, rec.meta)
        err = float((got - w).abs().max()) if w.numel() else 0.0
        bound = DECODE_RTOL * max(float(w.abs().max()), 1e-30)
        if err > bound:
            raise VerificationFailed(f"layer {name}: the checkpoint decodes to a weight that differs from the "
                                     f"evaluated one by {err:.3g} (> {bound:.3g}); the {rec.meta.get('method')} "
                                     "decoder and the method disagree")
        worst = max(worst, err / max(float(w.abs().max()), 1e-30))
    n_missing = sum(1 for r in layers.values() if find_decoder(r.meta, r.tensors) is None)
    return {"decoded_layers": len(layers) - n_missing, "max_relative_error": worst,
            "no_decoder": sorted(undecodable)}


def save_checkpoint(out: Path, quantized, model: nn.Module, source: dict, extra: dict | None = None,
                    force: bool = False, inputs=()) -> dict:
    """Write ``quantized`` (a :class:`.driver.QuantizedModel`) to ``out``; returns the manifest."""
    with output_folder(out, kind="quantize", force=force, inputs=inputs) as tmp:
        decoding = verify_decoding(quantized.layers, model)
        tensors, layers = {}, {}
        for name, rec in quantized.layers.items():
            for tname, t in rec.tensors.items():
                tensors[f"{name}.{tname}"] = t.detach().contiguous().cpu()
            layers[name] = {**_json_safe(rec.meta), "shape": list(rec.shape), "tensors": sorted(rec.tensors),
                            "seconds": round(rec.seconds, 4)}
        cfg = quantized.config
        manifest = {
            "format": FORMAT, "version": VERSION,
            "model": _json_safe(source),
            "config": _json_safe({"method": cfg.method, "bits": cfg.bits, "group": cfg.group, "rank": cfg.rank,
                                  "bpw": cfg.bpw, "seed": cfg.seed, "options": cfg.options}),
            "statistics": quantized.statistics,
            "summary": {"bpw": quantized.bpw, "weights": quantized.n_weights, "layers": len(layers),
                        "method_seconds": round(quantized.method_seconds, 3),
                        "wall_seconds": round(quantized.wall_seconds, 3)},
            "decoding": decoding,
            "unchanged": "every parameter not listed under layers (embeddings, norms, lm_head) is the base model's",
            "layers": layers,
            **_json_safe(extra or {}),
        }
        save_file(tensors, str(tmp / WEIGHTS), metadata={"format": FORMAT, "version": str(VERSION)})
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


# -- reading ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Checkpoint:
    path: Path
    manifest: dict
    tensors: dict[str, dict[str, torch.Tensor]]

    def decoded(self) -> dict[str, torch.Tensor]:
        return {name: decode_layer(name, self.tensors[name], meta) for name, meta in self.manifest["layers"].items()}


def is_checkpoint(path: Path | str) -> bool:
    path = Path(path)
    return path.is_dir() and (path / MANIFEST).is_file()


def read_manifest(path: Path | str) -> dict:
    path = Path(path)
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except FileNotFoundError:
        raise BitforgeError(f"{path}: no {MANIFEST}; not a bitforge checkpoint (write one with bitforge "
                            "quantize ... -o OUT)") from None
    except json.JSONDecodeError as e:
        raise BitforgeError(f"{path / MANIFEST}: not valid JSON ({e})") from None
    if manifest.get("format") != FORMAT:
        raise BitforgeError(f"{path / MANIFEST}: format {manifest.get('format')!r}, expected {FORMAT!r}")
    if manifest.get("version") != VERSION:
        raise BitforgeError(f"{path / MANIFEST}: version {manifest.get('version')}, this bitforge reads {VERSION}")
    return manifest


def load_checkpoint(path: Path | str) -> Checkpoint:
    path = Path(path)
    manifest = read_manifest(path)
    try:
        flat = load_file(str(path / WEIGHTS))
    except FileNotFoundError:
        raise BitforgeError(f"{path}: {WEIGHTS} is missing") from None
    except Exception as e:  # noqa: BLE001 - safetensors raises its own error types for damaged files
        raise BitforgeError(f"{path / WEIGHTS}: unreadable ({type(e).__name__}: {e})") from None
    tensors: dict[str, dict[str, torch.Tensor]] = {}
    for name, meta in manifest["layers"].items():
        missing = [t for t in meta["tensors"] if f"{name}.{t}" not in flat]
        if missing:
            raise BitforgeError(f"{path / WEIGHTS}: layer {name} lacks tensors {missing}")
        tensors[name] = {t: flat[f"{name}.{t}"] for t in meta["tensors"]}
    return Checkpoint(path, manifest, tensors)


@torch.no_grad()
def apply_checkpoint(model: nn.Module, ckpt: Checkpoint) -> int:
    """Write every decoded layer into ``model`` (the base model the checkpoint was made from)."""
    modules = dict(model.named_modules())
    weights = ckpt.decoded()
    for name, w in weights.items():
        mod = modules.get(name)
        if mod is None or not hasattr(mod, "weight") or tuple(mod.weight.shape) != tuple(w.shape):
            raise BitforgeError(f"{ckpt.path}: layer {name} {tuple(w.shape)} does not exist in the base model "
                                "with that shape; was the checkpoint made from another model?")
        mod.weight.copy_(w.to(mod.weight.dtype))
    return len(weights)
