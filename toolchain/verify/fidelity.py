"""The fidelity report: how far the compiled fixed-point model lies from the float model it stands for.

The ONNX and RTL checks compare executors of one compiled model (they must agree bit for bit); this module
measures what quantization itself costs. Both models run in the golden model (:func:`..emulate.run`, every
tensor kept), so nothing here knows any op:

* the **fixed** model is the compiled graph;
* the **reference** is the float graph the frontend produced, or, for a source that is already quantized
  (QONNX, QDQ, a fake-quantized recipe, a bitforge output folder), that graph dequantized
  (:func:`..passes.dequantize.dequantize_graph`: the codes' exact real values as float32 weights, every
  Quantize/Requantize dropped), executed in float32.
* or, for a QONNX/QDQ export the frontend approximated (non-power-of-two scales), the source file itself run by
  onnxruntime (:mod:`.source_reference`; ``LoadedModel.reference``), whose tensors pair by ONNX name; the fixed
  model's codes then count ``metadata["tensor_scales"]`` times their value (:func:`real_values`).

Per graph output: the largest and mean absolute difference of the real values, and for outputs with more than one
element along their last axis the top-1 agreement (argmax over that axis, first index on ties, as ArgMax does).
Per layer (each node's output tensor): the golden values' range in real units against the type's range, the
number of values that overflowed the type, and the range of and difference from the reference tensor it stands
for (the golden values stop at the type's ends; the reference's show how far beyond them the model wanted to go).

**Overflow count, exactly.** A node's rule ends in a cast into its output type (rounding, then the overflow
mode). The node is run once more, alone, on the same inputs with its output type widened: the same fractional
bits and rounding, three more integer bits, signed, saturating. Every value of that result outside the real
type's code range is one that the real type saturated (SAT, SAT_SYM), zeroed (SAT_ZERO) or wrapped (WRAP). An
overflow of an intermediate accumulator is not counted (``infer_precision`` sizes accumulators so it cannot
happen unless a type was given by hand).

**Which reference tensor a fixed tensor stands for.** The quantize pass keeps every node's and tensor's name and
inserts one ``<input>_quantize`` node per float input (output ``<input>_q``); ``dequantize_graph`` keeps the
names too and drops casts. So: the reference tensor of the same name and shape; else, for the output of a
Quantize or Requantize node, the reference tensor of that node's input (followed through chains of casts); else
none (its range and overflows are still reported). Graph outputs pair by position.

**Which vectors.** The verification vectors (:func:`.vectors.make_vectors`, same count and seed as the ONNX check)
whose every input lies inside the declared input range: the edge rows beyond it test saturation of the input
quantizer, and a float model fed 1e9 says nothing about fidelity, so they are left out (their count is
reported). With ``--calibration X.npy`` the same measures on every row of X as well. A graph whose input is
already typed takes codes: the real values are quantized into that type (saturating) for the fixed model, and
the reference gets the codes' real values of the verification vectors, or X itself.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional

import numpy as np

from .. import emulate, fixed
from ..errors import BitforgeError
from ..fixed import FixedType, Overflow
from ..ir import Graph, Node, Quantize, Requantize, TensorSpec
from .vectors import input_range, make_vectors

#: Histogram of log2|x| for the plot's boxes: bins of 1/8 octave over [-128, 128) (values beyond are clipped).
HIST_STEPS_PER_OCTAVE = 8
HIST_LOG2_LO, HIST_LOG2_HI = -128, 128
HIST_BINS = (HIST_LOG2_HI - HIST_LOG2_LO) * HIST_STEPS_PER_OCTAVE
#: Elements of all kept tensors together per batch: bounds the memory of a run (a conv net's activations are
#: large), while a small MLP still runs its 10,000 vectors in one batch.
BATCH_ELEMENTS = 4_000_000
#: Errors are rounded to this many significant digits in report.json: float32 BLAS may sum in another order on
#: another machine; the exact golden ranges are written as they are.
DIGITS = 6
VERIFICATION, CALIBRATION = "verification", "calibration"


class FidelityError(BitforgeError):
    """Calibration data that does not fit the model (shape, NaN/Inf, more than one input)."""


# -- the two models ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Reference:
    """The float graph the fixed model is measured against, and what it is. With ``runner`` (kind "source": an
    approximated quantized export, :mod:`.source_reference`) the source model itself is executed and ``graph`` only
    names its inputs, outputs and tensor shapes."""

    graph: Graph
    kind: str  # "float" (the frontend's float graph), "dequantized" or "source"
    runner: Optional[Callable[[dict], dict]] = None

    def run(self, real: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every tensor of the reference on the real inputs ``real``."""
        return self.runner(real) if self.runner is not None else emulate.run(self.graph, real, keep=True)

    def describe(self) -> str:
        if self.kind == "float":
            return "the float graph the frontend produced, before quantization"
        if self.kind == "source":
            return ("the source ONNX model run by onnxruntime (graph optimizations off, so Q/DQ keep their float "
                    "semantics; QONNX Quant nodes expanded into their float definition), float32")
        return ("the source's quantized graph dequantized: its codes' exact real values as float32 weights, "
                "every Quantize/Requantize dropped, run in float32")


def reference_for(source: Graph) -> Reference:
    """The float reference of a source graph (a frontend's result, before any pass)."""
    from ..passes.dequantize import dequantize_graph

    quantized = any(not t.is_float for t in source.tensors.values()) or \
        any(isinstance(n, (Quantize, Requantize)) for n in source.nodes)
    return Reference(dequantize_graph(source), "dequantized") if quantized else Reference(source, "float")


def tensor_map(fixed_g: Graph, ref: Graph) -> dict[str, str]:
    """{fixed tensor: reference tensor} for every node output that has a counterpart (rule in the module doc)."""
    producer = {o: n for n in fixed_g.nodes for o in n.outputs}

    def counterpart(t: str) -> Optional[str]:
        seen = set()
        while t not in seen:
            seen.add(t)
            if t in ref.tensors and ref.tensors[t].shape == fixed_g.tensors[t].shape:
                return t
            n = producer.get(t)
            if not isinstance(n, (Quantize, Requantize)):
                return None
            t = n.inputs[0]
        return None

    out = {}
    for n in fixed_g.nodes:
        for o in n.outputs:
            c = counterpart(o)
            if c is not None:
                out[o] = c
    return out


# -- the input batches -------------------------------------------------------------------------------------

@dataclass
class Batch:
    """One set of vectors as both models take them: the fixed graph's inputs (floats for a float input, codes for
    a typed one) and the reference's (real values)."""

    name: str
    fixed: dict[str, np.ndarray]
    real: dict[str, np.ndarray]
    left_out: int = 0

    @property
    def rows(self) -> int:
        return len(next(iter(self.real.values())))

    def take(self, rows: slice) -> "Batch":
        return Batch(self.name, {k: v[rows] for k, v in self.fixed.items()},
                     {k: v[rows] for k, v in self.real.items()})


def _real(g: Graph, name: str, a: np.ndarray) -> np.ndarray:
    t = g.tensors[name].dtype
    return (fixed.to_float(a, t) if t is not None else np.asarray(a, dtype=np.float64)).astype(np.float32)


def verification_batch(g: Graph, n: int, seed: int) -> Batch:
    """The verification vectors whose every input lies inside the input range (see the module doc)."""
    vectors = make_vectors(g, n, seed)
    real = {k: _real(g, k, v) for k, v in vectors.items()}
    keep = np.ones(n, dtype=bool)
    for name, r in real.items():
        lo, hi = input_range(g, name)
        inside = (r.astype(np.float64) >= lo) & (r.astype(np.float64) <= hi)
        keep &= inside.reshape(n, -1).all(axis=1)
    return Batch(VERIFICATION, {k: v[keep] for k, v in vectors.items()}, {k: v[keep] for k, v in real.items()},
                 left_out=int((~keep).sum()))


def read_calibration_file(path) -> np.ndarray:
    """``--calibration X.npy``: a numeric array (never unpickled); its shape is checked once the model is loaded."""
    from ...runtime.batch_run import read_input

    return read_input(Path(path), "--calibration")


def fit_calibration(x: np.ndarray, path, g: Graph) -> np.ndarray:
    """The calibration array as float32 rows ``(n, *shape)`` of the graph's one input (one sample ``shape`` too)."""
    if len(g.inputs) != 1:
        raise FidelityError(f"--calibration takes one array, but graph '{g.name}' has {len(g.inputs)} inputs "
                            f"({', '.join(g.inputs)}); drop --calibration")
    shape = g.tensors[g.inputs[0]].shape
    if x.shape == shape:
        x = x[None]
    if x.shape[1:] != shape or len(x) == 0:
        want = ", ".join(map(str, shape))
        raise FidelityError(f"{path}: --calibration holds shape {x.shape}; the model's input '{g.inputs[0]}' takes "
                            f"(n, {want}) with n >= 1")
    x64 = x.astype(np.float64)
    if not np.all(np.isfinite(x64)):
        raise FidelityError(f"{path}: --calibration holds {int((~np.isfinite(x64)).sum())} NaN/Inf value(s); "
                            "remove those rows")
    if np.any(np.abs(x64) > np.finfo(np.float32).max):
        raise FidelityError(f"{path}: --calibration holds values beyond float32's range (+-3.4e38); the model's "
                            "inputs are float32: scale or clip the data")
    return x.astype(np.float32)


def calibration_batch(g: Graph, x: np.ndarray) -> Batch:
    """Real-valued rows for the graph's one input; a typed input gets their codes (saturating)."""
    name = g.inputs[0]
    t = g.tensors[name].dtype
    fixed_in = x if t is None else fixed.quantize(x, t.with_(overflow=Overflow.SAT))
    return Batch(CALIBRATION, {name: fixed_in}, {name: np.asarray(x, dtype=np.float32)})


# -- measuring -----------------------------------------------------------------------------------------------

def widened(t: FixedType) -> FixedType:
    """The same LSB and rounding with room beyond ``t`` on both sides, saturating: a value outside ``t``'s codes
    stays outside this type's range after its own saturation, so the count is exact."""
    return FixedType(t.width + 3, t.integer + 3, True, t.rounding, Overflow.SAT)


def _sig(v: float) -> float:
    return float(f"{v:.{DIGITS}g}")


@dataclass
class _TensorStats:
    """What one fixed tensor did over a set, accumulated batch by batch."""

    values: int = 0
    lo: float = math.inf
    hi: float = -math.inf
    overflowed: Optional[int] = 0
    zeros: int = 0
    hist: np.ndarray = field(default_factory=lambda: np.zeros(HIST_BINS, dtype=np.int64))
    err_max: float = 0.0
    err_sum: float = 0.0
    ref_lo: float = math.inf
    ref_hi: float = -math.inf

    def add(self, v: np.ndarray, over: Optional[int], ref: Optional[np.ndarray]) -> None:
        self.values += v.size
        if v.size:
            self.lo, self.hi = min(self.lo, float(v.min())), max(self.hi, float(v.max()))
        self.overflowed = None if over is None or self.overflowed is None else self.overflowed + over
        mag = np.abs(v[v != 0])
        self.zeros += v.size - mag.size
        if mag.size:
            idx = np.floor(np.log2(mag) * HIST_STEPS_PER_OCTAVE).astype(np.int64) - HIST_LOG2_LO * HIST_STEPS_PER_OCTAVE
            self.hist += np.bincount(np.clip(idx, 0, HIST_BINS - 1), minlength=HIST_BINS)
        if ref is not None and v.size:
            ref = ref.astype(np.float64)
            d = np.abs(v - ref)
            self.err_max, self.err_sum = max(self.err_max, float(d.max())), self.err_sum + float(d.sum())
            self.ref_lo, self.ref_hi = min(self.ref_lo, float(ref.min())), max(self.ref_hi, float(ref.max()))


@dataclass
class _OutputStats:
    rows: int = 0
    err_max: float = 0.0
    err_sum: float = 0.0
    elements: int = 0
    worst_row: int = 0
    ref_lo: float = math.inf
    ref_hi: float = -math.inf
    identical_rows: int = 0
    top1_positions: int = 0
    top1_agree: int = 0
    #: The output is a class index (an ArgMax: ``--softmax argmax``): top-1 agreement is equality.
    is_index: bool = False

    def add(self, v: np.ndarray, ref: np.ndarray, first_row: int) -> None:
        n = len(v)
        ref = ref.astype(np.float64)
        d = np.abs(v - ref).reshape(n, -1)
        row_max = d.max(axis=1) if d.size else np.zeros(n)
        if n and float(row_max.max()) > self.err_max:
            self.err_max, self.worst_row = float(row_max.max()), first_row + int(row_max.argmax())
        self.err_sum += float(d.sum())
        self.elements += d.size
        self.rows += n
        if ref.size:
            self.ref_lo, self.ref_hi = min(self.ref_lo, float(ref.min())), max(self.ref_hi, float(ref.max()))
        self.identical_rows += int((d == 0).all(axis=1).sum())
        if self.is_index or (v.ndim >= 2 and v.shape[-1] > 1):
            agree = (v == ref)[..., 0] if self.is_index else v.argmax(axis=-1) == ref.argmax(axis=-1)
            self.top1_positions += agree.size
            self.top1_agree += int(agree.sum())

    def to_json(self, ref_name: str) -> dict:
        out = {"reference": ref_name, "max_abs_error": _sig(self.err_max),
               "mean_abs_error": _sig(self.err_sum / max(self.elements, 1)), "worst_row": self.worst_row,
               "reference_range": [_sig(self.ref_lo), _sig(self.ref_hi)] if self.elements else None,
               "identical_rows": self.identical_rows}
        if self.top1_positions:
            out["top1_agreement"] = _sig(self.top1_agree / self.top1_positions)
            out["top1_agreeing"] = self.top1_agree
            out["top1_compared"] = self.top1_positions
        return out


@dataclass
class LayerProfile:
    """One layer's row of the report and of the plot."""

    node: str
    op: str
    tensor: str
    dtype: Optional[FixedType]
    reference: Optional[str]
    stats: _TensorStats

    def to_json(self) -> dict:
        s, t = self.stats, self.dtype
        row = {"node": self.node, "op": self.op, "tensor": self.tensor, "reference": self.reference,
               "type": t.to_short() if t is not None else "float32",
               "type_range": [t.min_value, t.max_value] if t is not None else None,
               "lsb": t.lsb if t is not None else None,
               "observed": [s.lo, s.hi] if s.values else None,
               "values": s.values, "zeros": s.zeros, "overflowed": s.overflowed}
        if self.reference is not None:
            row["reference_observed"] = [_sig(s.ref_lo), _sig(s.ref_hi)] if s.values else None
            row["max_abs_error"] = _sig(s.err_max)
            row["mean_abs_error"] = _sig(s.err_sum / max(s.values, 1))
        return row


@dataclass
class SetResult:
    """A set's measures: per output and per layer."""

    name: str
    rows: int
    left_out: int
    outputs: dict[str, dict]
    layers: list[LayerProfile]

    def to_json(self) -> dict:
        out = {"vectors": self.rows}
        if self.name == VERIFICATION:
            out["left_out"] = self.left_out
        out["outputs"] = self.outputs
        out["layers"] = [layer.to_json() for layer in self.layers]
        return out


def _rows_per_batch(g: Graph, rows: int) -> int:
    per_row = sum(math.prod(t.shape) for t in g.tensors.values()) or 1
    return max(1, min(rows, BATCH_ELEMENTS // per_row))


def _overflow_count(g: Graph, n: Node, env: Mapping[str, np.ndarray], out: str) -> Optional[int]:
    """Values of ``out`` whose exact result lay beyond its type (module doc); None when the node's inputs are
    wider than int64 codes (the golden model's graph inputs take int64)."""
    t = g.tensors[out].dtype
    inputs = list(dict.fromkeys(n.inputs))
    if any(np.asarray(env[i]).dtype == object for i in inputs):
        return None
    tensors = {i: g.tensors[i] for i in inputs}
    tensors.update({o: TensorSpec(o, g.tensors[o].shape, widened(g.tensors[o].dtype)) for o in n.outputs})
    alone = Graph(f"{g.name}.{n.name}", inputs, list(n.outputs), tensors, [n])
    exact = np.asarray(emulate.run(alone, {i: env[i] for i in inputs})[out])
    return int(((exact < t.sat_min_code) | (exact > t.max_code)).sum())


def real_values(g: Graph, env: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every tensor's real values: codes times the LSB, times the tensor's quantizer scale where a non-power-of-two
    quantizer left one (``metadata["tensor_scales"]``, docs/quantized-models.md)."""
    scales = g.metadata.get("tensor_scales", {})
    out = {}
    for k, v in env.items():
        t = g.tensors[k].dtype
        r = fixed.to_float(v, t) if t is not None else np.asarray(v, dtype=np.float64)
        out[k] = r * scales[k] if k in scales else r
    return out


def measure(fixed_g: Graph, ref: Reference, batch: Batch) -> SetResult:
    """Both models over ``batch``, in slices that bound memory; returns the set's measures."""
    mapping = tensor_map(fixed_g, ref.graph)
    layers = [LayerProfile(n.name, n.OP, o, fixed_g.tensors[o].dtype, mapping.get(o), _TensorStats())
              for n in fixed_g.nodes for o in n.outputs]
    producers = {n.output: n.OP for n in fixed_g.nodes}
    outs = {o: _OutputStats(is_index=producers.get(o) == "ArgMax") for o in fixed_g.outputs}
    by_tensor = {layer.tensor: layer for layer in layers}
    step = _rows_per_batch(fixed_g, batch.rows)
    for start in range(0, batch.rows, step):
        part = batch.take(slice(start, start + step))
        env = emulate.run(fixed_g, part.fixed, keep=True)
        ref_env = ref.run(part.real)
        real = real_values(fixed_g, env)
        for n in fixed_g.nodes:
            for o in n.outputs:
                layer = by_tensor[o]
                over = _overflow_count(fixed_g, n, env, o) if layer.dtype is not None else 0
                layer.stats.add(real[o], over, ref_env[layer.reference] if layer.reference else None)
        for o, r in zip(fixed_g.outputs, ref.graph.outputs):
            outs[o].add(real[o], ref_env[r], start)
    return SetResult(batch.name, batch.rows, batch.left_out,
                     {o: s.to_json(r) for (o, s), r in zip(outs.items(), ref.graph.outputs)}, layers)


# -- the report section ----------------------------------------------------------------------------------------

@dataclass
class Fidelity:
    """Everything a compile learns about fidelity: the report.json section and the profiles the plot draws."""

    reference: Reference
    sets: list[SetResult]
    plot: Optional[str] = None
    trace: Optional[dict] = None

    @property
    def plotted(self) -> SetResult:
        """The set the plot shows: the user's data when given, else the verification vectors."""
        return self.sets[-1]

    def to_json(self) -> dict:
        out = {"reference": {"kind": self.reference.kind, "what": self.reference.describe()},
               "sets": {s.name: s.to_json() for s in self.sets}}
        if self.plot:
            out["plot"] = self.plot
        if self.trace:
            out["trace"] = self.trace
        return out


def skipped(why: str) -> dict:
    return {"skipped": why}


def summary_lines(section: dict) -> list[str]:
    """One line per set and output for the console: the error and, for classifiers, top-1 agreement."""
    if "skipped" in section:
        return [f"fidelity vs float model: skipped ({section['skipped']})"]
    lines = []
    for name, s in section["sets"].items():
        for out, o in s["outputs"].items():
            top1 = (f", top-1 agreement {o['top1_agreement']:.2%}" if "top1_agreement" in o else "")
            lines.append(f"fidelity vs float model ({name}, {s['vectors']:,} vectors, output {out}): max abs error "
                         f"{o['max_abs_error']:.4g}, mean {o['mean_abs_error']:.4g}{top1}")
        over = [la for la in s["layers"] if la["overflowed"]]
        if over:
            lines.append(f"  overflowed on {name}: " + ", ".join(f"{la['node']} {la['overflowed']:,}" for la in over))
    return lines


# -- writing it all ----------------------------------------------------------------------------------------------

def _quantile_log2(hist: np.ndarray, q: float) -> float:
    """log2 of the q-quantile of the histogrammed magnitudes (its bin's centre)."""
    cum = np.cumsum(hist)
    i = int(np.searchsorted(cum, q * cum[-1], side="left"))
    return HIST_LOG2_LO + (i + 0.5) / HIST_STEPS_PER_OCTAVE


def plot_rows(layers: list[LayerProfile]):
    """The plot's rows (:class:`..report.fidelity_plot.PlotRow`) from the layers' histograms and extremes."""
    from ..report.fidelity_plot import PlotRow

    rows = []
    for layer in layers:
        t, s = layer.dtype, layer.stats
        top = max(abs(t.min_value), t.max_value) if t is not None else 0.0
        band = (float(-t.frac), math.log2(top)) if t is not None and top > 0 else None
        box = whiskers = None
        if s.hist.any():
            box = tuple(_quantile_log2(s.hist, q) for q in (0.25, 0.5, 0.75))
            whiskers = (HIST_LOG2_LO + int(np.flatnonzero(s.hist)[0]) / HIST_STEPS_PER_OCTAVE,
                        math.log2(max(abs(s.lo), abs(s.hi))))
        wanted = max(abs(s.ref_lo), abs(s.ref_hi)) if layer.reference is not None and s.values else 0.0
        rows.append(PlotRow(f"{layer.node} ({layer.op})", band, box, whiskers, s.overflowed or 0,
                            math.log2(wanted) if wanted > 0 else None))
    return rows


def write_fidelity(folder: Path, source: Graph, g: Graph, vectors: int, seed: int,
                   calibration: Optional[np.ndarray] = None, trace: int = 0,
                   reference: Optional[Reference] = None) -> dict:
    """Measure ``g`` (compiled, fixed point) against ``source`` (the frontend's graph; ``reference`` instead when
    given) on the verification vectors and ``calibration``; write ``fidelity.png`` (and ``trace.npz`` for
    ``trace`` > 0) into ``folder``; return the report.json section."""
    from ..report.fidelity_plot import FILE as PLOT, write_plot
    from .trace import FILE as TRACE, npz_bytes, trace_arrays

    if not g.is_fixed:
        return skipped("the compiled model is float (no --precision), so it is the float model")
    ref = reference if reference is not None else reference_for(source)
    batches = [verification_batch(g, vectors, seed)]
    if calibration is not None:
        batches.append(calibration_batch(g, calibration))
    result = Fidelity(ref, [measure(g, ref, b) for b in batches if b.rows])
    if not result.sets:
        return skipped(f"none of the {vectors:,} verification vectors lies inside the input range")
    shown = result.plotted
    write_plot(Path(folder) / PLOT, plot_rows(shown.layers),
               f"{g.name}: golden values on {shown.rows:,} {shown.name} vectors against each layer's type")
    result.plot = PLOT
    if trace:
        b = next(b for b in batches if b.name == shown.name)
        rows = min(trace, b.rows)
        part = b.take(slice(0, rows))
        arrays = trace_arrays(g, ref.graph, tensor_map(g, ref.graph), part.fixed, part.real, b.name, ref.run)
        (Path(folder) / TRACE).write_bytes(npz_bytes(arrays))
        result.trace = {"file": TRACE, "set": b.name, "vectors": rows}
        if rows < trace:
            result.trace["note"] = f"--trace {trace:,} asked for more vectors than the {b.name} set has ({b.rows:,})"
    return result.to_json()
