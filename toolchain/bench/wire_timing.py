"""How long a request to a deployed device takes, from the protocol's byte counts and the core's cycle counts.

A round trip is the request on the wire, the device's work (the core's latency plus one II per further word, and
the wrapper's own cycles), then the answer on the wire. The byte counts come from encoding real frames with
:mod:`bitforge.runtime.protocol` (COBS's overhead depends on where the zeros are, so the payloads are the
words actually sent, or random words when none are given); the cycle counts from the design's manifest. This is
what turns one measurement on the simulated board into what a real board gives at 115,200 or 3,000,000 baud.
"""
from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Optional

from bitforge.runtime import protocol

BITS_PER_BYTE = 10  # 8N1: start, 8 data, stop


@dataclass(frozen=True)
class DeviceShape:
    """What the timing depends on: word sizes, the core's latency and II, the frame size limit, the clock."""

    in_bytes: int
    out_bytes: int
    latency_cycles: int
    ii: int
    max_payload: int
    clock_hz: float

    @classmethod
    def from_hello(cls, hello: protocol.Hello, clock_hz: float) -> "DeviceShape":
        return cls(hello.in_bytes, hello.out_bytes, hello.latency_cycles, hello.ii, hello.max_payload, clock_hz)

    def max_batch(self) -> int:
        """The most words one ``infer_batch`` frame carries (request and answer must both fit)."""
        return max(1, self.max_payload // max(self.in_bytes, self.out_bytes))


@dataclass(frozen=True)
class RoundTrip:
    """One request of ``batch`` words at ``baud``: bytes each way, seconds on the wire and in the device."""

    batch: int
    baud: float
    request_bytes: int
    answer_bytes: int
    wire_s: float
    core_s: float
    wrapper_s: float

    @property
    def seconds(self) -> float:
        return self.wire_s + self.core_s + self.wrapper_s

    @property
    def samples_per_s(self) -> float:
        return self.batch / self.seconds

    @property
    def wire_share(self) -> float:
        return self.wire_s / self.seconds

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(seconds=self.seconds, samples_per_s=self.samples_per_s, wire_share=self.wire_share)
        return d


def frame_bytes(payload: bytes, kind: int = protocol.FrameType.INFER_BATCH) -> int:
    """Bytes on the wire for one frame carrying ``payload``, delimiter included."""
    return len(protocol.encode_frame(protocol.Frame(kind, 1, payload)))


def round_trip(shape: DeviceShape, batch: int, baud: float, *, wrapper_cycles: int = 0,
               request: Optional[bytes] = None, answer: Optional[bytes] = None, seed: int = 0) -> RoundTrip:
    """Timing of one request of ``batch`` words; ``wrapper_cycles`` is what the device spends besides the core
    (checking the frame, moving words, building and encoding the answer), measured on the simulated board."""
    if not 1 <= batch <= shape.max_batch():
        raise ValueError(f"batch {batch} outside 1..{shape.max_batch()} (max_payload {shape.max_payload} bytes)")
    rng = random.Random(seed)
    request = request if request is not None else rng.randbytes(batch * shape.in_bytes)
    answer = answer if answer is not None else rng.randbytes(batch * shape.out_bytes)
    req, ans = frame_bytes(request), frame_bytes(answer)
    wire_s = (req + ans) * BITS_PER_BYTE / baud
    core_s = (shape.latency_cycles + (batch - 1) * shape.ii) / shape.clock_hz
    return RoundTrip(batch, baud, req, ans, wire_s, core_s, wrapper_cycles / shape.clock_hz)
