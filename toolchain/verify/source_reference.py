"""The fidelity reference of an approximated quantized export: the source ONNX file itself, run by onnxruntime.

When the ONNX frontend translates a QDQ or QONNX graph exactly, the dequantized IR *is* the source's arithmetic
and the fidelity report compares against it (:func:`.fidelity.reference_for`). When it approximates (scales that
are not powers of two become integer multipliers, ``docs/quantized-models.md``), the only honest reference is the
source model as its own ecosystem executes it: QuantizeLinear/DequantizeLinear with their float semantics, float
biases, a float Softmax. So the source file runs in onnxruntime, with

* graph optimizations off: onnxruntime would otherwise fuse Q/DQ pairs into integer kernels (QLinearConv, ...)
  with their own requantization, which is another approximation of the same float graph;
* every QONNX ``Quant`` node expanded into the float ops its specification defines,
  ``(clip(round(x / scale + zeropt), min, max) - zeropt) * scale`` in float32 (``Div``, ``Add``, ``Round``/
  ``Floor``/``Ceil``, ``Clip``, ``Sub``, ``Mul``): onnxruntime has no kernel for it, and float32 is what
  Brevitas and the qonnx executor compute it in;
* every intermediate float tensor exposed as an output, so each layer of the compiled model can be paired with
  the source tensor of the same name (:func:`.fidelity.tensor_map`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..errors import BitforgeError
from ..ir import Graph, TensorSpec
from .fidelity import Reference

__all__ = ["SourceReferenceError", "onnx_reference", "expand_quant_nodes"]

#: Domains of QONNX ``Quant`` (the frontend's list; repeated here so verify does not import a frontend).
QONNX_DOMAINS = ("qonnx.custom_op.general", "finn.custom_op.general", "onnx.brevitas")
#: QONNX rounding modes with one ONNX op (ROUND is half to even, as ONNX Round).
ROUND_OPS = {"ROUND": "Round", "HALF_EVEN": "Round", "FLOOR": "Floor", "CEIL": "Ceil"}


class SourceReferenceError(BitforgeError):
    """A source model that onnxruntime cannot run as the fidelity reference."""


def expand_quant_nodes(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` with every QONNX ``Quant`` node replaced by its float definition."""
    out = onnx.ModelProto.FromString(model.SerializeToString())
    inits = {t.name: numpy_helper.to_array(t) for t in out.graph.initializer}
    nodes = []
    for k, n in enumerate(out.graph.node):
        if n.domain not in QONNX_DOMAINS or n.op_type != "Quant":
            nodes.append(n)
            continue
        at = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        mode = at.get("rounding_mode", b"ROUND")
        mode = (mode.decode() if isinstance(mode, bytes) else str(mode)).upper()
        if mode not in ROUND_OPS or n.input[3] not in inits:
            raise SourceReferenceError(f"Quant node '{n.name}': rounding_mode {mode} (or a computed bitwidth) has no "
                                       "float form here; expected ROUND, HALF_EVEN, FLOOR or CEIL")
        bits = int(np.asarray(inits[n.input[3]]).ravel()[0])
        signed, narrow = bool(at.get("signed", 1)), bool(at.get("narrow", 0))
        lo, hi = ((-(1 << (bits - 1)) + int(narrow), (1 << (bits - 1)) - 1) if signed
                  else (0, (1 << bits) - 1 - int(narrow)))
        x, scale, zp = n.input[:3]
        p = f"{n.name or 'quant'}_{k}_ref"
        out.graph.initializer.extend([numpy_helper.from_array(np.array(lo, np.float32), f"{p}_lo"),
                                      numpy_helper.from_array(np.array(hi, np.float32), f"{p}_hi")])
        nodes += [helper.make_node("Div", [x, scale], [f"{p}_div"]),
                  helper.make_node("Add", [f"{p}_div", zp], [f"{p}_add"]),
                  helper.make_node(ROUND_OPS[mode], [f"{p}_add"], [f"{p}_round"]),
                  helper.make_node("Clip", [f"{p}_round", f"{p}_lo", f"{p}_hi"], [f"{p}_clip"]),
                  helper.make_node("Sub", [f"{p}_clip", zp], [f"{p}_sub"]),
                  helper.make_node("Mul", [f"{p}_sub", scale], [n.output[0]])]
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    kept = [o for o in out.opset_import if o.domain not in QONNX_DOMAINS]
    del out.opset_import[:]
    out.opset_import.extend(kept)
    return out


def _exposed(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, tuple[int, ...]]]:
    """The model with every float intermediate of known per-sample shape as an extra output, and those shapes."""
    inferred = onnx.shape_inference.infer_shapes(model)
    outputs = {o.name for o in model.graph.output}
    shapes = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output) + list(inferred.graph.input):
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        if tt.elem_type == TensorProto.FLOAT and len(dims) >= 1 and all(d for d in dims[1:]):
            shapes[vi.name] = tuple(int(d) for d in dims[1:])
    exposed = onnx.ModelProto.FromString(model.SerializeToString())
    produced = {o for n in model.graph.node for o in n.output}  # value_info may name tensors a quantizer removed
    for vi in inferred.graph.value_info:
        if vi.name in shapes and vi.name in produced and vi.name not in outputs:
            exposed.graph.output.append(vi)
    return exposed, shapes


def _fixed_batch(model: onnx.ModelProto) -> Optional[int]:
    """The batch size an export fixed in its first input's shape (its Reshapes may spell it too), or None."""
    dims = model.graph.input[0].type.tensor_type.shape.dim if model.graph.input else []
    return int(dims[0].dim_value) if dims and dims[0].HasField("dim_value") and dims[0].dim_value > 0 else None


def onnx_reference(path: Path, batch: int = 4096) -> Optional[Reference]:
    """The source file at ``path`` as a fidelity :class:`.fidelity.Reference` (None when it cannot be run: the
    fidelity report then falls back to the dequantized graph and says so by its kind)."""
    import onnxruntime as ort

    source = onnx.load(str(path))
    try:
        model, shapes = _exposed(expand_quant_nodes(source))
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        opts.log_severity_level = 3
        session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - a Quant mode without a float op, a graph onnxruntime refuses: fall back
        return None
    names = [o.name for o in session.get_outputs()]
    inputs = [i.name for i in model.graph.input if i.name in shapes]

    fixed_batch = _fixed_batch(source)
    step = fixed_batch or batch

    def run(real: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        rows = len(next(iter(real.values())))
        parts = []
        for s in range(0, rows, step):
            feed = {k: np.asarray(v[s:s + step], np.float32) for k, v in real.items()}
            if fixed_batch:  # an export traced with its example's batch size (Brevitas): pad the last chunk
                feed = {k: np.concatenate([v, np.repeat(v[-1:], fixed_batch - len(v), axis=0)]) for k, v in feed.items()}
            parts.append([o[:min(step, rows - s)] for o in session.run(names, feed)])
        env = {k: np.asarray(v, np.float32) for k, v in real.items()}
        env.update({n: np.concatenate([p[i] for p in parts]) for i, n in enumerate(names)})
        return env

    tensors = {n: TensorSpec(n, shapes[n], None) for n in shapes}
    stand_in = Graph(model.graph.name or Path(path).stem, inputs, [o.name for o in source.graph.output], tensors, [])
    return Reference(stand_in, "source", runner=run)
