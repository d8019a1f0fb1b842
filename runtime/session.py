"""The host side of one request and its answer (``docs/protocol.md``, "One request, one answer"), with the
deadlines and retries that keep a noisy or silent link from ever hanging a session.

A request is sent, then the host reads until it sees a frame with the request's ``seq``: the answer (type with
bit 7 set) or an ``error``. Everything else is ignored: answers with another ``seq`` (a late answer to an
earlier try) and damaged frames. A try ends without an answer when its deadline passes (the wire time of the
request and of the largest answer at the link's bit rate, the core's cycles, and the link's margin) or when the
device says the frame it got was damaged (``bad_crc``, ``bad_cobs``, ``bad_length``, ``short``, ``timeout``,
``too_long``). The request is then sent again with the **same** ``seq``, so a device that did execute it
answers from its copy instead of executing it twice (a ``learn`` sample is applied once). Before each new try,
and before a session starts, the host sends a lone ``0x00`` (ending any partial frame the device holds) and
waits until the line is quiet, so the device has answered that partial frame before the request arrives: bytes
that arrive while the device is answering are discarded by it.

Errors that are not about damage (``wrong_shape``, ``unsupported``, ``bad_address``, ``unknown_type``) raise at
once with the device's detail. After ``retries`` further tries a :class:`DeviceTimeout` names the request, its
``seq``, the tries and the last thing seen on the line.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional, Protocol

from bitforge.toolchain.errors import BitforgeError

from .protocol import (
    CRC_BYTES,
    HEADER_BYTES,
    DeviceError,
    ErrorCode,
    Frame,
    FrameDecoder,
    FrameError,
    FrameType,
    encode_frame,
    wire_bytes,
)

#: Error codes that mean "the frame you sent arrived damaged": the request is sent again with the same seq.
DAMAGE_CODES = frozenset({ErrorCode.BAD_CRC, ErrorCode.BAD_COBS, ErrorCode.BAD_LENGTH, ErrorCode.SHORT,
                          ErrorCode.TIMEOUT, ErrorCode.TOO_LONG})
#: An error answer's body: header, 4 payload bytes, CRC; the line is quiet once two of them could have passed.
ERROR_FRAME_WIRE = wire_bytes(4)
BITS_PER_BYTE = 10  # 8N1: start bit, 8 data bits, stop bit


class DeviceFault(BitforgeError):
    """A device that did not do what was asked: the message names the request, what came back and what to do."""


class DeviceTimeout(DeviceFault):
    """No usable answer after every retry (a silent, disconnected or garbled link)."""


class DeviceRefused(DeviceFault):
    """The device understood the request and refused it (``wrong_shape``, ``unsupported``, ``bad_address``,
    ``unknown_type``); ``code`` and ``detail`` are the device's."""

    def __init__(self, message: str, code: int, detail: int):
        super().__init__(message)
        self.code = code
        self.detail = detail


class ByteLink(Protocol):
    """A byte stream to a device (a serial port, the simulated board's pseudo-terminal, a test's model)."""

    name: str

    def write(self, data: bytes) -> None: ...

    def read(self, max_wait: float) -> bytes:
        """Bytes that arrived, waiting at most ``max_wait`` seconds for the first; ``b""`` when none came."""

    def close(self) -> None: ...


@dataclass(frozen=True)
class LinkTiming:
    """How long the link takes: seconds per bit on the wire, per core clock cycle, a fixed margin (USB
    latency, scheduling, a simulator starting up) added to every deadline, and ``settle_s``, the silence after
    which a flushed line counts as quiet (the latency of a byte that is already on its way)."""

    bit_s: float
    cycle_s: float
    margin_s: float
    settle_s: float = 0.05

    def ideal(self, request_bytes: int, answer_bytes: int, cycles: int) -> float:
        """Seconds a request and its answer take on the wire, plus the core's cycles, with no latency at all."""
        wire = (wire_bytes(request_bytes) + wire_bytes(answer_bytes)) * BITS_PER_BYTE * self.bit_s
        return wire + cycles * self.cycle_s

    def deadline(self, request_bytes: int, answer_bytes: int, cycles: int) -> float:
        """The longest wait for an answer: twice the ideal time, plus the margin."""
        return 2.0 * self.ideal(request_bytes, answer_bytes, cycles) + self.margin_s

    @property
    def quiet_s(self) -> float:
        """How long the line must stay silent before the device counts as idle after a flush."""
        return 2 * ERROR_FRAME_WIRE * BITS_PER_BYTE * self.bit_s + self.settle_s


@dataclass
class SessionStats:
    """What a session has seen, for reports and soak tests."""

    requests: int = 0
    retries: int = 0
    timeouts: int = 0
    damaged_answers: int = 0
    damage_reported: int = 0  # error answers saying our request arrived damaged
    ignored_frames: int = 0  # good frames with another seq (late answers)
    by_reason: dict = field(default_factory=dict)

    def count(self, reason: str) -> None:
        self.by_reason[reason] = self.by_reason.get(reason, 0) + 1


def _name(kind: int) -> str:
    try:
        return FrameType(kind).name.lower()
    except ValueError:
        return f"type 0x{kind:02x}"


class Session:
    """Requests and answers over one :class:`ByteLink`; ``retries`` further tries after the first."""

    def __init__(self, link: ByteLink, timing: LinkTiming, *, retries: int = 4, max_payload: int = 0xFFFF):
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        self.link = link
        self.timing = timing
        self.retries = retries
        self.stats = SessionStats()
        self._seq = 0
        self._latency: Optional[float] = None  # smoothed seconds an answer takes beyond its ideal time
        self._latency_var = 0.0
        self._decoder = FrameDecoder(HEADER_BYTES + max(max_payload, 0xFF) + CRC_BYTES)

    def set_max_payload(self, max_payload: int) -> None:
        """Frames longer than the device can send are dropped unread (hello says how long that is)."""
        self._decoder = FrameDecoder(HEADER_BYTES + max(max_payload, 0xFF) + CRC_BYTES)

    def flush(self, max_wait: Optional[float] = None) -> None:
        """End any partial frame on the device (a lone 0x00) and read until the line is quiet (bounded)."""
        self.link.write(b"\x00")
        quiet = self.timing.quiet_s
        end = time.monotonic() + (max_wait if max_wait is not None else 8 * quiet + self.timing.margin_s)
        # bounded: a device that never stops talking cannot hold the session here
        while time.monotonic() < end:
            if not self.link.read(min(quiet, max(0.0, end - time.monotonic()))):
                break
        self._decoder.reset()

    def request(self, kind: FrameType, payload: bytes = b"", *, answer_bytes: int = 0, cycles: int = 0) -> bytes:
        """Send one request and return its answer's payload. ``answer_bytes`` (the expected answer size) and
        ``cycles`` (the core's work) size the deadline."""
        self._seq = (self._seq + 1) & 0xFF
        seq = self._seq
        frame = encode_frame(Frame(int(kind), seq, payload))
        ideal = self.timing.ideal(len(payload), answer_bytes, cycles)
        longest = self.timing.deadline(len(payload), answer_bytes, cycles)
        self.stats.requests += 1
        last = "nothing"
        for attempt in range(self.retries + 1):
            if attempt:
                self.stats.retries += 1
                self.flush()
            deadline = self._deadline(ideal, longest, attempt)
            sent = time.monotonic()
            self.link.write(frame)
            outcome, last_seen = self._await(kind, seq, deadline)
            if isinstance(outcome, Frame):
                if not attempt:  # Karn: only an answer to a single try says how long answers take
                    self._learn_latency(time.monotonic() - sent - ideal)
                return outcome.payload
            last = last_seen
        raise DeviceTimeout(f"{self.link.name}: no answer to {_name(kind)} (seq {seq}, {len(payload)} payload bytes) "
                            f"after {self.retries + 1} tries (the last waited {deadline:.3g} s); last seen: {last}. Check "
                            "that the device is powered, programmed with this bundle's bitstream and on this port at "
                            "this baud rate (a simulated board: that it is still running)")

    def _deadline(self, ideal: float, longest: float, attempt: int) -> float:
        """How long one try waits. Until an answer has been timed, the longest wait; then, as TCP's retransmission
        timer (RFC 6298), twice the ideal time plus the measured latency and four times its deviation, doubled
        for each further try and never beyond the longest wait. A damaged answer or request then costs
        milliseconds on a fast link instead of the margin; a late answer merely causes a retry, which the device
        answers from its copy."""
        if self._latency is None:
            return longest
        quick = 2.0 * ideal + max(self.timing.settle_s, self._latency + 4.0 * self._latency_var)
        return min(longest, quick * 2.0 ** attempt)

    def _learn_latency(self, sample: float) -> None:
        sample = max(0.0, sample)
        if self._latency is None:
            self._latency, self._latency_var = sample, sample / 2
        else:
            self._latency_var = 0.75 * self._latency_var + 0.25 * abs(self._latency - sample)
            self._latency = 0.875 * self._latency + 0.125 * sample

    def _await(self, kind: FrameType, seq: int, deadline: float) -> tuple[Optional[Frame], str]:
        """The answer, or None with a description of what was seen when the try ended."""
        end = time.monotonic() + deadline
        last = "nothing"
        while True:
            left = end - time.monotonic()
            if left <= 0:
                self.stats.timeouts += 1
                self.stats.count("timeout")
                pending = self._decoder.pending
                return None, (f"{last}, then silence for the rest of the {deadline:.3g} s deadline"
                              + (f" ({pending} bytes of an unfinished frame)" if pending else ""))
            data = self.link.read(left)
            if not data:
                continue
            for item in self._decoder.feed(data):
                if isinstance(item, FrameError):
                    self.stats.damaged_answers += 1
                    self.stats.count(f"damaged answer ({item.code.name.lower()})")
                    last = f"a damaged frame ({item})"
                    # A damaged answer to this request: ask again at once (the device answers from its copy).
                    return None, last
                if item.seq != seq:
                    self.stats.ignored_frames += 1
                    last = f"{item.describe()} for another request"
                    continue
                if item.type == FrameType.ERROR:
                    return self._error(kind, seq, item)
                if item.type == kind.response:
                    return item, "the answer"
                raise DeviceFault(f"{self.link.name}: {_name(kind)} (seq {seq}) was answered with "
                                  f"{item.describe()}; the device speaks another version of the protocol: use the "
                                  "bitforge version that built it")

    def _error(self, kind: FrameType, seq: int, frame: Frame) -> tuple[None, str]:
        try:
            err = DeviceError.parse(frame.payload)
        except FrameError as e:
            raise DeviceFault(f"{self.link.name}: malformed error answer to {_name(kind)} (seq {seq}): {e}") from None
        if err.code in DAMAGE_CODES:
            self.stats.damage_reported += 1
            self.stats.count(f"request damaged ({ErrorCode(err.code).name.lower()})")
            return None, f"the device's error {err.describe()}"
        raise DeviceRefused(f"{self.link.name}: the device refused {_name(kind)} (seq {seq}): {err.describe()}"
                            f"{_ERROR_HINTS.get(err.code, '')}", err.code, err.detail)


_ERROR_HINTS = {
    ErrorCode.WRONG_SHAPE: "; the request's size does not fit the device's words: the device runs another build "
                           "than the bundle describes (detail: the size it expected)",
    ErrorCode.UNSUPPORTED: "; this build cannot serve it (learn on a compiled model, weights on a build with "
                           "constant weights: deploy with --weights ram)",
    ErrorCode.BAD_ADDRESS: "; the address lies beyond the device's space (detail: its size)",
    ErrorCode.UNKNOWN_TYPE: "; the device speaks another version of the protocol",
}
