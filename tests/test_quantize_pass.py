"""The --precision grammar and the float -> fixed quantization pass."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from bitforge.toolchain import emulate, ir
from bitforge.toolchain.fixed import FixedType, Overflow, Rounding, parse_type, quantize, to_float
from bitforge.toolchain.passes.precision import check_precision, infer_precision
from bitforge.toolchain.passes.quantize import (GRAMMAR, PrecisionSpec, PrecisionSpecError, QuantizeError,
                                                fit_integer_bits, parse_precision, quantize_graph)

from conftest import small_graph

T8 = "fixed<8,2,RND_CONV,SAT>"
T16 = "fixed<16,6,RND_CONV,SAT>"


# -- the grammar -------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, weight, act", [
    ("8", 8, 8), ("16", 16, 16), ("w8a16", 8, 16), ("W4A8", 4, 8),
    (f"weight={T8},act={T16}", parse_type(T8), parse_type(T16)),
    (f" act = {T16} , weight = 6 ", 6, parse_type(T16)),
    ("weight=ap_fixed<8,2,AP_RND_CONV,AP_SAT>,act=12", parse_type(T8), 12),
])
def test_parse_precision_reads_widths_and_types(text, weight, act):
    spec = parse_precision(text)
    assert (spec.weight, spec.act, spec.overrides) == (weight, act, ())


def test_parse_precision_reads_per_layer_overrides():
    spec = parse_precision(f"w8a16,fc1.weight=fixed<6,1,RND_CONV,SAT>,fc2.act=12,layers.0.bias={T16}")
    assert spec.overrides == (("fc1.weight", parse_type("fixed<6,1,RND_CONV,SAT>")), ("fc2.act", 12),
                              ("layers.0.bias", parse_type(T16)))
    assert spec.lookup("fc1", "weight") == parse_type("fixed<6,1,RND_CONV,SAT>")
    assert spec.lookup("fc3", "weight") == 8
    assert spec.lookup("fc2", "act") == 12 and spec.lookup("fc1", "act") == 16
    assert spec.lookup("fc1", "bias") is None  # derived from the accumulator


@pytest.mark.parametrize("text", ["8", "w4a16", f"weight={T8},act={T16}", f"w8a16,fc1.weight={T8},fc2.mid=10",
                                  "ap_fixed<16,6>", "ap_fixed<16,6>,accum=auto,fc1.accum=fixed<24,10>,fc2.accum=auto",
                                  f"w8a8,bias=12,accum={T16}", f"ap_ufixed<8,0>,weight={T8},act=10,fc1.bias={T16}"])
def test_a_spec_prints_back_to_text_that_parses_to_it(text):
    spec = parse_precision(text)
    assert parse_precision(str(spec)) == spec


@pytest.mark.parametrize("text, part, problem", [
    ("", None, "empty"),
    ("eight", "eight", "unknown item"),
    ("w8", "w8", "unknown item"),
    ("8,", "", "empty item"),
    ("1", "1", "outside 2..32"),
    ("w8a64", "w8a64", "outside 2..32"),
    ("8,w4a4", "w4a4", "given twice"),
    ("weight=fixed<8,2>", None, "no activation precision"),
    ("act=8", None, "no weight precision"),
    ("w8a8,weight=fixd<8,2>", "weight=fixd<8,2>", "cannot parse fixed-point type"),
    ("w8a8,fc1.weigth=4", "fc1.weigth=4", "neither"),
    ("w8a8,fc1.weight=fixed<8,2,RND_WRONG,SAT>", "fc1.weight=fixed<8,2,RND_WRONG,SAT>", "unknown rounding"),
    ("w8a8,fc1.act=4,fc1.act=5", None, "fc1.act is given twice"),
    ("8,accum=16", "accum=16", "give a TYPE"),
    ("8,fc1.accum=16", "fc1.accum=16", "give a TYPE"),
    ("w8a8,fc1.act=auto", "fc1.act=auto", "for accumulators only"),
    ("ap_fixed<16,6>,fixed<8,3>", "fixed<8,3>", "a bare TYPE) is given twice"),
    ("8,accum=auto,accum=fixed<24,8>", "accum=fixed<24,8>", "accumulator type is given twice"),
    ("ap_fixed<16>", "ap_fixed<16>", "2 to 5 template arguments"),
    ("fixd<16,6>", "fixd<16,6>", "a TYPE for everything"),
    ("accum=fixed<24,8>,bias=8", None, "no weight precision"),
    ("8,fc1.acc=fixed<24,8>", "fc1.acc=fixed<24,8>", "accum"),
])
def test_parse_precision_rejects_garbage_naming_the_part_and_showing_the_grammar(text, part, problem):
    with pytest.raises(PrecisionSpecError) as e:
        parse_precision(text)
    message = str(e.value)
    assert isinstance(e.value, ValueError)
    assert problem in message
    if part:
        assert repr(part) in message
    assert GRAMMAR in message and "w8a16" in message


def test_precision_spec_validates_on_construction():
    assert PrecisionSpec("fixed<8,2>", 16).weight == FixedType(8, 2)
    with pytest.raises(PrecisionSpecError, match="outside"):
        PrecisionSpec(8, 40)
    with pytest.raises(PrecisionSpecError, match="neither"):
        PrecisionSpec(8, 8, (("fc1", 4),))
    assert PrecisionSpec(default="ap_fixed<16,6>").lookup("fc1", "accum") == FixedType(16, 6)
    with pytest.raises(PrecisionSpecError, match="give a TYPE"):
        PrecisionSpec(default="ap_fixed<16,6>", accum=16)
    with pytest.raises(PrecisionSpecError, match="no activation precision"):
        PrecisionSpec(weight=8, accum="fixed<24,8>")


def test_a_bare_type_is_every_weight_bias_activation_and_accumulator():
    spec = parse_precision("ap_fixed<16,6>")
    t = FixedType(16, 6)
    assert spec.default == t and (spec.weight, spec.act, spec.bias, spec.accum) == (None,) * 4
    assert all(spec.lookup("fc1", f) == t for f in ("weight", "bias", "act", "mid", "accum"))


def test_other_items_override_the_bare_type_whatever_their_order():
    text = "fc1.accum=ap_fixed<24,10>,weight=fixed<8,3>,ap_fixed<16,6>,fc2.accum=auto,bias=12,accum=fixed<30,12>"
    spec = parse_precision(text)
    t = FixedType(16, 6)
    assert spec.lookup("fc1", "weight") == FixedType(8, 3) and spec.lookup("fc1", "act") == t
    assert spec.lookup("fc1", "bias") == 12 and spec.lookup("fc3", "mid") == t
    assert spec.lookup("fc1", "accum") == FixedType(24, 10) and spec.lookup("fc2", "accum") is None
    assert spec.lookup("fc3", "accum") == FixedType(30, 12)
    widths = parse_precision("8,ap_fixed<16,6>")
    assert [widths.lookup("fc1", f) for f in ("weight", "act", "bias", "accum")] == [8, 8, t, t]
    assert parse_precision("ap_fixed<16,6>,accum=auto").lookup("fc1", "accum") is None


# -- integer bits from the data ------------------------------------------------------------------

@pytest.mark.parametrize("lo, hi, width, signed", [(-1.0, 0.99, 8, True), (-1.0, 1.0, 8, True), (0.0, 5.5, 6, False),
                                                   (-0.01, 0.004, 8, True), (-300.0, 2.0, 10, True),
                                                   (0.0, 0.9999, 12, False)])
def test_fit_integer_bits_is_the_fewest_that_hold_the_range(lo, hi, width, signed):
    i = fit_integer_bits(Fraction(lo), Fraction(hi), width, signed)

    def saturates(integer: int) -> bool:
        t = FixedType(width, integer, signed, Rounding.RND_CONV, Overflow.SAT)
        back = to_float(quantize(np.array([lo, hi]), t), t)
        return bool(np.any(np.abs(back - [lo, hi]) > t.lsb / 2))

    assert not saturates(i) and saturates(i - 1)


# -- quantize_graph ----------------------------------------------------------------------------------

def float_mlp(seed: int = 0, n_in: int = 6, hidden: int = 10, n_out: int = 3) -> ir.Graph:
    rng = np.random.default_rng(seed)
    w1 = (rng.normal(size=(hidden, n_in)) * 0.6).astype(np.float32)
    w2 = (rng.normal(size=(n_out, hidden)) * 0.4).astype(np.float32)
    g = ir.sequential("mlp", ir.TensorSpec("x", (n_in,)), [
        (ir.Dense("fc1", ("x",), ("h",), weight=w1, bias=(rng.normal(size=hidden) * 0.2).astype(np.float32)),
         ir.TensorSpec("h", (hidden,))),
        (ir.ReLU("relu", ("h",), ("r",)), ir.TensorSpec("r", (hidden,))),
        (ir.Dense("fc2", ("r",), ("y",), weight=w2, bias=(rng.normal(size=n_out) * 0.2).astype(np.float32)),
         ir.TensorSpec("y", (n_out,)))])
    g.metadata["input_range"] = [-2.0, 2.0]
    return ir.validate(g)


def error_bound(q: ir.Graph, g: ir.Graph, x: np.ndarray) -> np.ndarray:
    """First-order worst case of |fixed - float| per sample and output, from the LSBs of the chosen types.

    Every cast rounds to nearest (RND_CONV), so it moves a value by at most half an LSB; saturation adds
    nothing here because each tensor's range holds its calibration extremes and the test inputs are the
    calibration inputs. For y = W x + b with quantized W' (|W' - W| <= lsb_W / 2), x' (|x' - x| <= d_x):
    |W'x' - Wx| <= sum_i |W'_i| d_x_i + |x_i| lsb_W / 2, plus lsb_b / 2 for the bias and lsb_y / 2 for the
    output cast. ReLU is 1-Lipschitz. A 1e-4 margin covers the float32 reference's own rounding.
    """
    env = emulate.run(g, x, keep=True)
    half = lambda t: q.tensors[t].dtype.lsb / 2  # noqa: E731
    d_x = half("x_q")
    fc1, fc2 = q.node("fc1"), q.node("fc2")
    w1 = to_float(fc1.weight, fc1.weight_type)
    d_h = (np.abs(w1).sum(axis=1) * d_x)[None] + (np.abs(env["x"]).sum(axis=1) * fc1.weight_type.lsb / 2)[:, None] \
        + fc1.bias_type.lsb / 2 + half("h")  # (N, hidden)
    d_r = d_h + half("r")
    w2 = to_float(fc2.weight, fc2.weight_type)
    return d_r @ np.abs(w2).T + (np.abs(env["r"]).sum(axis=1) * fc2.weight_type.lsb / 2)[:, None] \
        + fc2.bias_type.lsb / 2 + half("y") + 1e-4


@pytest.mark.parametrize("spec", ["w8a8", "w8a16", "w12a16", "w16a16"])
def test_quantize_graph_gives_a_valid_fixed_graph_within_the_lsb_error_bound(spec):
    g = float_mlp()
    x = np.random.default_rng(1).uniform(-2, 2, size=(400, 6)).astype(np.float32)
    q = quantize_graph(g, spec, calibration=x)
    ir.validate(q)
    w_bits, a_bits = (int(v) for v in spec[1:].split("a"))
    assert q.is_fixed and isinstance(q.nodes[0], ir.Quantize) and q.nodes[0].inputs == ("x",)
    assert q.inputs == ["x"] and q.outputs == ["y"]
    assert all(q.tensors[t].dtype.width == a_bits for t in ("x_q", "h", "r", "y"))
    assert q.node("fc1").weight_type.width == w_bits and q.tensors["r"].dtype.signed is False
    got = emulate.run_values(q, x)["y"]
    want = emulate.run(g, x)["y"]
    assert np.all(np.abs(got - want) <= error_bound(q, g, x))
    assert q.metadata["quantization"] == {"spec": str(parse_precision(spec)),
                                          "activation_ranges": "calibration (400 samples)"}


def test_without_a_declared_range_the_quantizer_takes_the_calibration_range():
    g = float_mlp()
    g.metadata.pop("input_range")
    x = np.random.default_rng(2).uniform(-0.7, 0.4, size=(200, 6)).astype(np.float32)
    q = quantize_graph(g, "w8a8", calibration=x)
    # 8 bits, [-1, 1): the fewest integer bits that hold the calibration inputs' range [-0.7, 0.4]
    assert q.tensors["x_q"].dtype == FixedType(8, 1, True, Rounding.RND_CONV, Overflow.SAT)
    assert np.all(np.abs(emulate.run_values(q, x)["y"] - emulate.run(g, x)["y"]) <= error_bound(q, g, x))


def test_wider_weights_shrink_the_error_with_their_lsb():
    g = float_mlp()
    x = np.random.default_rng(1).uniform(-2, 2, size=(400, 6)).astype(np.float32)
    err = {s: np.abs(emulate.run_values(quantize_graph(g, s, calibration=x), x)["y"] - emulate.run(g, x)["y"]).max()
           for s in ("w8a16", "w16a16")}
    # 8 more weight bits cut the dominant (weight) term 256-fold; the 16-bit activations' term is far below.
    assert err["w16a16"] < err["w8a16"] / 16


def test_weights_get_the_fewest_integer_bits_that_hold_them():
    g = float_mlp(3)
    q = quantize_graph(g, "w6a16", calibration=np.zeros((4, 6), np.float32))
    for name in ("fc1", "fc2"):
        w, t = g.node(name).weight.astype(np.float64), q.node(name).weight_type
        assert np.abs(to_float(q.node(name).weight, t) - w).max() <= t.lsb / 2  # no weight saturated
        narrower = t.with_(integer=t.integer - 1)
        assert np.abs(to_float(quantize(w, narrower), narrower) - w).max() > narrower.lsb / 2
        b_t = q.node(name).bias_type
        assert b_t.width == 12 and b_t.frac <= q.tensors[q.node(name).input].dtype.frac + t.frac


def test_without_calibration_activations_come_from_intervals_and_cannot_saturate():
    g = float_mlp(2)
    q = quantize_graph(g, "w8a12")
    assert q.metadata["quantization"]["activation_ranges"] == "interval analysis"
    assert check_precision(q) == []
    x = np.random.default_rng(4).uniform(-2, 2, size=(300, 6)).astype(np.float32)
    assert np.abs(emulate.run_values(q, x)["y"] - emulate.run(g, x)["y"]).max() < 0.1


def test_explicit_types_and_overrides_are_used_as_given():
    g = float_mlp()
    spec = f"weight={T8},act={T16},fc2.weight=fixed<6,1,RND_CONV,SAT>,relu.act=ufixed<12,3,RND_CONV,SAT>,x.act=10"
    q = quantize_graph(g, spec)
    assert q.node("fc1").weight_type == parse_type(T8)
    assert q.node("fc2").weight_type == parse_type("fixed<6,1,RND_CONV,SAT>")
    assert q.tensors["h"].dtype == parse_type(T16)
    assert q.tensors["r"].dtype == parse_type("ufixed<12,3,RND_CONV,SAT>")
    assert q.tensors["x_q"].dtype.width == 10
    assert q.metadata["quantization"]["spec"] == str(parse_precision(spec))


def test_quantize_graph_leaves_its_input_alone():
    g = float_mlp()
    w = g.node("fc1").weight.copy()
    quantize_graph(g, "8")
    assert g.node("fc1").weight.dtype == np.float32 and np.array_equal(g.node("fc1").weight, w)
    assert all(t.is_float for t in g.tensors.values()) and len(g.nodes) == 3


def test_low_rank_and_kan_layers_are_quantized_too():
    rng = np.random.default_rng(5)
    g = ir.sequential("mixed", ir.TensorSpec("x", (4,)), [
        (ir.LowRankDense("lr", ("x",), ("h",), u=rng.normal(size=(5, 2)).astype(np.float32),
                         v=rng.normal(size=(2, 4)).astype(np.float32),
                         bias=rng.normal(size=5).astype(np.float32)), ir.TensorSpec("h", (5,))),
        (ir.KANLayer("kan", ("h",), ("y",), coeffs=rng.normal(size=(3, 5, 8)).astype(np.float32), grid_lo=-4.0,
                     grid_hi=4.0, grid_size=5, order=3), ir.TensorSpec("y", (3,)))])
    g.metadata["input_range"] = [-1.0, 1.0]
    x = rng.uniform(-1, 1, size=(300, 4)).astype(np.float32)
    for calibration in (x, None):
        q = ir.validate(quantize_graph(g, "w10a16", calibration=calibration))
        lr, kan = q.node("lr"), q.node("kan")
        assert lr.mid_type.width == 16 and lr.accum_v_type is not None and lr.accum_type is not None
        assert kan.coeff_type.width == 10 and kan.accum_type is not None
        err = np.abs(emulate.run_values(q, x)["y"] - emulate.run(g, x)["y"]).max()
        # 10-bit coefficients (LSB ~ 2**-7) summed over 5 edges, a 2**-10 basis and a 16-bit input grid:
        # a few hundredths, against outputs of order 1.
        assert err < 0.05


# -- refusals ------------------------------------------------------------------------------------------

def test_an_already_quantized_graph_is_refused():
    with pytest.raises(QuantizeError, match="already quantized.*applies to float models"):
        quantize_graph(small_graph(0), "8")


def test_nan_weights_are_refused_naming_the_node():
    g = float_mlp()
    g.nodes[2].weight[1, 4] = np.nan
    message = r"Dense 'fc2': 'weight' holds 1 NaN/Inf value\(s\), first at index \(1, 4\)"
    with pytest.raises(QuantizeError, match=message):
        quantize_graph(g, "8")


def test_an_override_for_a_missing_layer_is_refused():
    with pytest.raises(QuantizeError, match="no node 'fc9'.*fc1, relu, fc2"):
        quantize_graph(float_mlp(), "8,fc9.weight=4")
    with pytest.raises(QuantizeError, match="ReLU 'relu' has no weight"):
        quantize_graph(float_mlp(), "8,relu.weight=4")


def test_width_only_activations_need_a_range():
    g = float_mlp()
    g.metadata.pop("input_range")
    with pytest.raises(QuantizeError, match="calibration data.*input_range"):
        quantize_graph(g, "8")
    q = quantize_graph(g, f"8,x.act={T16}")  # an explicit input type bounds everything after it
    assert q.tensors["x_q"].dtype == parse_type(T16)


def test_a_bias_type_finer_than_the_accumulator_is_refused():
    with pytest.raises(QuantizeError, match=r"fc1.*more than the exact sum.*fc1.accum=TYPE"):
        quantize_graph(float_mlp(), "w8a8,fc1.bias=fixed<16,-10,RND_CONV,SAT>")


# -- hls4ml's vocabulary: one type everywhere, accumulators -------------------------------------------------

def low_rank_kan(seed: int = 5) -> ir.Graph:
    rng = np.random.default_rng(seed)
    g = ir.sequential("mixed", ir.TensorSpec("x", (4,)), [
        (ir.LowRankDense("lr", ("x",), ("h",), u=rng.normal(size=(5, 2)).astype(np.float32),
                         v=rng.normal(size=(2, 4)).astype(np.float32),
                         bias=rng.normal(size=5).astype(np.float32)), ir.TensorSpec("h", (5,))),
        (ir.ScaleShift("bn", ("h",), ("s",), scale=(1 + rng.normal(size=5) * 0.1).astype(np.float32),
                       shift=(rng.normal(size=5) * 0.1).astype(np.float32)), ir.TensorSpec("s", (5,))),
        (ir.KANLayer("kan", ("s",), ("y",), coeffs=rng.normal(size=(3, 5, 8)).astype(np.float32), grid_lo=-4.0,
                     grid_hi=4.0, grid_size=5, order=3), ir.TensorSpec("y", (3,)))])
    g.metadata["input_range"] = [-1.0, 1.0]
    return ir.validate(g)


def test_a_bare_type_lands_exactly_on_every_weight_bias_and_tensor():
    t = parse_type("ap_fixed<16,6>")
    q = quantize_graph(float_mlp(), "ap_fixed<16,6>,accum=auto")
    assert all(q.tensors[name].dtype == t for name in ("x_q", "h", "r", "y"))  # the ReLU's output stays signed
    for name in ("fc1", "fc2"):
        n = q.node(name)
        assert (n.weight_type, n.bias_type) == (t, t)
        assert n.accum_type.frac == 2 * t.frac and n.accum_type.overflow == Overflow.WRAP  # inferred: exact


def test_accumulator_types_land_exactly_on_their_layers():
    # x: fixed<8,3> (frac 5), W: fixed<8,2> (frac 6): exact sums at frac 11, the frac these accumulators have
    spec = f"weight={T8},act=fixed<8,3,RND_CONV,SAT>,accum=fixed<24,13,TRN,SAT>,fc1.accum=fixed<30,19>"
    q = quantize_graph(float_mlp(), spec)
    assert q.node("fc1").accum_type == parse_type("fixed<30,19>")
    assert q.node("fc2").accum_type == parse_type("fixed<24,13,TRN,SAT>")
    # lr: x and mid fixed<16,5> (frac 11), u and v fixed<10,3> (frac 7); kan: coeffs frac 7 + basis frac 10
    spec = "weight=fixed<10,3>,act=fixed<16,5>,lr.accum=fixed<40,22>,kan.accum=fixed<40,23>"
    q = quantize_graph(low_rank_kan(), spec)
    lr, kan = q.node("lr"), q.node("kan")
    assert lr.accum_v_type == lr.accum_type == parse_type("fixed<40,22>")
    assert kan.accum_type == parse_type("fixed<40,23>") and kan.basis_type.frac == 10
    assert q.node("bn").accum_type is not None  # inferred


def test_the_global_accum_leaves_kan_and_scale_shift_accumulators_to_inference():
    spec = "weight=fixed<10,3>,act=fixed<16,5>,accum=fixed<40,22>"
    q = quantize_graph(low_rank_kan(), spec)
    assert q.node("lr").accum_type == parse_type("fixed<40,22>")
    kan, bn = q.node("kan"), q.node("bn")
    assert kan.accum_type.frac == kan.coeff_type.frac + kan.basis_type.frac == 17
    assert bn.accum_type.frac == q.tensors["h"].dtype.frac + bn.scale_type.frac


def test_accumulator_overrides_the_pass_cannot_follow_are_refused():
    spec = "weight=fixed<10,3>,act=fixed<16,5>"
    with pytest.raises(QuantizeError, match=r"KANLayer 'kan': accumulator type fixed<40,22,TRN,WRAP> has 18 "
                                            r"fractional bits.*= 7 \+ 10 = 17.*kan.accum=auto"):
        quantize_graph(low_rank_kan(), f"{spec},kan.accum=fixed<40,22>")
    # h is fixed<16,5> (frac 11), the scale fixed<10,3> (frac 7): a ScaleShift's sum is exact at frac 18
    with pytest.raises(QuantizeError, match=r"ScaleShift 'bn': accumulator type fixed<40,20,TRN,WRAP> has 20 "
                                            r"fractional bits.*= 11 \+ 7 = 18.*bn.accum=auto"):
        quantize_graph(low_rank_kan(), f"{spec},bn.accum=fixed<40,20>")
    with pytest.raises(QuantizeError, match=r"ScaleShift 'bn': shift type fixed<24,2,TRN,WRAP> has 22 fractional "
                                            r"bits, more than the exact product's frac\(x\) \+ frac\(scale\) = 18; "
                                            r"give it at most 18"):
        quantize_graph(low_rank_kan(), f"{spec},bn.bias=fixed<24,2>")
    with pytest.raises(QuantizeError, match="'relu.accum': ReLU 'relu' has no accumulator"):
        quantize_graph(float_mlp(), "8,relu.accum=fixed<24,8>")
    with pytest.raises(QuantizeError, match="no node 'x'"):
        quantize_graph(float_mlp(), "8,x.accum=fixed<24,8>")


def test_a_scale_shift_accumulator_override_is_the_type_its_sum_is_held_in():
    """``NODE.accum`` types a ScaleShift's sum (hls4ml's BatchNormalization has no accumulator, so the HLS config
    pass gives it one that holds the sum for the input type's whole range): one wide enough computes what the
    inferred one does, a narrow WRAP one wraps, and the precision check says so."""
    spec = "weight=fixed<10,3>,act=fixed<16,5>"
    wide, narrow, inferred = (infer_precision(quantize_graph(low_rank_kan(), text)) for text in (
        f"{spec},bn.accum=fixed<40,22>", f"{spec},bn.accum=fixed<20,2>", spec))  # narrow: frac 18, holds [-2, 2)
    assert wide.node("bn").accum_type == parse_type("fixed<40,22>")
    assert narrow.node("bn").accum_type == parse_type("fixed<20,2>")
    assert inferred.node("bn").accum_type.width < 40
    x = np.random.default_rng(1).uniform(-1, 1, (500, 4)).astype(np.float32)
    runs = {name: emulate.run(ir.validate(g), x, keep=True) for name, g in
            (("wide", wide), ("narrow", narrow), ("inferred", inferred))}
    assert np.array_equal(runs["wide"]["s"], runs["inferred"]["s"])
    bn = wide.node("bn")
    exact = runs["wide"]["h"].astype(np.int64) * bn.scale.astype(np.int64) + \
        (bn.shift.astype(np.int64) << (18 - bn.shift_type.frac))
    assert np.abs(exact).max() >= 2 << 18  # some sums leave [-2, 2): the narrow accumulator wraps them
    assert not np.array_equal(runs["narrow"]["s"], runs["wide"]["s"])
    assert [w.tensor for w in check_precision(narrow) if w.where == "accumulator"] == ["bn.accum"]
    assert not [w for w in check_precision(wide) if w.where == "accumulator" and w.node == "bn"]


def test_explicit_types_are_not_refitted():
    # A width would get integer bits from the data and an unsigned type after the ReLU; a type is kept as typed.
    q = quantize_graph(float_mlp(), f"w8a8,relu.act={T16},fc1.bias=fixed<20,12,RND_CONV,SAT>")
    assert q.tensors["r"].dtype == parse_type(T16)
    assert q.node("fc1").bias_type == parse_type("fixed<20,12,RND_CONV,SAT>")


def test_hls4ml_default_types_land_with_narrow_accumulators():
    t = parse_type("ap_fixed<16,6>")
    q = quantize_graph(float_mlp(), "ap_fixed<16,6>")
    assert q.node("fc1").accum_type == q.node("fc2").accum_type == t  # frac 10, not the exact sum's 20
    narrow = parse_type("ap_fixed<12,4,AP_RND,AP_SAT>")
    q = quantize_graph(low_rank_kan(), "ap_fixed<16,6>,lr.accum=ap_fixed<12,4,AP_RND,AP_SAT>")
    assert q.node("lr").accum_v_type == q.node("lr").accum_type == narrow
    kan, bn = q.node("kan"), q.node("bn")
    assert kan.accum_type.frac == kan.coeff_type.frac + kan.basis_type.frac  # inferred: the bare TYPE skips it
    assert bn.accum_type.frac == t.frac + bn.scale_type.frac


def test_a_bias_finer_than_the_exact_sum_is_kept_when_its_layer_has_an_accumulator():
    # x and W at frac 2: the exact sum has frac 4; the bias (frac 10) is converted into accum_t, as in hls4ml
    q = quantize_graph(float_mlp(), "weight=fixed<8,6>,act=fixed<8,6>,fc1.bias=fixed<16,6>,fc1.accum=fixed<24,12>")
    assert q.node("fc1").bias_type == parse_type("fixed<16,6>")
    assert q.node("fc1").accum_type == parse_type("fixed<24,12>")
