"""bitforge.models: fake quantization, low-rank and KAN layers, data sets and recipes."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bitforge.models import (KANError, KANLayer, LowRankError, LowRankLinear, QuantLinear, RecipeError, fake_quant,
                             get_recipe, jet_like, list_recipes, t1_regime1)
from bitforge.models.kan import bspline_basis, grid_from_spec
from bitforge.models.quant import FAKE_QUANT_OP, InputQuant, fixed_type_of
from bitforge.models.recipes import weight_type_for
from bitforge.toolchain import fixed
from bitforge.toolchain.bspline import bspline_basis_float
from bitforge.toolchain.fixed import FixedType, Overflow, Rounding

ALL_MODES = list(itertools.product(Rounding, Overflow))
#: Shapes of type worth covering: ordinary, unsigned, 1 bit, negative integer bits, integer > width, wide.
SHAPES = [(8, 3, True), (8, 3, False), (1, 1, True), (1, 0, False), (5, -2, True), (6, 9, True), (40, 20, True)]


def _reference(x: np.ndarray, t: FixedType) -> np.ndarray:
    return fixed.to_float(fixed.quantize(x, t), t)


def _grid_with_ties(t: FixedType) -> np.ndarray:
    """Quarter-LSB steps over +-1024 LSBs (every tie and both neighbours of it), a coarse sweep over twice
    the type's range (overflow of wide types), and values far outside any range."""
    fine = np.arange(-4096, 4097) * (t.lsb / 4)
    span = max(abs(t.min_value), abs(t.max_value), t.lsb)
    coarse = np.linspace(-2 * span, 2 * span, 4097)
    huge = [1e30, -1e30, 3e38, -3e38, 0.0, -0.0]
    return np.concatenate([fine, np.nextafter(fine, np.inf), np.nextafter(fine, -np.inf), coarse, huge])


# -- fake_quant ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("rounding,overflow", ALL_MODES, ids=lambda m: m.value)
def test_fake_quant_equals_fixed_quantize_on_dense_grids_with_ties(rounding, overflow):
    for width, integer, signed in SHAPES:
        t = FixedType(width, integer, signed, rounding, overflow)
        x = _grid_with_ties(t)
        got = fake_quant(torch.from_numpy(x), t).numpy()
        np.testing.assert_array_equal(got, _reference(x, t), err_msg=str(t))


@settings(max_examples=300, deadline=None)
@given(
    x=st.lists(st.floats(allow_nan=False, allow_infinity=False, width=32), min_size=1, max_size=16),
    width=st.integers(1, 40), integer=st.integers(-6, 44), signed=st.booleans(),
    rounding=st.sampled_from(list(Rounding)), overflow=st.sampled_from(list(Overflow)),
)
def test_fake_quant_equals_fixed_quantize_property(x, width, integer, signed, rounding, overflow):
    t = FixedType(width, integer, signed, rounding, overflow)
    xs = np.asarray(x, dtype=np.float64)
    np.testing.assert_array_equal(fake_quant(torch.from_numpy(xs), t).numpy(), _reference(xs, t))


def test_fake_quant_keeps_float32_and_rounds_the_exact_value():
    t = FixedType(16, 6, True, "RND_CONV", "SAT")
    x = np.random.default_rng(0).normal(0, 10, 1000).astype(np.float32)
    got = fake_quant(torch.from_numpy(x), t)
    assert got.dtype == torch.float32
    np.testing.assert_array_equal(got.numpy(), _reference(x.astype(np.float64), t).astype(np.float32))


def test_fake_quant_turns_non_finite_values_into_nan():
    t = FixedType(8, 3, True, "RND", "SAT")
    got = fake_quant(torch.tensor([float("nan"), float("inf"), -float("inf"), 1.0]), t)
    assert torch.isnan(got[:3]).all() and got[3] == 1.0


@pytest.mark.parametrize("overflow", [Overflow.SAT, Overflow.SAT_SYM, Overflow.SAT_ZERO])
def test_ste_gradient_is_one_inside_the_range_and_zero_where_saturated(overflow):
    t = FixedType(6, 2, True, "RND_CONV", overflow)  # codes -32..31, values [-2, 1.9375]
    x = torch.tensor([-3.0, -2.0, -1.96, -0.5, 0.0, 1.0, 1.9375, 1.96, 2.5], dtype=torch.float64, requires_grad=True)
    fake_quant(x, t).sum().backward()
    lo = -t.max_code if overflow == Overflow.SAT_SYM else t.min_code
    codes = torch.round(x.detach() * 2 ** t.frac)  # no ties in this x, so any rounding gives these codes
    expected = ((codes >= lo) & (codes <= t.max_code)).double()
    assert expected.sum() not in (0, len(x))  # the case really has both regions
    torch.testing.assert_close(x.grad, expected, rtol=0, atol=0)


def test_ste_gradient_passes_everywhere_under_wrap():
    t = FixedType(4, 1, True, "TRN", "WRAP")
    x = torch.linspace(-5, 5, 41, requires_grad=True)
    fake_quant(x, t).sum().backward()
    assert torch.equal(x.grad, torch.ones_like(x))


def test_export_keeps_fake_quant_as_one_node_carrying_its_type():
    t = FixedType(12, 4, False, "RND_INF", "SAT_SYM")
    ep = torch.export.export(InputQuant(t), (torch.randn(3, 2),))
    calls = [n for n in ep.graph.nodes if n.op == "call_function"]
    assert [n.target for n in calls] == [FAKE_QUANT_OP]
    assert fixed_type_of(calls[0]) == t


def test_quant_linear_computes_with_quantized_weights_and_output():
    wt, ot = FixedType(6, 1, True, "RND_CONV", "SAT"), FixedType(10, 4, True, "RND", "SAT")
    torch.manual_seed(0)
    layer = QuantLinear(5, 3, weight_type=wt, bias_type=wt, output_type=ot).double()
    x = torch.randn(7, 5, dtype=torch.float64)
    w = torch.from_numpy(_reference(layer.weight.detach().numpy(), wt))
    b = torch.from_numpy(_reference(layer.bias.detach().numpy(), wt))
    expected = _reference((x @ w.T + b).numpy(), ot)
    np.testing.assert_array_equal(layer(x).detach().numpy(), expected)


def test_quant_linear_trains_its_float_weights_through_the_ste():
    layer = QuantLinear(4, 2, weight_type=FixedType(8, 2, True, "RND_CONV", "SAT"))
    layer(torch.randn(5, 4)).sum().backward()
    assert layer.weight.grad is not None and layer.weight.grad.abs().sum() > 0


# -- LowRankLinear --------------------------------------------------------------------------------------

def test_low_rank_from_linear_full_rank_reproduces_the_layer():
    torch.manual_seed(1)
    lin = torch.nn.Linear(6, 4)
    lr = LowRankLinear.from_linear(lin, rank=4)
    x = torch.randn(10, 6)
    torch.testing.assert_close(lr(x), lin(x), rtol=1e-5, atol=1e-5)


def test_low_rank_truncation_error_is_the_next_singular_value():
    """Eckart-Young: the best rank-r approximation misses W by sigma_{r+1} in spectral norm."""
    torch.manual_seed(2)
    lin = torch.nn.Linear(8, 6).double()
    s = torch.linalg.svdvals(lin.weight.detach())
    for r in (1, 3, 5):
        lr = LowRankLinear.from_linear(lin, rank=r)
        err = torch.linalg.matrix_norm(lin.weight.detach() - lr.u.detach() @ lr.v.detach(), ord=2)
        assert math.isclose(float(err), float(s[r]), rel_tol=1e-9)


def test_low_rank_rejects_a_rank_the_shape_cannot_have():
    with pytest.raises(LowRankError, match=r"rank 5 is outside 1\.\.min\(in, out\) = 1\.\.4"):
        LowRankLinear(4, 6, rank=5)


# -- KAN layer ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("order", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("grid_size", [1, 5, 8])
def test_kan_basis_matches_bspline_basis_float(order, grid_size):
    x = np.concatenate([np.linspace(-3.0, 3.0, 601), [-2.0, 2.0, -1.2, 0.4, 1.9999999]])  # outside: clamped
    ref = bspline_basis_float(x, -2.0, 2.0, grid_size, order)
    np.testing.assert_allclose(bspline_basis(torch.from_numpy(x), -2.0, 2.0, grid_size, order).numpy(), ref,
                               rtol=0, atol=1e-12)
    got32 = bspline_basis(torch.from_numpy(x.astype(np.float32)), -2.0, 2.0, grid_size, order).numpy()
    np.testing.assert_allclose(got32, ref, rtol=0, atol=2e-6)  # float32 position (x - lo) / h


def test_kan_basis_is_a_partition_of_unity_with_k_plus_1_active_bases():
    x = torch.linspace(-1.5, 1.5, 1001, dtype=torch.float64)
    b = bspline_basis(x, -1.0, 1.0, 7, 3)
    torch.testing.assert_close(b.sum(-1), torch.ones_like(x), rtol=0, atol=1e-14)
    assert (b >= 0).all() and int((b > 1e-15).sum(-1).max()) <= 4


def test_kan_layer_output_is_the_coefficient_weighted_reference_basis():
    torch.manual_seed(3)
    kan = KANLayer(3, 2, grid_size=4, order=2, grid_range=(-0.5, 1.5)).double()
    x = torch.rand(20, 3, dtype=torch.float64) * 3 - 1
    ref = np.einsum("nij,oij->no", bspline_basis_float(x.numpy(), -0.5, 1.5, 4, 2), kan.coeffs.detach().numpy())
    np.testing.assert_allclose(kan(x).detach().numpy(), ref, rtol=0, atol=1e-12)


def test_kan_layer_is_differentiable_in_its_input_inside_the_grid():
    kan = KANLayer(1, 1, grid_size=5, order=3).double()
    x = torch.tensor([[0.13]], dtype=torch.float64, requires_grad=True)
    kan(x).sum().backward()
    eps = 1e-6
    numeric = (kan(x.detach() + eps) - kan(x.detach() - eps)).item() / (2 * eps)
    assert math.isclose(x.grad.item(), numeric, rel_tol=1e-6, abs_tol=1e-9)


def test_kan_grid_spec_survives_dtype_casts_bit_exactly():
    kan = KANLayer(2, 2, grid_size=6, order=2, grid_range=(-0.3, 0.7))
    for cast in (kan.float, kan.half, kan.double):
        assert grid_from_spec(cast().grid_spec) == (-0.3, 0.7, 6, 2)


@pytest.mark.parametrize("kwargs,match", [
    (dict(grid_range=(1.0, 1.0)), "empty"), (dict(grid_size=0), "grid_size"), (dict(order=6), "order 6"),
])
def test_kan_layer_rejects_configurations_the_ir_cannot_hold(kwargs, match):
    with pytest.raises(KANError, match=match):
        KANLayer(1, 1, **kwargs)


# -- data sets ------------------------------------------------------------------------------------------

def test_jet_like_is_deterministic_per_seed_and_shaped_like_the_benchmark():
    x, y = jet_like(500, seed=4)
    x2, y2 = jet_like(500, seed=4)
    x3, _ = jet_like(500, seed=5)
    assert np.array_equal(x, x2) and np.array_equal(y, y2) and not np.array_equal(x, x3)
    assert x.shape == (500, 16) and x.dtype == np.float32 and y.dtype == np.int64
    assert set(np.unique(y)) == set(range(5))
    assert np.abs(x).max() <= 4.0 and np.abs(x).std() > 0.5


def test_t1_regime1_is_the_documented_function():
    x, y = t1_regime1(300, seed=2)
    assert x.shape == y.shape == (300, 1) and x.min() >= -2.0 and x.max() <= 2.0
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(y, np.sin(x64) + 0.3 * x64 ** 2, rtol=1e-6)
    assert np.array_equal(t1_regime1(300, seed=2)[0], x)


# -- recipes -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def jet_model():
    return get_recipe("jet-mlp").build(seed=0)


def test_recipes_are_listed_and_unknown_names_list_the_known_ones():
    assert {"jet-mlp", "kan-tracker"} <= set(list_recipes())
    with pytest.raises(RecipeError, match="jet-mlp.*kan-tracker"):
        get_recipe("jet-cnn")


def test_recipe_build_is_deterministic(jet_model):
    again = get_recipe("jet-mlp").build(seed=0)
    a, b = jet_model.state_dict(), again.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_recipe_build_leaves_the_callers_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    get_recipe("kan-tracker").build(seed=7)
    assert torch.equal(torch.rand(3), expected)


def test_jet_mlp_is_accurate_well_above_chance(jet_model):
    assert get_recipe("jet-mlp").evaluate(jet_model)["accuracy"] > 0.8  # chance is 0.2


def test_jet_mlp_has_the_documented_layers_and_types(jet_model):
    act = FixedType(16, 6, True, "RND_CONV", "SAT")
    assert isinstance(jet_model[0], InputQuant) and jet_model[0].fixed_type == act
    layers = [m for m in jet_model if isinstance(m, QuantLinear)]
    assert [(m.in_features, m.out_features) for m in layers] == [(16, 64), (64, 32), (32, 32), (32, 5)]
    assert [type(m).__name__ for m in jet_model].count("ReLU") == 3
    for layer in layers:
        t = layer.weight_type
        assert (t.width, t.signed, t.rounding, t.overflow) == (8, True, Rounding.RND_CONV, Overflow.SAT)
        t = layer.output_type
        assert (t.width, t.signed, t.rounding, t.overflow) == (16, True, Rounding.RND_CONV, Overflow.SAT)
        assert layer.bias_type == act


def test_jet_mlp_output_types_are_the_narrowest_that_never_saturate_in_range(jet_model):
    """The compiler's own interval analysis is the judge: no precision warning for inputs in [-4, 4] (the
    default example prints none), and one integer bit fewer on any layer's output makes that layer saturate."""
    from bitforge.toolchain.frontends.torch_frontend import from_torch
    from bitforge.toolchain.passes.precision import check_precision, infer_precision

    recipe = get_recipe("jet-mlp")

    def warnings(model):
        g = from_torch(model, recipe.example_input(4), "jet-mlp")
        g.metadata["input_range"] = list(recipe.input_range)
        return check_precision(infer_precision(g))

    assert warnings(jet_model) == []
    layers = [m for m in jet_model if isinstance(m, QuantLinear)]
    assert layers[-1].output_type.integer > 6  # the fixed<16,6> of the recipe's first version saturated
    for i, layer in enumerate(layers):
        t = layer.output_type
        layer.output_type = t.with_(integer=t.integer - 1)  # same width: one integer bit for one frac bit
        try:
            found = warnings(jet_model)
        finally:
            layer.output_type = t
        assert [w.node for w in found][:1] == [f"dense_{2 * i + 1}"] and found[0].where == "output"


@pytest.mark.parametrize("peak,integer",
                         [(0.3, 1), (0.9, 1), (0.996, 1), (0.997, 2), (1.0, 2), (1.5, 2), (3.9, 3), (4.2, 4)])
def test_weight_type_for_picks_the_fewest_integer_bits_without_saturation(peak, integer):
    t = weight_type_for(torch.tensor([-0.1, peak, -peak / 2]))
    assert t.integer == integer
    assert fixed.quantize([peak], t.with_(overflow="WRAP"))[0] == fixed.quantize([peak], t)[0]  # fits as is
    if integer > 1:  # one bit fewer would saturate the peak
        fewer = t.with_(integer=integer - 1)
        assert fixed.to_float(fixed.quantize([peak], fewer), fewer)[0] < peak - fewer.lsb / 2


def test_kan_tracker_fits_its_target():
    recipe = get_recipe("kan-tracker")
    model = recipe.build()
    assert recipe.evaluate(model)["max_abs_error"] < 0.01
    assert recipe.input_range == (-2.0, 2.0) and model.input_range == (-2.0, 2.0)


def test_recipe_inputs_are_seeded_float32_samples():
    recipe = get_recipe("jet-mlp")
    x = recipe.example_input(6, seed=3)
    assert x.dtype == torch.float32 and x.shape == (6, 16)
    assert np.array_equal(recipe.calibration_data(6, seed=3), x.numpy())
