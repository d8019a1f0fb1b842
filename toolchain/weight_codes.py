"""What became of a weight array when it was turned into fixed-point codes: how many non-zero weights became 0 and
how many saturated. The quantization pass and the torch frontend (fake-quantized parameters) record it in
``graph.metadata[WEIGHT_CODES_KEY]``, keyed ``"<node>.<field>"``; the precision check warns from it
(:func:`bitforge.toolchain.passes.precision.weight_code_warnings`), since once a graph holds codes the float
weights they came from are gone.
"""
from __future__ import annotations

import numpy as np

from . import fixed
from .fixed import FixedType

WEIGHT_CODES_KEY = "weight_codes"


def weight_code_counts(values, codes, t: FixedType) -> dict:
    """How ``values`` (floats) fared as ``codes`` of ``t``: the non-zero ones that became 0, the ones outside ``t``'s
    range (saturated, or refused by the caller), and the largest magnitude (what sets a width-only type's integer
    bits)."""
    values = np.asarray(values, dtype=np.float64)
    codes = np.asarray(codes)
    nonzero = values != 0
    return {"type": t.to_short(), "values": int(values.size), "nonzero": int(nonzero.sum()),
            "zeroed": int((nonzero & (codes == 0)).sum()),
            "saturated": int(fixed.out_of_range(values, t).sum()) if values.size else 0,
            "max_abs": float(np.abs(values).max()) if values.size else 0.0}
