"""hls4ml's HLSConfig, read as hls4ml users write it, and turned into bitforge's precision spec and HLS options.

``bitforge compile MODEL --hls-config CONFIG.{yml,yaml,json}`` reads the file before the model is loaded
(:func:`read_hls_config`: every key checked, none ignored unless it cannot change what is computed), then maps
it onto the graph (:meth:`HlsConfig.precision_spec`, :meth:`HlsConfig.reuse`, :meth:`HlsConfig.strategy`).
The file is either the bare HLSConfig (``{Model: ..., LayerType: ..., LayerName: ...}``) or hls4ml's project
configuration with the HLSConfig under ``HLSConfig`` beside ``Backend``, ``IOType``, ``ClockPeriod`` and ``Part``.

Precision is resolved per layer and variable as hls4ml's ``HLSConfig.get_precision`` does (model/graph.py):
``LayerName.<name>.Precision.<var>``, then that entry's ``default`` (a Precision given as one string is a
default), then the same two of ``LayerType.<class>``, then ``Model.Precision.<var>`` and its ``default``. The
variables: ``weight`` (a BatchNormalization's is ``scale``, a LeakyReLU's/PReLU's ``param``), ``bias``,
``result`` (the output: bitforge's ``act``, and a LowRankDense's ``mid``) and ``accum``. Names match without
regard to case, as hls4ml lowercases them. The result is a ``--precision`` spec: the Model entry as global
items (its default as a bare TYPE), and a ``NODE.FIELD`` override wherever a layer resolves to something else.

``LayerType`` keys are hls4ml's layer classes, which is what hls4ml matches them against (a PyTorch ReLU is an
``Activation`` there, so ``LayerType: {ReLU: ...}`` would do nothing in hls4ml and is refused with the class to
write). bitforge's ops belong to these classes: Input (the graph inputs), Dense (Dense and LowRankDense, which
the HLS backend writes as two Dense layers), Conv1D/Conv2D (Conv by its number of spatial axes),
Pooling1D/Pooling2D and GlobalPooling1D/GlobalPooling2D (Pool; global when its window is the whole input),
Activation (ReLU and the lookup-table functions), ParametrizedActivation (a LeakyReLU with one slope), PReLU (one
with a slope per channel), HardActivation (HardSigmoid), Softmax, BatchNormalization (ScaleShift), Merge (Add),
Concatenate, Reshape and Transpose. KANLayer, Clip and ArgMax have no hls4ml class: ``LayerName`` reaches them.

hls4ml's ``'auto'``: an accumulator's means "infer it" (bitforge's ``accum=auto``: the inferred accumulator is
exact, as hls4ml's is for a float model); a weight's or bias's means the model default (hls4ml takes a
quantizer's type, and a float model has none). A result's depends on the layer class in hls4ml (a Dense's
full-width sum, an activation's default), so bitforge asks for the type instead.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from ..errors import BitforgeError
from ..fixed import FixedType, FixedTypeError, Overflow, Rounding, parse_type
from ..ir import (
    Add,
    ArgMax,
    Concat,
    Conv,
    Dense,
    Graph,
    HardSigmoid,
    KANLayer,
    LeakyReLU,
    LowRankDense,
    Pool,
    ReLU,
    Reshape,
    ScaleShift,
    Softmax,
    Table,
    Transpose,
)
from .quantize import AUTO, PrecisionSpecError, parse_precision

__all__ = ["HlsConfigError", "HlsConfig", "LayerSettings", "read_hls_config", "parse_hls_config",
           "parse_hls_type", "HLS_CLASSES"]

#: The hls4ml layer classes LayerType may name: those :func:`hls_class` gives bitforge's ops.
HLS_CLASSES = ("Input", "Dense", "Conv1D", "Conv2D", "Pooling1D", "Pooling2D", "GlobalPooling1D", "GlobalPooling2D",
               "Activation", "ParametrizedActivation", "PReLU", "HardActivation", "Softmax", "BatchNormalization",
               "Merge", "Concatenate", "Reshape", "Transpose")
#: Names hls4ml's converters read from Keras/PyTorch/ONNX, and the hls4ml class LayerType must name instead
#: (hls4ml's ``layer_map`` and its PyTorch converter).
_ALIASES = {"inputlayer": "Input", "relu": "Activation", "sigmoid": "Activation", "tanh": "Activation",
            "leakyrelu": "ParametrizedActivation", "elu": "ParametrizedActivation", "qdense": "Dense",
            "linear": "Dense", "conv": "Conv1D or Conv2D", "qconv1d": "Conv1D", "qconv2d": "Conv2D",
            "maxpooling1d": "Pooling1D", "averagepooling1d": "Pooling1D", "maxpooling2d": "Pooling2D",
            "averagepooling2d": "Pooling2D", "globalmaxpooling1d": "GlobalPooling1D",
            "globalaveragepooling1d": "GlobalPooling1D", "globalmaxpooling2d": "GlobalPooling2D",
            "globalaveragepooling2d": "GlobalPooling2D", "batchnorm1d": "BatchNormalization",
            "batchnorm2d": "BatchNormalization", "qbatchnormalization": "BatchNormalization", "add": "Merge",
            "qactivation": "Activation", "flatten": "Reshape"}
#: hls4ml's HardActivation takes these slope and shift types whatever the configuration says (model/layers.py).
HARD_SLOPE_TYPE = FixedType(16, 0, False)
#: The Precision variables bitforge maps; the rest are refused with the reason in _REFUSED_VARS.
_VARS = ("default", "weight", "bias", "result", "accum", "scale", "param")
_TABLES = ("bitforge builds its own lookup tables (their size: --precision ...,table_size=N); remove the key")
_REFUSED_VARS = {
    "table": _TABLES, "exp_table": _TABLES, "inv_table": _TABLES, "inv_inp": _TABLES,
    "slope": "hls4ml types a HardActivation's slope ufixed<16,0> and shift ufixed<2,0> whatever the config says "
             "(bitforge gives a HardSigmoid's alpha and beta ufixed<16,0>); remove the key",
    "shift": "hls4ml types a HardActivation's slope ufixed<16,0> and shift ufixed<2,0> whatever the config says "
             "(bitforge gives a HardSigmoid's alpha and beta ufixed<16,0>); remove the key",
    "maximum": "it caps hls4ml's 'auto' types, while bitforge infers exact accumulators; give the accum types "
               "instead, or remove the key",
}
_LAYER_KEYS = ("Precision", "ReuseFactor", "Strategy", "Trace")
_MODEL_KEYS = ("Precision", "ReuseFactor", "Strategy", "BramFactor", "TraceOutput")
_REFUSED_LAYER_KEYS = {"table_size": _TABLES, "tablesize": _TABLES}
_CONFIG_KEYS = ("Model", "LayerType", "LayerName")
_PROJECT_KEYS = ("HLSConfig", "Backend", "IOType", "ClockPeriod", "Part")
_MODEL_FILE = "the model is the MODEL argument of bitforge compile; remove the key"
_REFUSED_TOP = {
    "OutputDir": "bitforge writes the project where -o says; remove the key",
    "ProjectName": "bitforge names the project; remove the key",
    "KerasJson": _MODEL_FILE, "KerasH5": _MODEL_FILE, "KerasModel": _MODEL_FILE, "OnnxModel": _MODEL_FILE,
    "PytorchModel": _MODEL_FILE, "InputShape": _MODEL_FILE,
    "InputData": "bitforge checks the C simulation against its own golden model; remove the key",
    "OutputPredictions": "bitforge checks the C simulation against its own golden model; remove the key",
    "XilinxPart": "hls4ml 1.x calls it Part; rename the key",
    "Flows": "bitforge runs hls4ml's flow itself; remove the key",
    "Optimizers": "bitforge runs hls4ml's flow itself; remove the key",
    "SkipOptimizers": "bitforge runs hls4ml's flow itself; remove the key",
}
_BACKENDS = {"vivado": "vivado", "vitis": "vitis"}
_IO_TYPES = {"io_parallel": "parallel", "io_stream": "stream"}
_STRATEGIES = ("latency", "resource")
_INT_TYPE = re.compile(r"\s*(ap_)?(u?)int\s*<\s*([^>]*)>\s*")

Value = Union[FixedType, str]  # a type or AUTO


class HlsConfigError(BitforgeError):
    """An HLSConfig bitforge cannot follow exactly; the message names the file, the key path and what to do."""


# -- types -------------------------------------------------------------------------------------------------------

def parse_hls_type(text: str) -> Value:
    """One hls4ml precision string as a :class:`FixedType`, or :data:`AUTO`.

    ``ap_fixed<W,I[,Q[,O[,N]]]>``, ``ap_ufixed<...>`` and the same without ``ap_`` go to :func:`parse_type`.
    ``ap_int<W>``/``int<W>`` (``ap_uint``/``uint``: unsigned) become ``fixed<W,W,TRN_ZERO,WRAP>``: hls4ml
    writes them as C++ ``ap_int``, which converts a value with a fraction the way C converts a double to an int
    (toward zero, ap_fixed_base::to_ap_int_base) and keeps the low W bits. One quirk of the headers is no
    rounding mode: ``ap_int_base(double)`` makes a negative double above -0.5 +1, so a C simulation should be fed
    an ap_int input's codes, not floats (tests/test_hls_config.py measures both).
    """
    if not isinstance(text, str):
        raise FixedTypeError(f"expected a type string such as 'ap_fixed<16,6>' or 'auto', found {text!r}")
    if text.strip().lower() == AUTO:
        return AUTO
    m = _INT_TYPE.fullmatch(text)
    if m:
        if not m[3].strip().isdigit() or int(m[3]) < 1:
            raise FixedTypeError(f"{text!r}: an integer type takes one argument, its width (e.g. ap_int<8>)")
        width = int(m[3])
        return FixedType(width, width, not m[2], Rounding.TRN_ZERO, Overflow.WRAP)
    try:
        return parse_type(text)
    except FixedTypeError as e:
        raise FixedTypeError(f"{e}; hls4ml's types bitforge reads: ap_fixed<W,I[,Q[,O]]>, ap_ufixed<...>, "
                             "ap_int<W>, ap_uint<W> (each also without ap_), or auto") from None


def _type_text(v: Value) -> str:
    return AUTO if v == AUTO else v.to_short()


# -- the file ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LayerSettings:
    """One entry of the config: ``Model``, ``LayerType.<class>`` or ``LayerName.<name>`` (``path``, for messages).

    ``precision`` maps hls4ml's variables (``default``, ``weight``, ``bias``, ``result``, ``accum``, ``scale``,
    ``param``) to a type or :data:`AUTO`; ``reuse`` and ``strategy`` are None where the entry does not set them.
    """

    path: str = field(compare=False)
    precision: tuple[tuple[str, Value], ...] = ()
    reuse: Optional[int] = None
    strategy: Optional[str] = None

    def get(self, var: str) -> Optional[Value]:
        return dict(self.precision).get(var)


@dataclass(frozen=True)
class HlsConfig:
    """A checked HLSConfig. ``layer_types`` and ``layer_names`` keep the keys as written (matched without case).

    Project settings, None where the file does not give them, in bitforge's HLS vocabulary: ``backend``
    ``"vivado"``/``"vitis"``, ``io_type`` ``"parallel"``/``"stream"``, ``clock_period`` in ns, ``part``.
    ``bram_factor`` is Model.BramFactor (hls4ml moves a weight array with more elements than that out of the
    firmware, onto a port the caller fills; bitforge keeps every weight inside, see :meth:`check`).
    """

    source: str
    model: LayerSettings
    layer_types: tuple[tuple[str, LayerSettings], ...] = ()
    layer_names: tuple[tuple[str, LayerSettings], ...] = ()
    backend: Optional[str] = None
    io_type: Optional[str] = None
    clock_period: Optional[float] = None
    part: Optional[str] = None
    bram_factor: Optional[int] = None

    def _error(self, path: str, problem: str) -> HlsConfigError:
        return HlsConfigError(f"{self.source}: {path}: {problem}")

    # -- the graph's layers ------------------------------------------------------------------------------------
    def _entries(self, g: Graph) -> tuple[dict[str, LayerSettings], dict[str, LayerSettings]]:
        """LayerName entries by graph element name and LayerType entries by class; refuses names not in ``g``."""
        elements = {name.lower(): name for name in [*g.inputs, *(n.name for n in g.nodes)]}
        aliases = hls4ml_aliases(g)
        by_name = {}
        for key, settings in self.layer_names:
            name = key if key in elements.values() else elements.get(key.lower(), aliases.get(key.lower()))
            if name is None:
                raise self._error(f"LayerName.{key}", f"graph '{g.name}' has no layer '{key}' (its layers: "
                                  f"{', '.join(elements.values())}; the input layer is the graph input's name)")
            by_name[name] = settings
        return by_name, {key.lower(): settings for key, settings in self.layer_types}

    def _chain(self, g: Graph, name: str) -> list[LayerSettings]:
        by_name, by_type = self._entries(g)
        cls = hls_class(g, name)
        return [e for e in (by_name.get(name), by_type.get((cls or "").lower()), self.model) if e is not None]

    def check(self, g: Graph) -> None:
        """Refuse what this config asks of ``g`` that bitforge cannot do as hls4ml would: LayerName entries that
        are no layer of ``g``, Precision variables a layer does not have, reuse or strategy on an input, a
        BramFactor below a layer's weight count."""
        by_name, by_type = self._entries(g)
        for name, settings in by_name.items():
            self._check_layer(g, name, settings)
        for n in [*g.inputs, *g.nodes]:
            name = n if isinstance(n, str) else n.name
            cls = hls_class(g, name)
            if cls is not None and cls.lower() in by_type:
                self._check_layer(g, name, by_type[cls.lower()])
        if self.bram_factor is not None:
            for n in g.nodes:
                for array, a in n.array_fields().items():
                    if a.size > self.bram_factor:
                        raise self._error("Model.BramFactor", (
                            f"{n.describe()}: its {array} has {a.size} elements, more than BramFactor "
                            f"{self.bram_factor}: hls4ml would move it out of the firmware onto a port the caller "
                            f"fills, and bitforge keeps every weight inside; raise BramFactor to at least {a.size} "
                            "or remove the key"))

    def _check_layer(self, g: Graph, name: str, settings: LayerSettings) -> None:
        node = None if name in g.inputs else g.node(name)
        what = f"graph input '{name}'" if node is None else node.describe()
        if node is None and (settings.reuse is not None or settings.strategy is not None):
            key = "ReuseFactor" if settings.reuse is not None else "Strategy"
            raise self._error(f"{settings.path}.{key}", f"{what} is hls4ml's input layer, which has no {key}; "
                              "remove the key")
        if node is not None and type(node) in _NO_TYPE and settings.precision:
            raise self._error(f"{settings.path}.Precision", f"{what} {_NO_TYPE[type(node)]}; remove the key")
        have = {var for _, var in _fields(g, name)} | {"default"}
        if isinstance(node, (Dense, Conv)):
            have.add("bias")  # hls4ml gives every Dense/Conv a bias (zeros when the model has none)
        for var, _ in settings.precision:
            if var in have:
                continue
            if var == "accum":
                why = _NO_ACCUM.get(type(node), "has no accumulator")
            else:
                why = f"has no {var}"
            raise self._error(f"{settings.path}.Precision.{var}", f"{what} {why}; remove the key")

    # -- precision -----------------------------------------------------------------------------------------------
    def resolve(self, g: Graph, name: str, var: str) -> tuple[Optional[Value], str]:
        """hls4ml's precision of variable ``var`` of layer ``name`` (a node or a graph input) and the key it came
        from; ``'auto'`` for weights and biases already replaced by the model default."""
        chain = self._chain(g, name)
        node = None if name in g.inputs else g.node(name)
        if isinstance(node, KANLayer) and var == "accum":
            # A KANLayer's accumulator frac is fixed by its types: only a layer entry's own accum types it.
            chain = [e for e in chain if e is not self.model]
            looks = [(e, "accum") for e in chain]
        else:
            looks = [(e, v) for e in chain for v in (var, "default")]
        for entry, v in looks:
            found = entry.get(v)
            if found is None:
                continue
            if found == AUTO and var != "accum":  # read_hls_config refused 'auto' results and a missing default
                return self.model.get("default"), f"{entry.path}.Precision.{v} (auto: Model.Precision.default)"
            return found, f"{entry.path}.Precision.{v}"
        return None, ""

    def precision_spec(self, g: Graph) -> str:
        """The ``--precision`` spec that types ``g`` as this config types it in hls4ml (see the module docstring).

        The Model entry becomes global items; every node and graph input whose resolved type differs from what
        those give gets a ``NODE.FIELD`` override. Raises :class:`HlsConfigError` naming the key for what
        :meth:`check` refuses, and for a layer with no precision at all (hls4ml refuses those too).
        """
        self.check(g)
        head = []
        if self.model.get("default") is not None:
            head.append(_type_text(self.model.get("default")))
        for var, key in (("weight", "weight"), ("bias", "bias"), ("result", "act"), ("accum", "accum")):
            value = self.model.get(var)
            if value is not None and not (value == AUTO and var != "accum"):
                head.append(f"{key}={_type_text(value)}")
        base = self._parse(",".join(head), "Model.Precision")
        overrides = []
        for name in [*g.inputs, *(n.name for n in g.nodes)]:
            node = None if name in g.inputs else g.node(name)
            for field, var in _fields(g, name):
                want = HARD_SLOPE_TYPE if isinstance(node, HardSigmoid) and field == "weight" else \
                    self.resolve(g, name, var)[0]
                if want is None and not (field == "accum" and isinstance(node, KANLayer)):
                    raise self._error("Model.Precision", (
                        f"no precision for {var} of layer '{name}' and no default (hls4ml refuses this too); "
                        "give a default type"))
                want = None if want == AUTO else want
                have = base.lookup(name, field) if node is None else base.for_node(node, field)
                if want != have:
                    overrides.append(f"{name}.{field}={AUTO if want is None else _type_text(want)}")
        text = ",".join(head + overrides)
        self._parse(text, "Precision")
        return text

    def _parse(self, text: str, path: str):
        try:
            return parse_precision(text)
        except PrecisionSpecError as e:
            raise self._error(path, f"does not make a precision spec: {str(e).splitlines()[0]}") from None

    # -- reuse and strategy ----------------------------------------------------------------------------------------
    def reuse(self, g: Graph, node: str) -> int:
        """ReuseFactor of node ``node``: LayerName, else LayerType, else Model, else hls4ml's default 1.

        Takes the graph because LayerType entries match the node's hls4ml class, which follows from its op.
        """
        g.node(node)
        return next((e.reuse for e in self._chain(g, node) if e.reuse is not None), 1)

    def strategy(self, g: Graph, node: str) -> str:
        """Strategy of node ``node`` ("latency" or "resource"), resolved like :meth:`reuse` (default latency)."""
        g.node(node)
        return next((e.strategy for e in self._chain(g, node) if e.strategy is not None), "latency")

    def layer_reuse(self, g: Graph) -> dict[str, int]:
        """:meth:`reuse` of every node of ``g`` (hls backend options take this per-layer map)."""
        self.check(g)
        return {n.name: self.reuse(g, n.name) for n in g.nodes}

    def layer_strategy(self, g: Graph) -> dict[str, str]:
        """:meth:`strategy` of every node of ``g``."""
        self.check(g)
        return {n.name: self.strategy(g, n.name) for n in g.nodes}


#: Ops whose output type follows from the op: a config cannot type them.
_NO_TYPE = {Reshape: "moves data only: its output type is its input's",
            Transpose: "moves data only: its output type is its input's",
            ArgMax: "outputs integer indices: its type is ufixed<B,B>, B the bits of the last index"}
_NO_ACCUM = {ScaleShift: "has no accumulator: like hls4ml's BatchNormalization it computes scale * x + shift at "
                         "full precision",
             Pool: "has no accumulator type in bitforge (max: the largest input; average: the exact window sum "
                   "times a reciprocal)",
             Softmax: "has no accumulator type in bitforge (it builds its own tables, --precision table_size=N)"}


def hls4ml_aliases(g: Graph) -> dict[str, str]:
    """hls4ml's names for the graph's layers (lowercase) -> the graph's names, where they differ.

    hls4ml names a PyTorch model's layers after torch.fx's node names: the module path with dots as underscores
    (``fc1``, ``layers_0``), ``_0`` for a path that starts with a digit (a Sequential's ``0``), and the input
    after the forward argument (``x``; ``input_1`` for one called ``input``). bitforge's torch frontend names
    nodes ``<op>_<path>`` (``dense_fc1``, ``relu_1``). An alias that two nodes would share is left out: such a
    key must use the graph's own name."""
    counts: dict[str, list[str]] = {}
    names = {n.name.lower() for n in g.nodes} | {i.lower() for i in g.inputs}
    for n in g.nodes:
        if "_" not in n.name:
            continue
        rest = n.name.split("_", 1)[1]
        for alias in {rest, f"_{rest}" if rest[:1].isdigit() else rest}:
            counts.setdefault(alias.lower(), []).append(n.name)
    for i in g.inputs:
        counts.setdefault(f"{i}_1".lower(), []).append(i)
    return {a: ns[0] for a, ns in counts.items() if len(ns) == 1 and a not in names}


def hls_class(g: Graph, name: str) -> Optional[str]:
    """The hls4ml layer class of graph input or node ``name`` (None: no hls4ml class; LayerName reaches it)."""
    if name in g.inputs:
        return "Input"
    n = g.node(name)
    if isinstance(n, (Dense, LowRankDense)):
        return "Dense"
    if isinstance(n, Conv):
        return f"Conv{n.spatial}D"
    if isinstance(n, Pool):
        shape = g.tensors[n.input].shape[1:]
        whole = tuple(n.kernel) == tuple(shape) and not any(n.padding)
        return f"{'Global' if whole else ''}Pooling{len(n.kernel)}D"
    if isinstance(n, LeakyReLU):
        return "ParametrizedActivation" if n.alpha.size == 1 else "PReLU"
    if isinstance(n, HardSigmoid):
        return None if n.swish else "HardActivation"
    return {ReLU: "Activation", Table: "Activation", Softmax: "Softmax", ScaleShift: "BatchNormalization",
            Add: "Merge", Concat: "Concatenate", Reshape: "Reshape", Transpose: "Transpose"}.get(type(n))


def _fields(g: Graph, name: str) -> list[tuple[str, str]]:
    """(bitforge spec field, hls4ml Precision variable) pairs that type graph input or node ``name``."""
    if name in g.inputs:
        return [("act", "result")]
    n = g.node(name)
    if isinstance(n, (Dense, Conv)):
        return [("weight", "weight"), *([("bias", "bias")] if n.bias is not None else []), ("act", "result"),
                ("accum", "accum")]
    if isinstance(n, LowRankDense):
        return [("weight", "weight"), *([("bias", "bias")] if n.bias is not None else []), ("mid", "result"),
                ("act", "result"), ("accum", "accum")]
    if isinstance(n, KANLayer):
        return [("weight", "weight"), ("act", "result"), ("accum", "accum")]
    if isinstance(n, ScaleShift):
        return [("weight", "scale"), *([("bias", "bias")] if n.shift is not None else []), ("act", "result")]
    if isinstance(n, LeakyReLU):
        return [("weight", "param"), ("act", "result")]
    if isinstance(n, HardSigmoid) and not n.swish:
        return [("weight", "slope"), ("act", "result")]
    if type(n) in _NO_TYPE:
        return []
    return [("act", "result")]


# -- reading and checking ----------------------------------------------------------------------------------------

def read_hls_config(path: Union[str, Path]) -> HlsConfig:
    """Read and check an HLSConfig file (``.yml``/``.yaml``/``.json``) without a graph: errors name the file and
    the key path. The graph-dependent checks wait for :meth:`HlsConfig.precision_spec` / :meth:`HlsConfig.check`."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".yml", ".yaml", ".json"):
        raise HlsConfigError(f"{path}: an HLS config is a .yml, .yaml or .json file (hls4ml's HLSConfig), "
                             f"not {suffix or 'a file without a suffix'}")
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise HlsConfigError(f"{path}: no such file (--hls-config)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise HlsConfigError(f"{path}: cannot read it as text: {e}") from None
    if suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise HlsConfigError(f"{path}: not valid JSON: {e}") from None
    else:
        try:
            import yaml
        except ImportError:
            raise HlsConfigError(f"{path}: reading YAML needs PyYAML (pip install pyyaml), or write the config "
                                 "as .json") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise HlsConfigError(f"{path}: not valid YAML: {e}") from None
    return parse_hls_config(data, path.name)


def parse_hls_config(data: Any, source: str = "HLSConfig") -> HlsConfig:
    """Check a loaded HLSConfig (bare or under ``HLSConfig``); ``source`` names it in messages."""
    return _Reader(source).config(data)


@dataclass
class _Reader:
    source: str

    def error(self, path: str, problem: str) -> HlsConfigError:
        return HlsConfigError(f"{self.source}: {path}: {problem}" if path else f"{self.source}: {problem}")

    def mapping(self, value, path: str) -> dict:
        if not isinstance(value, dict):
            raise self.error(path, f"expected a mapping of keys to settings, found {value!r}")
        return value

    def config(self, data) -> HlsConfig:
        top = self.mapping(data, "")
        project: dict = {}
        if "HLSConfig" in top:
            for key in top:
                if key not in _PROJECT_KEYS:
                    raise self.error(key, _REFUSED_TOP.get(key, self.unknown(_PROJECT_KEYS)))
            project = self.project(top)
            cfg, prefix = self.mapping(top["HLSConfig"], "HLSConfig"), "HLSConfig."
        else:
            cfg, prefix = top, ""
        for key in cfg:
            if key not in _CONFIG_KEYS:
                why = (f"belongs beside HLSConfig in hls4ml's project configuration ({{HLSConfig: ..., {key}: ...}})"
                       if key in _PROJECT_KEYS else _REFUSED_TOP.get(key, self.unknown(_CONFIG_KEYS)))
                raise self.error(f"{prefix}{key}", why)
        if "Model" not in cfg:
            raise self.error(f"{prefix}Model", "missing: hls4ml's HLSConfig needs Model: {Precision: {default: "
                             "ap_fixed<16,6>}, ReuseFactor: 1, Strategy: Latency} (the model-wide settings)")
        model_cfg = self.mapping(cfg["Model"], f"{prefix}Model")
        model = self.settings(model_cfg, f"{prefix}Model", _MODEL_KEYS)
        self.check_model(model, model_cfg, f"{prefix}Model")
        types = self.entries(cfg.get("LayerType"), f"{prefix}LayerType", model)
        for key, settings in types:
            if key.lower() not in {c.lower() for c in HLS_CLASSES}:
                alias = _ALIASES.get(key.lower())
                why = (f"hls4ml matches LayerType against its own layer classes, and a {key} is an {alias} there "
                       f"(hls4ml would ignore '{key}'); write LayerType.{alias}" if alias else
                       f"not an hls4ml layer class bitforge maps (those: {', '.join(HLS_CLASSES)}); LayerName "
                       "reaches a single layer")
                raise self.error(settings.path, why)
        names = self.entries(cfg.get("LayerName"), f"{prefix}LayerName", model)
        return HlsConfig(self.source, model, types, names, bram_factor=self.bram_factor(model_cfg, prefix), **project)

    def unknown(self, allowed) -> str:
        return f"bitforge does not understand this key (it reads {', '.join(allowed)}); remove it"

    def project(self, top: dict) -> dict:
        out: dict = {}
        if "Backend" in top:
            b = top["Backend"]
            if not isinstance(b, str) or b.lower() not in _BACKENDS:
                raise self.error("Backend", f"expected Vivado or Vitis (the backends bitforge drives), found {b!r}")
            out["backend"] = _BACKENDS[b.lower()]
        if "IOType" in top:
            io = top["IOType"]
            if not isinstance(io, str) or io.lower() not in _IO_TYPES:
                raise self.error("IOType", f"expected io_parallel or io_stream, found {io!r}")
            out["io_type"] = _IO_TYPES[io.lower()]
        if "ClockPeriod" in top:
            c = top["ClockPeriod"]
            if isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c) or c <= 0:
                raise self.error("ClockPeriod", f"expected a positive number of nanoseconds, found {c!r}")
            out["clock_period"] = float(c)
        if "Part" in top:
            p = top["Part"]
            if not isinstance(p, str) or not p.strip():
                raise self.error("Part", f"expected an FPGA part name such as xcvu13p-flga2577-2-e, found {p!r}")
            out["part"] = p.strip()
        return out

    def entries(self, value, path: str, model: LayerSettings) -> tuple[tuple[str, LayerSettings], ...]:
        if value is None:
            return ()
        out, seen = [], {}
        for key, entry in self.mapping(value, path).items():
            key = str(key)
            if key.lower() in seen:
                raise self.error(f"{path}.{key}", f"same name as {path}.{seen[key.lower()]} (hls4ml matches names "
                                 "without regard to case, so one would silently replace the other); keep one")
            seen[key.lower()] = key
            settings = self.settings(self.mapping(entry, f"{path}.{key}"), f"{path}.{key}", _LAYER_KEYS)
            self.check_auto(settings, model)
            out.append((key, settings))
        return tuple(out)

    def settings(self, entry: dict, path: str, allowed: tuple[str, ...]) -> LayerSettings:
        for key in entry:
            if key not in allowed:
                why = _REFUSED_LAYER_KEYS.get(str(key).lower()) or self.unknown(allowed)
                raise self.error(f"{path}.{key}", why)
        for key in ("Trace", "TraceOutput"):  # hls4ml's per-layer output capture for debugging: changes no result
            if key in entry and not isinstance(entry[key], bool):
                raise self.error(f"{path}.{key}", f"expected true or false, found {entry[key]!r}")
        return LayerSettings(path, self.precision(entry.get("Precision"), f"{path}.Precision"),
                             self.reuse(entry.get("ReuseFactor"), f"{path}.ReuseFactor"),
                             self.strategy(entry.get("Strategy"), f"{path}.Strategy"))

    def precision(self, value, path: str) -> tuple[tuple[str, Value], ...]:
        if value is None:
            return ()
        if not isinstance(value, dict):
            value = {"default": value}
            where = lambda var: path  # noqa: E731
        else:
            where = lambda var: f"{path}.{var}"  # noqa: E731
        out = {}
        for var, text in value.items():
            var = str(var)
            if var not in _VARS:
                raise self.error(where(var), _REFUSED_VARS.get(var) or (
                    f"bitforge does not map this Precision variable (it maps {', '.join(_VARS)}); remove it"))
            try:
                out[var] = parse_hls_type(text)
            except FixedTypeError as e:
                raise self.error(where(var), str(e)) from None
        if path.endswith("Model.Precision") and out.get("default") == AUTO:
            raise self.error(where("default"), "the model default must be a type (hls4ml refuses 'auto' there "
                             "too): 'auto' elsewhere falls back to it")
        var = "result" if "result" in out else "default"
        if out.get(var) == AUTO:
            raise self.error(where(var), "'auto' for a result: hls4ml infers it per layer class (a Dense's full-width "
                             "sum, an activation's model default), which bitforge does not reproduce; write the "
                             "type (e.g. result: ap_fixed<16,6>)")
        return tuple(out.items())

    def reuse(self, value, path: str) -> Optional[int]:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.error(path, f"expected a positive integer (1: fully parallel), found {value!r}")
        return value

    def strategy(self, value, path: str) -> Optional[str]:
        if value is None:
            return None
        if not isinstance(value, str) or value.lower() not in _STRATEGIES:
            raise self.error(path, f"expected Latency or Resource, found {value!r}")
        return value.lower()

    def bram_factor(self, model: dict, prefix: str) -> Optional[int]:
        value = model.get("BramFactor")
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.error(f"{prefix}Model.BramFactor", f"expected a positive integer, found {value!r}")
        return value

    def check_model(self, model: LayerSettings, entry: dict, path: str) -> None:
        if "Precision" not in entry:
            raise self.error(f"{path}.Precision", "missing: give the model-wide types, at least a default "
                             "(Precision: ap_fixed<16,6>, or {default: ..., accum: ...})")
        default = model.get("default")
        if default is None and (model.get("weight") is None or model.get("result") is None):
            raise self.error(f"{path}.Precision", "give a default type (hls4ml's Precision: {default: "
                             "ap_fixed<16,6>}), or at least weight and result")
        self.check_auto(model, model)

    def check_auto(self, settings: LayerSettings, model: LayerSettings) -> None:
        p = dict(settings.precision)
        if any(v == AUTO for var, v in p.items() if var != "accum") and model.get("default") in (None, AUTO):
            raise self.error(f"{settings.path}.Precision", "'auto' weight or bias types take the model default "
                             "(a float model has no quantizer to take them from), and Model.Precision has none")
