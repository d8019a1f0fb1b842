"""ONNX frontend: float, QDQ and QONNX graphs -> bitforge IR, exactly or (float scales) as integer-only inference.

Three dialects come in:

* **Float** graphs become float IR nodes: Gemm, MatMul [+ Add] (Dense), Conv, BatchNormalization (a float
  ScaleShift, which the batchnorm pass folds into the Dense/Conv before it), the pools, the activations (exact
  ones as their own ops, smooth ones as a ``Table`` whose function the quantization pass tabulates), Softmax,
  ArgMax and data movement (see ``onnx_layers``, ``onnx_activations``, ``onnx_shapes``, ``onnx_patterns``).
  Graph inputs are ``(batch, features)`` or ``(batch, channels, *spatial)``; the IR keeps the per-sample shape.
* **QDQ** graphs (``QuantizeLinear``/``DequantizeLinear`` as onnxruntime's quantizer writes them). ONNX
  defines ``q = saturate(round_half_even(x / scale) + zero_point)``; with ``scale = 2**-F`` the division is
  an exact binary-point shift, so the pair *is* ``fixed<W, W-F, RND_CONV, SAT>`` (``ufixed`` for unsigned
  codes). A zero point shifts the code range; it is exact only when the shifted range is still a fixed-point
  range (uint8 with zero point 128 is int8).
* **QONNX** ``Quant`` nodes (Brevitas). The spec computes ``clip(round(x / scale + zeropt), min, max)``;
  clipping to integer bounds commutes with any monotone rounding, so this is again a type: width = bitwidth,
  frac = F, rounding from ``rounding_mode``, ``SAT`` (``SAT_SYM`` for signed narrow ranges).

Quantizers on initializers are evaluated here (codes become Dense/Conv weights); quantizers on activations
become ``Quantize``/``Requantize`` nodes, or type the tensor that the previous exact arithmetic produced.
A QDQ/QONNX graph computes its arithmetic (MatMul, Conv, Add, Relu, ...) on exact real values between
quantizers, so each such intermediate gets the smallest fixed type that holds every value exactly;
``Dense -> Relu -> Q`` types both with Q's type (exact: rounding is monotone and maps 0 to 0, saturation bounds
contain 0), and so does a MaxPool between them; data movement shares its input's type.
Accumulator types are left to the precision pass.

Quantizers whose scale is not a power of two (Brevitas' default float scales, onnxruntime's ``quantize_static``)
have no fixed-point type; they become integer-only inference (``onnx_scales``: integer codes, a ScaleShift
multiplier ``M0 * 2**-n`` per layer), as do asymmetric zero points (a Clip to the code range), float biases that
are not on the accumulator's grid (the weights shifted to a finer grid, or the bias rounded with a note) and a
Softmax of a quantized tensor (its tables built on the real input values). Those graphs are close to, not equal
to, the source's float arithmetic: the compile's fidelity report measures the difference against the source run
by onnxruntime (``graph.metadata["approximate"]``). With ``QuantOptions(strict=True)`` (``--strict``) all of them
are refused, and everything the frontend translates is exact.

Anything else that cannot be represented (CEIL rounding of activations, per-channel activation scales, ...)
raises :class:`OnnxFrontendError`. The error lists every node that cannot be translated at once, each with its
name, op type and reason.
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional, Union

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from ..fixed import FixedType, Rounding, add_type
from ..ir import (
    Add,
    Clip,
    Concat,
    Dense,
    LeakyReLU,
    Pool,
    Reshape,
    Transpose,
    Graph,
    IRError,
    Node,
    Quantize,
    ReLU,
    Requantize,
    TensorSpec,
    validate,
)
from .onnx_activations import ACTIVATION_OPS, ActivationOps
from .onnx_layers import LAYER_OPS, LayerOps
from .onnx_patterns import PATTERNS, Fused, constant_arrays, find_fused
from .onnx_scales import QuantOptions, ScaleOps, is_pow2
from .onnx_shapes import SHAPE_OPS, ShapeOps
from .onnx_values import (
    Acc,
    Act,
    Codes,
    Const,
    OnnxFrontendError,
    QConst,
    Value,
    dense_output_type,
    holding_type,
    range_type,
)
from .recurrent import ONNX_RECURRENT, recurrent_message

__all__ = ["OnnxFrontendError", "QuantOptions", "load_onnx", "from_onnx_model", "SUPPORTED_OPS",
           "SUPPORTED_PATTERNS", "QONNX_DOMAINS"]

#: Domains under which QONNX ``Quant`` nodes appear (current qonnx, FINN, and older Brevitas exports).
QONNX_DOMAINS = ("qonnx.custom_op.general", "finn.custom_op.general", "onnx.brevitas")
#: onnxruntime's own domain: older quantizers write int16 Q/DQ there, with the standard semantics.
MS_DOMAIN = "com.microsoft"
#: Default-domain op type -> the translator method that maps it (the op families add theirs).
CORE_OPS = {"Add": "_add", "Constant": "_constant", "DequantizeLinear": "_dequantize_linear", "Gemm": "_gemm",
            "Identity": "_identity", "MatMul": "_matmul", "QuantizeLinear": "_quantize_linear", "Relu": "_relu"}
HANDLERS = {**CORE_OPS, **LAYER_OPS, **ACTIVATION_OPS, **SHAPE_OPS}
STANDARD_OPS = tuple(sorted(HANDLERS))
QONNX_OPS = ("Quant",)
#: Every op this frontend translates, for error messages.
SUPPORTED_OPS = tuple(sorted(STANDARD_OPS + tuple(f"{op} (QONNX)" for op in QONNX_OPS)))
#: Subgraphs translated as one node although their ops alone are not (Erf, Mul).
SUPPORTED_PATTERNS = PATTERNS
#: Default-domain opsets accepted: 11 is the first with today's Gemm/Flatten/Reshape/QDQ behaviour.
MIN_OPSET = 11
MAX_OPSET = onnx.defs.onnx_opset_version()

#: Integer element types a quantizer may produce: (min code, max code).
INT_RANGES = {
    TensorProto.INT8: (-128, 127), TensorProto.UINT8: (0, 255),
    TensorProto.INT16: (-(1 << 15), (1 << 15) - 1), TensorProto.UINT16: (0, (1 << 16) - 1),
    TensorProto.INT32: (-(1 << 31), (1 << 31) - 1),
    TensorProto.INT4: (-8, 7), TensorProto.UINT4: (0, 15),
}

#: QONNX rounding modes that are ap_fixed roundings (spec table: ROUND=HALF_EVEN, DOWN = toward zero,
#: HALF_UP/HALF_DOWN = ties away from/toward zero; ROUND_TO_ZERO is Brevitas' name for DOWN).
QONNX_ROUNDING = {
    "ROUND": Rounding.RND_CONV, "HALF_EVEN": Rounding.RND_CONV, "FLOOR": Rounding.TRN,
    "DOWN": Rounding.TRN_ZERO, "ROUND_TO_ZERO": Rounding.TRN_ZERO,
    "HALF_UP": Rounding.RND_INF, "HALF_DOWN": Rounding.RND_ZERO,
}
#: Modes with no ap_fixed equivalent: fine on constants (evaluated here), not on activations.
QONNX_ROUNDING_CONST_ONLY = ("CEIL", "UP")
#: Ops whose output is on its input's grid: a non-power-of-two scale passes through them unchanged (max, moves,
#: a code-wise clip or slope), and Concat's inputs must share one.
SCALE_KEEPING = (ReLU, Pool, Reshape, Transpose, Concat, LeakyReLU, Clip)


@dataclass(frozen=True)
class _Grid:
    """One quantizer's integer grid, per element: ``real = codes * 2**-frac`` with codes in [lo, hi]
    after the zero point is taken off."""

    frac: np.ndarray  # int64, broadcast to the quantized tensor's shape (or scalar for activations)
    zero_point: np.ndarray
    lo: int
    hi: int
    rounding: Optional[Rounding]  # None: a mode that only constants may use
    #: A scale that is not a power of two (``frac`` is then 0): real = codes * scale, per element.
    scale: Optional[np.ndarray] = None


# -- public entry points --------------------------------------------------------------------------------

def load_onnx(path: Union[str, os.PathLike], options: Optional[QuantOptions] = None) -> Graph:
    """Read an ONNX file (float, QDQ or QONNX) and translate it into a validated bitforge graph."""
    p = Path(path)
    if not p.is_file():
        raise OnnxFrontendError(f"{p}: no such file; expected an ONNX model (.onnx) exported from PyTorch, "
                                "onnxruntime's quantizer or Brevitas/QONNX")
    try:
        model = onnx.load(str(p))
    except Exception as e:  # protobuf DecodeError, missing external data, ...
        raise OnnxFrontendError(f"{p}: cannot be read as an ONNX model ({type(e).__name__}: {e}); the file is "
                                "truncated, corrupt or not ONNX: export it again") from None
    return from_onnx_model(model, str(p), options)


def from_onnx_model(model: onnx.ModelProto, source: str = "<onnx model>",
                    options: Optional[QuantOptions] = None) -> Graph:
    """Translate an in-memory ONNX model; ``source`` names it in error messages and the graph metadata.

    The metadata also says what was approximated: ``approximate`` (True when the graph is not the source's exact
    arithmetic), ``frontend_warnings`` (each rounding, with its size), ``tensor_scales`` (the real value of one
    unit of each integer-code tensor)."""
    if not isinstance(model, onnx.ModelProto):
        raise OnnxFrontendError(f"{source}: expected an onnx.ModelProto, found {type(model).__name__}")
    model = _with_qonnx_opset_imports(model)
    _check_model(model, source)
    opsets = _check_opsets(model, source)
    t = _Translator(model, source, opsets["ai.onnx"], options or QuantOptions())
    graph = t.run()
    graph.metadata.update({
        "frontend": "onnx", "source": source, "opsets": opsets,
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
    })
    if t.approximate:
        graph.metadata["approximate"] = True
        graph.metadata["multiplier_bits"] = t.options.multiplier_bits
    if t.notes:
        graph.metadata["frontend_warnings"] = list(t.notes)
    scales = {k: v for k, v in t.scales.items() if k in graph.tensors}
    if scales:
        graph.metadata["tensor_scales"] = dict(sorted(scales.items()))
    try:
        return validate(graph)
    except IRError as e:
        raise OnnxFrontendError(f"{source}: the translated graph breaks an IR rule ({e}); this is a bitforge "
                                "frontend bug, please report it with the model") from None


# -- whole-model checks ---------------------------------------------------------------------------------

def _with_qonnx_opset_imports(model: onnx.ModelProto) -> onnx.ModelProto:
    """Brevitas exports sometimes omit the opset import of the QONNX domain, which onnx.checker rejects;
    the domain is unversioned, so adding version 1 changes nothing about the model's meaning."""
    used = {n.domain for n in model.graph.node if n.domain in QONNX_DOMAINS}
    missing = used - {o.domain for o in model.opset_import}
    if not missing:
        return model
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for d in sorted(missing):
        model.opset_import.append(onnx.helper.make_opsetid(d, 1))
    return model


def _check_model(model: onnx.ModelProto, source: str) -> None:
    try:
        onnx.checker.check_model(model)
    except Exception as e:  # onnx's ValidationError, or anything its C++ side throws
        msg = str(e).strip().replace("\n\n", "\n")
        raise OnnxFrontendError(f"{source}: onnx.checker rejects the model: {msg}\nThe file is not a valid ONNX "
                                "model: re-export it (and run onnx.checker.check_model on it)") from None


def _check_opsets(model: onnx.ModelProto, source: str) -> dict[str, int]:
    opsets = {(o.domain or "ai.onnx"): int(o.version) for o in model.opset_import}
    v = opsets.get("ai.onnx")
    if v is None:
        raise OnnxFrontendError(f"{source}: the model imports no default ONNX opset (found only "
                                f"{sorted(opsets)}); export it with an opset between {MIN_OPSET} and {MAX_OPSET}")
    if not MIN_OPSET <= v <= MAX_OPSET:
        raise OnnxFrontendError(
            f"{source}: default-domain opset {v} is outside the supported range {MIN_OPSET}..{MAX_OPSET}; "
            f"convert it (onnx.version_converter.convert_version(model, 13)) or re-export with opset 13")
    return opsets


def _check_finite(what: str, array: np.ndarray, source: str) -> None:
    if array.dtype.kind == "f" and not np.all(np.isfinite(array)):
        bad = np.argwhere(~np.isfinite(array))[0]
        raise OnnxFrontendError(f"{source}: {what} contains NaN or Inf (first at index "
                                f"{tuple(int(i) for i in bad)}: {array[tuple(bad)]}); expected finite weights: "
                                "fix the training run or the export")


# -- number helpers ----------------------------------------------------------------------------------------

def _pow2_fracs(scale: np.ndarray, where: str) -> np.ndarray:
    """``F`` with ``scale == 2**-F`` per element, or a clear error: only such scales are exact binary points."""
    s = np.asarray(scale, dtype=np.float64)
    if not np.all(np.isfinite(s)) or np.any(s <= 0):
        raise OnnxFrontendError(f"{where}: scale must be positive and finite, found {s.ravel()[:8].tolist()}")
    mant, exp = np.frexp(s)
    bad = mant != 0.5
    if np.any(bad):
        found = float(s[bad].ravel()[0])
        raise OnnxFrontendError(
            f"{where}: scale {found!r} is not a power of two; bitforge translates a quantizer exactly only when "
            "scale = 2**-F (then it is a fixed-point type), and will not approximate it. Retrain/export with "
            "power-of-two scales (Brevitas: the *FixedPoint quantizers, e.g. Int8WeightPerTensorFixedPoint, "
            "Int8ActPerTensorFixedPoint, exported to QONNX), or requantize with scales 2**-F")
    return (1 - exp).astype(np.int64)


def _integral(values: np.ndarray, where: str, what: str) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(v)) or np.any(v != np.round(v)):
        raise OnnxFrontendError(f"{where}: {what} must be integers, found {v.ravel()[:8].tolist()}")
    return v.astype(np.int64)


def _round_qonnx(v: np.ndarray, mode: str) -> np.ndarray:
    """The QONNX spec's rounding table (evaluated in float64, where every code up to 32 bits is exact)."""
    return {
        "ROUND": np.round, "HALF_EVEN": np.round, "CEIL": np.ceil, "FLOOR": np.floor,
        "UP": lambda a: np.sign(a) * np.ceil(np.abs(a)), "DOWN": np.fix, "ROUND_TO_ZERO": np.fix,
        "HALF_UP": lambda a: np.sign(a) * np.floor(np.abs(a) + 0.5),
        "HALF_DOWN": lambda a: np.sign(a) * np.ceil(np.abs(a) - 0.5),
    }[mode](v)


# -- the translator -----------------------------------------------------------------------------------------

class _Translator(LayerOps, ActivationOps, ShapeOps, ScaleOps):
    """Walks the (topologically sorted) ONNX nodes once, mapping each ONNX tensor name to a :data:`Value`. The op
    families (``onnx_layers``, ``onnx_activations``, ``onnx_shapes``) are mixed in; this class holds the walk, the
    lookups, the emitter, the quantizers and the Dense family."""

    def __init__(self, model: onnx.ModelProto, source: str, opset: int, options: QuantOptions):
        self.model = model
        self.options = options
        #: IR tensor -> the real value of one unit of its fixed value (only where that is not 1: ``onnx_scales``).
        self.scales: dict[str, float] = {}
        #: The approximations made, for the compile report; whether there were any (or any other inexact step).
        self.notes: list[str] = []
        self.approximate = False
        self.g = model.graph
        self.source = source
        self.opset = opset
        #: The graph input's batch size when the export fixed it (a Reshape may then spell the batch as it).
        self.batch: Optional[int] = None
        self.values: dict[str, Value] = {}
        self.tensors: dict[str, TensorSpec] = {}
        self.nodes: list[Node] = []
        self.node_names: set[str] = set()
        self.uses = Counter(i for n in self.g.node for i in n.input if i)
        self.uses.update(o.name for o in self.g.output)
        #: IR tensors produced by exact fixed-point arithmetic that a following quantizer may retype.
        self.retypable: set[str] = set()
        #: Output -> (input, required): retyping the output retypes the input too. Optional for ReLU and MaxPool
        #: (see the module docstring), required for data movement (its output keeps its input's type).
        self.links: dict[str, tuple[str, bool]] = {}
        #: Dense nodes without a bias, by output tensor: a following Add of a constant folds into them.
        self.biasless: dict[str, Dense] = {}
        self.node: Optional[onnx.NodeProto] = None
        self.index = 0

    # -- driver -------------------------------------------------------------------------------------
    def run(self) -> Graph:
        for self.index, self.node in enumerate(self.g.node):
            if self.node.domain in ("", "ai.onnx") and self.node.op_type in ONNX_RECURRENT:
                raise self._fail(recurrent_message(self.node.op_type))
        self.node = None
        self._read_initializers()
        inputs = self._read_inputs()
        nodes = list(self.g.node)
        fused = find_fused(nodes, constant_arrays(self.g), self.uses)
        #: (message, is an unsupported op type) of every node that cannot be translated.
        failures: list[tuple[str, bool]] = []
        #: Outputs of failed nodes: whatever reads them is skipped, not reported (its input never existed).
        lost: set[str] = set()
        for index, n in enumerate(nodes):
            f = fused.get(index)
            if f is not None and index != f.last:
                continue
            outputs = [o for m in (f.members if f else (index,)) for o in nodes[m].output if o]
            self.index, self.node = (f.head, nodes[f.head]) if f else (index, n)
            if any(i in lost for i in ([f.x] if f else n.input)):
                lost.update(outputs)
                if f is None and not self._handled(n):  # an op bitforge lacks is worth naming even here
                    failures.append((self._unsupported(n), True))
                continue
            problem, unsupported = self._translate(n, f)
            if problem is not None:
                failures.append((problem, unsupported))
                lost.update(outputs)
        self.node = None
        if failures:
            raise self._failures(failures)
        outputs = self._outputs()
        name = self.g.name or Path(self.source).stem
        return Graph(name, inputs, outputs, self.tensors, self.nodes)

    @staticmethod
    def _handled(n: onnx.NodeProto) -> bool:
        """Whether bitforge has a translation for this node's op type (its attributes may still be refused)."""
        return ((n.domain in ("", "ai.onnx") and n.op_type in HANDLERS)
                or (n.domain == MS_DOMAIN and n.op_type in ("QuantizeLinear", "DequantizeLinear"))
                or (n.domain in QONNX_DOMAINS and n.op_type == "Quant"))

    def _translate(self, n: onnx.NodeProto, f: Optional[Fused]) -> tuple[Optional[str], bool]:
        """Translate one node (or pattern): (None, False), or the message saying why not and whether the reason
        is an op type bitforge does not have."""
        if f is not None:
            handler = lambda: self._fused(f.kind, f.x, n.output[0])  # noqa: E731 (a closure over this pattern)
        elif not self._handled(n):
            return self._unsupported(n), True
        elif n.op_type == "Quant":
            handler = lambda: self._quant(n)  # noqa: E731
        else:
            handler = lambda: getattr(self, HANDLERS[n.op_type])(n)  # noqa: E731
        try:
            self._guarded(handler)
        except OnnxFrontendError as e:
            return str(e), False
        return None, False

    def _guarded(self, handler: Callable[[], None]) -> None:
        """Malformed attributes or tensors the checker lets through still end in a message naming the node."""
        try:
            handler()
        except OnnxFrontendError:
            raise
        except Exception as e:
            raise self._fail(f"cannot be translated ({type(e).__name__}: {e}); expected a well-formed "
                             f"{self.node.op_type} as the ONNX spec defines it: check the export") from None

    # -- errors -------------------------------------------------------------------------------------
    def _where(self) -> str:
        n = self.node
        if n is None:
            return self.source
        return f"{self.source}: node '{n.name or f'#{self.index}'}' ({n.op_type})"

    def _fail(self, problem: str) -> OnnxFrontendError:
        return OnnxFrontendError(f"{self._where()}: {problem}")

    def _unsupported(self, n: onnx.NodeProto) -> str:
        if n.domain in QONNX_DOMAINS and n.op_type == "BipolarQuant":
            return str(self._fail("BipolarQuant (1-bit +-1 quantization) has no fixed-point equivalent in "
                                  "bitforge; use Quant with bitwidth >= 2 in the model"))
        domain = f" in domain '{n.domain}'" if n.domain not in ("", "ai.onnx") else ""
        return str(self._fail(f"op type '{n.op_type}'{domain} is not supported"))

    def _failures(self, failures: list[tuple[str, bool]]) -> OnnxFrontendError:
        """One error listing every node that cannot be translated (so one export round trip fixes them all), and
        the supported ops when an op type is the problem."""
        tail = ""
        if any(unsupported for _, unsupported in failures):
            tail = (f"\nSupported ops: {', '.join(SUPPORTED_OPS)}; and the patterns "
                    f"{'; '.join(SUPPORTED_PATTERNS)}. Remove or fold the other ops before export, or express the "
                    "model with these ops")
        if len(failures) == 1:
            return OnnxFrontendError(failures[0][0] + tail)
        prefix = f"{self.source}: "
        lines = "\n".join(f"  - {m[len(prefix):] if m.startswith(prefix) else m}" for m, _ in failures)
        return OnnxFrontendError(f"{self.source}: {len(failures)} nodes cannot be translated:\n{lines}{tail}")

    # -- graph inputs, constants ---------------------------------------------------------------------
    def _read_initializers(self) -> None:
        for t in self.g.initializer:
            self.values[t.name] = self._tensor_value(t, f"initializer '{t.name}'")

    def _tensor_value(self, t: onnx.TensorProto, what: str) -> Const:
        try:
            a = numpy_helper.to_array(t)
        except Exception as e:
            raise OnnxFrontendError(f"{self._where()}: {what} cannot be decoded ({e}); re-export the model") from None
        _check_finite(what, a, self._where())
        return Const(a, t.data_type)

    def _read_inputs(self) -> list[str]:
        names = []
        for vi in self.g.input:
            if vi.name in self.values:  # an initializer listed as an input (IR < 4 style): a constant
                continue
            names.append(self._graph_input(vi))
        if not names:
            raise OnnxFrontendError(f"{self.source}: the graph has no non-constant input")
        return names

    def _graph_input(self, vi: onnx.ValueInfoProto) -> str:
        tt = vi.type.tensor_type
        where = f"{self.source}: graph input '{vi.name}'"
        if not vi.type.HasField("tensor_type") or tt.elem_type != TensorProto.FLOAT:
            found = TensorProto.DataType.Name(tt.elem_type) if vi.type.HasField("tensor_type") else "not a tensor"
            raise OnnxFrontendError(f"{where}: expected float32, found {found}; export the model with a float "
                                    "input (quantize inside the graph with QuantizeLinear or Quant)")
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        if not tt.HasField("shape") or len(dims) < 2 or any(d is None or d < 1 for d in dims[1:]):
            shown = ["?" if d is None else d for d in dims] if tt.HasField("shape") else "unknown"
            raise OnnxFrontendError(f"{where}: expected shape (batch, features) or (batch, channels, *spatial) "
                                    f"with fixed sizes after the batch, found {shown}; export with a fixed sample "
                                    "shape (only the batch axis may be symbolic)")
        self.batch = dims[0]
        self.tensors[vi.name] = TensorSpec(vi.name, tuple(int(d) for d in dims[1:]), None)
        self.values[vi.name] = Act(vi.name)
        return vi.name

    def _constant(self, n: onnx.NodeProto) -> None:
        a = n.attribute[0] if len(n.attribute) == 1 else None
        if a is None:
            raise self._fail("Constant must have exactly one value attribute")
        if a.name == "value":
            self.values[n.output[0]] = self._tensor_value(a.t, f"constant '{n.output[0]}'")
        elif a.name in ("value_float", "value_floats"):
            arr = np.array(a.f if a.name == "value_float" else list(a.floats), dtype=np.float32)
            _check_finite(f"constant '{n.output[0]}'", arr, self._where())
            self.values[n.output[0]] = Const(arr, TensorProto.FLOAT)
        elif a.name in ("value_int", "value_ints"):
            arr = np.array(a.i if a.name == "value_int" else list(a.ints), dtype=np.int64)
            self.values[n.output[0]] = Const(arr, TensorProto.INT64)
        else:
            raise self._fail(f"Constant attribute '{a.name}' is not supported; expected value, value_float(s) "
                             "or value_int(s)")

    # -- lookups --------------------------------------------------------------------------------------
    def _value(self, name: str) -> Value:
        if name not in self.values:
            raise self._fail(f"input '{name}' is neither a graph input, an initializer nor an earlier node's "
                             "output (nodes must be topologically sorted)")
        v = self.values[name]
        if isinstance(v, Codes):
            raise self._fail(f"input '{name}' is the integer output of a QuantizeLinear; only DequantizeLinear "
                             "may consume it (integer-domain ops such as QLinearMatMul are not supported)")
        if isinstance(v, Acc):  # an op that needs real numbers: the accumulator becomes them here, once
            return self._real(name, v)
        return v

    def _value_or_acc(self, name: str) -> Value:
        """For the ops that keep an accumulator pending (bias Add, Relu, MaxPool, quantizers)."""
        v = self.values.get(name)
        return v if isinstance(v, Acc) else self._value(name)

    def _const(self, name: str, what: str) -> Const:
        v = self.values.get(name)
        if not isinstance(v, Const):
            raise self._fail(f"{what} '{name}' must be a constant (initializer or Constant), found "
                             f"{'a computed tensor' if v is not None else 'nothing'}")
        return v

    def _spec(self, v: Act) -> TensorSpec:
        return self.tensors[v.tensor]

    def _attrs(self, n: onnx.NodeProto) -> dict:
        out = {}
        for a in n.attribute:
            val = onnx.helper.get_attribute_value(a)
            out[a.name] = val.decode() if isinstance(val, bytes) else val
        return out

    # -- emitting IR -------------------------------------------------------------------------------
    def _name(self) -> str:
        base = self.node.name or f"{self.node.op_type}_{self.index}"
        name, k = base, 1
        while name in self.node_names:
            name, k = f"{base}_{k}", k + 1
        self.node_names.add(name)
        return name

    def _emit(self, node: Node, out: TensorSpec, exact: bool = False) -> Act:
        if not out.is_float:
            scales = {self._tensor_scale(i) for i in node.inputs}
            if isinstance(node, SCALE_KEEPING) and node.inputs and len(scales) == 1:
                self._set_scale(out.name, scales.pop())
            elif isinstance(node, SCALE_KEEPING) and node.inputs:
                raise self._fail(f"joins tensors of different quantizer scales {sorted(scales)}; expected one scale "
                                 "(requantize the inputs to one quantizer before joining them)")
        self.nodes.append(node)
        self.tensors[out.name] = out
        if exact:
            self.retypable.add(out.name)
        return Act(out.name)

    def _may_retype(self, onnx_name: str, v: Act) -> bool:
        """A quantizer may type its input's producer directly when nothing else reads that tensor (nor, through a
        required link, the tensor whose type it shares)."""
        if not (v.tensor in self.retypable and v.tensor == onnx_name and self.uses[onnx_name] == 1):
            return False
        inner, required = self.links.get(v.tensor, (None, False))
        return not required or self._may_retype(inner, Act(inner))

    def _link(self, out: str, inner: str, required: bool) -> None:
        self.links[out] = (inner, required)

    def _retype(self, tensor: str, dtype: FixedType) -> None:
        spec = self.tensors[tensor]
        self.tensors[tensor] = TensorSpec(tensor, spec.shape, dtype)
        self.retypable.discard(tensor)
        inner, _ = self.links.pop(tensor, (None, False))
        if inner is not None and inner in self.retypable:
            self._retype(inner, dtype)

    def _rename(self, old: str, new: str) -> None:
        """Give an IR tensor the ONNX name of the op folded into its producer (bias Add)."""
        spec = self.tensors.pop(old)
        self.tensors[new] = TensorSpec(new, spec.shape, spec.dtype)
        for n in self.nodes:  # in place: self.biasless holds these same objects
            n.inputs = tuple(new if t == old else t for t in n.inputs)
            n.outputs = tuple(new if t == old else t for t in n.outputs)
        for v in self.values.values():
            if isinstance(v, (Act, Codes, Acc)) and v.tensor == old:
                v.tensor = new
        if old in self.scales:
            self.scales[new] = self.scales.pop(old)
        if old in self.retypable:
            self.retypable.discard(old)
            self.retypable.add(new)
        for k, (inner, required) in list(self.links.items()):
            if inner == old:
                self.links[k] = (new, required)
        if old in self.links:
            self.links[new] = self.links.pop(old)
        if old in self.biasless:
            self.biasless[new] = self.biasless.pop(old)

    # -- aliases ------------------------------------------------------------------------------------
    def _identity(self, n: onnx.NodeProto) -> None:
        self.values[n.output[0]] = self._value(n.input[0])

    # -- arithmetic --------------------------------------------------------------------------------
    def _relu(self, n: onnx.NodeProto) -> None:
        v = self._value_or_acc(n.input[0])
        if isinstance(v, Acc):  # applied after the requantize ScaleShift (onnx_scales)
            self.values[n.output[0]] = replace(v, relu=True)
            return
        if not isinstance(v, Act):
            raise self._fail("Relu of a constant is not supported; fold it before export")
        spec = self._spec(v)
        out = TensorSpec(n.output[0], spec.shape, spec.dtype)
        act = self._emit(ReLU(self._name(), (v.tensor,), (out.name,)), out, exact=not spec.is_float)
        self.values[n.output[0]] = act
        if self._may_retype(n.input[0], v):
            self._link(out.name, v.tensor, required=False)

    def _add(self, n: onnx.NodeProto) -> None:
        accs = [i for i in n.input[:2] if isinstance(self.values.get(i), Acc)]
        if len(accs) == 1:
            other = n.input[1] if accs[0] == n.input[0] else n.input[0]
            acc, const = self.values[accs[0]], self.values.get(other)
            if isinstance(const, (Const, QConst)) and not acc.relu and self.uses[accs[0]] == 1:
                vec = self._bias_vector(const, self.tensors[acc.tensor].shape[0])
                real = vec.array.astype(np.float64) if isinstance(vec, Const) else vec.real()
                self.values[n.output[0]] = replace(acc, bias=real if acc.bias is None else acc.bias + real)
                return
        a, b = self._value(n.input[0]), self._value(n.input[1])
        if isinstance(a, Act) and isinstance(b, Act):
            self.values[n.output[0]] = self._add_tensors(a, b, n.output[0])
            return
        act_name, const = (n.input[0], b) if isinstance(a, Act) else (n.input[1], a)
        act = self.values[act_name]
        if not isinstance(act, Act):
            raise self._fail("Add of two constants is not supported; fold it before export")
        dense = self.biasless.get(act.tensor)
        if dense is None or act.tensor != act_name or self.uses[act_name] != 1:
            raise self._fail(f"Add of a constant to '{act_name}' is supported only as the bias of the MatMul that "
                             "produced it (and nothing else reading the MatMul's output); found it elsewhere. "
                             "Use Gemm with a bias, or put the constant directly after its MatMul")
        del self.biasless[act.tensor]
        self._set_bias(dense, const)
        self._rename(act.tensor, n.output[0])
        self.values[n.output[0]] = Act(n.output[0])

    def _add_tensors(self, a: Act, b: Act, out_name: str) -> Act:
        sa, sb = self._spec(a), self._spec(b)
        if sa.shape != sb.shape:
            raise self._fail(f"operand shapes differ: expected equal per-sample shapes, found {sa.shape} and "
                             f"{sb.shape} (broadcasting Adds are not supported)")
        if sa.is_float != sb.is_float:
            raise self._fail(f"adds a float tensor to a quantized one ('{a.tensor}' is {sa.type_str()}, "
                             f"'{b.tensor}' is {sb.type_str()}); quantize both operands (or neither)")
        dtype = None if sa.is_float else add_type(sa.dtype, sb.dtype)
        if dtype is not None and self._tensor_scale(a.tensor) != self._tensor_scale(b.tensor):
            raise self._fail(f"adds tensors of different quantizer scales ({self._tensor_scale(a.tensor)!r} and "
                             f"{self._tensor_scale(b.tensor)!r}); bitforge adds codes of one scale only: quantize "
                             "both operands with the same quantizer (Brevitas: a shared QuantIdentity) or with "
                             "power-of-two scales")
        out = TensorSpec(out_name, sa.shape, dtype)
        self._set_scale(out_name, self._tensor_scale(a.tensor))
        return self._emit(Add(self._name(), (a.tensor, b.tensor), (out_name,)), out, exact=dtype is not None)

    def _gemm(self, n: onnx.NodeProto) -> None:
        at = self._attrs(n)
        if at.get("transA", 0):
            raise self._fail("transA=1 transposes the batch dimension; expected transA=0 (activations as "
                             "(batch, features))")
        x, w = self._value(n.input[0]), self._value(n.input[1])
        if not isinstance(x, Act) or isinstance(w, Act):
            raise self._fail("expected Gemm(activation, constant weight[, constant bias]); found "
                             f"A={'activation' if isinstance(x, Act) else 'constant'}, "
                             f"B={'activation' if isinstance(w, Act) else 'constant'}")
        weight = w if at.get("transB", 0) else self._transpose(w)
        bias = self._value(n.input[2]) if len(n.input) > 2 and n.input[2] else None
        if isinstance(bias, Act):
            raise self._fail("the bias C must be a constant, found a computed tensor")
        self._dense(n, x, weight, bias, float(at.get("alpha", 1.0)), float(at.get("beta", 1.0)))

    def _matmul(self, n: onnx.NodeProto) -> None:
        x, w = self._value(n.input[0]), self._value(n.input[1])
        if not isinstance(x, Act) or isinstance(w, Act):
            raise self._fail("expected MatMul(activation, constant weight) i.e. x @ W; found "
                             f"A={'activation' if isinstance(x, Act) else 'constant'}, "
                             f"B={'activation' if isinstance(w, Act) else 'constant'}")
        self._dense(n, x, self._transpose(w), None, 1.0, 1.0)

    def _transpose(self, w: Union[Const, QConst]) -> Union[Const, QConst]:
        arr = w.array if isinstance(w, Const) else w.codes
        if arr.ndim != 2:
            raise self._fail(f"weight must be a 2-D matrix, found shape {arr.shape}")
        if isinstance(w, Const):
            return Const(arr.T.copy(), w.elem)
        return QConst(arr.T.copy(), w.dtype, None if w.scale is None else np.broadcast_to(w.scale, arr.shape).T.copy())

    def _dense(self, n: onnx.NodeProto, x: Act, w: Union[Const, QConst], bias, alpha: float,
               beta: float) -> None:
        xs = self._spec(x)
        if len(xs.shape) != 1:
            raise self._fail(f"input '{x.tensor}' has per-sample shape {xs.shape}; {n.op_type} takes a flat feature "
                             "vector (batch, features): flatten it first (nn.Flatten / Flatten(axis=1))")
        arr = w.array if isinstance(w, Const) else w.codes
        if arr.ndim != 2 or arr.shape[1] != xs.shape[0]:
            raise self._fail(f"weight shape mismatch: input '{x.tensor}' has {xs.shape[0]} features, so the "
                             f"weight (as (out, in)) must be (*, {xs.shape[0]}); found {arr.shape}. The "
                             "weight does not belong to this input: check the export")
        out_name = n.output[0]
        if xs.is_float:
            weight = (self._float_weights(w, "weight") * np.float32(alpha)).astype(np.float32)
            node = Dense(self._name(), (x.tensor,), (out_name,), weight=weight)
            self.nodes.append(node)
            self.tensors[out_name] = TensorSpec(out_name, (arr.shape[0],), None)
        else:
            if not isinstance(w, QConst):
                raise self._fail(f"input '{x.tensor}' is quantized ({xs.type_str()}) but the weight is float; "
                                 "quantize the weight too (DequantizeLinear or Quant on the initializer)")
            if alpha != 1.0 or beta != 1.0:
                raise self._fail(f"alpha={alpha}, beta={beta} on quantized operands: expected 1.0; scale the "
                                 "weights/bias in the model instead")
            if w.scale is not None or self._tensor_scale(x.tensor) != 1.0:
                self._scaled_layer(x, w, bias, out_name, lambda name, codes: Dense(
                    self._name(), (x.tensor,), (name,), weight=codes, weight_type=w.dtype), (arr.shape[0],))
                return
            node = Dense(self._name(), (x.tensor,), (out_name,), weight=w.codes.astype(np.int64),
                         weight_type=w.dtype)
            self.nodes.append(node)
            self.tensors[out_name] = TensorSpec(out_name, (arr.shape[0],), None)  # typed by _set_bias
            self.retypable.add(out_name)
        self.values[out_name] = Act(out_name)
        if bias is not None:
            self._set_bias(node, bias, beta)
        else:
            self._set_bias(node, None)
            self.biasless[out_name] = node

    def _set_bias(self, node: Dense, bias: Optional[Union[Const, QConst]], beta: float = 1.0) -> None:
        """Attach a bias to ``node`` and (for fixed point) recompute the exact output type."""
        xs = self.tensors[node.input]
        if bias is not None:
            bias = self._bias_vector(bias, node.out_features)
        if xs.is_float:
            if bias is not None:
                node.bias = (self._float_weights(bias, "bias") * np.float32(beta)).astype(np.float32)
            return
        if bias is not None:
            node.bias, node.bias_type, k = self._fixed_bias(bias, xs.dtype.frac + node.weight_type.frac)
            self._shift_weights(node, k)
        dtype = dense_output_type(xs.dtype, node.weight, node.weight_type, node.bias, node.bias_type)
        self.tensors[node.output] = TensorSpec(node.output, (node.out_features,), dtype)

    def _bias_vector(self, bias: Union[Const, QConst], n_out: int) -> Union[Const, QConst]:
        """Biases arrive as (out,), (1, out) or a scalar (ONNX broadcasting): bring them to (out,)."""
        arr = bias.array if isinstance(bias, Const) else bias.codes
        if arr.size not in (1, n_out) or (arr.size == n_out and arr.shape[-1:] != (n_out,)) or arr.ndim > 2:
            raise self._fail(f"bias shape mismatch: expected ({n_out},) (or broadcastable to it), found {arr.shape}")
        vec = np.broadcast_to(arr.reshape(-1), (n_out,)).copy()
        if isinstance(bias, Const):
            return Const(vec, bias.elem)
        scale = None if bias.scale is None else np.broadcast_to(bias.scale.reshape(-1), (n_out,)).copy()
        return QConst(vec, bias.dtype, scale)

    def _scaled_layer(self, x: Act, w: QConst, bias, out_name: str, make, channel_shape: tuple[int, ...],
                      spec_shape: Optional[tuple[int, ...]] = None) -> None:
        """A Dense or Conv whose input or weights have a non-power-of-two scale: ``make(name, codes)`` on the codes
        without the bias, its exact output an accumulator the next quantizer requantizes (``onnx_scales``)."""
        xs = self._spec(x)
        c_out = channel_shape[0]
        codes = w.codes.astype(np.int64)
        scale = np.ones(codes.shape) if w.scale is None else np.broadcast_to(w.scale, codes.shape)
        rows = scale.reshape(c_out, -1)
        if np.any(rows != rows[:, :1]):
            raise self._fail("the weight scale varies within an output channel; expected per-tensor or per-output-"
                             "channel weight scales")
        acc_name = f"{out_name}_acc"
        dtype = dense_output_type(xs.dtype, codes.reshape(c_out, -1), w.dtype, None, None)
        self._emit(make(acc_name, codes), TensorSpec(acc_name, spec_shape or channel_shape, dtype))
        real_bias = None
        if bias is not None:
            vec = self._bias_vector(bias, c_out)
            real_bias = vec.array.astype(np.float64) if isinstance(vec, Const) else vec.real()
        step = self._tensor_scale(x.tensor) * rows[:, 0].astype(np.float64)
        self.values[out_name] = Acc(acc_name, step, real_bias)
        self.approximate = True

    def _shift_weights(self, node, k: int) -> None:
        """Weight codes k bits finer (times 2**k, frac + k): the same real weights on the grid a float bias needs."""
        if k:
            t = node.weight_type
            node.weight = node.weight.astype(np.int64) << k
            node.weight_type = FixedType(t.width + k, t.integer, t.signed, t.rounding, t.overflow)

    def _fixed_bias(self, bias: Union[Const, QConst], accum_frac: int) -> tuple[np.ndarray, FixedType, int]:
        """A bias must sit on the accumulator's grid 2**-(frac(x)+frac(W)) or coarser, exactly; outside
        ``--strict`` a float bias that does not takes the weights k bits finer (the third value) or is rounded."""
        if isinstance(bias, QConst) and bias.scale is not None and not self.options.strict:
            return self._float_bias_codes(bias.real(), accum_frac)
        if isinstance(bias, QConst):
            if bias.dtype.frac > accum_frac:
                raise self._fail(f"bias type {bias.dtype} has {bias.dtype.frac} fractional bits, finer than the "
                                 f"accumulator's {accum_frac} (frac(x) + frac(W)); quantize the bias with scale "
                                 f"2**-{accum_frac} = scale(x) * scale(W)")
            return bias.codes.astype(np.int64), bias.dtype, 0
        real = bias.array.astype(np.float64)
        codes = np.ldexp(real, accum_frac)
        if np.any(codes != np.round(codes)) and not self.options.strict:
            return self._float_bias_codes(real, accum_frac)
        if np.any(codes != np.round(codes)):
            i = int(np.argmax(codes != np.round(codes)))
            raise self._fail(
                f"float bias value {real[i]!r} (index {i}) is not a multiple of 2**-{accum_frac}, the grid of the "
                "accumulator (scale(x) * scale(W)); it cannot be added exactly. Quantize the bias in the model "
                f"(Brevitas Int32Bias / QONNX Quant or int32 DequantizeLinear with scale 2**-{accum_frac})")
        q = codes.astype(np.int64)
        return q, holding_type(int(q.min(initial=0)), int(q.max(initial=0)), accum_frac, Rounding.RND_CONV), 0

    def _float_weights(self, w: Union[Const, QConst], what: str) -> np.ndarray:
        if isinstance(w, Const):
            if w.array.dtype.kind not in "fiu":
                raise self._fail(f"{what} has unsupported dtype {w.array.dtype}")
            return w.array.astype(np.float32)
        if w.scale is not None:  # as onnxruntime dequantizes: float32 codes times the float32 scale
            return (w.codes.astype(np.float32) * np.asarray(w.scale, dtype=np.float32)).astype(np.float32)
        real = w.real()
        f32 = real.astype(np.float32)
        if np.any(f32.astype(np.float64) != real):
            raise self._fail(f"dequantized {what} needs more than float32's 24-bit mantissa; with a float input "
                             "the layer runs in float32: quantize the input too")
        return f32

    # -- quantizers ----------------------------------------------------------------------------------
    def _qdq_params(self, n: onnx.NodeProto) -> tuple[np.ndarray, np.ndarray, int]:
        """(scale, zero point, integer element type) of a QuantizeLinear/DequantizeLinear."""
        at = self._attrs(n)
        if at.get("block_size", 0):
            raise self._fail("blocked quantization (block_size) is not supported; use per-tensor or per-axis")
        scale = self._const(n.input[1], "scale").array
        if len(n.input) > 2 and n.input[2]:
            zp_c = self._const(n.input[2], "zero point")
            zp, elem = zp_c.array, zp_c.elem
        else:  # ONNX: no zero point means 0 of type uint8 (or output_dtype from opset 21)
            zp, elem = np.zeros((), np.int64), int(at.get("output_dtype", 0) or TensorProto.UINT8)
        if elem not in INT_RANGES:
            raise self._fail(f"quantized type {TensorProto.DataType.Name(elem)} is not supported; expected one of "
                             f"{', '.join(TensorProto.DataType.Name(e) for e in INT_RANGES)}")
        if zp.size not in (1, scale.size):
            raise self._fail(f"zero point has {zp.size} values but scale has {scale.size}; expected equal counts")
        return scale, zp.astype(np.int64), elem

    def _qdq_grid(self, n: onnx.NodeProto, elem: int, scale: np.ndarray, zp: np.ndarray,
                  shape: Optional[tuple[int, ...]]) -> _Grid:
        """The grid of a Q/DQ node, broadcast to a constant's ``shape`` (``None``: an activation)."""
        s, z = self._per_axis(scale, zp, shape, int(self._attrs(n).get("axis", 1)))
        lo, hi = INT_RANGES[elem]
        return self._grid(s, z, lo, hi, Rounding.RND_CONV)

    def _grid(self, scale: np.ndarray, zp: np.ndarray, lo: int, hi: int, rounding: Optional[Rounding]) -> _Grid:
        """A power-of-two scale is a binary point; any other is kept beside integer codes (refused when strict)."""
        s = np.asarray(scale, dtype=np.float64)
        if self.options.strict or not np.all(np.isfinite(s)) or np.any(s <= 0) or is_pow2(s):
            return _Grid(_pow2_fracs(s, self._where()), zp, lo, hi, rounding)
        return _Grid(np.zeros(s.shape, np.int64), zp, lo, hi, rounding, scale=s)

    @staticmethod
    def _divided(x: np.ndarray, g: _Grid) -> np.ndarray:
        """``x / scale`` as the source computes it: an exact shift for 2**-F, else a float32 division (as
        onnxruntime and the QONNX reference do)."""
        if g.scale is None:
            return np.ldexp(x.astype(np.float64), g.frac)
        return (x.astype(np.float32) / g.scale.astype(np.float32)).astype(np.float64)

    def _per_axis(self, scale: np.ndarray, zp: np.ndarray, shape, axis: int) -> tuple[np.ndarray, np.ndarray]:
        if scale.size == 1:
            s, z = scale.reshape(()), zp.reshape(())
            return (s, z) if shape is None else (np.broadcast_to(s, shape), np.broadcast_to(z, shape))
        if shape is None:
            raise self._fail(f"per-axis scale of {scale.size} values on an activation; expected one scale per "
                             "tensor for activations")
        axis = axis % len(shape)
        if scale.ndim != 1 or scale.size != shape[axis]:
            raise self._fail(f"per-axis scale of shape {scale.shape} does not match axis {axis} of a tensor of "
                             f"shape {shape}; expected {shape[axis]} scales")
        view = [1] * len(shape)
        view[axis] = shape[axis]
        z = zp.reshape(view) if zp.size > 1 else zp.reshape(())
        return np.broadcast_to(scale.reshape(view), shape), np.broadcast_to(z, shape)

    def _quantize_linear(self, n: onnx.NodeProto) -> None:
        v = self._value_or_acc(n.input[0])
        scale, zp, elem = self._qdq_params(n)
        if isinstance(v, QConst):
            raise self._fail("QuantizeLinear of an already dequantized constant is not supported")
        if isinstance(v, Const):
            g = self._qdq_grid(n, elem, scale, zp, v.array.shape)
            # ONNX: saturate(round_half_even(x / scale) + zero_point); x / 2**-F is exact.
            q = np.rint(self._divided(v.array, g)) + g.zero_point
            self.values[n.output[0]] = Const(np.clip(q, g.lo, g.hi).astype(np.int64), elem)
            return
        g = self._qdq_grid(n, elem, scale, zp, None)
        if self.options.strict:
            tensor = self._quantize_activation(n.input[0], v, self._activation_type(g), n.output[0])
        else:
            tensor = self._quantize_grid(n.input[0], g, n.output[0])
        self.values[n.output[0]] = Codes(tensor, scale, zp, elem)

    def _quantize_grid(self, onnx_name: str, g: _Grid, out: str) -> str:
        """An activation onto a quantizer's grid, whatever its scale (``onnx_scales``)."""
        zp = int(g.zero_point)
        s_out = 1.0 if g.scale is None else float(g.scale)
        return self._quantize_to(onnx_name, self._value_or_acc(onnx_name), s_out, int(g.frac), g.lo - zp,
                                 g.hi - zp, g.rounding, out)

    def _dequantize_linear(self, n: onnx.NodeProto) -> None:
        v = self.values.get(n.input[0])
        if isinstance(v, Codes):
            scale, zp, _ = self._qdq_params(n)
            same = np.array_equal(scale.ravel(), v.scale.ravel()) and np.array_equal(zp.ravel(), v.zero_point.ravel())
            if not same:
                raise self._fail(f"dequantizes with scale {scale.ravel().tolist()}, zero point {zp.ravel().tolist()} "
                                 f"but its QuantizeLinear used {v.scale.ravel().tolist()}, "
                                 f"{v.zero_point.ravel().tolist()}; expected the same parameters on both sides of a "
                                 "Q/DQ pair")
            self.values[n.output[0]] = Act(v.tensor)
            return
        if not isinstance(v, Const) or v.elem not in INT_RANGES:
            found = {type(None): "nothing", Const: "a non-integer constant", Act: "a float tensor",
                     QConst: "an already dequantized constant"}[type(v)]
            raise self._fail(f"expected integer codes (an integer initializer or a QuantizeLinear output), found "
                             f"{found}; quantized graph inputs are not supported: take a float input and quantize "
                             "it in the graph")
        scale, zp, _ = self._qdq_params(n)
        g = self._qdq_grid(n, v.elem, scale, zp, v.array.shape)
        self.values[n.output[0]] = self._quantized_constant(v.array.astype(np.int64), g)

    def _quant(self, n: onnx.NodeProto) -> None:
        """QONNX Quant: inputs (x, scale, zeropt, bitwidth); see the module docstring for the semantics."""
        if len(n.input) != 4:
            raise self._fail(f"expected 4 inputs (x, scale, zeropt, bitwidth), found {len(n.input)}")
        mode = str(self._attrs(n).get("rounding_mode", "ROUND")).upper()
        if mode not in QONNX_ROUNDING and mode not in QONNX_ROUNDING_CONST_ONLY:
            raise self._fail(f"rounding_mode '{mode}' is unknown; expected one of "
                             f"{', '.join(sorted((*QONNX_ROUNDING, *QONNX_ROUNDING_CONST_ONLY)))}")
        lo, hi = self._quant_range(n)
        x = self._value_or_acc(n.input[0])
        scale = self._const(n.input[1], "scale").array
        zeropt = _integral(self._const(n.input[2], "zeropt").array, self._where(), "zeropt")
        if isinstance(x, QConst):
            raise self._fail("Quant of an already quantized constant is not supported")
        if isinstance(x, Const):
            self.values[n.output[0]] = self._quant_constant(x.array, scale, zeropt, lo, hi, mode)
            return
        if scale.size != 1 or zeropt.size != 1:
            raise self._fail(f"per-channel scale/zeropt ({scale.size}/{zeropt.size} values) on an activation; "
                             "expected per-tensor quantization of activations")
        if mode in QONNX_ROUNDING_CONST_ONLY:
            raise self._fail(f"rounding_mode '{mode}' on an activation has no fixed-point (ap_fixed) rounding "
                             f"equivalent; supported on activations: {', '.join(sorted(QONNX_ROUNDING))}. "
                             "Retrain with ROUND (or FLOOR)")
        g = self._grid(scale.reshape(()), zeropt.reshape(()), lo, hi, QONNX_ROUNDING[mode])
        if self.options.strict:
            self.values[n.output[0]] = Act(self._quantize_activation(n.input[0], x, self._activation_type(g),
                                                                     n.output[0]))
        else:
            self.values[n.output[0]] = Act(self._quantize_grid(n.input[0], g, n.output[0]))

    def _quant_range(self, n: onnx.NodeProto) -> tuple[int, int]:
        """[min_int, max_int] of a Quant node (QONNX spec): narrow drops the most negative signed code, or
        the largest unsigned one."""
        at = self._attrs(n)
        signed, narrow = bool(at.get("signed", 1)), bool(at.get("narrow", 0))
        bits = self._const(n.input[3], "bitwidth").array.ravel()
        if bits.size != 1 or float(bits[0]) != int(bits[0]) or int(bits[0]) < 1:
            raise self._fail(f"bitwidth must be one positive integer, found {bits.tolist()}")
        b = int(bits[0])
        if b == 1 and signed:
            raise self._fail("a signed 1-bit Quant is bipolar (+-1) quantization, which has no fixed-point "
                             "equivalent; use bitwidth >= 2 (or unsigned 1-bit)")
        if signed:
            return -(1 << (b - 1)) + int(narrow), (1 << (b - 1)) - 1
        return 0, (1 << b) - 1 - int(narrow)

    def _quant_constant(self, x: np.ndarray, scale: np.ndarray, zeropt: np.ndarray, lo: int, hi: int,
                        mode: str) -> QConst:
        """Evaluate Quant on an initializer: any rounding mode is exact here, the codes are computed once."""
        try:
            s_full, z_full = np.broadcast_to(scale, x.shape), np.broadcast_to(zeropt, x.shape)
        except ValueError:
            raise self._fail(f"scale {scale.shape} / zeropt {zeropt.shape} do not broadcast to the quantized "
                             f"tensor's shape {x.shape}") from None
        g = self._grid(s_full, z_full, lo, hi, QONNX_ROUNDING.get(mode))
        v = self._divided(x, g) + z_full  # x / 2**-F: exact
        # The spec clamps before rounding; with integer bounds and a monotone rounding the order is immaterial.
        return self._quantized_constant(_round_qonnx(np.clip(v, lo, hi), mode).astype(np.int64), g)

    def _activation_type(self, g: _Grid) -> FixedType:
        zp = int(g.zero_point)
        t = range_type(g.lo - zp, g.hi - zp, int(g.frac), g.rounding)
        if t is None:
            raise self._fail(
                f"codes in [{g.lo}, {g.hi}] with zero point {zp} give the value range [{g.lo - zp}, {g.hi - zp}] "
                "x scale, which no fixed-point type has (expected [0, 2**W-1], [-2**(W-1), 2**(W-1)-1] or "
                "[-(2**(W-1)-1), 2**(W-1)-1]); it cannot be represented exactly. Use zero point 0 (symmetric "
                "quantization; uint8 with zero point 128 also works) or unsigned narrow=0")
        return t

    def _quantize_activation(self, onnx_name: str, v: Act, dtype: FixedType, out_name: str) -> str:
        """Type ``v`` with ``dtype``: a Quantize (float input), a retype of the producer, or a Requantize."""
        spec = self._spec(v)
        if spec.is_float:
            out = TensorSpec(out_name, spec.shape, dtype)
            return self._emit(Quantize(self._name(), (v.tensor,), (out_name,)), out).tensor
        if self._may_retype(onnx_name, v):
            self._retype(v.tensor, dtype)
            return v.tensor
        out = TensorSpec(out_name, spec.shape, dtype)
        return self._emit(Requantize(self._name(), (v.tensor,), (out_name,)), out).tensor

    def _quantized_constant(self, q: np.ndarray, g: _Grid) -> QConst:
        """Codes on per-element grids -> one type: every element moved onto the finest grid (exact shifts)."""
        frac = np.broadcast_to(g.frac, q.shape)
        zp = np.broadcast_to(g.zero_point, q.shape)
        if g.scale is not None:  # codes less the zero point, each worth its scale
            codes = (q - zp).astype(np.int64)
            lo, hi = int(np.min(g.lo - zp, initial=0)), int(np.max(g.hi - zp, initial=0))
            return QConst(codes, holding_type(lo, hi, 0, g.rounding or Rounding.TRN),
                          np.broadcast_to(g.scale, q.shape).astype(np.float64))
        top = int(frac.max(initial=0)) if q.size else 0
        shift = (top - frac).astype(np.int64)
        if int(shift.max(initial=0)) > 30:
            raise self._fail(f"per-channel scales span 2**{int(shift.max())}: too wide to share one fixed-point "
                             "type; use scales within a factor 2**30 of each other")
        codes = (q - zp) << shift
        lo = int(((g.lo - zp) << shift).min(initial=0))
        hi = int(((g.hi - zp) << shift).max(initial=0))
        rounding = g.rounding if g.rounding is not None else Rounding.TRN
        return QConst(codes.astype(np.int64), holding_type(lo, hi, top, rounding))

    # -- outputs ------------------------------------------------------------------------------------
    def _outputs(self) -> list[str]:
        """Graph outputs keep their ONNX names: the IR tensor behind each one is renamed to it."""
        graph_inputs = {i.name for i in self.g.input}
        outs: list[str] = []
        for o in self.g.output:
            v = self.values.get(o.name)
            where = f"{self.source}: graph output '{o.name}'"
            if isinstance(v, Acc):
                v = self._real(o.name, v)
            if not isinstance(v, (Act, Codes)):
                raise OnnxFrontendError(f"{where}: is {'a constant' if v is not None else 'never produced'}; "
                                        "expected a tensor computed from the graph input")
            if isinstance(v, Codes) and np.any(v.zero_point != 0):
                raise OnnxFrontendError(f"{where}: integer codes with a non-zero zero point; expected the graph to "
                                        "end in DequantizeLinear (or zero point 0)")
            if v.tensor in graph_inputs:
                raise OnnxFrontendError(f"{where}: is the graph input '{v.tensor}' unchanged; nothing to compile")
            if v.tensor in outs:
                raise OnnxFrontendError(f"{where}: is the same tensor as output '{v.tensor}'; expected distinct "
                                        "outputs")
            if self._tensor_scale(v.tensor) != 1.0:  # codes of a non-power-of-two grid: their real values
                if v.tensor == o.name:
                    self._rename(v.tensor, f"{o.name}_codes")
                self._rescale_real(v.tensor, o.name)
            elif v.tensor != o.name:
                self._rename(v.tensor, o.name)
            outs.append(o.name)
        return outs
