"""Classifier heads: a Softmax whose only use is the decision becomes an ArgMax.

Softmax is strictly increasing in each logit with the others fixed, so the largest probability sits where the
largest logit does: ``argmax(softmax(x)) = argmax(x)``. A classifier that only needs the class (a trigger, a
keyword spotter) then drops the exp and reciprocal tables, the multipliers and the sum, and its output is one
small integer instead of a vector of probabilities. On ties the first index wins in both models; the fixed-point
softmax could also create ties its logits did not have (two close probabilities rounding to the same code), which
the ArgMax form avoids.
"""
from __future__ import annotations


from ..errors import BitforgeError
from ..fixed import FixedType, clog2
from ..ir import ArgMax, Graph, Softmax, TensorSpec

__all__ = ["HeadError", "argmax_head", "index_type", "ARGMAX_KEY"]

#: ``metadata[ARGMAX_KEY]``: the Softmax nodes replaced, by name.
ARGMAX_KEY = "argmax_head"


class HeadError(BitforgeError):
    """A model whose head cannot be replaced as asked (no Softmax at an output)."""


def index_type(n: int) -> FixedType:
    """The unsigned integer type of the indices 0..n-1."""
    bits = max(1, clog2(n))
    return FixedType(bits, bits, signed=False)


def argmax_head(g: Graph) -> Graph:
    """Every Softmax that produces a graph output and feeds nothing else becomes an ArgMax of its input."""
    heads = [n for n in g.nodes if isinstance(n, Softmax) and n.output in g.outputs and not g.consumers(n.output)]
    if not heads:
        found = ", ".join(f"'{t}' ({next((n.OP for n in g.nodes if n.output == t), 'input')})" for t in g.outputs)
        raise HeadError(f"graph '{g.name}': --softmax argmax replaces a Softmax at the model's output, but the "
                        f"outputs are {found}; drop the option or end the model with a Softmax")
    out = g.copy()
    for s in heads:
        x = out.tensors[s.inputs[0]]
        spec = TensorSpec(s.output, x.shape[:-1] + (1,), None if x.is_float else index_type(x.shape[-1]))
        out.tensors[s.output] = spec
        out.nodes[[n.name for n in out.nodes].index(s.name)] = ArgMax(s.name, s.inputs, s.outputs)
    out.metadata[ARGMAX_KEY] = [s.name for s in heads]
    return out
