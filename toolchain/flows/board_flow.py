"""``bitforge flow MODEL --board B`` (and ``implement OUT --board B``): the device on a real board, to a bitstream.

The device top (the UART wrapper around the core) and its files come from ``OUT/rtl/manifest.json``'s
``device`` section. Its board-level top (:mod:`.board_top`) and pin file are generated for the board, then
synthesised, placed and routed, and packed with the same cached stages as ``implement``.

The clock: the first run is at the board's oscillator. When nextpnr's Fmax is below it, the flow asks the PLL
for the fastest frequency at or below :data:`~.clocking.FMAX_MARGIN` of that Fmax and runs again (a few times
at most, should place and route land lower the second time). Each run has its own folder,
``OUT/impl/<board>/<label>/`` (``board-clock``, ``pll-<Hz>hz``), so a rerun finds every stage cached; the chosen
run's bitstream, pin file and top are copied to ``OUT/impl/<board>/``, which is what ``report.json``
``boards.<board>`` names.
"""
from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Optional

from ..errors import BitforgeError
from ..jsonfile import read_json_object
from ..report.file import read_report, update_report
from .board_top import BoardTop, render_board_top
from .boards import Board, get_board
from .cache import StageCache, StageNotCached, sha256_file, write_atomic
from .clocking import DEFAULT_BAUD, FMAX_MARGIN, MHZ, PllConfig, UartTiming, plan_pll, uart_timing
from .implement import ManifestError
from .nextpnr import PnrResult, place_and_route
from .pack import PackResult, pack_bitstream
from .targets import RESOURCES, DoesNotFit, Target, check_fit
from .tools import Progress
from .yosys import SynthResult, synthesize

#: Place-and-route runs with a PLL after the one at the board clock, each slower than the last.
MAX_PLL_RUNS = 3


@dataclass(frozen=True)
class Device:
    """The device top a board top instantiates: ports clk, rst, uart_rx, uart_tx, busy; parameter CLKS_PER_BIT."""

    top: str
    files: tuple[str, ...]  # relative to OUT


def read_device(out: Path) -> Device:
    """The ``device`` section of ``OUT/rtl/manifest.json``: ``{"top": "<name>_device", "files": [...]}``."""
    path = out / "rtl" / "manifest.json"
    if not path.is_file():
        raise ManifestError(f"{path}: missing; compile the model first (bitforge flow MODEL --board B -o {out})")
    m = read_json_object(path, ManifestError, f"compile the model again (bitforge flow MODEL --board B -o {out})")
    device = m.get("device")
    if device is None:
        raise ManifestError(f"{path}: no 'device' section, so there is no UART device top to put on a board; "
                            f"compile the model again with --to rtl (bitforge flow MODEL --board B -o {out})")
    if not isinstance(device, dict):
        raise ManifestError(f"{path}: 'device' must be an object {{\"top\": ..., \"files\": [...]}}, "
                            f"found {type(device).__name__}")
    top, files = device.get("top"), device.get("files")
    if not isinstance(top, str) or not top.isidentifier():
        raise ManifestError(f"{path}: device.top must be the device module's name, found {top!r}")
    if not isinstance(files, list) or not files or not all(isinstance(f, str) for f in files):
        raise ManifestError(f"{path}: device.files must be a non-empty list of Verilog paths relative to {out}")
    missing = [f for f in files if not (out / f).is_file()]
    if missing:
        raise ManifestError(f"{path}: device file(s) not found under {out}: {', '.join(missing)}")
    return Device(top, tuple(files))


@dataclass
class BoardRun:
    """One synthesis + place and route + pack of the board top at one core clock."""

    label: str
    work: Path
    top: BoardTop
    top_file: str
    pin_file: str
    uart: UartTiming
    pll: Optional[PllConfig]
    core_clock_hz: Fraction
    synth: SynthResult
    pnr: PnrResult
    packed: PackResult

    @property
    def core_mhz(self) -> float:
        return float(self.core_clock_hz / MHZ)

    @property
    def timing_met(self) -> Optional[bool]:
        return None if self.pnr.fmax_mhz is None else self.pnr.fmax_mhz >= self.core_mhz

    @property
    def cached(self) -> bool:
        return self.synth.run.cached and self.pnr.run.cached and self.packed.run.cached


def _write_if_changed(path: Path, text: str) -> None:
    if not path.is_file() or path.read_text() != text:
        write_atomic(path, text)


def _mhz(hz: Fraction | int) -> str:
    return f"{float(Fraction(hz) / MHZ):g}"


def _run_at(out: Path, root: Path, board: Board, t: Target, device: Device, pll: Optional[PllConfig], baud: int,
            seed: int, progress: Progress, reason: str) -> BoardRun:
    core = pll.output_hz if pll is not None else Fraction(board.clock_hz)
    uart = uart_timing(core, baud)
    top = render_board_top(board, device.top, uart, pll, clock_reason=reason)
    label = "board-clock" if pll is None else f"pll-{round(core)}hz"
    work = root / label
    work.mkdir(parents=True, exist_ok=True)
    top_file, pin_file = f"{top.top}.v", f"{top.top}{top.pin_file_suffix}"
    _write_if_changed(work / top_file, top.verilog)
    _write_if_changed(work / pin_file, top.pins)
    progress(f"{board.name}: core clock {_mhz(core)} MHz ({reason}); CLKS_PER_BIT {uart.clks_per_bit} for "
             f"{uart.baud_requested} baud ({100 * uart.error:+.3f} %)")
    cache = StageCache(work)
    sources = [os.path.relpath(out / f, work) for f in device.files] + [top_file]
    synth = synthesize(work, t, top.top, sources, cache=cache, progress=progress)
    check_fit(t, {**synth.resources, "io": synth.io_pins}, top.top)
    pnr = place_and_route(work, t, synth.netlist, top.top, clock_mhz=float(core / MHZ), seed=seed,
                          pin_file=pin_file, cache=cache, progress=progress)
    packed = pack_bitstream(work, t, pnr.placed, top.top, cache=cache, progress=progress)
    return BoardRun(label, work, top, top_file, pin_file, uart, pll, core, synth, pnr, packed)


def _runs(out: Path, root: Path, board: Board, t: Target, device: Device, baud: int, seed: int,
          core_clock_hz: Optional[float], progress: Progress) -> list[BoardRun]:
    """The board-clock run, then slower PLL runs while timing is missed; or one run at ``core_clock_hz``."""
    family, device_family = board.family, board.device_family
    if core_clock_hz is not None:
        if Fraction(core_clock_hz) == board.clock_hz:
            return [_run_at(out, root, board, t, device, None, baud, seed, progress, "asked for the board clock")]
        pll = plan_pll(family, board.clock_hz, core_clock_hz, at_most=False, device=device_family)
        reason = f"asked for {float(core_clock_hz) / MHZ:g} MHz"
        return [_run_at(out, root, board, t, device, pll, baud, seed, progress, reason)]
    runs = [_run_at(out, root, board, t, device, None, baud, seed, progress, "the board clock")]
    while runs[-1].timing_met is False and len(runs) <= MAX_PLL_RUNS:
        fmax = runs[-1].pnr.fmax_mhz
        want = Fraction(fmax).limit_denominator(1000) * MHZ * FMAX_MARGIN
        pll = plan_pll(family, board.clock_hz, want, at_most=True, device=device_family)
        progress(f"{board.name}: Fmax {fmax:.2f} MHz is below the {runs[-1].core_mhz:g} MHz core clock; placing "
                 f"and routing again at {_mhz(pll.output_hz)} MHz from the {pll.primitive}")
        reason = f"{float(FMAX_MARGIN) * 100:g} % of the {fmax:.2f} MHz Fmax reached at {runs[-1].core_mhz:g} MHz"
        runs.append(_run_at(out, root, board, t, device, pll, baud, seed, progress, reason))
    return runs


def _publish(root: Path, run: BoardRun) -> dict[str, Path]:
    """Copy the chosen run's bitstream, pin file and top to ``OUT/impl/<board>/`` (the paths the report names)."""
    published = {}
    for key, name in (("bitstream", run.packed.bitstream), ("constraints", run.pin_file), ("top", run.top_file)):
        src, dst = run.work / name, root / name
        if not dst.is_file() or sha256_file(dst) != sha256_file(src):
            tmp = dst.with_name(f".{dst.name}.tmp")
            shutil.copyfile(src, tmp)
            os.replace(tmp, dst)
        published[key] = dst
    return published


def _entry(out: Path, root: Path, board: Board, t: Target, runs: list[BoardRun]) -> dict:
    run = runs[-1]
    files = _publish(root, run)
    rel = lambda p: os.path.relpath(p, out)  # noqa: E731  (report paths are relative to OUT)
    resources = {r: run.pnr.resources.get(r, run.synth.resources.get(r)) for r in RESOURCES}
    warnings = []
    if run.timing_met is False:
        warnings.append(f"timing not met on the {board.name}: Fmax {run.pnr.fmax_mhz:.2f} MHz is below the "
                        f"{run.core_mhz:g} MHz core clock after {len(runs)} runs; see {rel(run.work / 'nextpnr.log')}")
    return {
        "board": board.name, "target": t.name, "top": run.top.top,
        "clock_hz": board.clock_hz, "core_clock_hz": _number(run.core_clock_hz),
        "pll": run.pll.to_json() if run.pll is not None else None,
        "baud": round(run.uart.baud, 3), "baud_requested": run.uart.baud_requested,
        "clks_per_bit": run.uart.clks_per_bit,
        "bitstream": rel(files["bitstream"]), "constraints": rel(files["constraints"]),
        "resources": resources, "fmax_mhz": run.pnr.fmax_mhz, "seconds": None,
        # Beyond the keys above, which the bundle reads: how the run went.
        "status": "ok", "timing_met": run.timing_met, "baud_error_percent": round(100 * run.uart.error, 4),
        "sha256": sha256_file(files["bitstream"]), "top_file": rel(files["top"]), "device": board.description,
        "platform": board.platform, "pins": {p.port: p.pin for p in board.pins},
        "runs": [{"folder": rel(r.work), "core_clock_hz": _number(r.core_clock_hz), "fmax_mhz": r.pnr.fmax_mhz,
                  "timing_met": r.timing_met, "cached": r.cached} for r in runs],
        "logs": {"yosys": rel(run.work / run.synth.run.log), "nextpnr": rel(run.work / run.pnr.run.log),
                 "pack": rel(run.work / run.packed.run.log)},
        "cached": all(r.cached for r in runs), "warnings": warnings,
    }


def _number(x: Fraction) -> int | float:
    return int(x) if x.denominator == 1 else round(float(x), 3)


def implement_board(out: Path, board: str, *, baud: int = DEFAULT_BAUD, seed: int = 1,
                    core_clock_hz: Optional[float] = None, progress: Optional[Progress] = None) -> dict:
    """Build the device in ``out`` for ``board``; returns ``boards.<board>`` of ``report.json`` (also written).

    ``core_clock_hz`` skips the clock choice and runs the core at the PLL's nearest output to it.
    Raises :class:`~.boards.UnknownBoard`, :class:`~.implement.ManifestError`, :class:`~.clocking.ClockError`
    (a baud rate or clock the board cannot make), :class:`~.targets.DoesNotFit` or :class:`~.tools.ToolFailed`.
    """
    progress = progress or (lambda message: None)
    b = get_board(board)
    t = b.target_info()
    out = Path(out).resolve()
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise BitforgeError(f"seed must be an integer, got {seed!r}")
    if core_clock_hz is not None and not core_clock_hz > 0:
        raise BitforgeError(f"the core clock must be a positive frequency, got {core_clock_hz!r}")
    if core_clock_hz is None:
        uart_timing(b.clock_hz, baud)  # a --baud the board clock cannot make fails before any tool runs
    device = read_device(out)
    read_report(out)  # a damaged report.json fails now, not after place and route
    root = out / "impl" / b.name
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:
        entry = _entry(out, root, b, t, _runs(out, root, b, t, device, baud, seed, core_clock_hz, progress))
    except StageNotCached:
        raise
    except Exception as e:
        try:
            _merge(out, b.name, _failure(out, b, t, e))
        except Exception as merge_error:
            e.add_note(f"(could not record the failure in {out / 'report.json'}: {merge_error})")
        raise
    entry["seconds"] = round(time.perf_counter() - t0, 3)
    _merge(out, b.name, entry)
    for w in entry["warnings"]:
        progress(f"warning: {w}")
    progress(f"{b.name}: {entry['bitstream']} in {entry['seconds']:.1f} s"
             + (" (every stage cached)" if entry["cached"] else ""))
    return entry


def _failure(out: Path, board: Board, t: Target, error: Exception) -> dict:
    log = getattr(error, "log", None)
    return {"status": "does-not-fit" if isinstance(error, DoesNotFit) else "failed", "board": board.name,
            "target": t.name, "error": str(error), "log": os.path.relpath(log, out) if log else None,
            "bitstream": None}


def _merge(out: Path, board: str, entry: dict) -> None:
    update_report(out, lambda report: report.setdefault("boards", {}).__setitem__(board, entry))
