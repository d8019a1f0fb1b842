"""Fold a BatchNorm (a float ``ScaleShift``) into the Dense or Conv before it.

``y = scale * (W x + b) + shift = (scale W) x + (scale b + shift)``, per output channel: the layer keeps one
multiply per weight and the normalisation costs nothing in hardware. Folding happens on the float graph,
before quantization, so the folded weights are what gets quantized (quantizing W and then scaling would
round twice). A ScaleShift that cannot be folded (its input has other readers, comes from another op, or is
a graph output) stays in the graph as a per-channel op of its own, and so does one named in ``keep``: hls4ml
fuses a BatchNormalization only into a layer whose result type is ``'auto'`` (its FuseBatchNormalization
pass), so under an hls4ml configuration the others stay layers, computed after the layer's output was rounded
to its type (:meth:`bitforge.toolchain.passes.hls_config.HlsConfig.kept_batchnorms` names them).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..ir import Conv, Dense, Graph, IRError, Node, ScaleShift

__all__ = ["fold_batchnorm", "FOLDED_KEY", "KEPT_KEY"]

#: ``metadata[FOLDED_KEY]``: ``[{"scale_shift": name, "into": name}, ...]``, what was folded where.
FOLDED_KEY = "folded_batchnorm"
#: ``metadata[KEPT_KEY]``: ``[{"scale_shift": name, "after": name}, ...]``, the foldable ScaleShifts that ``keep``
#: left as layers, and the Dense/Conv each follows.
KEPT_KEY = "kept_batchnorm"


def _foldable(g: Graph, producer: Node, s: ScaleShift) -> bool:
    t = s.inputs[0]
    if not isinstance(producer, (Dense, Conv)) or g.tensors[t].dtype is not None or t in g.outputs:
        return False
    if [n.name for n in g.consumers(t)] != [s.name]:
        return False
    # The ScaleShift's channel is axis 0 of the tensor: a Conv's output channel, a Dense's feature only when
    # the Dense output is a vector (a Dense over the last axis of (C, L) has its features on another axis).
    return isinstance(producer, Conv) or len(g.tensors[t].shape) == 1


def _folded(producer: Node, s: ScaleShift) -> Node:
    scale = s.scale.astype(np.float64)
    shift = np.zeros_like(scale) if s.shift is None else s.shift.astype(np.float64)
    w = producer.weight.astype(np.float64)
    w = w * scale.reshape((-1,) + (1,) * (w.ndim - 1))
    b = np.zeros_like(scale) if producer.bias is None else producer.bias.astype(np.float64)
    return dataclasses.replace(producer, weight=w.astype(np.float32), bias=(b * scale + shift).astype(np.float32),
                               outputs=s.outputs)


def fold_batchnorm(g: Graph, keep: frozenset[str] = frozenset()) -> Graph:
    """A new graph with every foldable float ScaleShift merged into the Dense/Conv that feeds it, except the
    ScaleShifts named in ``keep`` (each must be a ScaleShift of ``g``), which stay layers; the foldable ones kept
    are recorded in ``metadata[KEPT_KEY]`` (once, however often the graph is folded). ``g`` itself when nothing
    changes."""
    scale_shifts = {n.name for n in g.nodes if isinstance(n, ScaleShift)}
    unknown = sorted(set(keep) - scale_shifts)
    if unknown:
        raise IRError(f"fold_batchnorm: graph '{g.name}' has no ScaleShift '{unknown[0]}' to keep (its ScaleShifts: "
                      f"{', '.join(sorted(scale_shifts)) or 'none'})")
    producers = {n.output: n for n in g.nodes}
    foldable = {s.name: producers[s.inputs[0]] for s in g.nodes
                if isinstance(s, ScaleShift) and s.inputs[0] in producers and _foldable(g, producers[s.inputs[0]], s)}
    fold = {s: p for s, p in foldable.items() if s not in keep}
    recorded = {r["scale_shift"] for r in g.metadata.get(KEPT_KEY, [])}
    kept = [{"scale_shift": s, "after": p.name} for s, p in foldable.items() if s in keep and s not in recorded]
    if not fold and not kept:
        return g
    into = {p.name: s for s in g.nodes if s.name in fold for p in (fold[s.name],)}
    out = g.copy()
    nodes, tensors = [], dict(out.tensors)
    for n in out.nodes:
        if n.name in fold:
            continue
        if n.name in into:
            s = into[n.name]
            del tensors[n.output]
            n = _folded(n, s)
        nodes.append(n)
    out.nodes, out.tensors = nodes, tensors
    if fold:
        out.metadata[FOLDED_KEY] = out.metadata.get(FOLDED_KEY, []) + [
            {"scale_shift": s, "into": p.name} for s, p in fold.items()]
    if kept:
        out.metadata[KEPT_KEY] = out.metadata.get(KEPT_KEY, []) + kept
    return out
