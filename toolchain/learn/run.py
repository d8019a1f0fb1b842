"""An online learner on a stream, into an output folder: the golden trajectory next to the float reference,
metrics, a plot, and on request the RTL trajectory and an implementation. ``bitforge learn`` (a built-in task or
``--data``) and ``bitforge flow learn:TASK`` are this function with options parsed; from Python::

    from bitforge.models.streams import load_stream
    from bitforge.toolchain.learn.run import learn
    from bitforge.toolchain.learn.spec import LearnerFormats, LearnerSpec, UpdateRule

    stream = load_stream("stream.npz")                      # X (n, 4), Y (n, 1), float, in time order
    spec = LearnerSpec("kan", (4, 4, 1), grid_range=stream.input_range, rule=UpdateRule(lr_shift=4),
                       formats=LearnerFormats.make("fixed<16,6>", guard_bits=8))
    result = learn(spec, stream, "out/mine", rtl=True, target="ecp5-25f")

The same spec drives both learners: the float reference reads its kind, sizes, grid, init and eta = 2**-lr_shift.

Output folder (written to a temporary folder, then renamed): ``learner/`` (the IR folder of the initial state,
``metadata["learner"]`` holds the spec), ``final/`` (the state after the stream: ``bitforge emulate OUT --input
X.npy`` predicts with it), ``metrics.json``, ``learn.png`` (prediction vs target and the running error),
``report.md``, ``report.json`` with ``accuracy`` (the benchmark's JSON rows, fixed point and float); with ``rtl``
also ``rtl/`` (the generated core and board top, ``manifest.json``: ``bitforge implement OUT --target T`` builds
it) and ``report.json`` ``verification.golden_vs_rtl`` (the trajectory on Icarus/Verilator, bit for bit); with
``target`` the implementation and ``report.json`` ``hardware`` (the benchmark's hardware row); with ``board`` the
learner's UART device on that board (``flows.board_flow``: ``impl/<board>/`` and ``report.json`` ``boards.<board>``),
which ``bitforge deploy OUT --board B`` bundles; with ``hls`` also ``hls/`` (the learner as HLS C++: firmware,
C-simulation testbench, ``build_csim.sh``, ``build_vitis.tcl``; ``toolchain/backends/hls/learner.py``) and
``report.json`` ``verification.golden_vs_hls_csim`` (its g++ C simulation over the whole trajectory, bit for bit).
"""
from __future__ import annotations

import json
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

import numpy as np

from ..errors import BitforgeError, VerificationFailed
from ..fixed import FixedType, Overflow, Rounding, out_of_range, quantize
from ..outputs import check_output, keep_failed, output_folder, relocate
from ..report.file import update_report
from . import emulate as emulate_learn
from .spec import Learner, LearnerSpec, LearnerWarning, build_learner, save_learner

__all__ = ["LearnResult", "learn", "check_run_options", "code_metrics", "accuracy_row", "format_label",
           "hardware_row", "learner_pnr_options", "HARDWARE_KEYS", "SIMULATORS", "BASES"]

Progress = Callable[[str], None]
SIMULATORS = ("icarus", "verilator", "both")
BASES = ("auto", "rom", "circuit")


@dataclass(frozen=True)
class LearnResult:
    """What :func:`learn` wrote: the folder, ``metrics.json``'s content, ``implement``'s report with a target and
    the board flow's entry with a board."""

    out: Path
    metrics: dict
    target: Optional[dict] = None
    board: Optional[dict] = None  # report.json boards.<board> of a board build


def learner_pnr_options(target: Optional[str] = None) -> tuple[str, ...]:
    """nextpnr options for a learner on ``target``: the electrostatic placer and router2 (``bench.rtl.PNR_OPTIONS``)
    where its nextpnr has them (iCE40, ECP5; None: those). nextpnr's default HeAP placer packs the learners'
    multiplier arrays so tightly that router1 crawls (T1's 80-DSP MLP: 3,600 arcs left after 700 s; T4's 128-DSP
    KAN: 79k after 450 s); the static placer and router2 route them in minutes. nextpnr-himbaechel (Gowin) refuses
    ``--placer static`` ("This uarch does not support the 'static' placer"): a Gowin learner gets the defaults."""
    from ..bench.rtl import PNR_OPTIONS

    if target is not None:
        from ..flows.targets import get_target

        flow = get_target(target).flow
        if flow is None or flow.nextpnr not in ("nextpnr-ice40", "nextpnr-ecp5"):
            return ()
    return PNR_OPTIONS


def code_metrics(task, codes: np.ndarray, lsb: float) -> dict:
    """The task's prequential metrics of predictions given as codes (``lsb`` = 1.0 for float predictions)."""
    from bitforge.models.online_tasks import prequential_metrics

    return prequential_metrics(task, np.asarray(codes).astype(np.float64) * lsb)


def accuracy_row(task: str, model: str, fmt: str, params: int, metrics: dict) -> dict:
    """The issue's accuracy JSON keys (``bitforge bench online`` and ``bitforge learn``'s report.json)."""
    return {"task": task, "model": model, "format": fmt, "params": params, "mean_mse": metrics["mean_mse"],
            "steady_mse": metrics.get("steady_mse", []), "error_rate": metrics.get("error_rate")}


def format_label(datapath: Union[str, FixedType], rounding: str = "nearest") -> str:
    """``<16,6>``, ``<8,4> stochastic``, ``float``: the benchmark's ``format`` column (a learner's default modes,
    RND_CONV and SAT, left out)."""
    if isinstance(datapath, FixedType):
        t = datapath
        datapath = t.to_short() if (t.rounding, t.overflow) != (Rounding.RND_CONV, Overflow.SAT) else \
            f"{'fixed' if t.signed else 'ufixed'}<{t.width},{t.integer}>"
    label = str(datapath).replace("fixed", "")
    return label if rounding in ("nearest", "-") or label == "float" else f"{label} {rounding}"


HARDWARE_KEYS = ("lut", "ff", "dsp", "bram", "fmax_mhz", "latency_cycles", "latency_ns", "ii")


def hardware_row(task: str, model: str, target: str, params: int, impl: dict) -> dict:
    """The issue's hardware JSON keys from an ``implement`` report (or a row that carries the same keys)."""
    return {"task": task, "model": model, "target": target, **{k: impl.get(k) for k in HARDWARE_KEYS},
            "params": params}


def check_run_options(spec: LearnerSpec, task, *, target: Optional[str] = None, simulator: str = "both",
                      basis: str = "auto", mlp_lanes: Optional[int] = None, hls: bool = False) -> None:
    """Everything that can be refused before any work: the stream against the spec, the target's name, the
    simulator, the basis, the MLP lanes and, for ``hls``, g++ and hls4ml's ap_types headers (a mistake found after
    minutes of simulation costs those minutes)."""
    if spec.sizes[0] != task.d_in or spec.sizes[-1] != task.d_out:
        raise BitforgeError(f"learner sizes {list(spec.sizes)} do not fit the stream {task.name!r} ({task.d_in} "
                            f"inputs -> {task.d_out} outputs); use --layers {task.d_in},...,{task.d_out}")
    if target is not None:
        from ..flows.targets import get_target

        get_target(target)
    if simulator not in SIMULATORS:
        raise BitforgeError(f"simulator {simulator!r} unknown; expected one of {', '.join(SIMULATORS)}")
    if basis not in BASES:
        raise BitforgeError(f"basis {basis!r} unknown; expected one of {', '.join(BASES)}")
    if mlp_lanes is not None:
        if spec.kind != "mlp":
            raise BitforgeError(f"--mlp-lanes {mlp_lanes}: only an MLP learner is time-multiplexed (this one is a "
                                f"{spec.kind.upper()})")
        if isinstance(mlp_lanes, bool) or not isinstance(mlp_lanes, (int, np.integer)) or mlp_lanes < 1:
            raise BitforgeError(f"--mlp-lanes {mlp_lanes}: expected a number of lanes >= 1 (hidden units computed "
                                "per round), or leave it out for the fully parallel core")
    if hls:
        from ..backends.hls.gxx import ap_types_dir, require_gxx

        require_gxx()
        ap_types_dir()


def learn(spec: LearnerSpec, task, out, *, rtl: bool = False, target: Optional[str] = None,
          simulator: str = "both", basis: str = "auto", mlp_lanes: Optional[int] = None, pnr_seed: int = 1,
          name: Optional[str] = None, progress: Progress = lambda m: None, force: bool = False,
          inputs: Sequence[str] = (), board: Optional[str] = None, baud: Optional[int] = None,
          hls: bool = False) -> LearnResult:
    """Run ``spec`` prequentially on ``task`` (a built-in task or a loaded stream) and write ``out``.

    The fixed-point learner is the golden model; the float reference runs on the same stream from the same
    initial numbers. ``rtl`` (implied by ``target``) generates the learner core and replays the trajectory on
    ``simulator``; ``target`` then implements it (yosys + nextpnr). An MLP that does not fit the target's DSP
    blocks fully parallel is time-multiplexed unless ``mlp_lanes`` says otherwise. Values outside the input or
    datapath format saturate; a :class:`LearnerWarning` gives their count (also in ``metrics.json``). ``board``
    (implies ``rtl``) builds the learner's UART device for that board at ``baud``; the bare core, whose wide
    stream bus no board wires up, is implemented only when ``target`` is given too. ``hls`` writes the learner as HLS
    C++ into ``out/hls`` and checks its g++ C simulation against the golden trajectory (predictions, final state,
    LFSR lanes); a difference raises :class:`VerificationFailed` and leaves the folder as ``OUT.failed``.

    ``out`` is written through :func:`..outputs.output_folder` (``force``, ``inputs``: the stream's files): the
    previous ``out`` stays until everything, the implementation included, is done; a failed implementation
    (does not fit, a tool failed) still puts the verified learner in place before its error is raised.
    """
    check_run_options(spec, task, target=target, simulator=simulator, basis=basis, mlp_lanes=mlp_lanes, hls=hls)
    if board is not None:  # a wrong board or a baud rate its clock cannot make fails before the golden run
        from ..flows.boards import get_board
        from ..flows.clocking import DEFAULT_BAUD, uart_timing

        baud = DEFAULT_BAUD if baud is None else baud
        uart_timing(get_board(board).clock_hz, baud)
    real = check_output(out, force=force, inputs=inputs)  # before any long work
    name = name or f"{task.name}-{spec.kind}"
    learner = build_learner(spec, name=name)
    rtl = rtl or target is not None or board is not None
    part = target
    if board is not None and part is None:
        from ..flows.boards import get_board

        part = get_board(board).target
    if part and spec.kind == "mlp" and mlp_lanes is None:
        from ..backends.rtl.learner_mlp import choose_lanes
        from ..flows.targets import get_target

        mlp_lanes = choose_lanes(learner, get_target(part).budget.dsp)
        if mlp_lanes is not None:
            progress(f"the fully parallel MLP does not fit {part}'s DSP blocks: time-multiplexed, {mlp_lanes} lanes")
    f = spec.formats
    saturated = {"inputs": int(out_of_range(task.x, f.input).sum()),
                 "targets": int(out_of_range(task.target, f.datapath).sum())}
    for what, fmt, option in (("inputs", f.input, "--input-type"), ("targets", f.datapath, "--datapath")):
        if saturated[what]:
            total = task.x.size if what == "inputs" else task.target.size
            warnings.warn(f"{saturated[what]:,} of {total:,} {what} of {task.name!r} lie outside {fmt.to_short()} "
                          f"[{fmt.min_value:g}, {fmt.max_value:g}] and saturate; scale the stream or widen "
                          f"{option}", LearnerWarning, stacklevel=2)
    x, t = quantize(task.x, f.input), quantize(task.target, f.datapath)
    progress(f"golden model: {len(x):,} samples, {spec.kind} {list(spec.sizes)}, datapath {f.datapath.to_short()}, "
             f"lr_shift {spec.rule.lr_shift}, {spec.rule.rounding} updates")
    t_golden = time.perf_counter()
    traj = emulate_learn.run(learner, x, t)
    golden_seconds = time.perf_counter() - t_golden
    progress("float reference on the same stream")
    from bitforge.models.online_learners import run_prequential

    float_pred = run_prequential(spec, task, seed=spec.seed)
    fixed_m = code_metrics(task, traj.predictions, f.datapath.lsb)
    float_m = code_metrics(task, float_pred, 1.0)
    fmt = format_label(f.datapath, spec.rule.rounding)
    metrics = {"task": task.name, "model": spec.kind, "samples": len(x), "spec": spec.to_json(),
               "fixed": fixed_m, "float": float_m, "params": learner.n_params, "saturated": saturated,
               "accuracy": [accuracy_row(task.name, spec.kind, fmt, learner.n_params, fixed_m),
                            accuracy_row(task.name, spec.kind, "float", learner.n_params, float_m)]}

    out = Path(out)
    impl = impl_error = board_entry = None
    with output_folder(out, kind="learn", force=force, inputs=inputs) as tmp:
        save_learner(learner, tmp / "learner")
        save_learner(learner.with_state(traj.final), tmp / "final")
        _plot(tmp / "learn.png", task, traj.predictions.astype(np.float64) * f.datapath.lsb, float_pred,
              f"{task.name} {spec.kind.upper()} {list(spec.sizes)}: fixed {fmt} vs float")
        if rtl:
            try:
                metrics["rtl"] = _rtl(learner, x, t, tmp, simulator, basis, mlp_lanes, progress)
            except VerificationFailed as exc:  # keep the simulation's logs the error names: OUT.failed
                failed = keep_failed(tmp, out)
                relocate(exc, tmp, failed)
                exc.args = (f"{exc.args[0] if exc.args else exc} The artefacts are in {failed} for a bug report.",
                            *exc.args[1:])
                raise
        if hls:
            metrics["hls"] = _hls(learner, x, t, traj, golden_seconds, tmp, out, progress)
        (tmp / "metrics.json").write_text(json.dumps(metrics, indent=2, default=_json_default) + "\n")
        accuracy = json.loads(json.dumps(metrics["accuracy"], default=_json_default))
        update_report(tmp, lambda report: report.update(accuracy=accuracy))
        (tmp / "report.md").write_text(_report_md(metrics))
        if target:
            from ..flows.implement import TimingWarning, implement

            try:
                with warnings.catch_warnings():  # progress() has shown it; report.json keeps it
                    warnings.simplefilter("ignore", TimingWarning)
                    impl = implement(tmp, target, seed=pnr_seed, progress=progress,
                                     pnr_options=learner_pnr_options(target))
            except BitforgeError as e:  # recorded in report.json; raised once the folder is in place
                impl_error = e
            else:
                row = hardware_row(task.name, spec.kind, target, learner.n_params, impl)
                update_report(tmp, lambda report: report.update(hardware=[row]))
                metrics["hardware"] = row
                (tmp / "report.md").write_text(_report_md(metrics))
        if board is not None and impl_error is None:
            from ..flows.board_flow import implement_board
            from ..flows.targets import DoesNotFit

            try:  # a failure is recorded in report.json boards.<board> by the board flow itself
                board_entry = implement_board(tmp, board, baud=baud, seed=pnr_seed, progress=progress)
            except DoesNotFit as e:
                impl_error = _learner_does_not_fit(e, spec, board)
            except BitforgeError as e:
                impl_error = e
    if impl_error is not None:
        raise relocate(impl_error, tmp, real)
    return LearnResult(out, metrics, impl, board_entry)


def _learner_does_not_fit(e, spec: LearnerSpec, board: str):
    """The board flow's verdict with what shrinks a learner (its advice is a compiled model's: --precision and
    --reuse, which a learner does not have). Each multiplier of a KAN learner is one of the k + 1 basis products,
    the k + 1 updates and, when the grid step is not a power of two, the cell index; a 16-bit datapath's 17-bit
    bases take two 16 x 16 DSP blocks per product."""
    from ..flows.targets import DoesNotFit

    needs = "; ".join(f"needs {n:g} {r.upper()}, {e.target} has {a:g}" for r, (n, a) in e.over.items())
    tips = ("a narrower --datapath (fewer DSP blocks per multiplier), a lower --order (k + 1 bases: fewer "
            "multipliers), a grid whose step is a power of two (no index multiplier), or a board with a bigger part"
            if spec.kind == "kan" else "a narrower --datapath, fewer hidden units, --mlp-lanes 1, or a board with a "
            "bigger part")
    example = ("; T1's learner fits the iCEBreaker's 8 DSP blocks with 'bitforge learn t1 --order 2 --datapath "
               "fixed<12,4> --board icebreaker'" if spec.kind == "kan" else "")
    return DoesNotFit(f"the {spec.kind.upper()} learner {list(spec.sizes)}'s UART device does not fit the {board}: "
                      f"{needs}. Try (with bitforge learn ... --board {board}) {tips}{example}", e.target, e.over)


def _rtl(learner: Learner, x: np.ndarray, t: np.ndarray, folder: Path, simulator: str, basis: str,
         mlp_lanes: Optional[int], progress: Progress) -> dict:
    from ..verify.simulate_learner import generate_learner, simulate_learner, write_sources

    design = generate_learner(learner, basis, mlp_lanes)
    from ..backends.rtl.device import device_for_learner, write_device

    write_sources(design, folder / "rtl")
    manifest = design.manifest()
    manifest["device"] = write_device(folder / "rtl", device_for_learner(learner, design))
    (folder / "rtl" / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    sims = simulate_learner(learner, x, t, work=folder / "sim", simulator=simulator, seed=learner.spec.seed,
                            basis=basis, mlp_lanes=mlp_lanes, progress=progress)
    results = {s: r.to_json() for s, r in sims.items()}

    def change(report: dict) -> None:
        report["rtl"] = {"latency_cycles": design.latency_cycles, "ii": design.ii, "resources": design.resources}
        report.setdefault("verification", {})["golden_vs_rtl"] = results

    update_report(folder, change)
    return {"latency_cycles": design.latency_cycles, "ii": design.ii, "resources": design.resources,
            "golden_vs_rtl": results}


def _hls(learner: Learner, x: np.ndarray, t: np.ndarray, traj, golden_seconds: float, folder: Path, out: Path,
         progress: Progress) -> dict:
    """``folder/hls``: the learner as HLS C++, built with g++ and run over the whole trajectory; the comparison
    with the golden one goes to report.json ``verification.golden_vs_hls_csim``. A difference is a bug: the
    staged folder moves to ``OUT.failed`` (the artefacts of a bug report) and :class:`VerificationFailed`."""
    from ..backends.hls.learner import csim_vs_golden

    progress(f"HLS C++: {out}/hls, built with g++, C simulation over {len(x):,} samples")
    result = csim_vs_golden(learner, x, t, work=folder / "hls", golden=traj, golden_seconds=golden_seconds)

    def change(report: dict) -> None:
        report.setdefault("verification", {})["golden_vs_hls_csim"] = result

    update_report(folder, change)
    if result["mismatches"] or result["state_mismatches"] or result["lane_mismatches"]:
        failed = keep_failed(folder, out)
        raise VerificationFailed(
            f"the HLS C simulation and the golden learner disagree: {result['mismatches']} of {result['vectors']} "
            f"predictions, {result['state_mismatches']} of {result['state_codes']} state codes, "
            f"{result['lane_mismatches']} LFSR lanes (first: {json.dumps(result['first_mismatch'])}). This is a "
            f"bitforge bug; the artefacts are in {failed} for a bug report.")
    return result


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
    a.set_title(f"last {min(n, 200)} samples", fontsize=9)
    a.legend(loc="upper right", fontsize=8)
    w = max(1, min(max(10, n // 100), n))
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
    spec = m["spec"]
    lines = [f"# {m['task']}: {m['model'].upper()} {spec['sizes']}", "",
             f"{m['samples']:,} samples, prequential (predict, then update on the same sample); datapath "
             f"`{spec['formats']['datapath']}`, eta = 2^-{spec['rule']['lr_shift']}, {spec['rule']['rounding']} "
             "updates.", ""]
    sat = m.get("saturated", {})
    if any(sat.values()):
        lines += [f"Saturated: {sat.get('inputs', 0):,} input values, {sat.get('targets', 0):,} target values "
                  "(outside their formats).", ""]
    lines += ["| metric | fixed point (golden) | float reference |", "|---|---|---|"]
    for k in m["fixed"]:
        lines.append(f"| {k} | {_fmt(m['fixed'][k])} | {_fmt(m['float'].get(k, ''))} |")
    if "rtl" in m:
        r = m["rtl"]
        lines += ["", f"RTL: latency {r['latency_cycles']} cycles, II {r['ii']}; "
                  + "; ".join(f"{s}: {v['samples']:,} samples, {v['mismatches']} mismatches, read-back "
                              + ", ".join(f"after {a}: {c['mismatches']} of {c['words']} words differ"
                                          for a, c in v["readback"].items())
                              for s, v in r["golden_vs_rtl"].items())]
    if "hls" in m:
        h = m["hls"]
        lines += ["", f"HLS C++ (`hls/`, C simulation built with g++ in {h['build_seconds']:g} s): {h['vectors']:,} "
                  f"samples, {h['mismatches']} prediction mismatches, {h['state_mismatches']} of {h['state_codes']} "
                  f"state codes differ; {h['csim_samples_per_s']:,} samples/s"
                  + (f" against the golden model's {h['golden_samples_per_s']:,}" if h.get("golden_samples_per_s")
                     else "") + ". Vitis HLS: `vitis_hls -f hls/build_vitis.tcl` (bitforge did not run it)."]
    if "hardware" in m:
        h = m["hardware"]
        lines += ["", f"{h['target']}: {h['lut']} LUT, {h['ff']} FF, {h['dsp']} DSP, {h['bram']} BRAM, Fmax "
                  f"{h['fmax_mhz']} MHz, latency {h['latency_cycles']} cycles = {h['latency_ns']} ns, II {h['ii']}"]
    lines += ["", "![prediction and error](learn.png)", ""]
    return "\n".join(lines)
