"""``bitforge generate CHECKPOINT --prompt ...``: argument parsing and printing only.

The generated text streams to stdout as it comes (so it can be piped); the load message and the speed line go to
stderr. Every check that needs no model (the checkpoint folder and its manifest, the tensors against the manifest,
the device and dtype) runs before the model is loaded (docs/compress.md, "Running a checkpoint").
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..cli_types import positive_int, seed
from ..console import console, examples, progress
from ..errors import BitforgeError

DEVICES = ("cpu", "cuda")
DTYPES = ("float32", "bfloat16", "float16")


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value


def cmd_generate(args: argparse.Namespace) -> int:
    import torch

    from ...runtime.llm.generate import generate
    from ...runtime.llm.modules import load_quantized
    from .checkpoint import is_checkpoint

    target = Path(args.checkpoint)
    if not is_checkpoint(target):
        raise BitforgeError(f"{target}: not a bitforge checkpoint folder (no manifest.json); write one with "
                            "bitforge quantize MODEL --method rtn -o OUT")
    if not args.prompt:
        raise BitforgeError("--prompt is empty; give the text to continue")
    with console.status(f"loading {target}"):
        model, tokenizer = load_quantized(target, device=args.device, dtype=getattr(torch, args.dtype),
                                          log=progress)

    def write(piece: str) -> None:
        sys.stdout.write(piece)
        sys.stdout.flush()

    write(args.prompt)
    result = generate(model, tokenizer, args.prompt, args.max_new_tokens, args.temperature, args.seed, on_text=write)
    write("\n")
    progress(f"{len(result.tokens)} tokens in {result.seconds:.2f} s: {result.tokens_per_second:.1f} tokens/s "
             f"({args.device}, {args.dtype}, prompt {result.prompt_tokens} tokens)")
    return 0


def add_generate_command(sub, fmt) -> None:
    """Add ``generate`` to bitforge's subcommands (``sub``: the subparsers action, ``fmt``: the formatter class)."""
    g = sub.add_parser(
        "generate", formatter_class=fmt, help="generate text from a compressed checkpoint",
        description="Continue --prompt with the model a bitforge quantize checkpoint describes: the base model with "
                    "every compressed layer run from its packed tensors (the reference path on CPU; a GPU kernel "
                    "where one is registered for the layer's format). Greedy by default, so the text is the same "
                    "on every run; the text streams to stdout, the speed goes to stderr.",
        epilog=examples("""
            bitforge generate out/rtn-w4 --prompt "def fibonacci(n):"
            bitforge generate out/rtn-w4 --prompt "Once upon a time" --max-new-tokens 64 --temperature 0.8 --seed 1
            bitforge generate out/nvfp4 --prompt "The capital of France is" --device cuda --dtype bfloat16
        """))
    g.add_argument("checkpoint", metavar="CHECKPOINT", help="a folder written by bitforge quantize")
    g.add_argument("--prompt", required=True, help="the text to continue")
    g.add_argument("--max-new-tokens", type=positive_int, default=32, metavar="N",
                   help="tokens to generate at most (default 32; stops earlier at end-of-sequence)")
    g.add_argument("--temperature", type=non_negative_float, default=0.0, metavar="T",
                   help="0 (default): greedy, deterministic; > 0: sample from softmax(logits / T)")
    g.add_argument("--seed", type=seed, default=0, help="sampling seed (with --temperature > 0)")
    g.add_argument("--device", choices=DEVICES, default="cpu", help="where to run (default cpu)")
    g.add_argument("--dtype", choices=DTYPES, default="float32",
                   help="activations and unquantized weights (default float32); the packed layers always "
                        "accumulate in float32")
    g.set_defaults(func=cmd_generate)
