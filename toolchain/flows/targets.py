"""The target database: what each FPGA offers and how the open-source flow reaches it.

A target is data: the budgets the fit check and ``--reuse auto`` read, the rules that turn yosys cell counts
and nextpnr utilisation into LUT/FF/DSP/BRAM numbers, and the command lines of the bitstream path. Xilinx
parts are synthesis-only estimates: yosys ``synth_xilinx`` counts cells, no place and route runs and no
bitstream is made; a Vivado project is written for users who have Vivado.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Mapping, Optional

from ..errors import BitforgeError

if TYPE_CHECKING:
    from ..backends.rtl.reuse import Budget as MultiplierBudget

RESOURCES = ("lut", "ff", "dsp", "bram")


class UnknownTarget(BitforgeError):
    """A target name that is not in the database; the message lists the ones that are."""


class DoesNotFit(BitforgeError):
    """A design that needs more of a resource than the target has; carries the numbers and what to try."""

    def __init__(self, message: str, target: str, over: Mapping[str, tuple[float, float]]):
        super().__init__(message)
        self.target = target
        self.over = dict(over)  # resource -> (needed, available)


@dataclass(frozen=True)
class Budget:
    """What the part offers, in the units of :attr:`Target.units`; ``io=None``: not checked (estimate-only)."""

    lut: int
    ff: int
    dsp: int
    bram: int
    io: Optional[int] = None

    def as_dict(self) -> dict:
        return {"lut": self.lut, "ff": self.ff, "dsp": self.dsp, "bram": self.bram, "io": self.io}


@dataclass(frozen=True)
class CellRule:
    """yosys cells matching ``pattern`` (fnmatch) count ``weight`` units of ``resource``."""

    pattern: str
    resource: str
    weight: float = 1.0


@dataclass(frozen=True)
class BitstreamFlow:
    """The place-and-route and packing half of a target that makes a bitstream.

    ``pack_args`` holds ``{placed}`` and ``{bitstream}`` placeholders; file names are ``<top><suffix>``.
    ``pnr_rules`` maps a resource to the nextpnr utilisation keys whose ``used`` counts add up to it.
    """

    nextpnr: str
    device_args: tuple[str, ...]
    placed_flag: str
    placed_suffix: str
    packer: str
    pack_args: tuple[str, ...]
    bitstream_suffix: str
    pnr_rules: Mapping[str, tuple[str, ...]]
    board_pins: Optional["BoardPins"] = None  # set: a pin file is generated and passed to nextpnr


@dataclass(frozen=True)
class BoardPins:
    """Real pins of a board for the generated pin file: the clock pin, then pins for outputs first, then the rest."""

    board: str
    clock: str
    output_pins: tuple[str, ...]
    general_pins: tuple[str, ...]

    @property
    def count(self) -> int:
        return 1 + len(self.output_pins) + len(self.general_pins)


# Tang Nano 9K: the 27 MHz oscillator on pin 52, the six (active-low) LEDs, then the header pins and the
# USB-UART pair (17, 18); each was checked with nextpnr-himbaechel and gowin_pack.
TANG_NANO_9K = BoardPins(
    board="Tang Nano 9K", clock="52", output_pins=("10", "11", "13", "14", "15", "16"),
    general_pins=tuple(str(p) for p in (25, 26, 27, 28, 29, 30, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 51, 53, 54,
                                        55, 56, 57, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 48, 49, 31, 32, 63, 79,
                                        80, 81, 82, 83, 84, 85, 86, 17, 18)))


@dataclass(frozen=True)
class Target:
    name: str
    family: str
    part: str
    description: str
    budget: Budget
    units: Mapping[str, str]
    synth: str  # the yosys synthesis command, without -top/-json
    cell_rules: tuple[CellRule, ...]
    default_clock_mhz: float
    dsp_width: int  # operand width one DSP block multiplies without help
    flow: Optional[BitstreamFlow] = None
    vivado_part: Optional[str] = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def makes_bitstream(self) -> bool:
        return self.flow is not None

    def count_cells(self, cells: Mapping[str, int]) -> dict[str, float]:
        """LUT/FF/DSP/BRAM from a yosys cell census (each cell type counted by the first rule it matches)."""
        totals = {r: 0.0 for r in RESOURCES}
        for cell, n in cells.items():
            for rule in self.cell_rules:
                if fnmatchcase(cell, rule.pattern):
                    totals[rule.resource] += rule.weight * n
                    break
        return {r: _tidy(v) for r, v in totals.items()}

    def multiplier_budget(self) -> "MultiplierBudget":
        """What ``--reuse auto`` may spend on multipliers."""
        from ..backends.rtl.reuse import Budget as MultiplierBudget

        return MultiplierBudget(dsp=self.budget.dsp, lut=self.budget.lut, dsp_width=self.dsp_width)


def _tidy(v: float) -> float | int:
    return int(v) if float(v).is_integer() else round(v, 2)


_ICE40_CELLS = (CellRule("SB_LUT4", "lut"), CellRule("SB_DFF*", "ff"), CellRule("SB_MAC16", "dsp"),
                CellRule("SB_RAM40_4K*", "bram"))
# A CCU2C carry cell occupies two LUT4 positions of a slice.
_ECP5_CELLS = (CellRule("LUT4", "lut"), CellRule("CCU2C", "lut", 2), CellRule("TRELLIS_FF", "ff"),
               CellRule("MULT18X18D", "dsp"), CellRule("DP16KD", "bram"), CellRule("PDPW16KD", "bram"))
# An ALU cell takes a LUT position; DSP counts are in MULT18X18 equivalents (the budget's unit).
_GOWIN_CELLS = (CellRule("LUT[1-4]", "lut"), CellRule("ALU", "lut"), CellRule("DFF*", "ff"),
                CellRule("MULT18X18", "dsp"), CellRule("MULT9X9", "dsp", 0.5), CellRule("MULT36X36", "dsp", 4),
                CellRule("MULTALU18X18", "dsp"), CellRule("MULTADDALU18X18", "dsp", 2),
                CellRule("MULTALU36X18", "dsp", 2), CellRule("SP", "bram"), CellRule("SPX9", "bram"),
                CellRule("SDPB", "bram"), CellRule("SDPX9B", "bram"), CellRule("DPB", "bram"),
                CellRule("DPX9B", "bram"), CellRule("pROM", "bram"), CellRule("pROMX9", "bram"))
# LUT RAM and shift registers occupy LUTs too; BRAM in RAMB36 units (a RAMB18 is half of one).
_XILINX_CELLS = (CellRule("LUT[1-6]", "lut"), CellRule("SRL*", "lut"), CellRule("RAM32X1D", "lut", 2),
                 CellRule("RAM64X1D", "lut", 2), CellRule("RAM32M*", "lut", 4), CellRule("RAM64M*", "lut", 4),
                 CellRule("RAM128X1D", "lut", 4), CellRule("RAM*X1S", "lut"), CellRule("FD??", "ff"),
                 CellRule("DSP48E?", "dsp"), CellRule("RAMB36E?", "bram"), CellRule("RAMB18E?", "bram", 0.5))

_ICE40_UNITS = {"lut": "logic cells, LUT4 + FF", "ff": "DFF", "dsp": "SB_MAC16, 16x16",
                "bram": "SB_RAM40_4K, 4 Kb", "io": "SB_IO pins"}
_ECP5_UNITS = {"lut": "LUT4", "ff": "FF", "dsp": "MULT18X18D", "bram": "DP16KD EBR, 18 Kb", "io": "pins"}
_GOWIN_UNITS = {"lut": "LUT4, ALU included", "ff": "DFF", "dsp": "MULT18X18", "bram": "BSRAM, 18 Kb",
                "io": "Tang Nano 9K header pins"}
_XILINX_UNITS = {"lut": "LUT1-LUT6", "ff": "FF", "dsp": "DSP48", "bram": "RAMB36, 36 Kb", "io": "pins"}

_ECP5_PNR = {"lut": ("TRELLIS_COMB",), "ff": ("TRELLIS_FF",), "dsp": ("MULT18X18D",), "bram": ("DP16KD",),
             "io": ("TRELLIS_IO",)}


def _ecp5(name: str, size: str, package: str, part: str, budget: Budget) -> Target:
    return Target(
        name=name, family="ecp5", part=part, description=f"Lattice ECP5 LFE5U-{size.upper()}F, {package}",
        budget=budget, units=_ECP5_UNITS, synth="synth_ecp5", cell_rules=_ECP5_CELLS, default_clock_mhz=25.0,
        dsp_width=18,
        flow=BitstreamFlow(nextpnr="nextpnr-ecp5", device_args=(f"--{size}k", "--package", package, "--speed", "6"),
                           placed_flag="--textcfg", placed_suffix=".config", packer="ecppack",
                           pack_args=("--compress", "{placed}", "{bitstream}"), bitstream_suffix=".bit",
                           pnr_rules=_ECP5_PNR))


TARGETS: dict[str, Target] = {t.name: t for t in (
    Target(
        name="ice40-up5k", family="ice40", part="iCE40UP5K-SG48", description="Lattice iCE40 UltraPlus UP5K, SG48",
        budget=Budget(lut=5280, ff=5280, dsp=8, bram=30, io=39), units=_ICE40_UNITS, synth="synth_ice40 -dsp",
        cell_rules=_ICE40_CELLS, default_clock_mhz=12.0, dsp_width=16,
        flow=BitstreamFlow(nextpnr="nextpnr-ice40", device_args=("--up5k", "--package", "sg48"), placed_flag="--asc",
                           placed_suffix=".asc", packer="icepack", pack_args=("{placed}", "{bitstream}"),
                           bitstream_suffix=".bin",
                           pnr_rules={"lut": ("ICESTORM_LC",), "dsp": ("ICESTORM_DSP",), "bram": ("ICESTORM_RAM",),
                                      "io": ("SB_IO",)}),
        notes=("pins are placed by nextpnr (no PCF): add a PCF for a real board",)),
    _ecp5("ecp5-25f", "25", "CABGA256", "LFE5U-25F-6BG256C",
          Budget(lut=24288, ff=24288, dsp=28, bram=56, io=197)),
    _ecp5("ecp5-85f", "85", "CABGA381", "LFE5U-85F-6BG381C",
          Budget(lut=83640, ff=83640, dsp=156, bram=208, io=205)),
    Target(
        name="gowin-gw1nr9", family="gowin", part="GW1NR-LV9QN88PC6/I5",
        description="Gowin GW1NR-9 (Tang Nano 9K), QN88",
        budget=Budget(lut=8640, ff=6480, dsp=20, bram=26, io=TANG_NANO_9K.count),
        units=_GOWIN_UNITS, synth="synth_gowin", cell_rules=_GOWIN_CELLS, default_clock_mhz=27.0, dsp_width=18,
        flow=BitstreamFlow(nextpnr="nextpnr-himbaechel-gowin",
                           device_args=("--device", "GW1NR-LV9QN88PC6/I5", "--vopt", "family=GW1N-9C"),
                           placed_flag="--write", placed_suffix=".routed.json", packer="gowin_pack",
                           pack_args=("-d", "GW1N-9C", "-o", "{bitstream}", "{placed}"), bitstream_suffix=".fs",
                           pnr_rules={"lut": ("LUT4", "ALU"), "ff": ("DFF",),
                                      "dsp": ("MULT18X18", "MULTALU18X18"), "bram": ("BSRAM",)},
                           board_pins=TANG_NANO_9K),
        notes=("pins follow the Tang Nano 9K: clk on the 27 MHz oscillator (pin 52), the rest on header pins",)),
    Target(
        name="xc7a35t", family="xilinx", part="xc7a35tcsg324-1", description="AMD Artix-7 XC7A35T, CSG324",
        budget=Budget(lut=20800, ff=41600, dsp=90, bram=50, io=210), units=_XILINX_UNITS,
        synth="synth_xilinx -family xc7 -flatten", cell_rules=_XILINX_CELLS, default_clock_mhz=100.0,
        dsp_width=18, vivado_part="xc7a35tcsg324-1",
        notes=("synthesis-only estimate (yosys synth_xilinx): no place and route, no Fmax, no bitstream",)),
    Target(
        name="xcvu9p", family="xilinx", part="xcvu9p-flga2104-2L-e", description="AMD Virtex UltraScale+ XCVU9P",
        budget=Budget(lut=1182240, ff=2364480, dsp=6840, bram=2160), units=_XILINX_UNITS,
        synth="synth_xilinx -family xcup -flatten", cell_rules=_XILINX_CELLS, default_clock_mhz=200.0,
        dsp_width=18, vivado_part="xcvu9p-flga2104-2L-e",
        notes=("synthesis-only estimate (yosys synth_xilinx): no place and route, no Fmax, no bitstream",)),
)}


def get_target(name: str) -> Target:
    try:
        return TARGETS[name]
    except KeyError:
        raise UnknownTarget(f"unknown target {name!r}; choose one of: {', '.join(TARGETS)} "
                            "(xc7a35t and xcvu9p are synthesis-only estimates)") from None


def check_fit(target: Target, need: Mapping[str, float], design: str) -> None:
    """Raise :class:`DoesNotFit` when ``need`` (resource -> count, ``io`` included) exceeds the budget."""
    budget = target.budget.as_dict()
    over = {r: (need[r], budget[r]) for r in (*RESOURCES, "io")
            if budget.get(r) is not None and need.get(r) is not None and need[r] > budget[r]}
    if not over:
        return
    numbers = "; ".join(f"needs {_tidy(n)} {r.upper()} ({target.units[r]}), {target.name} has {a}"
                        for r, (n, a) in over.items())
    raise DoesNotFit(f"design '{design}' does not fit {target.name}: {numbers}. Try {_suggest(target, over)}.",
                     target.name, over)


def _suggest(target: Target, over: Mapping[str, tuple[float, float]]) -> str:
    tips = []

    def roomy(t: Target) -> bool:
        return all(getattr(t.budget, r) is None or getattr(t.budget, r) >= math.ceil(n) for r, (n, _) in over.items())

    # The smallest target (by LUTs) that has room, never trading a bitstream for an estimate.
    bigger = [t for t in sorted(TARGETS.values(), key=lambda t: (t.budget.lut, t.name))
              if t.name != target.name and t.makes_bitstream >= target.makes_bitstream and roomy(t)]
    if bigger:
        first = bigger[0]
        have = ", ".join(f"{getattr(first.budget, r)} {r.upper()}" for r in over)
        tips.append(f"a bigger target ({first.name} has {have})")
    if set(over) & {"lut", "ff", "dsp", "bram"}:
        tips.append("a narrower precision (e.g. --precision 8: smaller multipliers, fewer DSP/LUT)")
    if set(over) & {"lut", "dsp"}:
        tips.append("a larger --reuse (each multiplier serves more products; --reuse auto picks one that fits)")
    if "io" in over:
        tips.append("a board top with fewer pins (a narrower stream bus)")
    return ", or ".join(tips) if tips else "a bigger target"
