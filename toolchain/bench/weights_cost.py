"""What reloadable weights cost: the same model at the same reuse, ``--weights rom`` against ``--weights ram``.

:func:`measure` compiles both designs and implements each on every target in one run (same tools, seed and
clock), returning one row per design and target (LUT, FF, DSP, block RAM, Fmax). The ``ram`` design's write
port (1 + address + word bits) would not fit a small part's pins (an iCE40 UP5K has 39), so it is measured
behind a bit-serial loader (``templates/weights_loader.v.j2``: three pins, address + word + 1 flip-flops,
about what a UART frame decoder holds for the port), which also keeps synthesis from removing write logic
that no pin drives. The ``rom`` design is measured as its board top; the loader's flip-flops are part of the
``ram`` numbers.

A target the design does not fit keeps its synthesis numbers with ``fmax_mhz`` None and the reason in
``error``. Work folders (``WORK/<model>-r<reuse>-<mode>``) are kept: the flows' caches make a rerun instant.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

from ..compiler import CompileOptions, compile_model
from ..errors import BitforgeError
from ..templating import environment

Progress = Callable[[str], None]

#: The parts of the issue's boards: iCEBreaker (iCE40 UP5K) and a small ECP5 (ULX3S has 12F..85F).
TARGETS = ("ice40-up5k", "ecp5-25f")
MODES = ("rom", "ram")
ROW_FIELDS = ("model", "reuse", "target", "weights", "lut", "ff", "dsp", "bram", "fmax_mhz", "ii", "latency_cycles",
              "error")


def measure(model: str, reuse: int, targets: Sequence[str] = TARGETS, work: Union[str, Path] = "out/weights-cost",
            seed: int = 1, progress: Optional[Progress] = None, precision: Optional[str] = None) -> list[dict]:
    """Rows of :data:`ROW_FIELDS` for ``model`` (a recipe, .onnx, .pt2 or IR folder) at reuse ``reuse``, rom then
    ram, on each target. ``seed`` is nextpnr's; ``precision`` is compile's ``--precision`` (None: the model's)."""
    from ..flows.implement import implement
    from ..flows.targets import DoesNotFit, get_target

    if not isinstance(reuse, int) or isinstance(reuse, bool) or reuse < 1:
        raise BitforgeError(f"reuse must be a positive integer (the same for both designs), got {reuse!r}")
    for t in targets:
        get_target(t)  # an unknown name fails before anything is built
    progress = progress or (lambda message: None)
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for mode in MODES:
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(model).stem if "/" in model else model)
        out = work / f"{name}{'-p' + precision if precision else ''}-r{reuse}-{mode}"
        progress(f"compiling {model} at reuse {reuse} with --weights {mode}")
        compile_model(model, out, CompileOptions(to=("rtl",), precision=precision, reuse=reuse, weights=mode),
                      force=True)
        if mode == "ram":
            add_loader(out)
        for t in targets:
            row = {"model": model + (f" --precision {precision}" if precision else ""), "reuse": reuse, "target": t,
                   "weights": mode}
            try:
                entry = implement(out, t, seed=seed, progress=progress)
            except DoesNotFit as e:  # the synthesis numbers of the resources it lacks, and why
                entry = {"error": str(e), **{r: needed for r, (needed, _) in e.over.items()}}
            row.update({k: entry.get(k) for k in ROW_FIELDS if k not in row})
            rows.append(row)
    return rows


def add_loader(out: Path) -> str:
    """Wrap OUT's ``--weights ram`` board top in the bit-serial loader and make it the top that ``implement``
    builds (``rtl/manifest.json`` ``top``/``board_top``, the file added to ``files``); returns its name."""
    path = out / "rtl" / "manifest.json"
    man = json.loads(path.read_text())
    weights = man.get("weights", {})
    if weights.get("mode") != "ram":
        raise BitforgeError(f"{path}: not a --weights ram design (weights mode {weights.get('mode')!r})")
    board = man["board_top"]
    top = f"{board}_weights_loader"
    text = environment("bitforge.toolchain.bench").get_template("weights_loader.v.j2").render(
        top=top, board=board, bus_w=man["bus_width"], addr_bits=weights["addr_bits"], word_bits=weights["word_bits"])
    (out / "rtl" / f"{top}.v").write_text(text)
    man["top"] = man["board_top"] = top
    man["files"] = sorted(set(man["files"]) | {f"rtl/{top}.v"})
    path.write_text(json.dumps(man, indent=2) + "\n")
    return top


def table(rows: Sequence[dict]) -> str:
    """The rows as a Markdown table, ram beside rom per target, with the ram/rom ratios."""
    lines = ["| model | reuse | target | LUT rom / ram | FF rom / ram | DSP rom / ram | BRAM rom / ram | "
             "Fmax MHz rom / ram |", "|---|---|---|---|---|---|---|---|"]
    by = {(r["model"], r["reuse"], r["target"], r["weights"]): r for r in rows}
    for (model, reuse, target, mode), rom in by.items():
        if mode != "rom" or (model, reuse, target, "ram") not in by:
            continue
        ram = by[(model, reuse, target, "ram")]
        cell = lambda k: f"{_fmt(rom.get(k))} / {_fmt(ram.get(k))}"  # noqa: E731
        lines.append(f"| {model} | {reuse} | {target} | {cell('lut')} | {cell('ff')} | {cell('dsp')} | "
                     f"{cell('bram')} | {cell('fmax_mhz')} |")
    return "\n".join(lines) + "\n"


def _fmt(v) -> str:
    if v is None:
        return "-"
    return f"{v:,.1f}" if isinstance(v, float) else f"{v:,}"
