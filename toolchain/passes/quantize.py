"""Post-training quantization: a float graph plus a precision spec becomes a fixed-point graph.

The spec is the CLI's ``--precision SPEC``. Grammar (items separated by commas outside ``<...>``)::

    SPEC  := ITEM (',' ITEM)*
    ITEM  := WIDTH                     weights and activations of WIDTH bits          8
           | 'w' WIDTH 'a' WIDTH       weight width, activation width                 w8a16
           | TYPE                      every weight, bias, activation, accumulator    ap_fixed<16,6>
           | KEY '=' VALUE             a global or per-layer choice                   weight=fixed<8,2,RND_CONV,SAT>
           | 'table_size=' COUNT       entries per lookup table (default 1024)        table_size=256
    KEY   := 'weight' | 'bias' | 'act' every layer's weights, biases, activations     bias=fixed<16,6>
           | 'accum'                   every layer's accumulators (TYPE or auto)      accum=fixed<24,10>
           | NODE '.' FIELD            one layer: FIELD is weight, bias, act, mid     fc1.weight=4
                                       or accum                                       fc1.accum=auto
    VALUE := WIDTH | TYPE | 'auto'     an accum takes a TYPE, or auto (inferred); the others a WIDTH or a TYPE
    TYPE  := fixed<W,I[,ROUNDING[,OVERFLOW]]>, ufixed<...>, ap_fixed<...> or ap_ufixed<...>
    WIDTH := an integer from 2 to 32
    COUNT := an integer from 2 to 65536

Examples: ``8``, ``w4a8``, ``weight=fixed<8,2,RND_CONV,SAT>,act=fixed<16,6,RND_CONV,SAT>``,
``w8a16,fc1.weight=fixed<6,1,RND_CONV,SAT>,fc2.act=12``, ``w8a16,table_size=256``, ``ap_fixed<16,6>``,
``ap_fixed<16,6>,fc1.accum=ap_fixed<24,10>``. Weights and activations must both be given: by a width, by
``wNaM``, by ``weight=``/``act=``, or by a bare TYPE. A bare TYPE is hls4ml's ``Model: {Precision: {default:
TYPE}}``: that type for every weight, bias, activation and accumulator; the other items override it, so
``ap_fixed<16,6>,accum=auto`` keeps hls4ml's default types with accumulators that cannot overflow.
``NODE.weight`` covers a LowRankDense's u and v, a KANLayer's coefficients, a Conv's weight, a ScaleShift's
scale, a LeakyReLU's slopes and a HardSigmoid's alpha and beta; ``NODE.bias`` a Conv's bias and a ScaleShift's
shift; ``NODE.mid`` is a LowRankDense's intermediate ``V x``; ``INPUT.act`` (a graph input's name) types its
quantizer. ``table_size`` is hls4ml's: at most that many entries in every Table and in each of a Softmax's two
tables.

Accumulators are hls4ml's ``accum_t``: the type each product and partial sum of a Dense, Conv or
LowRankDense (both stages: ``accum_v_type`` and ``accum_type``) and a KANLayer is held in, narrow ones
included (they round and wrap or saturate as their modes say). A width alone says nothing about where the
binary point goes, so an accum takes only a TYPE, or ``auto``: accumulators not given (or auto) are sized by
:func:`~bitforge.toolchain.passes.precision.infer_precision` so they cannot overflow. A KANLayer's sum is exact
at frac(coeff) + frac(basis), so only ``NODE.accum`` types it and its type must have that frac (the global
accum and a bare TYPE leave it to inference). A ScaleShift's sum ``x * scale + shift`` is exact at frac(x) +
frac(scale) too, and hls4ml's BatchNormalization has no accumulator (it adds at full precision), so the global
accum and a bare TYPE leave it to inference as well; ``NODE.accum`` types it (that frac again, wrapping or
saturating as its modes say): inference sizes it for the declared input range, and the HLS config pass gives
one that holds the sum for every code of the input's type (``passes/hls_config.py``), which is hls4ml's.

Explicit types are used exactly as given: no integer bits fitted, no unsigned promotion, a bias type kept as
typed (one with more fractional bits than frac(x) + frac(W) needs an explicit accumulator of its layer, which
it is converted into as in hls4ml; without one it is refused, since the inferred accumulator is exact).
A width alone lets the data choose the integer bits (the fewest that hold the values, sign included):
weights from each matrix's own min and max, activations from calibration ranges or, without calibration,
from the exact interval analysis of the fixed-point graph as it is built (then no activation can saturate
for inputs in ``metadata['input_range']``). Width-only types round to nearest even (RND_CONV) and saturate;
activations proven non-negative (ReLU outputs, inputs declared non-negative, interval lower bound >= 0)
are unsigned, which buys one bit of resolution. Width-only biases get twice the weight width (or the width
given) at frac(x) + frac(W) (the exact sum's LSB, so adding them rounds nothing), losing fractional bits only
when their integer part needs the room.

The ops of the models people bring: a Conv is quantized as a Dense (weight, bias), a ScaleShift's scale as a
weight and its shift as a bias. A LeakyReLU's slopes are weights: a width-only type fits its integer bits to
the slopes, so a power-of-two slope (0.125) is exact and 0.01 at 8 bits is 82 * 2**-13 (0.2 % off). A
HardSigmoid's alpha and beta share one type of max(16, weight width) bits with integer bits fitted to them
(fixed<16,1>: PyTorch's 1/6 is 5461 * 2**-15, ONNX's 0.2 is 6554 * 2**-15, beta 0.5 is exact). A Table's input
range is the proven interval of its input (narrowed to the calibration range when there is one), less the ends
where the rounded function is already constant (sigmoid's and tanh's flat tails): inputs beyond read the end
entries. Its output type is ufixed<A,0> for sigmoid, fixed<A,1> for tanh, else fitted to the function's range
over that input range (A: the activation width). A Softmax gets ``tables.softmax_tables`` (18-bit exp and
reciprocal tables) and a ufixed<A,1> output; an ArgMax ufixed<B,B> with B the bits of n - 1; Reshape and
Transpose keep their input's type (an act override for them is refused); Clip, Pool, Concat and the rest
take activation types like any other layer.

Only float graphs are accepted: a graph that already has fixed-point tensors raises
:class:`QuantizeError` (re-typing codes would round twice; quantize the float model instead).
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Mapping, Optional, Union

import numpy as np

from .. import emulate, fixed, tables
from ..bspline import index_params
from ..errors import BitforgeError
from ..fixed import FixedType, FixedTypeError, Overflow, Rounding, parse_type
from ..ir import (
    ArgMax,
    Clip,
    Conv,
    Dense,
    Graph,
    HardSigmoid,
    IRError,
    KANLayer,
    LeakyReLU,
    LowRankDense,
    Node,
    Quantize,
    Requantize,
    Reshape,
    ScaleShift,
    Softmax,
    Table,
    TensorSpec,
    Transpose,
    validate,
)
from ..weight_codes import WEIGHT_CODES_KEY, weight_code_counts
from .heads import index_type
from .intervals import Bounds, Stage, input_bounds, node_stages, round_to_code
from .precision import infer_precision
from .quantize_tables import (
    TableChoiceError,
    calibrated_codes,
    quantized_softmax,
    quantized_table,
    softmax_type,
    table_type,
)

__all__ = ["PrecisionSpec", "PrecisionSpecError", "QuantizeError", "parse_precision", "quantize_graph",
           "fit_integer_bits", "GRAMMAR", "AUTO", "LAYER_FIELDS", "GLOBAL_KEYS"]

GRAMMAR = __doc__.split("::", 1)[1].split("\n\n", 2)[1]
MIN_WIDTH, MAX_WIDTH = 2, 32
MIN_TABLE_SIZE, MAX_TABLE_SIZE = 2, 65536
#: HardSigmoid's alpha and beta get at least this many bits: 1/6 and 0.2 then land within 2**-16 of their value.
ALPHA_BITS = 16
LAYER_FIELDS = ("weight", "bias", "act", "mid", "accum")
#: The keys that set a precision for every layer (a bare TYPE sets all four).
GLOBAL_KEYS = ("weight", "bias", "act", "accum")
#: An accumulator left to :func:`~bitforge.toolchain.passes.precision.infer_precision` (hls4ml's ``'auto'``).
AUTO = "auto"

#: A width (integer bits chosen from the data) or an explicit type.
Precision = Union[int, FixedType]
#: An accumulator: an explicit type or :data:`AUTO`.
Accum = Union[FixedType, str]
_TYPE_ITEM = re.compile(r"\s*(ap_)?u?fixed\s*<.*>\s*", re.IGNORECASE)


class PrecisionSpecError(BitforgeError):
    """A ``--precision`` spec that does not follow the grammar; the message names the part and shows it."""


class QuantizeError(IRError):
    """A graph that cannot be quantized as asked; the message names the node or tensor."""


class _Problem(Exception):
    """One thing wrong with a spec; turned into a :class:`PrecisionSpecError` that shows where."""


def _spec_error(problem: str, part: Optional[str] = None, text: Optional[str] = None) -> PrecisionSpecError:
    of = f"bad precision spec {text!r}: " if text is not None else "bad precision spec: "
    where = f" (in {part!r})" if part is not None else ""
    return PrecisionSpecError(f"{of}{problem}{where}\nGrammar:\n{GRAMMAR}")


def _field_of(key: str) -> str:
    return key.rpartition(".")[2]


def _check_value(value, key: str) -> Union[Precision, Accum]:
    """A width or a type for ``key`` (``weight``, ``fc1.act``, ...); an accum takes a type or 'auto' only."""
    accum = _field_of(key) == "accum"
    if isinstance(value, str):
        text = value.strip()
        if text.lower() == AUTO:
            if not accum:
                raise _Problem(f"{key}: 'auto' is for accumulators only (infer_precision sizes them); give a width "
                               "or a fixed-point type")
            return AUTO
        value = int(text) if text.isdigit() else parse_type(text)
    if isinstance(value, FixedType):
        return value
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        if accum:
            raise _Problem(f"{key}: a width alone ({value}) does not say where an accumulator's binary point is; "
                           "give a TYPE (e.g. accum=fixed<24,10>) or 'auto' to let infer_precision size it")
        if not MIN_WIDTH <= int(value) <= MAX_WIDTH:
            raise _Problem(f"{key}: width {value} is outside {MIN_WIDTH}..{MAX_WIDTH}")
        return int(value)
    wanted = "a fixed-point type or 'auto'" if accum else "a width or a fixed-point type"
    raise _Problem(f"{key}: expected {wanted}, found {value!r}")


def _check_optional(value, key: str):
    return None if value is None else _check_value(value, key)


def _check_table_size(value) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) \
            or not MIN_TABLE_SIZE <= int(value) <= MAX_TABLE_SIZE:
        raise _Problem(f"table_size: expected a count of entries from {MIN_TABLE_SIZE} to {MAX_TABLE_SIZE}, "
                       f"found {value!r}")
    return int(value)


def _check_key(key: str) -> str:
    node, _, fld = str(key).rpartition(".")
    if not node or fld not in LAYER_FIELDS or re.search(r"[\s=,<>]", node):
        raise _Problem(f"key {key!r} is neither one of {', '.join(GLOBAL_KEYS)} nor NODE.FIELD with FIELD one of "
                       f"{', '.join(LAYER_FIELDS)}")
    return str(key)


def _text(p) -> str:
    return p if isinstance(p, str) else str(p) if isinstance(p, int) else p.to_short()


@dataclass(frozen=True)
class PrecisionSpec:
    """What ``--precision`` asks for: global precisions plus per-layer overrides.

    ``weight``, ``act`` and ``bias`` are widths or types, ``accum`` a type or :data:`AUTO`; ``default`` is the
    bare TYPE item (hls4ml's default), which stands in for each of the four that is None. Weights and
    activations must be given by one or the other; a bias left None is derived from its layer's types, an
    accumulator left None is inferred. ``overrides`` holds ``("NODE.FIELD", precision)`` pairs, FIELD one of
    :data:`LAYER_FIELDS`; ``table_size`` the entries of each lookup table (None:
    :data:`bitforge.toolchain.tables.TABLE_SIZE`). ``str(spec)`` is the spec in the grammar's canonical form and
    parses back to an equal spec.
    """

    weight: Optional[Precision] = None
    act: Optional[Precision] = None
    overrides: tuple[tuple[str, Union[Precision, Accum]], ...] = ()
    table_size: Optional[int] = None
    bias: Optional[Precision] = None
    accum: Optional[Accum] = None
    default: Optional[FixedType] = None

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "table_size", _check_table_size(self.table_size))
            for key in GLOBAL_KEYS:
                object.__setattr__(self, key, _check_optional(getattr(self, key), key))
            if self.default is not None:
                object.__setattr__(self, "default", parse_type(self.default))
            for key, what, example in (("weight", "weight", "w8a16, weight=... or one TYPE for everything"),
                                       ("act", "activation", "w8a16, act=... or one TYPE for everything")):
                if getattr(self, key) is None and self.default is None:
                    raise _Problem(f"no {what} precision given (add e.g. {example})")
            keys = [_check_key(k) for k, _ in self.overrides]
            twice = sorted({k for k in keys if keys.count(k) > 1})
            if twice:
                raise _Problem(f"override {twice[0]} is given twice")
            checked = tuple((k, _check_value(v, k)) for k, (_, v) in zip(keys, self.overrides))
        except (_Problem, FixedTypeError) as e:
            raise _spec_error(str(e)) from None
        object.__setattr__(self, "overrides", checked)

    def lookup(self, node: str, field: str) -> Optional[Precision]:
        """Precision of one layer's field: its override, else the global one, else the bare TYPE.

        None for a bias means derived from the layer's types, for an accumulator inferred (an AUTO one too);
        ``mid`` falls back to the global activation precision. Which layers a global accum reaches is
        :meth:`for_node`'s business.
        """
        for key, value in self.overrides:
            if key == f"{node}.{field}":
                return None if value == AUTO else value
        found = getattr(self, "act" if field == "mid" else field)
        found = self.default if found is None else found
        return None if found == AUTO else found

    def for_node(self, n: Node, field: str) -> Optional[Precision]:
        """:meth:`lookup` for layer ``n`` as the pass applies it: the global accum and a bare TYPE type the
        accumulators of Dense, Conv and LowRankDense only (a KANLayer's and a ScaleShift's have a fixed frac, and
        hls4ml's BatchNormalization has none), so those two get one only from ``NODE.accum``."""
        if field == "accum" and isinstance(n, (KANLayer, ScaleShift)):
            value = dict(self.overrides).get(f"{n.name}.accum")
            return None if value == AUTO else value
        return self.lookup(n.name, field)

    def __str__(self) -> str:
        head = [] if self.default is None else [self.default.to_short()]
        if isinstance(self.weight, int) and isinstance(self.act, int):
            head += [str(self.weight)] if self.weight == self.act else [f"w{self.weight}a{self.act}"]
        else:
            head += [f"{k}={_text(getattr(self, k))}" for k in ("weight", "act") if getattr(self, k) is not None]
        head += [f"{k}={_text(getattr(self, k))}" for k in ("bias", "accum") if getattr(self, k) is not None]
        size = [] if self.table_size is None else [f"table_size={self.table_size}"]
        return ",".join(head + [f"{k}={_text(v)}" for k, v in self.overrides] + size)

    @property
    def entries(self) -> int:
        """Entries per lookup table: the spec's ``table_size``, else hls4ml's default."""
        return tables.TABLE_SIZE if self.table_size is None else self.table_size


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside a type's ``<...>``."""
    parts, depth, current = [], 0, []
    for ch in text:
        depth += (ch == "<") - (ch == ">")
        if ch == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    parts.append("".join(current).strip())
    return parts


_WHAT = {"weight": "weight precision", "act": "activation precision", "bias": "bias precision",
         "accum": "accumulator type", "default": "type for everything (a bare TYPE)", "table_size": "table_size"}


def _parse_item(part: str, found: dict, overrides: list[tuple[str, Precision]]) -> None:
    def put(key: str, value) -> None:
        if key in found:
            raise _Problem(f"{_WHAT[key]} is given twice")
        found[key] = value

    if not part:
        raise _Problem("empty item (two commas in a row, or a trailing comma)")
    if part.isdigit():
        width = _check_value(int(part), "width")
        put("weight", width)
        put("act", width)
    elif m := re.fullmatch(r"[wW](\d+)[aA](\d+)", part):
        put("weight", _check_value(int(m[1]), "weight width"))
        put("act", _check_value(int(m[2]), "activation width"))
    elif "=" in part:
        key, value = (s.strip() for s in part.split("=", 1))
        if key in GLOBAL_KEYS:
            put(key, _check_value(value, key))
        elif key == "table_size":
            put(key, _check_table_size(value))
        else:
            overrides.append((_check_key(key), _check_value(value, key)))
    elif _TYPE_ITEM.fullmatch(part):
        put("default", parse_type(part))
    else:
        raise _Problem("unknown item; expected a width (8), wNaM (w8a16), a TYPE for everything (ap_fixed<16,6>) "
                       "or KEY=VALUE")


def parse_precision(text: str) -> PrecisionSpec:
    """Parse a ``--precision`` spec (grammar in the module docstring); raise :class:`PrecisionSpecError`."""
    if not isinstance(text, str) or not text.strip():
        raise _spec_error("the spec is empty", text=text)
    found: dict = {}
    overrides: list[tuple[str, Precision]] = []
    for part in _split_top_level(text):
        try:
            _parse_item(part, found, overrides)
        except (_Problem, FixedTypeError) as e:
            raise _spec_error(str(e), part, text) from None
    if "weight" not in found and "default" not in found:
        raise _spec_error("no weight precision given (add e.g. w8a16, weight=... or one TYPE for everything: "
                          "ap_fixed<16,6>)", text=text)
    if "act" not in found and "default" not in found:
        raise _spec_error("no activation precision given (add e.g. w8a16, act=... or one TYPE for everything: "
                          "ap_fixed<16,6>)", text=text)
    keys = [k for k, _ in overrides]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise _spec_error(f"override {twice[0]} is given twice", text=text)
    return PrecisionSpec(found.get("weight"), found.get("act"), tuple(overrides), found.get("table_size"),
                         found.get("bias"), found.get("accum"), found.get("default"))


# -- choosing types from values -----------------------------------------------------------------------

def fit_integer_bits(lo: Fraction, hi: Fraction, width: int, signed: bool,
                     rounding: Rounding = Rounding.RND_CONV) -> int:
    """Fewest integer bits of a ``width``-bit type such that ``lo`` and ``hi``, rounded, are in range.

    The smaller the integer part the finer the LSB, so this is the most precise type that does not
    saturate on the given values. May be negative (all values well below one) or exceed ``width``.
    """
    lo, hi = Fraction(lo), Fraction(hi)
    if not signed and lo < 0:
        raise ValueError(f"an unsigned type cannot hold {float(lo)}")
    m = max(abs(lo), abs(hi))
    if m == 0:
        return 1

    def fits(integer: int) -> bool:
        t = FixedType(width, integer, signed, rounding, Overflow.SAT)
        return all(t.min_code <= round_to_code(v, t) <= t.max_code for v in (lo, hi))

    integer = m.numerator.bit_length() - m.denominator.bit_length() + 3  # 2**(integer - 2) > m: always fits
    while not fits(integer):
        integer += 1
    while fits(integer - 1):
        integer -= 1
    return integer


def _type_from_range(width: int, lo: Fraction, hi: Fraction, signed: bool) -> FixedType:
    return FixedType(width, fit_integer_bits(lo, hi, width, signed), signed, Rounding.RND_CONV, Overflow.SAT)


def _weight_type(p: Precision, w: np.ndarray) -> FixedType:
    if isinstance(p, FixedType):
        return p
    return _type_from_range(p, Fraction(float(w.min(initial=0.0))), Fraction(float(w.max(initial=0.0))), True)


def _bias_type(n: Node, p: Optional[Precision], weight: FixedType, accum_frac: int, b: np.ndarray,
               accum: Optional[FixedType] = None) -> FixedType:
    """An explicit bias type as given; a width gets integer bits from the bias values at the exact sum's frac.

    A typed bias finer than the exact sum (frac(x) + frac(W) = ``accum_frac``) needs the layer's explicit
    ``accum``: hls4ml converts the bias into accum_t, while an inferred accumulator is exact and would have
    to round it.
    """
    if isinstance(p, FixedType):
        if p.frac > accum_frac and isinstance(n, ScaleShift):  # its sum's frac is fixed: no accum can take it
            raise QuantizeError(f"{n.describe()}: shift type {p.to_short()} has {p.frac} fractional bits, more than "
                                f"the exact product's frac(x) + frac(scale) = {accum_frac}; give it at most "
                                f"{accum_frac}")
        if p.frac > accum_frac and accum is None:
            raise QuantizeError(f"{n.describe()}: bias type {p.to_short()} has {p.frac} fractional bits, more than "
                                f"the exact sum's frac(x) + frac(W) = {accum_frac}; give it fewer, or give the "
                                f"layer an accumulator type to convert it into ({n.name}.accum=TYPE)")
        return p
    width = p if p is not None else 2 * weight.width
    need = fit_integer_bits(Fraction(float(b.min())), Fraction(float(b.max())), width, True)
    return FixedType(width, max(need, width - accum_frac), True, Rounding.RND_CONV, Overflow.SAT)


def _codes(values: np.ndarray, t: FixedType, n: Optional[Node] = None, field: str = "") -> np.ndarray:
    """Codes of ``t``; a weight outside ``t``'s range is an error: a type too narrow for its values."""
    values = np.asarray(values, dtype=np.float64)
    bad = fixed.out_of_range(values, t)
    if bad.any():
        where = f"{n.describe()}: '{field}'" if n is not None else "values"
        raise QuantizeError(f"{where}: type {t.to_short()} is too narrow for its values: it holds "
                            f"[{t.min_value}, {t.max_value}], found [{values.min()}, {values.max()}] "
                            f"({int(bad.sum())} value(s) outside); give the type more integer bits")
    return fixed.quantize(values, t)


# -- checks on the float graph ------------------------------------------------------------------------

def _require_float(g: Graph) -> None:
    for n in g.nodes:
        if isinstance(n, (Quantize, Requantize)):
            raise QuantizeError(f"graph '{g.name}' is already quantized ({n.describe()} exists); --precision "
                                "applies to float models: drop the flag, or quantize the float model instead")
    for t in g.tensors.values():
        if not t.is_float:
            raise QuantizeError(f"graph '{g.name}' is already quantized (tensor '{t.name}' is {t.type_str()}); "
                                "--precision applies to float models: drop the flag, or quantize the float "
                                "model instead")


def _require_finite(g: Graph) -> None:
    for n in g.nodes:
        for field, a in n.array_fields().items():
            bad = ~np.isfinite(np.asarray(a, dtype=np.float64))
            if bad.any():
                first = tuple(int(i) for i in np.argwhere(bad)[0])
                raise QuantizeError(f"{n.describe()}: '{field}' holds {int(bad.sum())} NaN/Inf value(s), first at "
                                    f"index {first}; these weights have no fixed-point code: fix or retrain the "
                                    "model before quantizing")


def _check_overrides(g: Graph, spec: PrecisionSpec) -> None:
    layers = {n.name: n for n in g.nodes}
    for key, _ in spec.overrides:
        name, _, fld = key.rpartition(".")
        n = layers.get(name)
        if n is None:
            if name in g.inputs and fld == "act":
                continue
            raise QuantizeError(f"precision override '{key}': graph '{g.name}' has no node '{name}' "
                                f"(nodes: {', '.join(layers)}; inputs take '<input>.act')")
        if fld == "act" and type(n) in _FIXED_OUTPUT:
            raise QuantizeError(f"precision override '{key}': {n.describe()} {_FIXED_OUTPUT[type(n)]}; drop the "
                                "override")
        ok = {"weight": isinstance(n, (Dense, LowRankDense, KANLayer, Conv, ScaleShift, LeakyReLU, HardSigmoid)),
              "bias": (isinstance(n, (Dense, LowRankDense, Conv)) and n.bias is not None)
              or (isinstance(n, ScaleShift) and n.shift is not None),
              "act": True, "mid": isinstance(n, LowRankDense),
              "accum": isinstance(n, (Dense, LowRankDense, Conv, KANLayer, ScaleShift))}[fld]
        if not ok:
            raise QuantizeError(f"precision override '{key}': {n.describe()} has no "
                                f"{'accumulator' if fld == 'accum' else fld}")


#: Ops whose output type follows from the op, not from the spec (why, for the refusal of an act override).
_FIXED_OUTPUT = {Reshape: "moves data only: its output type is its input's",
                 Transpose: "moves data only: its output type is its input's",
                 ArgMax: "outputs integer indices: its type is ufixed<B,B>, B the bits of the last index"}


# -- calibration --------------------------------------------------------------------------------------

def _observed_ranges(g: Graph, calibration) -> dict[str, tuple[Fraction, Fraction]]:
    """Min and max of every float tensor (and LowRankDense intermediate) over the calibration batch."""
    batch = calibration if isinstance(calibration, Mapping) else {g.inputs[0]: calibration} \
        if len(g.inputs) == 1 else None
    if batch is None:
        raise QuantizeError(f"graph '{g.name}' has inputs {g.inputs}: give calibration data as a dict")
    for name, a in batch.items():
        a = np.asarray(a)
        if a.size == 0 or not np.all(np.isfinite(a)):
            raise QuantizeError(f"calibration data for input '{name}' is empty or holds NaN/Inf")
    env = emulate.run(g, batch, keep=True)
    for n in g.nodes:
        if isinstance(n, LowRankDense):
            env[f"{n.name}.mid"] = env[n.input] @ np.asarray(n.v, dtype=np.float32).T
    return {k: (Fraction(float(v.min())), Fraction(float(v.max()))) for k, v in env.items()}


# -- building the fixed graph -------------------------------------------------------------------------

@dataclass
class _Builder:
    """The fixed graph as it grows, node by node, with the bounds of everything built so far."""

    src: Graph
    spec: PrecisionSpec
    observed: Optional[dict[str, tuple[Fraction, Fraction]]]
    tensors: dict[str, TensorSpec]
    nodes: list[Node]
    env: dict[str, Bounds]
    declared: bool  # the graph has metadata['input_range']
    #: quantized graph input -> the float tensor it stands for
    source: dict[str, str] = dataclasses.field(default_factory=dict)

    def graph(self) -> Graph:
        return Graph(self.src.name, list(self.src.inputs), list(self.src.outputs), self.tensors, self.nodes,
                     self.src.metadata)

    def stages(self, n: Node) -> list[Stage]:
        return node_stages(Graph(self.src.name, [], [], self.tensors, self.nodes + [n]), n, self.env)

    def activation(self, n: Node, key: str, tensor: str, stage: Stage, proven: bool) -> FixedType:
        """Type of one activation: explicit, or its width with integer bits from the observed or proven range."""
        p = self.spec.lookup(key, "mid" if stage.where == "intermediate" else "act")
        if isinstance(p, FixedType):
            return p
        if proven or self.observed is None:
            lo, hi = _proven_span(stage.exact, tensor, key)
            signed = lo < 0
        else:
            lo, hi = self.observed[n.input if isinstance(n, Quantize) else tensor]  # a quantizer sees its input
            # Unsigned where the analysis proves the values >= 0 (ReLU, Clip at 0, an average of those...): the
            # float calibration run may still dip a rounding below 0 there.
            signed = not stage.exact.span()[0] >= 0
            lo = lo if signed else max(lo, Fraction(0))
        return _type_from_range(p, lo, hi, signed)

    def table(self, n: Table, key: str) -> tuple[Table, FixedType]:
        """A Table's output type and entries over the codes its input can reach (see quantize_tables)."""
        x, b = self.tensors[n.input].dtype, self.env[n.input]
        seen = None if self.observed is None else self.observed.get(self.source.get(n.input, n.input))
        lo, hi = calibrated_codes(x, int(min(b.lo.ravel())), int(max(b.hi.ravel())), seen)
        p = self.spec.lookup(key, "act")
        try:
            out = p if isinstance(p, FixedType) else table_type(n.function, p, x, lo, hi, _type_from_range)
            return quantized_table(n, x, lo, hi, out, self.spec.entries), out
        except TableChoiceError as e:
            raise QuantizeError(f"{n.describe()}: {e}") from None

    def softmax(self, n: Softmax, key: str) -> tuple[Softmax, FixedType]:
        p = self.spec.lookup(key, "act")
        spec = self.tensors[n.input]
        try:
            q = quantized_softmax(n, spec.dtype, spec.shape[-1], self.spec.entries)
        except TableChoiceError as e:
            raise QuantizeError(f"{n.describe()}: {e}") from None
        return q, p if isinstance(p, FixedType) else softmax_type(p)

    def add(self, n: Node, key: str, proven: bool = False) -> None:
        """Type ``n``'s output (its intermediate first, for LowRankDense), then append it."""
        if isinstance(n, LowRankDense):
            mid_stage = next(s for s in self.stages(dataclasses.replace(n, bias=None)) if s.where == "intermediate")
            mid = self.activation(n, n.name, f"{n.name}.mid", mid_stage, proven)
            n = _low_rank_bias(dataclasses.replace(n, mid_type=mid), self.spec)
        if isinstance(n, Table):
            n, t = self.table(n, key)
        elif isinstance(n, Softmax):
            n, t = self.softmax(n, key)
        elif isinstance(n, ArgMax):
            t = index_type(self.tensors[n.input].shape[-1])
        elif isinstance(n, (Reshape, Transpose)):
            t = self.tensors[n.input].dtype
        else:
            t = self.activation(n, key, n.output, self.stages(n)[-1], proven)
        self.tensors[n.output] = dataclasses.replace(self.tensors[n.output], dtype=t)
        self.env[n.output] = self.stages(n)[-1].result
        self.nodes.append(n)


def _proven_span(b: Bounds, tensor: str, key: str) -> tuple[Fraction, Fraction]:
    lo, hi = b.span()
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise QuantizeError(f"cannot choose integer bits for '{tensor}' ({key}): its range is unknown; pass "
                            "calibration data, set metadata['input_range'], or give an explicit type "
                            f"({key}.act=fixed<...>)")
    return b.exact_span() if not b.is_float else (Fraction(lo), Fraction(hi))


def _quantize_layer(n: Node, spec: PrecisionSpec, x: FixedType) -> Node:
    """Weights to codes (LowRankDense's bias waits for its mid type); accumulators the spec types are set, the
    others stay None for infer_precision."""
    p = spec.lookup(n.name, "weight")
    accum = spec.for_node(n, "accum")
    if isinstance(n, (Dense, Conv)):
        wt = _weight_type(p, n.weight)
        fields = dict(weight=_codes(n.weight, wt, n, "weight"), weight_type=wt)
        if n.bias is not None:
            bt = _bias_type(n, spec.lookup(n.name, "bias"), wt, x.frac + wt.frac, n.bias, accum)
            fields.update(bias=_codes(n.bias, bt, n, "bias"), bias_type=bt)
        return dataclasses.replace(n, accum_type=accum, **fields)
    if isinstance(n, LowRankDense):
        ut, vt = _weight_type(p, n.u), _weight_type(p, n.v)
        return dataclasses.replace(n, u=_codes(n.u, ut, n, "u"), v=_codes(n.v, vt, n, "v"), u_type=ut, v_type=vt,
                                   mid_type=None, accum_v_type=accum, accum_type=accum)
    if isinstance(n, ScaleShift):
        st = _weight_type(p, n.scale)
        if accum is not None and accum.frac != x.frac + st.frac:
            raise QuantizeError(f"{n.describe()}: accumulator type {accum.to_short()} has {accum.frac} fractional "
                                f"bits; a ScaleShift sums the exact product x * scale and its shift at frac(x) + "
                                f"frac(scale) = {x.frac} + {st.frac} = {x.frac + st.frac} (input {x.to_short()}, "
                                f"scale {st.to_short()}): give it {x.frac + st.frac} fractional bits, or drop the "
                                f"override ({n.name}.accum=auto) to let infer_precision size it")
        fields = dict(scale=_codes(n.scale, st, n, "scale"), scale_type=st)
        if n.shift is not None:
            ht = _bias_type(n, spec.lookup(n.name, "bias"), st, x.frac + st.frac, n.shift)
            fields.update(shift=_codes(n.shift, ht, n, "shift"), shift_type=ht)
        return dataclasses.replace(n, accum_type=accum, **fields)
    if isinstance(n, LeakyReLU):
        at = _weight_type(p, n.alpha)
        return dataclasses.replace(n, alpha=_codes(n.alpha, at, n, "alpha"), alpha_type=at)
    if isinstance(n, HardSigmoid):
        ab = np.array([n.alpha, n.beta], dtype=np.float64)
        at = p if isinstance(p, FixedType) else _type_from_range(max(ALPHA_BITS, p), Fraction(float(ab.min())),
                                                                  Fraction(float(ab.max())), True)
        alpha_code, beta_code = (int(c) for c in _codes(ab, at, n, "alpha and beta"))
        return dataclasses.replace(n, alpha_type=at, alpha_code=alpha_code, beta_code=beta_code)
    if isinstance(n, KANLayer):
        ct = _weight_type(p, n.coeffs)
        # Basis weights lie in [0, 1]: one integer bit, as many fractional bits as the coefficients' width.
        bt = FixedType(ct.width + 1, 1, False, Rounding.RND_CONV, Overflow.SAT)
        if accum is not None and accum.frac != ct.frac + bt.frac:
            raise QuantizeError(f"{n.describe()}: accumulator type {accum.to_short()} has {accum.frac} fractional "
                                f"bits; a KANLayer sums exact products at frac(coeff) + frac(basis) = {ct.frac} + "
                                f"{bt.frac} = {ct.frac + bt.frac} (coefficients {ct.to_short()}, basis "
                                f"{bt.to_short()}): give it {ct.frac + bt.frac} fractional bits, or drop the "
                                f"override ({n.name}.accum=auto) to let infer_precision size it")
        lo, mult, shift, u_bits = index_params(n.grid_lo, n.grid_hi, n.grid_size, x)
        return dataclasses.replace(n, coeffs=_codes(n.coeffs, ct, n, "coeffs"), coeff_type=ct, basis_type=bt,
                                   u_bits=u_bits, index_lo=lo, index_mult=mult, index_shift=shift, accum_type=accum)
    return n


def _low_rank_bias(n: LowRankDense, spec: PrecisionSpec) -> LowRankDense:
    if n.bias is None:
        return n
    bt = _bias_type(n, spec.lookup(n.name, "bias"), n.u_type, n.mid_type.frac + n.u_type.frac, n.bias,
                    n.accum_type)
    return dataclasses.replace(n, bias=_codes(n.bias, bt, n, "bias"), bias_type=bt)


def _unique(name: str, taken: set[str]) -> str:
    out, i = name, 1
    while out in taken:
        out, i = f"{name}_{i}", i + 1
    return out


def _bounds_its_output(n: Node) -> bool:
    """Whether ``n``'s output lies in a fixed range whatever its input (a table after it has a range again)."""
    return ((isinstance(n, Clip) and n.lo is not None and n.hi is not None) or isinstance(n, (Softmax, ArgMax))
            or (isinstance(n, Table) and n.function in ("sigmoid", "tanh"))
            or (isinstance(n, HardSigmoid) and not n.swish))


def _table_without_range(g: Graph, name: str) -> Optional[QuantizeError]:
    """When graph input ``name`` has no range to type its quantizer with: the first Table or Softmax that input
    reaches with nothing in between that bounds it, named, since its table is what most needs that range."""
    unbounded = {name}
    for n in g.nodes:
        if isinstance(n, (Table, Softmax)) and n.input in unbounded:
            return QuantizeError(
                f"{n.describe()}: its input '{n.input}' has no known range (graph input '{name}' has no declared "
                "range and no calibration data), so its lookup table cannot be built; pass --input-range LO,HI "
                f"(metadata['input_range']), calibration data, or an explicit act type ('{name}.act=fixed<W,I>', "
                "which bounds every tensor after it)")
        if unbounded.intersection(n.inputs) and not _bounds_its_output(n):
            unbounded.add(n.output)
    return None


def _range_source(calibration) -> str:
    if calibration is None:
        return "interval analysis"
    first = next(iter(calibration.values())) if isinstance(calibration, Mapping) else calibration
    return f"calibration ({len(first)} samples)"


def quantize_graph(g: Graph, spec: Union[PrecisionSpec, str], calibration=None) -> Graph:
    """Turn a float graph into a fixed-point one.

    Afterwards: each float graph input feeds a new Quantize node (``<input>_quantize`` -> ``<input>_q``);
    every layer holds integer codes of its weight/bias types; every tensor is typed as ``spec`` says
    (width-only activations from ``calibration`` ranges, else from the interval analysis under
    ``metadata['input_range']``); accumulators the spec types carry exactly those types, the others come from
    :func:`infer_precision`; the graph validates.
    ``metadata['quantization']`` records the spec and where the activation ranges came from.
    ``calibration`` is a float batch ``(N, *shape)`` (or a dict per input) run through the float graph.
    """
    if isinstance(spec, str):
        spec = parse_precision(spec)
    _require_float(g)
    _require_finite(g)
    validate(g)
    _check_overrides(g, spec)
    observed = _observed_ranges(g, calibration) if calibration is not None else None
    b = _Builder(g, spec, observed, dict(g.tensors), [], input_bounds(g), "input_range" in g.metadata)
    taken = set(g.tensors) | {n.name for n in g.nodes}
    renamed: dict[str, str] = {}
    for name in g.inputs:
        if not g.consumers(name):
            continue
        q_name, q_tensor = _unique(f"{name}_quantize", taken), _unique(f"{name}_q", taken)
        taken |= {q_name, q_tensor}
        b.tensors[q_tensor] = TensorSpec(q_tensor, g.tensors[name].shape, None)
        # A declared input range is a promise, so it beats calibration for the quantizer.
        try:
            b.add(Quantize(q_name, (name,), (q_tensor,)), name, proven=b.declared)
        except QuantizeError as e:
            raise _table_without_range(g, name) or e from None
        renamed[name] = q_tensor
        b.source[q_tensor] = name
    counts = {}
    for n in g.nodes:
        n = dataclasses.replace(n, inputs=tuple(renamed.get(t, t) for t in n.inputs))
        q = _quantize_layer(n, spec, b.tensors[n.input].dtype)
        counts.update(_weight_counts(n, q))
        b.add(q, n.name)
    out = infer_precision(b.graph())
    out.metadata["quantization"] = {"spec": str(spec), "activation_ranges": _range_source(calibration)}
    out.metadata[WEIGHT_CODES_KEY] = counts  # check_precision warns from these (zeroed or saturated weights)
    return validate(out)


#: The weight arrays of each layer op and their type fields.
_WEIGHT_FIELDS = {Dense: (("weight", "weight_type"),), LowRankDense: (("u", "u_type"), ("v", "v_type")),
                  KANLayer: (("coeffs", "coeff_type"),), Conv: (("weight", "weight_type"),),
                  ScaleShift: (("scale", "scale_type"),), LeakyReLU: (("alpha", "alpha_type"),)}


def _weight_counts(float_node: Node, q: Node) -> dict[str, dict]:
    """``{"<node>.<field>": weight_code_counts(...)}`` for each weight array of a layer the pass quantized."""
    return {f"{q.name}.{field}": weight_code_counts(getattr(float_node, field), getattr(q, field), getattr(q, tf))
            for field, tf in _WEIGHT_FIELDS.get(type(q), ()) if getattr(q, tf, None) is not None}
