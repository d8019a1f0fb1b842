"""The reference path and QuantizedLinear: ``x W^T`` from the packed tensors of every stored layout agrees with
today's decoders (decode -> dense matmul), modules dispatch through the kernel registry, the packed model's
perplexity equals the decoded-dense model's, and a checkpoint whose manifest and tensors disagree is refused
naming the layer.

Tolerance of reference vs decoded-dense: both compute the same real number ``sum_k x_k W_jk`` (with ``W = Q + L R``
or a sum of binary paths), in a different association order (factored: ``(x R^T) L^T``; dense: ``x (Q + L R)^T``).
Each float32 evaluation of a sum of products of depth ``K`` is within ``gamma_K * (|x| |W|^T)`` of the exact value
(Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., Sec. 3.1: ``gamma_K = K u / (1 - K u)``,
``u = 2^-24``), with ``|W|`` the product of the factors' absolute values; so the two differ by at most twice that.
For layouts without factors (uniform, NVFP4) the weight is dequantized by the same function as the decoder and
the matmul is the same operation, so the results are equal bit for bit, and that is what is asserted.
"""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from test_checkpoint import CALIB, tiny_llama
from test_cli_compress import TEXT, run_cli, tiny_folder  # noqa: F401  (tiny_folder is a fixture)

from bitforge.runtime.formats import binary
from bitforge.runtime.llm import modules, reference
from bitforge.runtime.llm.modules import QuantizedLinear, UnsupportedDevice, load_quantized
from bitforge.toolchain.compress import checkpoint, methods  # noqa: F401  (methods registers the decoders)
from bitforge.toolchain.compress.api import CompressConfig
from bitforge.toolchain.compress.driver import quantize_model
from bitforge.toolchain.errors import BitforgeError

# One configuration per stored layout and per method family that writes it.
CONFIGS = {
    "rtn": CompressConfig("rtn", bits=3, group=32),
    "gptq": CompressConfig("gptq", bits=4, group=32),
    "neuqi": CompressConfig("neuqi", bits=3, group=32),
    "neuqi+gptq-channel": CompressConfig("neuqi+gptq", bits=3, group=None),
    "osaq+rtn": CompressConfig("osaq+rtn", bits=4, group=32),
    "qera": CompressConfig("qera", bits=3, group=32, rank=4),
    "srr": CompressConfig("srr", bits=3, group=32, rank=4),
    "srr-on-nvfp4": CompressConfig("srr", bits=4, group=None, rank=4, options={"base": "nvfp4"}),
    "littlebit2-residual": CompressConfig("littlebit2", rank=4),
    "littlebit2-primary": CompressConfig("littlebit2", rank=4, options={"residual": False}),
    "nvfp4": CompressConfig("nvfp4"),
    "nvfp4-b128": CompressConfig("nvfp4-b128"),
}
FACTORED = {"qera", "srr", "srr-on-nvfp4", "littlebit2-residual", "littlebit2-primary"}
U = 2.0 ** -24


def gamma(k: int) -> float:
    return k * U / (1 - k * U)


@pytest.fixture(scope="module")
def quantized():
    """Each configuration applied to the same tiny Llama (2 blocks, 14 linears): the driver's QuantizedModel."""
    return {key: quantize_model(tiny_llama(), CALIB, cfg) for key, cfg in CONFIGS.items()}


def layer_meta(rec) -> dict:
    return {**rec.meta, "shape": list(rec.shape)}


def abs_product(tensors: dict, meta: dict) -> torch.Tensor:
    """``|W|`` as the product of the absolute values of the factors the layer is computed from."""
    if meta.get("method") in reference.LOWRANK_METHODS:
        base = {k[2:]: t for k, t in tensors.items() if k.startswith("q.")}
        q = checkpoint.decode_layer("base", base, {**meta, "method": meta["base"]}).abs()
        return q + tensors["lr_left"].float().abs() @ tensors["lr_right"].float().abs()
    if meta.get("packing") == binary.LAYOUT:
        total = 0
        for p in meta["paths"]:
            path = binary.BinaryLowRankPath.from_tensors(tensors, p)
            total = total + torch.outer(path.u1.float().abs(), path.v2.float().abs()) * path.latent.float().abs().sum()
        return total
    return checkpoint.decode_layer("plain", tensors, meta).abs()


@pytest.mark.parametrize("key", list(CONFIGS))
def test_reference_forward_agrees_with_the_decoder_then_a_dense_matmul(key, quantized):
    g = torch.Generator().manual_seed(1)
    for name, rec in quantized[key].layers.items():
        meta = layer_meta(rec)
        x = torch.randn(6, rec.shape[1], generator=g)
        y = reference.forward(x, rec.tensors, meta)
        dense = x @ checkpoint.decode_layer(name, rec.tensors, meta).T
        assert y.dtype == torch.float32 and y.shape == dense.shape
        if key in FACTORED:
            depth = rec.shape[1] + int(meta["rank"]) + 2
            bound = 2 * gamma(depth) * (x.abs() @ abs_product(rec.tensors, meta).T)
            assert bool(((y - dense).abs() <= bound).all()), (name, float((y - dense).abs().max()))
        else:
            assert torch.equal(y, dense), name


@pytest.mark.parametrize("bits", range(1, 9))
def test_the_fast_unpacking_gives_the_layout_modules_codes(bits):
    from bitforge.runtime.formats import uniform

    g = torch.Generator().manual_seed(bits)
    for shape in ((3, 64), (5, 13), (1, 1)):   # odd widths leave a padded last byte per row
        codes = torch.randint(0, 1 << bits, shape, generator=g).to(torch.uint8)
        packed = uniform.pack_codes(codes, bits)
        assert torch.equal(reference.unpack_uniform(packed, bits, shape), uniform.unpack_codes(packed, bits, shape))
        assert torch.equal(reference.unpack_uniform(packed, bits, shape), codes)


def test_factored_layers_really_are_not_computed_as_a_dense_matrix(quantized):
    """The low-rank term is ``(x R^T) L^T``: it differs (in rounding) from the dense product somewhere, which is
    the evidence that the reference does not fold ``L R`` into a dense weight first."""
    rec = quantized["srr"].layers["model.layers.0.mlp.up_proj"]
    x = torch.randn(64, rec.shape[1], generator=torch.Generator().manual_seed(2))
    dense = x @ checkpoint.decode_layer("up", rec.tensors, layer_meta(rec)).T
    assert not torch.equal(reference.forward(x, rec.tensors, layer_meta(rec)), dense)


@pytest.mark.parametrize("key", ["rtn", "srr", "littlebit2-residual", "nvfp4-b128"])
def test_quantized_linear_is_the_reference_and_keeps_the_packed_tensors(key, quantized):
    name, rec = next(iter(quantized[key].layers.items()))
    mod = QuantizedLinear(name, rec.tensors, layer_meta(rec))
    assert {n: b.dtype for n, b in mod.named_buffers()} == {
        n.replace(".", "__"): t.dtype for n, t in rec.tensors.items()}
    x = torch.randn(2, 3, rec.shape[1], generator=torch.Generator().manual_seed(3))
    ref = reference.forward(x.reshape(6, -1), rec.tensors, layer_meta(rec)).reshape(2, 3, -1)
    assert torch.equal(mod(x), ref)
    xb = x.to(torch.bfloat16)   # activations in bfloat16: float32 arithmetic on the same values, cast at the end
    ref_b = reference.forward(xb.float().reshape(6, -1), rec.tensors, layer_meta(rec)).reshape(2, 3, -1)
    assert mod(xb).dtype == torch.bfloat16 and torch.equal(mod(xb), ref_b.to(torch.bfloat16))


def test_a_kernel_registered_for_a_device_is_used_there_and_the_reference_elsewhere(quantized, monkeypatch):
    assert modules.find_kernel("uniform-v1", "cuda") is reference.uniform_forward   # fallback: the reference
    calls = []

    def fake(x, tensors, meta):
        calls.append(meta["shape"])
        return reference.uniform_forward(x, tensors, meta)

    monkeypatch.setitem(modules.KERNELS, ("uniform-v1", "cuda"), fake)
    assert modules.find_kernel("uniform-v1", "cuda") is fake
    assert modules.find_kernel("uniform-v1", "cpu") is reference.uniform_forward
    # On CPU, QuantizedLinear dispatches through the registry too: a replaced CPU entry is what runs.
    monkeypatch.setitem(modules.KERNELS, ("uniform-v1", "cpu"), fake)
    name, rec = next(iter(quantized["srr"].layers.items()))
    QuantizedLinear(name, rec.tensors, layer_meta(rec))(torch.zeros(1, rec.shape[1]))
    assert calls == [list(rec.shape)]


# -- whole models: packed perplexity == decoded-dense perplexity ---------------------------------------------

def packed_copy(q):
    model = tiny_llama()
    n = modules.replace_linears(model, {k: r.tensors for k, r in q.layers.items()},
                                {k: layer_meta(r) for k, r in q.layers.items()})
    assert n == 14 and not any(type(m) is torch.nn.Linear for m in model.model.layers.modules())
    return model


def dense_copy(q):
    model = tiny_llama()
    modules_by_name = dict(model.named_modules())
    with torch.no_grad():
        for name, rec in q.layers.items():
            modules_by_name[name].weight.copy_(checkpoint.decode_layer(name, rec.tensors, layer_meta(rec)))
    return model


@pytest.mark.parametrize("key", list(CONFIGS))
def test_packed_model_perplexity_equals_the_decoded_dense_models(key, quantized):
    """Logits differ at most by float32 rounding of re-associated sums (about 1e-6 relative), so perplexity,
    ``exp(mean NLL)``, agrees to far better than 1e-5 relative; uniform and NVFP4 layers agree bit for bit."""
    from bitforge.toolchain.compress.perplexity import perplexity

    q = quantized[key]
    chunks = torch.randint(0, 64, (3, 16), generator=torch.Generator().manual_seed(4))
    packed = perplexity(packed_copy(q), chunks).ppl
    dense = perplexity(dense_copy(q), chunks).ppl
    if key in FACTORED:
        assert packed == pytest.approx(dense, rel=1e-5)
    else:
        assert packed == dense


# -- checkpoints on disk: load_quantized, eval-ppl packed vs --dense, bad checkpoints -------------------------

@pytest.fixture(scope="module")
def ckpt(tiny_folder, tmp_path_factory):  # noqa: F811 - the fixture imported above
    """An SRR checkpoint (uniform base + low-rank factors) of the tiny HF folder, written by the real CLI."""
    model_dir, text = tiny_folder
    out = tmp_path_factory.mktemp("packed") / "srr"
    from bitforge.toolchain.cli import main

    code = main([str(a) for a in ("quantize", model_dir, "--method", "srr", "--bits", "3", "--group", "32",
                                  "--rank", "4", "--text", text, "--ctx", "16", "--eval-chunks", "2",
                                  "--calib-chunks", "2", "-o", out)])
    assert code == 0
    return out


def test_load_quantized_replaces_every_listed_linear(ckpt):
    model, tok = load_quantized(ckpt)
    manifest = json.loads((ckpt / "manifest.json").read_text())
    named = dict(model.named_modules())
    assert all(isinstance(named[n], QuantizedLinear) for n in manifest["layers"])
    assert not any(isinstance(m, torch.nn.Linear) for n, m in named.items() if n in manifest["layers"])
    assert isinstance(named["lm_head"], torch.nn.Linear)   # not listed: the base model's
    assert named["model.layers.0.mlp.up_proj"].packed()["q.codes"].dtype == torch.uint8
    assert tok("def f").input_ids


def test_eval_ppl_packed_default_equals_dense(ckpt, capsys, tmp_path):
    code, msg = run_cli(capsys, "eval-ppl", ckpt, "--json", tmp_path / "p.json")
    assert code == 0 and "run packed" in msg, msg
    code, msg = run_cli(capsys, "eval-ppl", ckpt, "--dense", "--json", tmp_path / "d.json")
    assert code == 0 and "into dense weights" in msg, msg
    p, d = (json.loads((tmp_path / f).read_text()) for f in ("p.json", "d.json"))
    assert (p["weights"], d["weights"]) == ("packed", "dense")
    assert p["ppl"] == pytest.approx(d["ppl"], rel=1e-5)


def damaged(ckpt, tmp_path, edit_tensors=None, edit_manifest=None):
    """A copy of ``ckpt`` with its tensors and/or manifest edited."""
    import shutil

    out = tmp_path / "bad"
    shutil.copytree(ckpt, out)
    if edit_tensors:
        flat = load_file(str(out / "weights.safetensors"))
        edit_tensors(flat)
        save_file(flat, str(out / "weights.safetensors"))
    if edit_manifest:
        m = json.loads((out / "manifest.json").read_text())
        edit_manifest(m)
        (out / "manifest.json").write_text(json.dumps(m))
    return out


LAYER = "model.layers.1.self_attn.k_proj"
BAD = {
    "missing tensor": (dict(edit_tensors=lambda f: f.pop(f"{LAYER}.lr_left")),
                       [LAYER, "lacks tensors ['lr_left']"]),
    "wrong shape": (dict(edit_tensors=lambda f: f.__setitem__(f"{LAYER}.q.scale",
                                                              f[f"{LAYER}.q.scale"][:, :1].contiguous())),
                    [LAYER, "q.scale", "implies torch.float16 (32, 2)"]),
    "wrong dtype": (dict(edit_tensors=lambda f: f.__setitem__(f"{LAYER}.q.zero", f[f"{LAYER}.q.zero"].float())),
                    [LAYER, "q.zero is torch.float32", "implies torch.float16"]),
    "unknown packing": (dict(edit_manifest=lambda m: m["layers"][LAYER].__setitem__("packing", "uniform-v9")),
                        [LAYER, "unknown packing 'uniform-v9'", "uniform-v1"]),
    "manifest shape": (dict(edit_manifest=lambda m: m["layers"][LAYER].__setitem__("shape", [32, 128])),
                       [LAYER, "q.codes", "implies torch.uint8 (32, 48)"]),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_checkpoint_whose_manifest_and_tensors_disagree_is_refused_naming_the_layer(case, ckpt, tmp_path, capsys):
    edits, says = BAD[case]
    bad = damaged(ckpt, tmp_path, **edits)
    with pytest.raises(reference.PackedLayerError) as e:
        load_quantized(bad)
    for needle in says:
        assert needle in str(e.value), (needle, str(e.value))
    code, msg = run_cli(capsys, "eval-ppl", bad)   # the packed eval path refuses it the same way, exit 2
    assert code == 2 and LAYER in msg and "Traceback" not in msg, msg


def test_unsupported_device_or_dtype_is_refused_before_loading(ckpt, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UnsupportedDevice, match="no CUDA GPU.*--device cpu"):
        load_quantized(ckpt, device="cuda")
    with pytest.raises(UnsupportedDevice, match="device 'tpu'"):
        load_quantized(ckpt, device="tpu")
    with pytest.raises(UnsupportedDevice, match="dtype torch.float64"):
        load_quantized(ckpt, dtype=torch.float64)
    assert issubclass(UnsupportedDevice, BitforgeError)
