"""Checkpoint format: safetensors + manifest, atomic writes, decoders, round trip onto a fresh base model."""
from __future__ import annotations

import json

import pytest
import torch
import transformers
from safetensors.torch import load_file

from bitforge.toolchain.compress import api, checkpoint
from bitforge.toolchain.compress.api import CompressConfig, CompressedLayer
from bitforge.toolchain.compress.checkpoint import (
    apply_checkpoint,
    load_checkpoint,
    read_manifest,
    register_decoder,
    save_checkpoint,
)
from bitforge.toolchain.compress.driver import quantize_model
from bitforge.toolchain.compress.model_io import compressible_linears
from bitforge.toolchain.errors import BitforgeError, VerificationFailed


def tiny_llama(seed: int = 0):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return transformers.LlamaForCausalLM(cfg).eval().requires_grad_(False)


CALIB = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(3))
SOURCE = {"spec": "tiny", "kind": "test", "path": "nowhere"}


@pytest.fixture
def temp_method():
    """Register test methods (and decoders) that are removed again after the test."""
    names, decoders = [], []

    def add(name, fn, decoder=None, decoder_key=None):
        api.METHODS[name] = fn
        names.append(name)
        if decoder is not None:
            register_decoder(decoder_key or name)(decoder)
            decoders.append(decoder_key or name)
        return name
    yield add
    for n in names:
        api.METHODS.pop(n, None)
    for d in decoders:
        checkpoint.DECODERS.pop(d, None)


def _sign_method(W, stats, cfg):
    """1-bit sign times a per-row float32 scale: a toy method whose stored tensors fully determine weight_hat."""
    scale = W.abs().mean(1, keepdim=True)
    signs = (W >= 0).to(torch.uint8)
    return CompressedLayer(torch.where(signs.bool(), scale, -scale), {"signs": signs, "scale": scale},
                           {"method": cfg.method, "bits": 1, "group": None, "zero_point": "none", "rank": 0,
                            "packing": "test-sign", "bpw": 1 + 32 / W.shape[1]})


def _decode_sign(tensors, meta):
    return torch.where(tensors["signs"].bool(), tensors["scale"], -tensors["scale"])


def test_rtn_round_trip_decodes_to_the_weights_that_were_evaluated(tmp_path):
    model = tiny_llama()
    q = quantize_model(model, CALIB, CompressConfig("rtn", bits=3, group=32))
    out = tmp_path / "ckpt"
    manifest = save_checkpoint(out, q, model, SOURCE, {"calibration": {"ctx": 16}})

    assert sorted(p.name for p in out.iterdir()) == [".bitforge.json", "manifest.json", "weights.safetensors"]
    on_disk = json.loads((out / "manifest.json").read_text())
    assert on_disk == json.loads(json.dumps(manifest))
    assert on_disk["format"] == checkpoint.FORMAT and on_disk["model"] == SOURCE
    assert on_disk["config"] == {"method": "rtn", "bits": 3, "group": 32, "rank": 0, "bpw": None, "seed": 0,
                                 "options": {}}
    assert on_disk["decoding"]["decoded_layers"] == 14 and on_disk["decoding"]["max_relative_error"] == 0.0
    layer = on_disk["layers"]["model.layers.0.self_attn.k_proj"]
    for key in ("method", "bits", "group", "zero_point", "rank", "packing", "bpw", "shape", "tensors"):
        assert key in layer
    assert layer["shape"] == [32, 64] and layer["tensors"] == ["codes", "scale", "zero"]
    weighted = sum(v["bpw"] * v["shape"][0] * v["shape"][1] for v in on_disk["layers"].values())
    assert on_disk["summary"]["bpw"] == pytest.approx(weighted / on_disk["summary"]["weights"])

    flat = load_file(str(out / "weights.safetensors"))
    assert len(flat) == 14 * 3 and "model.layers.1.mlp.down_proj.codes" in flat
    assert not any(name.endswith("weight") for name in flat), "no dense copy of the weights is stored"

    fresh = tiny_llama()  # the same base model, reloaded
    assert apply_checkpoint(fresh, load_checkpoint(out)) == 14
    for name, lin in compressible_linears(fresh).items():
        assert torch.equal(lin.weight, dict(model.named_modules())[name].weight), name
    assert torch.equal(fresh.model.embed_tokens.weight, model.model.embed_tokens.weight)


def test_a_method_decoder_round_trips_and_is_checked_at_write(tmp_path, temp_method):
    name = temp_method("test-sign", _sign_method, _decode_sign)
    model = tiny_llama()
    q = quantize_model(model, CALIB, CompressConfig(name))
    save_checkpoint(tmp_path / "c", q, model, SOURCE)
    fresh = tiny_llama()
    apply_checkpoint(fresh, load_checkpoint(tmp_path / "c"))
    for n, lin in compressible_linears(fresh).items():
        assert torch.equal(lin.weight, dict(model.named_modules())[n].weight)


def test_a_decoder_that_disagrees_with_its_method_fails_and_leaves_nothing(tmp_path, temp_method):
    name = temp_method("test-sign-bad", _sign_method, lambda t, m: _decode_sign(t, m) * 1.01)
    model = tiny_llama()
    q = quantize_model(model, CALIB, CompressConfig(name))
    with pytest.raises(VerificationFailed, match="decodes to a weight that differs"):
        save_checkpoint(tmp_path / "c", q, model, SOURCE)
    assert list(tmp_path.iterdir()) == []


def test_missing_decoder_is_recorded_and_loading_says_which(tmp_path, temp_method):
    name = temp_method("test-sign-nodec", _sign_method)
    model = tiny_llama()
    q = quantize_model(model, CALIB, CompressConfig(name))
    manifest = save_checkpoint(tmp_path / "c", q, model, SOURCE)
    assert manifest["decoding"]["no_decoder"] == ["test-sign-nodec (test-sign)"]
    ckpt = load_checkpoint(tmp_path / "c")
    with pytest.raises(BitforgeError, match="no decoder for method 'test-sign-nodec'"):
        apply_checkpoint(tiny_llama(), ckpt)


def test_method_decoder_takes_precedence_and_builtin_needs_its_exact_tensors(temp_method):
    from bitforge.toolchain.compress.uniform import rtn

    W = torch.randn(8, 64)
    layer = rtn(W, api.LayerStats.identity(64), CompressConfig("rtn", bits=4, group=32))
    meta = {**layer.meta, "method": "test-q-plus-lr"}
    # Q + low-rank style: the uniform packing plus extra factors must not be decoded as plain uniform
    extra = {**layer.tensors, "lr_left": torch.zeros(8, 2)}
    assert checkpoint.find_decoder(meta, extra) is None
    assert torch.equal(checkpoint.decode_layer("x", layer.tensors, meta), layer.weight_hat)
    temp_method("test-q-plus-lr", lambda *a: None, lambda t, m: torch.zeros(m["shape"]))
    assert torch.equal(checkpoint.decode_layer("x", extra, meta), torch.zeros(8, 64))


def test_write_is_atomic_replaces_a_checkpoint_and_refuses_foreign_folders(tmp_path):
    model = tiny_llama()
    q = quantize_model(model, CALIB, CompressConfig("rtn", bits=4, group=32))
    out = tmp_path / "c"
    save_checkpoint(out, q, model, SOURCE)
    assert read_manifest(out)["config"]["bits"] == 4
    m2 = tiny_llama()
    q2 = quantize_model(m2, CALIB, CompressConfig("rtn", bits=2, group=32))
    save_checkpoint(out, q2, m2, SOURCE)
    assert read_manifest(out)["config"]["bits"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"], "no temporary or old folder left behind"

    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(BitforgeError, match="a folder bitforge did not write"):
        save_checkpoint(foreign, q2, m2, SOURCE)
    assert (foreign / "notes.txt").read_text() == "keep me"
    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(BitforgeError, match="not a folder"):
        save_checkpoint(afile, q2, m2, SOURCE)


def test_reading_bad_checkpoints_is_a_clear_error(tmp_path):
    with pytest.raises(BitforgeError, match="no manifest.json"):
        read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(BitforgeError, match="not valid JSON"):
        read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "other", "version": 1}))
    with pytest.raises(BitforgeError, match="expected 'bitforge-compressed-lm'"):
        read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"format": checkpoint.FORMAT, "version": 1, "layers": {}}))
    with pytest.raises(BitforgeError, match="weights.safetensors is missing"):
        load_checkpoint(tmp_path)


def test_applying_to_a_different_model_is_refused(tmp_path):
    model = tiny_llama()
    q = quantize_model(model, CALIB, CompressConfig("rtn", bits=4, group=32))
    save_checkpoint(tmp_path / "c", q, model, SOURCE)
    other = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2)).eval()
    with pytest.raises(BitforgeError, match="another model"):
        apply_checkpoint(other, load_checkpoint(tmp_path / "c"))
