"""BatchNorm folding: a float ScaleShift after a Dense or Conv becomes part of that layer's weights."""
from __future__ import annotations

import numpy as np
import pytest

from bitforge.toolchain import emulate, ir
from bitforge.toolchain.passes.batchnorm import FOLDED_KEY, KEPT_KEY, fold_batchnorm

RNG = np.random.default_rng(3)


def _f(*shape) -> np.ndarray:
    return RNG.normal(0, 1, shape).astype(np.float32)


def _bn(name: str, x: str, y: str, c: int) -> ir.ScaleShift:
    return ir.ScaleShift(name, (x,), (y,), scale=_f(c), shift=_f(c))


def _conv_bn(bias: bool) -> ir.Graph:
    conv = ir.Conv("conv", ("x",), ("h",), weight=_f(4, 2, 3), bias=_f(4) if bias else None, stride=(1,),
                   padding=(1, 1), dilation=(1,))
    t = {n: ir.TensorSpec(n, s) for n, s in (("x", (2, 6)), ("h", (4, 6)), ("y", (4, 6)))}
    return ir.validate(ir.Graph("cb", ["x"], ["y"], t, [conv, _bn("bn", "h", "y", 4)]))


@pytest.mark.parametrize("bias", [True, False])
def test_conv_then_batchnorm_folds_into_one_conv_with_the_same_outputs(bias):
    g = _conv_bn(bias)
    folded = ir.validate(fold_batchnorm(g))
    assert [n.OP for n in folded.nodes] == ["Conv"] and folded.outputs == ["y"]
    assert folded.metadata[FOLDED_KEY] == [{"scale_shift": "bn", "into": "conv"}]
    x = _f(50, 2, 6)
    # float32 both ways, the folded weights rounded once to float32: a few ulps of the outputs' size.
    np.testing.assert_allclose(emulate.run(folded, x)["y"], emulate.run(g, x)["y"], rtol=1e-5, atol=1e-5)
    assert [n.OP for n in g.nodes] == ["Conv", "ScaleShift"], "the pass must not change its input graph"


def test_dense_then_batchnorm_folds():
    fc = ir.Dense("fc", ("x",), ("h",), weight=_f(3, 5), bias=_f(3))
    t = {n: ir.TensorSpec(n, s) for n, s in (("x", (5,)), ("h", (3,)), ("y", (3,)))}
    g = ir.validate(ir.Graph("db", ["x"], ["y"], t, [fc, _bn("bn", "h", "y", 3)]))
    folded = fold_batchnorm(g)
    x = _f(40, 5)
    assert [n.OP for n in folded.nodes] == ["Dense"]
    np.testing.assert_allclose(emulate.run(folded, x)["y"], emulate.run(g, x)["y"], rtol=1e-5, atol=1e-5)


def test_a_batchnorm_that_cannot_fold_stays_a_scale_shift():
    # The conv output is read twice (by the BatchNorm and by a ReLU that is a graph output): folding would
    # change what the ReLU sees.
    g = _conv_bn(True)
    g.nodes.append(ir.ReLU("relu", ("h",), ("r",)))
    g.tensors["r"] = ir.TensorSpec("r", (4, 6))
    g.outputs.append("r")
    assert [n.OP for n in fold_batchnorm(ir.validate(g)).nodes] == ["Conv", "ScaleShift", "ReLU"]
    # A BatchNorm straight on the input has no layer to fold into.
    t = {"x": ir.TensorSpec("x", (3,)), "y": ir.TensorSpec("y", (3,))}
    alone = ir.validate(ir.Graph("bn", ["x"], ["y"], t, [_bn("bn", "x", "y", 3)]))
    assert fold_batchnorm(alone) is alone


# -- keep: the BatchNorms hls4ml keeps as layers --------------------------------------------------------------

def _two_blocks() -> ir.Graph:
    """Conv -> BatchNorm -> ReLU -> Reshape -> Dense -> BatchNorm: two foldable BatchNorms."""
    g = _conv_bn(True)
    fc = ir.Dense("fc", ("f",), ("d",), weight=_f(3, 24), bias=_f(3))
    g.nodes += [ir.ReLU("relu", ("y",), ("r",)), ir.Reshape("flat", ("r",), ("f",)), fc, _bn("fcbn", "d", "z", 3)]
    g.tensors.update({n: ir.TensorSpec(n, s) for n, s in (("r", (4, 6)), ("f", (24,)), ("d", (3,)), ("z", (3,)))})
    g.outputs = ["z"]
    return ir.validate(g)


def test_a_kept_batchnorm_stays_a_layer_and_is_recorded_once():
    g = _two_blocks()
    out = ir.validate(fold_batchnorm(g, keep=frozenset({"bn"})))
    assert [n.OP for n in out.nodes] == ["Conv", "ScaleShift", "ReLU", "Reshape", "Dense"]
    for name, arrays in (("bn", ("scale", "shift")), ("conv", ("weight", "bias"))):  # untouched: computed as before
        assert all(np.array_equal(getattr(out.node(name), a), getattr(g.node(name), a)) for a in arrays)
    assert out.metadata[FOLDED_KEY] == [{"scale_shift": "fcbn", "into": "fc"}]
    assert out.metadata[KEPT_KEY] == [{"scale_shift": "bn", "after": "conv"}]
    x = _f(30, 2, 6)
    np.testing.assert_allclose(emulate.run(out, x)["z"], emulate.run(g, x)["z"], rtol=1e-5, atol=1e-5)
    # compile folds twice (once to type the graph, once in prepare): the second fold changes nothing
    assert fold_batchnorm(out, keep=frozenset({"bn"})) is out
    both = fold_batchnorm(g, keep=frozenset({"bn", "fcbn"}))
    assert [n.OP for n in both.nodes] == [n.OP for n in g.nodes] and FOLDED_KEY not in both.metadata
    assert [r["scale_shift"] for r in both.metadata[KEPT_KEY]] == ["bn", "fcbn"]
    assert KEPT_KEY not in fold_batchnorm(g).metadata


def test_keep_names_only_scale_shifts_of_the_graph():
    # A BatchNorm that cannot fold may be kept too (nothing to record); a name that is no ScaleShift is an error.
    alone = _conv_bn(True)
    alone.outputs = ["h", "y"]
    assert fold_batchnorm(ir.validate(alone), keep=frozenset({"bn"})) is alone
    with pytest.raises(ir.IRError, match="graph 'cb' has no ScaleShift 'conv' to keep \\(its ScaleShifts: bn\\)"):
        fold_batchnorm(_conv_bn(True), keep=frozenset({"conv"}))
