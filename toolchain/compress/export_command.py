"""``bitforge export CHECKPOINT --format gguf -o FILE``: argument parsing and printing only.

The work is :func:`bitforge.runtime.llm.gguf_export.export_gguf` (what converts, what is refused and why:
docs/compress.md, "Edge CPUs: GGUF export"). The lead wires :func:`add_export_command` into ``toolchain/cli.py``.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table

from ..console import console, examples, out_console, progress

FORMATS = ("gguf",)


def cmd_export(args: argparse.Namespace) -> int:
    from ...runtime.llm.gguf_export import export_gguf

    with console.status(f"exporting {args.checkpoint} to {args.format}"):
        rep = export_gguf(Path(args.checkpoint), Path(args.output), force=args.force, exact=args.exact,
                          log=progress)
    by_type: dict[str, list] = {}
    for r in rep.layers:
        by_type.setdefault(r.qtype, []).append(r)
    t = Table(title=f"{args.checkpoint} -> {rep.path}", title_justify="left")
    for col in ("ggml type", "layers", "blocks of 32", "m rounded (blocks)", "max |w change|"):
        t.add_column(col, justify="left" if col == "ggml type" else "right")
    for qtype, rs in sorted(by_type.items()):
        t.add_row(qtype, str(len(rs)), f"{sum(r.blocks for r in rs):,}",
                  f"{sum(r.inexact_m_blocks for r in rs):,}" if qtype == "Q4_1" else "-",
                  f"{max(r.max_abs_change for r in rs):.3g}")
    out_console.print(t)
    kept = sorted(set(rep.unchanged.values()))
    out_console.print(f"wrote {rep.path} ({rep.bytes / 2**20:.1f} MiB, {len(rep.layers)} layers converted, "
                      f"{len(rep.unchanged)} tensors from the base as {', '.join(kept)}) in {rep.seconds:.1f} s",
                      soft_wrap=True)
    if rep.inexact_m_blocks:
        out_console.print(f"note: Q4_1 stores m = zero * scale in float16; {rep.inexact_m_blocks:,} blocks rounded "
                          "it (each weight moves by at most 2^-11 |m|; --exact refuses instead)", soft_wrap=True)
    out_console.print(f"next: llama-cli -m {rep.path} -p \"...\"   or   bitforge eval-ppl {rep.path}",
                      soft_wrap=True)
    return 0


def add_export_command(sub, fmt) -> None:
    """Add ``export`` to bitforge's subcommands (``sub``: the subparsers; ``fmt``: the help formatter class)."""
    p = sub.add_parser(
        "export", formatter_class=fmt, help="write a compressed checkpoint as a GGUF file for llama.cpp",
        description="Write CHECKPOINT (a folder written by bitforge quantize) as one GGUF file that llama.cpp and "
                    "its frontends run on a CPU: the converted layers, the base model's other tensors, its Llama "
                    "metadata and tokenizer. Only what llama.cpp holds exactly converts: uniform layers with group "
                    "32 at 4 bits (symmetric, zero -8: Q4_0; otherwise Q4_1, whose float16 offset m = zero * scale "
                    "may round by <= 2^-11 |m|) and symmetric 8 bits (Q8_0). Other bits, groups, low-rank, binary "
                    "and NVFP4 layers are refused with the reason, per layer. The file is written under a "
                    "temporary name and renamed into place.",
        epilog=examples("""
            bitforge quantize smollm2 --method rtn --bits 4 --group 32 -o out/rtn-w4
            bitforge export out/rtn-w4 --format gguf -o model.gguf
            bitforge export out/rtn-w4 --format gguf -o model.gguf --exact   # refuse rounded Q4_1 offsets
            bitforge eval-ppl model.gguf         # the exported file through bitforge's GGUF loader
        """))
    p.add_argument("checkpoint", metavar="CHECKPOINT", help="folder written by bitforge quantize")
    p.add_argument("--format", required=True, choices=FORMATS, help="output format (gguf)")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="the file to write (replaced atomically)")
    p.add_argument("--exact", action="store_true",
                   help="refuse a Q4_1 layer whose offset m = zero * scale is not exactly a float16 (default: round "
                        "it to nearest and report the blocks)")
    p.add_argument("--force", action="store_true",
                   help="replace FILE even if it exists and bitforge export did not write it (a file it wrote is "
                        "replaced without --force)")
    p.set_defaults(func=cmd_export)
