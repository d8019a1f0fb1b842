"""hls4ml's HLSConfig, read as hls4ml users write it, and turned into bitforge's precision spec and HLS options.

``bitforge compile MODEL --hls-config CONFIG.{yml,yaml,json}`` reads the file before the model is loaded
(:func:`read_hls_config`: every key checked, none ignored unless it cannot change what is computed), then maps
it onto the graph (:meth:`HlsConfig.precision_spec`, :meth:`HlsConfig.as_hls4ml_writes`, :meth:`HlsConfig.reuse`,
:meth:`HlsConfig.strategy`). The file is either the bare HLSConfig (``{Model: ..., LayerType: ..., LayerName:
...}``) or hls4ml's project configuration with the HLSConfig under ``HLSConfig`` beside ``Backend``, ``IOType``,
``ClockPeriod`` and ``Part``. What ``hls4ml.utils.config_from_pytorch_model`` writes is read as written:
``InputShape`` (checked against the graph input's shape), ``PytorchModel`` (the module, or the repr string a
dumped config holds: ignored, since the model is bitforge's MODEL argument), ``Model.ChannelsLastConversion``
and ``Model.TransposeOutputs`` (checked to give the order bitforge reads and writes: the model's own,
channels first), ``TableSize`` and ``Precision.table`` on layers without a table (hls4ml ignores them there
too), and hls4ml's defaults for ``ParallelizationFactor``, ``ConvImplementation``, ``Implementation`` and
``Skip``.

Precision is resolved per layer and variable as hls4ml's ``HLSConfig.get_precision`` does (model/graph.py):
``LayerName.<name>.Precision.<var>``, then that entry's ``default`` (a Precision given as one string is a
default), then the same two of ``LayerType.<class>``, then ``Model.Precision.<var>`` and its ``default``. The
variables: ``weight`` (a BatchNormalization's is ``scale``, a LeakyReLU's/PReLU's ``param``), ``bias``,
``result`` (the output: bitforge's ``act``, and a LowRankDense's ``mid``) and ``accum``. Names match without
regard to case, as hls4ml lowercases them, and hls4ml's names for a PyTorch model's layers (``fc1`` for
bitforge's ``dense_fc1``, see :func:`hls4ml_aliases`) are accepted. The result is a ``--precision`` spec: the
Model entry as global items (its default as a bare TYPE), and a ``NODE.FIELD`` override wherever a layer
resolves to something else.

``LayerType`` keys are hls4ml's layer classes, which is what hls4ml matches them against (a PyTorch ReLU is an
``Activation`` there, so ``LayerType: {ReLU: ...}`` would do nothing in hls4ml and is refused with the class to
write). bitforge's ops belong to these classes: Input (the graph inputs), Dense (Dense and LowRankDense, which
the HLS backend writes as two Dense layers), Conv1D/Conv2D (Conv by its number of spatial axes),
Pooling1D/Pooling2D and GlobalPooling1D/GlobalPooling2D (Pool; global when its window is the whole input),
Activation (ReLU and the lookup-table functions), ParametrizedActivation (a LeakyReLU with one slope), PReLU (one
with a slope per channel), HardActivation (HardSigmoid), Softmax, BatchNormalization (ScaleShift), Merge (Add),
Concatenate, Reshape and Transpose. KANLayer, Clip and ArgMax have no hls4ml class: ``LayerName`` reaches them.

hls4ml's ``'auto'`` is resolved as hls4ml's ``InferPrecisionTypes`` pass resolves it for a float model
(hls4ml/model/optimizer/passes/infer_precision.py), walking the graph in order so that each layer sees its
input's type (:meth:`HlsConfig.types`): a weight, bias or scale takes the Model default (a float model has no
quantizer to take it from); a Dense's or Conv's accum and result take the type that holds the whole sum,
``fixed<Ww + Wx + L, Iw + Ix + L>`` with ``L = ceil(log2(n_ops))`` (n_ops: the inputs of a Dense, channels times
window of a Conv), widened for the bias (hls4ml counts a bias on every Dense/Conv) and capped by
``Model.Precision.maximum``; a BatchNormalization's, an Add's (hls4ml's Merge) and a Concatenate's result the
types hls4ml's rules give them (capped the same way); a Pooling, Reshape or Transpose result the input's type; a
max pool's accum the input's; a PReLU's param the input's type, a LeakyReLU's the narrowest type hls4ml fits to
the slope; the results of the Input, the activations and Softmax the Model default. A result of a layer hls4ml
has no class for (LowRankDense, KANLayer, Clip, HardSwish) is refused: no rule of hls4ml's says what it means.
An accum left ``auto`` on a LowRankDense or a KANLayer is sized by bitforge's own inference (exact, as hls4ml's
uncapped rule is).

A BatchNorm (bitforge's ScaleShift) is folded where hls4ml fuses it and nowhere else: into the Dense or Conv before
it when that layer's result is 'auto' (:meth:`HlsConfig.kept_batchnorms` names the others, which
``fold_batchnorm(g, keep=...)`` leaves as layers). A kept one computes what hls4ml's BatchNormalization computes,
``x * scale + bias`` at full precision converted to its result type: :meth:`HlsConfig.precision_spec` gives it a
``NODE.accum`` that holds that sum for every code of its input, scale and bias types, so no input the input type
holds wraps it (an inferred accumulator is sized for the declared input range only).

hls4ml writes each weight into the firmware as decimal text with as many digits as its type has fractional bits,
and the C++ converts that text: :meth:`HlsConfig.as_hls4ml_writes` gives the float graph those decimals, so that
quantizing it gives the codes hls4ml's firmware holds.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np

from ..errors import BitforgeError
from ..fixed import FixedType, FixedTypeError, Overflow, Rounding, parse_type, signed_bits
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
    Node,
    Pool,
    ReLU,
    Reshape,
    ScaleShift,
    Softmax,
    Table,
    Transpose,
)
from .batchnorm import FOLDED_KEY
from .dequantize import dequantize_graph
from .heads import ARGMAX_KEY, index_type
from .quantize import AUTO, PrecisionSpecError, parse_precision

__all__ = ["HlsConfigError", "HlsConfig", "LayerSettings", "read_hls_config", "parse_hls_config",
           "parse_hls_type", "hls4ml_aliases", "hls4ml_text_values", "hls4ml_constant_type", "HLS_CLASSES"]

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
#: The Precision variables bitforge maps; the table types are read and checked against the graph's tables
#: (:meth:`HlsConfig.check`); the rest are refused with the reason in _REFUSED_VARS.
_VARS = ("default", "weight", "bias", "result", "accum", "scale", "param")
_TABLE_VARS = ("table", "exp_table", "inv_table", "inv_inp")
_TABLES = ("bitforge builds its own lookup tables (their size: --precision ...,table_size=N); remove the key")
_REFUSED_VARS = {
    "slope": "hls4ml types a HardActivation's slope ufixed<16,0> and shift ufixed<2,0> whatever the config says "
             "(bitforge gives a HardSigmoid's alpha and beta ufixed<16,0>); remove the key",
    "shift": "hls4ml types a HardActivation's slope ufixed<16,0> and shift ufixed<2,0> whatever the config says "
             "(bitforge gives a HardSigmoid's alpha and beta ufixed<16,0>); remove the key",
    "maximum": "hls4ml reads maximum from Model.Precision only (it caps the 'auto' types of every layer); move it "
               "there",
}
#: Layer keys hls4ml's config generators write with hls4ml's default, which is what bitforge's project computes:
#: accepted with that value only (another one would be a setting bitforge does not follow).
_DEFAULT_ONLY = {"ParallelizationFactor": 1, "ConvImplementation": "LineBuffer", "Implementation": "stable",
                 "Skip": False}
_LAYER_KEYS = ("Precision", "ReuseFactor", "Strategy", "Trace", "TableSize", *_DEFAULT_ONLY)
_MODEL_KEYS = ("Precision", "ReuseFactor", "Strategy", "BramFactor", "TraceOutput", "ChannelsLastConversion",
               "TransposeOutputs")
_CHANNELS_LAST = ("full", "internal", "off")
_CONFIG_KEYS = ("Model", "LayerType", "LayerName")
#: Keys hls4ml's PyTorch flow keeps beside the HLSConfig's own, in the bare form and in the project form.
_MODEL_ARGS = ("InputShape", "PytorchModel")
_PROJECT_KEYS = ("HLSConfig", "Backend", "IOType", "ClockPeriod", "Part")
_MODEL_FILE = "the model is the MODEL argument of bitforge compile; remove the key"
_REFUSED_TOP = {
    "OutputDir": "bitforge writes the project where -o says; remove the key",
    "ProjectName": "bitforge names the project; remove the key",
    "KerasJson": _MODEL_FILE, "KerasH5": _MODEL_FILE, "KerasModel": _MODEL_FILE, "OnnxModel": _MODEL_FILE,
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
Types = dict[str, dict[str, Optional[FixedType]]]


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


def hls4ml_text_values(values: np.ndarray, t: FixedType) -> np.ndarray:
    """The values hls4ml's firmware is built from when it writes ``values`` as weights of type ``t`` (float64).

    hls4ml writes each weight as ``'{:.Ff}'.format(value)`` with ``F = max(0, fractional bits of t)``
    (``WeightVariable.update_precision``; ``{:.0f}`` for an integer type, whose frac is 0 here too), and the C++
    compiler reads that literal as the nearest double before ap_fixed rounds it to ``t``. Python formats the exact
    binary value of each float (a float32 widened exactly, as hls4ml's numpy -> Python conversion does) rounding
    half to even on its exact decimal expansion, and ``float()`` reads the text back as the nearest double, as
    the C++ compiler does: so ``float(f"{v:.{F}f}")`` is the double the firmware converts. 0.12499 at F = 4 is
    0.1250, a code of ``fixed<8,3>`` (F = 5 would keep 0.12499, which rounds down to 0.125 - 1/32 in TRN).
    """
    a = np.asarray(values)
    digits = max(0, t.frac)
    return np.array([float(f"{v:.{digits}f}") for v in a.ravel().tolist()], dtype=np.float64).reshape(a.shape)


# -- hls4ml's 'auto' rules (InferPrecisionTypes, hls4ml/model/optimizer/passes/infer_precision.py) ----------------

def _cap(width: int, integer: int, maximum: Optional[FixedType]) -> tuple[int, int]:
    if maximum is None:
        return width, integer
    return min(width, maximum.width), min(integer, maximum.integer)


def _sum_type(x: FixedType, w: FixedType, b: FixedType, n_ops: int, maximum: Optional[FixedType]) -> FixedType:
    """``_infer_common_precision``: a Dense's or Conv's accum and result. hls4ml counts the bias whether or not
    the layer has one (``infer_no_bias`` is off by default); ``(n - 1).bit_length()`` is ``ceil(log2(n))``."""
    grow = (n_ops - 1).bit_length()
    width, integer, signed = w.width + x.width + grow, w.integer + x.integer + grow, w.signed or x.signed
    frac = width - integer
    integer = max(integer + (b.signed and not signed), b.integer + (signed and not b.signed)) + 1
    width = integer + max(frac, b.frac)
    return FixedType(*_cap(width, integer, maximum), signed or b.signed)


def _bn_type(x: FixedType, s: FixedType, b: FixedType, maximum: Optional[FixedType]) -> FixedType:
    """``_infer_bn_precision``: a BatchNormalization's result, ``x * scale + bias`` at full precision."""
    signed, width, integer = s.signed or x.signed, x.width + s.width, x.integer + s.integer
    out_int = max(integer + (b.signed and not signed), b.integer + (signed and not b.signed)) + 1
    return FixedType(*_cap(out_int + max(width - integer, b.frac), out_int, maximum), signed or b.signed)


def _full_sum_type(x: FixedType, s: FixedType, b: Optional[FixedType]) -> FixedType:
    """A kept BatchNorm's accumulator: the narrowest signed TRN/WRAP type at ``frac(x) + frac(scale)`` that holds
    ``x * scale + bias`` for every code of the three types (``b`` None: no bias; its frac must not be finer).

    hls4ml's BatchNormalization computes ``x * scale + bias`` in C++'s full-precision ap_fixed arithmetic and
    converts only the sum to the result type; bitforge's ScaleShift holds the sum in ``accum_type``. Left to
    :func:`~bitforge.toolchain.passes.precision.infer_precision`, that accumulator is sized for the declared input
    range only, and an input the input type holds beyond it (edge vectors, a C simulation's inputs) wraps it. Sized
    over the types' whole ranges it never overflows, so the sum is hls4ml's."""
    frac = x.frac + s.frac
    ends = [xc * sc for xc in (x.min_code, x.max_code) for sc in (s.min_code, s.max_code)]
    if b is not None:
        ends = [p + (bc << (frac - b.frac)) for p in ends for bc in (b.min_code, b.max_code)]
    width = max(signed_bits(e) for e in ends)
    return FixedType(width, width - frac, True, Rounding.TRN, Overflow.WRAP)


def _add_type(a: FixedType, b: FixedType, maximum: Optional[FixedType]) -> FixedType:
    """``_infer_merge_precision`` for ``add``: one integer bit more than the wider operand."""
    integer = max(a.integer + (b.signed and not a.signed), b.integer + (a.signed and not b.signed)) + 1
    return FixedType(*_cap(integer + max(a.frac, b.frac), integer, maximum), a.signed or b.signed)


def _concat_type(a: FixedType, b: FixedType, maximum: Optional[FixedType]) -> FixedType:
    """``_infer_cat_precision``: the operands' type when they agree, else one that holds both, whose modes are
    the first operand's unless those are TRN/WRAP."""
    if a == b:
        return a
    signed = a.signed or b.signed
    ia, ib = a.integer + (signed and not a.signed), b.integer + (signed and not b.signed)
    width, integer = _cap(max(a.frac, b.frac) + max(ia, ib), max(ia, ib), maximum)
    return FixedType(width, integer, signed, a.rounding if a.rounding != Rounding.TRN else b.rounding,
                     a.overflow if a.overflow != Overflow.WRAP else b.overflow)


def hls4ml_constant_type(value: float, max_width: int = 8) -> FixedType:
    """hls4ml's type for a LeakyReLU slope left ``auto`` (``_get_precision_from_constant``): the fewest bits
    that hold ``value`` exactly (at most 32 fractional), then no more than ``max_width`` bits besides the sign."""
    if value == 0:
        return FixedType(1, 1, False)
    v = np.float64(value)
    low, high = -32, 32  # hls4ml's binary search for the fewest fractional bits (_minimal_f)
    while low < high - 1:
        mid = (low + high) // 2
        scaled = v * 2.0 ** mid
        if scaled != np.int64(scaled):
            low = mid
        else:
            high = mid
    integer = int(np.ceil(np.log2(max(v + 2.0 ** -high, -v))))
    sign = int(v < 0)
    return FixedType(min(sign + integer + high, sign + max_width), sign + integer, bool(sign))


def _power_of_two_windows(n: Pool, shape: tuple[int, ...]) -> Optional[str]:
    """Why an average pool's mean differs from hls4ml's (None: it does not). hls4ml divides the window's sum in
    its accum (``frac(x) + ceil(log2(window))`` fractional bits, truncating); bitforge multiplies the exact sum by
    a rounded reciprocal. Both are exact, so equal, when every divisor is a power of two within bitforge's
    ``2**recip_frac``."""
    if n.mode == "max":
        return None
    spatial, largest = len(n.kernel), 1
    for axis, (k, s) in enumerate(zip(n.kernel, n.stride)):
        size, lo = shape[-spatial + axis], n.padding[axis]
        padded = size + lo + n.padding[spatial + axis]
        counts = {k if n.count_include_pad else min(start + k, lo + size) - max(start, lo)
                  for start in range(0, padded - k + 1, s)}
        odd = sorted(c for c in counts if c & (c - 1))
        if odd:
            break
        largest *= max(counts)
    else:
        if largest <= 2 ** n.recip_frac:
            return None
        odd = [largest]
    return (f"an average over {odd[0]} values: hls4ml divides the window's sum in its accum (truncating), bitforge "
            "multiplies it by a rounded reciprocal, and the two agree only for windows of a power of two values (at "
            f"most 2**{n.recip_frac})")


# -- the file ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LayerSettings:
    """One entry of the config: ``Model``, ``LayerType.<class>`` or ``LayerName.<name>`` (``path``, for messages).

    ``precision`` maps hls4ml's variables (``default``, ``weight``, ``bias``, ``result``, ``accum``, ``scale``,
    ``param``; the Model's also ``maximum``) to a type or :data:`AUTO`; ``reuse`` and ``strategy`` are None where
    the entry does not set them; ``tables`` lists the keys that set a lookup table (``Precision.table``,
    ``TableSize``, ...), which matter only on a layer with a table (:meth:`HlsConfig.check`).
    """

    path: str = field(compare=False)
    precision: tuple[tuple[str, Value], ...] = ()
    reuse: Optional[int] = None
    strategy: Optional[str] = None
    tables: tuple[str, ...] = ()

    def get(self, var: str) -> Optional[Value]:
        return dict(self.precision).get(var)


@dataclass(frozen=True)
class HlsConfig:
    """A checked HLSConfig. ``layer_types`` and ``layer_names`` keep the keys as written (matched without case).

    Project settings, None where the file does not give them, in bitforge's HLS vocabulary: ``backend``
    ``"vivado"``/``"vitis"``, ``io_type`` ``"parallel"``/``"stream"``, ``clock_period`` in ns, ``part``.
    ``bram_factor`` is Model.BramFactor (hls4ml moves a weight array with more elements than that out of the
    firmware, onto a port the caller fills; bitforge keeps every weight inside, see :meth:`check`).
    ``input_shapes`` is InputShape (one shape per input, batch axis excluded), ``channels_last``
    Model.ChannelsLastConversion and ``transpose_outputs`` Model.TransposeOutputs, each checked against the graph.
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
    input_shapes: Optional[tuple[tuple[int, ...], ...]] = None
    channels_last: Optional[str] = None
    transpose_outputs: Optional[bool] = None

    def _error(self, path: str, problem: str) -> HlsConfigError:
        return HlsConfigError(f"{self.source}: {path}: {problem}")

    @property
    def maximum(self) -> Optional[FixedType]:
        """Model.Precision.maximum: the cap on every type hls4ml infers for 'auto' (None: no cap)."""
        return self.model.get("maximum")

    # -- the graph's layers ------------------------------------------------------------------------------------
    def _entries(self, g: Graph) -> tuple[dict[str, LayerSettings], dict[str, LayerSettings]]:
        """LayerName entries by graph element name and LayerType entries by class; refuses names that are no layer
        of ``g``. An entry naming a BatchNorm folded into the layer before it (``g.metadata[FOLDED_KEY]``) types
        nothing: hls4ml fuses that layer too (:meth:`kept_batchnorms` keeps the others; :meth:`check` refuses a
        fold hls4ml would not make), and the fused layer takes the types of the layer it was fused into. Nor does
        an entry naming a Softmax that ``--softmax argmax`` replaced by the ArgMax of its logits
        (``g.metadata[ARGMAX_KEY]``): bitforge computes no softmax there, so hls4ml's settings for one (its tables,
        its accum and result) have nothing to set, and the ArgMax's index type follows from the op."""
        folded = {r["scale_shift"]: r["into"] for r in g.metadata.get(FOLDED_KEY, [])}
        replaced = set(g.metadata.get(ARGMAX_KEY, []))
        elements = {name.lower(): name for name in [*g.inputs, *(n.name for n in g.nodes), *folded]}
        aliases = hls4ml_aliases(g)
        by_name = {}
        for key, settings in self.layer_names:
            name = key if key in elements.values() else elements.get(key.lower(), aliases.get(key.lower()))
            if name is None:
                raise self._error(f"LayerName.{key}", f"graph '{g.name}' has no layer '{key}' (its layers: "
                                  f"{', '.join(elements.values())}; the input layer is the graph input's name)")
            if name not in folded and name not in replaced:
                by_name[name] = settings
        return by_name, {key.lower(): settings for key, settings in self.layer_types}

    def _chain(self, g: Graph, name: str) -> list[LayerSettings]:
        by_name, by_type = self._entries(g)
        cls = hls_class(g, name)
        return [e for e in (by_name.get(name), by_type.get((cls or "").lower()), self.model) if e is not None]

    def kept_batchnorms(self, g: Graph) -> frozenset[str]:
        """The BatchNorms (ScaleShifts) of float graph ``g``, before folding, that hls4ml keeps as layers: those after
        a Dense or Conv whose result type is not 'auto'. hls4ml's FuseBatchNormalization pass
        (hls4ml/model/optimizer/passes/bn_fuse.py) fuses a BatchNormalization into the Dense/Conv before it only
        when that layer's output precision is unspecified, i.e. 'auto' before its InferPrecisionTypes pass runs;
        otherwise the layer's output is rounded to its type and normalised by a layer of its own. Fold ``g`` with
        ``fold_batchnorm(g, keep=config.kept_batchnorms(g))`` so that bitforge folds exactly where hls4ml fuses
        (BatchNorms after other ops, or whose input has other readers, neither folds). Raises
        :class:`HlsConfigError` for LayerName entries that are no layer of ``g``."""
        producers = {n.output: n for n in g.nodes}
        kept = set()
        for n in g.nodes:
            p = producers.get(n.inputs[0]) if isinstance(n, ScaleShift) else None
            if isinstance(p, (Dense, Conv)) and self.resolve(g, p.name, "result")[0] != AUTO:
                kept.add(n.name)
        return frozenset(kept)

    def check(self, g: Graph) -> None:
        """Refuse what this config asks of ``g`` that bitforge cannot do as hls4ml would: an InputShape that is not
        the graph's, a channels-last order where bitforge reads or writes the model's own, LayerName entries that
        are no layer of ``g``, Precision variables a layer does not have, table settings on bitforge's own tables,
        reuse or strategy on an input, a BramFactor below a layer's weight count, and a BatchNorm ``g`` has folded
        where hls4ml would not fuse it (see :meth:`kept_batchnorms`)."""
        by_name, by_type = self._entries(g)
        self._check_io(g)
        for name, settings in by_name.items():
            self._check_layer(g, name, settings)
        for n in [*g.inputs, *g.nodes]:
            name = n if isinstance(n, str) else n.name
            cls = hls_class(g, name)
            if cls is not None and cls.lower() in by_type:
                self._check_layer(g, name, by_type[cls.lower()])
        for n in g.nodes:
            if isinstance(n, (Table, Softmax)):
                for entry in self._chain(g, n.name):
                    if entry.tables:
                        raise self._error(f"{entry.path}.{entry.tables[0]}", f"{n.describe()}: {_TABLES}")
        self._check_folded(g)
        if self.bram_factor is not None:
            for n in g.nodes:
                for array, a in n.array_fields().items():
                    if a.size > self.bram_factor:
                        raise self._error("Model.BramFactor", (
                            f"{n.describe()}: its {array} has {a.size} elements, more than BramFactor "
                            f"{self.bram_factor}: hls4ml would move it out of the firmware onto a port the caller "
                            f"fills, and bitforge keeps every weight inside; raise BramFactor to at least {a.size} "
                            "or remove the key"))

    def _check_io(self, g: Graph) -> None:
        """InputShape must be the graph's; hls4ml's channels-last conversion must leave the order bitforge reads
        inputs in and writes outputs in (the model's own, channels first) where a tensor has more than one axis."""
        shapes = tuple(tuple(g.tensors[i].shape) for i in g.inputs)
        if self.input_shapes is not None and self.input_shapes != shapes:
            given = [list(s) for s in self.input_shapes]
            have = [list(s) for s in shapes]
            raise self._error("InputShape", (
                f"{given[0] if len(given) == 1 else given} is not the input shape of graph '{g.name}' "
                f"({', '.join(f'{i}: {s}' for i, s in zip(g.inputs, have))}, batch axis excluded); write the "
                "model's input shape, or remove the key"))
        deep = [i for i in g.inputs if len(g.tensors[i].shape) > 1]
        if self.channels_last in ("internal", "off") and deep:
            how = ("expects the caller to feed it channels last" if self.channels_last == "internal" else
                   "runs the channels-first data through its channels-last layers unconverted")
            raise self._error("Model.ChannelsLastConversion", (
                f"'{self.channels_last}': input '{deep[0]}' has shape {list(g.tensors[deep[0]].shape)}, and hls4ml "
                f"then {how}, while bitforge's project reads inputs in the model's own channels-first order, which "
                "is what 'full' gives a PyTorch model; write full"))
        deep = [o for o in g.outputs if len(g.tensors[o].shape) > 1]
        if self.transpose_outputs is False and self.channels_last != "off" and deep:
            raise self._error("Model.TransposeOutputs", (
                f"false: output '{deep[0]}' has shape {list(g.tensors[deep[0]].shape)}, which hls4ml then leaves "
                "channels last, while bitforge's project writes outputs in the model's own channels-first order, "
                "which is what true gives; write true"))

    def _check_folded(self, g: Graph) -> None:
        """hls4ml fuses a BatchNormalization into the Dense/Conv before it only when that layer's result is 'auto'
        (FuseBatchNormalization); otherwise it rounds the layer's output, then normalises it. ``bitforge compile
        --hls-config`` folds with :meth:`kept_batchnorms` kept, so its graphs never hold such a fold; a graph
        folded without them (``fold_batchnorm(g)`` alone, or a bitforge output folder compiled without this
        config, whose metadata records the folds) does, and would compute other numbers than hls4ml's firmware."""
        for r in g.metadata.get(FOLDED_KEY, []):
            into = r["into"]
            if into not in {n.name for n in g.nodes}:
                continue
            value, where = self.resolve(g, into, "result")
            if value is not None and value != AUTO:
                raise self._error(where, (
                    f"BatchNorm '{r['scale_shift']}' follows {g.node(into).describe()}, whose result type is "
                    f"{value.to_ap()}: hls4ml then keeps the BatchNormalization as a layer of its own (the layer's "
                    f"output rounded to that type first), while graph '{g.name}' has it folded into '{into}' (by an "
                    "earlier compile of the model without this config, or by fold_batchnorm without "
                    "keep=HlsConfig.kept_batchnorms(g)); compile the model itself (its .pt2/.onnx file), or give "
                    f"'{into}' result: auto (hls4ml then fuses it too)"))

    def _check_layer(self, g: Graph, name: str, settings: LayerSettings) -> None:
        node = None if name in g.inputs else g.node(name)
        what = f"graph input '{name}'" if node is None else node.describe()
        if node is None and (settings.reuse is not None or settings.strategy is not None):
            key = "ReuseFactor" if settings.reuse is not None else "Strategy"
            raise self._error(f"{settings.path}.{key}", f"{what} is hls4ml's input layer, which has no {key}; "
                              "remove the key")
        if node is not None and type(node) in _NO_TYPE and any(v != AUTO for _, v in settings.precision):
            raise self._error(f"{settings.path}.Precision", f"{what} {_NO_TYPE[type(node)]}; remove the key")
        have = {var for _, var in _fields(g, name)} | {"default"}
        if isinstance(node, (Dense, Conv)):
            have.add("bias")  # hls4ml gives every Dense/Conv a bias (zeros when the model has none)
        if node is not None and type(node) in _NO_TYPE:
            have.add("result")  # 'auto', which is what the op computes (hls4ml's generators write it)
        for var, value in settings.precision:
            if var in have:
                continue
            path = f"{settings.path}.Precision.{var}"
            if isinstance(node, Pool) and var == "accum" and value == AUTO:
                why = _power_of_two_windows(node, g.tensors[node.input].shape)
                if why is None:
                    continue  # hls4ml's auto accum holds the max, or the exact mean: what bitforge computes
                raise self._error(path, f"{what} is {why}; bitforge cannot compute hls4ml's mean for this window")
            if var == "accum":
                why = _NO_ACCUM.get(type(node), "has no accumulator")
            else:
                why = f"has no {var}"
            raise self._error(path, f"{what} {why}; remove the key")

    # -- precision -----------------------------------------------------------------------------------------------
    def resolve(self, g: Graph, name: str, var: str) -> tuple[Optional[Value], str]:
        """hls4ml's precision of variable ``var`` of layer ``name`` (a node or a graph input), as written (a type,
        :data:`AUTO`, or None where nothing gives one), and the key it came from (``HLSConfig.get_precision``)."""
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
            if found is not None:
                return found, f"{entry.path}.Precision.{v}"
        return None, ""

    def types(self, g: Graph) -> Types:
        """The type of every field :func:`_fields` lists, per graph element: ``{name: {field: type}}`` (fields:
        ``weight``, ``bias``, ``act``, ``mid``, ``accum``), each 'auto' resolved as hls4ml's InferPrecisionTypes
        resolves it (see the module docstring), in graph order so that each layer sees its input's type. None:
        an accumulator left to bitforge's inference (a LowRankDense's or KANLayer's 'auto'). A BatchNorm
        (ScaleShift) has no accumulator in hls4ml, which adds at full precision: its ``accum`` here is the type
        that holds ``x * scale + bias`` for every code of those types (:func:`_full_sum_type`), so it never
        overflows whatever the declared input range. Raises :class:`HlsConfigError` for what :meth:`check`
        refuses, an 'auto' no rule of hls4ml's infers, a layer with no precision at all (hls4ml refuses those
        too), and a BatchNorm bias finer than ``frac(x) + frac(scale)`` (bitforge's ScaleShift cannot add it)."""
        self.check(g)
        out: Types = {}
        tensors: dict[str, FixedType] = {}
        for name in g.inputs:
            act = self._typed(g, name, "result", lambda where: self._default(where, "graph input"))
            out[name], tensors[name] = {"act": act}, act
        for n in g.nodes:
            out[n.name], tensors[n.output] = self._node_types(g, n, [tensors[t] for t in n.inputs])
        return out

    def _given(self, g: Graph, name: str, var: str) -> tuple[Value, str]:
        value, where = self.resolve(g, name, var)
        if value is None:
            raise self._error("Model.Precision", f"no precision for {var} of layer '{name}' and no default "
                              "(hls4ml refuses this too); give a default type")
        return value, where

    def _typed(self, g: Graph, name: str, var: str, auto) -> FixedType:
        """The type of ``var``: as written, or ``auto(where)`` for an 'auto' written at ``where``."""
        value, where = self._given(g, name, var)
        return auto(where) if value == AUTO else value

    def _default(self, where: str, what: str) -> FixedType:
        default = self.model.get("default")
        if default is None:
            raise self._error(where, f"'auto' for a {what} means Model.Precision.default in hls4ml, and "
                              "Model.Precision has none; give a default type")
        return default

    def _no_rule(self, n: Node):
        def refuse(where: str) -> FixedType:
            raise self._error(where, f"'auto' for the result of {n.describe()}: no layer of hls4ml's computes this "
                              "op, so no rule of hls4ml's infers its type; write the type (e.g. ap_fixed<16,6>)")
        return refuse

    def _node_types(self, g: Graph, n: Node, xs: list[FixedType]) -> tuple[dict[str, Optional[FixedType]],
                                                                             FixedType]:
        """(the fields of ``n``, its output's type) given its inputs' types ``xs`` (see :meth:`types`)."""
        x, cap = xs[0], self.maximum

        def typed(var: str, auto) -> FixedType:
            return self._typed(g, n.name, var, auto)

        def param(var: str) -> FixedType:  # a weight, bias or scale: 'auto' is the default
            return typed(var, lambda where: self._default(where, var))

        def activation(where: str) -> FixedType:
            return self._default(where, "result")

        if isinstance(n, (Dense, Conv)):
            w, b = param("weight"), param("bias")

            def total(where: str) -> FixedType:
                if isinstance(n, Conv) and n.groups != 1:
                    raise self._error(where, f"'auto' for {n.describe()}, a grouped convolution: hls4ml's rule "
                                      "for it is not bitforge's Conv; write the types")
                return _sum_type(x, w, b, int(np.prod(n.weight.shape[1:])), cap)

            out = {"weight": w, **({"bias": b} if n.bias is not None else {}), "act": typed("result", total),
                   "accum": typed("accum", total)}
            return out, out["act"]
        if isinstance(n, (LowRankDense, KANLayer)):
            act = typed("result", self._no_rule(n))
            out = {"weight": param("weight")}
            if isinstance(n, LowRankDense):
                out.update({"bias": param("bias")} if n.bias is not None else {}, mid=act)
            accum, _ = self.resolve(g, n.name, "accum") if isinstance(n, KANLayer) else \
                self._given(g, n.name, "accum")
            out.update(act=act, accum=None if accum == AUTO else accum)
            return out, act
        if isinstance(n, ScaleShift):
            s, b = param("scale"), param("bias")
            if n.shift is not None and b.frac > x.frac + s.frac:
                raise self._error(self.resolve(g, n.name, "bias")[1], (
                    f"{n.describe()}: bias type {b.to_ap()} has {b.frac} fractional bits, more than the product of "
                    f"its input ({x.to_ap()}) and scale ({s.to_ap()}), {x.frac} + {s.frac} = {x.frac + s.frac}: "
                    "hls4ml adds such a bias at full precision, bitforge's ScaleShift adds its shift to the exact "
                    f"product and cannot; give the bias at most {x.frac + s.frac} fractional bits, or the scale or "
                    "the input more"))
            out = {"weight": s, **({"bias": b} if n.shift is not None else {}),
                   "act": typed("result", lambda where: _bn_type(x, s, b, cap)),
                   "accum": _full_sum_type(x, s, b if n.shift is not None else None)}
            return out, out["act"]
        if isinstance(n, LeakyReLU):
            if n.alpha.size == 1:
                slope = typed("param", lambda where: hls4ml_constant_type(float(n.alpha.ravel()[0])))
            else:
                slope = typed("param", lambda where: x)
            act = typed("result", activation)
            return {"weight": slope, "act": act}, act
        if isinstance(n, HardSigmoid) and not n.swish:
            act = typed("result", activation)
            return {"weight": HARD_SLOPE_TYPE, "act": act}, act
        if isinstance(n, (Reshape, Transpose)):
            return {}, x
        if isinstance(n, ArgMax):
            return {}, index_type(g.tensors[n.input].shape[-1])
        rules = {ReLU: activation, Table: activation, Softmax: activation, Pool: lambda where: x,
                 Add: lambda where: _add_type(xs[0], xs[1], cap),
                 Concat: lambda where: _concat_type(xs[0], xs[1], cap)}
        act = typed("result", rules.get(type(n), self._no_rule(n)))
        return {"act": act}, act

    def precision_spec(self, g: Graph) -> str:
        """The ``--precision`` spec that types ``g`` as this config types it in hls4ml (see the module docstring).

        The Model entry becomes global items; every node and graph input whose type (:meth:`types`) differs from
        what those give gets a ``NODE.FIELD`` override, and every ScaleShift a ``NODE.accum`` that cannot overflow
        (hls4ml's full-precision BatchNormalization; see :meth:`types`). Raises :class:`HlsConfigError` naming the
        key for what :meth:`types` refuses.
        """
        types = self.types(g)
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
            accum = [("accum", "accum")] if isinstance(node, ScaleShift) else []
            for field_, _ in _fields(g, name) + accum:
                want = types[name][field_]
                have = base.lookup(name, field_) if node is None else base.for_node(node, field_)
                if want != have:
                    overrides.append(f"{name}.{field_}={AUTO if want is None else _type_text(want)}")
        text = ",".join(head + overrides)
        self._parse(text, "Precision")
        return text

    def as_hls4ml_writes(self, g: Graph) -> Graph:
        """A copy of float graph ``g`` whose weights are the values hls4ml's firmware is built from under this
        config: each array of a Dense, Conv, LowRankDense, BatchNorm (ScaleShift) and PReLU replaced by
        :func:`hls4ml_text_values` at the type :meth:`types` gives it (float64). Quantizing the copy with
        :meth:`precision_spec` then gives hls4ml's codes; quantizing ``g`` itself can differ by one code wherever
        the decimal text crosses a rounding boundary. A LeakyReLU's one slope is written by hls4ml at full
        precision and a KANLayer has no hls4ml layer: both keep their values. A fixed-point ``g`` is dequantized
        first (its codes stand for the float model hls4ml would be given)."""
        if any(not g.tensors[n.output].is_float for n in g.nodes):
            g = dequantize_graph(g)
        types = self.types(g)
        out = g.copy()
        nodes = []
        for n in out.nodes:
            t = types[n.name]
            arrays = {}
            if isinstance(n, (Dense, Conv)):
                arrays = {"weight": t["weight"], "bias": t.get("bias")}
            elif isinstance(n, LowRankDense):
                arrays = {"u": t["weight"], "v": t["weight"], "bias": t.get("bias")}
            elif isinstance(n, ScaleShift):
                arrays = {"scale": t["weight"], "shift": t.get("bias")}
            elif isinstance(n, LeakyReLU) and n.alpha.size > 1:
                arrays = {"alpha": t["weight"]}
            nodes.append(replace(n, **{f: hls4ml_text_values(getattr(n, f), ty) for f, ty in arrays.items()
                                       if getattr(n, f) is not None and ty is not None}))
        out.nodes = nodes
        return out

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


#: Ops whose output type follows from the op: a config cannot type them ('auto' is what they compute).
_NO_TYPE = {Reshape: "moves data only: its output type is its input's",
            Transpose: "moves data only: its output type is its input's",
            ArgMax: "outputs integer indices: its type is ufixed<B,B>, B the bits of the last index"}
_NO_ACCUM = {ScaleShift: "has no accumulator: like hls4ml's BatchNormalization it computes scale * x + shift at "
                         "full precision",
             Pool: "has no accumulator type in bitforge (max: the largest input; average: the exact window sum "
                   "times a reciprocal), so only 'auto' is read there",
             Softmax: "has no accumulator type in bitforge (it builds its own tables, --precision table_size=N)"}


#: The prefix bitforge's torch frontend gives each op's node names (``<prefix>_<module path>``).
_TORCH_PREFIX = {Dense: "dense", LowRankDense: "lowrank", KANLayer: "kan", Conv: "conv", Pool: "pool",
                 ScaleShift: "batchnorm", LeakyReLU: "leaky_relu", HardSigmoid: "hard_sigmoid", Table: "table",
                 Softmax: "softmax", ArgMax: "argmax", Reshape: "reshape", Transpose: "transpose", Concat: "concat",
                 ReLU: "relu", Add: "add"}


def hls4ml_aliases(g: Graph) -> dict[str, str]:
    """hls4ml's names for the graph's layers (lowercase) -> the graph's names, where they differ.

    hls4ml names a PyTorch model's layers after torch.fx's node names: the module path with dots as underscores
    (``fc1``, ``layers_0``), ``_0`` for a path that starts with a digit (a Sequential's ``0``), and the input
    after the forward argument (``x``; ``input_1`` for one called ``input``). bitforge's torch frontend names
    nodes ``<op>_<path>`` (``dense_fc1``, ``relu_1``, ``leaky_relu_act``; a functional op keeps torch.fx's name,
    as hls4ml does); a name without its op's prefix loses what precedes its first underscore. A BatchNorm folded
    into the layer before it (``g.metadata[FOLDED_KEY]``) keeps its names: hls4ml has the layer until it fuses it.
    An alias that two layers would share is left out: such a key must use the graph's own name."""
    counts: dict[str, list[str]] = {}
    layers = [(n.name, type(n)) for n in g.nodes] + \
        [(r["scale_shift"], ScaleShift) for r in g.metadata.get(FOLDED_KEY, [])]
    names = {name.lower() for name, _ in layers} | {i.lower() for i in g.inputs}
    for name, op in layers:
        prefix = f"{_TORCH_PREFIX.get(op, '')}_"
        if name.startswith(prefix) and len(name) > len(prefix):
            rest = name[len(prefix):]
        elif "_" in name:
            rest = name.split("_", 1)[1]
        else:
            continue
        for alias in {rest, f"_{rest}" if rest[:1].isdigit() else rest}:
            counts.setdefault(alias.lower(), []).append(name)
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
                if key not in (*_PROJECT_KEYS, *_MODEL_ARGS):
                    raise self.error(key, _REFUSED_TOP.get(key, self.unknown((*_PROJECT_KEYS, *_MODEL_ARGS))))
            project = self.project(top)
            cfg, prefix = self.mapping(top["HLSConfig"], "HLSConfig"), "HLSConfig."
        else:
            cfg, prefix = top, ""
        for key in cfg:
            if key not in (*_CONFIG_KEYS, *_MODEL_ARGS):
                why = (f"belongs beside HLSConfig in hls4ml's project configuration ({{HLSConfig: ..., {key}: ...}})"
                       if key in _PROJECT_KEYS else _REFUSED_TOP.get(key, self.unknown((*_CONFIG_KEYS, *_MODEL_ARGS))))
                raise self.error(f"{prefix}{key}", why)
        shapes = [(path, self.input_shape(value, path)) for path, value in
                  (("InputShape", top.get("InputShape") if prefix else None), (f"{prefix}InputShape",
                                                                               cfg.get("InputShape")))
                  if value is not None]
        if len(shapes) == 2 and shapes[0][1] != shapes[1][1]:
            raise self.error(shapes[1][0], f"differs from InputShape beside HLSConfig ({top['InputShape']!r}); "
                             "keep one")
        if "Model" not in cfg:
            raise self.error(f"{prefix}Model", "missing: hls4ml's HLSConfig needs Model: {Precision: {default: "
                             "ap_fixed<16,6>}, ReuseFactor: 1, Strategy: Latency} (the model-wide settings)")
        model_cfg = self.mapping(cfg["Model"], f"{prefix}Model")
        model = self.settings(model_cfg, f"{prefix}Model", _MODEL_KEYS, model=True)
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
        return HlsConfig(self.source, model, types, names, bram_factor=self.bram_factor(model_cfg, prefix),
                         input_shapes=shapes[0][1] if shapes else None, **self.layout(model_cfg, prefix), **project)

    def unknown(self, allowed) -> str:
        return f"bitforge does not understand this key (it reads {', '.join(allowed)}); remove it"

    def input_shape(self, value, path: str) -> tuple[tuple[int, ...], ...]:
        """hls4ml's InputShape: one shape (``[16]``, ``(2, 8)``) or one per input (``[[16], [8]]``)."""
        def dims(v) -> Optional[tuple[int, ...]]:
            ok = isinstance(v, (list, tuple)) and v and all(
                isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in v)
            return tuple(v) if ok else None

        one = dims(value)
        many = [dims(v) for v in value] if isinstance(value, (list, tuple)) and value else [None]
        if one is None and None in many:
            raise self.error(path, f"expected the input's shape without the batch axis, e.g. [16] or [2, 8] (one "
                             f"per input for several: [[16], [8]]), found {value!r}")
        return (one,) if one is not None else tuple(many)

    def layout(self, model: dict, prefix: str) -> dict:
        out: dict = {}
        if "ChannelsLastConversion" in model:
            value = model["ChannelsLastConversion"]
            if value not in _CHANNELS_LAST:
                raise self.error(f"{prefix}Model.ChannelsLastConversion", f"expected full, internal or off (hls4ml "
                                 f"compares these exact words), found {value!r}")
            out["channels_last"] = value
        if "TransposeOutputs" in model:
            value = model["TransposeOutputs"]
            if not isinstance(value, bool):
                raise self.error(f"{prefix}Model.TransposeOutputs", f"expected true or false, found {value!r}")
            out["transpose_outputs"] = value
        return out

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

    def settings(self, entry: dict, path: str, allowed: tuple[str, ...], model: bool = False) -> LayerSettings:
        for key in entry:
            if key not in allowed:
                raise self.error(f"{path}.{key}", self.unknown(allowed))
        for key in ("Trace", "TraceOutput"):  # hls4ml's per-layer output capture for debugging: changes no result
            if key in entry and not isinstance(entry[key], bool):
                raise self.error(f"{path}.{key}", f"expected true or false, found {entry[key]!r}")
        for key, default in _DEFAULT_ONLY.items():
            if key in entry and (entry[key] != default or type(entry[key]) is not type(default)):
                raise self.error(f"{path}.{key}", f"bitforge's project computes hls4ml's default, {default!r}, "
                                 f"found {entry[key]!r}; set it to {default!r} or remove the key")
        precision, tables = self.precision(entry.get("Precision"), f"{path}.Precision", model)
        if "TableSize" in entry:
            size = entry["TableSize"]
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise self.error(f"{path}.TableSize", f"expected a positive integer, found {size!r}")
            tables += ("TableSize",)
        return LayerSettings(path, precision, self.reuse(entry.get("ReuseFactor"), f"{path}.ReuseFactor"),
                             self.strategy(entry.get("Strategy"), f"{path}.Strategy"), tables)

    def precision(self, value, path: str, model: bool) -> tuple[tuple[tuple[str, Value], ...], tuple[str, ...]]:
        """(hls4ml's variables and their types, the keys that set a table) of one Precision entry."""
        if value is None:
            return (), ()
        if not isinstance(value, dict):
            value = {"default": value}
            where = lambda var: path  # noqa: E731
        else:
            where = lambda var: f"{path}.{var}"  # noqa: E731
        out, tables = {}, []
        for var, text in value.items():
            var = str(var)
            if var not in (*_VARS, *_TABLE_VARS) and not (model and var == "maximum"):
                raise self.error(where(var), _REFUSED_VARS.get(var) or (
                    f"bitforge does not map this Precision variable (it maps {', '.join(_VARS)}, and the table "
                    f"types {', '.join(_TABLE_VARS)}); remove it"))
            try:
                parsed = parse_hls_type(text)
            except FixedTypeError as e:
                raise self.error(where(var), str(e)) from None
            if var in _TABLE_VARS:
                tables.append(f"Precision.{var}" if where(var) != path else "Precision")
            else:
                out[var] = parsed
        for var, what in (("default", "the model default"), ("maximum", "the cap on inferred types")):
            if model and out.get(var) == AUTO:
                raise self.error(where(var), f"{what} must be a type (hls4ml refuses 'auto' there too): 'auto' "
                                 "elsewhere is inferred from it")
        return tuple(out.items()), tuple(tables)

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
        if any(v == AUTO for var, v in p.items() if var in ("weight", "bias", "scale")) and \
                model.get("default") in (None, AUTO):
            raise self.error(f"{settings.path}.Precision", "'auto' weight or bias types take the model default "
                             "(a float model has no quantizer to take them from), and Model.Precision has none")
