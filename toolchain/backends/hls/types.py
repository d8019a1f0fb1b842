"""bitforge's fixed-point types as hls4ml precisions and as ``ap_fixed`` text.

One mapping for the whole HLS backend (the converter's native layers and the extension layers): a
:class:`~bitforge.toolchain.fixed.FixedType` and an ``ap_fixed`` of the same width, integer bits, sign, rounding
and overflow mode compute the same bits (``toolchain/fixed.py`` is tested against the ap_fixed headers), so the
C simulation of the firmware can be compared with the golden model code for code. hls4ml is imported only when a
precision object is asked for: the text form needs no hls4ml.
"""
from __future__ import annotations

from ...fixed import FixedType

__all__ = ["hls_precision", "ap_type_string"]


def hls_precision(t: FixedType):
    """``hls4ml.model.types.FixedPrecisionType`` with ``t``'s width, integer bits, sign and both modes.

    The modes are always set (never left to hls4ml's defaults), so what hls4ml writes into ``defines.h`` is
    ``t`` exactly, e.g. ``ap_fixed<16,6,AP_RND_CONV,AP_SAT,0>`` for ``fixed<16,6,RND_CONV,SAT>``."""
    from hls4ml.model.types import FixedPrecisionType, RoundingMode, SaturationMode

    return FixedPrecisionType(width=t.width, integer=t.integer, signed=t.signed,
                              rounding_mode=RoundingMode[t.rounding.value],
                              saturation_mode=SaturationMode[t.overflow.value], saturation_bits=0)


def ap_type_string(t: FixedType) -> str:
    """``ap_fixed<W,I,AP_Q,AP_O>`` / ``ap_ufixed<...>`` for ``t``, both modes always written (no reliance on the
    header's defaults), e.g. ``ap_ufixed<18,1,AP_RND_CONV,AP_SAT>``."""
    head = "ap_fixed" if t.signed else "ap_ufixed"
    return f"{head}<{t.width},{t.integer},AP_{t.rounding.value},AP_{t.overflow.value}>"
