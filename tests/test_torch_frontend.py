"""PyTorch frontend: modules and .pt2 archives -> IR that the golden model runs like the torch module.

Exactness argument used below: a fake-quantized torch module run in float64 computes every layer's sum
exactly (codes of at most 16 + 8 bits, at most 64 terms: far below 2**53), then rounds it with the
same rule as the IR's requantize, so ``emulate`` must agree with it bit for bit as long as the
accumulators are wide enough not to overflow (we give them 30 integer bits). In float32 torch rounds
partial sums (they need up to ~31 significant bits), so there we allow a few output LSBs.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from bitforge.models import InputQuant, KANLayer, LowRankLinear, QuantLinear, get_recipe
from bitforge.toolchain import emulate, fixed, ir
from bitforge.toolchain.bspline import index_params
from bitforge.toolchain.fixed import FixedType
from bitforge.toolchain.frontends.torch_frontend import (DEFAULT_BASIS_TYPE, FrontendError, from_exported,
                                                         from_torch, load_pt2)

ACT = FixedType(16, 6, True, "RND_CONV", "SAT")
W8 = FixedType(8, 2, True, "RND_CONV", "SAT")


def wide_accumulators(g: ir.Graph) -> ir.Graph:
    """Accumulators at the exact frac with 30 integer bits: no overflow for these tests' inputs."""
    g = g.copy()
    wide = lambda frac: FixedType(frac + 30, 30)  # noqa: E731
    for n in g.nodes:
        x = g.tensors[n.input].dtype
        if x is None:
            continue
        if isinstance(n, ir.Dense):
            n.accum_type = wide(x.frac + n.weight_type.frac)
        elif isinstance(n, ir.LowRankDense):
            n.accum_v_type = wide(x.frac + n.v_type.frac)
            n.accum_type = wide(n.mid_type.frac + n.u_type.frac)
        elif isinstance(n, ir.KANLayer):
            n.accum_type = wide(n.coeff_type.frac + n.basis_type.frac)
    return ir.validate(g)


def torch64(module: nn.Module, x: np.ndarray) -> np.ndarray:
    """The module's output computed in float64 (on a copy: the caller's module keeps its dtype)."""
    import copy

    with torch.no_grad():
        return copy.deepcopy(module).double()(torch.from_numpy(x.astype(np.float64))).numpy()


def emulated(g: ir.Graph, x: np.ndarray) -> np.ndarray:
    return emulate.run_values(g, x)[g.outputs[0]]


def same_ir(a: ir.Graph, b: ir.Graph) -> bool:
    arrays_a, arrays_b = ir.arrays_of(a), ir.arrays_of(b)
    return (json.dumps(ir.to_json(a)) == json.dumps(ir.to_json(b)) and arrays_a.keys() == arrays_b.keys()
            and all(np.array_equal(arrays_a[k], arrays_b[k]) and arrays_a[k].dtype == arrays_b[k].dtype
                    for k in arrays_a))


@pytest.fixture(scope="module")
def jet():
    recipe = get_recipe("jet-mlp")
    model = recipe.build(seed=0)
    return recipe, model, from_torch(model, recipe.example_input(8), "jet-mlp")


@pytest.fixture(scope="module")
def kan():
    recipe = get_recipe("kan-tracker")
    model = recipe.build(seed=0)
    return recipe, model, from_torch(model, recipe.example_input(8), "kan-tracker")


# -- jet-mlp ------------------------------------------------------------------------------------------

def test_jet_mlp_becomes_a_typed_chain_of_ir_nodes(jet):
    _, model, g = jet
    assert [n.OP for n in g.nodes] == ["Quantize", "Dense", "ReLU", "Dense", "ReLU", "Dense", "ReLU", "Dense"]
    assert g.tensors[g.inputs[0]].dtype is None and g.tensors[g.inputs[0]].shape == (16,)
    assert g.tensors[g.nodes[0].output].dtype == ACT
    assert all(g.tensors[n.output].dtype == g.tensors[n.input].dtype for n in g.nodes if n.OP == "ReLU")
    dense = [n for n in g.nodes if isinstance(n, ir.Dense)]
    layers = [m for m in model if isinstance(m, QuantLinear)]
    for n, m in zip(dense, layers):
        assert n.weight_type == m.weight_type and n.bias_type == m.bias_type and n.accum_type is None
        assert g.tensors[n.output].dtype == m.output_type
        assert np.array_equal(n.weight, fixed.quantize(m.weight.detach().numpy(), m.weight_type))
        assert np.array_equal(n.bias, fixed.quantize(m.bias.detach().numpy(), m.bias_type))
    assert g.metadata["input_range"] == [-4.0, 4.0]


def test_jet_mlp_golden_model_equals_the_float64_torch_module_bit_for_bit(jet):
    recipe, model, g = jet
    x = recipe.calibration_data(3000, seed=11)
    np.testing.assert_array_equal(emulated(wide_accumulators(g), x), torch64(model, x))


def test_jet_mlp_golden_model_is_within_a_few_lsb_of_the_float32_torch_module(jet):
    recipe, model, g = jet
    x = recipe.calibration_data(3000, seed=12)
    with torch.no_grad():
        ref = model(torch.from_numpy(x)).numpy().astype(np.float64)
    out = emulated(wide_accumulators(g), x)
    assert np.abs(out - ref).max() <= 4 * g.tensors[g.outputs[0]].dtype.lsb
    assert np.mean(out == ref) > 0.99


def test_jet_mlp_with_the_precision_pass_still_matches_torch(jet):
    from bitforge.toolchain.passes.precision import infer_precision

    recipe, model, g = jet
    x = recipe.calibration_data(2000, seed=13)  # inside input_range, which the pass sizes accumulators for
    np.testing.assert_array_equal(emulated(ir.validate(infer_precision(g)), x), torch64(model, x))


# -- float models -------------------------------------------------------------------------------------

def test_float_mlp_becomes_float_ir_that_matches_torch():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 3))
    x = torch.randn(200, 6)
    g = from_torch(model, x[:4])
    assert [n.OP for n in g.nodes] == ["Dense", "ReLU", "Dense"]
    assert all(t.dtype is None for t in g.tensors.values())
    assert all(a.dtype == np.float32 for n in g.nodes for a in n.array_fields().values())
    with torch.no_grad():
        ref = model(x).numpy()
    np.testing.assert_allclose(emulated(g, x.numpy()), ref, rtol=1e-5, atol=1e-6)


def test_input_range_comes_from_the_argument_or_the_module_and_must_not_be_empty():
    model = nn.Sequential(nn.Linear(2, 2))
    assert "input_range" not in from_torch(model, torch.randn(2, 2)).metadata
    assert from_torch(model, torch.randn(2, 2), input_range=(-1, 3)).metadata["input_range"] == [-1.0, 3.0]
    model.input_range = (0.0, 0.5)
    assert from_torch(model, torch.randn(2, 2)).metadata["input_range"] == [0.0, 0.5]
    with pytest.raises(FrontendError, match="input_range"):
        from_torch(model, torch.randn(2, 2), input_range=(1.0, 1.0))


def test_residual_add_of_fixed_tensors_is_an_exact_add_node():
    class Residual(nn.Module):
        def __init__(self):
            super().__init__()
            self.q = InputQuant(ACT)
            self.fc = QuantLinear(4, 4, weight_type=W8, bias_type=ACT, output_type=ACT)

        def forward(self, x):
            x = self.q(x)
            return torch.relu(self.fc(x)) + x

    torch.manual_seed(1)
    model = Residual()
    x = np.random.default_rng(1).normal(size=(300, 4)).astype(np.float32)
    g = wide_accumulators(from_torch(model, torch.from_numpy(x[:2])))
    assert [n.OP for n in g.nodes] == ["Quantize", "Dense", "ReLU", "Add"]
    assert g.tensors[g.outputs[0]].dtype == fixed.add_type(ACT, ACT)
    np.testing.assert_array_equal(emulated(g, x), torch64(model, x))


# -- low-rank -----------------------------------------------------------------------------------------

def test_low_rank_linear_becomes_one_low_rank_dense_that_matches_torch():
    torch.manual_seed(2)
    lr = LowRankLinear.from_linear(nn.Linear(10, 6), rank=3, u_type=W8, v_type=W8, mid_type=ACT, bias_type=ACT,
                                   output_type=ACT)
    model = nn.Sequential(InputQuant(ACT), lr, nn.ReLU())
    x = np.random.default_rng(2).normal(size=(500, 10)).astype(np.float32)
    g = wide_accumulators(from_torch(model, torch.from_numpy(x[:2])))
    assert [n.OP for n in g.nodes] == ["Quantize", "LowRankDense", "ReLU"]
    node = g.nodes[1]
    assert (node.rank, node.mid_type, node.u_type, node.v_type) == (3, ACT, W8, W8)
    np.testing.assert_array_equal(emulated(g, x), torch64(model, x))


def test_float_low_rank_linear_matches_torch():
    torch.manual_seed(3)
    model = nn.Sequential(LowRankLinear(8, 5, rank=2), nn.ReLU())
    x = torch.randn(100, 8)
    g = from_torch(model, x[:2])
    assert [n.OP for n in g.nodes] == ["LowRankDense", "ReLU"]
    with torch.no_grad():
        np.testing.assert_allclose(emulated(g, x.numpy()), model(x).numpy(), rtol=1e-5, atol=1e-6)


# -- KAN ----------------------------------------------------------------------------------------------

def test_kan_tracker_becomes_one_kan_node_with_its_grid_and_index_map(kan):
    _, model, g = kan
    assert [n.OP for n in g.nodes] == ["Quantize", "KANLayer"]
    node, layer = g.nodes[1], model[1]
    assert (node.grid_lo, node.grid_hi, node.grid_size, node.order) == (-2.5, 2.5, 5, 3)
    assert node.coeff_type == ACT and node.basis_type == DEFAULT_BASIS_TYPE and node.basis_impl == "closed_form"
    assert np.array_equal(node.coeffs, fixed.quantize(layer.coeffs.detach().numpy(), ACT))
    assert (node.index_lo, node.index_mult, node.index_shift, node.u_bits) == index_params(-2.5, 2.5, 5, ACT)
    assert g.tensors[node.output].dtype == ACT and g.metadata["input_range"] == [-2.0, 2.0]


def test_kan_tracker_golden_model_is_within_the_fixed_point_error_bound(kan):
    """Torch evaluates the spline at the exact position with float bases; the IR quantizes the position
    to 2**-u_bits of a cell and the bases to ``basis_type``. The spline's slope in cell units is at most
    max |c_j - c_{j-1}|; the basis errors e_m sum to zero (rows sum to one), so they cost
    sum_{m != r} (c_m - c_r) e_m <= k (max c - min c) LSBs (closed form: e_m in (-1, 0] for m >= 1, b_0
    completes the row); and both sides round the output once more (one output LSB)."""
    recipe, model, g = kan
    node = g.nodes[1]
    c = fixed.to_float(node.coeffs, node.coeff_type)[0, 0]
    bound = (np.abs(np.diff(c)).max() * 2.0 ** -node.u_bits * 1.01
             + (c.max() - c.min()) * node.order * node.basis_type.lsb + ACT.lsb + 1e-5)
    x = np.concatenate([recipe.calibration_data(3000, seed=5), [[-2.5], [-2.0], [1.999], [2.0], [3.0]]])
    with torch.no_grad():
        ref = model(torch.from_numpy(x.astype(np.float32))).numpy()
    err = np.abs(emulated(wide_accumulators(g), x) - ref).max()
    assert err <= bound, f"max error {err} beyond the bound {bound}"


def test_float_kan_layer_matches_torch():
    torch.manual_seed(4)
    model = nn.Sequential(KANLayer(3, 2, grid_size=4, order=3, grid_range=(-1.0, 1.0)))
    x = torch.rand(300, 3) * 2.6 - 1.3
    g = from_torch(model, x[:2])
    assert [n.OP for n in g.nodes] == ["KANLayer"] and g.tensors[g.outputs[0]].dtype is None
    with torch.no_grad():
        np.testing.assert_allclose(emulated(g, x.numpy()), model(x).numpy(), rtol=1e-5, atol=1e-6)


def test_kan_layer_basis_type_on_the_module_reaches_the_ir():
    bt = FixedType(10, 1, False, "RND_CONV", "SAT")
    model = nn.Sequential(InputQuant(ACT), KANLayer(2, 1, coeff_type=ACT, basis_type=bt, output_type=ACT))
    assert from_torch(model, torch.rand(2, 2)).nodes[1].basis_type == bt


# -- .pt2 archives ------------------------------------------------------------------------------------

@pytest.mark.parametrize("which", ["jet", "kan", "float"])
def test_pt2_archive_gives_the_same_ir_as_the_live_module(which, jet, kan, tmp_path):
    if which == "float":
        torch.manual_seed(5)
        model, x = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)), torch.randn(4, 3)
    else:
        recipe, model, _ = jet if which == "jet" else kan
        x = recipe.example_input(8)
    path = tmp_path / "model.pt2"
    torch.export.save(torch.export.export(model, (x,)), str(path))
    live = from_torch(model, x, "model", input_range=None)
    live.metadata.pop("input_range", None)
    assert same_ir(load_pt2(path), live)


@pytest.mark.filterwarnings("ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated:FutureWarning")  # torch-internal
def test_decomposed_program_gives_the_same_ir(kan):
    """``run_decompositions`` turns linear into permute + addmm and rewrites the KAN ops: same IR."""
    recipe, model, g = kan
    torch.manual_seed(6)
    mlp = nn.Sequential(InputQuant(ACT), QuantLinear(1, 1, weight_type=W8, bias_type=ACT, output_type=ACT), nn.ReLU(),
                        model[1])
    x = recipe.example_input(8)
    ep = torch.export.export(mlp, (x,))
    decomposed = ep.run_decompositions()
    targets = {n.target for n in decomposed.graph.nodes}
    assert torch.ops.aten.addmm.default in targets and torch.ops.aten.linear.default not in targets
    assert same_ir(from_exported(decomposed), from_exported(ep))


def test_load_pt2_reports_missing_and_unreadable_files(tmp_path):
    with pytest.raises(FrontendError, match="no such file"):
        load_pt2(tmp_path / "absent.pt2")
    junk = tmp_path / "junk.pt2"
    junk.write_bytes(b"not a zip archive")
    with pytest.raises(FrontendError, match="junk.pt2: cannot read as a torch.export archive"):
        load_pt2(junk)


# -- errors -------------------------------------------------------------------------------------------

def test_unsupported_op_names_the_op_the_module_and_what_is_supported():
    model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))
    with pytest.raises(FrontendError) as e:
        from_torch(model, torch.randn(2, 4))
    msg = str(e.value)
    assert "aten::layer_norm" in msg and "module '1'" in msg and "LayerNorm" in msg and "supported modules" in msg


def test_unsupported_module_conv_transpose1d_is_named():
    with pytest.raises(FrontendError,
                       match=r"module '0', torch\.nn\.modules\.conv\.ConvTranspose1d.*\): op aten::conv_transpose1d"):
        from_torch(nn.Sequential(nn.ConvTranspose1d(2, 2, 3)), torch.randn(2, 2, 8))


def test_nan_weight_is_named():
    model = nn.Sequential(InputQuant(ACT), QuantLinear(3, 2, weight_type=W8, bias_type=ACT, output_type=ACT))
    with torch.no_grad():
        model[1].weight[1, 2] = float("nan")
    with pytest.raises(FrontendError, match=r"parameter '1\.weight' contains 1 NaN/Inf"):
        from_torch(model, torch.randn(2, 3))


def test_float_nan_weight_is_named():
    model = nn.Sequential(nn.Linear(3, 2))
    with torch.no_grad():
        model[0].bias[0] = float("inf")
    with pytest.raises(FrontendError, match=r"parameter '0\.bias'"):
        from_torch(model, torch.randn(2, 3))


def test_weight_beyond_a_wrapping_type_is_too_narrow():
    wrap = FixedType(8, 2, True, "RND_CONV", "WRAP")
    model = nn.Sequential(InputQuant(ACT), QuantLinear(3, 2, weight_type=wrap, bias_type=ACT, output_type=ACT))
    with torch.no_grad():
        model[1].weight[0, 0] = 2.7
    with pytest.raises(FrontendError) as e:
        from_torch(model, torch.randn(2, 3))
    msg = str(e.value)
    assert "too narrow" in msg and "module '1'" in msg and "[-2.0, 1.984375]" in msg and "2.7" in msg


def test_weight_beyond_a_saturating_type_is_accepted_and_saturates_like_torch():
    model = nn.Sequential(InputQuant(ACT), QuantLinear(3, 2, weight_type=W8, bias_type=ACT, output_type=ACT))
    with torch.no_grad():
        model[1].weight[0, 0] = 2.7
    g = from_torch(model, torch.randn(2, 3))
    assert g.nodes[1].weight[0, 0] == W8.max_code
    x = np.random.default_rng(0).normal(size=(50, 3)).astype(np.float32)
    np.testing.assert_array_equal(emulated(wide_accumulators(g), x), torch64(model, x))


def test_float_layer_after_a_quantized_input_asks_for_a_weight_type():
    with pytest.raises(FrontendError, match="weight '1.weight' is float; give the layer a weight type"):
        from_torch(nn.Sequential(InputQuant(ACT), nn.Linear(3, 2)), torch.randn(2, 3))


def test_fixed_layer_without_output_type_is_refused():
    model = nn.Sequential(InputQuant(ACT), QuantLinear(3, 2, weight_type=W8, bias_type=ACT))
    with pytest.raises(FrontendError, match="no output type"):
        from_torch(model, torch.randn(2, 3))
