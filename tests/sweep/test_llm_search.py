"""The LLM joint bit-width and rank search: the knapsack allocator, the proxy table against the registered methods,
and one search end to end on a tiny random Llama (no download)."""
from __future__ import annotations

import concurrent.futures
import json
import random

import pytest
import torch
import transformers

from bitforge.toolchain.compress.api import CompressConfig, LayerStats
from bitforge.toolchain.sweep import llm_alloc, llm_proxy, llm_search
from bitforge.toolchain.sweep.model import Axis, SweepError, SweepSpec

pytestmark = pytest.mark.usefixtures("one_thread")


# -- allocator ------------------------------------------------------------------------------------------------

def random_case(seed: int, layers: int = 4, cands: int = 3):
    rng = random.Random(seed)
    costs = [[rng.randint(1, 40) for _ in range(cands)] for _ in range(layers)]
    values = [[rng.random() for _ in range(cands)] for _ in range(layers)]
    return costs, values


@pytest.mark.parametrize("seed", range(12))
def test_dp_matches_brute_force_on_tiny_cases(seed):
    costs, values = random_case(seed)
    lo, hi = sum(min(c) for c in costs), sum(max(c) for c in costs)
    for budget in range(lo, hi + 1, 7):
        ref = llm_alloc.brute_force(costs, values, budget)
        got = llm_alloc.allocate(costs, values, budget)
        assert got.exact
        assert got.cost <= budget
        assert got.value == pytest.approx(ref.value, rel=1e-12, abs=1e-12)


def test_coarse_units_stay_within_budget_and_near_optimal():
    costs, values = random_case(99, layers=5, cands=4)
    costs = [[c * 1000 + 7 * i for i, c in enumerate(cl)] for cl in costs]    # gcd 1: the DP needs coarse units
    budget = sum(min(c) for c in costs) + 25_000
    ref = llm_alloc.brute_force(costs, values, budget)
    got = llm_alloc.allocate(costs, values, budget, max_steps=50)
    assert not got.exact
    assert got.cost <= budget
    assert got.value <= ref.value * 1.5 + 1e-9
    exact = llm_alloc.allocate(costs, values, budget, max_steps=10**6)
    assert exact.exact and exact.value == pytest.approx(ref.value)


def test_budget_below_the_cheapest_allocation_is_refused():
    with pytest.raises(SweepError, match="below the cheapest allocation"):
        llm_alloc.allocate([[5, 9], [4]], [[1.0, 0.5], [1.0]], 8)


# -- proxy ----------------------------------------------------------------------------------------------------

def layer(out=24, n_in=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(out, n_in, generator=g) * 0.1
    W += torch.randn(out, 3, generator=g) @ torch.randn(3, n_in, generator=g) * 0.2   # a low-rank part (SRR's k > 0)
    X = torch.randn(200, n_in, generator=g, dtype=torch.float64) * torch.linspace(0.2, 3.0, n_in, dtype=torch.float64)
    return W, LayerStats(X.T @ X, 200, "blk.0.lin")


@pytest.mark.parametrize("method", ["qera", "srr"])
def test_proxy_table_reproduces_the_method_bit_for_bit(method):
    W, stats = layer()
    table = llm_proxy.layer_table("blk.0.lin", W, stats, method, [2, 3], [8, None], [0, 2, 6], {}, 0)
    assert len(table["candidates"]) == 2 * 2 * 3
    H = stats.hessian
    ks = set()
    for c in table["candidates"]:
        cfg = CompressConfig(method, bits=c["bits"], group=c["group"], rank=c["rank"])
        w_hat, bpw = llm_proxy.check_against_method(W, stats, cfg)
        D = W.double() - w_hat.double()
        assert c["error"] == float(((D @ H) * D).sum())          # same W_hat, same arithmetic
        assert c["bpw"] == bpw
        assert c["cost"] == round(bpw * W.numel())
        if method == "srr" and c["rank"]:
            from bitforge.toolchain.compress.api import METHODS
            ks.add(METHODS["srr"](W.clone(), stats, cfg).meta["k"])
    errs = {(c["bits"], c["group"], c["rank"]): c["error"] for c in table["candidates"]}
    assert errs[(3, 8, 6)] < errs[(3, 8, 0)] < errs[(2, 8, 0)]   # more rank, more bits: less output error
    if method == "srr":
        assert ks != {0}, "the case should exercise SRR's preserved part"


def test_proxy_job_restores_threads_and_skips_ranks_above_the_layer():
    W, stats = layer(out=4, n_in=16)
    before = torch.get_num_threads()
    (table,) = llm_proxy.proxy_job([("l", W, stats)], "qera", [3], [8], [0, 2, 8], {}, 0, threads=1)
    assert torch.get_num_threads() == before
    assert sorted(c["rank"] for c in table["candidates"]) == [0, 2]


# -- settings -------------------------------------------------------------------------------------------------

def spec(base: dict, axes=()) -> SweepSpec:
    return SweepSpec("llm", base, tuple(axes), ("error", "bpw", "ppl", "proxy"), "golden", name="t",
                     source="t.yml", digest="d")


def test_settings_refuse_bad_input_naming_the_key():
    with pytest.raises(SweepError, match="budget_bpw"):
        llm_search.settings_from_spec(spec({}))
    with pytest.raises(SweepError, match=r"base\.bitz"):
        llm_search.settings_from_spec(spec({"budget_bpw": 3.5, "bitz": 3}))
    with pytest.raises(SweepError, match="method"):
        llm_search.settings_from_spec(spec({"budget_bpw": 3.5, "method": "gptq"}))
    with pytest.raises(SweepError, match="bits"):
        llm_search.settings_from_spec(spec({"budget_bpw": 3.5, "bits": [1, 3]}))
    st = llm_search.settings_from_spec(spec({"rank": [0, 4]}, [Axis("budget_bpw", (3.5, 4.0))]))
    assert st.budgets == (3.5, 4.0) and st.ranks == (0, 4) and st.methods == ("qera",)


def test_budget_bits_takes_the_decimal_as_written():
    assert llm_search.budget_bits(3.7, 10) == 37      # 3.7 * 10 is 37.00000000000001 in floats; 0.1 * 3 is not 0.3
    assert llm_search.budget_bits(0.3, 10) == 3


# -- end to end -----------------------------------------------------------------------------------------------

VOCAB = 96


class CharTokenizer:
    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) % VOCAB for c in text[:60_000]]}


def tiny_loader(_model):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return transformers.LlamaForCausalLM(cfg).eval().requires_grad_(False), CharTokenizer()


class InProcess:
    """The executor protocol (``submit(fn, *args, num_cpus) -> Future``), run at once in this process."""

    def __init__(self):
        self.jobs = 0

    def submit(self, fn, *args, num_cpus=1):
        self.jobs += 1
        f = concurrent.futures.Future()
        f.set_result(fn(*args))
        return f


def test_search_end_to_end_on_a_tiny_llama(tmp_path):
    base = {"model": "tiny", "bits": [2, 3, 4], "rank": [0, 4], "group": 32, "ctx": 16, "calib_chunks": 4,
            "eval_chunks": 2, "select_chunks": 2, "proxies": ["fisher", "output", "relative"]}
    s = spec(base, [Axis("budget_bpw", (3.8,))])
    ex, seen = InProcess(), []
    rows = llm_search.run_llm_sweep(s, tmp_path, ex, seen.append, loader=tiny_loader)
    assert ex.jobs == 2                                            # one proxy job per decoder block
    assert [r.key for r in seen] == [r.key for r in rows]
    assert all(r.status == "ok" for r in rows)
    alloc = [r for r in rows if r.params["config"] == "allocated"]
    uni = [r for r in rows if r.params["config"].startswith("uniform")]
    assert alloc and uni
    for r in alloc:
        doc = json.loads((tmp_path / r.files["allocation.json"]).read_text())
        assert len(doc["layers"]) == 14
        assert doc["measured"]["stored_bits"] <= doc["budget_bits"]
        assert r.metrics["bpw"] <= 3.8
        assert r.metrics["error"] == r.metrics["ppl"]
        assert r.metrics["proxy"] == pytest.approx(sum(v["fisher"] for v in doc["layers"].values()))
    for r in uni:
        assert r.metrics["bpw"] <= 3.8 and "budget_bpw" not in r.params
    # the Fisher survivor's summed proxy is at most every uniform configuration's within the budget
    fisher = next(r for r in alloc if "fisher" in json.loads((tmp_path / r.files["allocation.json"]).read_text())[
        "proxies"])
    assert fisher.metrics["proxy"] <= min(r.metrics["proxy"] for r in uni) + 1e-12
    summary = json.loads((tmp_path / "llm" / "summary.json").read_text())
    (search,) = summary["searches"]
    assert search["chosen"]["key"] in {r.key for r in alloc}
    assert search["best_uniform"]["ppl"] == min(r.metrics["ppl"] for r in uni)
    # a rerun measures nothing: proxies and rows come from OUT
    rows2 = llm_search.run_llm_sweep(s, tmp_path, ex, None, loader=tiny_loader)
    assert ex.jobs == 2
    assert all(r.cached for r in rows2)
    assert [r.metrics for r in rows2] == [r.metrics for r in rows]


def test_uniform_configs_keep_those_within_budget_not_beaten_on_every_layer():
    def cand(bits, rank, cost, error):
        return {"bits": bits, "group": 64, "rank": rank, "cost": cost, "error": error}

    table = {"layers": [
        {"name": "a", "candidates": [cand(2, 0, 10, 9.0), cand(3, 0, 15, 4.0), cand(2, 8, 14, 5.0),
                                     cand(4, 0, 20, 1.0)]},
        {"name": "b", "candidates": [cand(2, 0, 10, 8.0), cand(3, 0, 15, 3.0), cand(2, 8, 14, 2.0),
                                     cand(4, 0, 20, 1.0)]},
    ]}
    kept = {u["key"] for u in llm_search.uniform_configs(table, 30)}
    # w4 is over budget; w2 r0 loses to w3 r0 on both layers; w3 r0 and w2 r8 each win one layer
    assert kept == {(3, 64, 0), (2, 64, 8)}
    assert {u["key"] for u in llm_search.uniform_configs(table, 40)} == {(4, 64, 0)}


def test_output_fisher_is_the_mean_squared_loss_gradient_of_each_output():
    from bitforge.toolchain.compress.calibration import TextConfig
    from bitforge.toolchain.compress.model_io import compressible_linears
    from bitforge.toolchain.sweep import llm_eval

    session = llm_eval.open_session("tiny", TextConfig(ctx=16, eval_chunks=2, calib_chunks=3), 2, loader=tiny_loader)
    fisher = llm_eval.output_fisher(session, batch_size=2)
    name = "model.layers.1.mlp.up_proj"
    # the reference: the layer's weight made trainable, its output's .grad kept, one batch at a time
    lin = dict(session.model.named_modules())[name]
    kept, total = [], torch.zeros(lin.out_features, dtype=torch.float64)

    def keep(_m, _i, out):
        out.retain_grad()
        kept.append(out)

    handle = lin.register_forward_hook(keep)
    lin.weight.requires_grad_(True)
    try:
        for i in range(0, 3, 2):
            x = session.calib[i:i + 2]
            logits = session.model(input_ids=x).logits
            torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), x[:, 1:].reshape(-1),
                                              reduction="sum").backward()
            total += kept[-1].grad.reshape(-1, lin.out_features).double().square().sum(0)
    finally:
        handle.remove()
        lin.weight.requires_grad_(False)
    assert set(fisher) == set(compressible_linears(session.model))
    torch.testing.assert_close(fisher[name], total / (3 * 15), rtol=1e-5, atol=0)
    assert float(fisher[name].min()) > 0
