"""Small Verilog helpers every RTL generator shares: names, literals, packed words, sign extension, templates.

Kept apart from the stage contract (:mod:`.stages`) and the top-level generator (:mod:`.generate`) so that
the per-op emitters (:mod:`.dense`, :mod:`.kan`) and the learner generators (:mod:`.learner_kan`,
:mod:`.learner_mlp`) import their helpers from a leaf module: none of them needs the generator, and the
generator needs them, so the package has no import cycle.

Element ``i`` of a packed word sits at bits ``[i*W +: W]`` (element 0 least significant) everywhere: in the
stage contract's ``in_data``/``out_data``, in packed Verilog parameters and in the cocotb benches.
"""
from __future__ import annotations

import functools
import re
from typing import Iterable

import jinja2

from ...errors import BitforgeError
from ...fixed import FixedType, signed_bits
from ...templating import environment


class RtlError(BitforgeError):
    """A graph the RTL backend cannot generate (op without a hardware form, float tensors, a non-chain graph)."""


#: How the RTL generators ask for a type the precision pass sets: ``node.need(field, *UNTYPED)``.
UNTYPED = (RtlError, "before generating RTL")


def verilog_name(text: str) -> str:
    """A legal, stable Verilog identifier from an IR name (ONNX names look like '/fc1/Gemm')."""
    s = re.sub(r"[^A-Za-z0-9_]", "_", text).strip("_") or "n"
    return ("n_" + s) if s[0].isdigit() else s


@functools.cache
def templates() -> jinja2.Environment:
    """The environment over this package's ``templates/`` (one per process: Jinja caches compiled templates)."""
    return environment("bitforge.toolchain.backends.rtl")


# -- literals and packed words -------------------------------------------------------------------------------

def verilog_literal(code: int, width: int) -> str:
    """A code as a sized Verilog literal of ``width`` bits (two's complement for negatives)."""
    return f"{width}'h{code & ((1 << width) - 1):0{(width + 3) // 4}x}"


def pack_word(codes: Iterable[int], width: int) -> int:
    """Codes as one unsigned integer, element i at ``[i*width +: width]`` (negatives as two's complement)."""
    mask = (1 << width) - 1
    word = 0
    for i, c in enumerate(codes):
        word |= (int(c) & mask) << (i * width)
    return word


def unpack_word(word: int, count: int, width: int, signed: bool = True) -> list[int]:
    """The ``count`` codes of a packed word: :func:`pack_word` inverted, read as two's complement when ``signed``."""
    mask = (1 << width) - 1
    out = []
    for i in range(count):
        v = (word >> (i * width)) & mask
        out.append(v - (1 << width) if signed and v >> (width - 1) else v)
    return out


def packed_parameter(codes, width: int) -> str:
    """Codes as one packed Verilog constant, element i at [i*width +: width] (element 0 least significant)."""
    codes = list(codes)
    total = width * len(codes)
    return f"{total}'h{pack_word(codes, width):0{(total + 3) // 4}x}"


# -- widths and expressions ---------------------------------------------------------------------------------

def signed_width(v: int) -> int:
    """Bits of ``v`` as a two's complement number, at least 2 (a signed Verilog parameter of width 1 holds
    only 0 and -1)."""
    return max(2, signed_bits(v))


def sign_extend(name: str, width: int, to: int) -> str:
    """``name`` (signed, ``width`` bits) sign-extended to ``to`` bits, as a signed Verilog expression."""
    return f"$signed({{{{{to - width}{{{name}[{width - 1}]}}}}, {name}}})" if to > width else f"$signed({name})"


def balanced_sum(terms: list[str]) -> str:
    """``a + b + c + d`` as ``((a + b) + (c + d))``: an adder tree of depth log2(n), not a chain (a loop
    that runs through the sum, like an online learner's, is as long as its depth)."""
    if len(terms) == 1:
        return terms[0]
    mid = (len(terms) + 1) // 2
    return f"({balanced_sum(terms[:mid])} + {balanced_sum(terms[mid:])})"


# -- FixedType as rtl/ library parameters -------------------------------------------------------------------

#: How the rtl/ library's ROUNDING and OVERFLOW parameters encode fixed.Rounding / fixed.Overflow.
ROUNDING_CODE = {"TRN": 0, "TRN_ZERO": 1, "RND": 2, "RND_ZERO": 3, "RND_INF": 4, "RND_MIN_INF": 5, "RND_CONV": 6}
OVERFLOW_CODE = {"WRAP": 0, "SAT": 1, "SAT_SYM": 2, "SAT_ZERO": 3}


def mode_codes(t: FixedType) -> dict[str, int]:
    """``{"rounding": ..., "overflow": ...}``: a type's modes as the library's parameter codes."""
    return {"rounding": ROUNDING_CODE[t.rounding.value], "overflow": OVERFLOW_CODE[t.overflow.value]}


def type_parameters(prefix: str, t: FixedType) -> dict[str, int]:
    """The Verilog parameters that describe a FixedType: <P>_W, <P>_FRAC, <P>_SIGNED (+ rounding/overflow)."""
    return {f"{prefix}_W": t.width, f"{prefix}_FRAC": t.frac, f"{prefix}_SIGNED": int(t.signed),
            f"{prefix}_ROUNDING": ROUNDING_CODE[t.rounding.value], f"{prefix}_OVERFLOW": OVERFLOW_CODE[t.overflow.value]}
