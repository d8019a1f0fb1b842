"""PLL settings for a board clock, and the UART divisor a core clock gives.

Each family's search walks the same divider ranges and checks the same limits as the vendor-neutral
calculators the open-source flows ship (icestorm's ``icepll``, Project Trellis' ``ecppll``, apycula's
``gowin_pll``), in exact rational arithmetic, so the achieved frequency is the formula's value and ties
break the same way every run:

* iCE40 ``SB_PLL40_*``, SIMPLE feedback: f_out = f_in * (DIVF+1) / ((DIVR+1) * 2**DIVQ), DIVR 0-15, DIVF 0-127,
  DIVQ 1-6; PFD f_in/(DIVR+1) 10-133 MHz, VCO f_pfd*(DIVF+1) 533-1066 MHz, output 16-275 MHz (iCE40 sysCLOCK
  PLL design guide, TN1251); FILTER_RANGE from the PFD frequency as icepll picks it.
* ECP5 ``EHXPLLL``, feedback from CLKOP: f_out = f_in * CLKFB_DIV / CLKI_DIV, VCO f_out * CLKOP_DIV 400-800 MHz;
  CLKI_DIV and CLKOP_DIV 1-128, CLKFB_DIV 1-80, PFD 3.125-400 MHz, output 3.125-400 MHz (ECP5 data sheet);
  among equal outputs the VCO nearest 600 MHz, as ecppll prefers. CLKOP_CPHASE is half of CLKOP_DIV, the
  180-degree shift ecppll writes (its feedback path compensates any phase).
* Gowin ``rPLL`` (GW1NR-9 C6/I5): f_out = f_in * (FBDIV_SEL+1) / (IDIV_SEL+1), VCO f_out * ODIV_SEL; IDIV_SEL and
  FBDIV_SEL 0-63, ODIV_SEL one of 2, 4, 8, 16, 32, 48, ..., 128; PFD 3-400 MHz, VCO 400-1200 MHz, output
  3.125-600 MHz (Gowin DS117, the limits apycula's gowin_pll uses).

``plan_pll(..., at_most=True)`` returns the fastest setting not above the request (a design that closes timing
at F must not be clocked above F); ``at_most=False`` the nearest, which is what the calculators print.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Iterator, Optional

from ..errors import BitforgeError

MHZ = 1_000_000

#: The PLL output the flow asks for when a design misses the board clock: this share of the achieved Fmax, so
#: that a second place and route (which moves things) still closes timing.
FMAX_MARGIN = Fraction(9, 10)

#: The largest baud error the UART divisor may leave. Each end of a UART link may be about 2 % off before the
#: sampling point of the last bit leaves it (a 10-bit frame sampled mid-bit tolerates about 5 % in total).
MAX_BAUD_ERROR = 0.02
#: Fewest core clocks per UART bit: the receiver samples each bit in its middle, which needs a few clocks of
#: resolution to stay off the edges.
MIN_CLKS_PER_BIT = 4
DEFAULT_BAUD = 115_200


class ClockError(BitforgeError):
    """A clock the board's PLL cannot make, or a baud rate the core clock cannot divide to."""


@dataclass(frozen=True)
class PllLimits:
    primitive: str
    pfd: tuple[Fraction, Fraction]  # Hz, inclusive
    vco: tuple[Fraction, Fraction]
    output: tuple[Fraction, Fraction]
    strict: bool = False  # Gowin: apycula keeps VCO and output strictly inside their ranges

    def inside(self, value: Fraction, bounds: tuple[Fraction, Fraction]) -> bool:
        lo, hi = bounds
        return lo < value < hi if self.strict else lo <= value <= hi


def _mhz(lo: str, hi: str) -> tuple[Fraction, Fraction]:
    return Fraction(lo) * MHZ, Fraction(hi) * MHZ


LIMITS = {
    "ice40": PllLimits("SB_PLL40_PAD", _mhz("10", "133"), _mhz("533", "1066"), _mhz("16", "275")),
    "ecp5": PllLimits("EHXPLLL", _mhz("3.125", "400"), _mhz("400", "800"), _mhz("3.125", "400")),
    "gowin": PllLimits("rPLL", _mhz("3", "400"), _mhz("400", "1200"), _mhz("3.125", "600"), strict=True),
}

GOWIN_ODIV = (2, 4, 8, 16, 32, 48, 64, 80, 96, 112, 128)


@dataclass(frozen=True)
class PllConfig:
    """One PLL setting: the primitive's parameters and the frequencies they give (Hz, exact)."""

    family: str
    primitive: str
    input_hz: Fraction
    output_hz: Fraction
    pfd_hz: Fraction
    vco_hz: Fraction
    params: dict = field(default_factory=dict)  # parameter name -> int or str, as the primitive takes them

    def to_json(self) -> dict:
        return {"primitive": self.primitive, "input_hz": _number(self.input_hz),
                "output_hz": _number(self.output_hz), "pfd_hz": _number(self.pfd_hz),
                "vco_hz": _number(self.vco_hz), "params": dict(self.params)}


def _number(x: Fraction) -> int | float:
    """An exact integer when it is one (board clocks, most PLL outputs), else a float to the millihertz."""
    return int(x) if x.denominator == 1 else round(float(x), 3)


def ice40_filter_range(pfd_hz: Fraction) -> int:
    """The loop filter setting icepll picks from the PFD frequency."""
    mhz = pfd_hz / MHZ
    for bound, value in ((17, 1), (26, 2), (44, 3), (66, 4), (101, 5)):
        if mhz < bound:
            return value
    return 6


def _ice40(fin: Fraction, lim: PllLimits) -> Iterator[tuple[tuple, PllConfig]]:
    for divr in range(16):
        pfd = fin / (divr + 1)
        if not lim.inside(pfd, lim.pfd):
            continue
        for divf in range(128):
            vco = pfd * (divf + 1)
            if not lim.inside(vco, lim.vco):
                continue
            for divq in range(1, 7):
                out = vco / 2 ** divq
                if lim.inside(out, lim.output):
                    params = {"FEEDBACK_PATH": "SIMPLE", "DIVR": divr, "DIVF": divf, "DIVQ": divq,
                              "FILTER_RANGE": ice40_filter_range(pfd)}
                    yield (divr, divf, divq), PllConfig("ice40", lim.primitive, fin, out, pfd, vco, params)


def _ecp5(fin: Fraction, lim: PllLimits) -> Iterator[tuple[tuple, PllConfig]]:
    vco_centre = 600 * MHZ
    for clki in range(1, 129):
        pfd = fin / clki
        if not lim.inside(pfd, lim.pfd):
            continue
        for clkfb in range(1, 81):
            out = pfd * clkfb
            if not lim.inside(out, lim.output):
                continue
            # The output does not depend on CLKOP_DIV, which only places the VCO: take the one nearest 600 MHz
            # (the smaller on a tie) among those that keep the VCO in range.
            lo = max(1, math.ceil(lim.vco[0] / out))
            hi = min(128, math.floor(lim.vco[1] / out))
            if lo > hi:
                continue
            ideal = vco_centre / out
            distance, clkop = min((abs(out * d - vco_centre), d)
                                  for d in {min(max(math.floor(ideal), lo), hi), min(max(math.ceil(ideal), lo), hi)})
            params = {"CLKI_DIV": clki, "CLKFB_DIV": clkfb, "CLKOP_DIV": clkop, "CLKOP_CPHASE": clkop // 2,
                      "CLKOP_FPHASE": 0, "FEEDBK_PATH": "CLKOP"}
            yield (distance, clki, clkfb), PllConfig("ecp5", lim.primitive, fin, out, pfd, out * clkop, params)


def _gowin(fin: Fraction, lim: PllLimits, device: str) -> Iterator[tuple[tuple, PllConfig]]:
    for idiv in range(64):
        pfd = fin / (idiv + 1)
        if not (lim.pfd[0] <= pfd <= lim.pfd[1]):  # apycula: the PFD range is inclusive
            continue
        for fbdiv in range(64):
            out = pfd * (fbdiv + 1)
            if not lim.inside(out, lim.output):
                continue
            for odiv in GOWIN_ODIV:
                if lim.inside(out * odiv, lim.vco):
                    params = {"FCLKIN": f"{float(fin / MHZ):g}", "IDIV_SEL": idiv, "FBDIV_SEL": fbdiv,
                              "ODIV_SEL": odiv, "DEVICE": device}
                    yield (idiv, fbdiv, odiv), PllConfig("gowin", lim.primitive, fin, out, pfd, out * odiv, params)
                    break  # apycula keeps the first ODIV_SEL that fits


def pll_settings(family: str, input_hz: int | Fraction, *, device: str = "") -> Iterator[tuple[tuple, PllConfig]]:
    """Every valid setting of ``family``'s PLL for this input, with its tie-break key (smaller is preferred)."""
    if family not in LIMITS:
        raise ClockError(f"no PLL model for the {family} family; bitforge has {', '.join(LIMITS)}")
    fin = Fraction(input_hz)
    lim = LIMITS[family]
    if family == "ice40":
        return _ice40(fin, lim)
    if family == "ecp5":
        return _ecp5(fin, lim)
    return _gowin(fin, lim, device)


def plan_pll(family: str, input_hz: int | Fraction, want_hz: int | float | Fraction, *, at_most: bool = True,
             device: str = "") -> PllConfig:
    """The setting whose output is the fastest at or below ``want_hz`` (``at_most``), or the nearest to it.

    Raises :class:`ClockError` when no setting qualifies (a request below the PLL's lowest output)."""
    want = Fraction(want_hz)
    best: Optional[tuple[tuple, PllConfig]] = None
    for tie, cfg in pll_settings(family, input_hz, device=device):
        if at_most and cfg.output_hz > want:
            continue
        key = ((want - cfg.output_hz) if at_most else abs(cfg.output_hz - want), *tie)
        if best is None or key < best[0]:
            best = (key, cfg)
    if best is None:
        lowest = min(cfg.output_hz for _, cfg in pll_settings(family, input_hz, device=device))
        raise ClockError(f"{LIMITS[family].primitive} cannot make {float(want / MHZ):.3f} MHz or less from "
                         f"{float(Fraction(input_hz) / MHZ):g} MHz: its lowest output is {float(lowest / MHZ):.3f} "
                         "MHz. The design must close timing at that frequency or faster (the nextpnr log names its "
                         "critical path), or go on a board whose PLL goes lower")
    return best[1]


def core_clock_for(family: str, board_hz: int, fmax_mhz: float, *, device: str = "") -> Optional[PllConfig]:
    """None when the design closes timing at the board clock; else the PLL setting for the fastest clock at or
    below :data:`FMAX_MARGIN` of the achieved Fmax."""
    fmax = Fraction(fmax_mhz).limit_denominator(1000) * MHZ
    if fmax >= board_hz:
        return None
    return plan_pll(family, board_hz, fmax * FMAX_MARGIN, at_most=True, device=device)


@dataclass(frozen=True)
class UartTiming:
    clks_per_bit: int
    baud: float  # achieved: core clock / clks_per_bit
    baud_requested: int
    error: float  # (achieved - requested) / requested

    def to_json(self) -> dict:
        return {"baud": round(self.baud, 3), "baud_requested": self.baud_requested,
                "clks_per_bit": self.clks_per_bit, "baud_error_percent": round(100 * self.error, 4)}


def uart_timing(core_clock_hz: int | float | Fraction, baud: int) -> UartTiming:
    """CLKS_PER_BIT = round(core clock / baud) and the baud rate it really gives; refuses an error above
    :data:`MAX_BAUD_ERROR` or fewer than :data:`MIN_CLKS_PER_BIT` clocks a bit."""
    if not isinstance(baud, int) or isinstance(baud, bool) or baud <= 0:
        raise ClockError(f"--baud must be a positive integer (bits per second), got {baud!r}")
    clock = Fraction(core_clock_hz)
    ratio = clock / baud
    clks = int(ratio + Fraction(1, 2))  # round half up: the same every run, on every platform
    mhz = float(clock / MHZ)
    if clks < MIN_CLKS_PER_BIT:
        raise ClockError(f"--baud {baud} is too fast for a {mhz:g} MHz core clock: {float(ratio):.2f} clocks a bit, "
                         f"the UART needs at least {MIN_CLKS_PER_BIT}; choose --baud {int(clock / MIN_CLKS_PER_BIT)} "
                         "or less")
    achieved = clock / clks
    error = float((achieved - baud) / baud)
    if abs(error) > MAX_BAUD_ERROR:
        raise ClockError(f"--baud {baud} from a {mhz:g} MHz core clock: CLKS_PER_BIT {clks} gives "
                         f"{float(achieved):.1f} baud, {100 * error:+.2f} % off, more than the "
                         f"{100 * MAX_BAUD_ERROR:g} % a UART tolerates; choose a rate that divides {mhz:g} MHz "
                         f"evenly, such as --baud {round(achieved)}")
    return UartTiming(clks, float(achieved), baud, error)
