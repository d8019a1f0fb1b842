"""Fold a BatchNorm (a float ``ScaleShift``) into the Dense or Conv before it.

``y = scale * (W x + b) + shift = (scale W) x + (scale b + shift)``, per output channel: the layer keeps one
multiply per weight and the normalisation costs nothing in hardware. Folding happens on the float graph,
before quantization, so the folded weights are what gets quantized (quantizing W and then scaling would
round twice). A ScaleShift that cannot be folded (its input has other readers, comes from another op, or is
a graph output) stays in the graph as a per-channel op of its own.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..ir import Conv, Dense, Graph, Node, ScaleShift

__all__ = ["fold_batchnorm", "FOLDED_KEY"]

#: ``metadata[FOLDED_KEY]``: ``[{"scale_shift": name, "into": name}, ...]``, what was folded where.
FOLDED_KEY = "folded_batchnorm"


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


def fold_batchnorm(g: Graph) -> Graph:
    """A new graph with every foldable float ScaleShift merged into the Dense/Conv that feeds it."""
    producers = {n.output: n for n in g.nodes}
    fold = {s.name: producers[s.inputs[0]] for s in g.nodes
            if isinstance(s, ScaleShift) and s.inputs[0] in producers and _foldable(g, producers[s.inputs[0]], s)}
    if not fold:
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
    out.metadata[FOLDED_KEY] = out.metadata.get(FOLDED_KEY, []) + [
        {"scale_shift": s, "into": p.name} for s, p in fold.items()]
    return out
