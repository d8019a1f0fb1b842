"""Byte links to a device: a serial port (a real board) and the simulated board (the device's own RTL in
Verilator, reached through a pseudo-terminal that pyserial opens like a port).

Both are :class:`~bitforge.runtime.session.ByteLink` objects with a :class:`~bitforge.runtime.session.LinkTiming`
that sizes the host's deadlines. The CPU path is no byte link: see :mod:`bitforge.runtime.cpu_transport`.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Optional

from bitforge.toolchain.errors import BitforgeError

from .deployed import DeployedModel
from .session import LinkTiming

Progress = Callable[[str], None]

#: A host's USB serial adapter delivers bytes in bursts (an FTDI latency timer is 16 ms by default), and the
#: operating system may schedule the reader late: every deadline on a real port gets this much on top.
SERIAL_MARGIN_S = 0.25
#: Silence after which a flushed port counts as quiet: above the FTDI latency timer's 16 ms.
SERIAL_SETTLE_S = 0.04
#: Without a board in the bundle (a port given by hand), the clock is unknown: assume a slow one.
DEFAULT_CLOCK_HZ = 12_000_000
DEFAULT_BAUD = 115_200
#: The simulated board's speed, deliberately pessimistic (Verilator runs a small device at millions of cycles per
#: second; a loaded shared machine or a large core can be 10x slower): deadlines use this many cycles per second.
SIM_CYCLES_PER_S = 100_000
SIM_MARGIN_S = 2.0
#: The simulated board answers a flush within a few thousand cycles: milliseconds.
SIM_SETTLE_S = 0.01
#: The simulated board's UART divider when the bundle records none: the device wrapper's default, the fewest clocks
#: per bit its receiver accepts, so a simulated frame costs the fewest cycles (and the least wall time).
SIM_CLKS_PER_BIT = 4


class TransportError(BitforgeError):
    """A link that cannot be opened: a port that does not exist or is busy, a simulated board that cannot start."""


def _ports_hint() -> str:
    try:
        from serial.tools import list_ports
        ports = sorted(p.device for p in list_ports.comports())
    except Exception:  # noqa: BLE001 - a hint only; listing ports must never hide the real error
        ports = []
    return ("serial ports on this machine: " + ", ".join(ports)) if ports else "no serial ports found on this machine"


class SerialTransport:
    """A serial port through pyserial (8N1, no flow control), e.g. ``/dev/ttyUSB0`` at the bundle's baud rate."""

    def __init__(self, port: str, baud: int = DEFAULT_BAUD, *, clock_hz: Optional[int] = None,
                 margin_s: float = SERIAL_MARGIN_S):
        import serial

        self.name = port
        self.port = port
        self.baud = int(baud)
        if self.baud < 1:
            raise TransportError(f"baud rate must be a positive integer, not {baud!r}")
        self.timing = LinkTiming(1.0 / self.baud, 1.0 / (clock_hz or DEFAULT_CLOCK_HZ), margin_s, SERIAL_SETTLE_S)
        try:
            self._ser = serial.Serial(port, self.baud, bytesize=8, parity="N", stopbits=1, timeout=0,
                                      xonxoff=False, rtscts=False, dsrdtr=False, exclusive=True)
        except serial.SerialException as e:
            errno_ = getattr(e, "errno", None)
            if errno_ is not None and errno_ in (16, 11) or "busy" in str(e).lower() or "lock" in str(e).lower():
                why = "is busy (another program has it open: close it, e.g. a serial monitor)"
            elif not os.path.exists(port):
                why = "does not exist (is the board plugged in? is this its name?)"
            elif not os.access(port, os.R_OK | os.W_OK):
                why = "is not readable and writable by you (on Linux: add yourself to the 'dialout' group)"
            else:
                why = f"cannot be opened ({e})"
            raise TransportError(f"serial port {port} {why}; {_ports_hint()}") from None

    def write(self, data: bytes) -> None:
        self._ser.write(data)
        self._ser.flush()

    def read(self, max_wait: float) -> bytes:
        self._ser.timeout = max(0.0, max_wait)
        first = self._ser.read(1)
        if not first:
            return b""
        self._ser.timeout = 0
        return first + self._ser.read(self._ser.in_waiting or 0)

    def close(self) -> None:
        self._ser.close()


class SimTransport:
    """The simulated board: a device top's Verilog built with Verilator (cached by content), started, and its
    pseudo-terminal opened with pyserial; ``flip_rate``/``seed`` flip bits on the wire both ways.
    :meth:`for_model` takes the Verilog from a bundle."""

    def __init__(self, files, top: str, *, clks_per_bit: int = SIM_CLKS_PER_BIT, flip_rate: float = 0.0,
                 seed: int = 0, cycles_per_s: float = SIM_CYCLES_PER_S, margin_s: float = SIM_MARGIN_S,
                 progress: Optional[Progress] = None, cleanup: Optional[Path] = None):
        from .sim_board import SimBoard, build_sim_board

        self._cleanup = cleanup
        self.clks_per_bit = int(clks_per_bit)
        try:
            exe = build_sim_board(list(files), top, self.clks_per_bit, progress=progress)
            self.board = SimBoard(exe, flip_rate=flip_rate, seed=seed).start()
        except BaseException:
            self._remove_sources()
            raise
        self.name = f"simulated board ({top})"
        cycle_s = 1.0 / cycles_per_s
        self.timing = LinkTiming(self.clks_per_bit * cycle_s, cycle_s, margin_s, SIM_SETTLE_S)
        try:
            self._serial = SerialTransport(self.board.port, DEFAULT_BAUD, margin_s=margin_s)
        except BaseException:
            self.board.stop()
            self._remove_sources()
            raise
        self.stats = None

    @classmethod
    def for_model(cls, model: DeployedModel, **kw) -> "SimTransport":
        """The device RTL a bundle carries, written to a temporary folder (removed on :meth:`close`)."""
        dev = model.bundle.manifest.device if model.bundle is not None else None
        if dev is None:
            raise TransportError(f"{model.source}: the simulated board builds the device RTL that a bundle carries; "
                                 "open the .bfb file that 'bitforge deploy' wrote")
        kw.setdefault("clks_per_bit", int(model.rtl_device.get("clks_per_bit_default") or SIM_CLKS_PER_BIT))
        src = Path(tempfile.mkdtemp(prefix="bitforge-simdevice-"))
        try:
            files = []
            for name in dev.files:
                dest = src.joinpath(*name.split("/"))
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(model.bundle.read(name))
                files.append(dest)
        except BaseException:
            shutil.rmtree(src, ignore_errors=True)
            raise
        return cls(files, dev.top, cleanup=src, **kw)

    def _remove_sources(self) -> None:
        if self._cleanup is not None:
            shutil.rmtree(self._cleanup, ignore_errors=True)

    def write(self, data: bytes) -> None:
        self._serial.write(data)

    def read(self, max_wait: float) -> bytes:
        return self._serial.read(max_wait)

    def close(self) -> None:
        try:
            self._serial.close()
        finally:
            try:
                self.stats = self.board.stop()
            finally:
                self._remove_sources()
