"""What a model *is*, as two digests: its architecture, and its architecture with its parameter values.

A device built with reloadable weights (``--weights ram``) runs any model with the same architecture, so the
host must know whether a weight file fits a device before it sends a byte: ``arch_id`` is that test. It covers
everything that decides the hardware (ops, their order and wiring, shapes, fixed-point types with rounding and
overflow, every attribute, each parameter array's shape and dtype) and nothing that is only data (parameter
values, the graph's name, its metadata such as the seed or source file). ``model_id`` adds the parameter codes,
so two compiles of the same model agree and any changed weight changes it. Both are computed from the IR, not
from files, so they do not depend on how JSON or safetensors happen to be written.
"""
from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

import numpy as np

from .ir import Graph, to_json

if TYPE_CHECKING:  # the learner package is not needed to hash a compiled model
    from .learn.spec import Learner

__all__ = ["arch_id", "model_id", "architecture", "learner_architecture", "learner_arch_id", "learner_model_id"]

#: Spec fields that only say how the initial state was drawn: its codes (in model_id) are what the device holds.
_INITIAL_STATE_ONLY = ("seed", "init", "init_scale")


def architecture(g: Graph) -> dict:
    """The architecture as JSON-able data: the IR's own serialisation with values replaced by their shapes."""
    doc = to_json(g)
    doc.pop("name", None)
    doc.pop("metadata", None)
    by_name = {n.name: n for n in g.nodes}
    for node in doc["nodes"]:
        arrays = by_name[node["name"]].array_fields()
        node["arrays"] = {k: {"shape": list(a.shape), "kind": _kind(a)} for k, a in sorted(arrays.items())}
    return doc


def _kind(a: np.ndarray) -> str:
    # Integer codes may sit in int64 or (wider than 62 bits) in object arrays: the same architecture either way.
    return "float" if a.dtype.kind == "f" else "codes"


def _canonical(doc: dict) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def arch_id(g: Graph) -> str:
    """SHA-256 (hex) of :func:`architecture`: equal for every model a ``--weights ram`` device can load."""
    return hashlib.sha256(_canonical(architecture(g))).hexdigest()


def model_id(g: Graph) -> str:
    """SHA-256 (hex) of the architecture and every parameter array's codes (little-endian int64, C order)."""
    h = hashlib.sha256(_canonical(architecture(g)))
    _update_values(h, g)
    return h.hexdigest()


def _update_values(h, g: Graph) -> None:
    for n in g.nodes:
        for k, a in sorted(n.array_fields().items()):
            h.update(f"{n.name}.{k}\0".encode())
            h.update(_value_bytes(a))


def learner_architecture(learner: "Learner") -> dict:
    """A learner's architecture: its graph's (layers, sizes, storage and datapath types, grid) and every field of
    its spec that decides the hardware or the trajectory (kind, sizes, grid, basis, all six formats, the whole
    update rule), but not how the initial values were drawn (seed, init), which only their codes record."""
    spec = {k: v for k, v in learner.spec.to_json().items() if k not in _INITIAL_STATE_ONLY}
    return {"graph": architecture(learner.graph), "learner": spec}


def learner_arch_id(learner: "Learner") -> str:
    """SHA-256 (hex) of :func:`learner_architecture`."""
    return hashlib.sha256(_canonical(learner_architecture(learner))).hexdigest()


def learner_model_id(learner: "Learner") -> str:
    """SHA-256 (hex) of the learner's architecture and its state's storage codes: the model a device built from
    this learner starts with (and reports in ``hello`` however far it has learned since)."""
    h = hashlib.sha256(_canonical(learner_architecture(learner)))
    _update_values(h, learner.graph)
    return h.hexdigest()


def _value_bytes(a: np.ndarray) -> bytes:
    if a.dtype.kind == "f":
        return np.ascontiguousarray(a, dtype="<f8").tobytes()
    codes = [int(v) for v in a.ravel()] if a.dtype == object else None
    if codes is None or all(-(1 << 63) <= c < (1 << 63) for c in codes):
        return np.ascontiguousarray(a, dtype="<i8").tobytes()
    return ",".join(map(str, codes)).encode()  # wider than int64: decimal text, still exact
