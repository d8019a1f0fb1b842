"""Random and mutated wire units for fuzzing a device, and the rule each answer must follow; shared by the cocotb
bench (tests/rtl/cocotb_device.py, a few hundred frames) and the simulated-board run (test_device_fuzz.py).

The host's own decoder (:class:`~bitforge.runtime.protocol.FrameDecoder`) is the reference: every non-empty frame
it sees gets exactly one answer from the device, an error frame with the code the host decoder found where it
found one (the two count an over-long frame differently, so ``too_long`` on either side only needs an error),
else the request's answer or an error about its type or shape, with the request's seq.
"""
from __future__ import annotations

import random
import re
from typing import Callable, Union

from bitforge.runtime.protocol import DeviceError, ErrorCode, Frame, FrameDecoder, FrameError, FrameType, encode_frame

Verdict = Union[Frame, FrameError]


def fuzz_unit(rng: random.Random, in_bytes: int, good_payload: Callable[[int], bytes]) -> bytes:
    """One wire unit: random bytes, a frame with a random header, or a good infer_batch mutated 1-3 times (bit
    flips, dropped and inserted bytes, a cut that leaves a partial frame for the timeout)."""
    kind = rng.random()
    if kind < 0.25:
        return bytes(rng.randrange(256) if rng.random() < 0.9 else 0 for _ in range(rng.randint(1, 40))) + b"\x00"
    seq = rng.randrange(256)
    if kind < 0.45:
        ftype = rng.choice([0, 1, 2, 3, 5, 6, 7, 0x42, 0x7F, 0x81, 0xFF])
        size = rng.choice([0, 1, in_bytes, 2 * in_bytes, 6, 16, 17])
        return encode_frame(Frame(ftype, seq, bytes(rng.randrange(256) for _ in range(size))))
    good = bytearray(encode_frame(Frame(FrameType.INFER_BATCH, seq, good_payload(rng.randint(1, 3)))))
    for _ in range(rng.randint(1, 3)):
        if len(good) < 2:
            break
        m = rng.random()
        at = rng.randrange(len(good) - 1)
        if m < 0.4:
            good[at] ^= 1 << rng.randrange(8)
        elif m < 0.6:
            del good[at]
        elif m < 0.8:
            good.insert(at, rng.randrange(256))
        else:
            good = good[:at + 1]  # no delimiter: the device's timeout ends it
    return bytes(good)


def pieces(wire: bytes) -> list[bytes]:
    """The unit cut after each 0x00: a host sends the next frame only once the previous one is answered."""
    return re.findall(rb"[^\x00]*\x00|[^\x00]+$", wire)


def verdicts(host: FrameDecoder, piece: bytes) -> list[Verdict]:
    """What the host's decoder makes of ``piece``; a partial frame left over is a timeout for the device."""
    out = host.feed(piece)
    if host.pending:
        out.append(FrameError(ErrorCode.TIMEOUT, "partial frame, then silence"))
        host.reset()
    return out


def check(i: int, wire: bytes, want: Verdict, got: Verdict) -> None:
    """The device's answer ``got`` to a frame the host decoder judged ``want``."""
    assert isinstance(got, Frame), f"fuzz unit {i} ({wire.hex()}): the device sent an invalid frame: {got}"
    if isinstance(want, FrameError):
        assert got.type == FrameType.ERROR, f"fuzz unit {i} ({wire.hex()}): host decoder says {want}, device {got}"
        code = DeviceError.parse(got.payload).code
        assert code == want.code or ErrorCode.TOO_LONG in (code, want.code), (
            f"fuzz unit {i} ({wire.hex()}): host decoder says {want.code.name}, device {ErrorCode(code).name}")
    else:
        assert got.seq == want.seq and got.type in (want.type | 0x80, FrameType.ERROR), (
            f"fuzz unit {i} ({wire.hex()}): good frame {want.describe()} answered with {got.describe()}")
