"""A learner's RTL against its golden trajectory on Icarus and/or Verilator (cocotb), bit for bit.

The bench (:mod:`.cocotb_learner`) streams the whole sample sequence with random input gaps and output stalls,
compares every prediction, and reads the coefficient memory back half way and at the end, comparing it with
the golden model's state at those points.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from ..learn import emulate as emulate_learn
from ..backends.rtl.generate import library_source
from ..backends.rtl.learner_kan import LearnerRtl, coefficient_address, generate_kan_learner, pack_inputs
from ..backends.rtl.learner_mlp import generate_mlp_folded, generate_mlp_learner, readback_words
from ..learn.spec import Learner, LearnerError
from .simulators import SimulationFailed, expand, run_cocotb

P_INPUT_GAP = 0.2
P_OUTPUT_STALL = 0.2


@dataclass(frozen=True)
class LearnerSimResult:
    simulator: str
    samples: int
    mismatches: int
    readback: dict
    cycles: int
    seconds: float

    def to_json(self) -> dict:
        return {"samples": self.samples, "mismatches": self.mismatches, "readback": self.readback,
                "cycles": self.cycles, "seconds": self.seconds}


def write_sources(design: LearnerRtl, folder: Path) -> list[Path]:
    """The design's generated files plus the library modules it instantiates, in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in sorted(design.files.items()):
        (folder / name).write_text(text)
        paths.append(folder / name)
    for name in design.library:
        (folder / name).write_text(library_source(name))
        paths.append(folder / name)
    return paths


def generate_learner(learner: Learner, basis: str = "auto", mlp_lanes: Optional[int] = None) -> LearnerRtl:
    """The learner's core: the KAN generator, or the MLP one (fully parallel, or time-multiplexed with
    ``mlp_lanes`` hidden units per round)."""
    if learner.spec.kind == "mlp":
        return generate_mlp_learner(learner) if mlp_lanes is None else generate_mlp_folded(learner, mlp_lanes)
    return generate_kan_learner(learner, basis=basis)


def _checkpoint(learner: Learner, after: int, state) -> dict:
    if learner.spec.kind == "mlp":
        addresses, words = readback_words(learner, state)
        return {"after": after, "addresses": addresses, "words": words}
    st = learner.formats.storage
    mask = (1 << st.width) - 1
    addresses, words = [], []
    for layer, n in enumerate(learner.layers()):
        C = np.asarray(state[layer]["coeffs"], dtype=np.int64)
        for i in range(n.in_features):
            for p in range(n.grid_size + n.order):
                addresses.append(coefficient_address(learner, i, p, layer))
                w = 0
                for o in range(n.out_features):
                    w |= (int(C[o, i, p]) & mask) << (o * st.width)
                words.append(f"{w:x}")
    return {"after": after, "addresses": addresses, "words": words}


def simulate_learner(learner: Learner, x_codes: np.ndarray, target_codes: np.ndarray,
                     learn_enable: Optional[np.ndarray] = None, *, work: Path, simulator: str = "both",
                     seed: int = 0, basis: str = "auto", mlp_lanes: Optional[int] = None,
                     p_gap: float = P_INPUT_GAP, p_stall: float = P_OUTPUT_STALL,
                     progress: Callable[[str], None] = lambda m: None) -> dict[str, LearnerSimResult]:
    """Run the trajectory on each simulator; raises :class:`SimulationFailed` on any difference."""
    x = np.asarray(x_codes, dtype=np.int64)
    t = np.asarray(target_codes, dtype=np.int64)
    n = len(x)
    if n < 2:
        raise LearnerError(f"a learner simulation needs at least 2 samples, got {n}")
    le = np.ones(n, dtype=bool) if learn_enable is None else np.asarray(learn_enable, dtype=bool)
    half = n // 2
    traj = emulate_learn.run(learner, x, t, le, snapshot_every=half)
    design = generate_learner(learner, basis, mlp_lanes)
    work = Path(work).resolve()
    sources = write_sources(design, work / "src")
    checkpoints = [_checkpoint(learner, half, traj.snapshots[half]), _checkpoint(learner, n, traj.final)]
    np.savez(work / "expected.npz", predictions=traj.predictions)
    out_t = learner.formats.datapath
    results = {}
    for sim in expand(simulator):
        run_dir = work / sim
        run_dir.mkdir(parents=True, exist_ok=True)
        cfg = {"words": [f"{w:x}" for w in pack_inputs(learner, x, t, le)], "expected": str(work / "expected.npz"),
               "checkpoints": checkpoints, "seed": seed, "p_input_gap": p_gap, "p_output_stall": p_stall,
               "out_count": int(traj.predictions.shape[1]), "out_width": out_t.width,
               "result": str(run_dir / "result.json"),
               "max_cycles": int(4 * n * design.ii / max(1e-3, (1 - p_gap) * (1 - p_stall)) + 40 * design.latency_cycles
                                 + 8 * len(checkpoints[0]["addresses"]) + 1000)}
        (run_dir / "bench.json").write_text(json.dumps(cfg))
        (run_dir / "result.json").unlink(missing_ok=True)
        progress(f"{sim}: {n:,} samples through {design.name} (latency {design.latency_cycles}, II {design.ii})")
        t0 = time.perf_counter()
        outcome = run_cocotb(sim, sources, design.name, "cocotb_learner", Path(__file__).parent, run_dir / "build",
                             extra_env={"BITFORGE_LEARNER_BENCH": str(run_dir / "bench.json")})
        seconds = round(time.perf_counter() - t0, 2)
        res_path = run_dir / "result.json"
        if not res_path.is_file():
            raise SimulationFailed(f"{sim}: the learner bench did not finish ({'; '.join(outcome.failures)}); log: "
                                   f"{run_dir / 'build' / 'sim.log'}")
        r = json.loads(res_path.read_text())
        results[sim] = LearnerSimResult(sim, r["samples"], r["mismatches"], r["readback"], r["cycles"], seconds)
        if outcome.failed:
            raise SimulationFailed(f"{sim}: {'; '.join(outcome.failures)} (log: {run_dir / 'build' / 'sim.log'}; "
                                   f"bench files in {run_dir})")
    return results
