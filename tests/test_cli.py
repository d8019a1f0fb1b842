"""The CLI end to end: artefacts, reproducibility, and one clear message (exit 2, no OUT) per kind of bad input."""
from __future__ import annotations

import argparse
import json

import numpy as np
import onnx
import pytest

from bitforge.toolchain import emulate, ir
from bitforge.toolchain.cli import build_parser, main
from qonnx_builders import float_mlp


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return code, " ".join((cap.out + cap.err).split())  # wrapping depends on the terminal width


@pytest.fixture(scope="module")
def jet_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("jet") / "out"
    assert main(["compile", "jet-mlp", "-o", str(out)]) == 0
    return out


def test_compile_recipe_writes_verified_artefacts(jet_out):
    for f in ("model.json", "weights.safetensors", "model.onnx", "report.json"):
        assert (jet_out / f).is_file(), f
    v = json.loads((jet_out / "report.json").read_text())["verification"]["golden_vs_onnxruntime"]
    assert v["vectors"] == 10_000 and v["mismatches"] == 0 and v["exact"] is True
    onnx.checker.check_model(onnx.load(str(jet_out / "model.onnx")))


def test_compile_is_reproducible_byte_for_byte(jet_out, tmp_path):
    again = tmp_path / "again"
    assert main(["compile", "jet-mlp", "-o", str(again)]) == 0
    for f in ("model.json", "weights.safetensors", "model.onnx", "report.json"):
        assert (again / f).read_bytes() == (jet_out / f).read_bytes(), f


def test_emulate_command_writes_golden_values(jet_out, tmp_path, capsys):
    x = np.random.default_rng(0).uniform(-2, 2, size=(8, 16))
    np.save(tmp_path / "x.npy", x)
    code, _ = run_cli(capsys, "emulate", jet_out, "--input", tmp_path / "x.npy", "-o", tmp_path / "y.npy")
    assert code == 0
    g = ir.load(jet_out)
    assert np.array_equal(np.load(tmp_path / "y.npy"), emulate.run_values(g, x)[g.outputs[0]])


def test_inspect_shows_layers_and_verification(jet_out, capsys):
    code, text = run_cli(capsys, "inspect", jet_out)
    assert code == 0 and "Dense" in text and "10,000 vectors, 0 mismatches" in text


def test_inspect_lists_recipes(capsys):
    code, text = run_cli(capsys, "inspect")
    assert code == 0 and "jet-mlp" in text and "kan-tracker" in text


def _commands(parser, prefix=()):
    """Every (sub-)command's parser, found by walking the parser: a new command cannot skip its examples."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name), sub
                yield from _commands(sub, (*prefix, name))


@pytest.mark.parametrize("cmd,sub", list(_commands(build_parser())), ids=lambda v: " ".join(v) if isinstance(v, tuple) else "")
def test_every_command_has_help_with_an_example(cmd, sub):
    text = sub.format_help()
    assert "examples:" in text and "bitforge " + " ".join(cmd) in text


# -- bad input: exit 2, one message, no OUT ---------------------------------------------------------

def assert_clean_failure(code, text, out, *needles):
    assert code == 2, text
    assert "Traceback" not in text
    for n in needles:
        assert n in text, (n, text)
    assert not out.exists()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.tmp")]


def test_missing_file(tmp_path, capsys):
    out = tmp_path / "out"
    code, text = run_cli(capsys, "compile", tmp_path / "nope.onnx", "-o", out)
    assert_clean_failure(code, text, out, "nope.onnx", "no such file")


def test_corrupt_onnx(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07this is not a protobuf" * 10)
    out = tmp_path / "out"
    code, text = run_cli(capsys, "compile", bad, "-o", out)
    assert_clean_failure(code, text, out, "bad.onnx")


def test_truncated_onnx(tmp_path, capsys):
    p = float_mlp(tmp_path / "m.onnx")
    p.write_bytes(p.read_bytes()[:-40])
    out = tmp_path / "out"
    code, text = run_cli(capsys, "compile", p, "-o", out)
    assert_clean_failure(code, text, out, "m.onnx")


def test_unsupported_op_names_node_and_op(tmp_path, capsys):
    p = float_mlp(tmp_path / "m.onnx", op2="Sin")
    out = tmp_path / "out"
    code, text = run_cli(capsys, "compile", p, "-o", out)
    assert_clean_failure(code, text, out, "act1", "Sin", "Relu")


def test_shape_mismatch(tmp_path, capsys):
    p = float_mlp(tmp_path / "m.onnx", w1=np.ones((5, 3), dtype=np.float32))
    out = tmp_path / "out"
    code, text = run_cli(capsys, "compile", p, "-o", out)
    assert_clean_failure(code, text, out, "mm1")


def test_nan_weights(tmp_path, capsys):
    p = float_mlp(tmp_path / "m.onnx", nan=True)
    out = tmp_path / "out"
    code, text = run_cli(capsys, "compile", p, "-o", out)
    assert_clean_failure(code, text, out, "w1", "NaN")


def test_type_too_narrow_for_weights(tmp_path, capsys):
    p = float_mlp(tmp_path / "m.onnx", w1=np.full((4, 3), 3.0, dtype=np.float32))
    out = tmp_path / "out"
    code, text = run_cli(capsys, "compile", p, "-o", out, "--input-range=-2,2", "--precision",
                         "weight=fixed<4,1,RND_CONV,WRAP>,act=fixed<16,6,RND_CONV,SAT>")
    assert_clean_failure(code, text, out, "fixed<4,1", "too narrow", "mm1")


def test_precision_without_input_range_says_which_flag(tmp_path, capsys):
    out = tmp_path / "out"
    code, text = run_cli(capsys, "compile", float_mlp(tmp_path / "m.onnx"), "-o", out, "--precision", "w8a16")
    assert_clean_failure(code, text, out, "--input-range")


def test_unknown_recipe_lists_known_ones(tmp_path, capsys):
    out = tmp_path / "out"
    code, text = run_cli(capsys, "compile", "jet-mpl", "-o", out)
    assert_clean_failure(code, text, out, "jet-mpl", "jet-mlp", "kan-tracker")


def test_bad_precision_spec(tmp_path, capsys):
    out = tmp_path / "out"
    code, text = run_cli(capsys, "compile", float_mlp(tmp_path / "m.onnx"), "-o", out, "--precision", "w8q3")
    assert_clean_failure(code, text, out, "w8q3")


def test_unknown_option_exits_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["compile", "jet-mlp", "-o", "x", "--frobnicate"])
    assert e.value.code == 2


def test_failed_compile_keeps_previous_output(jet_out, tmp_path, capsys):
    import shutil
    out = tmp_path / "keep"
    shutil.copytree(jet_out, out)
    before = (out / "report.json").read_bytes()
    code, _ = run_cli(capsys, "compile", tmp_path / "missing.onnx", "-o", out)
    assert code == 2 and (out / "report.json").read_bytes() == before


def test_float_onnx_with_precision_compiles_bit_exact(tmp_path, capsys):
    out = tmp_path / "out"
    code, text = run_cli(capsys, "compile", float_mlp(tmp_path / "m.onnx"), "-o", out, "--precision", "w8a16",
                         "--input-range=-2,2", "--vectors", "2000")
    assert code == 0, text
    v = json.loads((out / "report.json").read_text())["verification"]["golden_vs_onnxruntime"]
    assert v == {**v, "vectors": 2000, "mismatches": 0, "exact": True}
