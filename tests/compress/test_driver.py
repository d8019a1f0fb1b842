"""The layer-by-layer driver, calibration statistics, text split and perplexity, on a tiny random Llama (no download)."""
from __future__ import annotations

import itertools
import math

import pytest
import torch
import transformers
from torch import nn

from bitforge.toolchain.compress import api
from bitforge.toolchain.compress.api import CompressConfig, CompressedLayer
from bitforge.toolchain.compress.calibration import InputStats, TextConfig, split_tokens
from bitforge.toolchain.compress.driver import (
    StatsCache,
    quantize_model,
    restore_weights,
    snapshot_weights,
)
from bitforge.toolchain.compress.model_io import compressible_linears
from bitforge.toolchain.compress.perplexity import perplexity
from bitforge.toolchain.compress.uniform import rtn
from bitforge.toolchain.errors import BitforgeError

VOCAB = 96


def tiny_llama(seed: int = 0, layers: int = 2) -> nn.Module:
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return transformers.LlamaForCausalLM(cfg).eval().requires_grad_(False)


def calib_tokens(n: int = 4, ctx: int = 16, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (n, ctx), generator=torch.Generator().manual_seed(seed))


class Recorder:
    """A test method that halves every weight and records the statistics each layer was given."""

    def __init__(self) -> None:
        self.seen: dict[str, api.LayerStats] = {}

    def __call__(self, W, stats, cfg):
        self.seen[stats.name] = stats
        return CompressedLayer(W * 0.5, {"w": W * 0.5}, {"method": cfg.method, "bpw": 32.0, "packing": "test-half",
                                                        "bits": 32, "group": None, "zero_point": "none", "rank": 0})


@pytest.fixture
def method(request):
    """Register a Recorder under a unique name for one test."""
    name = f"test-recorder-{request.node.name}"
    rec = Recorder()
    api.METHODS[name] = rec
    yield name, rec
    api.METHODS.pop(name, None)


def count_block_calls(model) -> list[int]:
    calls = [0]
    for block in model.model.layers:
        block.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


def test_rtn_driver_writes_every_block_linear_and_leaves_the_rest():
    model = tiny_llama()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = CompressConfig("rtn", bits=3, group=32)
    q = quantize_model(model, calib_tokens(), cfg)
    linears = compressible_linears(model)
    assert sorted(q.layers) == sorted(linears) and len(linears) == 2 * 7
    for name, lin in linears.items():
        expected = rtn(before[f"{name}.weight"], api.LayerStats.identity(lin.in_features), cfg).weight_hat
        assert torch.equal(lin.weight, expected), name
        assert q.layers[name].meta["method"] == "rtn" and q.layers[name].shape == tuple(lin.weight.shape)
    untouched = [k for k in before if not any(k.startswith(n + ".") for n in linears)]
    assert "model.embed_tokens.weight" in untouched and "model.norm.weight" in untouched
    for k in untouched:
        assert torch.equal(model.state_dict()[k], before[k]), k
    sizes = {n: lin.weight.numel() for n, lin in linears.items()}
    weighted = sum(q.layers[n].meta["bpw"] * sizes[n] for n in sizes) / sum(sizes.values())
    assert q.bpw == pytest.approx(weighted) and q.n_weights == sum(sizes.values())
    assert q.method_seconds > 0 and q.wall_seconds >= q.method_seconds


def _block_input_xtx(model, block_index: int, calib: torch.Tensor) -> dict[str, torch.Tensor]:
    """x^T x of q_proj's, o_proj's, gate_proj's and down_proj's inputs in one block, by explicit hooks."""
    block = model.model.layers[block_index]
    mods = {"q": block.self_attn.q_proj, "o": block.self_attn.o_proj, "gate": block.mlp.gate_proj,
            "down": block.mlp.down_proj}
    sums = {k: 0 for k in mods}

    def hook(key):
        def add(_module, inputs):
            x = inputs[0].reshape(-1, inputs[0].shape[-1]).double()
            sums[key] = sums[key] + x.T @ x
        return add
    handles = [m.register_forward_pre_hook(hook(k)) for k, m in mods.items()]
    with torch.no_grad():
        model(input_ids=calib)
    for h in handles:
        h.remove()
    return sums


def test_statistics_are_input_second_moments_and_shared_by_siblings(method):
    name, rec = method
    model, calib = tiny_llama(), calib_tokens()
    expected = _block_input_xtx(model, 0, calib)
    quantize_model(model, calib, CompressConfig(name), statistics="sequential", batch_size=3)  # 2 batches: both summed
    s = {k.split("layers.0.")[1]: v for k, v in rec.seen.items() if ".layers.0." in k}
    assert s["self_attn.q_proj"].n_tokens == calib.numel()
    torch.testing.assert_close(s["self_attn.q_proj"].xtx, expected["q"], rtol=1e-10, atol=1e-9)
    torch.testing.assert_close(s["self_attn.o_proj"].xtx, expected["o"], rtol=1e-10, atol=1e-9)
    torch.testing.assert_close(s["mlp.down_proj"].xtx, expected["down"], rtol=1e-10, atol=1e-9)
    # q/k/v and gate/up see one tensor: equal sums (the driver hands each method a private copy)
    for a, b in (("self_attn.q_proj", "self_attn.k_proj"), ("self_attn.q_proj", "self_attn.v_proj"),
                 ("mlp.gate_proj", "mlp.up_proj")):
        assert torch.equal(s[a].xtx, s[b].xtx)
    torch.testing.assert_close(s["mlp.gate_proj"].xtx, expected["gate"], rtol=1e-10, atol=1e-9)


def test_a_diag_method_gets_the_diagonal_only_and_cannot_read_the_full_hessian(method):
    name, rec = method
    model, calib = tiny_llama(), calib_tokens()
    expected = _block_input_xtx(model, 0, calib)
    rec.statistics = "diag"
    quantize_model(model, calib, CompressConfig(name), statistics="sequential", batch_size=3)
    s = rec.seen["model.layers.0.mlp.down_proj"]
    assert s.diag_only and s.xtx.shape == (expected["down"].shape[0],)
    # float32 sums of squares per batch (then float64): 1e-7 relative against the float64 reference
    torch.testing.assert_close(s.diag, torch.diagonal(expected["down"]) / calib.numel(), rtol=1e-6, atol=1e-12)
    with pytest.raises(RuntimeError, match="declared statistics = 'diag'"):
        s.hessian


def test_input_stats_compute_a_shared_input_once():
    model = tiny_llama()
    block = model.model.layers[0]
    linears = {n: m for n, m in block.named_modules() if isinstance(m, nn.Linear)}
    with InputStats(linears, block) as hooks, torch.no_grad():
        model(input_ids=calib_tokens())
    assert hooks.alias == {"self_attn.k_proj": "self_attn.q_proj", "self_attn.v_proj": "self_attn.q_proj",
                           "mlp.up_proj": "mlp.gate_proj"}
    assert len(hooks.xtx) == 4
    stats = hooks.stats()
    assert stats["self_attn.k_proj"].xtx is stats["self_attn.q_proj"].xtx


def test_sequential_calibrates_later_blocks_on_compressed_outputs_float_does_not(method):
    name, rec = method
    calib = calib_tokens()
    ref = tiny_llama()
    float_block1 = _block_input_xtx(ref, 1, calib)["q"]
    with torch.no_grad():
        for lin in ref.model.layers[0].modules():
            if isinstance(lin, nn.Linear):
                lin.weight.mul_(0.5)  # what the Recorder does to block 0
    compressed_block1 = _block_input_xtx(ref, 1, calib)["q"]
    assert not torch.allclose(float_block1, compressed_block1)

    quantize_model(tiny_llama(), calib, CompressConfig(name), statistics="sequential")
    torch.testing.assert_close(rec.seen["model.layers.1.self_attn.q_proj"].xtx, compressed_block1)
    rec.seen.clear()
    quantize_model(tiny_llama(), calib, CompressConfig(name), statistics="float")
    torch.testing.assert_close(rec.seen["model.layers.1.self_attn.q_proj"].xtx, float_block1)


def test_sequential_statistics_pass_stops_before_the_last_linear_runs(method):
    """The statistics pass needs every linear's input, not the block's output: with sequential statistics it stops
    in down_proj's pre-hook (its matmul never runs), and the last block gets no compressed forward either.
    (The statistics themselves are checked against a full forward above.)"""
    name, _ = method
    calib = calib_tokens()
    for statistics, expected in (("sequential", [2, 0]), ("float", [2, 2])):
        model = tiny_llama()
        ran = [0, 0]
        for i, block in enumerate(model.model.layers):
            block.mlp.down_proj.register_forward_hook(lambda *_, i=i: ran.__setitem__(i, ran[i] + 1))
        quantize_model(model, calib, CompressConfig(name), statistics=statistics, batch_size=2)  # 2 batches
        assert ran == expected, statistics


def test_true_sequential_calibrates_each_linear_on_the_compressed_linears_before_it(method):
    """true-sequential: q/k/v see the block input; o_proj sees attention computed with the compressed q/k/v;
    gate/up and down likewise after o, gate/up: the statistics of a float block whose earlier linears were already
    halved, measured by explicit hooks, linear by linear."""
    name, rec = method
    calib = calib_tokens()
    ref = tiny_llama()
    block = ref.model.layers[0]
    expected = {"q": _block_input_xtx(ref, 0, calib)["q"]}
    for key, halve in (("o", ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")),
                       ("gate", ("self_attn.o_proj",)), ("down", ("mlp.gate_proj", "mlp.up_proj"))):
        with torch.no_grad():
            for path in halve:
                block.get_submodule(path).weight.mul_(0.5)     # what the Recorder does, in forward order
        expected[key] = _block_input_xtx(ref, 0, calib)[key]
    with torch.no_grad():
        block.mlp.down_proj.weight.mul_(0.5)
    expected_block1 = _block_input_xtx(ref, 1, calib)["q"]

    model = tiny_llama()
    calls = count_block_calls(model)
    q = quantize_model(model, calib, CompressConfig(name), statistics="true-sequential", batch_size=1)
    assert calls[0] == 1 + 2, "the capture of block 0's inputs, then one forward per block (all chunks, one batch)"
    assert sorted(q.layers) == sorted(compressible_linears(model))
    seen = {k.split("layers.0.")[1]: v for k, v in rec.seen.items() if ".layers.0." in k}
    assert seen["self_attn.q_proj"].n_tokens == calib.numel()
    for key, layer in (("q", "self_attn.q_proj"), ("o", "self_attn.o_proj"), ("gate", "mlp.gate_proj"),
                       ("down", "mlp.down_proj")):
        torch.testing.assert_close(seen[layer].xtx, expected[key], rtol=1e-9, atol=1e-9, msg=layer)
    torch.testing.assert_close(rec.seen["model.layers.1.self_attn.q_proj"].xtx, expected_block1, rtol=1e-9, atol=1e-9)
    # and the o_proj statistics differ from those of the (GPTQ-protocol) sequential pass, which uses the float q/k/v
    rec.seen.clear()
    quantize_model(tiny_llama(), calib, CompressConfig(name), statistics="sequential")
    assert not torch.allclose(rec.seen["model.layers.0.self_attn.o_proj"].xtx, expected["o"])


def test_true_sequential_refuses_a_calibration_set_too_large_to_hold(method, monkeypatch):
    from bitforge.toolchain.compress import driver

    name, _ = method
    model = tiny_llama()
    calls = count_block_calls(model)
    monkeypatch.setattr(driver, "TRUE_SEQUENTIAL_MAX_BYTES", 1 << 16)
    with pytest.raises(BitforgeError, match="true-sequential holds all 64 calibration tokens.*--statistics sequential"):
        quantize_model(model, calib_tokens(), CompressConfig(name), statistics="true-sequential")
    assert calls[0] == 0


def test_stats_cache_runs_the_forwards_once_for_all_methods(method):
    name, rec = method
    model, calib = tiny_llama(), calib_tokens()
    snap = snapshot_weights(model)
    calls = count_block_calls(model)
    cache = StatsCache()
    quantize_model(model, calib, CompressConfig(name), statistics="float", cache=cache)
    first = calls[0]
    assert first > 0 and len(cache.blocks) == 2
    first_stats = {k: v.xtx.clone() for k, v in rec.seen.items()}
    restore_weights(model, snap)
    quantize_model(model, calib, CompressConfig(name), statistics="float", cache=cache)
    assert calls[0] == first, "the second method must not run any forward"
    for k, v in rec.seen.items():
        assert torch.equal(v.xtx, first_stats[k])


def test_method_without_calibration_runs_no_forward():
    name = "test-no-calibration"

    def fn(W, stats, cfg):
        assert torch.equal(stats.xtx, torch.eye(W.shape[1], dtype=torch.float64))
        return rtn(W, stats, CompressConfig("rtn", bits=4, group=32))
    fn.uses_calibration = False
    api.METHODS[name] = fn
    try:
        model = tiny_llama()
        calls = count_block_calls(model)
        q = quantize_model(model, None, CompressConfig(name))
        assert calls[0] == 0 and len(q.layers) == 14 and q.statistics == "none"
    finally:
        api.METHODS.pop(name)


def test_bad_group_and_unknown_method_fail_before_any_forward():
    model = tiny_llama()
    calls = count_block_calls(model)
    with pytest.raises(BitforgeError, match="does not divide the input dimension 64"):
        quantize_model(model, calib_tokens(), CompressConfig("rtn", bits=3, group=48))
    with pytest.raises(BitforgeError, match=r"unknown; available: .*rtn"):
        quantize_model(model, calib_tokens(), CompressConfig("no-such-method"))
    assert calls[0] == 0


def test_snapshot_restore_returns_the_base_weights():
    model = tiny_llama()
    snap = snapshot_weights(model)
    quantize_model(model, calib_tokens(), CompressConfig("rtn", bits=2, group=32))
    assert not all(torch.equal(lin.weight, snap[n]) for n, lin in compressible_linears(model).items())
    restore_weights(model, snap)
    assert all(torch.equal(lin.weight, snap[n]) for n, lin in compressible_linears(model).items())


# -- text split and perplexity ------------------------------------------------------------------------

def test_split_is_disjoint_eval_from_the_start_calibration_spread_over_the_rest():
    ids = torch.arange(1000)
    s = split_tokens(ids, TextConfig(ctx=10, eval_chunks=3, calib_chunks=5, eval_fraction=0.25))
    assert s.eval.flatten().tolist() == list(range(30))
    assert s.eval_end == 250
    starts = s.calib[:, 0].tolist()
    assert starts[0] == 250 and starts[-1] == 990  # spread from the start to the end of the calibration part
    assert all(b - a >= 10 for a, b in itertools.pairwise(starts))  # non-overlapping
    assert all(row.tolist() == list(range(row[0], row[0] + 10)) for row in s.calib)  # contiguous windows
    assert set(s.calib.flatten().tolist()).isdisjoint(range(250))


def test_text_too_short_is_a_clear_error():
    with pytest.raises(BitforgeError, match=r"too short: 100 tokens .* 8 x 512"):
        split_tokens(torch.arange(100), TextConfig())
    with pytest.raises(BitforgeError, match="too short"):
        split_tokens(torch.arange(1000), TextConfig(ctx=100, eval_chunks=2, calib_chunks=8))


def test_perplexity_of_a_uniform_predictor_is_the_vocabulary_size():
    model = tiny_llama()
    with torch.no_grad():
        model.lm_head.weight.zero_()  # logits all zero (tied or not): every token has probability 1/V
    chunks = calib_tokens(n=3, ctx=12)
    p = perplexity(model, chunks, batch_size=2)
    assert p.ppl == pytest.approx(VOCAB, rel=1e-5)
    assert p.predictions == 3 * 11 and p.chunks == 3
    assert p.nll == pytest.approx(3 * 11 * math.log(VOCAB), rel=1e-6)


def test_perplexity_matches_the_models_own_loss():
    model, chunks = tiny_llama(), calib_tokens(n=2, ctx=16)
    with torch.no_grad():
        losses = [float(model(input_ids=c[None], labels=c[None]).loss) for c in chunks]
    assert perplexity(model, chunks, batch_size=1).ppl == pytest.approx(math.exp(sum(losses) / 2), rel=1e-5)


def test_cli_offers_every_statistics_protocol_of_the_driver():
    from bitforge.toolchain.compress import commands, driver

    assert sorted(commands.STATISTICS) == sorted(driver.STATISTICS)
