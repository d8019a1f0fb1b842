"""Compare an executor's outputs with the golden model's, bit for bit (or within a stated float tolerance)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

import numpy as np

from .. import emulate
from ..ir import Graph

#: Float graphs: ONNX Runtime and the golden model both compute in float32 but may sum in another order
#: (BLAS blocking); a relative error of a few float32 ulps per accumulated term stays far below this.
FLOAT_RTOL = 1e-4
FLOAT_ATOL = 1e-5


@dataclass
class Comparison:
    """Outcome of one golden-vs-executor check, as written to ``report.json``."""

    executor: str
    vectors: int
    mismatches: int
    exact: bool
    tolerance: Optional[dict] = None
    first_mismatch: Optional[dict] = None
    outputs: list = field(default_factory=list)

    def to_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


def _scalar(v):
    """A JSON-able Python number from a numpy scalar (object arrays already hold Python ints)."""
    return v.item() if isinstance(v, np.generic) else v


def _first_mismatch(name: str, bad: np.ndarray, golden: np.ndarray, other: np.ndarray,
                    inputs: dict[str, np.ndarray]) -> dict:
    row, *col = np.argwhere(bad)[0].tolist()
    idx = (row, *col)
    return {
        "output": name, "row": row, "index": col,
        "golden": _scalar(golden[idx]),
        "executor": _scalar(other[idx]),
        "inputs": {k: np.asarray(v[row]).tolist() for k, v in inputs.items()},
    }


def compare_outputs(g: Graph, inputs: dict[str, np.ndarray], executor_outputs: dict[str, np.ndarray],
                    executor: str) -> Comparison:
    """Fixed outputs compare integer codes exactly (executor key ``<name>_code``); float ones within tolerance."""
    golden = emulate.run(g, inputs)
    n = len(next(iter(inputs.values())))
    bad_rows = np.zeros(n, dtype=bool)
    first = None
    exact = True
    for name in g.outputs:
        gold = np.asarray(golden[name])
        if g.tensors[name].is_float:
            exact = False
            other = np.asarray(executor_outputs[name], dtype=np.float64)
            bad = ~np.isclose(other, gold, rtol=FLOAT_RTOL, atol=FLOAT_ATOL)
        else:
            other = np.asarray(executor_outputs[f"{name}_code"])
            bad = other != gold
        rows = bad.reshape(n, -1).any(axis=1)
        if first is None and rows.any():
            first = _first_mismatch(name, bad, gold, other, inputs)
        bad_rows |= rows
    return Comparison(
        executor=executor, vectors=n, mismatches=int(bad_rows.sum()), exact=exact,
        tolerance=None if exact else {"rtol": FLOAT_RTOL, "atol": FLOAT_ATOL,
                                      "why": "float32 graph: summation order may differ between executors"},
        first_mismatch=first, outputs=list(g.outputs),
    )
