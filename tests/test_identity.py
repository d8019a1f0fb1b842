"""arch_id and model_id: which weight files a reloadable-weights device may load, and which model it runs."""
import numpy as np

from bitforge.toolchain import identity, ir
from bitforge.toolchain.fixed import parse_type
from bitforge.toolchain.passes.precision import infer_precision


def dense_graph(seed: int = 1, name: str = "tiny", weight_type: str = "fixed<6,1,RND_CONV,SAT>") -> ir.Graph:
    rng = np.random.default_rng(seed)
    dense = ir.Dense("d", ("xq",), ("y",), weight=rng.integers(-32, 32, (3, 4)), bias=rng.integers(-100, 100, 3),
                     weight_type=parse_type(weight_type), bias_type=parse_type("fixed<10,4,RND_CONV,SAT>"))
    g = ir.sequential(name, ir.TensorSpec("x", (4,), None), [
        (ir.Quantize("q", ("x",), ("xq",)), ir.TensorSpec("xq", (4,), parse_type("fixed<6,2,RND_CONV,SAT>"))),
        (dense, ir.TensorSpec("y", (3,), parse_type("fixed<5,2,RND_CONV,SAT>")))])
    g.metadata["input_range"] = [-2.0, 2.0]
    g.metadata["seed"] = seed
    return ir.validate(infer_precision(g))


def test_other_weights_keep_the_architecture_and_change_the_model():
    a, b = dense_graph(1), dense_graph(2)
    assert identity.arch_id(a) == identity.arch_id(b)
    assert identity.model_id(a) != identity.model_id(b)


def test_name_and_metadata_are_not_architecture():
    a, b = dense_graph(1, name="tiny"), dense_graph(1, name="other")
    b.metadata["source"] = "somewhere.onnx"
    assert identity.arch_id(a) == identity.arch_id(b)
    assert identity.model_id(a) == identity.model_id(b)


def test_a_parameter_type_is_architecture():
    assert identity.arch_id(dense_graph(1)) != identity.arch_id(dense_graph(1, weight_type="fixed<7,1,RND_CONV,SAT>"))


def test_one_changed_code_changes_the_model():
    a = dense_graph(1)
    b = a.copy()
    node = b.node("d")
    node.weight = node.weight.copy()
    node.weight[2, 3] += 1
    assert identity.arch_id(a) == identity.arch_id(b)
    assert identity.model_id(a) != identity.model_id(b)


def test_int64_and_object_arrays_of_the_same_codes_are_the_same_model():
    a = dense_graph(1)
    b = a.copy()
    b.node("d").weight = b.node("d").weight.astype(object)
    assert identity.model_id(a) == identity.model_id(b)


def test_survives_save_and_load(tmp_path):
    a = dense_graph(1)
    ir.save(a, tmp_path)
    b = ir.load(tmp_path)
    assert (identity.arch_id(b), identity.model_id(b)) == (identity.arch_id(a), identity.model_id(a))
