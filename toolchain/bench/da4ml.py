"""da4ml as the baseline of ``bitforge bench rtl``: the same IR, traced through da4ml, emitted as da4ml's Verilog.

da4ml (distributed arithmetic for ML, PyPI, the optional ``bench`` extra) optimises each constant matrix-vector
product into a shared adder graph and emits a fully pipelined design. This module is the only one that imports
it. It feeds da4ml exactly the integer weights, biases and fixed-point types of the bitforge IR, so both
generators build the same function; :func:`check_equivalence` runs da4ml's own interpreter against
:mod:`bitforge.toolchain.emulate` to show it.

da4ml rounds only TRN and RND and saturates WRAP/SAT/SAT_SYM; bitforge's RND_CONV and RND_MIN_INF are built
here from da4ml's exact primitives (a constant add and one extracted bit, then truncation). The design is
written as a bitforge output folder (the IR, ``rtl/`` with ``manifest.json``), behind the same AXI4-Stream core
interface and board top as bitforge's own, so ``implement`` and ``simulate`` take it unchanged.
"""
from __future__ import annotations

import json
import math
import re
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np

from .. import emulate, fixed, ir
from ..errors import BitforgeError
from ..fixed import FixedType, Overflow, Rounding

#: The da4ml release this module is written against (the ``bench`` extra pins it).
DA4ML_VERSION = "0.6.0"
#: da4ml's Getting Started example pipelines with ``latency_cutoff=5`` (its adder-delay units per stage).
DEFAULT_LATENCY_CUTOFF = 5.0
#: Modules of bitforge's ``rtl/`` library the wrapper and board top instantiate.
LIBRARY = ("bf_deserialize.v", "bf_fifo.v", "bf_serialize.v")
_TIMESCALE = re.compile(r"^`timescale[^\n]*\n", re.MULTILINE)


class Da4mlError(BitforgeError):
    """da4ml is missing, or the graph has something da4ml cannot express exactly (the message names the node)."""


@dataclass(frozen=True)
class Da4mlOptions:
    """How da4ml builds the design; recorded in the benchmark's JSON."""

    latency_cutoff: float = DEFAULT_LATENCY_CUTOFF
    bus_width: int = 8

    def __post_init__(self) -> None:
        if not self.latency_cutoff > 0:
            raise Da4mlError(f"latency_cutoff must be positive (da4ml adder delays per stage), got {self.latency_cutoff}")


@dataclass(frozen=True)
class ElementMap:
    """Where one element's bits sit on two buses: ``shift`` places up in the destination (see the template)."""

    src_lo: int
    src_w: int
    signed: bool
    dst_lo: int
    dst_w: int
    shift: int


@dataclass
class Equivalence:
    """da4ml's interpreter against the golden model on the same vectors."""

    vectors: int
    mismatches: int
    first_mismatch: Optional[dict] = None

    @property
    def equivalent(self) -> bool:
        return self.mismatches == 0


@dataclass
class Da4mlDesign:
    """The generated files and what is known by construction (latency from da4ml's pipeline, II 1)."""

    name: str
    core_top: str
    board_top: str
    files: dict[str, str]
    latency_cycles: int
    pipeline_stages: int
    estimate: dict = field(default_factory=dict)  # da4ml's own LUT/FF estimate

    def manifest(self, input_tensor: str, output_tensor: str, in_width: int, out_width: int, bus_width: int) -> dict:
        return {"name": self.name, "generator": f"da4ml {DA4ML_VERSION}", "top": self.board_top,
                "board_top": self.board_top, "core_top": self.core_top, "latency_cycles": self.latency_cycles,
                "ii": 1, "input_tensor": input_tensor, "output_tensor": output_tensor, "in_width": in_width,
                "out_width": out_width, "bus_width": bus_width, "files": [f"rtl/{n}" for n in sorted(self.files)],
                "da4ml": {"pipeline_stages": self.pipeline_stages, **self.estimate}}


def require_da4ml() -> Any:
    """The da4ml package, or a clear error saying how to install it."""
    try:
        import da4ml
    except ImportError:
        raise Da4mlError(f"da4ml is not installed; the RTL benchmark needs it: pip install 'bitforge[bench]' "
                         f"(da4ml=={DA4ML_VERSION})") from None
    return da4ml


# -- tracing -------------------------------------------------------------------------------------------------

def kif(t: FixedType) -> tuple[int, int, int]:
    """da4ml's (keep_negative, integer bits without the sign, fractional bits) for a bitforge type."""
    return int(t.signed), t.integer - int(t.signed), t.frac


def _round_element(v, dst_frac: int, rounding: Rounding, where: str):
    """Add what makes a truncation to ``dst_frac`` round as ``rounding`` says; exact, per element.

    With u the element's own LSB and s the destination's, floor(x + s/2) rounds ties up (RND), floor(x + s/2 - u)
    ties down (RND_MIN_INF), and floor(x + s/2 - u + u * b), b the bit of weight s in x, ties to even (RND_CONV):
    a tie then reaches s exactly when the kept part is odd.
    """
    _, _, frac = v.kif
    if frac <= dst_frac or rounding == Rounding.TRN:
        return v
    s, u = 2.0 ** -dst_frac, 2.0 ** -frac
    if rounding == Rounding.RND:
        return v + s / 2
    if rounding == Rounding.RND_MIN_INF:
        return v + (s / 2 - u)
    if rounding == Rounding.RND_CONV:
        bit = v.quantize(0, 1 - dst_frac, dst_frac, "WRAP", "TRN")  # b * s
        return v + (s / 2 - u) + bit * (u / s)
    raise Da4mlError(f"{where}: rounding {rounding.value} has no da4ml form here (TRN, RND, RND_CONV and "
                     "RND_MIN_INF do); choose one of those for the benchmark")


def requantize(arr, dst: FixedType, where: str):
    """``fixed.requantize`` on a traced da4ml array: round (see :func:`_round_element`), then truncate and overflow."""
    from da4ml.trace import FixedVariableArray

    if dst.overflow == Overflow.SAT_ZERO:
        raise Da4mlError(f"{where}: overflow SAT_ZERO has no da4ml form (WRAP, SAT and SAT_SYM do)")
    k, i, f = kif(dst)
    flat = arr.ravel()
    out = np.empty(flat.size, dtype=object)
    for j in range(flat.size):
        out[j] = _round_element(flat[j], f, dst.rounding, where).quantize(k, i, f, dst.overflow.value, "TRN")
    return FixedVariableArray(out, arr.solver_options, hwconf=arr.hwconf)


def _dense(x, weight: np.ndarray, wt: FixedType, bias, bt, accum: FixedType, out: FixedType, where: str):
    w = np.ldexp(np.asarray(weight, dtype=np.float64), -wt.frac)  # exact: codes of at most 53 bits
    acc = x @ w.T
    if bias is not None:
        acc = acc + np.ldexp(np.asarray(bias, dtype=np.float64), -bt.frac)
    return requantize(requantize(acc, accum, where + " accumulator"), out, where)


def hardware_input(g: ir.Graph) -> str:
    """The tensor the hardware receives (the host does the input Quantize), as in the RTL backend."""
    from ..backends.rtl.generate import hardware_chain

    return hardware_chain(g)[0].inputs[0]


def trace(g: ir.Graph):
    """The graph's hardware chain as da4ml combinational logic (a ``CombLogic``), before pipelining."""
    require_da4ml()
    from da4ml.trace import FixedVariableArray, HWConfig, comb_trace

    from ..backends.rtl.generate import hardware_chain

    chain = hardware_chain(g)
    spec = g.tensors[chain[0].inputs[0]]
    n = math.prod(spec.shape)
    k, i, f = kif(spec.dtype)
    inp = FixedVariableArray.from_kif(np.full(n, k), np.full(n, i), np.full(n, f), HWConfig(1, -1, -1))
    x = inp
    for node in chain:
        out, where = g.tensors[node.output].dtype, node.describe()
        if isinstance(node, ir.Dense):
            x = _dense(x, node.weight, node.weight_type, node.bias, node.bias_type, node.accum_type, out, where)
        elif isinstance(node, ir.LowRankDense):
            h = _dense(x, node.v, node.v_type, None, None, node.accum_v_type, node.mid_type, where + " (V)")
            x = _dense(h, node.u, node.u_type, node.bias, node.bias_type, node.accum_type, out, where + " (U)")
        elif isinstance(node, ir.ReLU):
            x = requantize(x.relu(), out, where)
        elif isinstance(node, ir.Requantize):
            x = requantize(x, out, where)
        else:
            raise Da4mlError(f"{where}: op {node.OP} has no da4ml form in the benchmark (Dense, LowRankDense, ReLU "
                             "and Requantize do)")
    return comb_trace(inp, x)


# -- equivalence ---------------------------------------------------------------------------------------------

def interpret(comb, x_codes: np.ndarray, x_type: FixedType, y_type: FixedType) -> np.ndarray:
    """Run da4ml's own (C++) interpreter on input codes; returns output codes of ``y_type``."""
    y = np.asarray(comb.predict(fixed.to_float(x_codes, x_type)), dtype=np.float64).reshape(len(x_codes), -1)
    codes = np.ldexp(y, y_type.frac)
    if not np.all(codes == np.rint(codes)):
        raise Da4mlError(f"da4ml's outputs are not multiples of the output LSB of {y_type}: the traced design does "
                         "not end in the output type")
    return codes.astype(np.int64)


def check_equivalence(g: ir.Graph, comb, vectors: int = 500, seed: int = 0) -> Equivalence:
    """Golden model vs da4ml's interpreter on ``vectors`` seeded vectors (edge values first)."""
    from ..verify.vectors import make_vectors

    x_name, y_name = hardware_input(g), g.outputs[0]
    env = emulate.run(g, make_vectors(g, vectors, seed), keep=True)
    x, expected = np.asarray(env[x_name], dtype=np.int64), np.asarray(env[y_name], dtype=np.int64)
    got = interpret(comb, x, g.tensors[x_name].dtype, g.tensors[y_name].dtype)
    bad = np.flatnonzero(np.any(got != expected, axis=1))
    first = None
    if bad.size:
        j = int(bad[0])
        first = {"vector": j, "input": x[j].tolist(), "expected": expected[j].tolist(), "got": got[j].tolist()}
    return Equivalence(len(x), int(bad.size), first)


# -- Verilog -------------------------------------------------------------------------------------------------

def _regular_layout(qints) -> tuple[int, int, bool]:
    """da4ml's uniform I/O layout: (bits per element, fractional bits, signed), as its io_wrapper lays it out."""
    from da4ml.types import minimal_kif

    ks, is_, fs = zip(*map(minimal_kif, qints))
    return max(is_) + max(ks) + max(fs), max(fs), bool(max(ks))


def element_maps(count: int, src: tuple[int, int, bool], dst: tuple[int, int], where: str) -> list[ElementMap]:
    """Maps from a bus of ``count`` elements (bits, frac, signed) to one of (bits, frac): the binary points align."""
    src_w, src_frac, signed = src
    dst_w, dst_frac = dst
    shift = dst_frac - src_frac
    if shift < 0 or shift >= dst_w:
        raise Da4mlError(f"{where}: an element with {src_frac} fractional bits cannot be placed in {dst_w} bits with "
                         f"{dst_frac} fractional bits without losing bits")
    return [ElementMap(j * src_w, src_w, signed, j * dst_w, dst_w, shift) for j in range(count)]


def _template_env():
    from ..templating import environment

    return environment("bitforge.toolchain.bench", "bitforge.toolchain.backends.rtl")


def _da4ml_sources(comb, da_top: str, latency_cutoff: float) -> tuple[dict[str, str], Any]:
    """da4ml's own files for the pipeline (its modules and static library), written by its VerilogModel."""
    from da4ml.codegen import VerilogModel
    from da4ml.trace.pipeline import to_pipeline

    pipe = to_pipeline(comb, latency_cutoff, verbose=False)
    with tempfile.TemporaryDirectory(prefix="bitforge-da4ml-") as tmp:
        VerilogModel(pipe, da_top, tmp, latency_cutoff=latency_cutoff).write()
        src = Path(tmp) / "src"
        paths = [*sorted(src.glob("*.v")), *sorted((src / "static").glob("*.v"))]
        # bitforge's library sets no `timescale; a design that mixes both is a Verilator error (TIMESCALEMOD).
        files = {p.name: _TIMESCALE.sub("", p.read_text()) for p in paths}
    return files, pipe


def generate(g: ir.Graph, comb, options: Da4mlOptions = Da4mlOptions()) -> Da4mlDesign:
    """da4ml's pipeline for ``comb``, wrapped as a bitforge core (``<name>``) and board top (``<name>_board``)."""
    from ..backends.rtl.generate import library_source
    from ..backends.rtl.verilog import verilog_name

    name = verilog_name(g.name) + "_da4ml"
    da_top = name + "_pipe"
    files, pipe = _da4ml_sources(comb, da_top, options.latency_cutoff)
    x_name, y_name = hardware_input(g), g.outputs[0]
    xs, ys = g.tensors[x_name], g.tensors[y_name]
    n_in, n_out = math.prod(xs.shape), math.prod(ys.shape)
    in_layout, out_layout = _regular_layout(pipe.inp_qint), _regular_layout(pipe.out_qint)
    # The bitforge code of an input element is the da4ml element itself (same kif), padded to its layout.
    in_maps = element_maps(n_in, (xs.dtype.width, xs.dtype.frac, xs.dtype.signed), in_layout[:2],
                           f"input '{x_name}'")
    out_maps = element_maps(n_out, out_layout, (ys.dtype.width, ys.dtype.frac), f"output '{y_name}'")
    da_latency = len(pipe.solutions) + 1  # a register before each stage, and the output register
    depth_log2 = max(1, math.ceil(math.log2(da_latency + 2)))
    env = _template_env()
    ctx = dict(graph=g.name, name=name, da_top=da_top, da4ml_version=DA4ML_VERSION, da_latency=da_latency,
               depth=1 << depth_log2, depth_log2=depth_log2, in_w=n_in * xs.dtype.width,
               out_w=n_out * ys.dtype.width, count_in=n_in, count_out=n_out, in_w_elem=xs.dtype.width,
               out_w_elem=ys.dtype.width, in_tensor=x_name, out_tensor=y_name, in_type=xs.dtype.to_short(),
               out_type=ys.dtype.to_short(), da_in_elem=in_layout[0], da_out_elem=out_layout[0],
               da_in_w=n_in * in_layout[0], da_out_w=n_out * out_layout[0], in_maps=in_maps, out_maps=out_maps,
               latency=da_latency + 1, bus_w=options.bus_width, ram=None)  # da4ml's weights are constants
    files[f"{name}.v"] = env.get_template("da4ml_core.v.j2").render(**ctx)
    files[f"{name}_board.v"] = env.get_template("board.v.j2").render(**ctx)
    files.update({lib: library_source(lib) for lib in LIBRARY})
    estimate = {"estimated_lut": round(float(pipe.cost)), "estimated_ff": int(pipe.reg_bits),
                "latency_cutoff": options.latency_cutoff}
    # The FIFO adds one cycle after the pipeline: m_axis_tvalid rises the cycle after the push.
    return Da4mlDesign(name, name, f"{name}_board", files, da_latency + 1, len(pipe.solutions), estimate)


def write_design(g: ir.Graph, design: Da4mlDesign, out: Path, options: Da4mlOptions, equivalence: Equivalence) -> Path:
    """A bitforge output folder for the da4ml design: the IR, ``rtl/``, ``report.json``; returns ``out``."""
    out = Path(out)
    (out / "rtl").mkdir(parents=True, exist_ok=True)
    ir.save(g, out)
    for fname, text in sorted(design.files.items()):
        (out / "rtl" / fname).write_text(text)
    x_name, y_name = hardware_input(g), g.outputs[0]
    xs, ys = g.tensors[x_name], g.tensors[y_name]
    manifest = design.manifest(x_name, y_name, math.prod(xs.shape) * xs.dtype.width,
                               math.prod(ys.shape) * ys.dtype.width, options.bus_width)
    (out / "rtl" / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    (out / "report.json").write_text(json.dumps(_report(g, manifest, options, equivalence), indent=2) + "\n")
    from ..report import md as report_md

    report_md.write(out)
    return out


def _report(g: ir.Graph, manifest: dict, options: Da4mlOptions, equivalence: Equivalence) -> dict:
    """``report.json`` in the shape of a compiled folder's, so ``report.md`` and the flows read it alike."""
    layers = [dict(zip(("node", "op", "shape", "type", "parameters"), r)) for r in g.summary_rows()]
    return {"model": {"kind": "bitforge-ir", "name": g.name, "generator": manifest["generator"]},
            "options": {"da4ml": asdict(options), "precision": None},
            "graph": {"name": g.name, "nodes": len(g.nodes), "parameters": g.parameter_count(), "layers": layers},
            "precision": {"warnings": []},
            "verification": {"golden_vs_da4ml_interpreter": {
                "executor": f"da4ml {DA4ML_VERSION} interpreter", "exact": True, **asdict(equivalence)}},
            "rtl": {"core_top": manifest["core_top"], "board_top": manifest["board_top"],
                    "bus_width": manifest["bus_width"], "latency_cycles": manifest["latency_cycles"],
                    "ii": manifest["ii"], "layers": [], "da4ml": manifest["da4ml"]}}
