"""hls4ml extension layers for the IR ops whose hls4ml counterpart computes different bits.

hls4ml's own Softmax, activation tables, pooling and PReLU round and index differently from bitforge's golden
model (``toolchain/emulate.py``; ``docs/ir.md`` has each rule), so the HLS backend adds these ops as extension
layers (hls4ml's ``advanced/extension`` API): one hls4ml ``Layer`` class per op, a config template and a
function-call template shared by all of them, and C++ headers in ``hls/`` (package ``bitforge.hls``:
``bitforge_common.h``, ``bitforge_ops.h``, ``bitforge_kan.h``) that compute on the golden model's integer codes.
The C simulation of a project built from them is checked against the golden model bit for bit
(``tests/test_hls_extensions.py``).

Contract with the converter (``convert.py``):

- :data:`EXTENSION_OPS`: the IR op names converted here: KANLayer, Table, Softmax, ArgMax, Clip, HardSigmoid
  (HardSwish with ``swish``), LeakyReLU (one slope or one per channel), ScaleShift, Pool (``avg`` and ``max``).
- :func:`register_extensions`: registers the layer classes, templates and headers with hls4ml's Vivado and
  Vitis backends; idempotent (hls4ml's registries are process-global). Call it before
  ``ModelGraph.from_layer_list``.
- :func:`extension_layer` ``(g, n, inputs) -> dict``: the hls4ml layer-list entry of node ``n``:
  ``class_name`` (``Bitforge<op>``), ``name`` (the IR node name), ``inputs`` (the given hls4ml variable names)
  and bitforge's attributes: ``bf_shape`` (the output's per-sample shape), ``bf_precisions`` (hls4ml precision
  objects: ``result`` = the IR output type, one per array at its IR type), ``<array>_data`` (real values
  ``code * 2**-frac``, exact in float64 and in hls4ml's decimal weight files), ``bf_weights``, ``bf_constants``
  (every index constant and intermediate width, computed here) and ``bf_typedefs`` (the accumulator type).
  The layer carries every type itself: the converter's HLSConfig sets no precision for it.
- Layout: every tensor in the IR's per-sample layout, C order, channels first ((C,), (C, L), (C, H, W)),
  flattened as one array: io_parallel only (a layer built under io_stream raises).

The arithmetic is the golden model's: each input's code is read (``code_of``), index maps, products and sums are
exact ``ap_int`` arithmetic at widths computed here (nothing wraps unless the IR says so), and each result is
requantized once by assignment to its IR type, whose ap_fixed rounding and overflow modes are bitforge's
(``toolchain/fixed.py`` is tested against the ap_fixed headers). The KAN layer reads the golden model's own basis
table (``bspline.basis_table``) from a ROM, for both ``basis_impl`` values: the table is the function, so the
bits agree by construction. Reuse factor and strategy do not apply: every layer is fully parallel (II 1 under
the top function's pipeline).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Optional, Union

import numpy as np

from ...bspline import basis_table
from ...emulate import clip_codes
from ...errors import BitforgeError
from ...fixed import FixedType, signed_bits
from ...ir import Graph, Node
from .types import ap_type_string, hls_precision

__all__ = ["EXTENSION_OPS", "BACKENDS", "HEADERS", "ExtensionError", "register_extensions", "extension_layer",
           "header_paths"]

#: hls4ml backends the extension layers are registered with.
BACKENDS = ("Vivado", "Vitis")
#: The C++ headers (package ``bitforge.hls``) that hls4ml copies into the project's ``firmware/nnet_utils``.
HEADERS = ("bitforge_common.h", "bitforge_ops.h", "bitforge_kan.h")
#: IR op -> (hls4ml layer class name, C++ function in namespace ``bitforge``).
_LAYERS = {
    "KANLayer": ("BitforgeKANLayer", "kan_layer"),
    "Table": ("BitforgeTable", "table"),
    "Softmax": ("BitforgeSoftmax", "softmax"),
    "ArgMax": ("BitforgeArgMax", "argmax"),
    "Clip": ("BitforgeClip", "clip"),
    "HardSigmoid": ("BitforgeHardSigmoid", "hard_sigmoid"),
    "LeakyReLU": ("BitforgeLeakyReLU", "leaky_relu"),
    "ScaleShift": ("BitforgeScaleShift", "scale_shift"),
    "Pool": ("BitforgePool", "pool"),
}
#: The IR ops this module converts.
EXTENSION_OPS: frozenset[str] = frozenset(_LAYERS)

#: hls4ml writes weights as decimal text that ap_fixed reads through a double: exact for codes of <= 53 bits.
_MAX_ARRAY_WIDTH = 53
#: Constants are C++ literals (long long); codes beyond this are refused.
_MAX_CONSTANT = 2 ** 62
#: ap_int's widest type unless AP_INT_MAX_W is raised (the ap_int headers' default).
_AP_INT_MAX_W = 1024


class ExtensionError(BitforgeError):
    """An IR node that the HLS extension layers cannot compute bit-exactly as given; the message names it."""


@dataclass
class _Spec:
    """What one op needs in C++: its config constants, its arrays (argument order) and extra typedefs."""

    constants: dict[str, Union[int, bool]]
    weights: list[tuple[str, np.ndarray, FixedType, str]] = field(default_factory=list)  # name, codes, type, typedef
    typedefs: dict[str, FixedType] = field(default_factory=dict)


# -- the layer-list entry -------------------------------------------------------------------------------------

def extension_layer(g: Graph, n: Node, inputs: list[str]) -> dict:
    """hls4ml's layer-list dict for IR node ``n`` of ``g``, reading the hls4ml variables ``inputs``."""
    if n.OP not in _LAYERS:
        raise ExtensionError(f"{n.describe()}: no HLS extension layer for op {n.OP}; extension layers exist for "
                             f"{', '.join(sorted(EXTENSION_OPS))}")
    for t in (*n.inputs, n.output):
        if g.tensors[t].is_float:
            raise ExtensionError(f"{n.describe()}: tensor '{t}' is float32; the HLS extension layers compute in "
                                 "fixed point (quantize the graph first: bitforge compile --precision)")
    if len(inputs) != len(n.inputs):
        raise ExtensionError(f"{n.describe()}: {len(n.inputs)} input(s) in the IR, {len(inputs)} hls4ml variable(s) "
                             "given")
    spec = _BUILDERS[n.OP](g, n)
    out = g.tensors[n.output]
    class_name, function = _LAYERS[n.OP]
    layer = {"class_name": class_name, "name": n.name, "inputs": list(inputs), "bf_function": function,
             "bf_ir_op": n.OP, "bf_shape": [int(s) for s in out.shape] or [1],
             "bf_constants": {k: (v if isinstance(v, bool) else int(v)) for k, v in spec.constants.items()},
             "bf_weights": [(name, typedef) for name, _, _, typedef in spec.weights],
             "bf_precisions": {"result": hls_precision(out.dtype)},
             "bf_typedefs": {name: ap_type_string(t) for name, t in spec.typedefs.items()}}
    for k, v in layer["bf_constants"].items():
        if not isinstance(v, bool) and abs(v) >= _MAX_CONSTANT:
            raise ExtensionError(f"{n.describe()}: constant {k} = {v} does not fit a 64-bit C++ literal; narrow the "
                                 "types or bounds of this node")
        if k.endswith("width") and v > _AP_INT_MAX_W:
            raise ExtensionError(f"{n.describe()}: an exact intermediate needs {v} bits ({k}); ap_int holds at most "
                                 f"{_AP_INT_MAX_W}: narrow the types of this node")
    for name, codes, t, _ in spec.weights:
        if t.width > _MAX_ARRAY_WIDTH:
            raise ExtensionError(f"{n.describe()}: array '{name}' has type {t.to_short()} ({t.width} bits); hls4ml "
                                 f"writes arrays as decimal text read through a double, exact up to "
                                 f"{_MAX_ARRAY_WIDTH} bits: narrow it")
        codes = np.asarray(codes, dtype=np.int64).ravel()
        layer[f"{name}_data"] = np.ldexp(codes.astype(np.float64), -t.frac)
        layer["bf_precisions"][name] = hls_precision(t)
    return layer


def _in(g: Graph, n: Node) -> tuple[FixedType, tuple[int, ...]]:
    spec = g.tensors[n.input]
    return spec.dtype, spec.shape


def _bits(*codes: int) -> int:
    """Width of the narrowest signed integer that holds every one of ``codes``."""
    return max(signed_bits(int(c)) for c in codes)


def _same_frac(n: Node, field_name: str, t: FixedType, frac: int) -> None:
    if t.frac != frac:
        raise ExtensionError(f"{n.describe()}: {field_name} {t.to_short()} has {t.frac} fractional bits; the IR rule "
                             f"needs {frac} (exact products); run the precision pass again")


def _kan(g: Graph, n: Node) -> _Spec:
    xt, _ = _in(g, n)
    accum = n.need("accum_type", ExtensionError, "before the HLS backend")
    ct, bt = n.coeff_type, n.basis_type
    frac = ct.frac + bt.frac
    _same_frac(n, "accum_type", accum, frac)
    table = basis_table(n.order, n.u_bits, bt, n.basis_impl)  # the golden model's table, either basis_impl
    lo, mult, shift = n.index_lo, n.index_mult, n.index_shift
    ends = (xt.min_code - lo, xt.max_code - lo)
    s_width = max(_bits(lo, *ends, *(e * mult for e in ends), n.grid_size << n.u_bits) + 1, shift + 2)
    coeffs = np.asarray(n.coeffs, dtype=np.int64)
    bound = n.in_features * max(int(np.abs(coeffs).max(initial=0)), 1) * int(table.sum(axis=1).max())
    return _Spec({"n_in": n.in_features, "n_out": n.out_features, "grid_size": n.grid_size, "order": n.order,
                  "n_basis": n.n_basis, "u_bits": n.u_bits, "index_lo": lo, "index_mult": mult,
                  "index_shift": shift, "s_width": s_width, "acc_frac": frac, "acc_width": _bits(bound, -bound) + 1},
                 [("coeffs", coeffs, ct, "coeff_t"), ("basis", table, bt, "basis_t")], {"accum_t": accum})


def _table(g: Graph, n: Node) -> _Spec:
    xt, shape = _in(g, n)
    out = g.tensors[n.output].dtype
    lo = n.index_lo
    width = max(_bits(lo, xt.min_code - lo, xt.max_code - lo) + 1, n.index_shift + 2)
    return _Spec({"n_in": math.prod(shape), "table_size": len(n.table), "index_lo": lo,
                  "index_shift": n.index_shift, "diff_width": width},
                 [("table", n.table, out, "table_t")])


def _softmax(g: Graph, n: Node) -> _Spec:
    xt, shape = _in(g, n)
    cols = shape[-1]
    e_max, r_max = int(np.max(n.exp_table)), int(np.max(n.recip_table))
    s_max = cols * e_max
    sum_width = max(_bits(s_max, n.recip_lo, s_max - n.recip_lo, -n.recip_lo) + 1, n.recip_shift + 2)
    return _Spec({"n_rows": math.prod(shape[:-1]), "n_cols": cols, "in_width": xt.width,
                  "diff_width": max(xt.width + 2, n.exp_shift + 2), "exp_size": len(n.exp_table),
                  "exp_shift": n.exp_shift, "recip_size": len(n.recip_table), "recip_lo": n.recip_lo,
                  "recip_shift": n.recip_shift, "sum_width": sum_width,
                  "prod_frac": n.exp_type.frac + n.recip_type.frac, "prod_width": _bits(e_max * r_max) + 1},
                 [("exp_table", n.exp_table, n.exp_type, "exp_t"),
                  ("recip_table", n.recip_table, n.recip_type, "recip_t")])


def _argmax(g: Graph, n: Node) -> _Spec:
    xt, shape = _in(g, n)
    return _Spec({"n_rows": math.prod(shape[:-1]), "n_cols": shape[-1], "in_width": xt.width})


def _clip(g: Graph, n: Node) -> _Spec:
    xt, shape = _in(g, n)
    lo, hi = clip_codes(n, xt)
    # A bound no code reaches changes nothing; dropping it keeps the constants small (a bound of 1e30 has a
    # 100-bit code). The upper one only goes when the lower one cannot have moved a code above it.
    if lo is not None and lo <= xt.min_code:
        lo = None
    if hi is not None and hi >= xt.max_code and (lo is None or hi >= lo):
        hi = None
    bounds = [b for b in (lo, hi) if b is not None]
    return _Spec({"n_in": math.prod(shape), "has_lo": lo is not None, "lo": lo or 0, "has_hi": hi is not None,
                  "hi": hi or 0, "code_width": _bits(xt.min_code, xt.max_code, *bounds) + 1, "in_frac": xt.frac})


def _hard_sigmoid(g: Graph, n: Node) -> _Spec:
    xt, shape = _in(g, n)
    fx, fa = xt.frac, n.alpha_type.frac
    one, beta = 1 << (fx + fa), n.beta_code << fx
    ends = [x * n.alpha_code + beta for x in (xt.min_code, xt.max_code)]
    return _Spec({"n_in": math.prod(shape), "alpha_code": n.alpha_code, "beta_code": n.beta_code, "in_frac": fx,
                  "t_frac": fx + fa, "t_width": _bits(*ends, beta, one, n.alpha_code, n.beta_code) + 1,
                  "swish": bool(n.swish), "p_width": _bits(xt.min_code * one, xt.max_code * one) + 1})


def _channels(shape: tuple[int, ...]) -> tuple[int, int]:
    """(channels, elements per channel) of a per-sample shape: channel = axis 0."""
    return (shape[0], math.prod(shape[1:])) if shape else (1, 1)


def _leaky_relu(g: Graph, n: Node) -> _Spec:
    xt, shape = _in(g, n)
    fa = n.alpha_type.frac
    alpha = np.asarray(n.alpha, dtype=np.int64).ravel()
    ends = [x * int(a) for x in (xt.min_code, xt.max_code) for a in (alpha.min(), alpha.max())]
    return _Spec({"n_in": math.prod(shape), "n_alpha": len(alpha), "inner": _channels(shape)[1], "in_frac": xt.frac,
                  "alpha_frac": fa, "p_width": _bits(*ends, xt.min_code << fa, xt.max_code << fa) + 1},
                 [("alpha", alpha, n.alpha_type, "alpha_t")])


def _scale_shift(g: Graph, n: Node) -> _Spec:
    xt, shape = _in(g, n)
    accum = n.need("accum_type", ExtensionError, "before the HLS backend")
    frac = xt.frac + n.scale_type.frac
    _same_frac(n, "accum_type", accum, frac)
    channels, inner = _channels(shape)
    scale = np.asarray(n.scale, dtype=np.int64).ravel()
    if n.shift is None:  # an exact zero at the accumulator's frac: adds nothing
        shift, shift_type = np.zeros(channels, dtype=np.int64), FixedType(2, 2 - frac)
    else:
        shift, shift_type = np.asarray(n.shift, dtype=np.int64).ravel(), n.shift_type
    align = frac - shift_type.frac
    if align < 0:
        raise ExtensionError(f"{n.describe()}: shift type {shift_type.to_short()} is finer than frac(x) + "
                             f"frac(scale) = {frac}")
    products = [x * int(s) for x in (xt.min_code, xt.max_code) for s in (scale.min(), scale.max())]
    shifts = [int(shift.min()) << align, int(shift.max()) << align]
    ends = [p + s for p in products for s in shifts]
    return _Spec({"n_in": math.prod(shape), "n_chan": channels, "inner": inner, "acc_frac": frac,
                  "shift_align": align, "p_width": _bits(*products, *shifts, *ends) + 1},
                 [("scale", scale, n.scale_type, "scale_t"), ("shift", shift, shift_type, "shift_t")],
                 {"accum_t": accum})


def _pool(g: Graph, n: Node) -> _Spec:
    xt, shape = _in(g, n)
    out_shape = g.tensors[n.output].shape
    kernel, stride, pads = tuple(n.kernel), tuple(n.stride), tuple(n.padding)
    if len(kernel) == 1:  # (C, L) is (C, 1, L)
        geometry = dict(in_h=1, in_w=shape[1], out_h=1, out_w=out_shape[1], kern_h=1, kern_w=kernel[0], stride_h=1,
                        stride_w=stride[0], pad_top=0, pad_left=pads[0])
    elif len(kernel) == 2:
        geometry = dict(in_h=shape[1], in_w=shape[2], out_h=out_shape[1], out_w=out_shape[2], kern_h=kernel[0],
                        kern_w=kernel[1], stride_h=stride[0], stride_w=stride[1], pad_top=pads[0], pad_left=pads[1])
    else:
        raise ExtensionError(f"{n.describe()}: pooling over {len(kernel)} spatial axes; 1 or 2 are supported")
    if n.mode not in ("max", "avg"):
        raise ExtensionError(f"{n.describe()}: pooling mode {n.mode!r}; 'max' or 'avg' expected")
    taps = math.prod(kernel)
    sums = (taps * xt.min_code, taps * xt.max_code)
    return _Spec({"n_chan": shape[0], **geometry, "is_max": n.mode == "max",
                  "count_include_pad": bool(n.count_include_pad), "recip_frac": n.recip_frac, "in_width": xt.width,
                  "in_frac": xt.frac, "sum_width": _bits(*sums) + 1,
                  "prod_width": _bits(*(s << n.recip_frac for s in sums)) + 1})


_BUILDERS = {"KANLayer": _kan, "Table": _table, "Softmax": _softmax, "ArgMax": _argmax, "Clip": _clip,
             "HardSigmoid": _hard_sigmoid, "LeakyReLU": _leaky_relu, "ScaleShift": _scale_shift, "Pool": _pool}


# -- C++ text ---------------------------------------------------------------------------------------------------

def _constant_cpp(name: str, value: Union[int, bool]) -> str:
    if isinstance(value, bool):
        return f"    static const bool {name} = {'true' if value else 'false'};"
    if -2 ** 31 <= value < 2 ** 31:
        return f"    static const int {name} = {value};"
    return f"    static const long long {name} = {value}LL;"


def _config_cpp(node) -> str:
    """``struct config<index>`` of an extension layer: its constants and the typedefs its function reads."""
    lines = [f"struct config{node.index} {{"]
    lines += [_constant_cpp(k, v) for k, v in node.get_attr("bf_constants").items()]
    lines += [f"    typedef {node.get_weights(name).type.name} {typedef};"
              for name, typedef in node.get_attr("bf_weights")]
    lines += [f"    typedef {text} {name};" for name, text in node.get_attr("bf_typedefs").items()]
    return "\n".join(lines) + "\n};\n"


def _function_cpp(node) -> str:
    args = [node.get_input_variable().name, node.get_output_variable().name]
    args += [node.get_weights(name).name for name, _ in node.get_attr("bf_weights")]
    return (f"bitforge::{node.get_attr('bf_function')}<{node.get_input_variable().type.name}, "
            f"{node.get_output_variable().type.name}, config{node.index}>({', '.join(args)});")


# -- registration with hls4ml -----------------------------------------------------------------------------------

def header_paths() -> list[Path]:
    """Absolute paths of the C++ headers (hls4ml's ``register_source`` wants absolute paths)."""
    root = resources.files("bitforge.hls")
    return [Path(str(root.joinpath(h))) for h in HEADERS]


@cache
def _hls_classes():
    """The hls4ml Layer classes (one per op) and the two templates; built on first use, so that importing this
    module needs no hls4ml."""
    from hls4ml.backends.template import FunctionCallTemplate, LayerConfigTemplate
    from hls4ml.model.layers import Layer

    class BitforgeLayer(Layer):
        """An IR op computed by a bitforge C++ function; every type comes from the layer-list entry."""

        def initialize(self):
            io_type = self.model.config.get_config_value("IOType")
            if io_type != "io_parallel":
                raise ExtensionError(f"layer '{self.name}' ({self.get_attr('bf_ir_op')}): bitforge's extension "
                                     f"layers support io_parallel only, not {io_type}")
            precisions = self.get_attr("bf_precisions")
            self.add_output_variable(list(self.get_attr("bf_shape")), precision=precisions["result"])
            for name, _ in self.get_attr("bf_weights"):
                self.add_weights_variable(name=name, var_name=f"bf_{name}{{index}}", precision=precisions[name],
                                          data=self.get_attr(f"{name}_data"))

    classes = {cls_name: type(cls_name, (BitforgeLayer,), {"__doc__": f"bitforge's {op} (docs/ir.md)."})
               for op, (cls_name, _) in _LAYERS.items()}
    layer_classes = tuple(classes.values())
    includes = [f"nnet_utils/{h}" for h in HEADERS]

    class BitforgeConfigTemplate(LayerConfigTemplate):
        def __init__(self):
            super().__init__(layer_classes)

        def format(self, node):
            return _config_cpp(node)

    class BitforgeFunctionTemplate(FunctionCallTemplate):
        def __init__(self):
            super().__init__(layer_classes, include_header=includes)

        def format(self, node):
            return _function_cpp(node)

    return classes, (BitforgeConfigTemplate, BitforgeFunctionTemplate)


def register_extensions(backends: Optional[tuple[str, ...]] = None) -> None:
    """Register the extension layers, templates and headers with hls4ml (default: :data:`BACKENDS`).

    Idempotent: hls4ml's registries are process-global and refuse a template registered twice, so a template
    already there is kept."""
    try:
        from hls4ml.backends import get_backend
        from hls4ml.model.layers import register_layer
        from hls4ml.model.optimizer import get_backend_passes
    except ImportError as e:
        raise ExtensionError(f"the HLS extension layers need hls4ml ({e}); pip install 'hls4ml==1.3.0'") from None
    classes, templates = _hls_classes()
    for name, cls in classes.items():
        register_layer(name, cls)
    headers = header_paths()
    for path in headers:
        if not path.is_file():
            raise ExtensionError(f"{path}: missing from the installed package bitforge.hls; reinstall bitforge")
    for backend_name in backends or BACKENDS:
        backend = get_backend(backend_name)
        have = set(get_backend_passes(backend.name))
        for template in templates:
            if f"{backend.name.lower()}:{template().get_name()}" not in have:
                backend.register_template(template)
        for path in headers:
            backend.register_source(path)
