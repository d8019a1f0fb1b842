"""The bitforge IR: a typed dataflow graph of fixed-point (or explicitly float) tensors.

The IR is the contract between frontends, passes and backends (see ``docs/ir.md``). A :class:`Graph`
holds per-sample tensor specs (the batch dimension is implicit), nodes in topological order, and the
graph's inputs and outputs. Arrays (weights, coefficients) live on the nodes as numpy arrays: integer
codes of the node's declared :class:`~bitforge.toolchain.fixed.FixedType`, or float32 for float nodes.

On disk a graph is ``model.json`` (structure, types, attributes) plus ``weights.safetensors`` (arrays,
keyed ``<node>.<field>``); :func:`save` and :func:`load` round-trip it exactly.
"""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Iterable, Optional, Union

import numpy as np

from .errors import BitforgeError, IRError
from .fixed import FixedType, FixedTypeError, parse_type

FORMAT = "bitforge-ir"
VERSION = 1

#: A tensor's element type: a fixed-point type, or ``None`` for float32.
DType = Optional[FixedType]


@dataclass(frozen=True)
class TensorSpec:
    """One tensor: per-sample ``shape`` (batch implicit) and element type (``None`` = float32)."""

    name: str
    shape: tuple[int, ...]
    dtype: DType = None

    @property
    def is_float(self) -> bool:
        return self.dtype is None

    def type_str(self) -> str:
        return "float32" if self.dtype is None else self.dtype.to_short()


# -- nodes -----------------------------------------------------------------------------------------

@dataclass
class Node:
    """Base of all ops. Subclasses add their attributes as dataclass fields.

    Fields holding ``np.ndarray`` are stored in safetensors, ``FixedType`` fields as type strings,
    everything else as JSON.
    """

    OP: ClassVar[str] = ""
    #: Input tensors the op reads (every op writes one output).
    ARITY: ClassVar[int] = 1
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    @property
    def input(self) -> str:
        return self.inputs[0]

    @property
    def output(self) -> str:
        return self.outputs[0]

    def array_fields(self) -> dict[str, np.ndarray]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if isinstance(getattr(self, f.name), np.ndarray)}

    def attributes(self) -> dict:
        """JSON-able attributes (types as strings), arrays excluded."""
        out = {}
        for f in dataclasses.fields(self):
            if f.name in ("name", "inputs", "outputs"):
                continue
            v = getattr(self, f.name)
            if isinstance(v, np.ndarray):
                continue
            out[f.name] = v.to_short() if isinstance(v, FixedType) else (list(v) if isinstance(v, tuple) else v)
        return out

    def describe(self) -> str:
        return f"{self.OP} '{self.name}'"

    def need(self, field: str, error: type[BitforgeError] = IRError, before: str = "first") -> FixedType:
        """The type in ``field`` (``accum_type``, ``weight_type``, ...). Frontends may leave these unset for
        the precision pass to infer, so a stage that meets an unset one raises ``error`` (its own error class:
        the caller can tell which stage refused), naming the node, the field and the pass to run ``before``
        it (e.g. "before generating RTL")."""
        value = getattr(self, field)
        if value is None:
            raise error(f"{self.describe()}: {field} is not set; run the precision pass "
                        f"(bitforge.toolchain.passes.precision.infer_precision) {before}")
        return value


@dataclass
class Quantize(Node):
    """Float tensor -> fixed-point codes of the output tensor's type (its rounding and overflow)."""

    OP: ClassVar[str] = "Quantize"


@dataclass
class Requantize(Node):
    """Fixed -> fixed: align the binary point with the output type's rounding, then its overflow."""

    OP: ClassVar[str] = "Requantize"


@dataclass
class ReLU(Node):
    """max(x, 0), then requantize to the output tensor's type."""

    OP: ClassVar[str] = "ReLU"


@dataclass
class Add(Node):
    """Element-wise exact sum of two tensors of the same shape, then requantize to the output type."""

    OP: ClassVar[str] = "Add"
    ARITY: ClassVar[int] = 2


@dataclass
class Dense(Node):
    """y = W x + b. ``weight`` is ``(out, in)``.

    Fixed point, hls4ml's accumulation (``docs/ir.md``, :mod:`bitforge.toolchain.accumulate`): the accumulator
    starts at the bias converted to ``accum_type``; each exact product is converted to ``accum_type`` and added in
    input order, each partial sum converted again; then requantized to the output tensor's type. With an
    accumulator at ``frac(x) + frac(W)`` that WRAPs or cannot overflow (what the precision pass infers) this is the
    exact sum with one overflow.
    """

    OP: ClassVar[str] = "Dense"
    weight: np.ndarray = None
    bias: Optional[np.ndarray] = None
    weight_type: DType = None
    bias_type: DType = None
    accum_type: DType = None

    @property
    def in_features(self) -> int:
        return int(self.weight.shape[1])

    @property
    def out_features(self) -> int:
        return int(self.weight.shape[0])


@dataclass
class LowRankDense(Node):
    """y = U (V x) + b with ``v`` ``(rank, in)`` and ``u`` ``(out, rank)``: two Dense stages.

    The intermediate ``h = V x`` is accumulated in ``accum_v_type`` and requantized to ``mid_type``;
    the second stage follows :class:`Dense` rules with ``accum_type``.
    """

    OP: ClassVar[str] = "LowRankDense"
    u: np.ndarray = None
    v: np.ndarray = None
    bias: Optional[np.ndarray] = None
    u_type: DType = None
    v_type: DType = None
    bias_type: DType = None
    mid_type: DType = None
    accum_v_type: DType = None
    accum_type: DType = None

    @property
    def rank(self) -> int:
        return int(self.v.shape[0])

    @property
    def in_features(self) -> int:
        return int(self.v.shape[1])

    @property
    def out_features(self) -> int:
        return int(self.u.shape[0])


@dataclass
class KANLayer(Node):
    """Pure-spline KAN layer: y_o = sum_i sum_j c[o, i, j] B_{j,k}(x_i) on a uniform grid.

    ``coeffs`` is ``(out, in, G + k)``. Grid: G cells on [grid_lo, grid_hi), spline order k.
    Fixed point (see ``docs/ir.md``): ``s = ((x - lo_code) * index_mult) >> index_shift`` is the
    position in units of 2**-u_bits cells, clamped to [0, G * 2**u_bits - 1]; cell = s >> u_bits,
    u = s & (2**u_bits - 1); the k+1 basis weights come from :func:`bitforge.toolchain.bspline.basis_table`
    (``basis_type``, partition of unity exact; ``basis_impl`` "table" rounds the exact bases, "closed_form"
    is the floor arithmetic of the closed-form circuit, k <= 3); products with the coefficients are exact
    and summed over all inputs in ``accum_type``, then requantized to the output type.
    """

    OP: ClassVar[str] = "KANLayer"
    coeffs: np.ndarray = None
    grid_lo: float = -1.0
    grid_hi: float = 1.0
    grid_size: int = 5
    order: int = 3
    coeff_type: DType = None
    basis_type: DType = None
    u_bits: int = 0
    index_lo: int = 0  # grid_lo as a code of the input type
    index_mult: int = 1
    index_shift: int = 0
    accum_type: DType = None
    basis_impl: str = "table"

    @property
    def in_features(self) -> int:
        return int(self.coeffs.shape[1])

    @property
    def out_features(self) -> int:
        return int(self.coeffs.shape[0])

    @property
    def n_basis(self) -> int:
        return self.grid_size + self.order


# -- the ops of the models people bring (issue 18): convolutions, pooling, activations, tables ------------------
#
# Per-sample tensors are channels first, as in PyTorch and ONNX: (C, L) for 1-D, (C, H, W) for 2-D data, (C,)
# for features. "Channel" below is axis 0 of the per-sample shape.


@dataclass
class Conv(Node):
    """N-D convolution (N = 1 or 2): ``weight`` is ``(C_out, C_in / groups, *kernel)``.

    Every output position is a :class:`Dense` stage over its window (padding reads code 0; the taps in C order
    of ``(C_in / groups, *kernel)``), accumulated by Dense's rule, then requantized to the output type.
    ``padding`` is ONNX's ``pads``: the begin pad of every spatial axis, then the end pad of every one.
    """

    OP: ClassVar[str] = "Conv"
    weight: np.ndarray = None
    bias: Optional[np.ndarray] = None
    stride: tuple = (1,)
    padding: tuple = (0, 0)
    dilation: tuple = (1,)
    groups: int = 1
    weight_type: DType = None
    bias_type: DType = None
    accum_type: DType = None

    @property
    def spatial(self) -> int:
        return int(self.weight.ndim - 2)

    @property
    def kernel(self) -> tuple[int, ...]:
        return tuple(int(k) for k in self.weight.shape[2:])

    @property
    def out_channels(self) -> int:
        return int(self.weight.shape[0])


@dataclass
class Pool(Node):
    """Max or average pooling over windows of the spatial axes (1-D or 2-D), per channel.

    ``mode`` "max": the window's largest code (padding is ignored), requantized. ``mode`` "avg": the exact sum
    of the window (padding reads 0) times ``R_n = round(2**recip_frac / n)`` (ties to even), ``n`` the
    window's divisor (all ``prod(kernel)`` elements with ``count_include_pad``, else only the real ones), then
    requantized from ``frac(x) + recip_frac``. When every divisor is a power of two no larger than
    ``2**recip_frac`` this is the exact mean. A global pool is a window as large as the input.
    """

    OP: ClassVar[str] = "Pool"
    mode: str = "max"
    kernel: tuple = (2,)
    stride: tuple = (2,)
    padding: tuple = (0, 0)
    count_include_pad: bool = False
    recip_frac: int = 16


@dataclass
class ScaleShift(Node):
    """Per-channel ``y = x * scale[c] + shift[c]``: an unfolded BatchNorm, or a requantize multiplier
    ``M0 * 2**-n`` (``scale`` holds M0, ``scale_type`` has n fractional bits).

    Fixed point: the product is exact at ``frac(x) + frac(scale)``, the shift is aligned to it (its frac must
    not be finer), the sum is held in ``accum_type`` (overflow applied), then requantized to the output type.
    """

    OP: ClassVar[str] = "ScaleShift"
    scale: np.ndarray = None
    shift: Optional[np.ndarray] = None
    scale_type: DType = None
    shift_type: DType = None
    accum_type: DType = None


@dataclass
class LeakyReLU(Node):
    """``x`` where ``x >= 0``, else ``x * alpha[c]`` (PReLU: one slope per channel; LeakyReLU: ``alpha`` has
    one element). Fixed point: exact at ``frac(x) + frac(alpha)`` (a power-of-two slope is exact too), then
    requantized to the output type."""

    OP: ClassVar[str] = "LeakyReLU"
    alpha: np.ndarray = None
    alpha_type: DType = None


@dataclass
class Clip(Node):
    """``min(max(x, lo), hi)``, then requantized (ReLU6: [0, 6], HardTanh: [-1, 1]). ``lo``/``hi`` are real
    bounds (None: unbounded); in fixed point they act as codes of the input type: ``ceil(lo * 2**frac)``
    and ``floor(hi * 2**frac)``."""

    OP: ClassVar[str] = "Clip"
    lo: Optional[float] = None
    hi: Optional[float] = None


@dataclass
class HardSigmoid(Node):
    """``h(x) = min(max(alpha x + beta, 0), 1)`` (ONNX: alpha 0.2, PyTorch: 1/6, beta 0.5). ``swish`` True
    makes it HardSwish, ``x * h(x)``. Fixed point: ``alpha_code`` and ``beta_code`` are codes of
    ``alpha_type``; ``t = x * alpha_code + beta_code * 2**frac(x)`` is exact at ``F = frac(x) + frac(alpha)``,
    clamped to ``[0, 2**F]``; HardSigmoid requantizes ``t`` from F, HardSwish requantizes ``x * t`` from
    ``frac(x) + F``. ``alpha``/``beta`` keep the real values (the float rule and reports)."""

    OP: ClassVar[str] = "HardSigmoid"
    alpha: float = 0.2
    beta: float = 0.5
    swish: bool = False
    alpha_type: DType = None
    alpha_code: int = 0
    beta_code: int = 0


@dataclass
class Table(Node):
    """A smooth element-wise function (``function``: see :data:`bitforge.toolchain.tables.FUNCTIONS`) as a
    lookup table, hls4ml's way. Fixed point: ``i = clamp((x - index_lo) >> index_shift, 0, len(table) - 1)``
    (floor shift), ``y = table[i]``: ``table`` holds codes of the output type, so the golden model, ONNX
    (Gather) and RTL (a ROM) compute the same bits. A float node has no table and applies the function."""

    OP: ClassVar[str] = "Table"
    function: str = "sigmoid"
    table: Optional[np.ndarray] = None
    index_lo: int = 0
    index_shift: int = 0


@dataclass
class Softmax(Node):
    """Softmax over the last axis, hls4ml's "stable" way with two tables.

    Fixed point: ``d_c = max(x) - x_c`` (codes, >= 0); ``e_c = exp_table[min(d_c >> exp_shift, len - 1)]``
    (codes of ``exp_type``, ~``exp(-d)``); ``S = sum_c e_c`` exact; ``r = recip_table[clamp((S - recip_lo) >>
    recip_shift, 0, len - 1)]`` (codes of ``recip_type``, ~``1 / S``); ``y_c`` = ``e_c * r`` requantized from
    ``frac(exp) + frac(recip)`` to the output type.
    """

    OP: ClassVar[str] = "Softmax"
    exp_table: Optional[np.ndarray] = None
    exp_type: DType = None
    exp_shift: int = 0
    recip_table: Optional[np.ndarray] = None
    recip_type: DType = None
    recip_lo: int = 0
    recip_shift: int = 0


@dataclass
class ArgMax(Node):
    """Index of the largest element of the last axis (the first one on ties), as an integer code of the
    output type (``ufixed<B,B>``): a classifier's decision without its softmax. Output shape: the input's
    with the last axis 1."""

    OP: ClassVar[str] = "ArgMax"


@dataclass
class Reshape(Node):
    """The same elements in C order under the output tensor's shape (Flatten, Reshape): moves no data."""

    OP: ClassVar[str] = "Reshape"


@dataclass
class Transpose(Node):
    """Permutes the per-sample axes: output axis ``i`` is input axis ``perm[i]`` (wiring in hardware)."""

    OP: ClassVar[str] = "Transpose"
    perm: tuple = (0,)


@dataclass
class Concat(Node):
    """Both inputs requantized to the output type, then joined along per-sample ``axis``."""

    OP: ClassVar[str] = "Concat"
    ARITY: ClassVar[int] = 2
    axis: int = 0


OPS: dict[str, type[Node]] = {c.OP: c for c in (Quantize, Requantize, ReLU, Add, Dense, LowRankDense, KANLayer,
                                                Conv, Pool, ScaleShift, LeakyReLU, Clip, HardSigmoid, Table,
                                                Softmax, ArgMax, Reshape, Transpose, Concat)}


# -- graph -------------------------------------------------------------------------------------------

@dataclass
class Graph:
    """Typed dataflow graph. ``nodes`` are in topological order (``validate`` checks it)."""

    name: str
    inputs: list[str]
    outputs: list[str]
    tensors: dict[str, TensorSpec]
    nodes: list[Node]
    metadata: dict = field(default_factory=dict)

    def tensor(self, name: str) -> TensorSpec:
        try:
            return self.tensors[name]
        except KeyError:
            raise IRError(f"tensor '{name}' is not declared in graph '{self.name}'") from None

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise IRError(f"no node named '{name}' in graph '{self.name}'")

    def consumers(self, tensor: str) -> list[Node]:
        return [n for n in self.nodes if tensor in n.inputs]

    @property
    def is_fixed(self) -> bool:
        """True when every tensor after the graph inputs is fixed point."""
        return all(not self.tensors[o].is_float for n in self.nodes for o in n.outputs)

    def copy(self) -> "Graph":
        """Deep copy (arrays included): passes return new graphs and never mutate their input."""
        nodes = [dataclasses.replace(n, **{k: v.copy() for k, v in n.array_fields().items()}) for n in self.nodes]
        return Graph(self.name, list(self.inputs), list(self.outputs), dict(self.tensors), nodes,
                     json.loads(json.dumps(self.metadata)))

    def parameter_count(self) -> int:
        return int(sum(a.size for n in self.nodes for a in n.array_fields().values()))

    def summary_rows(self) -> list[tuple[str, str, str, str, str]]:
        """(node, op, output shape, output type, parameters) per node, for ``bitforge inspect``."""
        rows = []
        for n in self.nodes:
            t = self.tensors[n.output]
            params = sum(a.size for a in n.array_fields().values())
            rows.append((n.name, n.OP, "x".join(map(str, t.shape)), t.type_str(), str(params)))
        return rows


def validate(g: Graph) -> Graph:
    """Check the IR's rules and return ``g``; raise :class:`IRError` naming the node and the problem."""
    from .validate import (
        check_graph,  # local import: validation rules live in their own module
    )

    check_graph(g)
    return g


# -- serialisation -----------------------------------------------------------------------------------

def to_json(g: Graph) -> dict:
    return {
        "format": FORMAT,
        "version": VERSION,
        "name": g.name,
        "inputs": list(g.inputs),
        "outputs": list(g.outputs),
        "tensors": [{"name": t.name, "shape": list(t.shape), "dtype": t.type_str()} for t in g.tensors.values()],
        "nodes": [
            {"op": n.OP, "name": n.name, "inputs": list(n.inputs), "outputs": list(n.outputs),
             "attributes": n.attributes(),
             "arrays": {k: f"{n.name}.{k}" for k in n.array_fields()}}
            for n in g.nodes
        ],
        "metadata": g.metadata,
    }


def arrays_of(g: Graph) -> dict[str, np.ndarray]:
    out = {}
    for n in g.nodes:
        for k, a in n.array_fields().items():
            if a.dtype == object:
                raise IRError(f"{n.describe()}: array '{k}' holds codes wider than 62 bits; "
                              "they cannot be stored (narrow the type)")
            out[f"{n.name}.{k}"] = np.ascontiguousarray(a)
    return out


def save(g: Graph, folder: Union[str, os.PathLike]) -> None:
    """Write ``model.json`` and ``weights.safetensors`` into ``folder`` (which must exist)."""
    from safetensors.numpy import save_file

    folder = Path(folder)
    (folder / "model.json").write_text(json.dumps(to_json(g), indent=2, sort_keys=False) + "\n")
    save_file(arrays_of(g), str(folder / "weights.safetensors"), metadata={"format": FORMAT})


def _parse_dtype(text: str, where: str) -> DType:
    if text in ("float32", "float", None):
        return None
    try:
        return parse_type(text)
    except FixedTypeError as e:
        raise IRError(f"{where}: {e}") from None


def from_json(doc: dict, arrays: dict[str, np.ndarray], source: str = "model.json") -> Graph:
    """The graph that ``doc`` (``model.json``) and ``arrays`` (``weights.safetensors``) describe, checked by
    :func:`validate`: a file edited by hand or truncated fails here with its name, not later in a backend."""
    if not isinstance(doc, dict):
        raise IRError(f"{source}: expected a JSON object (a bitforge IR file), found a {type(doc).__name__}; "
                      "compile the model again")
    g = None
    try:
        g = _graph_from_json(doc, arrays, source)
        return validate(g)
    except IRError as e:
        raise (e if g is None else IRError(f"{source}: {e}; compile the model again")) from None
    except (KeyError, TypeError, AttributeError, ValueError, IndexError) as e:
        what = f"missing field {e}" if isinstance(e, KeyError) else f"{type(e).__name__}: {e}"
        raise IRError(f"{source}: malformed bitforge IR file ({what}); compile the model again") from None


def _graph_from_json(doc: dict, arrays: dict[str, np.ndarray], source: str) -> Graph:
    if doc.get("format") != FORMAT:
        raise IRError(f"{source}: not a bitforge IR file (format field is {doc.get('format')!r}, expected {FORMAT!r})")
    if doc.get("version") != VERSION:
        raise IRError(f"{source}: IR version {doc.get('version')} is not supported (this bitforge reads {VERSION})")
    tensors = {t["name"]: TensorSpec(t["name"], tuple(int(s) for s in t["shape"]),
                                     _parse_dtype(t["dtype"], f"{source}: tensor '{t['name']}'"))
               for t in doc["tensors"]}
    nodes = []
    for nd in doc["nodes"]:
        cls = OPS.get(nd["op"])
        if cls is None:
            raise IRError(f"{source}: node '{nd.get('name')}' has unknown op '{nd['op']}'; known: {', '.join(OPS)}")
        kwargs = {}
        types = {f.name for f in dataclasses.fields(cls) if f.type in ("DType",) or f.name.endswith("_type")}
        tuples = {f.name for f in dataclasses.fields(cls) if isinstance(f.default, tuple)}
        for k, v in nd.get("attributes", {}).items():
            if k in types:
                kwargs[k] = _parse_dtype(v, f"{source}: node '{nd['name']}' attribute '{k}'") if v is not None else None
            else:
                kwargs[k] = tuple(v) if k in tuples and isinstance(v, list) else v
        for k, key in nd.get("arrays", {}).items():
            if key not in arrays:
                raise IRError(f"{source}: node '{nd['name']}' needs array '{key}', missing from weights.safetensors")
            kwargs[k] = arrays[key]
        nodes.append(cls(name=nd["name"], inputs=tuple(nd["inputs"]), outputs=tuple(nd["outputs"]), **kwargs))
    return Graph(doc["name"], list(doc["inputs"]), list(doc["outputs"]), tensors, nodes, doc.get("metadata", {}))


def load(folder: Union[str, os.PathLike]) -> Graph:
    """Read a graph written by :func:`save`."""
    from safetensors.numpy import load_file

    folder = Path(folder)
    mj, wf = folder / "model.json", folder / "weights.safetensors"
    for p in (mj, wf):
        if not p.is_file():
            raise IRError(f"{p}: missing; expected a bitforge output folder with model.json and weights.safetensors "
                          "(made by 'bitforge compile')")
    try:
        doc = json.loads(mj.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise IRError(f"{mj}: not valid JSON ({e}); compile the model again") from None
    except OSError as e:
        raise IRError(f"{mj}: cannot read ({e.strerror or e})") from None
    try:
        arrays = load_file(str(wf))
    except Exception as e:  # safetensors raises its own error types for truncated files
        raise IRError(f"{wf}: cannot read safetensors file ({e})") from None
    return from_json(doc, arrays, str(mj))


def sequential(name: str, input_spec: TensorSpec, layers: Iterable[tuple[Node, TensorSpec]]) -> Graph:
    """Build a chain graph from ``(node, output_spec)`` pairs; each node's input is the previous output."""
    tensors = {input_spec.name: input_spec}
    nodes = []
    prev = input_spec.name
    for node, spec in layers:
        node = dataclasses.replace(node, inputs=(prev,) + tuple(node.inputs[1:]), outputs=(spec.name,))
        tensors[spec.name] = spec
        nodes.append(node)
        prev = spec.name
    return Graph(name, [input_spec.name], [prev], tensors, nodes)
