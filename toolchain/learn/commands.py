"""``bitforge learn TASK``: an online learner on a benchmark task, golden model (and RTL), metrics and a plot.

The defaults per task are the reference configurations of the online-learning benchmark
(:data:`bitforge.models.online_learners.REFERENCE_CONFIGS`: for T1 a KAN [1, 1], G = 5, k = 3 on
[-2.25, 2.25], eta = 2**-1) at a <16,6> datapath with 8 guard bits. The float reference learner runs on the
same stream, so every metric is shown next to its float counterpart.

Output folder (written to a temporary folder, then renamed): ``learner/`` (the IR folder of the initial
state, ``metadata["learner"]`` holds the spec), ``final/`` (the state after the stream), ``metrics.json``,
``learn.png`` (prediction vs target and the running error), ``report.md``, ``report.json`` with ``accuracy`` (the
benchmark's JSON rows, fixed point and float); with ``--rtl`` also ``rtl/`` (the generated core and board top,
``manifest.json``: ``bitforge implement OUT --target ecp5-85f`` builds it) and ``report.json``
``verification.golden_vs_rtl`` (the trajectory on Icarus/Verilator, bit for bit); with ``--target`` the
implementation and ``report.json`` ``hardware`` (the benchmark's hardware row).
"""
from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from . import emulate as emulate_learn
from ..cli_types import non_negative_int, positive_int, seed
from ..errors import BitforgeError
from ..fixed import quantize
from .spec import Learner, LearnerFormats, LearnerSpec, UpdateRule, build_learner, save_learner
from ..report.file import update_report

Progress = Callable[[str], None]
TASKS = ("t1", "t2", "t4")


@dataclass(frozen=True)
class LearnOptions:
    task: str = "t1"
    model: str = "kan"
    datapath: str = "fixed<16,6>"
    guard_bits: int = 8
    lr_shift: Optional[int] = None  # None: the reference eta
    rounding: str = "nearest"
    grid_size: Optional[int] = None
    order: Optional[int] = None
    samples: Optional[int] = None  # None: the task's benchmark length
    seed: int = 0  # task stream and initial state
    rtl: bool = False
    simulator: str = "both"
    basis: str = "auto"
    mlp_lanes: Optional[int] = None  # MLP: None = fully parallel (II 1), N = time-multiplexed, N hidden units a round


def learner_pnr_options() -> tuple[str, ...]:
    """nextpnr options for a learner: the electrostatic placer and router2 (``bench.rtl.PNR_OPTIONS``). nextpnr's
    default HeAP placer packs the learners' multiplier arrays so tightly that router1 crawls (T1's 80-DSP MLP:
    3,600 arcs left after 700 s; T4's 128-DSP KAN: 79k after 450 s); the static placer and router2 route them in
    minutes."""
    from ..bench.rtl import PNR_OPTIONS

    return PNR_OPTIONS


def fixed_spec(opts: LearnOptions) -> tuple[LearnerSpec, object]:
    """The bit-accurate learner spec for ``opts`` and the float reference spec it mirrors."""
    from bitforge.models.online_learners import reference_spec

    task = opts.task.lower()
    if task not in TASKS:
        raise BitforgeError(f"unknown task {opts.task!r}; bitforge learn runs {', '.join(TASKS)} (T5 CartPole is an "
                            "actor-critic task: python -m bitforge.models.online_learners)")
    overrides = {k: v for k, v in (("grid_size", opts.grid_size), ("order", opts.order)) if v is not None}
    if opts.lr_shift is not None:
        overrides["eta"] = 2.0 ** -opts.lr_shift
    ref = reference_spec(task, opts.model, **overrides)
    lr = round(-math.log2(ref.eta))
    if 2.0 ** -lr != ref.eta:
        raise BitforgeError(f"reference eta {ref.eta} of {task}/{opts.model} is not a power of two; pass --lr-shift")
    formats = LearnerFormats.make(opts.datapath, guard_bits=opts.guard_bits)
    kan = opts.model == "kan"
    spec = LearnerSpec(opts.model, ref.sizes, ref.grid_range if kan else (-1.0, 1.0), ref.grid_size if kan else 5,
                       ref.order if kan else 3, "closed_form", formats, UpdateRule(lr, opts.rounding), seed=opts.seed)
    return spec, ref


def accuracy_row(task: str, model: str, fmt: str, params: int, metrics: dict) -> dict:
    """The issue's accuracy JSON keys (``bitforge bench online`` and ``bitforge learn``'s report.json)."""
    return {"task": task, "model": model, "format": fmt, "params": params, "mean_mse": metrics["mean_mse"],
            "steady_mse": metrics.get("steady_mse", []), "error_rate": metrics.get("error_rate")}


def format_label(datapath: str, rounding: str = "nearest") -> str:
    """``<16,6>``, ``<8,4> stochastic``, ``float``: the benchmark's ``format`` column."""
    label = str(datapath).replace("fixed", "")
    return label if rounding in ("nearest", "-") or label == "float" else f"{label} {rounding}"


HARDWARE_KEYS = ("lut", "ff", "dsp", "bram", "fmax_mhz", "latency_cycles", "latency_ns", "ii")


def hardware_row(task: str, model: str, target: str, params: int, impl: dict) -> dict:
    """The issue's hardware JSON keys from an ``implement`` report (or a row that carries the same keys)."""
    return {"task": task, "model": model, "target": target, **{k: impl.get(k) for k in HARDWARE_KEYS},
            "params": params}


def _metrics(task, codes: np.ndarray, lsb: float) -> dict:
    from bitforge.models.online_tasks import prequential_metrics

    return prequential_metrics(task, codes.astype(np.float64) * lsb)


def _plot(path: Path, task, fixed_pred: np.ndarray, float_pred: np.ndarray, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(task.target)
    fig, (a, b) = plt.subplots(2, 1, figsize=(10, 6))
    idx = np.arange(n)
    tail = slice(max(0, n - 200), n)  # the last 200 samples: individual predictions stay readable
    a.plot(idx[tail], task.target[tail, 0], "o", ms=2.5, color="0.5", label="target")
    a.plot(idx[tail], float_pred[tail, 0], lw=0.8, label="float reference")
    a.plot(idx[tail], fixed_pred[tail, 0], lw=0.8, ls="--", label="fixed point (golden = RTL)")
    a.set_ylabel("output 0")
    a.set_title("last 200 samples", fontsize=9)
    a.legend(loc="upper right", fontsize=8)
    w = max(10, n // 100)
    kernel = np.ones(w) / w
    for pred, label in ((float_pred, "float"), (fixed_pred, "fixed")):
        err = np.mean((pred - task.target) ** 2, axis=1)
        b.semilogy(idx[w - 1:], np.convolve(err, kernel, mode="valid"), lw=0.8, label=label)
    b.set_ylabel(f"squared error ({w}-sample mean)")
    b.set_xlabel("sample")
    b.legend(loc="upper right", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_learn(opts: LearnOptions, out: Path, progress: Progress = lambda m: None) -> dict:
    """Golden trajectory (and the RTL's with ``opts.rtl``) on the task; writes ``out``; returns the metrics."""
    from bitforge.models.online_learners import run_prequential
    from bitforge.models.online_tasks import make_task

    spec, ref = fixed_spec(opts)
    task = make_task(opts.task, opts.seed, opts.samples)
    learner = build_learner(spec, name=f"{opts.task}-{opts.model}")
    f = spec.formats
    x, t = quantize(task.x, f.input), quantize(task.target, f.datapath)
    progress(f"golden model: {len(x):,} samples, {opts.model} {list(spec.sizes)}, datapath {f.datapath.to_short()}, "
             f"lr_shift {spec.rule.lr_shift}, {spec.rule.rounding} updates")
    traj = emulate_learn.run(learner, x, t)
    progress("float reference on the same stream")
    float_pred = run_prequential(ref, task, seed=opts.seed)
    fixed_m = _metrics(task, traj.predictions, f.datapath.lsb)
    float_m = _metrics(task, float_pred, 1.0)
    metrics = {"task": opts.task, "model": opts.model, "samples": len(x), "spec": spec.to_json(),
               "fixed": fixed_m, "float": float_m, "params": learner.n_params,
               "accuracy": [accuracy_row(opts.task, opts.model, format_label(opts.datapath, opts.rounding),
                                         learner.n_params, fixed_m),
                            accuracy_row(opts.task, opts.model, "float", learner.n_params, float_m)]}

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        save_learner(learner, tmp / "learner")
        save_learner(learner.with_state(traj.final), tmp / "final")
        _plot(tmp / "learn.png", task, traj.predictions.astype(np.float64) * f.datapath.lsb, float_pred,
              f"{opts.task.upper()} {opts.model.upper()} {list(spec.sizes)}: fixed {f.datapath.to_short()} vs float")
        if opts.rtl:
            metrics["rtl"] = _rtl(learner, x, t, tmp, opts, progress)
        (tmp / "metrics.json").write_text(json.dumps(metrics, indent=2, default=_json_default) + "\n")
        accuracy = json.loads(json.dumps(metrics["accuracy"], default=_json_default))
        update_report(tmp, lambda report: report.update(accuracy=accuracy))
        (tmp / "report.md").write_text(_report_md(metrics))
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return metrics


def _rtl(learner: Learner, x: np.ndarray, t: np.ndarray, folder: Path, opts: LearnOptions, progress: Progress) -> dict:
    from ..verify.simulate_learner import generate_learner, simulate_learner, write_sources

    design = generate_learner(learner, opts.basis, opts.mlp_lanes)
    write_sources(design, folder / "rtl")
    (folder / "rtl" / "manifest.json").write_text(json.dumps(design.manifest(), indent=2) + "\n")
    sims = simulate_learner(learner, x, t, work=folder / "sim", simulator=opts.simulator, seed=opts.seed,
                            basis=opts.basis, mlp_lanes=opts.mlp_lanes, progress=progress)
    results = {s: r.to_json() for s, r in sims.items()}

    def change(report: dict) -> None:
        report["rtl"] = {"latency_cycles": design.latency_cycles, "ii": design.ii, "resources": design.resources}
        report.setdefault("verification", {})["golden_vs_rtl"] = results

    update_report(folder, change)
    return {"latency_cycles": design.latency_cycles, "ii": design.ii, "resources": design.resources,
            "golden_vs_rtl": results}


def _json_default(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    raise TypeError(type(v))


def _fmt(v) -> str:
    if isinstance(v, list):
        return " / ".join(f"{x:.5f}" for x in v)
    return f"{v:.5f}" if isinstance(v, float) else str(v)


def _report_md(m: dict) -> str:
    lines = [f"# bitforge learn {m['task']} --model {m['model']}", "",
             f"{m['samples']:,} samples, prequential (predict, then update on the same sample).", "",
             "| metric | fixed point (golden) | float reference |", "|---|---|---|"]
    for k in m["fixed"]:
        lines.append(f"| {k} | {_fmt(m['fixed'][k])} | {_fmt(m['float'].get(k, ''))} |")
    if "rtl" in m:
        r = m["rtl"]
        lines += ["", f"RTL: latency {r['latency_cycles']} cycles, II {r['ii']}; "
                  + "; ".join(f"{s}: {v['samples']:,} samples, {v['mismatches']} mismatches, read-back "
                              + ", ".join(f"after {a}: {c['mismatches']} of {c['words']} words differ"
                                          for a, c in v["readback"].items())
                              for s, v in r["golden_vs_rtl"].items())]
    lines += ["", "![prediction and error](learn.png)", ""]
    return "\n".join(lines)


# -- command line ------------------------------------------------------------------------------------

def options_from_args(args) -> LearnOptions:
    return LearnOptions(task=args.task, model=args.model, datapath=args.datapath, guard_bits=args.guard_bits,
                        lr_shift=args.lr_shift, rounding=args.rounding, grid_size=args.grid_size, order=args.order,
                        samples=args.samples, seed=args.seed, rtl=args.rtl or bool(args.target),
                        simulator=args.simulator, basis=args.basis, mlp_lanes=args.mlp_lanes)


def run_learn_flow(opts: LearnOptions, out: Path, target: Optional[str], printer: Callable[[str], None],
                   progress: Progress, pnr_seed: int = 1) -> dict:
    """``bitforge learn`` (and ``bitforge flow learn:TASK``): golden, RTL trajectory, then ``implement``."""
    if target and opts.model == "mlp" and opts.mlp_lanes is None:
        from dataclasses import replace as dc_replace

        from ..backends.rtl.learner_mlp import choose_lanes
        from ..flows.targets import get_target

        lanes = choose_lanes(build_learner(fixed_spec(opts)[0]), get_target(target).budget.dsp)
        if lanes is not None:
            progress(f"the fully parallel MLP does not fit {target}'s DSP blocks: time-multiplexed, {lanes} lanes")
            opts = dc_replace(opts, mlp_lanes=lanes)
    m = run_learn(opts, out, progress)
    fx, fl = m["fixed"], m["float"]
    printer(f"{m['task']} {m['model']}: {m['samples']:,} samples; mean MSE fixed {fx['mean_mse']:.5f} vs float "
            f"{fl['mean_mse']:.5f}; score {fx['score']:.5f} vs {fl['score']:.5f}")
    if "steady_mse" in fx:
        printer("steady MSE per regime: fixed " + _fmt(fx["steady_mse"]) + " | float " + _fmt(fl["steady_mse"]))
    if "rtl" in m:
        for s, v in m["rtl"]["golden_vs_rtl"].items():
            printer(f"golden model vs RTL ({s}): {v['samples']:,} samples, {v['mismatches']} mismatches; coefficient "
                    f"read-back: {sum(c['mismatches'] for c in v['readback'].values())} mismatches")
    if target:
        import warnings

        from ..flows.implement import TimingWarning, implement

        with warnings.catch_warnings():  # progress() has shown it; report.json keeps it
            warnings.simplefilter("ignore", TimingWarning)
            r = implement(Path(out), target, seed=pnr_seed, progress=progress, pnr_options=learner_pnr_options())
        m["target"] = r
        row = hardware_row(m["task"], m["model"], target, m["params"], r)
        update_report(Path(out), lambda report: report.update(hardware=[row]))
        printer(f"{target}: {r.get('lut')} LUT, {r.get('ff')} FF, {r.get('dsp')} DSP, {r.get('bram')} BRAM, "
                f"Fmax {r.get('fmax_mhz')} MHz, latency {r.get('latency_cycles')} cycles = {r.get('latency_ns')} ns, "
                f"II {r.get('ii')}")
    printer(f"wrote {out}/ (metrics.json, learn.png, report.md)")
    return m


def add_commands(sub, fmt) -> None:
    import argparse
    import textwrap

    p = sub.add_parser(
        "learn", formatter_class=fmt, help="run an online learner on a task (golden model, RTL, hardware)",
        description="Run an online learner prequentially (predict, then update on the same sample) on a benchmark "
                    "task in the bit-exact golden model, next to the float reference; --rtl also generates the "
                    "II-1 learner core and replays the whole trajectory on Icarus/Verilator (every prediction and "
                    "the coefficient memory bit for bit); --target then implements it (yosys + nextpnr).",
        epilog="examples:\n" + textwrap.indent(textwrap.dedent("""
            bitforge learn t1 -o out/t1                        # KAN [1,1], G=5, k=3, <16,6>
            bitforge learn t1 --datapath 'fixed<8,4>' --rounding stochastic -o out/t1-8
            bitforge learn t1 --rtl --simulator verilator -o out/t1-rtl
            bitforge learn t1 --target ecp5-85f -o out/t1-hw   # golden + RTL + place and route
            bitforge learn t4 --model mlp -o out/t4-mlp
        """).strip(), "  "))
    p.add_argument("task", choices=TASKS)
    p.add_argument("--model", default="kan", choices=["kan", "mlp"])
    p.add_argument("-o", "--output", required=True, metavar="OUT")
    p.add_argument("--datapath", default="fixed<16,6>", metavar="TYPE", help="datapath type (default fixed<16,6>)")
    p.add_argument("--guard-bits", type=non_negative_int, default=8, help="extra fractional bits of coefficient storage (default 8)")
    p.add_argument("--lr-shift", type=non_negative_int, default=None, help="eta = 2**-N (default: the task's reference eta)")
    p.add_argument("--rounding", default="nearest", choices=["nearest", "stochastic"])
    p.add_argument("--grid-size", type=positive_int, default=None, help="KAN grid size G (default: the reference)")
    p.add_argument("--order", type=positive_int, default=None, help="KAN spline order k (default 3)")
    p.add_argument("--samples", type=positive_int, default=None, help="stream length (default: the task's)")
    p.add_argument("--seed", type=seed, default=0, help="task stream and initial state seed (default 0)")
    p.add_argument("--rtl", action="store_true", help="generate the learner core and simulate the trajectory")
    p.add_argument("--simulator", default="both", choices=["icarus", "verilator", "both"])
    p.add_argument("--basis", default="auto", choices=["auto", "rom", "circuit"],
                   help="KAN bases from a ROM of the golden table or the closed-form circuit (default auto)")
    p.add_argument("--mlp-lanes", type=int, default=None, metavar="N",
                   help="MLP: time-multiplexed, N hidden units per round (default: fully parallel, or with --target "
                        "the most that fit its DSP blocks when the fully parallel form does not)")
    p.add_argument("--target", default=None, metavar="T", help="also implement on T (implies --rtl)")
    p.add_argument("--pnr-seed", type=seed, default=1)

    def cmd(args: argparse.Namespace) -> int:
        from ..console import progress, result
        run_learn_flow(options_from_args(args), Path(args.output), args.target, result, progress, args.pnr_seed)
        return 0

    p.set_defaults(func=cmd)
