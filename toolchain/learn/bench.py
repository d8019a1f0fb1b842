"""``bitforge bench online``: online learners' accuracy, hardware and scaling, one table each, JSON and PNGs.

* **Accuracy**: T1, T2, T4 for the KAN and MLP reference learners at float and at <16,6>, <10,4>, <8,4>
  datapaths (8 guard bits, round-to-nearest updates; <8,4> also with stochastic rounding), averaged over task
  seeds, each fixed-point row with its ratio to float; T5 (CartPole, A2C, float and the same datapaths) as
  episodes to a 100-episode mean of 475. Fixed point is the golden model, which the RTL matches bit for bit (``tests/rtl``).
* **Hardware**: the T1 and T4 reference learners' generated cores, implemented by ``implement`` (ecp5-85f
  after place and route; xcvu9p a synthesis estimate): latency of one forward + update step in cycles and ns,
  II, LUT, FF, DSP, BRAM; the public HLS KAN learner's published numbers as a reference row.
* **Scaling** (the KAN paper's Figure 1): on T4, the KAN's G from 6 to 192 and the MLP's width from 16 to 256,
  resources and step latency against the parameter count (PNG), plus one KAN learner of over 50,000
  parameters placed and routed on ecp5-85f.

Designs are generated into ``--work``; the flows' content-hashed caches make a rerun instant.
"""
from __future__ import annotations

import contextlib
import json
import math
import statistics
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from . import emulate as emulate_learn
from ..errors import BitforgeError
from ..fixed import quantize

Progress = Callable[[str], None]

DATAPATHS = ("float", "fixed<16,6>", "fixed<10,4>", "fixed<8,4>")
TASKS = ("t1", "t2", "t4")
MODELS = ("kan", "mlp")
HW_TARGETS = ("ecp5-85f", "xcvu9p")
KAN_GRIDS = (6, 12, 24, 48, 96, 192)
MLP_WIDTHS = (16, 32, 64, 128, 256)
#: Synthesised cells that are LUTs used as memory (AMD distributed RAM, ECP5 DPRAM slices): the scaling plot
#: shows them apart from logic LUTs, which is what must stay flat as G grows.
LUTRAM_CELLS = ("RAM32", "RAM64", "RAM128", "RAM256", "TRELLIS_DPR")
#: The public HLS KAN learner on T1 (arXiv 2602.02056's code, docs/references.md): an HLS estimate, UltraScale+.
PUBLIC_T1 = {"design": "public HLS KAN [1,1] G=5 (T1)", "target": "UltraScale+ (HLS estimate)",
             "latency_cycles": 11, "latency_ns": 55.0, "ii": 12, "lut": 2695, "dsp": 9}
#: The scaling sweep's formats, shared by every KAN and MLP point and the large learner: 16-bit inputs (T4's are
#: clipped to [-1, 1]), datapath fixed<14,2> (T4's targets are +-1) with 4 guard bits, so coefficients and weights
#: are 18 bits: one 18 x 18 multiplier per product and one 1k x 18 block RAM per deep bank. With T4's own <16,6>
#: and 8 guard bits (24-bit words) router2 stalled on the ecp5-85f beyond G = 24 (1,300-2,400 overused wires at
#: G = 96, also on a power-of-two grid), and the large learner at <16,4> with 8 guard bits (24-bit words, 128 block
#: RAMs next to 128 of the 156 multipliers) at ~6,000 after 40 minutes.
SCALING_FORMATS = {"datapath": "fixed<14,2>", "guard_bits": 4}
#: A KAN point's 16-bit input puts its binary point so that a cell spans 2**SCALING_U_BITS codes: the local
#: coordinate has 8 bits at every G and the basis is the same 256-entry table (with <16,2> for all, u would be 12
#: bits at G = 6 (the cap of index_params), past the basis ROM's 10-bit limit: a closed-form circuit with 160
#: multipliers, more than the part has).
SCALING_U_BITS = 8
#: The sweep's KAN grid: 3 units wide, so that every G = 6 * 2**n has a power-of-two step (3 / G) and the cell
#: index is a bit slice at every point (on T4's own (-1, 1) the step 2 / G is not a power of two: sixteen index
#: multipliers more). The sweep measures what G costs, not the multiplier a badly chosen grid adds.
SCALING_GRID_RANGE = (-1.5, 1.5)
#: The sweep's large learner: KAN [16, 1] with G = 4093 cells of 2**-11 on [-1, 0.9985) (the cell index is a bit
#: slice; 4096 coefficients per edge fill 1024-word banks exactly), 65,536 coefficients; a cell spans 8 input LSBs
#: (3 u bits); one 1k x 18 block RAM per bank (64 in all).
BIG_KAN = {"sizes": (16, 1), "grid_size": 4093, "grid_range": (-1.0, -1.0 + 4093 / 2048)}
#: The scaling table's caption (docs/bench-online.md).
SCALING_NOTE = ("Every scaling point is built in the same formats (`learn.bench.SCALING_FORMATS`): datapath "
                "`<14,2>`, 18-bit coefficients and weights (4 guard bits), 16-bit inputs. The KAN sweep's grid is "
                "(-1.5, 1.5), whose step 3 / G is a power of two, and its input's binary point leaves 8 bits of "
                "local coordinate at every G (`<16,7>` at G = 6 to `<16,2>` at G = 192); the >50k-parameter KAN has "
                "cells of 2^-11 from -1 and `<16,2>` inputs (3 bits). The hardware table's T4 rows use T4's own "
                "formats instead.")


@dataclass
class OnlineBenchOptions:
    work: Path = Path("out/bench-online")
    seeds: tuple[int, ...] = (0, 1, 2)
    tasks: tuple[str, ...] = TASKS
    datapaths: tuple[str, ...] = DATAPATHS
    accuracy: bool = True
    t5: bool = True
    t5_episodes: int = 3000
    hardware: bool = True
    targets: tuple[str, ...] = HW_TARGETS
    scaling: bool = True
    kan_grids: tuple[int, ...] = KAN_GRIDS
    kan_targets: tuple[str, ...] = HW_TARGETS
    mlp_widths: tuple[int, ...] = MLP_WIDTHS
    mlp_targets: tuple[str, ...] = HW_TARGETS  # the MLP sweep's (xcvu9p synthesis of thousands of multipliers is slow)
    big: bool = True
    cached_flows: bool = False  # reuse finished flows only; a design whose flow has not run is listed "not run"
    pnr_seed: int = 1  # nextpnr's seed (another one when router2 stalls on a design)


@dataclass
class OnlineBenchResult:
    accuracy: list[dict] = field(default_factory=list)
    t5: list[dict] = field(default_factory=list)
    hardware: list[dict] = field(default_factory=list)
    scaling: list[dict] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)
    options: dict = field(default_factory=dict)
    command: str = ""
    sources: dict = field(default_factory=dict)  # section -> the commands whose rows it holds

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict) -> "OnlineBenchResult":
        return cls(**{k: doc[k] for k in ("accuracy", "t5", "hardware", "scaling", "options", "command", "sources")
                      if k in doc})


#: What makes two rows of a section the same measurement (a later run's row replaces an earlier one's).
ROW_KEYS = {"accuracy": ("task", "model", "datapath", "rounding"), "t5": ("model", "format", "seed"),
            "hardware": ("design", "target"), "scaling": ("design", "target")}


def merge_results(earlier: list[OnlineBenchResult], res: OnlineBenchResult) -> OnlineBenchResult:
    """``res`` with the rows of earlier runs (``--online-merge``) added section by section; a row measured again
    in a later run replaces the earlier one. ``sources`` records which commands each section's rows came from
    (a run whose rows were all measured again drops out)."""
    parts = [*earlier, res]
    for section, keys in ROW_KEYS.items():
        rows: dict[tuple, tuple[dict, int]] = {}
        for i, part in enumerate(parts):
            for r in getattr(part, section):
                if "parameters" in r:  # rows written before the "params" key was the only one
                    r = {k: v for k, v in r.items() if k != "parameters"} | {"params": r.get("params", r["parameters"])}
                rows[tuple(str(r.get(k)) for k in keys)] = (r, i)
        setattr(res, section, [r for r, _ in rows.values()])
        kept = {i for _, i in rows.values()}
        sources = list(dict.fromkeys(c for i, part in enumerate(parts) if i in kept
                                     for c in (part.sources.get(section) or [part.command or "?"])))
        if sources:
            res.sources[section] = sources
    return res


# -- accuracy ---------------------------------------------------------------------------------------------

def _fixed_run(task, spec) -> dict:
    from .run import code_metrics
    from .spec import build_learner

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # dead-zone warnings at narrow datapaths: the numbers say it
        learner = build_learner(spec)
    f = spec.formats
    traj = emulate_learn.run(learner, quantize(task.x, f.input), quantize(task.target, f.datapath))
    return code_metrics(task, traj.predictions, f.datapath.lsb)


def _mean_metrics(runs: list[dict]) -> dict:
    out = {}
    for k in ("mean_mse", "score", "error_rate"):
        if k in runs[0]:
            out[k] = statistics.fmean(r[k] for r in runs)
    if "steady_mse" in runs[0]:
        out["steady_mse"] = [statistics.fmean(r["steady_mse"][i] for r in runs) for i in range(len(runs[0]["steady_mse"]))]
    return out


def accuracy_rows(options: OnlineBenchOptions, progress: Progress) -> list[dict]:
    from bitforge.models.online_learners import reference_spec, run_prequential
    from bitforge.models.online_tasks import make_task

    from .run import accuracy_row, code_metrics, format_label
    from .spec import LearnerFormats

    rows = []
    for task_name in options.tasks:
        tasks = [make_task(task_name, s) for s in options.seeds]
        for model in MODELS:
            progress(f"accuracy: {task_name} {model} over seeds {list(options.seeds)}")
            ref = reference_spec(task_name, model)
            float_m = _mean_metrics([code_metrics(t, run_prequential(ref, t, seed=s), 1.0)
                                     for t, s in zip(tasks, options.seeds)])
            variants = [(dp, "nearest") for dp in options.datapaths if dp != "float"]
            if "fixed<8,4>" in options.datapaths:
                variants.append(("fixed<8,4>", "stochastic"))
            params = _learner(task_name, model).n_params
            if "float" in options.datapaths:
                rows.append({**accuracy_row(task_name, model, "float", params, float_m), "datapath": "float",
                             "rounding": "-", **float_m, "mse_vs_float": 1.0, "score_vs_float": 1.0})
            for dp, rounding in variants:
                formats = LearnerFormats.make(dp, guard_bits=8)
                m = _mean_metrics([_fixed_run(t, ref.replace(formats=formats, rounding=rounding, seed=s))
                                   for t, s in zip(tasks, options.seeds)])
                rows.append({**accuracy_row(task_name, model, format_label(dp, rounding), params, m), "datapath": dp, "rounding": rounding, **m,
                             "mse_vs_float": m["mean_mse"] / float_m["mean_mse"],
                             "score_vs_float": m["score"] / float_m["score"] if float_m["score"] else None})
    return rows


def t5_rows(options: OnlineBenchOptions, progress: Progress) -> list[dict]:
    from bitforge.models.online_learners import run_a2c

    from .a2c import run_a2c_fixed, t5_config
    from .run import format_label

    rows = []
    for model in MODELS:
        cfg = t5_config(model, options.t5_episodes)
        for dp in options.datapaths:
            progress(f"T5: A2C on CartPole, {model} at {dp}, seeds {list(options.seeds)}, up to "
                     f"{cfg.max_episodes:,} episodes (minutes)")
            r = run_a2c(cfg, seeds=options.seeds) if dp == "float" else run_a2c_fixed(cfg, dp, options.seeds)
            for s, returns, solved in zip(options.seeds, r.returns, r.solved_at):
                w = cfg.window
                best = max((statistics.fmean(returns[i - w:i]) for i in range(w, len(returns) + 1)), default=None)
                rows.append({"task": "t5", "model": model, "format": format_label(dp), "seed": s,
                             "params": cfg.spec.n_params,
                             "episodes": len(returns), "solved_at": solved, "best_100_mean": best,
                             "last_100_mean": statistics.fmean(returns[-w:]) if returns else None,
                             "target": cfg.target})
    return rows


# -- hardware ---------------------------------------------------------------------------------------------

def _implement_learner(learner, name: str, target: str, work: Path, progress: Progress, task: str = "t4",
                       model: str = "kan", seed: int = 1) -> dict:
    """One learner through ``implement``; inside :func:`.flows.cache.cached_only` (``--cached-flows``) a design
    whose flow has not finished is listed "not run" instead of started."""
    from ..flows.cache import StageNotCached
    from ..flows.implement import TimingWarning, implement
    from ..flows.targets import DoesNotFit, get_target
    from .run import hardware_row, learner_pnr_options
    from ..verify.simulate_learner import generate_learner, write_sources

    from ..backends.rtl.learner_mlp import choose_lanes

    lanes = choose_lanes(learner, get_target(target).budget.dsp)
    design = generate_learner(learner, mlp_lanes=lanes)
    if lanes is not None:
        name = f"{name}_x{lanes}"
    out = work / name
    write_sources(design, out / "rtl")
    (out / "rtl" / "manifest.json").write_text(json.dumps(design.manifest(), indent=2) + "\n")
    params = design.resources["parameters"]
    memory = design.resources.get("coefficient_bits", 0) + design.resources.get("rom_bits", 0)
    row = {**hardware_row(task, model, target, params, {"latency_cycles": design.latency_cycles, "ii": design.ii}),
           "design": name, "multipliers": design.resources["multipliers"],
           "memory_bits": memory or None,
           "form": "fully parallel" if lanes is None else f"time-multiplexed, {lanes} lanes"}
    dsp = get_target(target).budget.dsp
    if design.resources["multipliers"] > dsp:
        # Every product is a full-width multiply that the design needs in the same clock: past the part's DSP
        # blocks the rest would be LUT multipliers, and synthesising thousands of them takes tens of minutes.
        row.update(status="does-not-fit", note=f"{design.resources['multipliers']:,} multipliers in one clock > "
                   f"{dsp:,} DSP blocks of {target} (checked before synthesis)")
        return row
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TimingWarning)
            pnr = learner_pnr_options(target)  # recorded in the row
            r = implement(out, target, seed=seed, progress=progress, pnr_options=pnr)
    except DoesNotFit as e:
        row.update(status="does-not-fit", note=str(e).split(". Try")[0])
        return row
    except StageNotCached as e:
        row.update(status="not run", note=f"{e} (--cached-flows)")
        return row
    row.update({k: r.get(k) for k in ("lut", "ff", "dsp", "bram", "fmax_mhz", "latency_ns", "bitstream")})
    cells = (r.get("synthesis") or {}).get("cells", {})
    row["lutram"] = sum(v for k, v in cells.items() if k.startswith(LUTRAM_CELLS))
    row.update(status="ok", resources_from=r.get("resources_from"), pnr_options=list(pnr), pnr_seed=seed)
    return row


def _learner(task: str, model: str, **over):
    from bitforge.models.online_learners import reference_spec

    from .spec import LearnerFormats, build_learner

    spec = reference_spec(task, model, formats=LearnerFormats.make("fixed<16,6>", guard_bits=8))
    if over:  # all at once: a large G is only valid with the formats and grid that come with it
        spec = spec.replace(**{k: v for k, v in over.items() if v is not None})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_learner(spec, name=f"{task}_{model}")


def hardware_rows(options: OnlineBenchOptions, progress: Progress) -> list[dict]:
    rows = [dict(PUBLIC_T1, status="reference")]
    for task in ("t1", "t4"):
        for model in MODELS:
            L = _learner(task, model)
            for target in options.targets:
                progress(f"hardware: {task} {model} {list(L.spec.sizes)} on {target}")
                rows.append(_implement_learner(L, f"{task}_{model}", target, options.work / "hw", progress, task,
                                               model, options.pnr_seed))
    return rows


def scaling_formats(grid_size: Optional[int] = None):
    """The sweep's formats; for a KAN on :data:`SCALING_GRID_RANGE` with a power-of-two step, the 16-bit input
    with :data:`SCALING_U_BITS` bits below the cell index (fixed<16,7> at G = 6 ... fixed<16,2> at G = 192)."""
    from .spec import LearnerFormats

    f = SCALING_FORMATS
    width, frac = 16, 16 - 2
    cells_per_unit = (grid_size or 0) / (SCALING_GRID_RANGE[1] - SCALING_GRID_RANGE[0])
    if cells_per_unit >= 1 and cells_per_unit == 2 ** round(math.log2(cells_per_unit)):
        frac = min(frac, SCALING_U_BITS + round(math.log2(cells_per_unit)))
    return LearnerFormats.make(f["datapath"], guard_bits=f["guard_bits"], input=f"fixed<{width},{width - frac}>")


def big_kan_learner():
    """The sweep's >50k-parameter learner (:data:`BIG_KAN`) in the sweep's formats."""
    return _learner("t4", "kan", grid_size=BIG_KAN["grid_size"], sizes=BIG_KAN["sizes"], formats=scaling_formats(),
                    grid_range=BIG_KAN["grid_range"])


def _formats(L) -> dict:
    """The formats a scaling row was built with (the sweep fixes them; the table shows them)."""
    f = L.spec.formats
    return {"input": f"<{f.input.width},{f.input.integer}>", "datapath": f"<{f.datapath.width},{f.datapath.integer}>",
            "coeff_bits": f.storage.width}


def scaling_rows(options: OnlineBenchOptions, progress: Progress) -> list[dict]:
    rows = []
    for G in options.kan_grids if options.scaling else ():
        L = _learner("t4", "kan", grid_size=G, grid_range=SCALING_GRID_RANGE, formats=scaling_formats(G))
        for target in options.kan_targets:
            progress(f"scaling: T4 KAN [16,1] G={G} on {target}")
            rows.append({"knob": G, **_formats(L),
                         **_implement_learner(L, f"kan_g{G}", target, options.work / "scaling", progress, "t4", "kan",
                                              options.pnr_seed)})
    if options.big:
        L = big_kan_learner()
        progress(f"scaling: T4 KAN {list(L.spec.sizes)} G={BIG_KAN['grid_size']} "
                 f"({int(L.layers()[0].coeffs.size):,} parameters) on ecp5-85f")
        rows.append({"knob": BIG_KAN["grid_size"], "big": True, **_formats(L),
                     **_implement_learner(L, f"kan_g{BIG_KAN['grid_size']}", "ecp5-85f", options.work / "scaling",
                                          progress, "t4", "kan", options.pnr_seed)})
    for W in options.mlp_widths if options.scaling else ():
        L = _learner("t4", "mlp", sizes=(16, W, 1), formats=scaling_formats())
        for target in options.mlp_targets:
            progress(f"scaling: T4 MLP [16,{W},1] on {target}")
            rows.append({"knob": W, **_formats(L),
                         **_implement_learner(L, f"mlp_w{W}", target, options.work / "scaling", progress, "t4", "mlp",
                                              options.pnr_seed)})
    return rows


# -- plots ------------------------------------------------------------------------------------------------

def scaling_plot(rows: list[dict], path: Path, target: str = "xcvu9p") -> Optional[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    ok = [r for r in rows if r.get("status") == "ok" and not r.get("big")]
    if not ok and not any(r.get("big") and r.get("status") == "ok" for r in rows):
        return None
    fig, axes = plt.subplots(1, 6, figsize=(24, 4))
    for ax, key in zip(axes[:5], ("lut", "lutram", "ff", "dsp", "bram")):
        for model, marker in (("kan", "o-"), ("mlp", "s--")):
            pts = sorted((r["params"], r[key]) for r in ok
                         if r["model"] == model and r["target"] == target and r.get(key) is not None)
            if pts:
                ax.plot(*zip(*pts), marker, label=model.upper())
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # 2x10^2, 3x10^2 ... overlap on a narrow panel
        ax.set_ylim(bottom=0)  # from zero: "flat" must look flat, not be magnified
        ax.set_title({"lut": "logic LUT", "lutram": "LUTRAM cells"}.get(key, key.upper()) + f" ({target})")
        ax.set_xlabel("parameters")
        ax.legend()
    ax = axes[5]
    for model, marker in (("kan", "o-"), ("mlp", "s--")):
        pts = sorted((r["params"], r["latency_ns"]) for r in ok
                     if r["model"] == model and r["target"] == "ecp5-85f" and r.get("latency_ns"))
        if pts:
            ax.plot(*zip(*pts), marker, label=model.upper())
    big = [r for r in rows if r.get("big") and r.get("status") == "ok" and r.get("latency_ns")]
    for r in big:  # the >50k-parameter learner, on its own: it has other formats and grid than the sweep
        ax.plot([r["params"]], [r["latency_ns"]], "k*", ms=12, label=f"KAN G={r['knob']} ({r['params']:,})")
    ax.axhline(1000.0, color="grey", ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_title("step latency, ns (ecp5-85f, post-route)")
    ax.set_xlabel("parameters")
    ax.legend()
    fig.suptitle("T4 learners: KAN G = 6..192 vs MLP width 16..256")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def accuracy_plot(rows: list[dict], path: Path) -> Optional[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not rows:
        return None
    tasks = sorted({r["task"] for r in rows})
    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 4))
    axes = np.atleast_1d(axes)
    for ax, task in zip(axes, tasks):
        labels = [f"{r['datapath']}{'' if r['rounding'] in ('-', 'nearest') else ' sr'}"
                  for r in rows if r["task"] == task and r["model"] == "kan"]
        x = np.arange(len(labels))
        for k, model in enumerate(MODELS):
            vals = [r["score"] for r in rows if r["task"] == task and r["model"] == model]
            ax.bar(x + (k - 0.5) * 0.4, vals, 0.4, label=model.upper())
        ax.set_xticks(x, labels, rotation=30, fontsize=8)
        ax.set_title(f"{task.upper()} score (lower is better)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -- run, table, CLI --------------------------------------------------------------------------------------

def run_bench(options: OnlineBenchOptions, progress: Progress = lambda m: None, command: str = "",
              earlier: Sequence[OnlineBenchResult] = ()) -> OnlineBenchResult:
    """Run the selected sections; ``earlier`` results (see :func:`merge_results`) fill in the rest before the
    plots are drawn."""
    from ..flows.cache import cached_only

    options.work.mkdir(parents=True, exist_ok=True)
    res = OnlineBenchResult(options={k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(options).items()},
                            command=command)
    if options.accuracy:
        res.accuracy = accuracy_rows(options, progress)
    if options.t5:
        res.t5 = t5_rows(options, progress)
    with cached_only() if options.cached_flows else contextlib.nullcontext():
        if options.hardware:
            res.hardware = hardware_rows(options, progress)
        if options.scaling or options.big:
            res.scaling = scaling_rows(options, progress)
    merge_results(list(earlier), res)
    for p in (accuracy_plot(res.accuracy, options.work / "accuracy.png"),
              scaling_plot(res.scaling, options.work / "scaling.png")):
        if p is not None:
            res.plots.append(str(p))
    return res


def _n(v, fmt="{:,.0f}") -> str:
    return "-" if v is None else fmt.format(v)


def tables(res: OnlineBenchResult):
    from rich import box
    from rich.console import Group
    from rich.table import Table

    kw = dict(title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), collapse_padding=True, pad_edge=False,
              show_edge=False)
    acc = Table(title="accuracy (mean over seeds; score: T1/T2 MSE, T4 error rate)", **kw)
    for c in ("task", "model", "datapath", "upd", "mean MSE", "score", "x float", "T1 steady MSE"):
        acc.add_column(c, justify="left" if c in ("task", "model", "datapath", "upd") else "right", no_wrap=True)
    for r in res.accuracy:
        acc.add_row(r["task"], r["model"], r["datapath"].replace("fixed", ""), r["rounding"][:5],
                    f"{r['mean_mse']:.5f}", f"{r['score']:.5f}", f"{r['mse_vs_float']:.2f}",
                    " / ".join(f"{v:.5f}" for v in r.get("steady_mse", [])))
    parts = [acc]
    if res.t5:
        t5 = Table(title="T5 CartPole, A2C (episodes to a 100-episode mean >= 475)", **kw)
        for c in ("model", "format"):
            t5.add_column(c)
        for c in ("seed", "episodes", "solved at", "best 100-mean"):
            t5.add_column(c, justify="right")
        for r in res.t5:
            t5.add_row(r["model"], r["format"], str(r["seed"]), str(r["episodes"]), _n(r["solved_at"]),
                       _n(r["best_100_mean"], "{:.1f}"))
        parts.append(t5)
    for title, rows in (("hardware (ecp5-85f: after place and route; xcvu9p: synthesis estimate)", res.hardware),
                        ("scaling on T4", res.scaling)):
        if not rows:
            continue
        t = Table(title=title, **kw)
        for c in ("design", "target", "params", "LUT", "LUTRAM", "FF", "DSP", "BRAM", "Fmax", "cyc", "ns", "II", "status"):
            t.add_column(c, justify="left" if c in ("design", "target", "status") else "right", no_wrap=True)
        for r in rows:
            t.add_row(r["design"], r["target"], _n(r.get("params")), _n(r.get("lut")), _n(r.get("lutram")),
                      _n(r.get("ff")), _n(r.get("dsp")), _n(r.get("bram")), _n(r.get("fmax_mhz"), "{:.1f}"),
                      _n(r.get("latency_cycles")), _n(r.get("latency_ns"), "{:.1f}"), _n(r.get("ii")),
                      r.get("status", ""))
        parts.append(t)
    return Group(*parts)


def add_arguments(p) -> None:
    """The ``bench online`` options."""
    from ..cli_types import positive_int, positive_int_list, seed

    p.add_argument("--targets", metavar="T,U", help=f"hardware section's targets (default {','.join(HW_TARGETS)})")
    p.add_argument("--online-work", default="out/bench-online", metavar="DIR",
                   help="folder for the designs, flow caches and PNGs (default out/bench-online)")
    p.add_argument("--online-parts", default="accuracy,t5,hardware,scaling", metavar="A,B",
                   help="which sections to run (default all: accuracy,t5,hardware,scaling; 'big' is the "
                        "scaling section's >50k-parameter learner alone; 'none' with --online-merge only redraws)")
    p.add_argument("--online-docs", default=None, metavar="DIR",
                   help="also write DIR/bench-online.md (the tables) with the plots in DIR/img/ (e.g. docs)")
    p.add_argument("--online-merge", default="", metavar="JSON,JSON",
                   help="add the rows of earlier runs' --json files to the sections (a row measured again "
                        "replaces the earlier one), then draw the plots and tables of the whole")
    p.add_argument("--cached-flows", action="store_true",
                   help="only reuse finished flows (their caches under the work folder); a design whose "
                        "flow has not run yet is listed as 'not run' instead of started (to redraw the tables)")
    p.add_argument("--t5-episodes", type=positive_int, default=3000, metavar="N",
                   help="T5's episode cap per run (default 3000; each run stops once solved)")
    p.add_argument("--kan-grids", type=positive_int_list, default=KAN_GRIDS, metavar="G,G",
                   help="the scaling sweep's KAN grid sizes (a narrowed list leaves out the >50k-parameter "
                        "learner unless 'big' is among --online-parts)")
    p.add_argument("--pnr-seed", type=seed, default=1, metavar="N",
                   help="nextpnr seed of every flow this run starts (default 1; another one when router2 "
                        "stalls on a design); recorded per hardware row")
    p.add_argument("--mlp-widths", type=positive_int_list, default=MLP_WIDTHS, metavar="W,W",
                   help="the scaling sweep's MLP hidden widths")
    p.add_argument("--kan-targets", default=",".join(HW_TARGETS), metavar="T,U",
                   help="targets of the KAN scaling sweep (ecp5-85f also adds the >50k-parameter learner, "
                        "unless --kan-grids narrows the sweep)")
    p.add_argument("--mlp-targets", default=",".join(HW_TARGETS), metavar="T,U",
                   help="targets of the MLP scaling sweep (xcvu9p synthesis of the wide MLPs takes tens of "
                        "minutes each)")


def options_from_args(args) -> OnlineBenchOptions:
    parts = {p.strip() for p in args.online_parts.split(",") if p.strip()}
    unknown = parts - {"accuracy", "t5", "hardware", "scaling", "big", "none"}
    if unknown:
        raise BitforgeError(f"--online-parts: unknown section(s) {sorted(unknown)}; expected accuracy, t5, hardware, "
                            "scaling, big or none")

    def target_list(text):
        return tuple(t.strip() for t in text.split(",") if t.strip())

    targets = target_list(args.targets) if getattr(args, "targets", None) else HW_TARGETS
    kan_targets = target_list(args.kan_targets)
    # The >50k-parameter learner is an ecp5-85f point: part of the full KAN sweep on that target (a narrowed
    # --kan-grids, e.g. one point again with another --pnr-seed, leaves it out).
    kan_grids = tuple(args.kan_grids)
    big = "big" in parts or ("scaling" in parts and "ecp5-85f" in kan_targets and kan_grids == KAN_GRIDS)
    return OnlineBenchOptions(work=Path(args.online_work), accuracy="accuracy" in parts, t5="t5" in parts, hardware="hardware" in parts,
                              scaling="scaling" in parts, big=big,
                              kan_grids=kan_grids,
                              mlp_widths=tuple(args.mlp_widths),
                              mlp_targets=target_list(args.mlp_targets), kan_targets=kan_targets,
                              targets=targets, t5_episodes=args.t5_episodes, cached_flows=args.cached_flows,
                              pnr_seed=args.pnr_seed)


def read_results(spec: str) -> list[OnlineBenchResult]:
    """The results named by ``--online-merge`` (comma-separated JSON files of ``bench online --json``)."""
    out = []
    for name in (n.strip() for n in spec.split(",") if n.strip()):
        path = Path(name)
        try:
            doc = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise BitforgeError(f"--online-merge {name}: cannot read it as JSON ({e}); give files written by "
                                "bitforge bench online --json") from None
        if not isinstance(doc, dict) or not {"accuracy", "hardware", "scaling"} <= set(doc):
            raise BitforgeError(f"--online-merge {name}: not a 'bitforge bench online --json' result (no accuracy/"
                                "hardware/scaling sections)")
        out.append(OnlineBenchResult.from_json(doc))
    return out


def write_json(res: OnlineBenchResult, path: Path) -> None:
    Path(path).write_text(json.dumps(res.to_json(), indent=2, default=float) + "\n")


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(r) + " |" for r in rows), ""]


def kan_flatness(rows: list[dict]) -> dict[str, tuple[float, float]]:
    """Per target, the KAN sweep's logic growth against its smallest G: (the largest LUT count over the smallest
    G's, the largest G's over the smallest G's). The aim is growth within 1.10x: logic must not grow with G."""
    out = {}
    for target in sorted({r["target"] for r in rows}):
        pts = sorted((r["params"], r["lut"]) for r in rows if r.get("status") == "ok" and r["model"] == "kan"
                     and not r.get("big") and r["target"] == target and r.get("lut"))
        if len(pts) > 1:
            first = pts[0][1]
            out[target] = (max(lut for _, lut in pts) / first, pts[-1][1] / first)
    return out


def markdown(res: OnlineBenchResult, command: str, images: dict[str, str]) -> str:
    """The benchmark as a markdown page (``--online-docs``): the same tables as the console, the plots."""
    lines = ["# Online learners: benchmark", "",
             f"Written by `{command}` (flow caches under the work folder make the hardware rows instant on a "
             "rerun).", ""]
    merged = {k: v for k, v in res.sources.items() if v != [command]}
    if merged:
        lines += ["Rows by section, from these runs (`--online-merge` took them from their JSON):", ""]
        lines += [f"* {section}: " + "; ".join(f"`{c}`" for c in cmds) for section, cmds in res.sources.items()]
        lines.append("")
    if res.accuracy:
        lines += ["## Accuracy (prequential, mean over task seeds; score: T1/T2 MSE, T4 error rate)", ""]
        lines += _md_table(["task", "model", "format", "params", "mean MSE", "score", "x float", "T1 steady MSE"],
                           [[r["task"], r["model"], r.get("format") or r["datapath"], _n(r.get("params")),
                             f"{r['mean_mse']:.5f}",
                             f"{r['score']:.5f}", f"{r['mse_vs_float']:.2f}",
                             " / ".join(f"{v:.5f}" for v in r.get("steady_mse", [])) or "-"] for r in res.accuracy])
    if res.t5:
        lines += ["## T5 CartPole, A2C (episodes to a 100-episode mean >= 475)", ""]
        lines += _md_table(["model", "format", "seed", "episodes", "solved at", "best 100-episode mean"],
                           [[r["model"], r["format"], str(r["seed"]), str(r["episodes"]), _n(r["solved_at"]),
                             _n(r["best_100_mean"], "{:.1f}")] for r in res.t5])
    for title, rows in (("Hardware (ecp5-85f: after place and route; xcvu9p: synthesis estimate)", res.hardware),
                        ("Scaling on T4 (KAN: G grows; MLP: width grows)", res.scaling)):
        if not rows:
            continue
        lines += [f"## {title}", ""]
        if rows is res.scaling:
            lines += [SCALING_NOTE, ""]
        lines += _md_table(["design", "target", "params", "LUT", "LUTRAM", "FF", "DSP", "BRAM", "Fmax MHz", "cycles", "ns",
                            "II", "status"],
                           [[r["design"], r["target"], _n(r.get("params")), _n(r.get("lut")), _n(r.get("lutram")),
                             _n(r.get("ff")),
                             _n(r.get("dsp")), _n(r.get("bram")), _n(r.get("fmax_mhz"), "{:.1f}"),
                             _n(r.get("latency_cycles")), _n(r.get("latency_ns"), "{:.1f}"), _n(r.get("ii")),
                             (r.get("status", "") + (f": {r['note']}" if r.get("note") else "")).replace("|", "/")]
                            for r in rows])
    flat = kan_flatness(res.scaling)
    if flat:
        lines += ["KAN logic as G grows, against the smallest G (aim: growth within 1.10x): "
                  + "; ".join(f"{t}: largest {a:.3f}x, largest G {b:.3f}x" for t, (a, b) in flat.items()) + ".", ""]
    for title, name in images.items():
        lines += [f"![{title}]({name})", ""]
    return "\n".join(lines)


def write_docs(res: OnlineBenchResult, folder: Path, command: str) -> Path:
    """``folder/bench-online.md`` and its plots under ``folder/img/`` (written whole, then renamed)."""
    import shutil

    folder = Path(folder)
    (folder / "img").mkdir(parents=True, exist_ok=True)
    images = {}
    for plot in res.plots:
        name = f"img/online-{Path(plot).name}"
        shutil.copyfile(plot, folder / name)
        images[Path(plot).stem] = name
    page = folder / "bench-online.md"
    tmp = page.with_name(".bench-online.md.tmp")
    tmp.write_text(markdown(res, command, images))
    tmp.replace(page)
    return page


__all__ = ["OnlineBenchOptions", "OnlineBenchResult", "markdown", "merge_results", "run_bench", "tables", "write_docs", "write_json"]
