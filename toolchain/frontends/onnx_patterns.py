"""Small subgraphs that exporters write for one activation, found before translation so each becomes one IR node.

PyTorch exports ``nn.GELU`` below opset 20 as ``Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5)``, ``nn.SiLU`` as
``Mul(x, Sigmoid(x))`` and ``nn.Hardswish`` below opset 14 as ``Mul(x, HardSigmoid(x))``. Taken node by node
these need element-wise products of two tensors, which bitforge has no op for; taken whole they are the ``gelu``
and ``silu`` tables and HardSwish. A pattern is only fused when its inner tensors feed nothing else (so no
intermediate value is lost) and its constants are the ones the definition needs (to float32 precision).
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Optional

import numpy as np
import onnx
from onnx import numpy_helper

__all__ = ["Fused", "PATTERNS", "find_fused", "constant_arrays"]

#: What a user reads in the supported-ops list.
PATTERNS = ("0.5*x*(1+Erf(x/sqrt(2))) (GELU, as PyTorch exports it below opset 20)", "x*Sigmoid(x) (SiLU)",
            "x*HardSigmoid(x) (HardSwish below opset 14)")


@dataclass(frozen=True)
class Fused:
    """One found pattern: ``kind`` ("gelu", "silu" or "hard_swish") of tensor ``x``. The IR node is emitted when
    the walk reaches node ``last`` (whose output is the pattern's), named after node ``head`` (the Erf, Sigmoid
    or HardSigmoid); every node in ``members`` is consumed by it."""

    kind: str
    x: str
    head: int
    last: int
    members: tuple[int, ...]


def constant_arrays(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """Initializers and ``Constant`` node values by tensor name (those a pattern's constants can be)."""
    out = {}
    for t in graph.initializer:
        try:
            out[t.name] = numpy_helper.to_array(t)
        except Exception:  # an undecodable initializer is reported by the translator, not here
            continue
    for n in graph.node:
        if n.op_type == "Constant" and len(n.attribute) == 1:
            a = n.attribute[0]
            if a.name == "value":
                out[n.output[0]] = numpy_helper.to_array(a.t)
            elif a.name == "value_float":
                out[n.output[0]] = np.array(a.f, np.float32)
    return out


class _Graph:
    """Producer and consumer lookups over the node list."""

    def __init__(self, nodes: list[onnx.NodeProto], consts: dict[str, np.ndarray], uses: Counter):
        self.nodes, self.consts, self.uses = nodes, consts, uses
        self.producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
        self.consumers: dict[str, list[int]] = {}
        for i, n in enumerate(nodes):
            for t in n.input:
                self.consumers.setdefault(t, []).append(i)

    def is_const(self, name: str, value: float) -> bool:
        a = self.consts.get(name)
        return (a is not None and a.size == 1 and a.dtype.kind == "f"
                and bool(np.isclose(float(a.ravel()[0]), value, rtol=2e-7, atol=0.0)))

    def only_consumer(self, tensor: str, op: str) -> Optional[int]:
        """The one node reading ``tensor`` when it is an ``op`` and nothing else (no graph output) reads it."""
        users = self.consumers.get(tensor, [])
        if self.uses[tensor] != 1 or len(users) != 1:
            return None
        i = users[0]
        n = self.nodes[i]
        return i if n.op_type == op and n.domain in ("", "ai.onnx") else None

    def other_input(self, i: int, tensor: str) -> Optional[str]:
        """The input of binary node ``i`` that is not ``tensor``."""
        ins = list(self.nodes[i].input)
        if len(ins) != 2 or tensor not in ins:
            return None
        return ins[1] if ins[0] == tensor else ins[0]

    def mul_by_const(self, i: Optional[int], value: float) -> Optional[str]:
        """When node ``i`` is ``Mul(t, value)`` (either order): ``t``."""
        if i is None or self.nodes[i].op_type != "Mul" or len(self.nodes[i].input) != 2:
            return None
        a, b = self.nodes[i].input
        return a if self.is_const(b, value) else b if self.is_const(a, value) else None


def _gelu(g: _Graph, e: int) -> Optional[Fused]:
    """From an Erf node: its input is x / sqrt 2, its output + 1 is multiplied by x and by 0.5 (in any order)."""
    t = g.nodes[e].input[0]
    p = g.producer.get(t)
    if p is None or g.only_consumer(t, "Erf") != e:
        return None
    pn = g.nodes[p]
    if pn.op_type == "Div" and len(pn.input) == 2 and g.is_const(pn.input[1], math.sqrt(2.0)):
        x = pn.input[0]
    else:
        x = g.mul_by_const(p, 1.0 / math.sqrt(2.0))
    if x is None:
        return None
    add = g.only_consumer(g.nodes[e].output[0], "Add")
    if add is None or not g.is_const(g.other_input(add, g.nodes[e].output[0]) or "", 1.0):
        return None
    a = g.nodes[add].output[0]
    m1 = g.only_consumer(a, "Mul")
    if m1 is None:
        return None
    other = g.other_input(m1, a)
    m1_out = g.nodes[m1].output[0]
    if other == x:  # (x * (1 + erf)) * 0.5: PyTorch's order
        m2 = g.only_consumer(m1_out, "Mul")
        if m2 is not None and g.is_const(g.other_input(m2, m1_out) or "", 0.5):
            return Fused("gelu", x, e, m2, (p, e, add, m1, m2))
        return None
    if other is not None and g.is_const(other, 0.5):  # ((1 + erf) * 0.5) * x
        m2 = g.only_consumer(m1_out, "Mul")
        if m2 is not None and g.other_input(m2, m1_out) == x:
            return Fused("gelu", x, e, m2, (p, e, add, m1, m2))
        return None
    h = g.producer.get(other or "")
    if h is not None and g.mul_by_const(h, 0.5) == x and g.uses[other] == 1:  # (x * 0.5) * (1 + erf)
        return Fused("gelu", x, e, m1, (p, e, add, h, m1))
    return None


def _times_input(g: _Graph, i: int, kind: str) -> Optional[Fused]:
    """``Mul(x, f(x))`` from the node ``i`` computing ``f(x)`` (Sigmoid, HardSigmoid)."""
    x = g.nodes[i].input[0]
    m = g.only_consumer(g.nodes[i].output[0], "Mul")
    if m is None or g.other_input(m, g.nodes[i].output[0]) != x:
        return None
    return Fused(kind, x, i, m, (i, m))


def find_fused(nodes: list[onnx.NodeProto], consts: dict[str, np.ndarray], uses: Counter) -> dict[int, Fused]:
    """Every pattern in ``nodes``, keyed by the index of each of its members. A node is in one pattern at most."""
    g = _Graph(nodes, consts, uses)
    found: dict[int, Fused] = {}
    finders = {"Erf": _gelu, "Sigmoid": lambda g_, i: _times_input(g_, i, "silu"),
               "HardSigmoid": lambda g_, i: _times_input(g_, i, "hard_swish")}
    for i, n in enumerate(nodes):
        finder = finders.get(n.op_type) if n.domain in ("", "ai.onnx") else None
        f = finder(g, i) if finder is not None else None
        if f is not None and not _taken(found, f.members):
            found.update({m: f for m in f.members})
    return found


def _taken(found: dict[int, Fused], members: Iterable[int]) -> bool:
    return any(m in found for m in members)
