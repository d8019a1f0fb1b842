"""basis_impl "closed_form": the KAN basis arithmetic of the closed-form circuit, in the golden model.

The reference here is independent of bspline's integer polynomials: the textbook uniform blending functions
(arXiv 2602.02056, docs/references.md) evaluated with exact rationals, floored for m >= 1, b_0 completing the row.
"""
from __future__ import annotations

import dataclasses
import json
import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from bitforge.models.kan import KANError, KANLayer
from bitforge.models.quant import InputQuant
from bitforge.models.recipes import get_recipe
from bitforge.toolchain import emulate, fixed, ir
from bitforge.toolchain.backends.onnx_backend import run_onnxruntime, to_onnx
from bitforge.toolchain.bspline import basis_table, index_params
from bitforge.toolchain.fixed import FixedType, parse_type
from bitforge.toolchain.frontends.torch_frontend import from_torch
from bitforge.toolchain.passes.precision import infer_precision
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

X = parse_type("fixed<16,6,RND_CONV,SAT>")
BASIS = parse_type("ufixed<13,1,RND_CONV,SAT>")


def blending(k: int, m: int, u: Fraction) -> Fraction:
    """Uniform B-spline blending functions b_m(u), m = 0..k (b_k(u) = u^k / k!)."""
    v = 1 - u
    table = {
        1: [v, u],
        2: [v ** 2 / 2, (-2 * u ** 2 + 2 * u + 1) / 2, u ** 2 / 2],
        3: [v ** 3 / 6, (3 * u ** 3 - 6 * u ** 2 + 4) / 6, (-3 * u ** 3 + 3 * u ** 2 + 3 * u + 1) / 6, u ** 3 / 6],
    }
    return table[k][m]


def reference_row(k: int, u_bits: int, frac: int, uc: int) -> list[int]:
    u = Fraction(uc, 1 << u_bits)
    rest = [math.floor(blending(k, m, u) * (1 << frac)) for m in range(1, k + 1)]
    return [(1 << frac) - sum(rest)] + rest


def basis_of_frac(frac: int) -> FixedType:
    return FixedType(frac + 1, 1, signed=False)


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("u_bits,frac", [(1, 0), (4, 12), (7, 5), (10, 12), (3, 16), (6, 30)])
def test_closed_form_table_is_the_floor_of_the_exact_bases_completed_by_b0(k, u_bits, frac):
    table = basis_table(k, u_bits, basis_of_frac(frac), impl="closed_form")
    want = np.array([reference_row(k, u_bits, frac, uc) for uc in range(1 << u_bits)], dtype=np.int64)
    assert table.shape == (1 << u_bits, k + 1)
    np.testing.assert_array_equal(table, want)


@settings(max_examples=40, deadline=None)
@given(k=st.sampled_from([1, 2, 3]), u_bits=st.integers(1, 9), frac=st.integers(0, 24))
def test_closed_form_rows_sum_to_one_and_b0_never_falls_below_the_exact_b0(k, u_bits, frac):
    table = basis_table(k, u_bits, basis_of_frac(frac), impl="closed_form")
    one = 1 << frac
    assert (table.sum(axis=1) == one).all()
    assert table.min() >= 0
    for uc in range(1 << u_bits):
        exact = [blending(k, m, Fraction(uc, 1 << u_bits)) * one for m in range(k + 1)]
        assert table[uc, 0] >= exact[0]
        assert all(exact[m] - 1 < table[uc, m] <= exact[m] for m in range(1, k + 1))


def test_closed_form_differs_from_the_rounded_table_by_less_than_k_lsbs():
    closed = basis_table(3, 10, BASIS, impl="closed_form")
    rounded = basis_table(3, 10, BASIS)
    assert 0 < np.abs(closed - rounded).max() <= 3  # not the same table, but the same function


def test_unknown_impl_and_orders_without_a_closed_form_are_refused():
    with pytest.raises(ValueError, match="unknown basis_impl 'rom'.*table, closed_form"):
        basis_table(3, 4, BASIS, impl="rom")
    with pytest.raises(ValueError, match="orders \\[1, 2, 3\\], not 4"):
        basis_table(4, 4, BASIS, impl="closed_form")


# -- the IR field -------------------------------------------------------------------------------------

def kan_graph(basis_impl: str = "closed_form", order: int = 3, seed: int = 0, n_in: int = 2, n_out: int = 2,
              grid=(-2.0, 2.0), grid_size: int = 5) -> ir.Graph:
    rng = np.random.default_rng(seed)
    lo, mult, shift, u_bits = index_params(*grid, grid_size, X)
    node = ir.KANLayer("kan", ("x",), ("y",), coeffs=fixed.quantize(rng.normal(size=(n_out, n_in, grid_size + order)), X),
                       grid_lo=grid[0], grid_hi=grid[1], grid_size=grid_size, order=order, coeff_type=X,
                       basis_type=BASIS, u_bits=u_bits, index_lo=lo, index_mult=mult, index_shift=shift,
                       basis_impl=basis_impl)
    g = ir.Graph("kan", ["x"], ["y"], {"x": ir.TensorSpec("x", (n_in,), X), "y": ir.TensorSpec("y", (n_out,), X)},
                 [node])
    return infer_precision(ir.validate(g))


def test_validation_names_the_node_for_an_unknown_basis_impl():
    g = kan_graph()
    g.nodes[0].basis_impl = "lookup"
    with pytest.raises(ir.IRError, match="KANLayer 'kan': unknown basis_impl 'lookup'; expected one of table, "
                                         "closed_form"):
        ir.validate(g)


def test_validation_refuses_closed_form_for_quartic_splines():
    g = kan_graph(basis_impl="table", order=4)
    g.nodes[0].basis_impl = "closed_form"
    with pytest.raises(ir.IRError, match="KANLayer 'kan': basis_impl 'closed_form' exists for spline orders "
                                         "\\[1, 2, 3\\], not 4"):
        ir.validate(g)


def test_basis_impl_survives_save_and_load(tmp_path):
    ir.save(kan_graph(), tmp_path)
    assert json.loads((tmp_path / "model.json").read_text())["nodes"][0]["attributes"]["basis_impl"] == "closed_form"
    assert ir.load(tmp_path).nodes[0].basis_impl == "closed_form"


def test_files_written_before_basis_impl_load_as_the_rounded_table(tmp_path):
    ir.save(kan_graph(), tmp_path)
    doc = json.loads((tmp_path / "model.json").read_text())
    del doc["nodes"][0]["attributes"]["basis_impl"]
    (tmp_path / "model.json").write_text(json.dumps(doc))
    assert ir.load(tmp_path).nodes[0].basis_impl == "table"


# -- every consumer reads the chosen table -------------------------------------------------------------

def test_golden_model_reads_each_basis_weight_from_the_closed_form_arithmetic():
    """With coefficient j set to one LSB and the others zero, the layer's sum is b_(j - cell)(u) itself."""
    g = kan_graph(n_in=1, n_out=1, grid=(-2.5, 2.5))
    n = g.nodes[0]
    n.coeffs = np.zeros_like(n.coeffs)
    n.coeffs[0, 0, 4] = 1
    n.accum_type = FixedType(24, 24 - X.frac - BASIS.frac)  # wide, so the sum reaches the output exactly
    y_type = FixedType(24, 24 - X.frac - BASIS.frac)
    g.tensors["y"] = ir.TensorSpec("y", (1,), y_type)
    x = np.arange(X.min_code, X.max_code + 1, 97, dtype=np.int64)[:, None]
    got = emulate.run(g, x)["y"][:, 0]
    s = np.clip(x[:, 0] - n.index_lo, 0, (5 << n.u_bits) - 1)  # index_mult 1: one cell = 2**u_bits LSBs
    assert (n.index_mult, n.index_shift) == (1, 0)
    want = [reference_row(3, n.u_bits, BASIS.frac, int(si) & ((1 << n.u_bits) - 1))[4 - (int(si) >> n.u_bits)]
            if 0 <= 4 - (int(si) >> n.u_bits) <= 3 else 0 for si in s]
    np.testing.assert_array_equal(got, want)


def test_onnx_backend_matches_the_golden_model_on_closed_form_bases():
    g = kan_graph(seed=3)
    x = np.random.default_rng(1).integers(X.min_code, X.max_code + 1, size=(2000, 2))
    gold = emulate.run(g, x)["y"]
    assert not np.array_equal(gold, emulate.run(dataclasses.replace(g, nodes=[
        dataclasses.replace(g.nodes[0], basis_impl="table")]), x)["y"]), "the two tables should differ somewhere"
    np.testing.assert_array_equal(run_onnxruntime(to_onnx(g), x)["y_code"], gold)


def test_inferred_accumulator_holds_every_closed_form_sum():
    g = kan_graph(seed=5)
    n = g.nodes[0]
    x = np.random.default_rng(2).integers(X.min_code, X.max_code + 1, size=(5000, 2))
    wide = dataclasses.replace(n, accum_type=FixedType(60, 60 - n.accum_type.frac))
    y_wide = FixedType(60, 60 - n.accum_type.frac)
    g2 = ir.Graph("w", ["x"], ["y"], {"x": g.tensors["x"], "y": ir.TensorSpec("y", (2,), y_wide)}, [wide])
    sums = emulate.run(g2, x)["y"]
    assert sums.min() >= n.accum_type.min_code and sums.max() <= n.accum_type.max_code


# -- PyTorch side and the kan-tracker recipe -----------------------------------------------------------

def test_torch_kan_layer_carries_basis_impl_into_the_ir():
    model = nn.Sequential(InputQuant(X), KANLayer(2, 1, basis_impl="closed_form", coeff_type=X, output_type=X))
    assert from_torch(model, torch.zeros(2, 2)).nodes[1].basis_impl == "closed_form"
    model[1].basis_impl_code.zero_()
    assert from_torch(model, torch.zeros(2, 2)).nodes[1].basis_impl == "table"


def test_torch_kan_layer_without_the_buffer_defaults_to_the_table():
    layer = KANLayer(2, 1, coeff_type=X, output_type=X)
    del layer._buffers["basis_impl_code"]  # a module pickled before basis_impl existed
    assert from_torch(nn.Sequential(InputQuant(X), layer), torch.zeros(2, 2)).nodes[1].basis_impl == "table"


def test_torch_kan_layer_refuses_closed_form_for_order_four():
    with pytest.raises(KANError, match="basis_impl 'closed_form' unsupported for order 4"):
        KANLayer(1, 1, order=4, basis_impl="closed_form")


def test_kan_tracker_grid_makes_the_index_a_bit_slice_with_closed_form_bases():
    recipe = get_recipe("kan-tracker")
    model = recipe.build()
    n = from_torch(model, recipe.example_input(4), "kan-tracker").nodes[1]
    assert (n.grid_lo, n.grid_hi, n.grid_size) == (-2.5, 2.5, 5)
    assert (n.index_mult, n.index_shift, n.u_bits) == (1, 0, X.frac)  # one cell = 1.0 = 2**10 LSBs
    assert n.basis_impl == "closed_form"
