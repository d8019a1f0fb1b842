"""``bitforge generate`` and :func:`bitforge.runtime.llm.generate.generate`: greedy text from a packed checkpoint is
deterministic, equals step-by-step argmax of full (uncached) forwards and the decoded-dense model's text, streams
in pieces that add up to the result; sampling is reproducible per seed. One slow test runs the real SmolLM2."""
from __future__ import annotations


import pytest
import torch
from test_cli_compress import tiny_folder  # noqa: F401  (a fixture)

from bitforge.runtime.llm.generate import generate
from bitforge.runtime.llm.modules import QuantizedLinear, load_quantized
from bitforge.toolchain import cli
from bitforge.toolchain.compress import methods  # noqa: F401  (registers the checkpoint decoders)
from bitforge.toolchain.compress.checkpoint import apply_checkpoint, load_checkpoint
from bitforge.toolchain.errors import BitforgeError


def cli_main(argv, capsys, monkeypatch):
    """The real ``bitforge`` entry, its error handling included: (exit code, stdout, stderr)."""
    try:
        code = cli.main([str(a) for a in argv])
    except SystemExit as e:  # argparse
        code = e.code
    cap = capsys.readouterr()
    return code, cap.out, cap.err


@pytest.fixture(scope="module")
def rtn_ckpt(tiny_folder, tmp_path_factory):  # noqa: F811
    model_dir, text = tiny_folder
    out = tmp_path_factory.mktemp("gen") / "rtn"
    code = cli.main([str(a) for a in ("quantize", model_dir, "--method", "rtn", "--bits", "4", "--group", "32",
                                      "--text", text, "--ctx", "16", "--calib-chunks", "2", "-o", out)])
    assert code == 0
    return out


PROMPT = "def f1(x): return"


def test_generate_cli_streams_text_and_reports_the_speed(rtn_ckpt, capsys, monkeypatch):
    argv = ("generate", rtn_ckpt, "--prompt", PROMPT, "--max-new-tokens", "12")
    code, out, err = cli_main(argv, capsys, monkeypatch)
    assert code == 0, err
    assert out.startswith(PROMPT) and len(out.strip()) > len(PROMPT)
    assert "tokens/s" in err and "tokens in" in err and PROMPT not in err
    code2, out2, _ = cli_main(argv, capsys, monkeypatch)
    assert code2 == 0 and out2 == out   # greedy: the same text every run


def test_greedy_tokens_are_the_argmax_of_uncached_forwards_and_match_the_dense_model(rtn_ckpt, tiny_folder):  # noqa: F811
    model, tok = load_quantized(rtn_ckpt)
    assert any(isinstance(m, QuantizedLinear) for m in model.modules())
    pieces = []
    res = generate(model, tok, PROMPT, max_new_tokens=10, on_text=pieces.append)
    assert 1 <= len(res.tokens) <= 10 and res.prompt_tokens == len(tok(PROMPT).input_ids)
    assert "".join(pieces) == res.text and res.text == tok.decode(res.tokens, skip_special_tokens=True)
    ids = tok(PROMPT).input_ids
    with torch.no_grad():
        for t in res.tokens:   # the KV-cached loop picks what a full forward of the sequence so far picks
            assert int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()) == t
            ids.append(t)
    from bitforge.toolchain.compress.model_io import load_model

    dense = load_model(tiny_folder[0]).model
    apply_checkpoint(dense, load_checkpoint(rtn_ckpt))
    assert generate(dense, tok, PROMPT, max_new_tokens=10).tokens == res.tokens


def test_sampling_is_reproducible_per_seed(rtn_ckpt):
    model, tok = load_quantized(rtn_ckpt)
    a = generate(model, tok, PROMPT, max_new_tokens=8, temperature=1.5, seed=7).tokens
    assert generate(model, tok, PROMPT, max_new_tokens=8, temperature=1.5, seed=7).tokens == a
    draws = {tuple(generate(model, tok, PROMPT, max_new_tokens=8, temperature=1.5, seed=s).tokens) for s in range(4)}
    assert len(draws) > 1   # a 320-token vocabulary at T = 1.5: four seeds giving one sequence would be a bug


def test_generate_refuses_bad_arguments(rtn_ckpt):
    model, tok = load_quantized(rtn_ckpt)
    with pytest.raises(BitforgeError, match="max_new_tokens 0"):
        generate(model, tok, PROMPT, max_new_tokens=0)
    with pytest.raises(BitforgeError, match="temperature -1"):
        generate(model, tok, PROMPT, temperature=-1)
    with pytest.raises(BitforgeError, match="exceeds the model's context of 64 tokens"):
        generate(model, tok, PROMPT, max_new_tokens=100)


def test_help_has_an_example(capsys, monkeypatch):
    code, out, _ = cli_main(["generate", "--help"], capsys, monkeypatch)
    assert code == 0 and "examples:" in out and "bitforge generate out/" in out and "--max-new-tokens" in out


# -- the real SmolLM2 ---------------------------------------------------------------------------------

@pytest.mark.slow
def test_smollm2_rtn_w4_generates_on_cpu_and_packed_perplexity_equals_dense(tmp_path, capsys, monkeypatch):
    """Quantize SmolLM2-135M (RTN W4 g64, whole model) through the CLI, generate 16 greedy tokens twice on CPU
    (the same text), and eval-ppl on two 64-token chunks: packed (default) == --dense to float rounding."""
    import json

    out = tmp_path / "rtn"
    code = cli.main(["quantize", "smollm2", "--method", "rtn", "--bits", "4", "--group", "64", "--ctx", "64",
                     "--calib-chunks", "1", "--eval-chunks", "2", "-o", str(out)])
    assert code == 0
    capsys.readouterr()
    argv = ("generate", out, "--prompt", "def fibonacci(n):", "--max-new-tokens", "16")
    code, text, err = cli_main(argv, capsys, monkeypatch)
    assert code == 0, err
    assert text.startswith("def fibonacci(n):") and len(text) > len("def fibonacci(n):") + 8
    assert "tokens/s" in err
    code, text2, _ = cli_main(argv, capsys, monkeypatch)
    assert code == 0 and text2 == text   # greedy: the same text on a second run
    for flag, name in (((), "p.json"), (("--dense",), "d.json")):
        code, _, err = cli_main(("eval-ppl", out, *flag, "--json", tmp_path / name), capsys, monkeypatch)
        assert code == 0, err
    p, d = (json.loads((tmp_path / n).read_text()) for n in ("p.json", "d.json"))
    assert p["chunks"] == 2 and p["ppl"] == pytest.approx(d["ppl"], rel=1e-5)
