"""--softmax argmax: a classifier's Softmax head becomes the ArgMax of its logits."""
from __future__ import annotations

import numpy as np
import pytest

from bitforge.toolchain import emulate, ir
from bitforge.toolchain.fixed import parse_type
from bitforge.toolchain.passes.heads import ARGMAX_KEY, HeadError, argmax_head, index_type


def _classifier() -> ir.Graph:
    rng = np.random.default_rng(0)
    fc = ir.Dense("fc", ("x",), ("logits",), weight=rng.normal(size=(5, 4)).astype(np.float32))
    sm = ir.Softmax("softmax", ("logits",), ("y",))
    t = {n: ir.TensorSpec(n, s) for n, s in (("x", (4,)), ("logits", (5,)), ("y", (5,)))}
    return ir.validate(ir.Graph("clf", ["x"], ["y"], t, [fc, sm]))


def test_the_argmax_head_decides_as_the_softmax_does():
    g = _classifier()
    h = ir.validate(argmax_head(g))
    assert [n.OP for n in h.nodes] == ["Dense", "ArgMax"] and h.metadata[ARGMAX_KEY] == ["softmax"]
    assert h.tensors["y"].shape == (1,)
    x = np.random.default_rng(1).normal(size=(500, 4)).astype(np.float32)
    probs = emulate.run(g, x)["y"]
    assert np.array_equal(emulate.run(h, x)["y"][:, 0], np.argmax(probs, axis=1))


def test_a_fixed_point_head_gets_an_integer_index_type():
    x = ir.TensorSpec("x", (10,), parse_type("fixed<8,3>"))
    sm = ir.Softmax("sm", ("x",), ("y",))
    g = ir.Graph("s", ["x"], ["y"], {"x": x, "y": ir.TensorSpec("y", (10,), parse_type("ufixed<8,1>"))}, [sm])
    h = argmax_head(g)
    assert h.tensors["y"].dtype == index_type(10) == parse_type("ufixed<4,4>")


def test_a_model_without_a_softmax_output_is_refused_with_what_it_ends_with():
    g = _classifier()
    g.nodes, g.outputs = g.nodes[:1], ["logits"]
    with pytest.raises(HeadError, match=r"outputs are 'logits' \(Dense\)"):
        argmax_head(g)
