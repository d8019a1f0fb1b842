"""``--trace N``: every tensor of both models on the first N vectors, to see where the error enters.

``OUT/trace.npz`` (``numpy.load(path)``, no pickle) holds

* ``fixed/<tensor>``: every tensor of the compiled model (graph inputs included) as real values, float64
  (exact: a code of up to 53 bits is a float64);
* ``float/<tensor>``: every tensor of the float reference (:class:`.fidelity.Reference`), float32;
* ``layers``: one row per node of the compiled model, in graph order: node, op, its output tensor, and the
  reference tensor it is compared with (``""`` when it has none; the rule is in :mod:`.fidelity`);
* ``set``: which vectors these are (``verification`` or ``calibration``), their first N rows.

The file is written with fixed zip timestamps and members in sorted order, so the same compile gives the same
bytes (``numpy.savez`` stamps the current time).
"""
from __future__ import annotations

import io
import zipfile
from typing import Callable, Optional

import numpy as np

from .. import emulate, fixed
from ..ir import Graph

FILE = "trace.npz"
TIMESTAMP = (1980, 1, 1, 0, 0, 0)


def trace_arrays(fixed_g: Graph, ref_g: Graph, mapping: dict[str, str], fixed_inputs: dict[str, np.ndarray],
                 real_inputs: dict[str, np.ndarray], set_name: str,
                 ref_run: Optional[Callable[[dict], dict]] = None) -> dict[str, np.ndarray]:
    """The arrays of ``trace.npz``: both models on their inputs, every tensor kept (``ref_run``: the reference's
    own executor, when it is not ``ref_g`` in the golden model)."""
    env = emulate.run(fixed_g, fixed_inputs, keep=True)
    ref_env = ref_run(real_inputs) if ref_run is not None else emulate.run(ref_g, real_inputs, keep=True)
    arrays = {}
    scales = fixed_g.metadata.get("tensor_scales", {})
    for k, v in env.items():
        t = fixed_g.tensors[k].dtype
        r = fixed.to_float(v, t) if t is not None else np.asarray(v, dtype=np.float64)
        arrays[f"fixed/{k}"] = r * scales[k] if k in scales else r  # a non-power-of-two quantizer's codes
    for k, v in ref_env.items():
        arrays[f"float/{k}"] = np.asarray(v, dtype=np.float32)
    rows = [[n.name, n.OP, o, mapping.get(o, "")] for n in fixed_g.nodes for o in n.outputs]
    arrays["layers"] = np.array(rows, dtype=str).reshape(len(rows), 4)
    arrays["set"] = np.array(set_name)
    return arrays


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """A ``.npz`` that ``numpy.load`` reads (allow_pickle=False), byte-identical for equal arrays."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name in sorted(arrays):
            member = io.BytesIO()
            np.lib.format.write_array(member, np.asarray(arrays[name]), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=TIMESTAMP)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, member.getvalue())
    return buf.getvalue()
