"""IR -> hls4ml: the layer list and HLSConfig that make hls4ml's firmware compute the golden model's bits.

bitforge rides on hls4ml rather than beside it: the model is handed to hls4ml's own Python API
(``ModelGraph.from_layer_list``, the dictionaries its converters produce), so the project it writes is the
one hls4ml users know. What bitforge adds is that every type is explicit: each layer's ``weight``, ``bias``,
``accum`` and ``result`` precision is the IR's :class:`~bitforge.toolchain.fixed.FixedType` (rounding and
overflow modes included), written per layer name, so nothing is left to hls4ml's ``default`` or ``auto``.

Ops with an hls4ml layer that computes the IR's bits map to it: Dense (hls4ml's accumulation is the IR's, see
``docs/ir.md``), LowRankDense (two Dense layers), ReLU, Requantize (a ``linear`` Activation: a cast), Add,
Reshape, Transpose, Conv and max Pool. The others (KAN layers, tables, softmax, ...) are bitforge extension
layers registered through hls4ml's extension API (:mod:`.extensions`). Anything else is refused, naming the node.

Layout: the IR is channels first; hls4ml's convolution and pooling kernels are channels last. Every tensor
carries its layout here, and a Transpose layer is inserted where a consumer needs the other one, so the
model's input and output are in the IR's order and the golden model's vectors feed it unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ...errors import BitforgeError
from ...fixed import FixedType, Overflow
from ...ir import (
    Add,
    Conv,
    Dense,
    Graph,
    LowRankDense,
    Node,
    Pool,
    Quantize,
    ReLU,
    Requantize,
    Reshape,
    Transpose,
)

__all__ = ["HlsError", "HlsOptions", "Conversion", "to_layer_list", "BACKENDS", "IO_TYPES", "STRATEGIES"]

BACKENDS = ("vitis", "vivado")
IO_TYPES = ("parallel", "stream")
STRATEGIES = ("latency", "resource")
#: hls4ml's backend names.
BACKEND_NAMES = {"vitis": "Vitis", "vivado": "Vivado"}
#: Ops the channels-last stream of hls4ml's io_stream implementations handles the same way (element-wise or dense).
STREAM_OPS = (Dense, LowRankDense, ReLU, Requantize, Add, Reshape)


class HlsError(BitforgeError):
    """A graph or option the HLS backend cannot express in hls4ml; the message names the node or setting."""


@dataclass(frozen=True)
class HlsOptions:
    """What ``bitforge compile --to hls`` hands to hls4ml; per-layer reuse and strategy override the global ones."""

    backend: str = "vitis"
    io: str = "parallel"
    strategy: str = "latency"
    reuse: int = 1
    part: Optional[str] = None
    clock_period: float = 5.0
    project: str = "bitforge_model"
    layer_reuse: dict = field(default_factory=dict)
    layer_strategy: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, value, allowed in (("--backend", self.backend, BACKENDS), ("--io", self.io, IO_TYPES),
                                     ("--strategy", self.strategy, STRATEGIES)):
            if value not in allowed:
                raise HlsError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
        if not isinstance(self.reuse, int) or self.reuse < 1:
            raise HlsError(f"--reuse for the HLS backend must be a positive integer, got {self.reuse!r}")
        if not self.clock_period > 0:
            raise HlsError(f"the clock period must be positive (ns), got {self.clock_period!r}")

    def reuse_of(self, node: str) -> int:
        return int(self.layer_reuse.get(node, self.reuse))

    def strategy_of(self, node: str) -> str:
        return str(self.layer_strategy.get(node, self.strategy)).lower()


@dataclass
class Conversion:
    """hls4ml's inputs: the layer list, the HLSConfig's ``LayerName`` entries, and where each IR tensor lives."""

    layers: list[dict]
    layer_config: dict[str, dict]
    input_layer: str
    output_layer: str
    #: IR node name -> the hls4ml layer names it became (a LowRankDense becomes two).
    layer_names: dict[str, list[str]]
    #: Whether any layer is a bitforge extension layer (registered with hls4ml before the model is built).
    extensions: bool = False


def _ap(t: FixedType) -> str:
    return t.to_ap()


def _values(codes: np.ndarray, t: FixedType) -> np.ndarray:
    """Codes as the real values hls4ml writes as decimal text; ``code * 2**-frac`` is exact in float64 for the
    widths hls4ml's weight files carry (at most 53 significant bits), so its ap_fixed cast gets the code back."""
    if t.width > 53:
        raise HlsError(f"a weight type of {t.width} bits cannot be written exactly as hls4ml's decimal text (<= 53)")
    return np.ldexp(np.asarray(codes, dtype=np.float64), -t.frac)


class _Builder:
    def __init__(self, g: Graph, options: HlsOptions):
        self.g, self.options = g, options
        self.layers: list[dict] = []
        self.config: dict[str, dict] = {}
        self.names: dict[str, list[str]] = {}
        #: IR tensor -> (hls4ml variable name, layout "cf" (IR order) or "cl" (channels last)).
        self.where: dict[str, tuple[str, str]] = {}
        self.extensions = False

    # -- helpers ----------------------------------------------------------------------------------
    def _add(self, node: Node, layer: dict, precision: dict[str, FixedType], ir_name: Optional[str] = None,
             tuning: bool = False) -> str:
        name = layer["name"]
        self.layers.append(layer)
        entry: dict = {"Precision": {k: _ap(t) for k, t in precision.items()}}
        if tuning:
            entry["ReuseFactor"] = self.options.reuse_of(node.name)
            entry["Strategy"] = self.options.strategy_of(node.name).capitalize()
        self.config[name] = entry
        self.names.setdefault(ir_name or node.name, []).append(name)
        return name

    def source(self, node: Node, tensor: str, layout: str) -> str:
        """The hls4ml variable holding ``tensor`` in ``layout``; inserts a Transpose when it is in the other one."""
        name, have = self.where[tensor]
        if have == layout:
            return name
        spec = self.g.tensors[tensor]
        if len(spec.shape) < 2:
            self.where[tensor] = (name, layout)
            return name
        n = len(spec.shape)
        perm = list(range(1, n)) + [0] if layout == "cl" else [n - 1] + list(range(n - 1))
        t_name = f"{name}_to_{layout}"
        self.layers.append({"class_name": "Transpose", "name": t_name, "inputs": [name], "perm": perm})
        self.config[t_name] = {"Precision": {"result": _ap(spec.dtype)}}
        self.names.setdefault(node.name, []).append(t_name)
        self.where[tensor] = (t_name, layout)
        return t_name

    def refuse(self, node: Node, why: str) -> HlsError:
        return HlsError(f"{node.describe()}: {why}")

    # -- ops --------------------------------------------------------------------------------------
    def build(self) -> Conversion:
        g = self.g
        if len(g.inputs) != 1 or len(g.outputs) != 1:
            raise HlsError(f"graph '{g.name}': the HLS backend takes one input and one output, got "
                           f"{len(g.inputs)} and {len(g.outputs)}")
        first = g.nodes[0] if g.nodes else None
        if not isinstance(first, Quantize) or first.input != g.inputs[0]:
            raise HlsError(f"graph '{g.name}': the HLS backend needs a fixed-point graph whose input is quantized "
                           "first; compile with --precision SPEC or --hls-config CONFIG")
        spec = g.tensors[first.output]
        input_name = first.output
        self.layers.append({"class_name": "InputLayer", "name": input_name, "input_shape": list(spec.shape)})
        self.config[input_name] = {"Precision": {"result": _ap(spec.dtype)}}
        self.names[first.name] = [input_name]
        self.where[first.output] = (input_name, "cf")
        for n in g.nodes[1:]:
            self.node(n)
        out = g.outputs[0]
        last = self.source(g.nodes[-1], out, "cf")
        return Conversion(self.layers, self.config, input_name, last, self.names, self.extensions)

    def node(self, n: Node) -> None:
        g = self.g
        for t in (*n.inputs, n.output):
            if g.tensors[t].is_float:
                raise self.refuse(n, f"tensor '{t}' is float; the HLS backend needs every tensor in fixed point "
                                     "(compile with --precision SPEC or --hls-config CONFIG)")
        out = g.tensors[n.output].dtype
        if self.options.io == "stream" and not isinstance(n, STREAM_OPS):
            raise self.refuse(n, f"--io stream supports {', '.join(c.OP for c in STREAM_OPS)}; "
                                 "compile this model with --io parallel")
        if isinstance(n, Dense):
            self._dense(n, n.name, self.source(n, n.input, "cf"), n.weight, n.weight_type, n.bias, n.bias_type,
                        n.need("accum_type", HlsError, "before the HLS backend"), out, n.name)
        elif isinstance(n, LowRankDense):
            src = self.source(n, n.input, "cf")
            mid = self._dense(n, f"{n.name}_v", src, n.v, n.v_type, None, None,
                              n.need("accum_v_type", HlsError, "before the HLS backend"), n.mid_type, None)
            self._dense(n, n.name, mid, n.u, n.u_type, n.bias, n.bias_type,
                        n.need("accum_type", HlsError, "before the HLS backend"), out, n.name)
        elif isinstance(n, (ReLU, Requantize)):
            layout = self.where[n.input][1]
            src = self.source(n, n.input, layout)
            act = "relu" if isinstance(n, ReLU) else "linear"
            name = self._add(n, {"class_name": "Activation", "activation": act, "name": n.name, "inputs": [src]},
                             {"result": out})
            self.where[n.output] = (name, layout)
        elif isinstance(n, Add):
            layout = self.where[n.inputs[0]][1]
            srcs = [self.source(n, t, layout) for t in n.inputs]
            name = self._add(n, {"class_name": "Merge", "op": "add", "name": n.name, "inputs": srcs},
                             {"result": out})
            self.where[n.output] = (name, layout)
        elif isinstance(n, Reshape):
            src = self.source(n, n.input, "cf")
            shape = list(g.tensors[n.output].shape)
            name = self._add(n, {"class_name": "Reshape", "name": n.name, "inputs": [src], "target_shape": shape},
                             {"result": out})
            self.where[n.output] = (name, "cf")
        elif isinstance(n, Transpose):
            src = self.source(n, n.input, "cf")
            name = self._add(n, {"class_name": "Transpose", "name": n.name, "inputs": [src],
                                 "perm": [int(p) for p in n.perm]}, {"result": out})
            self.where[n.output] = (name, "cf")
        elif isinstance(n, Conv):
            self._conv(n, out)
        elif isinstance(n, Pool) and n.mode == "max":
            self._max_pool(n, out)
        else:
            from .extensions import EXTENSION_OPS, extension_layer
            if n.OP not in EXTENSION_OPS:
                raise self.refuse(n, f"op {n.OP} has no hls4ml layer and no bitforge extension layer; the HLS "
                                     "backend converts " + ", ".join(sorted(set(NATIVE_OPS) | set(EXTENSION_OPS))))
            srcs = [self.source(n, t, "cf") for t in n.inputs]
            layer = extension_layer(g, n, srcs)
            self.layers.append(layer)
            self.extensions = True
            self.names.setdefault(n.name, []).append(layer["name"])
            self.where[n.output] = (layer["name"], "cf")

    def _dense(self, n: Node, name: str, src: str, w: np.ndarray, wt: FixedType, bias, bt, accum: FixedType,
               out: FixedType, ir_output: Optional[str]) -> str:
        self._check_order(n, accum, w.shape[1])
        n_out, n_in = (int(s) for s in w.shape)
        bias_codes = np.zeros(n_out, dtype=np.int64) if bias is None else np.asarray(bias)
        bias_type = bt if bias is not None else FixedType(2, 2)
        layer = {"class_name": "Dense", "name": name, "inputs": [src], "n_in": n_in, "n_out": n_out,
                 "weight_data": _values(w, wt).T.copy(), "bias_data": _values(bias_codes, bias_type),
                 "use_bias": bias is not None}
        self._add(n, layer, {"weight": wt, "bias": bias_type, "accum": accum, "result": out}, tuning=True)
        if ir_output is not None:
            self.where[n.output] = (name, "cf")
        return name

    def _check_order(self, n: Node, accum: FixedType, n_in: int) -> None:
        """hls4ml's Resource strategy adds a layer's products in strided order (``ir + rf * im``), not input order:
        the same bits unless a saturating accumulator clips a partial sum, which the IR defines in input order.
        Refused rather than computed differently from the golden model."""
        if (self.options.strategy_of(n.name) == "resource" and self.options.reuse_of(n.name) > 1
                and accum.overflow != Overflow.WRAP):
            reason = _saturation_reason(self.g, n)
            if reason:
                raise self.refuse(n, f"the Resource strategy with reuse {self.options.reuse_of(n.name)} sums the "
                                     f"products in another order than the IR, and the accumulator {accum} "
                                     f"{reason}; use --strategy latency, a WRAP accumulator, or reuse 1 for this "
                                     "layer")

    def _conv(self, n: Conv, out: FixedType) -> None:
        if n.groups != 1 or any(d != 1 for d in n.dilation):
            raise self.refuse(n, "hls4ml's Conv1D/Conv2D have no groups or dilation; the HLS backend converts "
                                 "convolutions with groups=1 and dilation 1")
        accum = n.need("accum_type", HlsError, "before the HLS backend")
        self._check_order(n, accum, int(np.prod(n.weight.shape[1:])))
        src = self.source(n, n.input, "cl")
        in_shape = self.g.tensors[n.input].shape
        out_shape = self.g.tensors[n.output].shape
        c_out, c_in = int(n.weight.shape[0]), int(n.weight.shape[1])
        # hls4ml's kernels are channels last: weight (*kernel, C_in, C_out).
        w = np.moveaxis(_values(n.weight, n.weight_type), (0, 1), (-1, -2))
        bias = np.zeros(c_out) if n.bias is None else _values(n.bias, n.bias_type)
        bias_type = n.bias_type if n.bias is not None else FixedType(2, 2)
        layer = {"name": n.name, "inputs": [src], "data_format": "channels_last", "n_chan": c_in, "n_filt": c_out,
                 "weight_data": np.ascontiguousarray(w), "bias_data": bias, "use_bias": n.bias is not None}
        pads = [int(p) for p in n.padding]
        if n.spatial == 1:
            layer.update(class_name="Conv1D", in_width=int(in_shape[1]), out_width=int(out_shape[1]),
                         filt_width=n.kernel[0], stride_width=int(n.stride[0]), pad_left=pads[0],
                         pad_right=pads[1], dilation=1)
        else:
            layer.update(class_name="Conv2D", in_height=int(in_shape[1]), in_width=int(in_shape[2]),
                         out_height=int(out_shape[1]), out_width=int(out_shape[2]), filt_height=n.kernel[0],
                         filt_width=n.kernel[1], stride_height=int(n.stride[0]), stride_width=int(n.stride[1]),
                         pad_top=pads[0], pad_left=pads[1], pad_bottom=pads[2], pad_right=pads[3], dilation=1)
        self._add(n, layer, {"weight": n.weight_type, "bias": bias_type, "accum": accum, "result": out},
                  tuning=True)
        self.where[n.output] = (n.name, "cl")

    def _max_pool(self, n: Pool, out: FixedType) -> None:
        pads = [int(p) for p in n.padding]
        if any(pads):
            raise self.refuse(n, "hls4ml's max pooling pads with zeros where the IR ignores padding; the HLS "
                                 "backend converts max pooling without padding")
        src = self.source(n, n.input, "cl")
        in_shape, out_shape = self.g.tensors[n.input].shape, self.g.tensors[n.output].shape
        layer = {"name": n.name, "inputs": [src], "data_format": "channels_last", "n_filt": int(in_shape[0]),
                 "pool_op": "Max", "padding": "valid"}
        if len(n.kernel) == 1:
            layer.update(class_name="MaxPooling1D", n_in=int(in_shape[1]), n_out=int(out_shape[1]),
                         pool_width=int(n.kernel[0]), stride_width=int(n.stride[0]), pad_left=0, pad_right=0)
        else:
            layer.update(class_name="MaxPooling2D", in_height=int(in_shape[1]), in_width=int(in_shape[2]),
                         out_height=int(out_shape[1]), out_width=int(out_shape[2]), pool_height=int(n.kernel[0]),
                         pool_width=int(n.kernel[1]), stride_height=int(n.stride[0]),
                         stride_width=int(n.stride[1]), pad_top=0, pad_bottom=0, pad_left=0, pad_right=0)
        self._add(n, layer, {"result": out})
        self.where[n.output] = (n.name, "cl")


#: IR ops with an hls4ml layer of their own (Pool: mode max).
NATIVE_OPS = ("Quantize", "Dense", "LowRankDense", "ReLU", "Requantize", "Add", "Reshape", "Transpose", "Conv",
              "Pool")


def _saturation_reason(g: Graph, n: Node) -> Optional[str]:
    """Why a stage of ``n`` may clip a partial sum (the accumulation rule's own analysis), or None."""
    from ...accumulate import accumulation_plan

    x_type = g.tensors[n.input].dtype
    if isinstance(n, LowRankDense):
        stages = [(x_type, n.v, n.v_type, None, None, n.accum_v_type),
                  (n.mid_type, n.u, n.u_type, n.bias, n.bias_type, n.accum_type)]
    else:
        stages = [(x_type, n.weight.reshape(n.weight.shape[0], -1), n.weight_type, n.bias, n.bias_type, n.accum_type)]
    for stage in stages:
        plan = accumulation_plan(*stage)
        if plan.saturates:
            return plan.reason
    return None


def to_layer_list(g: Graph, options: HlsOptions = HlsOptions()) -> Conversion:
    """The hls4ml layer list and per-layer HLSConfig for ``g`` (a fixed-point graph whose input is quantized)."""
    return _Builder(g, options).build()
