"""The board database: where a bitstream's clock, UART and LED go on a real board.

Pins, I/O attributes and the oscillator frequency are read from the ``amaranth-boards`` package (its platform
classes list every resource of a board, and are maintained against the boards' schematics), never typed in
here: a typo in a pin number makes a board that stays silent, and nothing in the flow would notice. What this
module adds is what amaranth-boards does not say: which bitforge target is the board's part, and which
programmer and ``openFPGALoader`` board name load it.

The board-level top has four ports: ``clk`` (the oscillator), ``uart_rx`` (pulled up, so an unplugged cable
reads as an idle line rather than a stream of start bits), ``uart_tx`` and ``led`` (the first of the board's
``led`` resources, showing the device's ``busy``; ``led_inverted`` when amaranth-boards marks it active low).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import cache
from importlib import metadata
from typing import Iterator, Mapping

from ..errors import BitforgeError
from .targets import TARGETS, Target


class UnknownBoard(BitforgeError):
    """A board name that is not in the database; the message lists the ones that are."""


class BoardDatabaseError(BitforgeError):
    """amaranth-boards is missing or no longer describes a board as this module expects."""


@dataclass(frozen=True)
class Pin:
    """One port of the board-level top on one package pin, with amaranth-boards' I/O attributes for it."""

    port: str
    pin: str
    direction: str  # "input" | "output"
    attrs: Mapping[str, str] = field(default_factory=dict)
    inverted: bool = False  # amaranth-boards 'pins-n': the board's circuit is active low


@dataclass(frozen=True)
class Programmer:
    """How the board is loaded: the ``openFPGALoader -b`` name and whether icestorm's ``iceprog`` also works."""

    openfpgaloader_board: str
    iceprog: bool = False


@dataclass(frozen=True)
class Board:
    name: str
    description: str
    target: str  # a key of TARGETS: the board's FPGA
    platform: str  # the amaranth-boards class the pins were read from
    device_family: str  # the vendor's family name the PLL primitive wants (Gowin rPLL DEVICE)
    clock: Pin
    clock_hz: int
    uart_rx: Pin
    uart_tx: Pin
    led: Pin
    programmer: Programmer

    @property
    def family(self) -> str:
        return TARGETS[self.target].family

    def target_info(self) -> Target:
        return TARGETS[self.target]

    @property
    def pins(self) -> tuple[Pin, ...]:
        """Every port of the board-level top, clock first."""
        return (self.clock, self.uart_rx, self.uart_tx, self.led)


# What amaranth-boards does not hold. The openFPGALoader names agree with the platforms' toolchain_program
# (ulx3s, tangnano9k); the iCEBreaker's platform programs with iceprog, and openFPGALoader reaches its SPI flash
# through its generic iCE40 board. The ULX3S is made with four parts; 'ulx3s' is the 85F.
_BOARDS = {
    "icebreaker": ("1BitSquared iCEBreaker: Lattice iCE40UP5K-SG48", "ice40-up5k",
                   "amaranth_boards.icebreaker", "ICEBreakerPlatform", Programmer("ice40_generic", iceprog=True)),
    "ulx3s": ("Radiona ULX3S: Lattice ECP5 LFE5U-85F-6BG381C", "ecp5-85f",
              "amaranth_boards.ulx3s", "ULX3S_85F_Platform", Programmer("ulx3s")),
    "tangnano9k": ("Sipeed Tang Nano 9K: Gowin GW1NR-LV9QN88PC6/I5", "gowin-gw1nr9",
                   "amaranth_boards.tang_nano_9k", "TangNano9kPlatform", Programmer("tangnano9k")),
}
BOARD_NAMES: tuple[str, ...] = tuple(_BOARDS)

# The uart_rx pull-up in each family's attribute names (amaranth-boards gives it for the iCEBreaker and the Tang
# Nano 9K; the ULX3S's FTDI always drives the line, but a pull-up costs nothing and keeps the rule one rule).
_PULL_UP = {"ice40": ("PULLUP", "1"), "ecp5": ("PULLMODE", "UP"), "gowin": ("PULL_MODE", "UP")}


def amaranth_boards_version() -> str:
    try:
        return metadata.version("amaranth-boards")
    except metadata.PackageNotFoundError:
        raise BoardDatabaseError("amaranth-boards is not installed; it holds the boards' pins: "
                                 "pip install amaranth-boards (or run 'make setup')") from None


def _resource(platform, name: str, number: int = 0):
    for r in platform.resources:
        if r.name == name and r.number == number:
            return r
    raise BoardDatabaseError(f"amaranth-boards {amaranth_boards_version()}: {platform.__name__} has no resource "
                             f"{name!r} #{number}; bitforge expects the board's clock, 'uart' and 'led' resources")


def _pins(ios, name: str, platform) -> object:
    """The one ``Pins`` object of a resource (or subsignal) that holds a single pin."""
    pins = [io for io in ios if type(io).__name__ == "Pins"]
    if len(pins) != 1 or len(pins[0].names) != 1:
        raise BoardDatabaseError(f"{platform.__name__}: resource {name!r} is not one pin as expected: {ios!r}")
    return pins[0]


def _attrs(*sources) -> dict[str, str]:
    """I/O attributes, later sources overriding earlier ones; values as the constraint files spell them."""
    out: dict[str, str] = {}
    for attrs in sources:
        for k, v in dict(attrs).items():
            out[k] = str(int(v)) if isinstance(v, bool) else str(v)
    return out


def _pin(platform, port: str, resource, subsignal: str | None = None) -> Pin:
    ios, attrs = resource.ios, [resource.attrs]
    label = resource.name
    if subsignal is not None:
        sub = next((s for s in ios if getattr(s, "name", None) == subsignal), None)
        if sub is None:
            raise BoardDatabaseError(f"{platform.__name__}: resource {resource.name!r} has no subsignal {subsignal!r}")
        ios, label = sub.ios, f"{resource.name}.{subsignal}"
        attrs.append(sub.attrs)
    pins = _pins(ios, label, platform)
    direction = {"i": "input", "o": "output"}.get(pins.dir)
    if direction is None:
        raise BoardDatabaseError(f"{platform.__name__}: {label} has direction {pins.dir!r}; expected 'i' or 'o'")
    return Pin(port, pins.names[0], direction, _attrs(*attrs), bool(pins.invert))


def _load(name: str) -> Board:
    description, target, module, cls, programmer = _BOARDS[name]
    try:
        platform = getattr(importlib.import_module(module), cls)
    except ImportError:
        amaranth_boards_version()  # names the missing package
        raise
    family = TARGETS[target].family
    clock = _resource(platform, platform.default_clk)
    if clock.clock is None:
        raise BoardDatabaseError(f"{platform.__name__}: the default clock {platform.default_clk!r} has no frequency")
    uart, led = _resource(platform, "uart"), _resource(platform, "led")
    rx = _pin(platform, "uart_rx", uart, "rx")
    key, value = _PULL_UP[family]
    rx = Pin(rx.port, rx.pin, rx.direction, {**rx.attrs, key: rx.attrs.get(key, value)}, rx.inverted)
    device_family = getattr(platform, "family", None) if family == "gowin" else None
    return Board(name=name, description=description, target=target, platform=f"{module}.{cls}",
                 device_family=device_family or "", clock=_pin(platform, "clk", clock),
                 clock_hz=int(round(clock.clock.frequency)), uart_rx=rx, uart_tx=_pin(platform, "uart_tx", uart, "tx"),
                 led=_pin(platform, "led", led), programmer=programmer)


@cache
def get_board(name: str) -> Board:
    """The board ``name``, read from amaranth-boards on first use (importing it takes a fifth of a second)."""
    if name not in _BOARDS:
        raise UnknownBoard(f"unknown board {name!r}; choose one of: {', '.join(BOARD_NAMES)}")
    return _load(name)


class _Boards(Mapping[str, Board]):
    """``BOARDS[name]``: the database as a mapping that reads amaranth-boards only when a board is looked up."""

    def __getitem__(self, name: str) -> Board:
        if name not in _BOARDS:
            raise KeyError(name)
        return get_board(name)

    def __iter__(self) -> Iterator[str]:
        return iter(BOARD_NAMES)

    def __len__(self) -> int:
        return len(BOARD_NAMES)


BOARDS: Mapping[str, Board] = _Boards()


def check_board_target(board: str, target: str | None) -> str:
    """The target a run on ``board`` builds for: the board's own, or ``target`` when it names the same part."""
    b = get_board(board)
    if target is not None and target != b.target:
        raise BitforgeError(f"--board {board} is the {b.description} (target {b.target}), but --target says {target}; "
                            f"drop --target (the board sets it) or pass --target {b.target}")
    return b.target
