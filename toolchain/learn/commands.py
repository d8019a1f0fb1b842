"""``bitforge learn``: an online learner on a benchmark task or on the user's own stream (``--data``), golden model
(and RTL, and an implementation), metrics and a plot. The work is :func:`bitforge.toolchain.learn.run.learn`;
this module turns options into its spec and stream and prints the results.

A task's defaults are the benchmark's reference configuration
(:data:`bitforge.models.online_learners.REFERENCE_CONFIGS`: for T1 a KAN [1, 1], G = 5, k = 3 on [-2.25, 2.25],
eta = 2**-1) at a <16,6> datapath with 8 guard bits. A stream's: a KAN ``[d_in, d_out]`` (an MLP
``[d_in, 16, d_out]``), G = 5, k = 3 on the range of the stream's inputs, eta = 2**-4.
"""
from __future__ import annotations

import argparse
import re
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

from ..cli_types import non_negative_int, positive_int, seed
from ..errors import BitforgeError
from ..outputs import FORCE_HELP
from .run import learn
from .spec import LearnerFormats, LearnerSpec, LearnerWarning, UpdateRule, nearest_lr_shift

Progress = Callable[[str], None]
TASKS = ("t1", "t2", "t4")
#: A stream's learner when --layers is not given: one KAN layer, or an MLP with one hidden layer of this width.
STREAM_MLP_HIDDEN = 16
#: A stream's learning rate when neither --lr nor --lr-shift is given: eta = 2**-4.
STREAM_LR_SHIFT = UpdateRule().lr_shift


@dataclass(frozen=True)
class LearnOptions:
    """``bitforge learn``'s options: a built-in ``task`` or a ``data`` stream ("stream.npz", "x.npy,y.npy",
    "stream.csv"); None leaves a field at the task's reference (or the stream default)."""

    task: Optional[str] = "t1"
    model: str = "kan"
    datapath: str = "fixed<16,6>"
    guard_bits: int = 8
    lr_shift: Optional[int] = None  # eta = 2**-lr_shift
    rounding: str = "nearest"
    grid_size: Optional[int] = None
    order: Optional[int] = None
    samples: Optional[int] = None  # a task's stream length (default: the benchmark's); a stream's first N samples
    seed: int = 0  # task stream and initial state
    rtl: bool = False
    simulator: str = "both"
    basis: str = "auto"
    mlp_lanes: Optional[int] = None  # MLP: None = fully parallel (II 1), N = time-multiplexed, N hidden units a round
    data: Optional[str] = None
    layers: Optional[tuple[int, ...]] = None
    grid_range: Optional[tuple[float, float]] = None
    lr: Optional[float] = None  # rounded to the nearest power of two (a note says so)
    input_type: Optional[str] = None  # default: the datapath
    hls: bool = False  # --to hls: the learner as HLS C++ in OUT/hls, its g++ C simulation checked bit for bit


def resolve(opts: LearnOptions, note: Progress = lambda m: None):
    """The learner spec and the stream (a :class:`bitforge.models.online_tasks.Task`) that ``opts`` describe."""
    from bitforge.models.online_learners import reference_spec
    from bitforge.models.online_tasks import make_task
    from bitforge.models.streams import load_stream, parse_data_argument

    if opts.model not in ("kan", "mlp"):
        raise BitforgeError(f"--model {opts.model!r} unknown; expected kan or mlp")
    if opts.lr is not None and opts.lr_shift is not None:
        raise BitforgeError("give --lr or --lr-shift, not both (eta = 2**-N)")
    lr_shift = opts.lr_shift
    if opts.lr is not None:
        lr_shift = nearest_lr_shift(opts.lr)
        if 2.0 ** -lr_shift != opts.lr:
            note(f"--lr {opts.lr:g} is not a power of two; using the nearest, 2^-{lr_shift} = {2.0 ** -lr_shift:g} "
                 "(the learner applies its learning rate as a right shift)")
    formats = LearnerFormats.make(opts.datapath, guard_bits=opts.guard_bits, input=opts.input_type)
    kan = opts.model == "kan"
    if opts.data is not None:
        if opts.task is not None:
            raise BitforgeError(f"give a task ({', '.join(TASKS)}) or --data FILE, not both")
        x_path, y_path = parse_data_argument(opts.data)
        task = load_stream(x_path, y_path, d_out=opts.layers[-1] if opts.layers else None, samples=opts.samples)
        sizes = opts.layers or ((task.d_in, task.d_out) if kan else (task.d_in, STREAM_MLP_HIDDEN, task.d_out))
        grid = opts.grid_range or task.input_range
        if kan and opts.grid_range is None:
            note(f"KAN grid on [{grid[0]:g}, {grid[1]:g}]: the range of the stream's inputs (--grid-range to change)")
        spec = LearnerSpec(opts.model, sizes, grid_range=grid, grid_size=opts.grid_size or 5,
                           order=opts.order or 3, formats=formats,
                           rule=UpdateRule(STREAM_LR_SHIFT if lr_shift is None else lr_shift, opts.rounding),
                           seed=opts.seed)
        return spec, task
    if opts.task is None or opts.task.lower() not in TASKS:
        what = "no task" if opts.task is None else f"unknown task {opts.task!r}"
        raise BitforgeError(f"{what}; bitforge learn runs {', '.join(TASKS)} or your own stream with --data FILE "
                            "(T5 CartPole is an actor-critic task: bitforge bench online --online-parts t5)")
    name = opts.task.lower()
    overrides = {k: v for k, v in (("grid_size", opts.grid_size), ("order", opts.order), ("sizes", opts.layers),
                                   ("grid_range", opts.grid_range), ("lr_shift", lr_shift)) if v is not None}
    spec = reference_spec(name, opts.model, formats=formats, rounding=opts.rounding, seed=opts.seed, **overrides)
    return spec, make_task(name, opts.seed, opts.samples)


@contextmanager
def _learner_warnings(show: Progress) -> Iterator[None]:
    """LearnerWarnings (saturated values, a dead zone) as the command's own warning lines."""
    with warnings.catch_warnings():
        original = warnings.showwarning

        def showwarning(message, category, *args, **kwargs):
            if issubclass(category, LearnerWarning):
                show(str(message))
            else:
                original(message, category, *args, **kwargs)

        warnings.simplefilter("always", LearnerWarning)
        warnings.showwarning = showwarning
        yield


def run_learn_flow(opts: LearnOptions, out: Path, target: Optional[str], printer: Callable[[str], None],
                   progress: Progress, pnr_seed: int = 1, note: Optional[Progress] = None,
                   warn: Optional[Progress] = None, force: bool = False, board: Optional[str] = None,
                   baud: Optional[int] = None) -> dict:
    """``bitforge learn`` (and ``bitforge flow learn:TASK``): golden, RTL trajectory, then ``implement`` and/or the
    board's UART device; prints the summary with ``printer``; returns ``metrics.json``'s content."""
    note = note or progress
    with _learner_warnings(warn or (lambda m: progress(f"warning: {m}"))):
        spec, task = resolve(opts, note)
        r = learn(spec, task, out, rtl=opts.rtl, target=target, simulator=opts.simulator, basis=opts.basis,
                  mlp_lanes=opts.mlp_lanes, pnr_seed=pnr_seed, progress=progress, force=force,
                  inputs=tuple(p for p in (opts.data or "").split(",") if p), board=board, baud=baud,
                  hls=opts.hls)
    m = r.metrics
    fx, fl = m["fixed"], m["float"]
    printer(f"{m['task']} {m['model']} {list(spec.sizes)}: {m['samples']:,} samples; mean MSE fixed "
            f"{fx['mean_mse']:.5f} vs float {fl['mean_mse']:.5f}; score {fx['score']:.5f} vs {fl['score']:.5f}")
    if "steady_mse" in fx:
        printer("steady MSE per regime: fixed " + _fmt(fx["steady_mse"]) + " | float " + _fmt(fl["steady_mse"]))
    if "rtl" in m:
        for s, v in m["rtl"]["golden_vs_rtl"].items():
            printer(f"golden model vs RTL ({s}): {v['samples']:,} samples, {v['mismatches']} mismatches; coefficient "
                    f"read-back: {sum(c['mismatches'] for c in v['readback'].values())} mismatches")
    if "hls" in m:
        h = m["hls"]
        printer(f"golden model vs HLS C simulation (g++): {h['vectors']:,} samples, {h['mismatches']} mismatches; "
                f"final state: {h['state_mismatches']} of {h['state_codes']} codes differ; "
                f"{h['csim_samples_per_s']:,} samples/s (golden {h['golden_samples_per_s']:,})")
    if r.target is not None:
        t = r.target
        printer(f"{target}: {t.get('lut')} LUT, {t.get('ff')} FF, {t.get('dsp')} DSP, {t.get('bram')} BRAM, "
                f"Fmax {t.get('fmax_mhz')} MHz, latency {t.get('latency_cycles')} cycles = {t.get('latency_ns')} ns, "
                f"II {t.get('ii')}")
    if r.board is not None:
        b, res = r.board, r.board.get("resources") or {}
        printer(f"{b['board']} ({b['target']}): the learner's UART device: {res.get('lut')} LUT, {res.get('ff')} FF, "
                f"{res.get('dsp')} DSP, {res.get('bram')} BRAM, Fmax {b.get('fmax_mhz')} MHz at a "
                f"{b['core_clock_hz'] / 1e6:g} MHz core clock, {b['baud']:g} baud; bitstream {b['bitstream']}")
    hls_part = ", hls/" if "hls" in m else ""
    printer(f"wrote {out}/ (metrics.json, learn.png, report.md{hls_part}; predict with: bitforge emulate {out} "
            "--input X.npy -o Y.npy" + ("; deploy with: bitforge deploy "
                                        + (f"{out} --board {board}" if board else str(out)) + " -o learner.bfb"
                                        if "rtl" in m else "") + ")")
    return m


def _fmt(v) -> str:
    return " / ".join(f"{x:.5f}" for x in v) if isinstance(v, list) else f"{v:.5f}"


# -- command line ------------------------------------------------------------------------------------

def _layers(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected layer widths D_IN,...,D_OUT (integers), got {text!r}") from None
    if len(sizes) < 2 or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"expected at least two widths >= 1 (D_IN,...,D_OUT), got {text!r}")
    return sizes


def _grid_range(text: str) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LO,HI (two numbers), got {text!r}") from None
    if not lo < hi:
        raise argparse.ArgumentTypeError(f"expected LO < HI, got {text!r}")
    return lo, hi


def _learning_rate(text: str) -> float:
    m = re.fullmatch(r"\s*2\s*(?:\^|\*\*)\s*(-?\d+)\s*", text)
    try:
        return 2.0 ** int(m.group(1)) if m else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a learning rate such as 0.0625 or 2^-4, got {text!r}") from None


def options_from_args(args) -> LearnOptions:
    return LearnOptions(task=args.task, model=args.model, datapath=args.datapath, guard_bits=args.guard_bits,
                        lr_shift=args.lr_shift, rounding=args.rounding, grid_size=args.grid_size, order=args.order,
                        samples=args.samples, seed=args.seed,
                        rtl=args.rtl or bool(args.target) or bool(args.board),
                        simulator=args.simulator, basis=args.basis, mlp_lanes=args.mlp_lanes, data=args.data,
                        layers=args.layers, grid_range=args.grid_range, lr=args.lr, input_type=args.input_type,
                        hls="hls" in (args.to or ()))


def add_commands(sub, fmt) -> None:
    from ..console import examples

    p = sub.add_parser(
        "learn", formatter_class=fmt, help="run an online learner on a task or your own stream (golden, RTL, hardware)",
        description="Run an online learner prequentially (predict, then update on the same sample) on a benchmark "
                    "task (t1, t2, t4) or on your own stream (--data: inputs X and targets Y, float, one row per "
                    "sample in time order) in the bit-exact golden model, next to the float reference on the same "
                    "stream; --rtl also generates the II-1 learner core and replays the whole trajectory on "
                    "Icarus/Verilator (every prediction and the coefficient memory bit for bit); --target then "
                    "implements it (yosys + nextpnr); --to hls writes it as HLS C++ and checks the g++ C simulation "
                    "the same way. The learning rate is a right shift: only powers of two "
                    "exist (eta = 2^-N); --lr rounds any other value to the nearest one and says so. OUT/final is "
                    "the learned model: bitforge emulate OUT --input X.npy predicts with it from float inputs.",
        epilog=examples("""
            bitforge learn t1 -o out/t1                        # KAN [1,1], G=5, k=3, <16,6>
            bitforge learn t1 --datapath 'fixed<8,4>' --rounding stochastic -o out/t1-8
            bitforge learn t1 --target ecp5-85f -o out/t1-hw   # golden + RTL + place and route
            bitforge learn t1 --order 2 --datapath 'fixed<12,4>' --board icebreaker -o out/t1-ib  # UART device
            bitforge deploy out/t1-ib --board icebreaker -o t1.bfb   # then: bitforge run t1.bfb --targets ...
            bitforge learn t4 --model mlp -o out/t4-mlp
            bitforge learn t1 --to hls -o out/t1-hls          # + HLS C++ (OUT/hls), g++ C-sim bit-exact
            python -c "import numpy as np; x = np.random.uniform(-1, 1, (2000, 4)); \\
                np.savez('stream.npz', X=x, Y=np.sin(3 * x[:, :1]) * x[:, 1:2])"
            bitforge learn --data stream.npz --layers 4,4,1 --lr 0.1 -o out/mine
            bitforge learn --data x.npy,y.npy --model mlp --layers 4,16,1 -o out/mine-mlp
            bitforge learn --data stream.csv --grid-range=-2,2 --target ecp5-25f -o out/mine-hw
            bitforge emulate out/mine --input x_new.npy -o y.npy   # predict with the learned state
        """))
    p.add_argument("task", nargs="?", choices=TASKS, default=None, metavar="TASK",
                   help=f"a benchmark task: {', '.join(TASKS)} (or --data)")
    p.add_argument("--data", metavar="FILE", default=None,
                   help="your own stream: FILE.npz with arrays X (n, d_in) and Y (n, d_out), a pair X.npy,Y.npy, or "
                        "FILE.csv (the inputs, then the last d_out columns the targets; a header row is skipped)")
    p.add_argument("--layers", type=_layers, default=None, metavar="D_IN,...,D_OUT",
                   help="layer widths, e.g. 4,4,1 (default: the task's reference; a stream's [d_in, d_out], an "
                        f"MLP's [d_in, {STREAM_MLP_HIDDEN}, d_out])")
    p.add_argument("--model", default="kan", choices=["kan", "mlp"])
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="output folder (replaced atomically)")
    p.add_argument("--force", action="store_true", help=FORCE_HELP)
    p.add_argument("--datapath", default="fixed<16,6>", metavar="TYPE", help="datapath type (default fixed<16,6>)")
    p.add_argument("--input-type", default=None, metavar="TYPE", help="type of the inputs (default: the datapath)")
    p.add_argument("--guard-bits", type=non_negative_int, default=8, help="extra fractional bits of coefficient storage (default 8)")
    lr = p.add_mutually_exclusive_group()
    lr.add_argument("--lr", type=_learning_rate, default=None, metavar="ETA",
                    help="learning rate; a right shift on chip, so only powers of two exist: any other value is "
                         "rounded to the nearest (0.1 -> 2^-3 = 0.125) with a note (default: the task's reference, "
                         f"a stream's 2^-{STREAM_LR_SHIFT})")
    lr.add_argument("--lr-shift", type=non_negative_int, default=None, metavar="N", help="learning rate eta = 2^-N")
    p.add_argument("--rounding", default="nearest", choices=["nearest", "stochastic"], help="update rounding")
    p.add_argument("--grid-range", type=_grid_range, default=None, metavar="LO,HI",
                   help="KAN grid, e.g. --grid-range=-2,2 (default: the task's reference; a stream's input range)")
    p.add_argument("--grid-size", type=positive_int, default=None, help="KAN grid size G (default: the reference, or 5)")
    p.add_argument("--order", type=positive_int, default=None, help="KAN spline order k (default 3)")
    p.add_argument("--samples", type=positive_int, default=None,
                   help="stream length (a task's default: the benchmark's; --data: the first N samples)")
    p.add_argument("--seed", type=seed, default=0, help="initial state seed, and a task's stream (default 0)")
    p.add_argument("--rtl", action="store_true", help="generate the learner core and simulate the trajectory")
    p.add_argument("--to", action="append", choices=["hls"], default=None, metavar="hls",
                   help="also write the learner as HLS C++ (OUT/hls: firmware, testbench, build_csim.sh, "
                        "build_vitis.tcl) and check its g++ C simulation over the whole trajectory against the "
                        "golden model (needs g++ and hls4ml's ap_types headers)")
    p.add_argument("--simulator", default="both", choices=["icarus", "verilator", "both"])
    p.add_argument("--basis", default="auto", choices=["auto", "rom", "circuit"],
                   help="KAN bases from a ROM of the golden table or the closed-form circuit (default auto)")
    p.add_argument("--mlp-lanes", type=positive_int, default=None, metavar="N",
                   help="MLP: time-multiplexed, N >= 1 hidden units per round (default: fully parallel, or with "
                        "--target the most that fit its DSP blocks when the fully parallel form does not)")
    p.add_argument("--target", default=None, metavar="T", help="also implement on T (implies --rtl): ice40-up5k, "
                   "ecp5-25f, ecp5-85f, gowin-gw1nr9, xc7a35t, xcvu9p")
    p.add_argument("--pnr-seed", type=seed, default=1, help="place-and-route seed (default 1)")
    p.add_argument("--board", metavar="B", default=None, help="also build the learner's UART device for a board "
                   "(implies --rtl): icebreaker, ulx3s or tangnano9k; the bitstream lands in OUT/impl/B/ and "
                   "'bitforge deploy OUT --board B' bundles it (see docs/boards.md)")
    p.add_argument("--baud", type=positive_int, default=None, metavar="N",
                   help="with --board: the UART's baud rate (default 115200)")

    def cmd(args: argparse.Namespace) -> int:
        from ..console import note, progress, result, warn

        if (args.task is None) == (args.data is None):
            raise BitforgeError("bitforge learn needs a task (t1, t2, t4) or --data FILE, not "
                                + ("both" if args.task else "neither") + "; see bitforge learn --help")
        if args.baud is not None and args.board is None:
            raise BitforgeError("--baud sets the UART of a board build; add --board B (or drop --baud)")
        run_learn_flow(options_from_args(args), args.output, args.target, result, progress, args.pnr_seed,
                       note=note, warn=warn, force=args.force, board=args.board, baud=args.baud)
        return 0

    p.set_defaults(func=cmd)


__all__ = ["LearnOptions", "TASKS", "resolve", "run_learn_flow", "add_commands", "options_from_args"]

