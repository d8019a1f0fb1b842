"""``bitforge simulate``: the generated RTL against the golden model on Icarus and/or Verilator, through cocotb.

The vectors are the same seeded set as the ONNX check (edge values first); the core sees the codes of its
input tensor (the host quantizes), and every output is compared bit for bit with ``emulate``. The same bench
(:mod:`.cocotb_bench`) drives the post-synthesis netlist (:mod:`.netlist`).

When a run fails, it runs again with a waveform of the failing window (:mod:`.waves`): the bench is seeded,
so the rerun repeats the failure, and it stops a few cycles after it.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional

import numpy as np

from .. import emulate, ir
from ..errors import BitforgeError
from ..jsonfile import read_json_object
from ..fixed import FixedType
from ..report.file import read_report, update_report
from .simulators import SimulationFailed, TestOutcome, expand, run_cocotb
from .vectors import make_vectors
from .waves import WINDOW_AFTER_CYCLES, WINDOW_BEFORE_CYCLES, WaveDump, extension, run_cocotb_with_waves

#: Probability of an idle input cycle and of a stalled output cycle in the bench.
P_INPUT_GAP = 0.2
P_OUTPUT_STALL = 0.3
#: The bench's clock (axis.start_clock_and_reset's default).
CLOCK_PERIOD_NS = 10


#: The manifest fields the benches read, and their JSON types.
MANIFEST_FIELDS = {"top": str, "core_top": str, "input_tensor": str, "output_tensor": str, "files": list, "ii": int,
                   "latency_cycles": int, "bus_width": int}


def load_manifest(out: Path) -> dict:
    """``OUT/rtl/manifest.json``, checked before any simulation starts: its fields, and every file it lists."""
    m = Path(out) / "rtl" / "manifest.json"
    again = f"generate the RTL again (bitforge compile MODEL -o {out} --to rtl)"
    if not m.is_file():
        raise BitforgeError(f"{m}: missing; compile with --to rtl first (bitforge compile MODEL -o {out} --to rtl)")
    man = read_json_object(m, BitforgeError, again)
    for key, kind in MANIFEST_FIELDS.items():
        if not isinstance(man.get(key), kind) or isinstance(man.get(key), bool):
            raise BitforgeError(f"{m}: expected '{key}' ({kind.__name__}), found {man.get(key)!r}; {again}")
    missing = [f for f in man["files"] if not isinstance(f, str) or not (Path(out) / f).is_file()]
    if missing:
        raise BitforgeError(f"{m}: listed file(s) missing under {out}: {', '.join(map(str, missing[:5]))}; {again}")
    return man


def golden_codes(g: ir.Graph, manifest: dict, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(core input codes, expected core output codes) for ``n`` seeded vectors, one row per vector: a tensor of
    several axes (C, H, W) is flattened in C order, element i of the row at [i*W +: W] of the core's tdata."""
    env = emulate.run(g, make_vectors(g, n, seed), keep=True)
    rows = lambda t: np.asarray(env[manifest[t]], dtype=np.int64).reshape(n, -1)  # noqa: E731
    return rows("input_tensor"), rows("output_tensor")


@dataclass(frozen=True)
class BenchDesign:
    """What the stream bench drives: the sources of one top and how its ports carry the tensors.

    ``bus`` None: the core (``s_axis_*``/``m_axis_*``, a whole tensor per word); a width: the board top
    (``s_*``/``m_*``, each tensor as beats of ``bus`` bits)."""

    sources: tuple[Path, ...]
    top: str
    in_type: FixedType
    out_type: FixedType
    ii: int
    latency: int
    bus: Optional[int] = None
    includes: tuple[Path, ...] = ()
    defines: Mapping[str, object] = field(default_factory=dict)

    def max_cycles(self, vectors: int, in_width: int, out_width: int) -> int:
        beats = (-(-in_width // self.bus), -(-out_width // self.bus)) if self.bus else (1, 1)
        return int(vectors * (max(self.ii, *beats) + 2) * 4 + 10 * self.latency + 1000)


def core_design(out: Path, g: ir.Graph, man: dict) -> BenchDesign:
    return BenchDesign(tuple(out / f for f in man["files"]), man["core_top"], g.tensors[man["input_tensor"]].dtype,
                       g.tensors[man["output_tensor"]].dtype, man["ii"], man["latency_cycles"])


def run_bench(simulator: str, design: BenchDesign, xs: np.ndarray, ys: np.ndarray, work: Path, seed: int,
              waves: bool = False, progress: Callable[[str], None] = lambda m: None) -> tuple[dict, TestOutcome]:
    """Stream ``xs`` through ``design`` on ``simulator`` in ``work``; (the bench's result, the cocotb outcome).

    With ``waves`` the run writes ``work/waves.vcd`` (Icarus) or ``waves.fst`` (Verilator); without, a failed run
    is repeated up to the failure with its waveform in ``work/failure.vcd``/``.fst`` (``result["failure_waves"]``).
    """
    work.mkdir(parents=True, exist_ok=True)
    tin, tout = design.in_type, design.out_type
    np.savez(work / "vectors.npz", inputs=xs, expected=ys)
    cfg = {"vectors": str(work / "vectors.npz"), "result": str(work / "result.json"), "seed": seed,
           "in_width": tin.width, "in_frac": tin.frac, "out_width": tout.width, "out_frac": tout.frac,
           "out_signed": tout.signed, "out_count": int(ys.shape[1]), "bus": design.bus,
           "p_input_gap": P_INPUT_GAP, "p_output_stall": P_OUTPUT_STALL,
           "max_cycles": design.max_cycles(len(xs), tin.width * xs.shape[1], tout.width * ys.shape[1])}
    (work / "bench.json").write_text(json.dumps(cfg, indent=2))
    (work / "result.json").unlink(missing_ok=True)
    run = dict(simulator=simulator, sources=list(design.sources), toplevel=design.top, test_module="cocotb_bench",
               test_dir=Path(__file__).parent, build_dir=work / "build", includes=list(design.includes),
               defines=dict(design.defines), extra_env={"BITFORGE_BENCH": str(work / "bench.json")})
    dump = WaveDump(work / f"waves{extension(simulator)}") if waves else None
    outcome = run_cocotb_with_waves(dump=dump, **run) if dump else run_cocotb(**run)
    res_path = work / "result.json"
    res = json.loads(res_path.read_text()) if res_path.is_file() else {"vectors": len(xs), "mismatches": len(xs),
                                                                       "error": "the bench did not finish"}
    if dump is not None and dump.path.is_file():
        res["waves"] = str(dump.path)
    failed = outcome.failed or res.get("mismatches") or res.get("protocol_errors") or res.get("tlast_errors")
    if failed and dump is None and "first_failure" in res:
        progress(f"{simulator}: the run failed; running it again up to the failure to keep its waveform")
        res["failure_waves"] = _failure_window(run, cfg, res, work)
    return res, outcome


def _failure_window(run: dict, cfg: dict, res: dict, work: Path) -> Optional[str]:
    """Rerun the failed bench up to the failure with the waveform on; its path, or None if none came."""
    fail = res["first_failure"]
    rerun = {**cfg, "result": str(work / "failure_result.json"),
             "stop_cycle": int(fail["cycle"]) + WINDOW_AFTER_CYCLES}
    (work / "failure_bench.json").write_text(json.dumps(rerun, indent=2))
    dump = WaveDump(work / f"failure{extension(run['simulator'])}",
                    max(0.0, float(fail["time_ns"]) - WINDOW_BEFORE_CYCLES * CLOCK_PERIOD_NS))
    run_cocotb_with_waves(dump=dump, **{**run, "extra_env": {"BITFORGE_BENCH": str(work / "failure_bench.json")}})
    return str(dump.path) if dump.path.is_file() else None


def failure_message(label: str, res: dict, outcome: TestOutcome, work: Path) -> str:
    message = (f"{label}: {'; '.join(outcome.failures) or 'mismatches'} (log: {res['log']}; "
               f"bench files in {work}")
    waves = res.get("failure_waves") or res.get("waves")
    return message + (f"; waveform: {waves})" if waves else ")")


def simulate(out: Path, simulator: str = "both", vectors: int = 2000, seed: int = 0,
             progress: Callable[[str], None] = lambda m: None, waves: bool = False) -> dict:
    """Run the bench on each simulator; returns ``{simulator: result}`` and merges it into ``report.json``.

    ``waves`` writes each run's waveform (``result["waves"]``). The gate-level check of a synthesised netlist is
    :func:`.netlist.check_netlist`."""
    out = Path(out).resolve()
    sims = expand(simulator)
    g = ir.load(out)
    man = load_manifest(out)
    read_report(out)  # a damaged report.json fails now, not after the simulations
    for key in ("input_tensor", "output_tensor"):
        if man[key] not in g.tensors:
            raise BitforgeError(f"{out / 'rtl' / 'manifest.json'}: {key} '{man[key]}' is not a tensor of "
                                f"{out / 'model.json'}; the RTL and the model come from different compiles")
    xs, ys = golden_codes(g, man, vectors, seed)
    design = core_design(out, g, man)
    results = {}
    for sim in sims:
        work = out / "sim" / sim
        progress(f"{sim}: building and streaming {vectors:,} vectors through {man['core_top']}")
        t0 = time.perf_counter()
        res, outcome = run_bench(sim, design, xs, ys, work, seed, waves=waves, progress=progress)
        res.update(simulator=sim, seconds=round(time.perf_counter() - t0, 2), log=str(work / "build" / "sim.log"))
        results[sim] = res
        if outcome.failed or res.get("mismatches"):
            _merge_report(out, results)
            raise SimulationFailed(failure_message(sim, res, outcome, work))
    _merge_report(out, results)
    return results


#: The keys of a bench result that go to report.json.
REPORT_KEYS = ("vectors", "mismatches", "cycles", "tlast_errors", "protocol_errors", "first_mismatch",
               "first_protocol_error", "waves", "failure_waves")


def report_entry(out: Path, result: dict, keys=REPORT_KEYS) -> dict:
    """The result's ``keys`` for report.json, waveform paths relative to ``out`` (``flow`` moves the folder)."""
    entry = {k: result[k] for k in keys if k in result}
    for k in ("waves", "failure_waves"):
        if entry.get(k):
            entry[k] = os.path.relpath(entry[k], out)
    return entry


def _merge_report(out: Path, results: dict) -> None:
    def change(report: dict) -> None:
        section = report.setdefault("verification", {}).setdefault("golden_vs_rtl", {})
        for sim, r in results.items():
            section[sim] = report_entry(out, r)
    update_report(out, change)
