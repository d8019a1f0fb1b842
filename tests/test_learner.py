"""Learner specs: formats, validation messages, the initial graph, files and seeds."""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from bitforge.toolchain import emulate, ir
from bitforge.toolchain.fixed import FixedType, Overflow, Rounding, parse_type, quantize
from bitforge.toolchain.learn.spec import (LearnerError, LearnerFormats, LearnerSpec, LearnerWarning, UpdateRule,
                                          build_learner, dead_zone_error, find_learner, init_params, lane_seeds,
                                          load_learner, nearest_lr_shift, save_learner)


def kan_spec(**kw) -> LearnerSpec:
    base = dict(kind="kan", sizes=(2, 3, 1), grid_range=(-2.0, 2.0), grid_size=5, order=3,
                formats=LearnerFormats.make("fixed<16,6>", guard_bits=8), rule=UpdateRule(2))
    base.update(kw)
    return LearnerSpec(**base)


# -- formats -------------------------------------------------------------------------------------------

def test_default_formats_follow_the_datapath():
    f = LearnerFormats.make("fixed<16,6>", guard_bits=8)
    assert f.datapath == FixedType(16, 6, True, Rounding.RND_CONV, Overflow.SAT) == f.input
    assert f.coeff == FixedType(16, 6, True, Rounding.TRN, Overflow.SAT)  # guard bits dropped on read
    assert (f.storage.width, f.storage.integer, f.guard_bits) == (24, 6, 8)
    assert f.basis == FixedType(17, 1, False, Rounding.RND_CONV, Overflow.SAT)
    assert (f.error.width, f.error.integer) == (17, 7)  # y_hat - t is exact
    assert LearnerFormats.from_json(json.loads(json.dumps(f.to_json()))) == f


@pytest.mark.parametrize("kw,match", [
    (dict(datapath="fixed<16,6,RND,WRAP>"), "saturates everywhere"),
    (dict(error="ufixed<17,7,RND,SAT>"), "must be signed"),
    (dict(basis="fixed<17,1,RND,SAT>"), "unsigned"),
    (dict(guard_bits=-1), "guard_bits"),
])
def test_bad_formats_are_refused(kw, match):
    kw = dict(kw)
    with pytest.raises(LearnerError, match=match):
        LearnerFormats.make(kw.pop("datapath", "fixed<16,6>"), **kw)


def test_storage_narrower_than_coeff_is_refused():
    f = LearnerFormats.make("fixed<16,6>", guard_bits=8)
    with pytest.raises(LearnerError, match="must cover"):
        LearnerFormats(f.input, f.datapath, f.coeff, parse_type("fixed<14,6,RND,SAT>"), f.basis, f.error)


# -- spec ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kw,match", [
    (dict(kind="cnn"), "kind"),
    (dict(sizes=(3,)), "sizes"),
    (dict(order=4), "order"),  # closed form exists for k <= 3
    (dict(grid_range=(1.0, 1.0)), "empty"),
    (dict(grid_size=0), "G must be"),
    (dict(grid_size=5000), "finer than"),  # h = 0.0008 < the <16,6> LSB 0.00098
    (dict(rule=UpdateRule(2, "stochastic")), None),
])
def test_spec_validation(kw, match):
    if match is None:
        assert kan_spec(**kw).rule.rounding == "stochastic"
        return
    with pytest.raises(LearnerError, match=match):
        kan_spec(**kw)


@pytest.mark.parametrize("kw,match", [(dict(lr_shift=-1), "lr_shift"), (dict(rounding="up"), "rounding"),
                                      (dict(rand_bits=33), "rand_bits")])
def test_rule_validation(kw, match):
    with pytest.raises(LearnerError, match=match):
        UpdateRule(**kw)


def test_spec_json_round_trip_and_replace():
    s = kan_spec(rule=UpdateRule(3, "stochastic", lfsr_seed=5, rand_bits=12), seed=4)
    assert LearnerSpec.from_json(json.loads(json.dumps(s.to_json()))) == s
    t = s.replace(lr_shift=6, seed=9)
    assert (t.rule.lr_shift, t.rule.rounding, t.rule.lfsr_seed, t.seed) == (6, "stochastic", 5, 9)


# -- dead zone -----------------------------------------------------------------------------------------

def test_dead_zone_formula_matches_the_papers_bound():
    # arXiv 2602.02056 (docs/references.md): learning stops once |e| < ~3 2**(-F-3) / eta for cubic bases
    # (b_max = 2/3), F storage frac.
    s = kan_spec(rule=UpdateRule(4))
    F = s.formats.storage.frac
    assert dead_zone_error(s) == pytest.approx(3 * 2.0 ** (-F - 3) / 2.0 ** -4, rel=1e-3)


def test_underflowing_learning_rate_is_an_error_and_a_wide_dead_zone_warns():
    f = LearnerFormats.make("fixed<8,4>", guard_bits=0)
    with pytest.raises(LearnerError, match="underflows every update"):
        build_learner(kan_spec(formats=f, rule=UpdateRule(20)))
    with pytest.warns(LearnerWarning, match="dead zone"):
        build_learner(kan_spec(formats=f, rule=UpdateRule(6)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", LearnerWarning)
        build_learner(kan_spec(formats=f, rule=UpdateRule(6, "stochastic")))  # no dead zone on average
        build_learner(kan_spec(formats=LearnerFormats.make("fixed<8,4>", guard_bits=8), rule=UpdateRule(6)))


# -- the graph -----------------------------------------------------------------------------------------

def test_kan_learner_graph_holds_storage_codes_of_the_initial_state():
    s = kan_spec(init="normal", init_scale=0.2, seed=3)
    L = build_learner(s)
    assert [n.OP for n in L.graph.nodes] == ["KANLayer", "KANLayer"]
    k0, k1 = L.layers()
    assert k0.coeff_type == s.formats.storage and k0.accum_type is None
    assert k0.coeffs.shape == (3, 2, 8) and k1.coeffs.shape == (1, 3, 8)
    want = quantize(np.random.default_rng(3).normal(0, 0.2, size=(3, 2, 8)), s.formats.storage)
    np.testing.assert_array_equal(k0.coeffs, want)
    assert L.graph.tensors["x"].dtype == s.formats.input and L.graph.tensors["y"].dtype == s.formats.datapath
    with pytest.raises(Exception, match="accum_type"):  # the storage graph is not an inference graph
        emulate.run(L.graph, np.zeros((1, 2), dtype=np.int64))


def test_float_reference_and_fixed_learner_start_from_the_same_numbers():
    """One spec drives both: the float reference's initial parameters, rounded into storage, are the fixed-point
    learner's initial state (and init_params is what both draw)."""
    import torch
    from bitforge.models.online_learners import OnlineLearner

    for kind, sizes in (("kan", (2, 4, 1)), ("mlp", (2, 8, 1))):
        s = kan_spec(kind=kind, sizes=sizes, seed=11)
        drawn = build_learner(s).state()
        ref = OnlineLearner(s, seeds=[s.seed])
        flat = [p[0].detach().numpy() for p in ref.params]
        assert [a.shape for a in flat] == s.param_shapes() and sum(a.size for a in flat) == s.n_params
        for a, b in zip(flat, init_params(s)):
            np.testing.assert_array_equal(a, b)
        given = build_learner(s, initial=flat).state()
        for a, b in zip(drawn, given):
            assert a.keys() == b.keys()
            for k in a:
                np.testing.assert_array_equal(a[k], b[k])
        assert any(np.any(v != 0) for layer in drawn for v in layer.values())
        assert ref.eta.tolist() == [s.eta] == [2.0 ** -s.rule.lr_shift] and ref.params[0].dtype == torch.float64


def test_one_spec_one_default_grid():
    assert LearnerSpec().grid_range == (-1.0, 1.0) == LearnerSpec("mlp", (1, 4, 1)).grid_range
    assert LearnerSpec("kan", (2, 3, 1), grid_size=5, order=3).param_shapes() == [(3, 2, 8), (1, 3, 8)]
    assert LearnerSpec("mlp", (2, 4, 1)).n_params == 2 * 4 + 4 + 4 + 1
    assert LearnerSpec(rule=UpdateRule(3)).eta == 0.125


@pytest.mark.parametrize("eta,shift", [(0.1, 3), (0.125, 3), (1.0, 0), (0.7, 1), (0.0009, 10), (2.0 ** -40, 40)])
def test_learning_rates_round_to_the_nearest_power_of_two(eta, shift):
    assert nearest_lr_shift(eta) == shift


@pytest.mark.parametrize("eta", [0.0, -0.5, float("nan"), float("inf"), 4.0, 2.0 ** -45])
def test_learning_rates_without_a_shift_are_refused(eta):
    with pytest.raises(LearnerError, match="learning rate"):
        nearest_lr_shift(eta)


def test_float_input_inference_graph_quantizes_as_the_stream_does(tmp_path):
    """The learner predicts from real values: a Quantize node into the input format, then the inference graph."""
    s = kan_spec(seed=4, init="normal", init_scale=0.3)
    L = build_learner(s)
    g = L.inference_graph(float_input=True)
    assert g.nodes[0].OP == "Quantize" and g.tensors[g.inputs[0]].is_float
    x = np.random.default_rng(0).uniform(-3, 3, size=(64, 2))
    want = emulate.run(L.inference_graph(), quantize(x.astype(np.float32), s.formats.input))["y"]
    np.testing.assert_array_equal(emulate.run(g, x)["y"], want)
    assert np.any(want != 0)
    save_learner(L, tmp_path / "out" / "final")
    assert find_learner(tmp_path / "out") == tmp_path / "out" / "final"
    assert find_learner(tmp_path / "out" / "final") == tmp_path / "out" / "final"
    (tmp_path / "plain").mkdir()
    ir.save(L.inference_graph(), tmp_path / "plain")
    assert find_learner(tmp_path / "plain") is None and find_learner(tmp_path / "nowhere") is None


def test_initial_values_outside_storage_are_refused():
    s = kan_spec(formats=LearnerFormats.make("fixed<8,2>", guard_bits=4), sizes=(1, 1))
    with pytest.raises(LearnerError, match="do not fit the coefficient storage"):
        build_learner(s, initial=[np.full((1, 1, 8), 3.0)])
    with pytest.raises(LearnerError, match="shape"):
        build_learner(s, initial=[np.zeros((1, 1, 7))])


def test_inference_graph_reads_coefficients_into_the_coeff_type():
    s = kan_spec(kind="mlp", sizes=(3, 4, 2), seed=1)
    L = build_learner(s)
    g = L.inference_graph()
    fc0 = g.nodes[0]
    assert [n.OP for n in g.nodes] == ["Dense", "ReLU", "Dense"]
    assert fc0.weight_type == s.formats.coeff and fc0.accum_type.frac == s.formats.input.frac + s.formats.coeff.frac
    np.testing.assert_array_equal(fc0.weight, L.layers()[0].weight >> s.formats.guard_bits)  # TRN read
    x = quantize(np.random.default_rng(0).uniform(-2, 2, (5, 3)), s.formats.input)
    assert emulate.run(g, x)["y"].shape == (5, 2)


def test_with_state_and_with_rule():
    L = build_learner(kan_spec())
    st = L.state()
    st[0]["coeffs"][0, 0, 0] += 5
    M = L.with_state(st)
    assert M.layers()[0].coeffs[0, 0, 0] == L.layers()[0].coeffs[0, 0, 0] + 5
    assert L.with_rule(lr_shift=7).rule.lr_shift == 7 and L.rule.lr_shift == 2
    with pytest.raises(LearnerError, match="shape"):
        L.with_state([{"coeffs": np.zeros((1, 1, 1), np.int64)}, st[1]])


# -- files ---------------------------------------------------------------------------------------------

def test_save_load_round_trip(tmp_path):
    s = kan_spec(rule=UpdateRule(3, "stochastic", lfsr_seed=2), seed=8)
    L = build_learner(s)
    M = load_learner(save_learner(L, tmp_path / "learner"))
    assert M.spec == s
    for a, b in zip(L.state(), M.state()):
        np.testing.assert_array_equal(a["coeffs"], b["coeffs"])
    doc = json.loads((tmp_path / "learner" / "model.json").read_text())
    assert doc["metadata"]["learner"]["rule"]["lr_shift"] == 3


def test_load_refuses_plain_models_and_edited_files(tmp_path):
    L = build_learner(kan_spec())
    (tmp_path / "plain").mkdir()
    ir.save(L.inference_graph(), tmp_path / "plain")
    with pytest.raises(LearnerError, match="not a learner"):
        load_learner(tmp_path / "plain")
    save_learner(L, tmp_path / "l")
    mj = tmp_path / "l" / "model.json"
    doc = json.loads(mj.read_text())
    doc["metadata"]["learner"]["grid_size"] = 6
    mj.write_text(json.dumps(doc))
    with pytest.raises(LearnerError, match="does not match its learner spec"):
        load_learner(tmp_path / "l")


# -- seeds ---------------------------------------------------------------------------------------------

def test_lane_seeds_are_deterministic_nonzero_and_distinct():
    s = kan_spec(rule=UpdateRule(2, "stochastic", lfsr_seed=3))
    a, b = lane_seeds(s), lane_seeds(s)
    assert [x[0].shape for x in a] == [(3, 2, 4), (1, 3, 4)]
    flat = np.concatenate([x[0].ravel() for x in a])
    assert (flat > 0).all() and (flat < 2 ** 32).all() and len(np.unique(flat)) == flat.size
    np.testing.assert_array_equal(a[0][0], b[0][0])
    other = lane_seeds(s.replace(lfsr_seed=4))
    assert not np.array_equal(other[0][0], a[0][0])
    mlp = lane_seeds(kan_spec(kind="mlp", sizes=(3, 4, 2)))
    assert [tuple(x.shape for x in layer) for layer in mlp] == [((4, 3), (4,)), ((2, 4), (2,))]
