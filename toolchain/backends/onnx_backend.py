"""IR -> ONNX: a model that ONNX Runtime runs and that reproduces the golden model bit for bit.

Fixed-point tensors become int64 code tensors and every IR op is lowered to the integer recipe of
:mod:`bitforge.toolchain.emulate` / :mod:`bitforge.toolchain.fixed`, op by op, so the codes ONNX Runtime
computes are the golden model's codes, not an approximation of them. Float tensors stay float32 (the
float KAN basis is evaluated in float64, as the golden model does) and match within a tolerance only.

Exactness rests on :mod:`.onnx_int64`: every int64 intermediate carries an interval that provably fits
int64 (a graph that needs more raises :class:`OnnxExportError` naming the node), and floor shifts are written
with ``Mod``, ONNX having no arithmetic right shift. The ops of :mod:`.onnx_layers` (convolutions, pooling,
activations, tables, data movement) are lowered the same way.

Model conventions (the CLI and verification rely on them): graph inputs keep their IR names (float32
``['batch', *shape]`` for float inputs, int64 codes for fixed ones); a fixed graph output ``y`` gives two
ONNX outputs, ``y_code`` (int64 codes) and ``y`` (float64, ``code * 2**-frac``); a float output ``y`` is
float32. Same IR -> byte-identical model (fixed node names, no timestamps).
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Mapping, Optional, Union

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .. import fixed
from ..accumulate import accumulation_plan, convert_bias, rounded_bias
from ..bspline import basis_table
from ..errors import BitforgeError
from ..fixed import FixedType, Rounding
from ..ir import (
    Add,
    Dense,
    Graph,
    KANLayer,
    LowRankDense,
    Node,
    Quantize,
    ReLU,
    Requantize,
    validate,
)
from ..version import bitforge_version
from . import onnx_layers
from .onnx_int64 import (
    INT64_MAX,
    UNTYPED,
    Builder,
    IntVal,
    OnnxExportError,
    accumulate_products,
    matmul_const,
    overflow,
    quantize,
    requantize,
    shift_round,
)

__all__ = ["DEFAULT_OPSET", "OnnxExportError", "OnnxRunError", "to_onnx", "save_onnx", "make_session",
           "run_onnxruntime"]

#: Opset 17 has everything used here (Mod, Clip/Where on int64, ScatterElements, Unsqueeze with axes
#: input) and ONNX Runtime 1.32 runs all of it on the CPU provider; the tests run 13, 17 and 21.
DEFAULT_OPSET = 17
MIN_OPSET, MAX_OPSET = 13, 21

META_TYPES = "bitforge.types"
META_INPUTS = "bitforge.inputs"
META_OUTPUTS = "bitforge.outputs"

ModelLike = Union[onnx.ModelProto, bytes, str, os.PathLike]


class OnnxRunError(BitforgeError):
    """Inputs that the exported model cannot take (wrong name, dtype, shape, codes outside the type)."""


def _dense_stage(b: Builder, x: IntVal, x_type: FixedType, w: np.ndarray, w_type: FixedType,
                 bias: Optional[np.ndarray], bias_type: Optional[FixedType], accum: FixedType, out: FixedType,
                 hint: str) -> IntVal:
    """``emulate.dense_stage``: the accumulation rule, then requantize. Where no product is rounded and no partial
    sum can saturate (``accumulate.accumulation_plan`` for the input's proven interval), one int64 MatMul; else
    the products one by one (:func:`.onnx_int64.accumulate_products`)."""
    plan = accumulation_plan(x_type, w, w_type, bias, bias_type, accum, (x.lo, x.hi))
    if not (plan.rounds_products or plan.saturates):
        acc = _matrix_accumulator(b, x, w, plan.shift, bias, bias_type, accum, hint)
    else:
        xe = IntVal(b.op("Unsqueeze", [x.name, b.i64s([-2])]), x.lo, x.hi)  # (..., 1, in)
        converted = None if bias is None else convert_bias(bias, bias_type, accum)
        acc = accumulate_products(b, xe, w, w.shape[1], plan.shift, converted, accum, plan.saturates, hint)
    return requantize(b, acc, accum, out)


def _matrix_accumulator(b: Builder, x: IntVal, w: np.ndarray, shift: int, bias: Optional[np.ndarray],
                        bias_type: Optional[FixedType], accum: FixedType, hint: str) -> IntVal:
    """The sum of exact products at the accumulator's LSB (shifted there exactly: ``shift`` bits that every weight
    code has as trailing zeros, or ``-shift`` appended), plus the bias rounded to that LSB, one overflow (WRAP is
    modular; the caller has shown that a saturating mode cannot act)."""
    w = np.asarray(w).astype(object)
    w = w // (1 << shift) if shift > 0 else w * (1 << -shift)
    if w.size and max(abs(int(v)) for v in w.ravel()) > INT64_MAX:
        raise b.fail(f"{hint}: weights aligned to the accumulator {accum} do not fit int64")
    acc = matmul_const(b, x, w.astype(np.int64), hint)
    if bias is not None:
        aligned = rounded_bias(bias, bias_type, accum).astype(object)
        if aligned.size and max(abs(int(v)) for v in aligned) > INT64_MAX:
            raise b.fail(f"bias aligned to the accumulator {accum} does not fit int64")
        name = b.op("Add", [acc.name, b.array("bias_aligned", aligned.astype(np.int64))])
        acc = b.checked(name, acc.lo + int(min(aligned)), acc.hi + int(max(aligned)), "accumulator with bias")
    return overflow(b, acc, accum)


def _kan_fixed(b: Builder, n: KANLayer, x: IntVal, out: FixedType) -> IntVal:
    """``emulate.kan_fixed`` as one int64 MatMul over a dense basis.

    The k+1 active basis codes of every input are scattered into a zero (N, in, G+k) tensor at
    ``cell + m``, which is then multiplied by the coefficients laid out as (in*(G+k), out). The zeros add
    nothing, so the sum is the golden model's sum over inputs and active bases; the memory is
    N*in*(G+k) codes, where gathering coefficients per sample would need N*out*in*(k+1).
    """
    accum = n.need("accum_type", *UNTYPED)
    n_in, n_out, n_basis, k = n.in_features, n.out_features, n.n_basis, n.order
    s = b.mul_const(b.add_const(x, -n.index_lo, "index offset"), n.index_mult, "index product")
    if n.index_shift:
        s = shift_round(b, s, n.index_shift, Rounding.TRN)
    s = b.clip(s, 0, (n.grid_size << n.u_bits) - 1)
    cell = b.div_floor_nonneg(s, 1 << n.u_bits)
    u = b.mod(s, 1 << n.u_bits)
    table = basis_table(k, n.u_bits, n.basis_type, n.basis_impl)  # (2**U, k+1)
    weights = b.op("Gather", [b.array("basis_table", table), u.name], axis=0)  # (N, in, k+1)
    cols = b.op("Add", [b.op("Unsqueeze", [cell.name, b.array("axis2", np.array([2], dtype=np.int64))]),
                        b.array("active", np.arange(k + 1, dtype=np.int64).reshape(1, 1, k + 1))])
    dense = _scatter_basis(b, x.name, cols, weights, n_basis, TensorProto.INT64)
    coeffs = np.asarray(n.coeffs, dtype=np.int64)
    c2 = coeffs.transpose(1, 2, 0).reshape(n_in * n_basis, n_out)
    row_bound = int(np.abs(table).sum(axis=1).max())
    per_out = np.abs(coeffs.astype(object)).max(axis=2).sum(axis=1) * row_bound if coeffs.size else [0]
    bound = int(max(per_out))
    if bound > INT64_MAX:
        raise b.fail(f"KAN accumulator can reach {bound}, beyond int64; ONNX export supports accumulators "
                     "up to 63 bits (narrow coeff_type or basis_type)")
    acc = IntVal(b.op("MatMul", [dense, b.array("coeffs_flat", c2)]), -bound, bound)
    acc = overflow(b, acc, accum)
    return requantize(b, acc, accum, out)


def _scatter_basis(b: Builder, like: str, cols: str, weights: str, n_basis: int, elem: int) -> str:
    """(N, in, n_basis) zeros with ``weights[n, i, m]`` at column ``cols[n, i, m]``, flattened to (N, in*n_basis)."""
    shape = b.op("Concat", [b.op("Shape", [like]), b.array("n_basis", np.array([n_basis], dtype=np.int64))], axis=0)
    zero = numpy_helper.from_array(np.zeros(1, dtype=helper.tensor_dtype_to_np_dtype(elem)), "zero")
    zeros = b.op("ConstantOfShape", [shape], value=zero)
    dense = b.op("ScatterElements", [zeros, cols, weights], axis=2)
    return b.op("Reshape", [dense, b.array("flat_shape", np.array([0, -1], dtype=np.int64))])


def _lower_fixed(b: Builder, g: Graph, n: Node, args: list) -> IntVal:
    ins = [g.tensors[t].dtype for t in n.inputs]
    out = g.tensors[n.output].dtype
    x = args[0]
    if isinstance(n, Quantize):
        return quantize(b, x, out)
    if isinstance(n, Requantize):
        return requantize(b, x, ins[0], out)
    if isinstance(n, ReLU):
        if x.lo < 0:
            x = IntVal(b.op("Max", [x.name, b.i64(0)]), max(x.lo, 0), max(x.hi, 0))
        return requantize(b, x, ins[0], out)
    if isinstance(n, Add):
        st = fixed.add_type(ins[0], ins[1])
        a0 = b.mul_const(args[0], 1 << (st.frac - ins[0].frac), "aligned operand")
        a1 = b.mul_const(args[1], 1 << (st.frac - ins[1].frac), "aligned operand")
        return requantize(b, b.add(a0, a1, "exact sum"), st, out)
    if isinstance(n, Dense):
        return _dense_stage(b, x, ins[0], n.weight, n.weight_type, n.bias, n.bias_type,
                            n.need("accum_type", *UNTYPED), out, "weight")
    if isinstance(n, LowRankDense):
        h = _dense_stage(b, x, ins[0], n.v, n.v_type, None, None, n.need("accum_v_type", *UNTYPED), n.mid_type, "v")
        return _dense_stage(b, h, n.mid_type, n.u, n.u_type, n.bias, n.bias_type, n.need("accum_type", *UNTYPED),
                            out, "u")
    if isinstance(n, KANLayer):
        return _kan_fixed(b, n, x, out)
    rule = onnx_layers.FIXED_RULES.get(n.OP)
    if rule is None:
        raise b.fail(f"no ONNX lowering for op {n.OP}")
    return rule(b, g, n, args, ins, out)


# -- float lowering: mirrors emulate's float path ------------------------------------------------------

def _lower_float(b: Builder, g: Graph, n: Node, args: list[str]) -> str:
    x = args[0]
    if isinstance(n, ReLU):
        return b.op("Relu", [x])
    if isinstance(n, Add):
        return b.op("Add", [args[0], args[1]])
    if isinstance(n, Dense):
        y = b.op("MatMul", [x, b.array("weight_t", np.asarray(n.weight, dtype=np.float32).T)])
        return _float_bias(b, y, n.bias)
    if isinstance(n, LowRankDense):
        h = b.op("MatMul", [x, b.array("v_t", np.asarray(n.v, dtype=np.float32).T)])
        y = b.op("MatMul", [h, b.array("u_t", np.asarray(n.u, dtype=np.float32).T)])
        return _float_bias(b, y, n.bias)
    if isinstance(n, KANLayer):
        return _kan_float(b, n, x)
    rule = onnx_layers.FLOAT_RULES.get(n.OP)
    if rule is None:
        raise b.fail(f"op {n.OP} has no float lowering")
    return rule(b, g, n, args)


def _float_bias(b: Builder, y: str, bias: Optional[np.ndarray]) -> str:
    return y if bias is None else b.op("Add", [y, b.array("bias", np.asarray(bias, dtype=np.float32))])


def _kan_float(b: Builder, n: KANLayer, x: str) -> str:
    """``bspline_basis_float`` step for step in float64 (same clamp, cell, u and truncated-power sum)."""
    k, h = n.order, (n.grid_hi - n.grid_lo) / n.grid_size
    xd = b.op("Cast", [x], to=TensorProto.DOUBLE)
    s = b.op("Div", [b.op("Sub", [xd, b.f64(n.grid_lo)]), b.f64(h)])
    s = b.op("Min", [b.op("Max", [s, b.f64(0.0)]), b.f64(n.grid_size - 1e-9)])
    cell_f = b.op("Floor", [s])
    u = b.op("Sub", [s, cell_f])
    cell = b.op("Cast", [cell_f], to=TensorProto.INT64)
    shifted = b.op("Add", [u, b.f64(float(k))])
    columns = []
    for m in range(k + 1):
        t = b.op("Sub", [shifted, b.f64(float(m))])
        total = None
        for j in range(k + 2):
            power = b.op("Max", [b.op("Sub", [t, b.f64(float(j))]), b.f64(0.0)])
            if k > 1:
                power = b.op("Pow", [power, b.f64(float(k))])
            term = b.op("Mul", [power, b.f64(float((-1) ** j * math.comb(k + 1, j)))])
            total = term if total is None else b.op("Add", [total, term])
        total = b.op("Div", [total, b.f64(float(math.factorial(k)))])
        columns.append(b.op("Unsqueeze", [total, b.array(f"axis2_{m}", np.array([2], dtype=np.int64))]))
    weights = b.op("Concat", columns, axis=2)  # (N, in, k+1)
    cols = b.op("Add", [b.op("Unsqueeze", [cell, b.array("axis2", np.array([2], dtype=np.int64))]),
                        b.array("active", np.arange(k + 1, dtype=np.int64).reshape(1, 1, k + 1))])
    dense = _scatter_basis(b, x, cols, weights, n.n_basis, TensorProto.DOUBLE)
    c2 = np.asarray(n.coeffs, dtype=np.float64).transpose(1, 2, 0).reshape(n.in_features * n.n_basis, n.out_features)
    y = b.op("MatMul", [dense, b.array("coeffs_flat", c2)])
    return b.op("Cast", [y], to=TensorProto.FLOAT)


# -- the model -------------------------------------------------------------------------------------------

def _code_name(g: Graph, t: str) -> str:
    """ONNX name of a fixed tensor's codes: graph inputs keep their IR name, the rest get ``_code``."""
    return t if t in g.inputs else f"{t}_code"


def _check_names(g: Graph) -> None:
    taken: dict[str, str] = {}
    for t, spec in g.tensors.items():
        names = [t] if spec.is_float or t in g.inputs else [f"{t}_code"] + ([t] if t in g.outputs else [])
        for name in names:
            if name in taken and taken[name] != t:
                raise OnnxExportError(f"graph '{g.name}': ONNX tensor name {name!r} is needed by both tensor "
                                      f"'{taken[name]}' and tensor '{t}'; rename one of them")
            taken[name] = t
    for t in g.inputs:
        if t in g.outputs:
            raise OnnxExportError(f"graph '{g.name}': tensor '{t}' is both a graph input and a graph output; "
                                  "ONNX export needs outputs computed by nodes")


def _value_info(name: str, elem: int, shape: tuple[int, ...]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, ["batch", *shape])


def _doc(g: Graph) -> str:
    types = "; ".join(f"{t}: {spec.type_str()}" for t, spec in g.tensors.items())
    return (f"bitforge {bitforge_version()} ONNX export of graph '{g.name}' (fixed-point tensors are int64 codes, "
            f"value = code * 2^-frac). Tensor types: {types}")


def to_onnx(graph: Graph, opset: int = DEFAULT_OPSET) -> onnx.ModelProto:
    """Lower a validated IR graph to an ONNX model that reproduces ``emulate.run`` (codes bit for bit).

    Raises :class:`OnnxExportError` when an intermediate cannot be proven to fit int64, when an
    accumulator type is missing, or when the naming convention would give two tensors one name.
    """
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise OnnxExportError(f"opset {opset} is not supported; use {MIN_OPSET}..{MAX_OPSET} (default {DEFAULT_OPSET})")
    g = validate(graph)
    _check_names(g)
    b = Builder(opset)
    env: dict[str, Union[IntVal, str]] = {}
    inputs = []
    for t in g.inputs:
        spec = g.tensors[t]
        if spec.is_float:
            env[t] = t
            inputs.append(_value_info(t, TensorProto.FLOAT, spec.shape))
        else:
            env[t] = IntVal(t, spec.dtype.min_code, spec.dtype.max_code)
            inputs.append(_value_info(t, TensorProto.INT64, spec.shape))
    for n in g.nodes:
        b.enter(n)
        args = [env[t] for t in n.inputs]
        spec = g.tensors[n.output]
        if spec.is_float:
            env[n.output] = b.op("Identity", [_lower_float(b, g, n, args)], out=n.output)
        else:
            v = _lower_fixed(b, g, n, args)
            env[n.output] = IntVal(b.op("Identity", [v.name], out=_code_name(g, n.output)), v.lo, v.hi)
    outputs = []
    b.scope = b.context = "outputs"
    for t in g.outputs:
        spec = g.tensors[t]
        if spec.is_float:
            outputs.append(_value_info(t, TensorProto.FLOAT, spec.shape))
            continue
        frac = spec.dtype.frac
        if not -1022 <= frac <= 1074:
            raise OnnxExportError(f"graph output '{t}' of type {spec.dtype}: 2^-{frac} is not a float64 value")
        b.op("Mul", [b.op("Cast", [_code_name(g, t)], to=TensorProto.DOUBLE), b.f64(2.0 ** -frac)], out=t)
        outputs += [_value_info(_code_name(g, t), TensorProto.INT64, spec.shape),
                    _value_info(t, TensorProto.DOUBLE, spec.shape)]
    onnx_graph = helper.make_graph(b.nodes, g.name, inputs, outputs, initializer=b.initializers,
                                   doc_string=_doc(g))
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(onnx_graph, opset_imports=opsets, producer_name="bitforge",
                              producer_version=bitforge_version(), doc_string=_doc(g))
    model.ir_version = helper.find_min_ir_version_for(opsets)
    helper.set_model_props(model, {
        META_TYPES: json.dumps({t: s.type_str() for t, s in g.tensors.items()}),
        META_INPUTS: json.dumps({t: g.tensors[t].type_str() for t in g.inputs}),
        META_OUTPUTS: json.dumps({t: g.tensors[t].type_str() for t in g.outputs}),
    })
    onnx.checker.check_model(model, full_check=True)
    return model


def save_onnx(model: onnx.ModelProto, path: Union[str, os.PathLike]) -> Path:
    """Write the model atomically (a half-written file never carries the final name)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(model.SerializeToString())
    os.replace(tmp, path)
    return path


# -- running --------------------------------------------------------------------------------------------

def make_session(model_or_path: ModelLike, threads: Optional[int] = None):
    """An ONNX Runtime CPU session with deterministic settings (sequential, fixed thread count).

    Integer kernels give the same codes for any thread count; fixing it keeps float outputs
    reproducible between runs as well. Basic graph optimisation only: constant folding and redundant
    node removal, no float fusions.
    """
    import onnxruntime as ort

    if isinstance(model_or_path, ort.InferenceSession):
        return model_or_path
    if isinstance(model_or_path, onnx.ModelProto):
        source = model_or_path.SerializeToString()
    elif isinstance(model_or_path, (bytes, bytearray)):
        source = bytes(model_or_path)
    else:
        path = Path(model_or_path)
        if not path.is_file():
            raise OnnxRunError(f"{path}: no such ONNX file (make one with bitforge's to_onnx/save_onnx)")
        source = str(path)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads or max(1, min(os.cpu_count() or 1, 8))
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    opts.use_deterministic_compute = True
    opts.log_severity_level = 3
    return ort.InferenceSession(source, sess_options=opts, providers=["CPUExecutionProvider"])


def _declared_types(session) -> dict[str, Optional[FixedType]]:
    meta = session.get_modelmeta().custom_metadata_map
    if META_INPUTS not in meta:
        return {}
    return {t: (None if s == "float32" else fixed.parse_type(s)) for t, s in json.loads(meta[META_INPUTS]).items()}


def _feed(name: str, value, declared, onnx_input) -> np.ndarray:
    a = np.asarray(value)
    want_shape = tuple(onnx_input.shape[1:])
    if a.ndim != len(onnx_input.shape) or any(isinstance(d, int) and d != s for d, s in zip(want_shape, a.shape[1:])):
        raise OnnxRunError(f"input '{name}': expected shape (batch, {', '.join(map(str, want_shape))}), found {a.shape}")
    if onnx_input.type == "tensor(float)":
        if a.dtype.kind not in "fiu":
            raise OnnxRunError(f"input '{name}' is float32: give real numbers, found dtype {a.dtype}")
        a = a.astype(np.float32)
        if not np.all(np.isfinite(a)):
            raise OnnxRunError(f"input '{name}' holds NaN or Inf (or values beyond float32); they have no code")
        return a
    if a.dtype.kind not in "iu":
        raise OnnxRunError(f"input '{name}' takes int64 codes of {declared or 'its type'}, found dtype {a.dtype}")
    if declared is not None and a.size and (a.min() < declared.min_code or a.max() > declared.max_code):
        raise OnnxRunError(f"input '{name}': codes in [{a.min()}, {a.max()}] lie outside {declared} "
                           f"[{declared.min_code}, {declared.max_code}]")
    return a.astype(np.int64)


def run_onnxruntime(model_or_path: ModelLike, inputs: Union[np.ndarray, Mapping[str, np.ndarray]],
                    threads: Optional[int] = None) -> dict[str, np.ndarray]:
    """Run the whole batch in one session call; returns every model output by name.

    ``model_or_path`` may also be a session from :func:`make_session`, to run several batches without
    building it again. Float inputs are cast to float32 and must be finite; fixed inputs must be
    integer codes inside their declared type (as ``emulate.run`` demands).
    """
    session = make_session(model_or_path, threads)
    onnx_inputs = session.get_inputs()
    if not isinstance(inputs, Mapping):
        if len(onnx_inputs) != 1:
            raise OnnxRunError(f"the model has inputs {[i.name for i in onnx_inputs]}; pass a dict")
        inputs = {onnx_inputs[0].name: inputs}
    names = [i.name for i in onnx_inputs]
    unknown = sorted(set(inputs) - set(names))
    missing = [nm for nm in names if nm not in inputs]
    if unknown or missing:
        raise OnnxRunError(f"model inputs are {names}; missing {missing}, unknown {unknown}")
    declared = _declared_types(session)
    feeds = {i.name: _feed(i.name, inputs[i.name], declared.get(i.name), i) for i in onnx_inputs}
    out_names = [o.name for o in session.get_outputs()]
    return dict(zip(out_names, session.run(out_names, feeds)))
