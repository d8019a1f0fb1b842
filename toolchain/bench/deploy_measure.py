"""A deployed model measured on the simulated board: wall-clock speed on this host, and simulated cycles per
request, every answer checked against the golden model.

The simulated board (``runtime/sim_board.py``) counts clock cycles only in total, when it stops, and runs a short
idle tail after each burst of activity (``max(256, 20 * CLKS_PER_BIT)`` cycles, docs/deploy.md "Time") before it
sleeps until the host writes again. So the cycles of one request come from three sessions on fresh boards:

* a **baseline** that only opens the device (flush, ``hello``) and closes it;
* a **cycle** session that opens it the same way and then sends R requests, pausing after each one long enough
  for the board to fall asleep; the harness's ``sleeps`` counter proves that it did (one more sleep per
  request), so every request cost its own work plus exactly one idle tail, and
  ``(cycles - baseline cycles) / R - idle tail`` is the request's cycles from its first start bit to the end of
  the answer's stop bit (the device's ``busy``);
* a **wall** session that streams N samples as fast as the host can send them: samples per second and
  round-trip latency on this host (pyserial, the pseudo-terminal, Verilator), whose cycle total is not used
  (a request that arrives during the previous one's idle tail shortens that tail). On a loaded machine the
  host's adaptive deadlines may run out and a request is sent again (the device answers from its copy): the
  answers are still checked, and the count is reported; baseline and cycle sessions with a retry are run again.

The bytes each request and answer took on the wire are read from the link itself (a recording wrapper around the
transport), decoded with the protocol's own decoder, and fed to :func:`.wire_timing.round_trip`: its prediction
without wrapper cycles, against the measured cycles, gives the ratio and the wrapper's own cycles.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np

from bitforge.runtime.protocol import CRC_BYTES, HEADER_BYTES, Frame, FrameDecoder, FrameError, encode_frame

from ..errors import BitforgeError, VerificationFailed
from .wire_timing import DeviceShape, round_trip

Progress = Callable[[str], None]

#: Seconds a session waits before closing the board, so that the last request's idle tail is simulated.
SETTLE_S = 0.2
#: The shortest pause after each request of a cycle session; longer when the board simulates slowly.
MIN_PAUSE_S = 0.002


class MeasureError(BitforgeError):
    """The simulated board did not behave as the measurement needs (a retry, missing sleeps, byte counts)."""


def harness_idle_tail(clks_per_bit: int) -> int:
    """Cycles the simulated board keeps simulating after its last activity before it sleeps (the harness's
    default, ``runtime/simboard/sim_main.cpp`` ``Options``: the larger of 256 cycles and 20 bit times)."""
    return max(256, 20 * clks_per_bit)


@dataclass
class Workload:
    """One model to stream: how to open it and what it must answer.

    ``source`` is what :meth:`Device.open` takes (a bundle path); ``link`` makes the simulated board's transport
    at a given ``CLKS_PER_BIT``. ``x`` are input codes ``(n, d_in)``; a learner also has target
    codes ``t`` and learns (``learn`` frames, predict then update), a compiled model infers (``infer`` /
    ``infer_batch``). ``golden`` are the output codes the golden model gives for the first n samples from the
    device's initial state (a learner's: its trajectory's predictions)."""

    name: str
    source: Any
    link: Callable[[int], Any]
    x: np.ndarray
    golden: np.ndarray
    t: Optional[np.ndarray] = None

    @property
    def learns(self) -> bool:
        return self.t is not None

    @property
    def operation(self) -> str:
        return "learn" if self.learns else "infer"


class RecordingLink:
    """A byte link that passes everything through and keeps a copy of both directions."""

    def __init__(self, link: Any):
        self.link = link
        self.name = link.name
        self.timing = link.timing
        self.sent = bytearray()
        self.received = bytearray()

    def write(self, data: bytes) -> None:
        self.sent += data
        self.link.write(data)

    def read(self, max_wait: float) -> bytes:
        data = self.link.read(max_wait)
        self.received += data
        return data

    def close(self) -> None:
        self.link.close()

    @property
    def stats(self):
        return self.link.stats


@dataclass(frozen=True)
class Session:
    """One session on a fresh simulated board: what the host timed and what the board counted."""

    requests: int
    samples: int
    wall_s: float
    latencies_s: tuple[float, ...]
    cycles: int
    sleeps: int
    bytes_to_device: int
    bytes_from_device: int
    run_seconds: float
    frames: tuple[tuple[Frame, Frame], ...]  # (request, answer) after opening
    hello: Any
    retries: int


def _frames(data: bytes, max_payload: int, what: str, who: str) -> list[Frame]:
    decoder = FrameDecoder(HEADER_BYTES + max(max_payload, 0xFF) + CRC_BYTES)
    out = []
    for item in decoder.feed(bytes(data)):
        if isinstance(item, FrameError):
            raise MeasureError(f"{who}: a damaged frame in the {what} recorded on a board with no injected errors "
                               f"({item}); the simulated board or the host runtime is broken")
        out.append(item)
    return out


def _stream(dev, w: Workload, lo: int, hi: int) -> np.ndarray:
    if w.learns:
        return dev.learn_codes(w.x[lo:hi], w.t[lo:hi])
    return dev.predict_codes(w.x[lo:hi])


def run_session(w: Workload, clks_per_bit: int, batch: int, samples: int, *, pause_s: float = 0.0) -> Session:
    """Open ``w`` on a fresh simulated board, send ``samples`` samples in requests of ``batch`` (none: only
    open), pausing ``pause_s`` after each, check every answer against the golden model, and close."""
    from bitforge.runtime.device import Device

    rec = RecordingLink(w.link(clks_per_bit))
    try:
        dev = Device.open(w.source, rec)
    except BaseException:
        rec.close()
        raise
    got = np.zeros((samples, w.golden.shape[1]), dtype=np.int64)
    latencies = []
    try:
        mark_sent, mark_received = len(rec.sent), len(rec.received)
        t0 = time.perf_counter()
        for lo in range(0, samples, batch):
            hi = min(samples, lo + batch)
            t = time.perf_counter()
            got[lo:hi] = _stream(dev, w, lo, hi)
            latencies.append(time.perf_counter() - t)
            if pause_s:
                time.sleep(pause_s)
        wall = time.perf_counter() - t0
        time.sleep(SETTLE_S)
        hello, retries = dev.hello, dev.stats.retries
    finally:
        dev.close()
    check_golden(w, got, samples, batch)
    stats = rec.stats
    frames: tuple = ()
    if not retries:  # a retry sends a frame again (its answer comes from the device's copy): no pairs to read
        requests = _frames(rec.sent[mark_sent:], hello.max_payload, "requests", w.name)
        answers = _frames(rec.received[mark_received:], hello.max_payload, "answers", w.name)
        if len(requests) != len(latencies) or len(answers) != len(latencies):
            raise MeasureError(f"{w.name}: {len(latencies)} requests sent, but the link carried {len(requests)} "
                               f"request and {len(answers)} answer frames")
        frames = tuple(zip(requests, answers))
    return Session(len(latencies), samples, wall, tuple(latencies), stats.cycles, stats.sleeps,
                   stats.bytes_to_device, stats.bytes_from_device, stats.run_seconds, frames, hello, retries)


def check_golden(w: Workload, got: np.ndarray, samples: int, batch: int) -> None:
    """Every answer must be the golden model's: a benchmark of wrong answers is worthless."""
    want = w.golden[:samples]
    bad = np.flatnonzero((got != want).any(axis=1))
    if len(bad):
        i = int(bad[0])
        raise VerificationFailed(f"{w.name}: {len(bad)} of {samples} {w.operation} results from the simulated board "
                                 f"(batch {batch}) differ from the golden model, first sample {i}: expected codes "
                                 f"{want[i].tolist()}, got {got[i].tolist()}")


@dataclass
class SimRow:
    """One model at one ``CLKS_PER_BIT`` and batch on the simulated board."""

    model: str
    operation: str
    clks_per_bit: int
    batch: int
    # wall clock on this host (host + pyserial + Verilator)
    samples: int
    requests: int
    host_samples_per_s: float
    host_latency_ms_median: float
    host_latency_ms_p95: float
    verilator_cycles_per_s: float
    host_retries: int  # the host's adaptive deadline ran out on a busy machine; the device answered from its copy
    # simulated time
    cycle_requests: int
    request_bytes: float
    answer_bytes: float
    cycles_per_request: float
    model_cycles_per_request: float
    model_ratio: float
    wrapper_cycles: float
    random_payload_model_cycles: float
    sim_clock_hz: float
    sim_baud: float
    sim_latency_us: float
    sim_samples_per_s: float
    wire_share: float
    core_share: float
    golden_checked: int
    latency_cycles: int
    ii: int
    max_batch: int


def measure(w: Workload, clks_per_bit: int, batches: Sequence[int], samples: int, cycle_requests: int,
            sim_clock_hz: float, progress: Progress) -> tuple[list[SimRow], Any]:
    """Rows for ``w`` at ``clks_per_bit``, one per batch (``0`` means the largest that fits), and the device's
    ``hello``."""
    base = _baseline(w, clks_per_bit)
    shape = DeviceShape.from_hello(base.hello, sim_clock_hz)
    baud = sim_clock_hz / clks_per_bit
    tail = harness_idle_tail(clks_per_bit)
    rows = []
    for batch in batches:
        k = batch or shape.max_batch()
        say = f"{w.name}, CLKS_PER_BIT {clks_per_bit}, batch {k}"
        progress(f"{say}: {samples:,} samples as fast as the host sends them")
        wall = run_session(w, clks_per_bit, k, samples)
        speed = wall.cycles / wall.run_seconds if wall.run_seconds > 0 else float("inf")
        n_cyc = min(cycle_requests, max(1, samples // k)) * k
        pause = max(MIN_PAUSE_S, 20.0 * tail / speed)
        progress(f"{say}: {n_cyc // k} requests with {1e3 * pause:.0f} ms pauses to count their simulated cycles")
        cyc = _cycle_session(w, clks_per_bit, k, n_cyc, pause, base)
        rows.append(_row(w, clks_per_bit, k, shape, baud, tail, base, wall, cyc, speed, samples + n_cyc))
    return rows, base.hello


def _baseline(w: Workload, clks_per_bit: int) -> Session:
    for _ in range(3):
        s = run_session(w, clks_per_bit, 1, 0)
        if not s.retries:
            return s
    raise MeasureError(f"{w.name}: opening the simulated board needed retries three times over; the machine is too "
                       "busy for the host's deadlines")


def _cycle_session(w: Workload, clks_per_bit: int, k: int, samples: int, pause: float, base: Session) -> Session:
    """A cycle session without retries (a retry's frames would count) whose every request ended in a sleep; the
    pause grows if one did not, and a session with retries is run again."""
    for _ in range(4):
        s = run_session(w, clks_per_bit, k, samples, pause_s=pause)
        if s.retries:
            continue
        if s.sleeps - base.sleeps == s.requests:
            return s
        pause *= 4
    why = ("needed retries (the host's deadlines, learned from a loaded machine, ran out)" if s.retries else
           f"slept {s.sleeps - base.sleeps} times for {s.requests} requests even with {1e3 * pause / 4:.0f} ms pauses")
    raise MeasureError(f"{w.name}: the cycle session {why}; its cycles per request cannot be counted: run again on "
                       "a less busy machine")


def _row(w, clks_per_bit, k, shape, baud, tail, base, wall, cyc, speed, checked) -> SimRow:
    clock = shape.clock_hz
    bytes_in = cyc.bytes_to_device - base.bytes_to_device
    bytes_out = cyc.bytes_from_device - base.bytes_from_device
    req_bytes = sum(len(encode_frame(r)) for r, _ in cyc.frames)
    ans_bytes = sum(len(encode_frame(a)) for _, a in cyc.frames)
    if (bytes_in, bytes_out) != (req_bytes, ans_bytes):
        raise MeasureError(f"{w.name}: the simulated board moved {bytes_in} bytes in and {bytes_out} out for requests "
                           f"whose frames are {req_bytes} and {ans_bytes} bytes long")
    measured = (cyc.cycles - base.cycles) / cyc.requests - tail
    model = statistics.fmean(
        round_trip(shape, len(r.payload) // shape.in_bytes, baud, request=r.payload, answer=a.payload).seconds * clock
        for r, a in cyc.frames)
    rt = round_trip(shape, k, baud)
    seconds = measured / clock
    lat = sorted(wall.latencies_s)
    return SimRow(
        model=w.name, operation=w.operation, clks_per_bit=clks_per_bit, batch=k, samples=wall.samples,
        requests=wall.requests, host_samples_per_s=wall.samples / wall.wall_s,
        host_latency_ms_median=1e3 * statistics.median(lat), host_latency_ms_p95=1e3 * lat[int(0.95 * (len(lat) - 1))],
        verilator_cycles_per_s=speed, host_retries=wall.retries, cycle_requests=cyc.requests,
        request_bytes=req_bytes / cyc.requests,
        answer_bytes=ans_bytes / cyc.requests, cycles_per_request=measured, model_cycles_per_request=model,
        model_ratio=measured / model, wrapper_cycles=measured - model,
        random_payload_model_cycles=rt.seconds * clock, sim_clock_hz=clock, sim_baud=baud,
        sim_latency_us=1e6 * seconds, sim_samples_per_s=k / seconds,
        wire_share=(req_bytes + ans_bytes) / cyc.requests * 10 * clks_per_bit / measured,
        core_share=(shape.latency_cycles + (k - 1) * shape.ii) / measured, golden_checked=checked,
        latency_cycles=shape.latency_cycles, ii=shape.ii, max_batch=shape.max_batch())


def fit_wrapper_cycles(rows: Sequence[SimRow]) -> dict:
    """The wrapper's cycles per request as ``a + b * CLKS_PER_BIT`` for each (model, batch), least squares over
    the measured ``CLKS_PER_BIT`` values (``b`` is 0 with one value): part of the device's own time (the
    receiver's and transmitter's bit alignment) scales with the bit time, the rest (checks, moving words,
    encoding the answer) does not."""
    groups: dict[tuple[str, int], list[SimRow]] = {}
    for r in rows:
        groups.setdefault((r.model, r.batch), []).append(r)
    fits = {}
    for (model, batch), rs in groups.items():
        c = np.array([r.clks_per_bit for r in rs], dtype=float)
        wc = np.array([r.wrapper_cycles for r in rs])
        if len(set(c)) > 1:
            b, a = np.polyfit(c, wc, 1)
        else:
            a, b = float(wc.mean()), 0.0
        resid = float(np.max(np.abs(wc - (a + b * c))))
        fits[(model, batch)] = {"model": model, "batch": batch, "a": float(a), "b_per_clks_per_bit": float(b),
                                "max_residual_cycles": resid, "clks_per_bit": sorted({int(x) for x in c})}
    return fits


def wrapper_cycles_at(fit: dict, clks_per_bit: int) -> float:
    return fit["a"] + fit["b_per_clks_per_bit"] * clks_per_bit


def bundle_link(bundle: Path, progress: Progress) -> Callable[[int], Any]:
    """The simulated board from a bundle's device Verilog (``Device.open(bundle, "sim")`` at any CLKS_PER_BIT)."""
    from bitforge.runtime import deployed
    from bitforge.runtime.transports import SimTransport

    def make(cpb: int):
        return SimTransport.for_model(deployed.load(bundle), clks_per_bit=cpb, progress=progress)
    return make
