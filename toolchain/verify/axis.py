"""One AXI4-Stream source, sink and protocol monitor for every cocotb bench in bitforge.

The benches of ``bitforge simulate`` (the core and the board top, RTL and gate-level netlist), of the online
learners and of the ``rtl/`` library tests all drive valid/ready streams; they do it through these three
parts so that every one of them checks the same rules:

* :class:`AxisSource` offers queued words, with gaps from a pause generator, and once ``tvalid`` is high keeps
  ``tdata``/``tlast`` until the word is taken (the bench itself obeys AXI4-Stream);
* :class:`AxisSink` drives ``tready`` from a backpressure generator and collects the words it takes;
* :class:`AxisMonitor` (inside each of them, or on its own) records every transfer and fails a stream whose
  ``tvalid`` falls, or whose ``tdata``/``tlast`` change, while ``tvalid && !tready`` (ARM IHI 0051A, 2.2.1:
  once TVALID is asserted it must stay asserted, with the same data, until the handshake), or whose
  ``tvalid``/``tready`` are X or Z, or whose word is X or Z when it is taken.

All parts step together, one clock per :func:`clock_cycle`: drive after the falling edge, let combinational
logic settle (ReadOnly), then sample what the next rising edge will see. This samples the same way on Icarus
and Verilator, whatever their scheduling differences at the clock edge, and makes a run reproducible from
its seed. Words are Python integers of any width (element ``i`` of a tensor at ``[i*W +: W]``), which is why
these parts are bitforge's own rather than cocotbext-axi's byte-oriented frames, whose monitor does not
check that a stalled word holds.

A pause generator is any iterator of booleans; :func:`random_pauses` makes the seeded ones the benches use.
"""
from __future__ import annotations

import itertools
import random
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

from cocotb.clock import Clock
from cocotb.simtime import get_sim_time
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly


@dataclass(frozen=True)
class StreamPorts:
    """The handles of one valid/ready stream; ``last`` is None for a stream without tlast."""

    name: str
    valid: Any
    ready: Any
    data: Any
    last: Any = None


def axis_ports(dut, prefix: str, last: bool = True) -> StreamPorts:
    """AXI4-Stream names: ``<prefix>_tvalid``, ``_tready``, ``_tdata`` and ``_tlast`` (e.g. prefix ``s_axis``)."""
    get = lambda s: getattr(dut, f"{prefix}_{s}")  # noqa: E731
    return StreamPorts(prefix, get("tvalid"), get("tready"), get("tdata"), get("tlast") if last else None)


def stage_ports(dut, side: str, prefix: str = "", last: bool = False) -> StreamPorts:
    """Stage names of ``rtl/`` (``<prefix><side>_valid``, ``_ready``, ``_data``, ``_last``; side ``in``/``out``)."""
    get = lambda s: getattr(dut, f"{prefix}{side}_{s}")  # noqa: E731
    return StreamPorts(f"{prefix}{side}", get("valid"), get("ready"), get("data"), get("last") if last else None)


def random_pauses(p: float, rng: random.Random) -> Iterator[bool]:
    """True (pause) with probability ``p`` at each draw, from a seeded generator."""
    while True:
        yield rng.random() < p


def never() -> Iterator[bool]:
    return itertools.repeat(False)


def read(handle) -> Optional[int]:
    """A signal's value as an unsigned integer, or None while any bit is X or Z."""
    v = handle.value
    if not v.is_resolvable:
        return None
    return v.to_unsigned() if hasattr(v, "to_unsigned") else int(v)


def now_ns() -> float:
    return float(get_sim_time("ns"))


@dataclass(frozen=True)
class ProtocolError:
    """One broken rule, where and when (the simulation time picks the waveform window)."""

    stream: str
    cycle: int
    time_ns: float
    message: str

    def __str__(self) -> str:
        return f"{self.stream}: cycle {self.cycle} ({self.time_ns:g} ns): {self.message}"

    def to_json(self) -> dict:
        return {"stream": self.stream, "cycle": self.cycle, "time_ns": self.time_ns, "message": self.message}


class AxisMonitor:
    """Records the transfers of one stream and the AXI4-Stream rules it breaks; it never drives.

    ``cycle`` counts samples (one per :func:`clock_cycle`); ``transfers`` holds ``(data, last)`` of every
    handshake in order (``data`` None for an X/Z word), ``transfer_cycles`` when each happened.
    """

    #: Errors kept in full; later ones are only counted.
    KEEP = 20

    def __init__(self, ports: StreamPorts, clock: Callable[[], float] = now_ns):
        self.ports = ports
        self.clock = clock  # simulation time in ns, for the waveform window of an error
        self.cycle = 0
        self.transfers: list[tuple[Optional[int], int]] = []
        self.transfer_cycles: list[int] = []
        self.first_valid: Optional[int] = None
        self.errors: list[ProtocolError] = []
        self.error_count = 0
        self.transferred = False  # a handshake in the cycle sampled last
        self._stalled: Optional[tuple[Optional[int], int]] = None

    def _error(self, message: str) -> None:
        self.error_count += 1
        if len(self.errors) < self.KEEP:
            self.errors.append(ProtocolError(self.ports.name, self.cycle, self.clock(), message))

    def drive(self) -> None:
        """A monitor drives nothing (it can step in :func:`clock_cycle` beside the parts that do)."""

    def sample(self) -> None:
        p = self.ports
        valid, ready = read(p.valid), read(p.ready)
        self.transferred = False
        if valid is None:
            self._error(f"tvalid is {p.valid.value} (X or Z)")
        if valid and ready is None:
            self._error(f"tready is {p.ready.value} (X or Z) while tvalid is high")
        data = read(p.data) if valid else None
        last = (read(p.last) if p.last is not None else 0) if valid else None
        if self._stalled is not None:
            held_data, held_last = self._stalled
            if valid != 1:
                self._error(f"tvalid fell without a transfer while word {len(self.transfers)} was stalled")
            elif data != held_data:
                self._error(f"tdata changed while word {len(self.transfers)} was stalled (tvalid && !tready): "
                            f"{_hex(held_data)} -> {_hex(data)}")
            elif last != held_last:
                self._error(f"tlast changed while word {len(self.transfers)} was stalled (tvalid && !tready): "
                            f"{held_last} -> {last}")
        self._stalled = None
        if valid == 1:
            if self.first_valid is None:
                self.first_valid = self.cycle
            if ready == 1:
                if data is None or last is None:
                    self._error(f"word {len(self.transfers)} taken with X or Z bits: tdata {p.data.value}"
                                + (f", tlast {p.last.value}" if p.last is not None else ""))
                self.transfers.append((data, last if last is not None else 0))
                self.transfer_cycles.append(self.cycle)
                self.transferred = True
            elif ready == 0:
                self._stalled = (data, last)
        self.cycle += 1


def _hex(v: Optional[int]) -> str:
    return "X" if v is None else f"0x{v:x}"


class AxisSource:
    """Offers queued ``(data, last)`` words; the pause generator is drawn once per cycle in which a new word
    could start (never while one is offered: AXI4-Stream forbids taking tvalid back), and the first
    ``free_first`` words start without a draw. ``hold`` stops new words from starting, e.g. while a bench
    reads state through another port."""

    def __init__(self, ports: StreamPorts, pauses: Optional[Iterator[bool]] = None, free_first: int = 0):
        self.ports = ports
        self.pauses = pauses if pauses is not None else never()
        self.free_first = free_first
        self.monitor = AxisMonitor(ports)
        self.queue: deque[tuple[int, int]] = deque()
        self.hold = False
        self.started = 0  # words that began to be offered
        self._offer: Optional[tuple[int, int]] = None
        ports.valid.value = 0

    def send(self, data: int, last: int = 0) -> None:
        self.queue.append((int(data), int(last)))

    @property
    def accepted(self) -> int:
        return len(self.monitor.transfers)

    @property
    def accept_cycles(self) -> list[int]:
        return self.monitor.transfer_cycles

    @property
    def idle(self) -> bool:
        """Nothing offered and nothing queued."""
        return self._offer is None and not self.queue

    def drive(self) -> None:
        if self._offer is None and self.queue and not self.hold:
            if self.started < self.free_first or not next(self.pauses):
                self._offer = self.queue.popleft()
                self.started += 1
        p = self.ports
        p.valid.value = int(self._offer is not None)
        if self._offer is not None:
            p.data.value = self._offer[0]
            if p.last is not None:
                p.last.value = self._offer[1]

    def sample(self) -> None:
        self.monitor.sample()
        if self.monitor.transferred:
            self._offer = None


class AxisSink:
    """Takes words with ``tready`` low whenever the backpressure generator (drawn every cycle) says stall; the
    first ``free_first`` words are taken without a draw. ``stall`` forces tready low (filling a design to
    measure its capacity)."""

    def __init__(self, ports: StreamPorts, stalls: Optional[Iterator[bool]] = None, free_first: int = 0):
        self.ports = ports
        self.stalls = stalls if stalls is not None else never()
        self.free_first = free_first
        self.monitor = AxisMonitor(ports)
        self.stall = False
        self.ready = False
        ports.ready.value = 0

    @property
    def received(self) -> list[tuple[Optional[int], int]]:
        return self.monitor.transfers

    @property
    def receive_cycles(self) -> list[int]:
        return self.monitor.transfer_cycles

    def drive(self) -> None:
        self.ready = not self.stall and (len(self.received) < self.free_first or not next(self.stalls))
        self.ports.ready.value = int(self.ready)

    def sample(self) -> None:
        self.monitor.sample()


async def clock_cycle(clk, *parts) -> None:
    """One clock for every part: drive after the falling edge, settle, sample what the rising edge takes."""
    await FallingEdge(clk)
    for part in parts:
        part.drive()
    await ReadOnly()
    for part in parts:
        part.sample()


async def start_clock_and_reset(dut, cycles: int = 4, period_ns: int = 10) -> None:
    """Start the clock on ``dut.clk``, hold ``dut.rst`` high for ``cycles``, release it after a falling edge.

    Build the sources and sinks first: they drive tvalid and tready low from the start."""
    Clock(dut.clk, period_ns, unit="ns").start()
    dut.rst.value = 1
    await ClockCycles(dut.clk, cycles)
    await FallingEdge(dut.clk)
    dut.rst.value = 0


def protocol_errors(*parts) -> list[ProtocolError]:
    """Every recorded error of the parts' monitors, in time order."""
    monitors = [getattr(p, "monitor", p) for p in parts]
    return sorted((e for m in monitors for e in m.errors), key=lambda e: (e.time_ns, e.stream))


def protocol_error_count(*parts) -> int:
    return sum(getattr(p, "monitor", p).error_count for p in parts)
