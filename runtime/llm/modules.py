"""``QuantizedLinear``: an ``nn.Linear`` replacement that computes from a bitforge checkpoint's packed tensors.

Each module holds one layer's stored tensors as buffers (the checkpoint's own dtypes: uint8 codes, float16
scales, ...) and its manifest entry. Its forward is the sum of the layer's parts (:func:`.reference.split_layer`:
the base layout, plus the ``lowrank-v1`` term for SRR/QERA), each looked up in :data:`.kernels.KERNELS` by
``(format, device type)``. The reference path is registered for ``"cpu"`` and is the fallback for every device
(its torch ops run anywhere), so a kernel module plugs in with ``register_kernel("uniform-v1", "cuda")(fn)``
without touching this file; its ``fn(x, tensors, meta)`` has the reference's signature and must return float32.

:func:`load_quantized` builds the model a checkpoint describes: the base model as ``compress.model_io`` loads it
(from the manifest's ``model`` record), then each listed layer's ``nn.Linear`` replaced by a ``QuantizedLinear``
(its dense weight dropped). Tensors are read with ``safetensors.torch.load_file``: never pickle.
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from bitforge.runtime.llm import reference
from bitforge.runtime.llm.kernels import KERNELS, Kernel, find_kernel, register_kernel  # noqa: F401 - re-exported
from bitforge.toolchain.errors import BitforgeError

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
DEVICES = ("cpu", "cuda")


class UnsupportedDevice(BitforgeError):
    """The device or dtype asked for cannot run the packed modules here."""


def _buffer_name(tensor_name: str) -> str:
    return tensor_name.replace(".", "__")   # buffer names may not contain dots


class QuantizedLinear(nn.Module):
    """``y = x W^T (+ bias)`` with ``W`` kept packed; ``tensors`` are the layer's stored tensors by short name."""

    def __init__(self, name: str, tensors: dict[str, torch.Tensor], meta: dict, bias: torch.Tensor | None = None):
        super().__init__()
        reference.check_tensors(name, tensors, meta)
        self.name = name
        self.meta = dict(meta)
        self.out_features, self.in_features = (int(v) for v in meta["shape"])
        self.tensor_names = tuple(sorted(tensors))
        for tname in self.tensor_names:
            self.register_buffer(_buffer_name(tname), tensors[tname].contiguous())
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), requires_grad=False)

    def packed(self) -> dict[str, torch.Tensor]:
        return {t: getattr(self, _buffer_name(t)) for t in self.tensor_names}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.in_features:
            raise BitforgeError(f"layer {self.name}: input of width {x.shape[-1]}, expected {self.in_features}")
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        fused = reference.fused_format(self.meta)
        if fused is not None and (fused, x.device.type) in KERNELS:  # Q + L R in one pass over x
            y = KERNELS[(fused, x.device.type)](x2, self.packed(), self.meta)
        else:
            y = None
            for fmt, tensors, meta in reference.split_layer(self.packed(), self.meta):
                part = find_kernel(fmt, x.device.type)(x2, tensors, meta)
                y = part if y is None else y + part
        if self.bias is not None:
            y = y + self.bias.to(torch.float32)
        return y.to(x.dtype).reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return (f"{self.name}: in={self.in_features}, out={self.out_features}, method={self.meta.get('method')}, "
                f"packing={self.meta.get('packing')}, bpw={self.meta.get('bpw')}")


# -- loading --------------------------------------------------------------------------------------------

def check_device(device: str | torch.device, dtype: torch.dtype) -> torch.device:
    """The device to run on, or :class:`UnsupportedDevice` saying why not."""
    if dtype not in DTYPES:
        raise UnsupportedDevice(f"dtype {dtype}: the packed modules run in {', '.join(str(d) for d in DTYPES)}")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise UnsupportedDevice(f"device {device!r}: expected one of {', '.join(DEVICES)}") from None
    if dev.type not in DEVICES:
        raise UnsupportedDevice(f"device {device!r}: expected one of {', '.join(DEVICES)}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UnsupportedDevice("device 'cuda': this PyTorch sees no CUDA GPU (torch.cuda.is_available() is "
                                "False); run with --device cpu")
    return dev


def replace_linears(model: nn.Module, layers: dict[str, dict[str, torch.Tensor]], manifest_layers: dict,
                    where: str = "checkpoint") -> int:
    """Swap each listed ``nn.Linear`` of ``model`` for a :class:`QuantizedLinear`; returns how many."""
    modules = dict(model.named_modules())
    for name, meta in manifest_layers.items():
        lin = modules.get(name)
        if not isinstance(lin, nn.Linear):
            raise reference.PackedLayerError(f"{where}: layer {name} is not an nn.Linear of the base model "
                                             "(was the checkpoint made from another model?)")
        if (lin.out_features, lin.in_features) != tuple(meta["shape"]):
            raise reference.PackedLayerError(f"{where}: layer {name} is [{lin.out_features}, {lin.in_features}] "
                                             f"in the base model, the manifest says {list(meta['shape'])}")
        qmod = QuantizedLinear(name, layers[name], meta, lin.bias)
        parent_name, _, child = name.rpartition(".")
        setattr(modules[parent_name] if parent_name else model, child, qmod)
    return len(manifest_layers)


def read_layer_tensors(path: Path, manifest: dict) -> dict[str, dict[str, torch.Tensor]]:
    """Per layer, its stored tensors by short name (``safetensors.torch.load_file``; missing ones are left for
    :func:`.reference.check_tensors` to name)."""
    from safetensors.torch import load_file

    from bitforge.toolchain.compress.checkpoint import WEIGHTS

    try:
        flat = load_file(str(path / WEIGHTS))
    except FileNotFoundError:
        raise BitforgeError(f"{path}: {WEIGHTS} is missing") from None
    except Exception as e:  # noqa: BLE001 - safetensors raises its own error types for damaged files
        raise BitforgeError(f"{path / WEIGHTS}: unreadable ({type(e).__name__}: {e})") from None
    layers: dict[str, dict[str, torch.Tensor]] = {name: {} for name in manifest["layers"]}
    for key, t in flat.items():
        for name in layers:
            if key.startswith(name + "."):
                layers[name][key[len(name) + 1:]] = t
                break
    return layers


def base_source(manifest: dict, ckpt: Path):
    """The base model a checkpoint was made from (its manifest's ``model`` record), refused when the file
    changed since the checkpoint was written (``bitforge eval-ppl`` and :func:`load_quantized` share it)."""
    from bitforge.toolchain.compress.model_io import resolve_model

    rec = manifest.get("model", {})
    spec = rec.get("spec", "")
    source = resolve_model(spec if spec == "smollm2" else rec.get("path", spec))
    if rec.get("size") is not None and source.path.is_file() and source.path.stat().st_size != rec["size"]:
        raise BitforgeError(f"{ckpt}: made from {rec.get('path')} of {rec['size']:,} bytes, but {source.path} now "
                            f"has {source.path.stat().st_size:,}; the base model changed")
    return source


def load_quantized(checkpoint_dir: str | Path, device: str = "cpu", dtype: torch.dtype = torch.float32,
                   log=None):
    """``(model, tokenizer)``: the checkpoint's base model with every listed layer a :class:`QuantizedLinear`."""
    from bitforge.toolchain.compress.checkpoint import read_manifest
    from bitforge.toolchain.compress.model_io import load_model

    path = Path(checkpoint_dir)
    dev = check_device(device, dtype)
    if dev.type == "cuda":  # the Triton kernels (bitforge[gpu]) take over the layouts they cover
        from .cuda_kernels import register
        register()
    manifest = read_manifest(path)
    layers = read_layer_tensors(path, manifest)
    for name, meta in manifest["layers"].items():   # before the minute-long model load
        reference.check_tensors(name, layers[name], meta)
    lm = load_model(base_source(manifest, path), log=log)
    # Cast first: a module-wide .to(dtype) would also cast the float16 scales held as buffers (lossy in bfloat16).
    model = lm.model.to(dtype=dtype)
    replace_linears(model, layers, manifest["layers"], str(path))
    return model.to(device=dev), lm.tokenizer
