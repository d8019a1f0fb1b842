"""The wire protocol between a host and a deployed bitforge device: frames, their checks, and the payloads.

The one home of the protocol in Python (``docs/protocol.md`` is its specification): the host runtime speaks it
to real and simulated boards, the RTL backend takes its constants (type and error codes, the ``hello``
layout) from here so the device and the host cannot drift apart, and the tests fuzz it. COBS comes from the
``cobs`` package and the CRC from :func:`binascii.crc_hqx` (CRC-16/CCITT-FALSE with the initial value
``0xFFFF``), both well-kept and fast.
"""
from __future__ import annotations

import binascii
import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Iterable, Sequence, Union

from cobs import cobs

from bitforge.toolchain.errors import BitforgeError

__all__ = [
    "PROTOCOL_VERSION", "FrameType", "ErrorCode", "Capability", "RESPONSE_BIT", "HEADER_BYTES", "CRC_BYTES",
    "DELIMITER", "ID_BYTES", "crc16", "Frame", "FrameError", "encode_frame", "encode_body", "decode_body",
    "FrameDecoder", "Hello", "DeviceError", "wire_bytes", "pack_word", "unpack_word", "word_bytes",
    "words_to_bytes", "bytes_to_words", "read_state_request", "write_weights_request",
]

PROTOCOL_VERSION = 1
RESPONSE_BIT = 0x80
HEADER_BYTES = 4
CRC_BYTES = 2
DELIMITER = b"\x00"
ID_BYTES = 16  # model_id / arch_id as sent on the wire: the first 16 bytes of the SHA-256
VERSION_MAX = 32


class FrameType(IntEnum):
    HELLO = 0x01
    INFER = 0x02
    INFER_BATCH = 0x03
    LEARN = 0x04
    READ_STATE = 0x05
    WRITE_WEIGHTS = 0x06
    COMMIT_WEIGHTS = 0x07
    ERROR = 0x7F

    @property
    def response(self) -> int:
        """The type byte of this request's answer."""
        return self.value | RESPONSE_BIT


class ErrorCode(IntEnum):
    BAD_CRC = 1
    BAD_LENGTH = 2
    UNKNOWN_TYPE = 3
    WRONG_SHAPE = 4
    TOO_LONG = 5
    BAD_COBS = 6
    TIMEOUT = 7
    UNSUPPORTED = 8
    BAD_ADDRESS = 9
    SHORT = 10


class Capability(IntEnum):
    INFER = 1 << 0
    LEARN = 1 << 1
    READ_STATE = 1 << 2
    WRITE_WEIGHTS = 1 << 3


def crc16(data: bytes, value: int = 0xFFFF) -> int:
    """CRC-16/CCITT-FALSE (poly 0x1021, init 0xFFFF, not reflected, no final XOR); ``crc16(b"123456789") == 0x29B1``."""
    return binascii.crc_hqx(data, value)


@dataclass(frozen=True)
class Frame:
    """One decoded frame: its type byte, sequence number and payload."""

    type: int
    seq: int
    payload: bytes = b""

    def __post_init__(self) -> None:
        if not 0 <= self.type <= 0xFF or not 0 <= self.seq <= 0xFF:
            raise ValueError(f"frame type {self.type} and seq {self.seq} must be bytes")
        if len(self.payload) > 0xFFFF:
            raise ValueError(f"payload of {len(self.payload)} bytes exceeds the 16-bit length field")

    @property
    def is_error(self) -> bool:
        return self.type == FrameType.ERROR

    def describe(self) -> str:
        try:
            name = FrameType(self.type & ~RESPONSE_BIT if self.type != FrameType.ERROR else self.type).name.lower()
        except ValueError:
            name = f"type 0x{self.type:02x}"
        return f"{name}{' answer' if self.type & RESPONSE_BIT else ''} (seq {self.seq}, {len(self.payload)} bytes)"


class FrameError(BitforgeError):
    """A received byte sequence that is not a valid frame; ``code`` says how (the device's error codes)."""

    def __init__(self, code: ErrorCode, message: str, seq: int = 0, detail: int = 0):
        super().__init__(message)
        self.code = code
        self.seq = seq
        self.detail = detail


def encode_body(frame: Frame) -> bytes:
    """Header, payload and CRC (most significant byte first, so that the CRC of the whole body is zero)."""
    head = struct.pack("<BBH", frame.type, frame.seq, len(frame.payload)) + frame.payload
    return head + crc16(head).to_bytes(2, "big")


def encode_frame(frame: Frame) -> bytes:
    """The bytes on the wire: COBS of the body, then the 0x00 delimiter."""
    return cobs.encode(encode_body(frame)) + DELIMITER


def wire_bytes(payload_bytes: int) -> int:
    """At most this many bytes on the wire for this much payload, delimiter included (COBS's worst case)."""
    body = HEADER_BYTES + payload_bytes + CRC_BYTES
    return body + 1 + body // 254 + 1


def decode_body(body: bytes) -> Frame:
    """Check one decoded body (length, CRC) and split it; raises :class:`FrameError` as the device would."""
    seq = body[1] if len(body) > 1 else 0
    if len(body) < HEADER_BYTES + CRC_BYTES:
        raise FrameError(ErrorCode.SHORT, f"frame of {len(body)} bytes is shorter than a header and a CRC "
                         f"({HEADER_BYTES + CRC_BYTES} bytes)", seq, len(body))
    if crc16(body) != 0:
        raise FrameError(ErrorCode.BAD_CRC, f"frame (seq {seq}) failed its CRC check", seq)
    kind, seq, length = struct.unpack_from("<BBH", body)
    got = len(body) - HEADER_BYTES - CRC_BYTES
    if length != got:
        raise FrameError(ErrorCode.BAD_LENGTH, f"frame (seq {seq}) says {length} payload bytes but carries {got}",
                         seq, got)
    return Frame(kind, seq, bytes(body[HEADER_BYTES:HEADER_BYTES + length]))


class FrameDecoder:
    """Turns a byte stream into frames, resynchronising at every 0x00 as the device does.

    ``feed`` returns, in order, a :class:`Frame` for each good frame and a :class:`FrameError` for each bad one
    (the caller decides whether to count, log or raise them); an empty frame (two 0x00 in a row) is ignored. Bytes of a frame longer than ``max_body`` are
    dropped up to the next 0x00, which then yields one ``too_long`` error, so garbage cannot grow the buffer.
    """

    def __init__(self, max_body: int = HEADER_BYTES + 0xFFFF + CRC_BYTES):
        self.max_encoded = max_body + max_body // 254 + 2
        self._buf = bytearray()
        self._overflow = False

    @property
    def pending(self) -> int:
        """Bytes of an unfinished frame held."""
        return len(self._buf)

    def reset(self) -> None:
        self._buf.clear()
        self._overflow = False

    def feed(self, data: bytes) -> list[Union[Frame, FrameError]]:
        out: list[Union[Frame, FrameError]] = []
        start = 0
        while True:
            end = data.find(0, start)
            chunk = data[start:] if end < 0 else data[start:end]
            if not self._overflow:
                self._buf += chunk
                if len(self._buf) > self.max_encoded:
                    self._overflow = True
                    self._buf.clear()
            if end < 0:
                return out
            if self._buf or self._overflow:  # an empty frame (0x00 after 0x00) is only a resync: ignored
                out.append(self._finish())
            start = end + 1

    def _finish(self) -> Union[Frame, FrameError]:
        encoded, overflow = bytes(self._buf), self._overflow
        self.reset()
        if overflow:
            return FrameError(ErrorCode.TOO_LONG, f"frame longer than {self.max_encoded} encoded bytes")
        try:
            body = cobs.decode(encoded)
        except cobs.DecodeError as e:
            return FrameError(ErrorCode.BAD_COBS, f"invalid COBS encoding ({e})")
        try:
            return decode_body(body)
        except FrameError as e:
            return e


# -- payloads -------------------------------------------------------------------------------------------------

_HELLO = struct.Struct("<BBHHHHBbBHBbBIHHIHII16s16s")
assert _HELLO.size == 72, _HELLO.size


@dataclass(frozen=True)
class Hello:
    """What a device says about itself (``docs/protocol.md``, "hello answer")."""

    protocol_version: int
    capabilities: int
    max_payload: int
    in_bits: int
    out_bits: int
    in_count: int
    in_elem_bits: int
    in_frac: int
    in_signed: bool
    out_count: int
    out_elem_bits: int
    out_frac: int
    out_signed: bool
    latency_cycles: int
    ii: int
    state_word_bits: int
    state_words: int
    weight_word_bits: int
    weight_words: int
    clks_per_bit: int
    model_id: bytes
    arch_id: bytes
    version: str

    @property
    def in_bytes(self) -> int:
        return word_bytes(self.in_bits)

    @property
    def out_bytes(self) -> int:
        return word_bytes(self.out_bits)

    @property
    def state_word_bytes(self) -> int:
        return word_bytes(self.state_word_bits)

    @property
    def weight_word_bytes(self) -> int:
        return word_bytes(self.weight_word_bits)

    def can(self, capability: Capability) -> bool:
        return bool(self.capabilities & capability)

    def pack(self) -> bytes:
        version = self.version.encode("ascii")
        if not 1 <= len(version) <= VERSION_MAX:
            raise ValueError(f"version string must be 1 to {VERSION_MAX} ASCII bytes, got {self.version!r}")
        if len(self.model_id) != ID_BYTES or len(self.arch_id) != ID_BYTES:
            raise ValueError(f"model_id and arch_id must be {ID_BYTES} bytes")
        return _HELLO.pack(
            self.protocol_version, self.capabilities, self.max_payload, self.in_bits, self.out_bits,
            self.in_count, self.in_elem_bits, self.in_frac, int(self.in_signed),
            self.out_count, self.out_elem_bits, self.out_frac, int(self.out_signed),
            self.latency_cycles, self.ii, self.state_word_bits, self.state_words, self.weight_word_bits,
            self.weight_words, self.clks_per_bit, self.model_id, self.arch_id) + version

    @classmethod
    def parse(cls, payload: bytes) -> "Hello":
        if len(payload) < _HELLO.size + 1:
            raise FrameError(ErrorCode.WRONG_SHAPE, f"hello answer of {len(payload)} bytes is shorter than "
                             f"{_HELLO.size + 1}: not a bitforge device, or another protocol version")
        f = _HELLO.unpack_from(payload)
        if f[0] != PROTOCOL_VERSION:
            raise FrameError(ErrorCode.WRONG_SHAPE, f"device speaks protocol version {f[0]}, this host "
                             f"speaks {PROTOCOL_VERSION}: use the bitforge version that built the device")
        try:
            version = payload[_HELLO.size:].decode("ascii")
        except UnicodeDecodeError:
            raise FrameError(ErrorCode.WRONG_SHAPE, "hello answer's version string is not ASCII") from None
        return cls(f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], bool(f[8] & 1), f[9], f[10], f[11],
                   bool(f[12] & 1), f[13], f[14], f[15], f[16], f[17], f[18], f[19], f[20], f[21], version)


_ERROR = struct.Struct("<BBH")


@dataclass(frozen=True)
class DeviceError:
    """The payload of an ``error`` frame."""

    code: int
    request_type: int
    detail: int = 0

    def pack(self) -> bytes:
        return _ERROR.pack(self.code, self.request_type, self.detail)

    @classmethod
    def parse(cls, payload: bytes) -> "DeviceError":
        if len(payload) != _ERROR.size:
            raise FrameError(ErrorCode.WRONG_SHAPE, f"error frame payload of {len(payload)} bytes, expected "
                             f"{_ERROR.size}")
        return cls(*_ERROR.unpack(payload))

    def describe(self) -> str:
        try:
            name = ErrorCode(self.code).name.lower()
        except ValueError:
            name = f"code {self.code}"
        try:
            req = FrameType(self.request_type).name.lower()
        except ValueError:
            req = f"type 0x{self.request_type:02x}"
        return f"{name} (request {req}, detail {self.detail})"


def read_state_request(first: int, count: int) -> bytes:
    return struct.pack("<IH", first, count)


def write_weights_request(first: int, words: Sequence[int], word_bits: int) -> bytes:
    return struct.pack("<I", first) + words_to_bytes(words, word_bits)


# -- words ----------------------------------------------------------------------------------------------------

def word_bytes(bits: int) -> int:
    return (bits + 7) // 8


def pack_word(codes: Iterable[int], elem_bits: int) -> int:
    """Element codes (two's complement, any sign) into one word, element 0 in the least significant bits."""
    mask = (1 << elem_bits) - 1
    word = 0
    for i, c in enumerate(codes):
        word |= (int(c) & mask) << (i * elem_bits)
    return word


def unpack_word(word: int, count: int, elem_bits: int, signed: bool = True) -> list[int]:
    """The inverse of :func:`pack_word`: ``count`` element codes, sign-extended when ``signed``."""
    mask = (1 << elem_bits) - 1
    out = []
    for i in range(count):
        v = (word >> (i * elem_bits)) & mask
        if signed and v >> (elem_bits - 1):
            v -= 1 << elem_bits
        out.append(v)
    return out


def words_to_bytes(words: Iterable[int], bits: int) -> bytes:
    """Words of ``bits`` bits, each as ``ceil(bits / 8)`` little-endian bytes (negative words as two's complement)."""
    n = word_bytes(bits)
    mask = (1 << bits) - 1
    return b"".join((int(w) & mask).to_bytes(n, "little") for w in words)


def bytes_to_words(data: bytes, bits: int) -> list[int]:
    """Unsigned words from :func:`words_to_bytes`'s layout; refuses a size that is not whole words."""
    n = word_bytes(bits)
    if n == 0 or len(data) % n:
        raise FrameError(ErrorCode.WRONG_SHAPE, f"{len(data)} bytes are not whole {n}-byte words")
    mask = (1 << bits) - 1
    return [int.from_bytes(data[i:i + n], "little") & mask for i in range(0, len(data), n)]
