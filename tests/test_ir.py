"""IR: save/load round trip and validate() naming the node and the problem."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from bitforge.toolchain import emulate, ir
from bitforge.toolchain.fixed import parse_type

from conftest import small_graph


def test_save_load_round_trip_is_identical(graph, tmp_path):
    ir.save(graph, tmp_path)
    back = ir.load(tmp_path)
    assert ir.to_json(back) == ir.to_json(graph)
    for a, b in zip(graph.nodes, back.nodes):
        for k, arr in a.array_fields().items():
            got = b.array_fields()[k]
            assert got.dtype == arr.dtype and np.array_equal(got, arr), (a.name, k)
    x = np.random.default_rng(1).uniform(-3, 3, size=(64, 4)).astype(np.float32)
    assert np.array_equal(emulate.run(graph, x)["y"], emulate.run(back, x)["y"])


def test_saved_files_are_byte_identical_across_saves(graph, tmp_path):
    ir.save(graph, tmp_path / "a") if (tmp_path / "a").mkdir() is None else None
    ir.save(graph, tmp_path / "b") if (tmp_path / "b").mkdir() is None else None
    for f in ("model.json", "weights.safetensors"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()


def test_types_are_stored_as_strings_with_modes(graph, tmp_path):
    ir.save(graph, tmp_path)
    doc = json.loads((tmp_path / "model.json").read_text())
    dense = next(n for n in doc["nodes"] if n["op"] == "Dense")
    assert dense["attributes"]["weight_type"] == "fixed<8,2,RND_CONV,SAT>"
    assert doc["tensors"][0]["dtype"] == "float32"


def _replace_node(g, name, **changes):
    g = g.copy()
    g.nodes = [dataclasses.replace(n, **changes) if n.name == name else n for n in g.nodes]
    return g


def test_validate_names_node_with_wrong_weight_shape(graph):
    bad = _replace_node(graph, "fc1", weight=np.zeros((6, 5), dtype=np.int64))
    with pytest.raises(ir.IRError, match=r"Dense 'fc1'.*features.*expected 5"):
        ir.validate(bad)


def test_validate_rejects_codes_outside_their_type(graph):
    w = graph.node("fc1").weight.copy()
    w[0, 0] = 1000
    with pytest.raises(ir.IRError, match=r"Dense 'fc1'.*outside fixed<8,2.*widen the type"):
        ir.validate(_replace_node(graph, "fc1", weight=w))


def test_validate_rejects_nan_in_float_weights():
    g = ir.sequential("f", ir.TensorSpec("x", (2,), None),
                      [(ir.Dense("d", ("x",), ("y",), weight=np.array([[np.nan, 1.0]], dtype=np.float32)),
                        ir.TensorSpec("y", (1,), None))])
    with pytest.raises(ir.IRError, match=r"Dense 'd'.*NaN"):
        ir.validate(g)


def test_validate_rejects_out_of_order_nodes(graph):
    g = graph.copy()
    g.nodes = [g.nodes[1], g.nodes[0]] + g.nodes[2:]
    with pytest.raises(ir.IRError, match=r"Dense 'fc1'.*input 'x' is not produced by an earlier node"):
        ir.validate(g)


def test_validate_accepts_accumulators_of_any_frac(graph):
    """hls4ml's accumulation (docs/ir.md) defines accumulators finer or coarser than frac(x) + frac(W) = 16."""
    for accum in ("fixed<32,12>", "fixed<16,6,RND,SAT>"):
        assert ir.validate(_replace_node(graph, "fc1", accum_type=parse_type(accum))).node("fc1").accum_type.frac \
            == parse_type(accum).frac


def test_validate_rejects_wrong_kan_coefficient_count(graph):
    c = graph.node("kan").coeffs[:, :, :7]
    with pytest.raises(ir.IRError, match=r"KANLayer 'kan'.*G \+ k.*expected 8, found 7"):
        ir.validate(_replace_node(graph, "kan", coeffs=c))


def test_load_reports_missing_files(tmp_path):
    with pytest.raises(ir.IRError, match=r"model.json: missing"):
        ir.load(tmp_path)


def test_load_reports_foreign_json(graph, tmp_path):
    ir.save(graph, tmp_path)
    (tmp_path / "model.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(ir.IRError, match=r"not a bitforge IR file"):
        ir.load(tmp_path)


def test_load_reports_truncated_weights(graph, tmp_path):
    ir.save(graph, tmp_path)
    data = (tmp_path / "weights.safetensors").read_bytes()
    (tmp_path / "weights.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ir.IRError, match=r"weights.safetensors: cannot read"):
        ir.load(tmp_path)


def test_copy_does_not_share_arrays():
    g = small_graph()
    c = g.copy()
    c.node("fc1").weight[0, 0] += 1
    assert g.node("fc1").weight[0, 0] != c.node("fc1").weight[0, 0]
