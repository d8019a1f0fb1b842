"""Everything bitforge prints: the two consoles, progress lines and bars, warnings, and the summaries that
several commands share.

Results go to stdout (``out_console``: tables, "wrote ..." lines, verification results) and everything about
the run goes to stderr (``console``: progress, warnings, errors), so ``bitforge ... > result.txt`` keeps the
result clean. Library code reports through callbacks (``progress``) and return values; only the command
modules (``cli``, ``*/commands.py``) import this module.
"""
from __future__ import annotations

import contextlib
import textwrap
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

console = Console(stderr=True, highlight=False)
out_console = Console(highlight=False)


def examples(text: str) -> str:
    """The ``examples:`` epilog of a command's ``--help``."""
    return "examples:\n" + textwrap.indent(textwrap.dedent(text).strip(), "  ")


def progress(msg: str) -> None:
    """One progress line on stderr (the ``progress`` callback that library functions take)."""
    console.print(f"[dim]·[/dim] {escape(msg)}", soft_wrap=True)


def warn(msg: str) -> None:
    console.print(f"[yellow]warning:[/yellow] {escape(str(msg))}", soft_wrap=True)


def note(msg: str) -> None:
    console.print(f"[cyan]note:[/cyan] {escape(str(msg))}", soft_wrap=True)


def error(msg: str, kind: str = "error") -> None:
    console.print(f"[bold red]{kind}:[/bold red] {escape(str(msg))}", soft_wrap=True)


def result(msg: str) -> None:
    """A result line on stdout (markup in ``msg`` is printed literally)."""
    out_console.print(escape(str(msg)), soft_wrap=True)


def table_console(width: int = 140) -> Console:
    """stdout for a wide table: the terminal itself, or a fixed width for a log file (so it is not wrapped into 80
    columns)."""
    return out_console if out_console.is_terminal else Console(highlight=False, width=width)


def counted_progress(title: str) -> tuple[contextlib.AbstractContextManager, Callable[[int, int, str], None]]:
    """A rich progress bar and the ``(done, total, note)`` callback that advances it; when stderr is not a terminal
    (CI logs), one plain line per step instead."""
    if not console.is_terminal:
        def line(done: int, total: int, note_text: str) -> None:
            progress(f"{title}: {done}/{total} {note_text}")
        return contextlib.nullcontext(), line
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("{task.fields[note]}"), console=console, transient=False)
    task = bar.add_task(title, total=None, note="")

    def callback(done: int, total: int, note_text: str) -> None:
        bar.update(task, completed=done, total=total, note=note_text)
    return bar, callback


# -- summaries shared by compile, flow and demo ---------------------------------------------------------------

def print_compile_summary(report: dict, out: Path) -> None:
    """The layer table, the precision warnings and the ONNX verification line of a compile report."""
    t = Table(title=f"{report['graph']['name']} -> {out}", title_justify="left")
    for col in ("node", "op", "shape", "type", "parameters"):
        t.add_column(col, justify="right" if col == "parameters" else "left")
    for row in report["graph"]["layers"]:
        t.add_row(*(str(row[c]) for c in ("node", "op", "shape", "type", "parameters")))
    out_console.print(t)
    for w in report["precision"]["warnings"]:
        warn(w)
    v = report["verification"].get("golden_vs_onnxruntime")
    if v:
        result(onnx_verification_line(v))
    v = report["verification"].get("golden_vs_hls_csim")
    if v:
        result(hls_verification_line(v, report.get("hls", {})))


def hls_verification_line(v: dict, hls: dict) -> str:
    """The C-simulation check, and that no vendor tool ran (the project is for users who have one)."""
    return (f"golden model vs hls4ml C simulation (g++; {hls.get('backend', '?')} project in hls/, io_"
            f"{hls.get('io', '?')}, {hls.get('strategy', '?')}): {v['vectors']:,} vectors, {v['mismatches']} "
            "mismatches, bit-exact; no vendor tool was run")


def onnx_verification_line(v: dict) -> str:
    """What the ONNX check compared, so that "0 mismatches" is not read as a statement about accuracy: the golden
    model and ONNX Runtime both run bitforge's own export of the same compiled model."""
    kind = "bit-exact" if v["exact"] else f"within rtol {v['tolerance']['rtol']}"
    return (f"golden model vs ONNX Runtime running bitforge's own ONNX export: {v['vectors']:,} vectors, "
            f"{v['mismatches']} mismatches ({kind} agreement between two executors of the same compiled model, "
            "not accuracy)")


def verification_lines(report: dict) -> list[str]:
    """One line per check in a report's ``verification`` section (``bitforge inspect OUT``); raises KeyError or
    TypeError when the section is not what bitforge writes."""
    lines = []
    for name, v in report.get("verification", {}).items():
        if name == "golden_vs_onnxruntime":
            lines.append(onnx_verification_line(v))
        elif name == "golden_vs_hls_csim" and "mismatches" in v and "backend" in report.get("hls", {}):
            lines.append(hls_verification_line(v, report["hls"]))
        elif name in ("golden_vs_rtl", "golden_vs_netlist"):
            what = "RTL" if name == "golden_vs_rtl" else "netlist"
            lines += [f"golden model vs {what} ({k}): {r['vectors']:,} vectors, {r['mismatches']} mismatches"
                      for k, r in v.items()]
        else:
            lines.append(f"{name}: {v['vectors']:,} vectors, {v['mismatches']} mismatches")
    return lines


def print_simulation(sim: str, r: dict) -> None:
    what = sim if sim.startswith("netlist") else f"RTL ({sim})"  # "netlist <target>": the gate-level check
    result(f"golden model vs {what}: {r['vectors']:,} vectors, {r['mismatches']} mismatches, "
           f"{r['cycles']:,} cycles with random stalls")
    if r.get("waves"):
        result(f"waveform: {r['waves']}")


def print_target(target: str, r: dict) -> None:
    """One target's implementation row: resources, Fmax, latency, II, bitstream."""
    t = Table(title=f"{target}", title_justify="left")
    for col in ("LUT", "FF", "DSP", "BRAM", "Fmax MHz", "latency", "II", "bitstream"):
        t.add_column(col, justify="right")
    lat = f"{r.get('latency_cycles')} cyc"
    if r.get("latency_ns") is not None:
        lat += f" = {r['latency_ns']:.1f} ns"
    fmax = r.get("fmax_mhz")
    t.add_row(*(str(r.get(k)) for k in ("lut", "ff", "dsp", "bram")), f"{fmax:.1f}" if fmax else "-", lat,
              str(r.get("ii")), str(r.get("bitstream") or "none (synthesis estimate)"))
    out_console.print(t)


def print_bundle(bundle, checked: bool = False) -> None:
    """``bitforge inspect BUNDLE.bfb``: a verified bundle's manifest (``bitforge.runtime.bundle.Bundle``)."""
    m = bundle.manifest
    digest = "matches --expect-sha256" if checked else "not checked against a digest from elsewhere"
    result(f"bundle {bundle.path}: {bundle.size:,} bytes, SHA-256 {bundle.sha256} ({digest})")
    result(f"every member's size and SHA-256 match bundle.json ({len(m.members)} members)")
    result(f"model {m.model_name}: model_id {m.model_id}")
    result(f"  arch_id {m.arch_id}")
    result(f"bitforge {m.bitforge_version}, protocol version {m.protocol_version}, bundle format {m.format_version}")
    for kind, tensors in (("input", m.inputs), ("output", m.outputs)):
        for t in tensors:
            result(f"{kind} {t.name}: shape {list(t.shape)}, {t.type}")
    d = m.device
    weights = ("weights reloadable at run time (ram)" if (d.weights or {}).get("mode") == "ram" else
               "weights are constants of the bitstream")
    result(f"device {d.top}: in {d.input.name} {list(d.input.shape)} {d.input.type}, out {d.output.name} "
           f"{list(d.output.shape)} {d.output.type}; latency {d.latency_cycles} cycles, II {d.ii}; {weights}")
    ln = m.learner
    if ln is not None:
        rule, st = ln.rule, ln.state
        result(f"online learner {ln.kind} {list(ln.sizes)} (initial state learner/): targets {ln.t.name} "
               f"{list(ln.t.shape)} {ln.t.type}; eta 2^-{rule.get('lr_shift')}, {rule.get('rounding')} updates; "
               f"state {st.get('words')} words of {st.get('word_bits')} bits, {(st.get('storage') or {}).get('type')}")
    b = m.board
    if b is None:
        result("board: none (no bitstream: the simulated board and the CPU path)")
    else:
        fmax = "-" if b.fmax_mhz is None else f"{b.fmax_mhz:.1f} MHz"
        core = b.device_clock_hz
        asked = "" if b.baud_requested is None else f"{b.baud_requested:,} requested, "
        result(f"board {b.board} ({b.target}): bitstream {b.bitstream}")
        result(f"  core clock {core:,.0f} Hz (oscillator {b.clock_hz:,.0f} Hz), Fmax {fmax}; UART {b.baud:,.1f} baud "
               f"({asked}{b.clks_per_bit} clocks per bit)")
        if b.resources:
            result("  resources: " + ", ".join(f"{k} {v}" for k, v in b.resources.items()))
    t = Table(title="members", title_justify="left")
    for col in ("path", "bytes", "sha256"):
        t.add_column(col, justify="right" if col == "bytes" else "left")
    for member in m.members:
        t.add_row(escape(member.path), f"{member.size:,}", member.sha256)
    table_console(140).print(t)
