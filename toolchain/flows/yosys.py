"""Synthesis with yosys (``synth_ice40 -dsp``, ``synth_ecp5``, ``synth_gowin``, ``synth_xilinx``).

The script is written to ``synth.ys`` beside the outputs so a user can rerun exactly what bitforge ran. The
cell census comes from ``stat -json`` (machine-readable, no text scraping); the top's ports come from the
JSON netlist, for the pin file and the I/O fit check. The same netlist is also written as Verilog
(``<top>.netlist.v``), which the gate-level check simulates with the family's cell models.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from . import render_template
from .cache import StageCache, StageRun, run_stage, sha256_file, stage_key, write_atomic
from .targets import Target
from .tools import TOOLS, Progress, command_line, run_tool

SCRIPT = "synth.ys"
STAT = "stat.json"
LOG = "yosys.log"
CONSOLE = "yosys.console.log"


@dataclass(frozen=True)
class Port:
    name: str
    direction: str  # "input" | "output" | "inout"
    width: int

    def nets(self) -> list[str]:
        """Pin-file names of the port's bits (``name`` for one bit, ``name[i]`` otherwise)."""
        return [self.name] if self.width == 1 else [f"{self.name}[{i}]" for i in range(self.width)]


@dataclass
class SynthResult:
    netlist: str
    verilog: str  # the synthesised netlist as Verilog (write_verilog), relative to the work folder
    cells: dict[str, int]
    resources: dict[str, float]
    ports: list[Port]
    run: StageRun

    @property
    def io_pins(self) -> int:
        return sum(p.width for p in self.ports)


def _arg(path: str) -> str:
    return f'"{path}"' if any(c.isspace() for c in path) else path


def synthesize(work: Path, target: Target, top: str, sources: list[str], *, cache: StageCache,
               progress: Progress) -> SynthResult:
    """Synthesise ``sources`` (paths relative to ``work``) for ``target``; cached on content."""
    netlist, verilog = f"{top}.json", f"{top}.netlist.v"
    script = render_template("synth.ys.j2", top=top, target=target.name, part=target.part,
                             sources=[_arg(s) for s in sources], synth=target.synth, netlist=netlist,
                             verilog=verilog, stat=STAT)
    args = ["-q", "-l", LOG, "-s", SCRIPT]
    key = stage_key({"stage": "synth", "target": target.name, "script": script, "args": args,
                     "yosys": TOOLS["yosys"].version(), "sources": {s: sha256_file(work / s) for s in sources}})
    label = f"yosys {target.synth} -top {top}"

    def execute() -> tuple[list[str], dict, float]:
        write_atomic(work / SCRIPT, script)
        run = run_tool("yosys", args, work, work / CONSOLE, tool_log=work / LOG, progress=progress, label=label)
        return [netlist, verilog, STAT, SCRIPT], _parse(work, netlist, top, target), run.seconds

    result, run = run_stage(cache, "synth", key, execute, command=command_line("yosys", args), log=LOG, label=label,
                            progress=progress)
    return SynthResult(netlist, verilog, result["cells"], result["resources"], [Port(**p) for p in result["ports"]],
                       run)


def _parse(work: Path, netlist: str, top: str, target: Target) -> dict:
    cells = read_cell_census(work / STAT)
    return {"cells": cells, "resources": target.count_cells(cells),
            "ports": [vars(p) for p in read_ports(work / netlist, top)]}


def read_cell_census(stat_json: Path) -> dict[str, int]:
    """Cell type -> count for the whole design (``stat -json`` after flattening: one module)."""
    data = json.loads(stat_json.read_text())
    design = data.get("design")
    if design and "num_cells_by_type" in design:
        counts = design["num_cells_by_type"]
    else:  # no design summary: add up the modules
        counts = {}
        for module in data.get("modules", {}).values():
            for cell, n in module.get("num_cells_by_type", {}).items():
                counts[cell] = counts.get(cell, 0) + n
    return {cell: int(n) for cell, n in sorted(counts.items()) if not cell.startswith("$")}


def read_ports(netlist: Path, top: str) -> list[Port]:
    modules = json.loads(netlist.read_text())["modules"]
    module = modules.get(top) or next((m for m in modules.values() if int(m.get("attributes", {}).get("top", "0"), 2)),
                                      None)
    if module is None:
        raise RuntimeError(f"{netlist}: yosys wrote no module '{top}'")
    return [Port(name, p["direction"], len(p["bits"])) for name, p in module.get("ports", {}).items()]
