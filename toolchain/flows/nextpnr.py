"""Place and route with nextpnr (ice40, ecp5, himbaechel-gowin): a fixed seed, a clock constraint, a report.

nextpnr exits 1 when the clock constraint is missed; ``--timing-allow-fail`` keeps the routed design so the
flow can report the achieved Fmax with ``timing_met: false`` and a warning instead of no numbers at all.

Fmax and utilisation come from nextpnr's ``--report`` JSON (``fmax.<clock>.achieved``,
``utilization.<bel type>.used``). A run that fails because the design needs more cells of a type than the
part has becomes :class:`DoesNotFit` with nextpnr's numbers, like the check made after synthesis.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from .cache import StageCache, StageRun, run_stage, sha256_file, stage_key
from .targets import DoesNotFit, Target, check_fit
from .tools import TOOLS, Progress, ToolFailed, command_line, run_tool

REPORT = "nextpnr_report.json"
LOG = "nextpnr.log"
CONSOLE = "nextpnr.console.log"

_UTIL_LINE = re.compile(r"^Info:\s+(\S+):\s+(\d+)/\s*(\d+)\s+\d+%")


@dataclass
class PnrResult:
    placed: str
    fmax_mhz: Optional[float]  # the slowest clock's achieved frequency; None for a design without clocks
    clocks: dict[str, float]
    resources: dict[str, int]  # lut/ff/dsp/bram/io by the target's pnr_rules
    utilisation: dict[str, dict]  # nextpnr's own table: bel type -> {used, available}
    run: StageRun


def place_and_route(work: Path, target: Target, netlist: str, top: str, *, clock_mhz: float, seed: int,
                    pin_file: Optional[str], cache: StageCache, progress: Progress,
                    extra_args: Sequence[str] = ()) -> PnrResult:
    flow = target.flow
    assert flow is not None, f"{target.name} makes no bitstream"
    placed = f"{top}{flow.placed_suffix}"
    args = [*flow.device_args, *pin_file_args(target, pin_file), "--json", netlist,
            flow.placed_flag, placed, "--freq", f"{clock_mhz:g}", "--timing-allow-fail", "--seed", str(seed),
            "--report", REPORT, "-l", LOG, "-q", *extra_args]
    inputs = {name: sha256_file(work / name) for name in (netlist, *([pin_file] if pin_file else []))}
    key = stage_key({"stage": "pnr", "target": target.name, "args": args, "inputs": inputs,
                     "nextpnr": TOOLS[flow.nextpnr].version()})
    label = f"{flow.nextpnr} --seed {seed} --freq {clock_mhz:g}"

    def execute() -> tuple[list[str], dict, float]:
        try:
            run = run_tool(flow.nextpnr, args, work, work / CONSOLE, tool_log=work / LOG, progress=progress,
                           label=label)
        except ToolFailed:
            _raise_if_over_capacity(work / LOG, target, top)
            raise
        return [placed, REPORT], _parse_report(work / REPORT, target), run.seconds

    result, run = run_stage(cache, "pnr", key, execute, command=command_line(flow.nextpnr, args), log=LOG,
                            label=label, progress=progress)
    return PnrResult(placed, result["fmax_mhz"], result["clocks"], result["resources"], result["utilisation"], run)


def pin_file_args(target: Target, pin_file: Optional[str]) -> list[str]:
    """How each nextpnr takes a pin file: iCE40 a PCF, ECP5 an LPF, Gowin (himbaechel) a CST as a vopt."""
    if not pin_file:
        return []
    flags = {"ice40": ["--pcf", pin_file], "ecp5": ["--lpf", pin_file], "gowin": ["--vopt", f"cst={pin_file}"]}
    if target.family not in flags:
        raise RuntimeError(f"{target.name}: no pin file format known for the {target.family} family")
    return flags[target.family]


def _parse_report(path: Path, target: Target) -> dict:
    data = json.loads(path.read_text())
    clocks = {name: round(float(c["achieved"]), 2) for name, c in sorted(data.get("fmax", {}).items())}
    util = {k: {"used": int(v["used"]), "available": int(v["available"])}
            for k, v in sorted(data.get("utilization", {}).items())}
    rules = target.flow.pnr_rules if target.flow else {}
    resources = {r: sum(util.get(k, {"used": 0})["used"] for k in keys) for r, keys in rules.items()}
    return {"fmax_mhz": min(clocks.values()) if clocks else None, "clocks": clocks, "resources": resources,
            "utilisation": util}


def _raise_if_over_capacity(log: Path, target: Target, top: str) -> None:
    """nextpnr prints a utilisation table before placing; a row over 100% means the design cannot fit."""
    rows = {}
    for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
        m = _UTIL_LINE.match(line)
        if m:
            rows[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    over = {k: v for k, v in rows.items() if v[0] > v[1]}
    if not over:
        return
    rules = target.flow.pnr_rules if target.flow else {}
    need = {r: sum(rows.get(k, (0, 0))[0] for k in keys) for r, keys in rules.items()}
    check_fit(target, need, top)  # raises with the target's units and suggestions when a budget is exceeded
    numbers = "; ".join(f"needs {u} {k}, {target.name} has {a}" for k, (u, a) in over.items())
    raise DoesNotFit(f"design '{top}' does not fit {target.name} (nextpnr: {numbers}); see {log}",
                     target.name, {k: (float(u), float(a)) for k, (u, a) in over.items()})
