"""Uniform b-bit weights with a float16 scale and float16 zero-point per row or per group (layout ``uniform-v1``).

Decoding (the definition the GPU kernels and the PyTorch reference path share)::

    w[r, c] = (code[r, c] + zero[r, c // group]) * scale[r, c // group]      # float32 arithmetic

``codes`` are unsigned integers in ``0 .. 2**bits - 1`` (bits 1..8), ``scale`` and ``zero`` are float16 tensors of
shape ``[out, in // group]`` (``[out, 1]`` when ``group`` is ``None``: one pair per output channel). The zero-point
is a *float* offset in units of the scale (NeUQI's parametrisation ``Q(w) = (clamp(round(w/s - z), 0, 2^b-1) + z) s``),
so the decoded grid is ``{(k + z) s}``, not restricted to contain 0.

Packed codes (``pack_codes``): a uint8 tensor ``[out, row_bytes]`` with ``row_bytes = ceil(in * bits / 8)``.
Each row is packed on its own (rows start on a byte boundary, so a kernel can address row ``r`` at
``r * row_bytes``; the last byte of a row is zero-padded when ``in * bits`` is not a multiple of 8). Within a row
the codes form a little-endian bit stream: code ``c`` occupies stream bits ``c*bits .. c*bits + bits - 1``,
least significant bit first, and stream bit ``j`` is bit ``j % 8`` (value ``1 << (j % 8)``) of byte ``j // 8``.
For 2, 4 and 8 bits this means code ``c`` sits in byte ``c * bits // 8`` at shift ``(c * bits) % 8`` (so the
first code of a byte is in its low bits); for 3, 5, 6 and 7 bits a code may straddle two bytes.
"""
from __future__ import annotations

import math

import torch

from bitforge.toolchain.errors import BitforgeError

LAYOUT = "uniform-v1"


def _check_bits(bits: int) -> None:
    if not 1 <= bits <= 8:
        raise BitforgeError(f"uniform packing: bits {bits} not supported; expected 1..8")


def row_bytes(n_in: int, bits: int) -> int:
    """Bytes per packed row: rows are byte-aligned."""
    return (n_in * bits + 7) // 8


def _unit(bits: int) -> tuple[int, int]:
    """(codes, bytes) of the smallest whole-byte run of codes: 8 codes of 3 bits are 3 bytes, 2 of 4 bits are 1."""
    g = math.gcd(bits, 8)
    return 8 // g, bits // g


def pack_codes(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack ``codes`` (uint8 ``[out, in]``, each < ``2**bits``) into the byte layout of the module docstring."""
    _check_bits(bits)
    if codes.dim() != 2 or codes.dtype != torch.uint8:
        raise BitforgeError(f"uniform packing: expected uint8 codes of shape [out, in], got {codes.dtype} "
                            f"{tuple(codes.shape)}")
    if codes.numel() and int(codes.max()) >= 1 << bits:
        raise BitforgeError(f"uniform packing: a code {int(codes.max())} does not fit in {bits} bits")
    out, n_in = codes.shape
    per, nb = _unit(bits)
    units = -(-n_in // per)
    # A run of `per` codes is one little-endian integer of `nb` bytes (at most 56 bits): OR the codes into it,
    # then cut it into bytes. Padding codes are 0, so the bytes past the row's end are 0 and are dropped.
    c = torch.nn.functional.pad(codes, (0, units * per - n_in)).reshape(out, units, per).to(torch.int64)
    v = (c << (bits * torch.arange(per, dtype=torch.int64))).sum(-1, keepdim=True)
    b = (v >> (8 * torch.arange(nb, dtype=torch.int64))) & 0xFF
    return b.reshape(out, units * nb)[:, : row_bytes(n_in, bits)].to(torch.uint8).contiguous()


def unpack_codes(packed: torch.Tensor, bits: int, shape: tuple[int, int]) -> torch.Tensor:
    """Inverse of :func:`pack_codes`: uint8 codes of ``shape`` = ``(out, in)``."""
    _check_bits(bits)
    out, n_in = shape
    nbytes = row_bytes(n_in, bits)
    if packed.dtype != torch.uint8 or tuple(packed.shape) != (out, nbytes):
        raise BitforgeError(f"uniform unpacking: expected uint8 [{out}, {nbytes}] for {bits}-bit codes of shape "
                            f"{tuple(shape)}, got {packed.dtype} {tuple(packed.shape)}")
    per, nb = _unit(bits)
    units = -(-n_in // per)
    b = torch.nn.functional.pad(packed, (0, units * nb - nbytes)).reshape(out, units, nb).to(torch.int64)
    v = (b << (8 * torch.arange(nb, dtype=torch.int64))).sum(-1, keepdim=True)
    c = (v >> (bits * torch.arange(per, dtype=torch.int64))) & ((1 << bits) - 1)
    return c.reshape(out, units * per)[:, :n_in].to(torch.uint8).contiguous()


def dequantize(codes: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, group: int | None) -> torch.Tensor:
    """float32 ``[out, in]`` weight of unpacked ``codes`` (the decoding rule of the module docstring)."""
    out, n_in = codes.shape
    g = n_in if group is None else group
    if n_in % g or tuple(scale.shape) != (out, n_in // g) or tuple(zero.shape) != (out, n_in // g):
        raise BitforgeError(f"uniform dequantize: codes {tuple(codes.shape)} with group {group} need scale and zero "
                            f"of shape [{out}, {n_in // g if n_in % g == 0 else '?'}], got "
                            f"{tuple(scale.shape)} and {tuple(zero.shape)}")
    c = codes.to(torch.float32).reshape(out, n_in // g, g)
    w = (c + zero.to(torch.float32).unsqueeze(-1)) * scale.to(torch.float32).unsqueeze(-1)
    return w.reshape(out, n_in)
