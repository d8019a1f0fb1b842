"""ONNX's element-wise activations, Softmax and ArgMax -> the IR's LeakyReLU, Clip, HardSigmoid, Table, Softmax and
ArgMax.

Mixed into the ONNX translator (``onnx_frontend``). On float tensors every op maps to its float IR node; the smooth
ones (Sigmoid, Tanh, GELU, ELU, Softplus, SiLU) become a ``Table`` with its ``function`` set and no table yet:
bitforge's quantization pass builds the table when it quantizes the model.

On a quantized tensor (QDQ/QONNX) an op is translated only where fixed point reproduces what ONNX Runtime computes
on the dequantized values: a max/min with bounds on the input's grid (Clip, Relu6), a slope whose product with
every input code is exact in float32 (LeakyReLU/PReLU: ONNX Runtime multiplies in float32, so a slope such as 0.01
would be rounded there), and ArgMax. The smooth functions, HardSigmoid and Softmax of a quantized tensor need a
table or a rounded product that the quantized graph does not define; they are refused with that reason.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import onnx

from ..fixed import FixedType, parse_type
from ..ir import ArgMax, Clip, HardSigmoid, LeakyReLU, Softmax, Table, TensorSpec
from ..tables import softmax_tables
from .onnx_values import Act, Const, dyadic, holding_type

__all__ = ["ACTIVATION_OPS", "TABLE_FUNCTIONS", "ActivationOps"]

#: ONNX op type -> the translator method that maps it.
ACTIVATION_OPS = {"LeakyRelu": "_leaky_relu", "PRelu": "_prelu", "Clip": "_clip", "Min": "_min_max",
                  "Max": "_min_max", "HardSigmoid": "_hard_sigmoid", "HardSwish": "_hard_swish",
                  "Sigmoid": "_table", "Tanh": "_table", "Gelu": "_table", "Elu": "_table", "Softplus": "_table",
                  "Softmax": "_softmax", "ArgMax": "_argmax"}
#: ONNX op type -> the function of its Table (``bitforge.toolchain.tables.FUNCTIONS``); Gelu picks by its
#: ``approximate`` attribute.
TABLE_FUNCTIONS = {"Sigmoid": "sigmoid", "Tanh": "tanh", "Elu": "elu", "Softplus": "softplus"}
#: float32's significand: a product of two numbers is exact in float32 when their significands fit in it.
FLOAT32_BITS = 24
#: A Softmax of a quantized tensor (outside --strict): [0, 1] at 2**-15, finer than any 8-bit output quantizer.
SOFTMAX_TYPE = parse_type("ufixed<16,1,RND_CONV,SAT>")


class ActivationOps:
    """Element-wise activations, Softmax and ArgMax, for the ONNX translator."""

    def _activation_input(self, n: onnx.NodeProto) -> tuple[Act, TensorSpec]:
        x = self._value(n.input[0])
        if not isinstance(x, Act):
            raise self._fail(f"{n.op_type} of a constant is not supported; fold it before export")
        return x, self._spec(x)

    def _float_only(self, xs: TensorSpec, x: Act, what: str) -> None:
        if not xs.is_float:
            raise self._fail(
                f"{what} of a quantized tensor ('{x.tensor}' is {xs.type_str()}) is not translated: the quantized "
                "graph computes it in float between quantizers, which fixed point can only approximate. Export "
                "the float model and let bitforge quantize it (its quantization pass builds the lookup table), or "
                "keep this op outside the quantized part")

    # -- slopes ---------------------------------------------------------------------------------------------
    def _leaky_relu(self, n: onnx.NodeProto) -> None:
        x, xs = self._activation_input(n)
        alpha = float(self._attrs(n).get("alpha", 0.01))
        self._emit_slope(n, x, xs, np.array([alpha], np.float32))

    def _prelu(self, n: onnx.NodeProto) -> None:
        x, xs = self._activation_input(n)
        slope = self._const(n.input[1], "PRelu slope").array.astype(np.float32)
        self._emit_slope(n, x, xs, self._per_channel(slope, xs.shape, "slope"))

    def _per_channel(self, a: np.ndarray, shape: tuple[int, ...], what: str) -> np.ndarray:
        """A tensor that ONNX broadcasts over (batch, *shape) and that varies along the channel axis (axis 1) at
        most: its (C,) values, or (1,) when it is one value."""
        if a.ndim == len(shape) + 1:
            if a.shape[0] != 1:
                raise self._fail(f"{what} of shape {a.shape} varies along the batch axis; expected one value per "
                                 "channel")
            a = a[0]
        try:
            full = np.broadcast_to(a, shape)
        except ValueError:
            raise self._fail(f"{what} of shape {a.shape} does not broadcast to the input's per-sample shape "
                             f"{shape}") from None
        flat = full.reshape(shape[0], -1) if shape else full.reshape(1, 1)
        if np.any(flat != flat[:, :1]):
            raise self._fail(f"{what} of shape {a.shape} varies along a spatial axis; expected one value per "
                             "channel (axis 1)")
        per = flat[:, 0]
        return per[:1].copy() if np.all(per == per[0]) else per.copy()

    def _emit_slope(self, n: onnx.NodeProto, x: Act, xs: TensorSpec, alpha: np.ndarray) -> None:
        out = n.output[0]
        if xs.is_float:
            node = LeakyReLU(self._name(), (x.tensor,), (out,), alpha=alpha.astype(np.float32))
            self.values[out] = self._emit(node, TensorSpec(out, xs.shape, None))
            return
        t = xs.dtype
        exact = dyadic(alpha, max_frac=FLOAT32_BITS + 126)
        bits = None if exact is None else max(int(abs(int(c))).bit_length() for c in exact[0])
        if exact is None or exact[1] > 62 or t.width + bits > FLOAT32_BITS:
            raise self._fail(
                f"slope {alpha.tolist()} on a quantized tensor ({t}): ONNX Runtime multiplies in float32, which "
                f"rounds x * slope unless the slope's significant bits plus the input's {t.width} bits fit in "
                f"{FLOAT32_BITS}; bitforge will not approximate it. Use a slope with few significant bits (a power "
                "of two such as 2**-3 = 0.125, or 0.25 + 0.0625)")
        codes, af = exact
        at = FixedType(bits + 1, bits + 1 - af, True)
        products = [t.min_code * int(c) for c in codes]
        lo = min([0, *products])
        hi = max([t.max_code << af, *products])
        node = LeakyReLU(self._name(), (x.tensor,), (out,), alpha=codes.astype(np.int64), alpha_type=at)
        self.values[out] = self._emit(node, TensorSpec(out, xs.shape, holding_type(lo, hi, t.frac + af)), exact=True)

    # -- bounds ---------------------------------------------------------------------------------------------
    def _clip(self, n: onnx.NodeProto) -> None:
        at = self._attrs(n)
        lo, hi = at.get("min"), at.get("max")  # opset < 11 keeps them as attributes
        if len(n.input) > 1 and n.input[1]:
            lo = self._scalar(n.input[1], "Clip min")
        if len(n.input) > 2 and n.input[2]:
            hi = self._scalar(n.input[2], "Clip max")
        if lo is not None and hi is not None and lo > hi:
            raise self._fail(f"min {lo} is above max {hi}")
        v = self._value(n.input[0])
        if isinstance(v, Const):  # Brevitas' QCDQ export: QuantizeLinear -> Clip(-127, 127) -> DequantizeLinear
            a = v.array
            self.values[n.output[0]] = Const(np.clip(a, -np.inf if lo is None else lo, np.inf if hi is None else hi
                                                     ).astype(a.dtype), v.elem)
            return
        x, xs = self._activation_input(n)
        self._emit_clip(n, x, xs, lo, hi)

    def _min_max(self, n: onnx.NodeProto) -> None:
        """``Min(x, c)`` / ``Max(x, c)`` with a constant ``c``: one side of a Clip (Relu6 written as Min(Relu(x),
        6), a floor written as Max(x, 0))."""
        ins = [self._value(i) for i in n.input]
        acts = [v for v in ins if isinstance(v, Act)]
        consts = [i for i, v in zip(n.input, ins) if isinstance(v, Const)]
        if len(ins) != 2 or len(acts) != 1 or len(consts) != 1:
            raise self._fail(f"{n.op_type} is supported between one tensor and one constant scalar (a bound); "
                             f"found {len(acts)} tensor(s) and {len(consts)} constant(s)")
        bound = self._scalar(consts[0], f"{n.op_type} bound")
        x, xs = acts[0], self._spec(acts[0])
        self._emit_clip(n, x, xs, bound if n.op_type == "Max" else None, bound if n.op_type == "Min" else None)

    def _scalar(self, name: str, what: str) -> float:
        a = self._const(name, what).array
        if a.size != 1:
            raise self._fail(f"{what} must be one value, found shape {a.shape}")
        return float(a.ravel()[0])

    def _emit_clip(self, n: onnx.NodeProto, x: Act, xs: TensorSpec, lo: Optional[float],
                   hi: Optional[float]) -> None:
        out = n.output[0]
        scale = 1.0 if xs.is_float else self._tensor_scale(x.tensor)
        if scale != 1.0:  # bounds on codes of a non-power-of-two grid: the nearest codes inside them
            lo, hi = (None if b is None else b / scale for b in (lo, hi))
            self.approximate = True
        elif not xs.is_float:
            t = xs.dtype
            for name, b in (("min", lo), ("max", hi)):
                code = None if b is None else b * 2.0 ** t.frac
                if code is not None and t.min_code < code < t.max_code and code != round(code):
                    raise self._fail(f"{name} bound {b} is not a value of the input type {t} (between its codes); "
                                     "clipping there and then quantizing would round differently from clipping the "
                                     "codes. Use bounds on the input's grid (multiples of 2**-"
                                     f"{t.frac})")
        node = Clip(self._name(), (x.tensor,), (out,), lo=lo, hi=hi)
        self.values[out] = self._emit(node, TensorSpec(out, xs.shape, xs.dtype), exact=not xs.is_float)

    # -- float-only activations ------------------------------------------------------------------------------
    def _hard_sigmoid(self, n: onnx.NodeProto) -> None:
        at = self._attrs(n)
        self._emit_hard_sigmoid(n, float(at.get("alpha", 0.2)), float(at.get("beta", 0.5)), swish=False)

    def _hard_swish(self, n: onnx.NodeProto) -> None:
        self._emit_hard_sigmoid(n, 1.0 / 6.0, 0.5, swish=True)  # ONNX HardSwish: x * HardSigmoid(x; 1/6, 0.5)

    def _emit_hard_sigmoid(self, n: onnx.NodeProto, alpha: float, beta: float, swish: bool,
                           x_name: Optional[str] = None, out: Optional[str] = None) -> None:
        x = self._value(x_name or n.input[0])
        if not isinstance(x, Act):
            raise self._fail(f"{n.op_type} of a constant is not supported; fold it before export")
        xs = self._spec(x)
        self._float_only(xs, x, "HardSwish" if swish else "HardSigmoid")
        out = out or n.output[0]
        node = HardSigmoid(self._name(), (x.tensor,), (out,), alpha=alpha, beta=beta, swish=swish)
        self.values[out] = self._emit(node, TensorSpec(out, xs.shape, None))

    def _table(self, n: onnx.NodeProto) -> None:
        at = self._attrs(n)
        if n.op_type == "Gelu":
            approx = str(at.get("approximate", "none"))
            if approx not in ("none", "tanh"):
                raise self._fail(f"approximate='{approx}' is not one of 'none', 'tanh'")
            function = "gelu" if approx == "none" else "gelu_tanh"
        else:
            function = TABLE_FUNCTIONS[n.op_type]
        if n.op_type == "Elu" and float(at.get("alpha", 1.0)) != 1.0:
            raise self._fail(f"alpha={at['alpha']}: only Elu with alpha=1 has a table function (elu); use "
                             "nn.ELU() with its default alpha")
        self._emit_table(n, function)

    def _emit_table(self, n: onnx.NodeProto, function: str, x_name: Optional[str] = None,
                    out: Optional[str] = None) -> None:
        x = self._value(x_name or n.input[0])
        if not isinstance(x, Act):
            raise self._fail(f"{n.op_type} of a constant is not supported; fold it before export")
        xs = self._spec(x)
        self._float_only(xs, x, f"{function} (a lookup table)")
        out = out or n.output[0]
        node = Table(self._name(), (x.tensor,), (out,), function=function)
        self.values[out] = self._emit(node, TensorSpec(out, xs.shape, None))

    def _fused(self, kind: str, x_name: str, out: str) -> None:
        """A pattern of ``onnx_patterns`` as its one IR node (``self.node`` is the pattern's head)."""
        if kind == "hard_swish":
            at = self._attrs(self.node)
            self._emit_hard_sigmoid(self.node, float(at.get("alpha", 0.2)), float(at.get("beta", 0.5)), True,
                                    x_name, out)
        else:
            self._emit_table(self.node, kind, x_name, out)

    # -- the last axis ------------------------------------------------------------------------------------------
    def _last_axis(self, n: onnx.NodeProto, xs: TensorSpec, axis: int, what: str) -> None:
        rank = len(xs.shape) + 1
        if not xs.shape:
            raise self._fail(f"{what} of a per-sample scalar")
        if not -rank <= axis < rank or axis % rank != rank - 1:
            raise self._fail(f"{what} over axis {axis} of a (batch, {', '.join(map(str, xs.shape))}) tensor: only "
                             f"the last axis ({rank - 1} or -1) is supported")

    def _softmax(self, n: onnx.NodeProto) -> None:
        x, xs = self._activation_input(n)
        default = -1 if self.opset >= 13 else 1  # opset < 13: coerced to 2-D from axis 1
        self._last_axis(n, xs, int(self._attrs(n).get("axis", default)), "Softmax")
        out = n.output[0]
        if not xs.is_float and not self.options.strict:
            # The source computes a float softmax of the dequantized values: tables built on those real values.
            st = softmax_tables(xs.dtype, xs.shape[-1], in_scale=self._tensor_scale(x.tensor))
            node = Softmax(self._name(), (x.tensor,), (out,), exp_table=st.exp_table, exp_type=st.exp_type,
                           exp_shift=st.exp_shift, recip_table=st.recip_table, recip_type=st.recip_type,
                           recip_lo=st.recip_lo, recip_shift=st.recip_shift)
            self.values[out] = self._emit(node, TensorSpec(out, xs.shape, SOFTMAX_TYPE), exact=True)
            self._note(f"Softmax of a quantized tensor: {len(st.exp_table)}-entry exp and {len(st.recip_table)}-"
                       f"entry reciprocal tables, output {SOFTMAX_TYPE}")
            self.approximate = True
            return
        self._float_only(xs, x, "Softmax (exp and reciprocal tables)")
        self.values[out] = self._emit(Softmax(self._name(), (x.tensor,), (out,)), TensorSpec(out, xs.shape, None))

    def _argmax(self, n: onnx.NodeProto) -> None:
        x, xs = self._activation_input(n)
        at = self._attrs(n)
        self._last_axis(n, xs, int(at.get("axis", 0)), "ArgMax")
        if int(at.get("keepdims", 1)) != 1 or int(at.get("select_last_index", 0)) != 0:
            raise self._fail(f"keepdims={at.get('keepdims', 1)}, select_last_index={at.get('select_last_index', 0)}"
                             ": expected keepdims=1 and select_last_index=0 (the first index of the largest "
                             "value, kept as an axis of size 1)")
        shape = xs.shape[:-1] + (1,)
        bits = max(1, (xs.shape[-1] - 1).bit_length())
        dtype = None if xs.is_float else FixedType(bits, bits, False)
        out = n.output[0]
        self.values[out] = self._emit(ArgMax(self._name(), (x.tensor,), (out,)), TensorSpec(out, shape, dtype))
