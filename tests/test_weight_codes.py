"""Garbage must not pass as verified: a type that zeroes most of a layer's weights, or saturates more than a few,
is a loud precision warning (console and report.json) with the counts, even though the golden model and ONNX
Runtime still agree bit for bit on the garbage."""
from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest
import torch
from torch import nn

from bitforge.models import InputQuant, QuantLinear
from bitforge.toolchain import fixed
from bitforge.toolchain.cli import main
from bitforge.toolchain.fixed import FixedType
from bitforge.toolchain.frontends.torch_frontend import from_torch
from bitforge.toolchain.passes.precision import (SATURATED_SHARE, ZEROED_SHARE, WeightCodeWarning, check_precision,
                                                 weight_code_warnings)
from bitforge.toolchain.passes.quantize import fit_integer_bits
from bitforge.toolchain.weight_codes import WEIGHT_CODES_KEY
from qonnx_builders import float_mlp


def normal_weights():
    return np.random.default_rng(0).normal(size=(4, 8)).astype(np.float32)


def compile_cli(capsys, model, out, precision):
    code = main(["compile", str(model), "-o", str(out), "--input-range=-2,2", "--precision", precision,
                 "--vectors", "200"])
    cap = capsys.readouterr()
    return code, " ".join((cap.out + cap.err).split())


def test_a_type_with_20_integer_bits_zeroes_every_weight_and_says_so(tmp_path, capsys):
    """The golden model and ONNX Runtime agree on the all-zero model: the warning is what tells the user."""
    code, text = compile_cli(capsys, float_mlp(tmp_path / "m.onnx", normal_weights()), tmp_path / "out",
                             "weight=fixed<8,20,RND_CONV,SAT>,act=fixed<16,6,RND_CONV,SAT>")
    assert code == 0, text
    assert "Dense 'mm1': quantizing 'weight' to fixed<8,20,RND_CONV,SAT> turns 32 of its 32 non-zero weights " \
           "(100%) into 0" in text
    assert "Dense 'mm2'" in text and "16 of its 16 non-zero weights" in text
    assert "not accuracy" in text  # the verification line says what "0 mismatches" compared
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert sum("into 0" in w for w in report["precision"]["warnings"]) == 2
    assert report["verification"]["golden_vs_onnxruntime"]["mismatches"] == 0
    assert "not accuracy" in (tmp_path / "out" / "report.md").read_text()


def test_one_huge_weight_under_w8a16_zeroes_the_rest_and_says_so(tmp_path, capsys):
    w = normal_weights()
    w[0, 0] = 3e38
    code, text = compile_cli(capsys, float_mlp(tmp_path / "m.onnx", w), tmp_path / "out", "w8a16")
    assert code == 0, text
    assert "Dense 'mm1': quantizing 'weight'" in text and "turns 31 of its 32 non-zero weights (97%) into 0" in text
    assert "largest |weight| 3e+38" in text
    counts = json.loads((tmp_path / "out" / "model.json").read_text())["metadata"][WEIGHT_CODES_KEY]["mm1.weight"]
    assert counts["zeroed"] == 31 and counts["nonzero"] == 32


def test_ordinary_8_bit_quantization_is_silent(tmp_path, capsys):
    code, text = compile_cli(capsys, float_mlp(tmp_path / "m.onnx", normal_weights()), tmp_path / "out", "w8a16")
    assert code == 0 and "quantizing '" not in text and "warning" not in text, text


@pytest.mark.parametrize("size", [1024, 65536])
def test_the_zeroed_threshold_sits_above_what_ordinary_widths_lose(size):
    """The numbers in ZEROED_SHARE's comment: Gaussian weights under width-only types (integer bits from the
    array's own extremes) lose 1-2 % at 8 bits, 23-38 % at 4 and 37-68 % at 3; 2 bits lose most."""
    rng = np.random.default_rng(0)
    share = {}
    for width in (2, 3, 4, 8):
        lost = []
        for _ in range(5):
            w = rng.normal(size=size)
            t = FixedType(width, fit_integer_bits(Fraction(w.min()), Fraction(w.max()), width, True), True,
                          "RND_CONV", "SAT")  # what a width-only --precision gives a weight array
            lost.append(np.mean(fixed.quantize(w, t) == 0))
        share[width] = float(np.mean(lost))
    assert 0.01 <= share[8] <= 0.03 and 0.2 <= share[4] <= 0.4 and 0.35 <= share[3] <= 0.7, share
    assert share[8] < share[4] < ZEROED_SHARE < share[2], share


def qat_module(weight: float) -> nn.Module:
    torch.manual_seed(0)
    act = FixedType(16, 6, True, "RND_CONV", "SAT")
    layer = QuantLinear(4, 3, weight_type=FixedType(8, 2, True, "RND_CONV", "SAT"), bias_type=act, output_type=act)
    with torch.no_grad():
        layer.weight.normal_(0, 0.5)
        layer.weight[:, :2] = weight  # half the weights beyond fixed<8,2>'s [-2, 1.98]: they saturate
    return nn.Sequential(InputQuant(act), layer).eval()


def test_fake_quantized_weights_that_saturate_are_counted_by_the_torch_frontend():
    g = from_torch(qat_module(5.0), torch.randn(2, 4), "qat")
    (w,) = weight_code_warnings(g)
    assert isinstance(w, WeightCodeWarning) and w.field == "weight"
    assert w.counts["saturated"] == 6 and w.counts["values"] == 12 and 6 / 12 > SATURATED_SHARE
    assert "saturates 6 of its 12 weights (50%" in w.message
    assert w.message in [x.message for x in check_precision(g, [-1, 1])]


def test_weights_inside_their_type_give_no_warning():
    g = from_torch(qat_module(1.5), torch.randn(2, 4), "qat")
    assert g.metadata[WEIGHT_CODES_KEY][f"{g.nodes[1].name}.weight"]["saturated"] == 0
    assert weight_code_warnings(g) == []
