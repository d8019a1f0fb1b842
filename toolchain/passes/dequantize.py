"""``dequantize_graph``: a fixed-point graph back to the float graph it approximates.

Why: ``--precision`` re-targets a model that is already quantized (a recipe trained at 8/16 bits, a QDQ or
QONNX file) by going through the float graph its codes stand for; ``quantize_graph`` then chooses the new
types. The float weights are the exact real values of the codes (rounded to float32 only when a code is
wider than 24 bits).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .. import fixed
from ..ir import (
    Conv,
    Dense,
    Graph,
    KANLayer,
    LeakyReLU,
    LowRankDense,
    Node,
    Quantize,
    Requantize,
    ScaleShift,
    TensorSpec,
)

#: Which type field describes each array field of a node. (Table and Softmax keep their code tables: their float
#: rules compute the function itself.)
TYPE_OF_ARRAY = {
    Dense: {"weight": "weight_type", "bias": "bias_type"},
    LowRankDense: {"u": "u_type", "v": "v_type", "bias": "bias_type"},
    KANLayer: {"coeffs": "coeff_type"},
    Conv: {"weight": "weight_type", "bias": "bias_type"},
    ScaleShift: {"scale": "scale_type", "shift": "shift_type"},
    LeakyReLU: {"alpha": "alpha_type"},
}


def _float_node(n: Node) -> Node:
    arrays = TYPE_OF_ARRAY.get(type(n), {})
    changes = {}
    for field, type_field in arrays.items():
        a, t = getattr(n, field), getattr(n, type_field)
        if a is not None and t is not None:
            changes[field] = fixed.to_float(a, t).astype(np.float32)
    for f in dataclasses.fields(n):
        if f.name.endswith("_type"):
            changes[f.name] = None
    return dataclasses.replace(n, **changes)


def dequantize_graph(g: Graph) -> Graph:
    """Return a float graph: Quantize/Requantize nodes dropped, weights as float32 real values, no types.

    Afterwards every tensor is float32 and the graph computes what the fixed graph computes without
    rounding or saturation. A graph that is already float comes back as an unchanged copy.
    """
    alias: dict[str, str] = {}
    nodes = []
    for n in g.nodes:
        inputs = tuple(alias.get(t, t) for t in n.inputs)
        if isinstance(n, (Quantize, Requantize)):
            alias[n.output] = inputs[0]
            continue
        nodes.append(dataclasses.replace(_float_node(n), inputs=inputs))
    used = set(g.inputs) | {t for n in nodes for t in (*n.inputs, *n.outputs)}
    tensors = {name: TensorSpec(name, spec.shape, None) for name, spec in g.tensors.items() if name in used}
    metadata = dict(g.metadata)
    metadata.pop("precision", None)
    metadata["dequantized_from"] = g.name
    return Graph(g.name, list(g.inputs), [alias.get(t, t) for t in g.outputs], tensors, nodes, metadata)
