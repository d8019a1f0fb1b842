"""The CNN recipes (digits-cnn on scikit-learn's digits, signal-cnn on closed-form waveforms): their data,
their float models, and how a recipe scores a compiled graph."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from bitforge.models.datasets import DIGITS_CLASSES, WAVEFORM_CLASSES, WAVEFORM_LENGTH, digits, waveforms
from bitforge.models.recipes import EVAL_SEED, RecipeError, get_recipe, list_recipes

CNN_RECIPES = ("digits-cnn", "signal-cnn")


@pytest.fixture(scope="module")
def built():
    """Each CNN recipe built once with seed 0 (about a second each)."""
    return {name: get_recipe(name).build(seed=0) for name in CNN_RECIPES}


def _rows_list(x: np.ndarray) -> list[bytes]:
    return [row.tobytes() for row in x.reshape(len(x), -1)]


def _rows(x: np.ndarray) -> set[bytes]:
    return set(_rows_list(x))


# -- data -----------------------------------------------------------------------------------------------

def test_digits_split_is_fixed_disjoint_and_covers_all_1797_images():
    from sklearn.datasets import load_digits

    (xa, ya), (xb, yb) = digits("train"), digits("test")
    assert xa.shape == (1347, 1, 8, 8) and xb.shape == (450, 1, 8, 8)
    assert xa.dtype == np.float32 and ya.dtype == np.int64
    assert xa.min() == 0.0 and xa.max() == 1.0  # pixels 0..16 scaled by 1/16
    again = digits("test")
    assert np.array_equal(again[0], xb) and np.array_equal(again[1], yb)
    # The two parts are a partition of scikit-learn's images, each with its own label.
    bunch = load_digits()
    ours = sorted(zip(_rows_list(np.concatenate([xa, xb])), np.concatenate([ya, yb])))
    theirs = sorted(zip(_rows_list((bunch.data / 16.0).astype(np.float32)), bunch.target))
    assert ours == theirs
    assert set(ya) == set(yb) == set(range(DIGITS_CLASSES))


def test_digits_hands_out_fresh_arrays_and_names_the_splits_on_a_bad_one():
    x, _ = digits("train")
    x[:] = 7.0
    assert digits("train")[0].max() == 1.0  # the caller's change did not reach the next call
    with pytest.raises(ValueError, match="train, test.*'validation'"):
        digits("validation")


def test_waveforms_are_seeded_balanced_and_inside_the_input_range():
    x, y = waveforms(4000, seed=3)
    x2, y2 = waveforms(4000, seed=3)
    x3, _ = waveforms(4000, seed=4)
    assert np.array_equal(x, x2) and np.array_equal(y, y2) and not np.array_equal(x, x3)
    assert x.shape == (4000, 1, WAVEFORM_LENGTH) and x.dtype == np.float32 and y.dtype == np.int64
    counts = np.bincount(y, minlength=len(WAVEFORM_CLASSES))
    assert counts.min() > 0.2 * len(y)  # about a quarter each
    assert x.min() >= -2.0 and x.max() <= 2.0 and x.std() > 0.4


def test_waveform_bursts_are_silent_outside_their_window():
    """A burst is noise under a window and only the small additive noise elsewhere: its quietest quarter is
    far quieter than a periodic wave's, which has the same amplitude everywhere."""
    x, y = waveforms(2000, seed=5)
    quarter = np.sort(np.abs(x[:, 0, :]), axis=1)[:, : WAVEFORM_LENGTH // 4].mean(axis=1)
    burst = y == WAVEFORM_CLASSES.index("burst")
    assert np.median(quarter[burst]) < 0.5 * np.median(quarter[~burst])


@pytest.mark.parametrize("kwargs,match", [(dict(n=0), "n must be >= 1"), (dict(n=4, length=4), "length")])
def test_waveforms_reject_sizes_they_cannot_make(kwargs, match):
    with pytest.raises(ValueError, match=match):
        waveforms(**kwargs)


# -- the float models ------------------------------------------------------------------------------------

def test_cnn_recipes_are_listed():
    assert set(CNN_RECIPES) <= set(list_recipes())
    with pytest.raises(RecipeError, match="digits-cnn.*signal-cnn"):
        get_recipe("mnist-cnn")


@pytest.mark.parametrize("name", CNN_RECIPES)
def test_cnn_recipe_build_is_deterministic_per_seed(built, name):
    a, b = built[name].state_dict(), get_recipe(name).build(seed=0).state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    other = get_recipe(name).build(seed=1).state_dict()
    assert not all(torch.equal(a[k], other[k]) for k in a)


@pytest.mark.parametrize("name", CNN_RECIPES)
def test_cnn_recipe_is_accurate_on_held_out_data(built, name):
    assert get_recipe(name).evaluate(built[name])["accuracy"] > 0.95  # chance: 0.1 and 0.25


def test_digits_cnn_has_the_documented_layers(built):
    model = built["digits-cnn"]
    kinds = [type(m).__name__ for m in model]
    assert kinds == ["Conv2d", "BatchNorm2d", "ReLU", "MaxPool2d", "Conv2d", "BatchNorm2d", "ReLU", "MaxPool2d",
                     "Flatten", "Linear", "Softmax"]
    weights = sum(m.weight.numel() for m in model if isinstance(m, (nn.Conv2d, nn.Linear)))
    assert weights == 1 * 8 * 9 + 8 * 16 * 9 + 64 * 10 == 1864  # the multipliers of an unfolded design, at most


def test_signal_cnn_has_the_documented_layers(built):
    model = built["signal-cnn"]
    kinds = [type(m).__name__ for m in model]
    assert kinds == ["Conv1d", "BatchNorm1d", "LeakyReLU", "MaxPool1d", "Conv1d", "BatchNorm1d", "LeakyReLU",
                     "AdaptiveAvgPool1d", "Flatten", "Linear", "Softmax"]
    assert model[4].dilation == (2,) and model[2].negative_slope == 0.1
    assert sum(m.weight.numel() for m in model if isinstance(m, (nn.Conv1d, nn.Linear))) == 8 * 5 + 16 * 8 * 5 + 16 * 4


@pytest.mark.parametrize("name", CNN_RECIPES)
def test_cnn_recipe_ends_in_a_softmax_over_the_classes(built, name):
    recipe = get_recipe(name)
    with torch.no_grad():
        p = built[name](recipe.example_input(32, seed=2))
    assert p.shape == (32, DIGITS_CLASSES if name == "digits-cnn" else len(WAVEFORM_CLASSES))
    assert (p >= 0).all()
    torch.testing.assert_close(p.sum(dim=1), torch.ones(32), rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", CNN_RECIPES)
def test_cnn_recipe_samples_are_seeded_float32_inside_the_input_range(name):
    recipe = get_recipe(name)
    x = recipe.calibration_data(2048, seed=3)
    assert x.dtype == np.float32 and len(x) == 2048
    assert recipe.input_range[0] <= x.min() and x.max() <= recipe.input_range[1]
    assert np.array_equal(recipe.example_input(5, seed=3).numpy(), recipe.calibration_data(5, seed=3))
    assert not np.array_equal(recipe.calibration_data(64, seed=3), recipe.calibration_data(64, seed=4))


def test_digits_cnn_calibrates_on_training_images_and_scores_on_the_test_split():
    recipe = get_recipe("digits-cnn")
    train, (test, labels) = _rows(digits("train")[0]), digits("test")
    assert _rows(recipe.calibration_data(2048, seed=0)) <= train
    x, y = recipe.held_out(2000, EVAL_SEED)
    assert sorted(zip(_rows_list(x), y)) == sorted(zip(_rows_list(test), labels))  # all 450, each labelled
    x_small, y_small = recipe.held_out(100, 7)
    assert len(x_small) == 100 and _rows(x_small) <= _rows(test)



# -- scoring a compiled graph --------------------------------------------------------------------------

def test_evaluate_graph_scores_the_golden_model_on_the_same_samples():
    """jet-mlp's module is quantization-aware: its compiled graph, run by the golden model, makes the same
    decisions on the held-out set. The graph without its input quantizer (codes in) scores the same."""
    from bitforge.toolchain.compiler import load_model, prepare

    recipe = get_recipe("jet-mlp")
    g, _ = prepare(load_model("jet-mlp", 0), None)
    assert recipe.evaluate_graph(g) == recipe.evaluate(recipe.build(0))
    codes_in = g.copy()
    quant = codes_in.nodes.pop(0)
    assert quant.OP == "Quantize"
    codes_in.inputs = [quant.output]
    assert recipe.evaluate_graph(codes_in, n=500) == recipe.evaluate_graph(g, n=500)


def test_evaluate_graph_refuses_a_graph_with_two_outputs():
    from bitforge.toolchain.compiler import load_model, prepare

    g, _ = prepare(load_model("jet-mlp", 0), None)
    g.outputs = [g.outputs[0], g.nodes[0].output]
    with pytest.raises(RecipeError, match="one input and one output"):
        get_recipe("jet-mlp").evaluate_graph(g)


def test_evaluate_graph_scores_an_argmax_head_as_its_one_hot_decision():
    """A classifier compiled with ``ArgMax`` at its output gives indices; they score as the vector they pick."""
    from bitforge.toolchain import ir
    from bitforge.toolchain.compiler import load_model, prepare
    from bitforge.toolchain.passes.heads import index_type

    recipe = get_recipe("jet-mlp")
    g, _ = prepare(load_model("jet-mlp", 0), None)
    decided = g.copy()
    logits = decided.outputs[0]
    decided.tensors["decision"] = ir.TensorSpec("decision", (1,), index_type(decided.tensors[logits].shape[-1]))
    decided.nodes.append(ir.ArgMax("argmax", (logits,), ("decision",)))
    decided.outputs = ["decision"]
    ir.validate(decided)
    assert recipe.evaluate_graph(decided) == recipe.evaluate_graph(g)


# -- compiled to fixed point ------------------------------------------------------------------------------

#: How far the 8-bit model's held-out accuracy may fall below the float model's. Measured at seed 0:
#: digits-cnn 0.9889 -> 0.9889 (450 test images), signal-cnn 0.985 -> 0.982 (2,000 waveforms).
ACCURACY_MARGIN = 0.01
VECTORS = 2000


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """Each CNN recipe compiled at --precision 8 to ONNX, as ``bitforge compile NAME --precision 8`` does."""
    from bitforge.toolchain.compiler import CompileOptions, compile_model

    out = {}
    for name in CNN_RECIPES:
        out[name] = tmp_path_factory.mktemp(name) / "out"
        compile_model(name, out[name], CompileOptions(precision="8", vectors=VECTORS))
    return out


def _report(folder) -> dict:
    import json

    return json.loads((folder / "report.json").read_text())


@pytest.mark.parametrize("name", CNN_RECIPES)
def test_compiled_cnn_recipe_is_bit_exact_in_onnxruntime_with_8_bit_weights(compiled, name):
    from bitforge.toolchain import ir

    v = _report(compiled[name])["verification"]["golden_vs_onnxruntime"]
    assert (v["vectors"], v["mismatches"], v["exact"]) == (VECTORS, 0, True)
    g = ir.load(compiled[name])
    assert g.is_fixed
    layers = [n for n in g.nodes if n.OP in ("Conv", "Dense")]
    assert len(layers) == 3 and all(n.weight_type.width == 8 for n in layers)
    assert [n.OP for n in g.nodes].count("ScaleShift") == 0  # both BatchNorms folded into their convolutions
    assert g.nodes[-1].OP == "Softmax"


@pytest.mark.parametrize("name", CNN_RECIPES)
def test_compiled_cnn_recipe_keeps_its_accuracy_at_8_bits(built, compiled, name):
    """The golden model of the compiled graph, run here on the held-out samples (not through the recipe's own
    evaluate_graph), decides within ACCURACY_MARGIN of the float module; report.json states both numbers."""
    from bitforge.toolchain import emulate, ir

    recipe = get_recipe(name)
    g = ir.load(compiled[name])
    x, labels = recipe.held_out(2000, EVAL_SEED)
    codes = emulate.run(g, x)[g.outputs[0]]  # the softmax's codes: one type, so their order is the values'
    fixed_accuracy = float((codes.argmax(axis=1) == labels).mean())
    float_accuracy = recipe.evaluate(built[name])["accuracy"]
    assert fixed_accuracy >= float_accuracy - ACCURACY_MARGIN
    scores = _report(compiled[name])["task_scores"]
    assert scores["held_out"]["samples"] == len(labels)
    assert scores["reference"]["accuracy"] == pytest.approx(float_accuracy, abs=1e-6)
    assert scores["compiled"]["accuracy"] == pytest.approx(fixed_accuracy, abs=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("name", CNN_RECIPES)
def test_cnn_recipe_rtl_is_bit_exact_on_icarus_and_verilator(tmp_path, name):
    """The 8-bit design's Verilog (conv window sequencers, pools, softmax tables) against the golden model under
    random stalls, through the same compile the CLI runs."""
    from bitforge.toolchain.compiler import CompileOptions, compile_model
    from bitforge.toolchain.verify.simulate import simulate

    out = tmp_path / "out"
    report = compile_model(name, out, CompileOptions(to=("onnx", "rtl"), precision="8", vectors=VECTORS))
    assert report["verification"]["golden_vs_onnxruntime"]["mismatches"] == 0
    results = simulate(out, "both", vectors=150, seed=1)
    assert sorted(results) == ["icarus", "verilator"]
    for r in results.values():
        assert (r["vectors"], r["mismatches"], r["tlast_errors"], r["protocol_errors"]) == (150, 0, 0, 0)
