"""Distillation after LittleBit-2 (distill.py): the trainable form starts at the stored weight, training lowers the KL
to the teacher, and what the model computes afterwards is exactly what the rewritten checkpoint tensors decode to."""
from __future__ import annotations

import copy

import pytest
import torch
import transformers

from bitforge.runtime.formats.binary import BinaryLowRankPath
from bitforge.toolchain.compress.api import CompressConfig
from bitforge.toolchain.compress.distill import DistillConfig, TrainablePaths, distill
from bitforge.toolchain.compress.driver import quantize_model
from bitforge.toolchain.compress.littlebit import decode_paths, fit_path
from bitforge.toolchain.compress.model_io import compressible_linears
from bitforge.toolchain.errors import BitforgeError

pytestmark = pytest.mark.usefixtures("one_thread")
VOCAB = 96


def tiny_llama() -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return transformers.LlamaForCausalLM(cfg).eval().requires_grad_(False)


def compressed(rank: int = 8):
    model = tiny_llama()
    teacher = copy.deepcopy(model)
    calib = torch.randint(0, VOCAB, (1, 16), generator=torch.Generator().manual_seed(1))
    q = quantize_model(model, calib, CompressConfig("littlebit2", bits=1, group=None, rank=rank))
    return model, teacher, q, calib


def test_trainable_paths_start_at_the_stored_weight_and_store_back_unchanged():
    W = torch.randn(48, 40, generator=torch.Generator().manual_seed(0))
    paths = [fit_path(W, 6, itq_iters=5), fit_path(W * 0.1, 6, itq_iters=5, seed=1)]
    m = TrainablePaths(paths)
    assert torch.equal(m(None), decode_paths(paths))
    for a, b in zip(m.stored(), paths):
        for name in ("u_signs", "v_signs", "u1", "latent", "v2"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name


def test_distillation_lowers_the_kl_and_the_model_computes_what_the_checkpoint_decodes():
    model, teacher, q, calib = compressed()
    before = {n: rec.tensors["primary.u1"].clone() for n, rec in q.layers.items()}
    signs = {n: rec.tensors["primary.u_signs"].clone() for n, rec in q.layers.items()}
    report = distill(model, teacher, q, calib, DistillConfig(steps=25, lr=0.05))
    assert len(report.kl) == 25 and report.layers == 14
    assert report.kl[-1] < 0.7 * report.kl[0], report.kl
    lins = compressible_linears(model)
    for name, rec in q.layers.items():
        assert rec.meta["distilled"] is True
        assert not torch.equal(rec.tensors["primary.u1"], before[name]), f"{name}: scales not trained"
        assert torch.equal(rec.tensors["primary.u_signs"], signs[name]), f"{name}: signs must stay"
        paths = [BinaryLowRankPath.from_tensors(rec.tensors, p) for p in rec.meta["paths"]]
        assert torch.equal(lins[name].weight, decode_paths(paths)), name
        assert not hasattr(lins[name], "parametrizations")


def test_distillation_refuses_a_method_without_a_trainable_form():
    model = tiny_llama()
    calib = torch.randint(0, VOCAB, (1, 16), generator=torch.Generator().manual_seed(1))
    q = quantize_model(model, calib, CompressConfig("rtn", bits=3, group=32))
    with pytest.raises(BitforgeError, match="method rtn has no trainable form"):
        distill(model, tiny_llama(), q, calib, DistillConfig(steps=1))
