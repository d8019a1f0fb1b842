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


def test_compile_softmax_argmax_keeps_the_recipe_decisions_and_reports_their_agreement(tmp_path):
    from bitforge.toolchain.compiler import CompileOptions, compile_model

    report = compile_model("digits-cnn", tmp_path / "out", CompileOptions(precision="8", vectors=500,
                                                                          softmax="argmax"))
    layers = report["graph"]["layers"]
    assert layers[-1]["op"] == "ArgMax" and not any(layer["op"] == "Softmax" for layer in layers)
    assert report["verification"]["golden_vs_onnxruntime"]["mismatches"] == 0
    out = next(iter(report["fidelity"]["sets"]["verification"]["outputs"].values()))
    assert 0.9 <= out["top1_agreement"] <= 1.0 and out["top1_compared"] > 0
    scores = report["task_scores"]
    assert scores["compiled"]["accuracy"] >= scores["reference"]["accuracy"] - 0.02
