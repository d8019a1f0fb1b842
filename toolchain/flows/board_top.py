"""The board-level top and its pin file: the device on a real board's clock, UART and LED.

The top (``templates/board_top.v.j2``) instantiates the family's PLL when the core needs a clock other than
the oscillator's (or wires the oscillator straight through), holds the device in reset until the PLL has
locked and a power-on count has run out, and passes ``CLKS_PER_BIT`` to the device. The pin file is the
family's: a PCF for iCE40 (nextpnr-ice40 ``--pcf``), an LPF for ECP5 (``--lpf``), a CST for Gowin
(``--vopt cst=``), each from the board's amaranth-boards pins and attributes.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Optional

from . import render_template
from .boards import Board, amaranth_boards_version
from .clocking import MHZ, PllConfig, UartTiming

#: Core clocks the device stays in reset after the PLL locks (about 80 us at 12 MHz, 10 us at 100 MHz).
POR_CYCLES = 1023

PIN_FILES = {"ice40": ("board_ice40.pcf.j2", ".pcf"), "ecp5": ("board_ecp5.lpf.j2", ".lpf"),
             "gowin": ("board_gowin.cst.j2", ".cst")}


@dataclass(frozen=True)
class BoardTop:
    top: str
    verilog: str
    pin_file_suffix: str
    pins: str


def board_top_name(device_top: str, board: Board) -> str:
    return f"{device_top}_{board.name}"


def _mhz(hz: Fraction | int) -> str:
    """MHz as the constraint files and comments write them: no trailing zeros, at most six decimals."""
    text = f"{float(Fraction(hz) / MHZ):.6f}".rstrip("0").rstrip(".")
    return text or "0"


def render_board_top(board: Board, device_top: str, uart: UartTiming, pll: Optional[PllConfig], *,
                     clock_reason: str = "", por_cycles: int = POR_CYCLES) -> BoardTop:
    """The board top and its pin file; ``clock_reason`` (for the header comment) says why this core clock."""
    top = board_top_name(device_top, board)
    source = "the oscillator itself" if pll is None else f"the {pll.primitive}"
    core = board.clock_hz if pll is None else pll.output_hz
    clock_note = f"{_mhz(core)} MHz, {source}" + (f" ({clock_reason})." if clock_reason else ".")
    values = dict(top=top, device_top=device_top, board=board, board_mhz=_mhz(board.clock_hz),
                  clock_note=clock_note, clks_per_bit=uart.clks_per_bit, baud=f"{uart.baud:.1f}",
                  baud_note=f"{uart.baud_requested} requested, {100 * uart.error:+.3f} %", pll=pll,
                  p=pll.params if pll else {}, por_cycles=por_cycles, por_bits=max(1, por_cycles.bit_length()))
    if pll is not None:
        values.update(pll_in_mhz=_mhz(pll.input_hz), pll_out_mhz=_mhz(pll.output_hz), pll_pfd_mhz=_mhz(pll.pfd_hz),
                      pll_vco_mhz=_mhz(pll.vco_hz))
    verilog = render_template("board_top.v.j2", **values)
    template, suffix = PIN_FILES[board.family]
    pins = render_template(template, top=top, board=board, pins=board.pins, board_mhz=_mhz(board.clock_hz),
                           version=amaranth_boards_version())
    return BoardTop(top, verilog, suffix, pins)
