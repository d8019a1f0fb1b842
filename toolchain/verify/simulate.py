"""``bitforge simulate``: the generated RTL against the golden model on Icarus and/or Verilator, through cocotb.

The vectors are the same seeded set as the ONNX check (edge values first); the core sees the codes of its
input tensor (the host quantizes), and every output is compared bit for bit with ``emulate``.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

import numpy as np

from .. import emulate, ir
from ..errors import BitforgeError
from ..report.file import read_report, update_report
from .simulators import SimulationFailed, expand, run_cocotb
from .vectors import make_vectors

#: Probability of an idle input cycle and of a stalled output cycle in the bench.
P_INPUT_GAP = 0.2
P_OUTPUT_STALL = 0.3


#: The manifest fields the benches read, and their JSON types.
MANIFEST_FIELDS = {"top": str, "core_top": str, "input_tensor": str, "output_tensor": str, "files": list, "ii": int,
                   "latency_cycles": int, "bus_width": int}


def load_manifest(out: Path) -> dict:
    """``OUT/rtl/manifest.json``, checked before any simulation starts: its fields, and every file it lists."""
    m = Path(out) / "rtl" / "manifest.json"
    again = f"generate the RTL again (bitforge compile MODEL -o {out} --to rtl)"
    if not m.is_file():
        raise BitforgeError(f"{m}: missing; compile with --to rtl first (bitforge compile MODEL -o {out} --to rtl)")
    try:
        man = json.loads(m.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BitforgeError(f"{m}: not valid JSON ({e}); {again}") from None
    if not isinstance(man, dict):
        raise BitforgeError(f"{m}: expected a JSON object, found a {type(man).__name__}; {again}")
    for key, kind in MANIFEST_FIELDS.items():
        if not isinstance(man.get(key), kind) or isinstance(man.get(key), bool):
            raise BitforgeError(f"{m}: expected '{key}' ({kind.__name__}), found {man.get(key)!r}; {again}")
    missing = [f for f in man["files"] if not isinstance(f, str) or not (Path(out) / f).is_file()]
    if missing:
        raise BitforgeError(f"{m}: listed file(s) missing under {out}: {', '.join(map(str, missing[:5]))}; {again}")
    return man


def golden_codes(g: ir.Graph, manifest: dict, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(core input codes, expected core output codes) for ``n`` seeded vectors."""
    env = emulate.run(g, make_vectors(g, n, seed), keep=True)
    return (np.asarray(env[manifest["input_tensor"]], dtype=np.int64),
            np.asarray(env[manifest["output_tensor"]], dtype=np.int64))


def simulate(out: Path, simulator: str = "both", vectors: int = 2000, seed: int = 0,
             progress: Callable[[str], None] = lambda m: None) -> dict:
    """Run the bench on each simulator; returns ``{simulator: result}`` and merges it into ``report.json``."""
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
    tin, tout = g.tensors[man["input_tensor"]].dtype, g.tensors[man["output_tensor"]].dtype
    results = {}
    for sim in sims:
        work = out / "sim" / sim
        work.mkdir(parents=True, exist_ok=True)
        np.savez(work / "vectors.npz", inputs=xs, expected=ys)
        cfg = {"vectors": str(work / "vectors.npz"), "result": str(work / "result.json"), "seed": seed,
               "in_width": tin.width, "in_frac": tin.frac, "out_width": tout.width, "out_frac": tout.frac,
               "out_signed": tout.signed, "out_count": int(ys.shape[1]),
               "p_input_gap": P_INPUT_GAP, "p_output_stall": P_OUTPUT_STALL,
               "max_cycles": int(vectors * (man["ii"] + 2) * 4 + 10 * man["latency_cycles"] + 1000)}
        (work / "bench.json").write_text(json.dumps(cfg, indent=2))
        (work / "result.json").unlink(missing_ok=True)
        progress(f"{sim}: building and streaming {vectors:,} vectors through {man['core_top']}")
        t0 = time.perf_counter()
        outcome = run_cocotb(sim, [out / f for f in man["files"]], man["core_top"], "cocotb_bench",
                             Path(__file__).parent, work / "build", extra_env={"BITFORGE_BENCH": str(work / "bench.json")})
        seconds = round(time.perf_counter() - t0, 2)
        res_path = work / "result.json"
        res = json.loads(res_path.read_text()) if res_path.is_file() else {"vectors": vectors, "mismatches": vectors,
                                                                           "error": "the bench did not finish"}
        res.update(simulator=sim, seconds=seconds, log=str(work / "build" / "sim.log"))
        results[sim] = res
        if outcome.failed or res.get("mismatches"):
            _merge_report(out, results)
            raise SimulationFailed(f"{sim}: {'; '.join(outcome.failures) or 'mismatches'} (log: {res['log']}; "
                                   f"bench files in {work})")
    _merge_report(out, results)
    return results


def _merge_report(out: Path, results: dict) -> None:
    def change(report: dict) -> None:
        section = report.setdefault("verification", {}).setdefault("golden_vs_rtl", {})
        for sim, r in results.items():
            section[sim] = {k: r[k] for k in ("vectors", "mismatches", "cycles", "tlast_errors", "first_mismatch")
                            if k in r}
    update_report(out, change)
