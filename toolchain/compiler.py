"""``bitforge compile``: model in, verified artefacts out.

Stages: load (frontend) -> fold BatchNorms -> quantize (when a precision spec is given) -> infer precision -> validate ->
backends -> verify against the golden model -> write. Everything is written into a temporary folder
beside OUT and renamed into place only when every stage, verification included, has passed, so a
failed or interrupted run never leaves a half-written OUT (:mod:`.outputs`; ``flow`` does the same for
the whole flow).
"""
from __future__ import annotations

import dataclasses
import json
import os
import platform
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional, Union

import numpy as np

from . import ir
from .errors import BitforgeError, VerificationFailed, is_user_error
from .ir import Graph
from .outputs import check_output

BACKENDS = ("onnx", "rtl", "hls")


class CompileError(BitforgeError):
    """A model, option or output path that cannot be compiled as asked."""


@dataclass(frozen=True)
class CompileOptions:
    """What ``bitforge compile`` does; every field is a CLI flag."""

    to: tuple[str, ...] = ("onnx",)
    precision: Optional[str] = None
    vectors: int = 10_000
    seed: int = 0
    input_range: Optional[tuple[float, float]] = None
    reuse: Union[int, str] = 1
    target: Optional[str] = None
    #: "rom" (parameters in the bitstream) or "ram" (loadable at run time through the core's write port).
    weights: str = "rom"
    #: A .npy batch of real inputs: calibrates --precision's activation ranges and gets its own fidelity rows.
    calibration: Optional[str] = None
    #: Write every tensor of both models for the first ``trace`` fidelity vectors to OUT/trace.npz (0: none).
    trace: int = 0
    #: "keep", or "argmax": a Softmax at the model's output becomes the ArgMax of its logits (passes/heads.py).
    softmax: str = "keep"
    #: Width of the integer multipliers that stand for non-power-of-two quantizer scales (docs/quantized-models.md).
    multiplier_bits: int = 24
    #: Refuse what the ONNX frontend cannot translate exactly (non-power-of-two scales, inexact float biases, ...).
    strict: bool = False
    #: --to hls: hls4ml's backend, I/O type and strategy (``backends.hls.convert.HlsOptions``); None: the defaults.
    hls: Optional[object] = None
    #: An hls4ml HLSConfig file (.yml/.json): its types become the IR's (passes/hls_config.py).
    hls_config: Optional[str] = None

    def __post_init__(self) -> None:
        if self.input_range is not None and not (len(self.input_range) == 2 and
                                                 self.input_range[0] < self.input_range[1]):
            raise CompileError(f"--input-range must be LO,HI with LO < HI, got {self.input_range}")
        unknown = [b for b in self.to if b not in BACKENDS]
        if unknown:
            raise CompileError(f"unknown backend(s) {', '.join(unknown)}; available: {', '.join(BACKENDS)}")
        if self.vectors < 1:
            raise CompileError(f"--vectors must be at least 1, got {self.vectors}")
        if not 0 <= self.seed < 2**32:
            raise CompileError(f"--seed must be from 0 to 2**32-1, got {self.seed}")
        if self.weights not in ("rom", "ram"):
            raise CompileError(f"--weights must be rom or ram, got {self.weights!r}")
        if self.softmax not in ("keep", "argmax"):
            raise CompileError(f"--softmax must be keep or argmax, got {self.softmax!r}")
        if self.trace < 0:
            raise CompileError(f"--trace must be 0 or more vectors, got {self.trace}")
        from .multiplier import MAX_BITS, MIN_BITS
        if not MIN_BITS <= self.multiplier_bits <= MAX_BITS:
            raise CompileError(f"--multiplier-bits must be {MIN_BITS} to {MAX_BITS}, got {self.multiplier_bits}")
        if self.hls is not None and "hls" not in self.to:
            raise CompileError("--backend, --io and --strategy only apply to the HLS backend; add --to hls")
        if self.hls_config is not None and self.precision is not None:
            raise CompileError("--hls-config and --precision both set the model's types; give one of them")
        if self.hls_config is not None and self.reuse != 1:
            raise CompileError("--hls-config sets the reuse factors (Model.ReuseFactor, LayerName.<layer>.ReuseFactor);"
                               " drop --reuse")
        # RTL-only options are refused without the RTL backend rather than silently ignored (--reuse N also
        # serves the HLS backend: hls4ml's ReuseFactor).
        if "rtl" not in self.to and (self.target is not None or (self.reuse != 1 and "hls" not in self.to)
                                     or self.weights != "rom"):
            given = [f for f, v in (("--target", self.target), ("--reuse", self.reuse != 1),
                                    ("--weights", self.weights != "rom")) if v]
            raise CompileError(f"{' and '.join(given)} only appl{'y' if len(given) > 1 else 'ies'} to the RTL "
                               f"backend; add --to rtl (or drop {' and '.join(given)})")
        if self.target is not None:
            from .flows.targets import get_target
            get_target(self.target)  # an unknown name fails here, before the model is loaded
        elif self.reuse == "auto":
            raise CompileError("--reuse auto chooses each layer's reuse to fit a device: add --target T "
                               "(e.g. --target ecp5-85f)")


@dataclass(frozen=True)
class FrontendWarning:
    """An approximation a frontend made (a rounded bias, a table), listed with the precision warnings."""

    message: str


@dataclass
class LoadedModel:
    """A frontend's result: the graph, where it came from, and calibration data when the source has some.
    ``reference``: a :class:`.verify.fidelity.Reference` the fidelity report measures against instead of the
    graph's own float form (an approximated quantized export: the source run by onnxruntime)."""

    graph: Graph
    source: dict
    calibration: Optional[np.ndarray] = None
    reference: Optional[object] = None


def _looks_like_path(model: str) -> bool:
    return os.sep in model or model.endswith((".onnx", ".pt2", ".json")) or Path(model).exists()


def load_model(model: str, seed: int = 0, strict: bool = False, multiplier_bits: int = 24) -> LoadedModel:
    """Resolve MODEL: an ``.onnx`` file, a ``torch.export`` archive (``.pt2``), a bitforge output folder, or a recipe.
    ``strict`` and ``multiplier_bits`` go to the ONNX frontend (:class:`.frontends.onnx_scales.QuantOptions`)."""
    p = Path(model)
    if _looks_like_path(model):
        if not p.exists():
            raise CompileError(f"{model}: no such file or folder; MODEL is an .onnx file, a .pt2 archive "
                               "(torch.export.save), a bitforge output folder, or a recipe name (see 'bitforge inspect')")
        if p.is_dir():
            return LoadedModel(ir.load(p), {"kind": "bitforge-ir", "path": str(p)})
        if p.suffix == ".onnx":
            from .frontends.onnx_frontend import QuantOptions, load_onnx
            g = load_onnx(p, QuantOptions(strict=strict, multiplier_bits=multiplier_bits))
            reference = None
            if g.metadata.get("approximate"):  # measured against the source itself, not its approximation
                from .verify.source_reference import onnx_reference
                reference = onnx_reference(p)
            return LoadedModel(g, {"kind": "onnx", "path": str(p)}, reference=reference)
        if p.suffix == ".pt2":
            from .frontends.torch_frontend import load_pt2
            return LoadedModel(load_pt2(p), {"kind": "torch.export", "path": str(p)})
        raise CompileError(f"{model}: unknown model format '{p.suffix}'; expected .onnx or .pt2")
    from bitforge.models.recipes import get_recipe

    from .frontends.torch_frontend import from_torch

    recipe = get_recipe(model)
    module = recipe.build(seed=seed)
    g = from_torch(module, recipe.example_input(4, seed), name=recipe.name)
    g.metadata["input_range"] = [float(v) for v in recipe.input_range]
    return LoadedModel(g, {"kind": "recipe", "name": recipe.name, "seed": seed},
                       calibration=recipe.calibration_data(2048, seed))


def prepare(loaded: LoadedModel, precision: Optional[str], input_range: Optional[tuple[float, float]] = None, *,
            keep_batchnorms: frozenset[str] = frozenset()) -> tuple[Graph, list]:
    """Fold BatchNorms, quantize (float models with a spec), infer accumulator types, validate; returns graph and
    warnings. ``keep_batchnorms`` names ScaleShifts not to fold (``fold_batchnorm``'s ``keep``: under an hls4ml
    config, the BatchNorms hls4ml keeps as layers, ``HlsConfig.kept_batchnorms``)."""
    from .passes.precision import check_precision, infer_precision

    from .passes.batchnorm import fold_batchnorm

    # before quantization: the folded weights are what gets quantized
    g = fold_batchnorm(loaded.graph, keep=keep_batchnorms)
    if input_range is not None:
        g = g.copy()
        g.metadata["input_range"] = [float(v) for v in input_range]
    if precision is not None:
        if loaded.calibration is None and "input_range" not in g.metadata and not g.is_fixed:
            raise CompileError(f"{loaded.source.get('path', g.name)}: --precision needs to know the range of the "
                               "model's inputs to choose activation types; pass --input-range LO,HI "
                               "(e.g. --input-range=-4,4)")
        from .passes.dequantize import dequantize_graph
        from .passes.quantize import quantize_graph
        if any(not t.is_float for t in g.tensors.values()):
            g = dequantize_graph(g)  # re-target a quantized model through the float graph it stands for
        g = quantize_graph(g, precision, loaded.calibration)
    g = infer_precision(g)
    ir.validate(g)
    return g, check_precision(g)


def model_inputs(model: str) -> tuple[str, ...]:
    """The files MODEL reads (none for a recipe): an output folder may not be or hold one of them."""
    return (model,) if _looks_like_path(model) else ()


#: RTL simulation cycles ``flow`` spends per simulator by default: a folded design takes II cycles a vector, so it
#: gets fewer vectors and about the simulation time of an unfolded one (cocotb drives every cycle from Python).
SIM_CYCLE_BUDGET = 32_000


def default_sim_vectors(ii: int) -> int:
    """2,000 vectors, fewer for a folded design (each takes II cycles), never under 250 (edge cases come first)."""
    return max(250, min(2000, SIM_CYCLE_BUDGET // max(ii, 1)))


@dataclass
class FlowResult:
    """What ``flow`` did: the compile report, each simulator's result, and the target's implementation row."""

    report: dict
    simulations: dict = field(default_factory=dict)
    target: dict = field(default_factory=dict)
    board: dict = field(default_factory=dict)  # report.json boards.<board>, with --board


def run_flow(model: str, out: Path, opts: CompileOptions, simulator: str, sim_vectors: Optional[int], pnr_seed: int,
             progress: Callable[[str], None] = lambda msg: None,
             on_compiled: Callable[[dict], None] = lambda report: None, force: bool = False,
             board: Optional[str] = None, baud: Optional[int] = None) -> FlowResult:
    """compile (ONNX + RTL) -> simulate and implement, all in one temporary folder that replaces OUT at the end.

    With ``board``, implementation goes on to the device top on that board (``flows.board_flow``: its pins,
    clock and ``baud``), after ``opts.target``, which must be the board's part.

    Simulation and implementation both read only the compiled folder, so they run at once: the simulators and
    yosys/nextpnr are separate processes, one core each on a two-core machine, which takes the slower of the
    two off the wall time. A simulation failure is raised after implementation has finished (its numbers are
    in report.json either way). ``on_compiled`` sees the compile report before the long stages start.

    What OUT holds afterwards: everything, when all passed; the compiled, verified design and the failure
    record in report.json, when a stage stopped on bad input or a tool's failure (the error is raised after
    OUT is in place); the previous OUT, when a check disagreed with the golden model (the artefacts go to
    ``OUT.failed``) or the run was interrupted."""
    from .outputs import relocate
    from .processes import worker_thread
    from .verify.simulate import simulate

    t0 = time.perf_counter()
    if board is not None:  # a wrong board, part or baud rate fails before the model is loaded
        from .flows.boards import check_board_target, get_board
        from .flows.clocking import DEFAULT_BAUD, uart_timing
        check_board_target(board, opts.target)
        baud = DEFAULT_BAUD if baud is None else baud
        uart_timing(get_board(board).clock_hz, baud)
    inputs = model_inputs(model) + ((opts.calibration,) if opts.calibration else ())
    real = check_output(out, force=force, inputs=inputs)  # before Path(): Path('') is '.'
    out = Path(out)
    loaded, g, warnings = _load(model, opts, progress)
    with _staged(out, "flow", force, inputs) as tmp:
        report = _compile_into(tmp, loaded, g, warnings, opts, t0, progress)
        on_compiled(report)
        if sim_vectors is None:
            sim_vectors = default_sim_vectors(int(report.get("rtl", {}).get("ii", 1)))
        result = FlowResult(report)
        sim_error = impl_error = None
        with worker_thread("implement") as pool:
            implementing = pool.submit(_implement, tmp, opts.target, board, baud, pnr_seed, progress)
            if simulator != "none":
                try:
                    result.simulations = simulate(tmp, simulator, sim_vectors, opts.seed, progress=progress)
                except Exception as exc:  # noqa: BLE001 - raised once the implementation thread is done
                    sim_error = exc
            try:
                result.target, result.board = implementing.result()
            except BitforgeError as exc:  # does not fit, a tool failed: recorded in report.json
                impl_error = exc
        if simulator != "none" and sim_error is None and impl_error is None:  # the synthesised netlist, gate level
            from .verify.netlist import flow_check
            try:
                result.simulations.update(flow_check(tmp, opts.target, sim_vectors, opts.seed, progress=progress))
            except Exception as exc:  # noqa: BLE001 - raised below, as a failed RTL check is
                sim_error = exc
        for error in (sim_error, impl_error):
            if error is not None and (isinstance(error, VerificationFailed) or not is_user_error(error)):
                raise error
        for r in result.simulations.values():
            if isinstance(r.get("log"), str):
                r["log"] = r["log"].replace(str(tmp), str(real))
    stopped = sim_error or impl_error
    if stopped is not None:
        raise relocate(stopped, tmp, real)
    return result


def _implement(out: Path, target: str, board: Optional[str], baud: Optional[int], seed: int,
               progress: Callable[[str], None]) -> tuple[dict, dict]:
    """The target's implementation, then (with ``board``) the device top on the board."""
    from .flows.implement import implement

    entry = implement(out, target, seed=seed, progress=progress)
    if board is None:
        return entry, {}
    from .flows.board_flow import implement_board
    return entry, implement_board(out, board, baud=baud, seed=seed, progress=progress)


def _versions() -> dict:
    from importlib.metadata import version

    import onnx
    import onnxruntime
    return {"bitforge": version("bitforge"), "python": platform.python_version(), "numpy": np.__version__,
            "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__}


def compile_model(model: str, out: Path, options: CompileOptions = CompileOptions(),
                  progress: Callable[[str], None] = lambda msg: None, force: bool = False) -> dict:
    """Run the whole compile; returns the report (also written to ``OUT/report.json``).

    OUT is checked before the model is loaded (:func:`.outputs.check_output`; ``force`` replaces a folder
    bitforge did not write) and replaced only when every stage has passed."""
    t0 = time.perf_counter()
    inputs = model_inputs(model) + ((options.calibration,) if options.calibration else ())
    check_output(out, force=force, inputs=inputs)  # before Path(): Path('') is '.'
    out = Path(out)
    loaded, g, warnings = _load(model, options, progress)
    with _staged(out, "compile", force, inputs) as tmp:
        report = _compile_into(tmp, loaded, g, warnings, options, t0, progress)
    return report


def _load(model: str, options: CompileOptions, progress: Callable[[str], None]) -> tuple[LoadedModel, Graph, list]:
    if options.precision is not None:  # a bad spec fails before any model is loaded or trained
        from .passes.quantize import parse_precision
        parse_precision(options.precision)
    hls_config = None
    if options.hls_config is not None:  # so does a bad HLSConfig (its layer names are checked once loaded)
        from .passes.hls_config import read_hls_config
        hls_config = read_hls_config(options.hls_config)
    calibration = None
    if options.calibration is not None:  # an unreadable file fails before the model is loaded or trained
        from .verify.fidelity import read_calibration_file
        calibration = read_calibration_file(options.calibration)
    progress(f"loading {model}")
    loaded = load_model(model, options.seed, options.strict, options.multiplier_bits)
    if calibration is not None:  # the user's data replaces a recipe's own for --precision's activation ranges
        from .verify.fidelity import fit_calibration
        loaded.calibration = fit_calibration(calibration, options.calibration, loaded.graph)
    if options.softmax == "argmax":  # in the float reference too: the fidelity report compares decisions
        from .passes.heads import argmax_head
        loaded.graph = argmax_head(loaded.graph)
    precision, quantized_from, kept = options.precision, loaded, frozenset()
    if hls_config is not None:  # the HLSConfig's types, as a --precision spec over the graph's own node names
        from .passes.batchnorm import fold_batchnorm
        # folded where hls4ml fuses a BatchNorm (after an 'auto' result) and nowhere else
        kept = hls_config.kept_batchnorms(loaded.graph)
        folded = fold_batchnorm(loaded.graph, keep=kept)
        precision = hls_config.precision_spec(folded)
        # hls4ml writes weights as decimal text with as many digits as their type has fractional bits: the codes
        # its firmware holds are those of the rounded decimals (the float reference keeps the model's own weights).
        quantized_from = dataclasses.replace(loaded, graph=hls_config.as_hls4ml_writes(folded))
    progress("quantizing and inferring precision" if precision else "inferring precision")
    g, warnings = prepare(quantized_from, precision, options.input_range, keep_batchnorms=kept)
    if "hls" in options.to:  # a layer or setting hls4ml cannot express fails before any backend runs
        from .backends.hls.convert import to_layer_list
        to_layer_list(g, hls_options(options, g))
    warnings = [FrontendWarning(m) for m in loaded.graph.metadata.get("frontend_warnings", [])] + warnings
    if not g.is_fixed and (options.calibration is not None or options.trace):
        given = " and ".join(f for f, v in (("--calibration", options.calibration is not None),
                                            ("--trace", options.trace)) if v)
        raise CompileError(f"{given}: the compiled model is float, so there is no fixed-point model to compare with "
                           f"the float one; add --precision (or drop {given})")
    return loaded, g, warnings


@contextmanager
def _staged(out: Path, kind: str, force: bool, inputs: tuple[str, ...]) -> Iterator[Path]:
    """:func:`.outputs.output_folder`, plus: a disagreement with the golden model moves the folder to
    ``OUT.failed`` (the artefacts of a bug report) and says so in the error."""
    from .outputs import keep_failed, output_folder, relocate

    with output_folder(out, kind=kind, force=force, inputs=inputs) as tmp:
        try:
            yield tmp
        except VerificationFailed as exc:
            failed = keep_failed(tmp, out)
            relocate(exc, tmp, failed)
            exc.args = (f"{exc.args[0] if exc.args else exc} The artefacts are in {failed} for a bug report.",
                        *exc.args[1:])
            raise


def _compile_into(tmp: Path, loaded: LoadedModel, g: Graph, warnings: list, options: CompileOptions, t0: float,
                  progress: Callable[[str], None]) -> dict:
    """The backends and the ONNX check, writing into ``tmp``; returns the report."""
    from .backends.onnx_backend import run_onnxruntime, to_onnx
    from .verify.compare import compare_outputs
    from .verify.vectors import make_vectors

    ir.save(g, tmp)
    report: dict = {
        "model": loaded.source,
        "options": {"to": list(options.to), "precision": options.precision, "vectors": options.vectors,
                    "seed": options.seed, "multiplier_bits": options.multiplier_bits, "strict": options.strict,
                    "input_range": list(options.input_range) if options.input_range else None,
                    "calibration": options.calibration, "trace": options.trace},
        "graph": {"name": g.name, "nodes": len(g.nodes), "parameters": g.parameter_count(),
                  "fixed_point": g.is_fixed,
                  "layers": [dict(zip(("node", "op", "shape", "type", "parameters"), r)) for r in g.summary_rows()]},
        "precision": {"warnings": [w.message for w in warnings]},
        "verification": {},
    }
    if "onnx" in options.to:
        progress("exporting ONNX")
        model_proto = to_onnx(g)
        (tmp / "model.onnx").write_bytes(model_proto.SerializeToString())
        progress(f"verifying golden model vs ONNX Runtime on {options.vectors:,} vectors")
        vectors = make_vectors(g, options.vectors, options.seed)
        result = compare_outputs(g, vectors, run_onnxruntime(model_proto, vectors), "onnxruntime")
        report["verification"]["golden_vs_onnxruntime"] = result.to_json()
        if result.mismatches:
            _write_report(tmp, report, t0)
            raise VerificationFailed(
                f"golden model and ONNX Runtime disagree on {result.mismatches} of {result.vectors} vectors; "
                f"first: {json.dumps(result.first_mismatch)}. This is a bitforge bug.")
    from .verify.fidelity import write_fidelity
    if g.is_fixed:
        progress("measuring fidelity: the fixed-point model against the float model")
    report["fidelity"] = write_fidelity(tmp, loaded.graph, g, options.vectors, options.seed,
                                        loaded.calibration if options.calibration else None, options.trace,
                                        reference=loaded.reference)
    if loaded.source.get("kind") == "recipe":  # the recipe's own metric on its held-out data: float vs compiled
        from bitforge.models.recipes import get_recipe

        from .verify.fidelity import reference_for
        report["task_scores"] = get_recipe(loaded.source["name"]).scores(reference_for(loaded.graph).graph, g)
    if "rtl" in options.to:
        progress("generating Verilog")
        report["rtl"] = write_rtl(g, tmp, options, progress)
    timing = {}
    if "hls" in options.to:
        from .verify.hls_csim import check_result, write_and_check_hls
        report["hls"], timing["hls"] = write_and_check_hls(g, tmp, hls_options(options, g), options.vectors,
                                                           options.seed, progress)
        report["verification"]["golden_vs_hls_csim"] = report["hls"].pop("golden_vs_hls_csim")
        _write_report(tmp, report, t0, timing)
        check_result(report["verification"])
        return report
    _write_report(tmp, report, t0, timing)
    return report


def hls_options(options: CompileOptions, g: Graph):
    """The HLS backend's options: --backend/--io/--strategy/--reuse, then the HLSConfig's per-layer choices."""
    from .backends.hls.convert import HlsOptions

    base = options.hls if options.hls is not None else HlsOptions()
    reuse = options.reuse if isinstance(options.reuse, int) else base.reuse
    if options.hls_config is None:
        return HlsOptions(**{**base.__dict__, "reuse": reuse})
    from .passes.hls_config import read_hls_config
    cfg = read_hls_config(options.hls_config)
    fields = {**base.__dict__, "reuse": reuse, "layer_reuse": cfg.layer_reuse(g), "layer_strategy": cfg.layer_strategy(g)}
    for key in ("backend", "io_type", "part", "clock_period"):
        value = getattr(cfg, key)
        if value is not None:
            fields["io" if key == "io_type" else key] = value
    return HlsOptions(**fields)


def write_rtl(g: Graph, folder: Path, options: CompileOptions,
              progress: Callable[[str], None] = lambda msg: None) -> dict:
    """Generate the design into ``folder/rtl`` (generated files, the library modules it uses, manifest.json);
    ``progress`` hears of each layer as it is built."""
    from .backends.rtl.generate import RtlOptions, generate, hardware_chain, library_source

    reuse_map, explanation = None, None
    if options.reuse == "auto":
        from .backends.rtl.reuse import choose_reuse
        from .flows.targets import get_target

        chain = hardware_chain(g)
        # A chain without weights (pooling, tables) has no multiplier to size: its weight width is moot.
        bits = max(g.tensors[n.inputs[0]].dtype.width for n in chain), max(
            (t.width for n in chain for t in (getattr(n, "weight_type", None), getattr(n, "u_type", None),
                                               getattr(n, "coeff_type", None)) if t is not None), default=1)
        choice = choose_reuse(g, chain, get_target(options.target).multiplier_budget(), bits)
        reuse_map, explanation = choice.reuse, choice.explanation
    design = generate(g, RtlOptions(reuse=reuse_map if reuse_map is not None else options.reuse,
                                    target=options.target, weights=options.weights), progress)
    rtl = folder / "rtl"
    rtl.mkdir()
    for name, text in sorted(design.files.items()):
        (rtl / name).write_text(text)
    for name in design.library:
        (rtl / name).write_text(library_source(name))
    manifest = design.manifest()
    if explanation:
        manifest["reuse_auto"] = explanation
    from .backends.rtl.device import device_for_model, write_device
    # The device top (UART + protocol engine around the board top) for boards and the simulated board.
    manifest["device"] = write_device(rtl, device_for_model(g, manifest))
    (rtl / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    weights = manifest["weights"]
    return {k: manifest[k] for k in ("core_top", "board_top", "latency_cycles", "ii", "layers", "bus_width")} | (
        {"reuse_auto": explanation} if explanation else {}) | (
        {"weights": {k: weights[k] for k in ("mode", "word_bits", "addr_bits", "words", "arch_id")}}
        if weights["mode"] == "ram" else {})


def _write_report(folder: Path, report: dict, t0: float, timing: Optional[dict] = None) -> None:
    """``report.json`` is reproducible (same inputs and seed: same bytes); wall times go to ``run.json``."""
    from .report import md as report_md

    report["tools"] = _versions()
    (folder / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    report_md.write(folder)
    run = {"seconds": round(time.perf_counter() - t0, 3), "host": platform.node(),
           "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")} | ({"stages": timing} if timing else {})
    (folder / "run.json").write_text(json.dumps(run, indent=2) + "\n")
