"""Pin files for targets whose place and route needs one (Gowin: nextpnr-himbaechel wants a ``.cst``).

The board top has few ports (a clock, a reset, a narrow stream), so each port bit goes on a real pin of the
board: the clock on the board oscillator, outputs first on the LEDs, everything else on header pins.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence

from . import render_template
from .targets import BoardPins, DoesNotFit, Target
from .yosys import Port

_CLOCK = re.compile(r"^(clk|clock|sys_?clk|clk_?in|i_?clk)$", re.IGNORECASE)
_RESET = re.compile(r"^(rst|reset|sys_?rst|i_?rst)$", re.IGNORECASE)


@dataclass(frozen=True)
class PinAssignment:
    net: str
    pin: str
    pull: Optional[str] = None


def clock_port(ports: Sequence[Port]) -> Optional[str]:
    """The board top's clock input: a one-bit input named like a clock (``clk``, ``clock``, ``sys_clk``)."""
    for p in ports:
        if p.direction == "input" and p.width == 1 and _CLOCK.match(p.name):
            return p.name
    return None


def assign_pins(ports: Sequence[Port], board: BoardPins, *, design: str, target: Target) -> list[PinAssignment]:
    """Every port bit on a distinct real pin, or :class:`DoesNotFit` naming how many pins are missing."""
    clock = clock_port(ports)
    outputs = list(board.output_pins)
    general = list(board.general_pins)
    assigned: list[PinAssignment] = []
    if clock is not None:
        assigned.append(PinAssignment(clock, board.clock))
    # Reset first (pull-down), then outputs (LEDs before header pins), then the other inputs.
    order = sorted((p for p in ports if p.name != clock),
                   key=lambda p: (not _RESET.match(p.name), p.direction != "output", ports.index(p)))
    for port in order:
        for net in port.nets():
            pool = outputs if port.direction == "output" and outputs else (general or outputs)
            if not pool:
                need = sum(p.width for p in ports)
                raise DoesNotFit(f"design '{design}' does not fit {target.name}: its top has {need} port bits, the "
                                 f"{board.board} offers {board.count} pins. Try a board top with fewer pins (a "
                                 "narrower stream bus) or another target.", target.name, {"io": (need, board.count)})
            pull = "DOWN" if _RESET.match(port.name) else None
            assigned.append(PinAssignment(net, pool.pop(0), pull))
    return assigned


def gowin_cst(ports: Sequence[Port], target: Target, top: str) -> str:
    board = target.flow.board_pins if target.flow else None
    if board is None:
        raise RuntimeError(f"target {target.name} has no board pins to write a pin file from")
    pins = assign_pins(ports, board, design=top, target=target)
    clock = clock_port(ports)
    note = (f"{clock} is on pin {board.clock}, the board's oscillator." if clock
            else "No clock port was found (expected one named clk or clock).")
    return render_template("board.cst.j2", top=top, board=board.board, part=target.part, pins=pins, clock_note=note)
