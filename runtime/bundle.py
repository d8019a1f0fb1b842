"""Deployment bundles (``.bfb``): one file with everything a host needs to run a compiled model or an online
learner on a board, on the simulated board or on the CPU, and the SHA-256 of every part of it.

A bundle is a zip archive (stdlib ``zipfile``, deflated) holding ``bundle.json``, the manifest, first, then the
other members in sorted order, with fixed time stamps and permissions, so the same output folder always gives
the same bytes. The members keep their paths in the output folder they came from: ``model.json`` and
``weights.safetensors`` (the IR), ``model.onnx`` (the CPU path), ``report.json``, ``rtl/manifest.json`` and the
Verilog of the device wrapper (the simulated board builds it), and, for a board, its bitstream
(``impl/<target>/...``). An online learner's bundle holds its initial state as an IR folder (``learner/model.json``
with the spec in its metadata, ``learner/weights.safetensors``) instead of the IR and the ONNX model, and
``bundle.json`` describes it in a ``learner`` section (:class:`LearnerInfo`). Only JSON, safetensors, ONNX,
Verilog and bitstream bytes: nothing is unpickled, nothing is executed.

Opening (:meth:`Bundle.open`) reads the file once and checks, before anything is used:

* the archive: a zip with nothing before, between or after its records (every byte accounted for), no
  comment, no encryption, stored or deflated members only, local headers that agree with the central
  directory, at most :data:`MAX_MEMBERS` members of at most :data:`MAX_MEMBER_BYTES` each;
* every name: a relative POSIX path of plain components (letters, digits, ``.``, ``_``, ``-``, ``+``; not
  starting with a dot), so no absolute path, ``..``, backslash, drive letter, NUL or control character; no
  duplicate (also not one differing only in case), no name that is both a file and a folder;
* every entry is a regular file (the zip's external attributes): no symbolic link, folder or device;
* ``bundle.json``: the format and its version, every field's type, and a ``members`` list that names exactly
  the other members of the archive, each with its size and SHA-256, which every member's bytes must match.

The bytes checked are the bytes :meth:`Bundle.read` returns and :meth:`Bundle.extract` writes (the archive is
read once, into memory), so nothing can change between the check and the use.

What the hash list cannot prove: it lives inside the archive it describes. It finds damage (a flipped bit, a
truncated download, a member added, removed, renamed or replaced), but whoever can rewrite the archive can
rewrite ``bundle.json`` to match, and such a bundle opens. Only a digest obtained some other way closes that
gap: ``bitforge deploy`` prints the bundle's own SHA-256, and ``Bundle.open(path, expect_sha256=HEX)`` (the
CLI's ``--expect-sha256``) refuses a bundle whose digest differs. There is no signature.
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
import stat
import struct
import zipfile
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Optional, Union

from ..toolchain.errors import BitforgeError
from ..toolchain.outputs import output_folder

PathLike = Union[str, os.PathLike]

FORMAT = "bitforge-bundle"
FORMAT_VERSION = 1
SUFFIX = ".bfb"
MANIFEST = "bundle.json"
#: Members of one bundle: a model, its IR, its reports, a few dozen Verilog files and a bitstream need ~40.
MAX_MEMBERS = 1024
#: One member's bytes: the largest bitstream of a supported target is a few MB; anything near this is not ours.
MAX_MEMBER_BYTES = 256 << 20
#: The whole file, and the sum of its members' sizes.
MAX_BUNDLE_BYTES = 1 << 30
MAX_MANIFEST_BYTES = 4 << 20
MAX_NAME_BYTES = 255
#: Every member's time stamp: the earliest a zip can hold (reproducible bytes).
TIMESTAMP = (1980, 1, 1, 0, 0, 0)
#: Every member's mode: a regular file, rw-r--r--.
FILE_MODE = stat.S_IFREG | 0o644
_COMPONENT = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9._+-]*")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_LOCAL = struct.Struct("<4s5H3L2H")  # a zip local file header, 30 bytes
_END = struct.Struct("<4s4H2LH")  # the zip's end of central directory record, 22 bytes
# General-purpose flag bits a bundle never has: encryption, data descriptor, strong encryption, masked header.
_REFUSED_FLAGS = {0x1: "encrypted", 0x8: "written with a data descriptor", 0x40: "strongly encrypted",
                  0x2000: "with a masked local header"}


class BundleError(BitforgeError):
    """A bundle that is damaged, tampered with, not a bundle, or asks for something unsafe; the message names
    the bundle, the member and the check that failed."""


# -- member names ---------------------------------------------------------------------------------------------

def name_problem(name: str) -> Optional[str]:
    """Why ``name`` may not be a member's path, or None. The rules are those of a name that extracts to a file
    inside the target folder on every system: relative, ``/``-separated, plain components only."""
    if not isinstance(name, str) or not name:
        return "an empty name"
    if len(name.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        return f"a name longer than {MAX_NAME_BYTES} bytes"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "a name with a NUL or control character"
    if "\\" in name:
        return "a backslash (a Windows path separator)"
    if re.match(r"[A-Za-z]:", name):
        return "a drive letter"
    if name.startswith("/"):
        return "an absolute path"
    parts = name.split("/")
    if ".." in parts:
        return "a '..' component (a path out of the folder)"
    if "." in parts or "" in parts:
        return "an empty or '.' component"
    for part in parts:
        if not _COMPONENT.fullmatch(part):
            return (f"the component {part!r}: only letters, digits, '.', '_', '-' and '+' are allowed, and no "
                    "component starts with a dot")
    return None


def check_name(name: str, where: str) -> str:
    why = name_problem(name)
    if why is not None:
        raise BundleError(f"{where}: member {name!r} is refused: {why}")
    return name


# -- the manifest ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Member:
    """One archive member besides ``bundle.json``: its path, size and SHA-256 (hex)."""

    path: str
    size: int
    sha256: str

    def to_json(self) -> dict:
        return {"path": self.path, "size": self.size, "sha256": self.sha256}


@dataclass(frozen=True)
class TensorFormat:
    """A tensor's per-sample shape and element format. ``type`` is the IR's type string
    (``fixed<16,6,RND_CONV,SAT>``, ``ufixed<...>`` or ``float32``); the other fields spell it out (None for
    float32) so a client in another language need not parse it."""

    name: str
    shape: tuple[int, ...]
    type: str
    width: Optional[int] = None
    integer: Optional[int] = None
    signed: Optional[bool] = None
    rounding: Optional[str] = None
    overflow: Optional[str] = None

    @property
    def is_float(self) -> bool:
        return self.width is None

    @property
    def frac(self) -> Optional[int]:
        return None if self.width is None else self.width - self.integer

    def to_json(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "type": self.type, "width": self.width,
                "integer": self.integer, "signed": self.signed, "rounding": self.rounding, "overflow": self.overflow}


@dataclass(frozen=True)
class Device:
    """The streaming core behind the UART device wrapper: the stream word formats, its timing, the wrapper's
    top module and Verilog members, what its ``hello`` answers, and the weight layout of a ``--weights ram``
    build (None: weights are constants). ``rtl/manifest.json`` (a member) has every detail."""

    top: str
    files: tuple[str, ...]
    input: TensorFormat
    output: TensorFormat
    bus_width: int
    latency_cycles: int
    ii: int
    hello: dict = field(default_factory=dict)
    weights: Optional[dict] = None

    def to_json(self) -> dict:
        return {"top": self.top, "files": list(self.files), "input": self.input.to_json(),
                "output": self.output.to_json(), "bus_width": self.bus_width, "latency_cycles": self.latency_cycles,
                "ii": self.ii, "hello": self.hello, "weights": self.weights}


@dataclass(frozen=True)
class Board:
    """A bitstream built for a board (``bitforge flow MODEL --board B``): where it is in the bundle and the
    clock and UART it was built for. ``clock_hz`` is the board's oscillator, ``core_clock_hz`` the device's
    clock (the PLL's output, or the oscillator); ``baud`` is the rate the device really runs at,
    ``core_clock_hz / clks_per_bit``, ``baud_requested`` the one asked for."""

    board: str
    target: str
    bitstream: str
    clock_hz: float
    baud: float
    clks_per_bit: int
    top: Optional[str] = None
    core_clock_hz: Optional[float] = None
    baud_requested: Optional[int] = None
    pll: Optional[dict] = None
    constraints: Optional[str] = None
    fmax_mhz: Optional[float] = None
    resources: dict = field(default_factory=dict)

    @property
    def device_clock_hz(self) -> float:
        """The clock the device (and its UART) runs on."""
        return self.clock_hz if self.core_clock_hz is None else self.core_clock_hz

    def to_json(self) -> dict:
        return {"board": self.board, "target": self.target, "bitstream": self.bitstream, "clock_hz": self.clock_hz,
                "baud": self.baud, "clks_per_bit": self.clks_per_bit, "top": self.top,
                "core_clock_hz": self.core_clock_hz, "baud_requested": self.baud_requested, "pll": self.pll,
                "constraints": self.constraints, "fmax_mhz": self.fmax_mhz, "resources": self.resources}


@dataclass(frozen=True)
class LearnerInfo:
    """An online learner's bundle: what the host needs beyond a compiled model's words. ``x``, ``t`` and ``y`` are
    the formats of the inputs, the targets and the predictions (the learn word is ``{learn_enable, t, x}``,
    ``x[0]`` least significant); ``rule`` is the update rule (``lr_shift``: eta = 2**-lr_shift, ``rounding``,
    ``lfsr_seed``, ``rand_bits``); ``state`` is where ``read_state`` finds every coefficient
    (``runtime.state_layout.layout_json``); the initial state is the IR folder ``learner/`` (its ``model.json``
    holds the whole spec)."""

    kind: str
    sizes: tuple[int, ...]
    x: TensorFormat
    t: TensorFormat
    y: TensorFormat
    rule: dict
    state: dict

    def to_json(self) -> dict:
        return {"kind": self.kind, "sizes": list(self.sizes), "x": self.x.to_json(), "t": self.t.to_json(),
                "y": self.y.to_json(), "rule": self.rule, "state": self.state}


@dataclass(frozen=True)
class Manifest:
    """``bundle.json``. ``inputs``/``outputs`` are the model's (what the CPU path takes and gives);
    ``device`` describes the words on the wire; ``board`` is None for a bundle without a bitstream (the
    simulated board and the CPU); ``learner`` is set for an online learner's bundle."""

    bitforge_version: str
    protocol_version: int
    model_name: str
    model_id: str
    arch_id: str
    inputs: tuple[TensorFormat, ...]
    outputs: tuple[TensorFormat, ...]
    device: Device
    board: Optional[Board] = None
    learner: Optional[LearnerInfo] = None
    members: tuple[Member, ...] = ()
    format: str = FORMAT
    format_version: int = FORMAT_VERSION

    def member(self, path: str) -> Optional[Member]:
        return next((m for m in self.members if m.path == path), None)

    def to_json(self) -> dict:
        return {"format": self.format, "format_version": self.format_version,
                "bitforge_version": self.bitforge_version, "protocol_version": self.protocol_version,
                "model": {"name": self.model_name, "model_id": self.model_id, "arch_id": self.arch_id},
                "inputs": [t.to_json() for t in self.inputs], "outputs": [t.to_json() for t in self.outputs],
                "device": self.device.to_json(), "board": None if self.board is None else self.board.to_json(),
                **({} if self.learner is None else {"learner": self.learner.to_json()}),
                "members": [m.to_json() for m in self.members]}

    @property
    def required(self) -> tuple[str, ...]:
        """The members this kind of bundle cannot work without."""
        return REQUIRED if self.learner is None else LEARNER_REQUIRED

    def referenced(self) -> list[str]:
        """The members other fields name (the device's Verilog, the bitstream, the constraints)."""
        names = list(self.device.files)
        if self.board is not None:
            names += [self.board.bitstream] + ([self.board.constraints] if self.board.constraints else [])
        return names


#: Members every compiled model's bundle has, whatever else it holds.
REQUIRED = ("model.json", "weights.safetensors", "model.onnx", "report.json", "rtl/manifest.json")
#: An online learner's: its initial state (the IR folder ``bitforge learn`` writes as ``learner/``), no ONNX model
#: (the CPU path runs the golden learner, whose state changes with every sample).
LEARNER_REQUIRED = ("learner/model.json", "learner/weights.safetensors", "report.json", "rtl/manifest.json")


class _Fields:
    """Typed reads of one JSON object of ``bundle.json``, each failure naming the field."""

    def __init__(self, doc: Any, where: str, source: str):
        if not isinstance(doc, dict):
            raise BundleError(f"{source}: {MANIFEST}: {where or 'the manifest'} is not a JSON object")
        self.doc, self.where, self.source = doc, where, source

    def fail(self, key: str, expected: str) -> BundleError:
        found = self.doc.get(key, "nothing")
        return BundleError(f"{self.source}: {MANIFEST}: {self.path(key)} should be {expected}, found "
                           f"{json.dumps(found)[:60]}")

    def path(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def get(self, key: str, kind: str, optional: bool = False) -> Any:
        value = self.doc.get(key)
        if value is None and optional:
            return None
        checks = {"str": lambda v: isinstance(v, str) and v != "",
                  "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
                  "count": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
                  "positive": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < math.inf,
                  "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
                  "bool": lambda v: isinstance(v, bool), "dict": lambda v: isinstance(v, dict),
                  "list": lambda v: isinstance(v, list),
                  "hex": lambda v: isinstance(v, str) and _HEX64.fullmatch(v) is not None}
        if not checks[kind](value):
            words = {"str": "a non-empty string", "int": "an integer", "count": "a positive integer",
                     "positive": "a positive number",
                     "number": "a number", "bool": "true or false", "dict": "an object", "list": "a list",
                     "hex": "a SHA-256 digest (64 lower-case hex digits)"}
            raise self.fail(key, words[kind] + (" or null" if optional else ""))
        return value

    def sub(self, key: str, optional: bool = False) -> Optional["_Fields"]:
        value = self.get(key, "dict", optional)
        return None if value is None else _Fields(value, self.path(key), self.source)


def _tensor(f: _Fields) -> TensorFormat:
    shape = f.get("shape", "list")
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in shape):
        raise f.fail("shape", "a list of positive integers")
    return TensorFormat(name=f.get("name", "str"), shape=tuple(shape), type=f.get("type", "str"),
                        width=f.get("width", "count", True), integer=f.get("integer", "int", True),
                        signed=f.get("signed", "bool", True), rounding=f.get("rounding", "str", True),
                        overflow=f.get("overflow", "str", True))


def _tensors(f: _Fields, key: str) -> tuple[TensorFormat, ...]:
    items = f.get(key, "list")
    if not items:
        raise f.fail(key, "a non-empty list")
    return tuple(_tensor(_Fields(t, f"{f.path(key)}[{i}]", f.source)) for i, t in enumerate(items))


def _names(f: _Fields, key: str) -> tuple[str, ...]:
    items = f.get(key, "list")
    for i, name in enumerate(items):
        check_name(name, f"{f.source}: {MANIFEST}: {f.path(key)}[{i}]")
    return tuple(items)


def manifest_from_json(doc: Any, source: str) -> Manifest:
    """Check and read ``bundle.json``'s content; ``source`` (the bundle's path) starts every message."""
    top = _Fields(doc, "", source)
    fmt = doc.get("format")
    if fmt != FORMAT:
        raise BundleError(f"{source}: not a bitforge bundle ({MANIFEST} says format {json.dumps(fmt)[:40]}, "
                          f"expected {FORMAT!r})")
    version = top.get("format_version", "count")
    if version != FORMAT_VERSION:
        raise BundleError(f"{source}: bundle format version {version}; this bitforge reads version "
                          f"{FORMAT_VERSION} only" + ("; upgrade bitforge" if version > FORMAT_VERSION else ""))
    model = top.sub("model")
    dev = top.sub("device")
    device = Device(top=dev.get("top", "str"), files=_names(dev, "files"), input=_tensor(dev.sub("input")),
                    output=_tensor(dev.sub("output")), bus_width=dev.get("bus_width", "count"),
                    latency_cycles=dev.get("latency_cycles", "int"), ii=dev.get("ii", "count"),
                    hello=dev.get("hello", "dict"), weights=dev.get("weights", "dict", True))
    board = None
    b = top.sub("board", optional=True)
    if b is not None:
        constraints = b.get("constraints", "str", True)
        board = Board(board=b.get("board", "str"), target=b.get("target", "str"),
                      bitstream=check_name(b.get("bitstream", "str"), f"{source}: {MANIFEST}: board.bitstream"),
                      clock_hz=b.get("clock_hz", "positive"), baud=b.get("baud", "positive"),
                      clks_per_bit=b.get("clks_per_bit", "count"), top=b.get("top", "str", True),
                      core_clock_hz=b.get("core_clock_hz", "positive", True),
                      baud_requested=b.get("baud_requested", "count", True), pll=b.get("pll", "dict", True),
                      constraints=None if constraints is None else check_name(
                          constraints, f"{source}: {MANIFEST}: board.constraints"),
                      fmax_mhz=b.get("fmax_mhz", "number", True), resources=b.get("resources", "dict", True) or {})
    learner = None
    lf = top.sub("learner", optional=True)
    if lf is not None:
        sizes = lf.get("sizes", "list")
        if len(sizes) < 2 or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in sizes):
            raise lf.fail("sizes", "a list of at least two positive integers")
        learner = LearnerInfo(kind=lf.get("kind", "str"), sizes=tuple(sizes), x=_tensor(lf.sub("x")),
                              t=_tensor(lf.sub("t")), y=_tensor(lf.sub("y")), rule=lf.get("rule", "dict"),
                              state=lf.get("state", "dict"))
    members = []
    for i, m in enumerate(top.get("members", "list")):
        mf = _Fields(m, f"members[{i}]", source)
        path = check_name(mf.get("path", "str"), f"{source}: {MANIFEST}: members[{i}].path")
        size = mf.get("size", "int")
        if not 0 <= size <= MAX_MEMBER_BYTES:
            raise mf.fail("size", f"a size from 0 to {MAX_MEMBER_BYTES:,} bytes")
        members.append(Member(path, size, mf.get("sha256", "hex")))
    return Manifest(bitforge_version=top.get("bitforge_version", "str"),
                    protocol_version=top.get("protocol_version", "count"), model_name=model.get("name", "str"),
                    model_id=model.get("model_id", "hex"), arch_id=model.get("arch_id", "hex"),
                    inputs=_tensors(top, "inputs"), outputs=_tensors(top, "outputs"), device=device, board=board,
                    learner=learner, members=tuple(members))


def _check_members(manifest: Manifest, source: str) -> None:
    """The member list itself: no duplicates, no reserved name, every required and referenced member listed."""
    seen: dict[str, str] = {}
    for m in manifest.members:
        if m.path == MANIFEST:
            raise BundleError(f"{source}: {MANIFEST} lists itself as a member")
        key = m.path.casefold()
        if key in seen:
            raise BundleError(f"{source}: {MANIFEST} lists {m.path!r} twice" + (
                "" if seen[key] == m.path else f" (as {seen[key]!r}: names differing only in case collide on "
                                                "case-insensitive file systems)"))
        seen[key] = m.path
    folders = {"/".join(m.path.split("/")[:k]) for m in manifest.members for k in range(1, m.path.count("/") + 1)}
    clash = sorted(folders & {m.path for m in manifest.members})
    if clash:
        raise BundleError(f"{source}: member {clash[0]!r} is both a file and a folder")
    listed = {m.path for m in manifest.members}
    for name in (*manifest.required, *manifest.referenced()):
        if name not in listed:
            kind = "bundle" if manifest.learner is None else "learner's bundle"
            raise BundleError(f"{source}: {MANIFEST} does not list the member {name!r}, which every {kind} needs"
                              if name in manifest.required else
                              f"{source}: {MANIFEST} names {name!r} (device or board) but does not list it as a "
                              "member")


# -- reading an archive ---------------------------------------------------------------------------------------

def _check_entry(info: zipfile.ZipInfo, source: str) -> None:
    name = info.orig_filename
    mode = info.external_attr >> 16
    if name.endswith("/") or info.external_attr & 0x10 or stat.S_ISDIR(mode):
        raise BundleError(f"{source}: member {name!r} is a folder entry; a bundle holds regular files only")
    why = name_problem(name)
    if why is not None:
        raise BundleError(f"{source}: member {name!r} is refused: {why}")
    if stat.S_IFMT(mode) and not stat.S_ISREG(mode):
        kind = "a symbolic link" if stat.S_ISLNK(mode) else f"not a regular file (mode {oct(mode)})"
        raise BundleError(f"{source}: member {name!r} is {kind}; a bundle holds regular files only")
    for bit, what in _REFUSED_FLAGS.items():
        if info.flag_bits & bit:
            raise BundleError(f"{source}: member {name!r} is {what}; bitforge never writes such a member")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise BundleError(f"{source}: member {name!r} uses compression method {info.compress_type}; a bundle's "
                          "members are stored or deflated")
    if info.file_size > MAX_MEMBER_BYTES:
        raise BundleError(f"{source}: member {name!r} declares {info.file_size:,} bytes, more than the "
                          f"{MAX_MEMBER_BYTES:,} a bundle member may have (a zip bomb, or not a bitforge bundle)")


def _check_layout(data: bytes, zf: zipfile.ZipFile, source: str) -> None:
    """Every byte of the file belongs to a member, the central directory or its end record: nothing hidden
    before, between or after the records another unzip tool might read differently; local headers agree
    with the central directory."""
    end = data[-_END.size:]
    sig, disk, cd_disk, _here, entries, cd_size, cd_offset, comment = _END.unpack(end.rjust(_END.size, b"\0"))
    if sig != b"PK\x05\x06" or comment or zf.comment:
        raise BundleError(f"{source}: the file does not end with the zip's end record (data appended, an archive "
                          "comment, or truncated); a bundle ends with its end record")
    if (disk, cd_disk) != (0, 0) or 0xFFFFFFFF in (cd_size, cd_offset) or 0xFFFF == entries:
        raise BundleError(f"{source}: a multi-disk or ZIP64 archive; bitforge never writes one")
    if zf.start_dir != cd_offset:
        raise BundleError(f"{source}: {zf.start_dir - cd_offset:+,} unaccounted bytes before the archive's first "
                          "record (data prepended, or records removed); the archive has been altered")
    if entries != len(zf.infolist()) or cd_offset + cd_size != len(data) - _END.size:
        raise BundleError(f"{source}: the zip's end record does not match its central directory (entries, "
                          "offset or size); the archive has been altered")
    pos = 0
    for info in sorted(zf.infolist(), key=lambda i: i.header_offset):
        name = info.orig_filename
        if info.header_offset != pos:
            raise BundleError(f"{source}: {info.header_offset - pos:+,} unaccounted bytes before member {name!r} "
                              f"(at offset {pos:,}); the archive has been altered")
        header = data[pos:pos + _LOCAL.size]
        if len(header) < _LOCAL.size:
            raise BundleError(f"{source}: member {name!r}: truncated local header")
        sig, _version, flags, method, _time, _date, crc, csize, usize, nlen, elen = _LOCAL.unpack(header)
        if sig != b"PK\x03\x04" or data[pos + 30:pos + 30 + nlen].decode("cp437") != name or (
                flags, method, crc, csize, usize) != (info.flag_bits, info.compress_type, info.CRC,
                                                      info.compress_size, info.file_size):
            raise BundleError(f"{source}: member {name!r}: its local header disagrees with the central directory "
                              "(name, sizes, CRC or method); the archive has been altered")
        pos += _LOCAL.size + nlen + elen + info.compress_size
    if pos != zf.start_dir:
        raise BundleError(f"{source}: {zf.start_dir - pos:+,} unaccounted bytes before the zip's central "
                          "directory; the archive has been altered")


def _read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, size: int, source: str) -> bytes:
    """A member's bytes, never more than ``size`` (read in chunks: a zip bomb stops at its declared size)."""
    name = info.orig_filename
    try:
        with zf.open(info) as f:
            chunks, total = [], 0
            while True:
                chunk = f.read(min(1 << 20, size + 1 - total))
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
                if total > size:
                    raise BundleError(f"{source}: member {name!r} holds more than the {size:,} bytes it declares")
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, struct.error,
            NotImplementedError, UnicodeDecodeError) as e:
        if isinstance(e, BundleError):
            raise
        raise BundleError(f"{source}: member {name!r} is damaged ({type(e).__name__}: {e}); the bundle was "
                          "truncated or altered: copy or build it again") from None
    return b"".join(chunks)


def _sha256_hex(text: str, what: str) -> str:
    digest = text.strip().lower()
    if not _HEX64.fullmatch(digest):
        raise BundleError(f"{what}: {text!r} is not a SHA-256 digest (64 hex digits), e.g. the one 'bitforge "
                          "deploy' printed")
    return digest


@dataclass(frozen=True)
class Bundle:
    """An opened, fully verified bundle: its manifest and its members' bytes (held in memory: what was checked
    is what is read). Open one with :meth:`open`."""

    path: Path
    sha256: str
    size: int
    manifest: Manifest
    _data: Mapping[str, bytes] = field(repr=False)

    @classmethod
    def open(cls, path: PathLike, *, expect_sha256: Optional[str] = None) -> "Bundle":
        """Read and verify the bundle at ``path`` (see the module's docstring for every check); with
        ``expect_sha256`` the file's own digest must equal it too, the one check that catches a bundle
        rewritten consistently by someone else."""
        path = Path(path)
        expected = None if expect_sha256 is None else _sha256_hex(expect_sha256, "--expect-sha256")
        if not path.is_file():
            what = ("is a folder" if path.is_dir() else "is not a regular file" if path.exists() else "no such file")
            raise BundleError(f"{path}: {what}; a bundle is the .bfb file 'bitforge deploy' writes")
        size = path.stat().st_size
        if size > MAX_BUNDLE_BYTES:
            raise BundleError(f"{path}: {size:,} bytes, more than a bundle may have ({MAX_BUNDLE_BYTES:,}); not a "
                              "bitforge bundle")
        try:
            data = path.read_bytes()
        except OSError as e:
            raise BundleError(f"{path}: cannot read ({e.strerror or e})") from None
        digest = hashlib.sha256(data).hexdigest()
        if expected is not None and digest != expected:
            raise BundleError(f"{path}: SHA-256 {digest}, expected {expected}: this is not the bundle the digest "
                              "was given for (altered, or another build); do not use it")
        return cls.from_bytes(data, path, digest)

    @classmethod
    def from_bytes(cls, data: bytes, path: PathLike = "<bundle>", digest: Optional[str] = None) -> "Bundle":
        """Verify a bundle held in memory (``path`` names it in messages)."""
        source = str(path)
        try:
            zf = zipfile.ZipFile(io.BytesIO(data))
            infos = zf.infolist()
        except (zipfile.BadZipFile, EOFError, OSError, ValueError, struct.error, NotImplementedError,
                UnicodeDecodeError) as e:
            raise BundleError(f"{source}: not a bitforge bundle, or truncated: cannot read it as a zip archive "
                              f"({type(e).__name__}: {e})") from None
        if len(infos) > MAX_MEMBERS:
            raise BundleError(f"{source}: {len(infos):,} members, more than a bundle may have ({MAX_MEMBERS:,})")
        for info in infos:
            _check_entry(info, source)
        _check_layout(data, zf, source)
        names = [i.orig_filename for i in infos]
        by_key: dict[str, str] = {}
        for name in names:
            if name.casefold() in by_key:
                raise BundleError(f"{source}: the archive holds {name!r} twice" + (
                    "" if by_key[name.casefold()] == name else f" (as {by_key[name.casefold()]!r}: names differing "
                                                               "only in case)"))
            by_key[name.casefold()] = name
        if MANIFEST not in names:
            raise BundleError(f"{source}: no {MANIFEST} in the archive; not a bitforge bundle (write one with "
                              "'bitforge deploy')")
        infos_by_name = {i.orig_filename: i for i in infos}
        head = infos_by_name[MANIFEST]
        if head.file_size > MAX_MANIFEST_BYTES:
            raise BundleError(f"{source}: {MANIFEST} declares {head.file_size:,} bytes, more than a manifest may "
                              f"have ({MAX_MANIFEST_BYTES:,})")
        raw = _read_member(zf, head, head.file_size, source)
        try:
            doc = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise BundleError(f"{source}: {MANIFEST} is not valid JSON ({e})") from None
        manifest = manifest_from_json(doc, source)
        _check_members(manifest, source)
        listed = {m.path for m in manifest.members}
        extra = [n for n in names if n != MANIFEST and n not in listed]
        if extra:
            raise BundleError(f"{source}: member {extra[0]!r} is in the archive but not listed in {MANIFEST} "
                              "(added after the bundle was written)")
        missing = [p for p in sorted(listed) if p not in infos_by_name]
        if missing:
            raise BundleError(f"{source}: member {missing[0]!r} is listed in {MANIFEST} but missing from the "
                              "archive (removed or renamed)")
        if sum(m.size for m in manifest.members) > MAX_BUNDLE_BYTES:
            raise BundleError(f"{source}: its members add up to more than {MAX_BUNDLE_BYTES:,} bytes")
        contents = {MANIFEST: raw}
        for m in manifest.members:
            info = infos_by_name[m.path]
            if info.file_size != m.size:
                raise BundleError(f"{source}: member {m.path!r} has {info.file_size:,} bytes in the archive, "
                                  f"{MANIFEST} lists {m.size:,}: the member was altered")
            body = _read_member(zf, info, m.size, source)
            if len(body) != m.size:
                raise BundleError(f"{source}: member {m.path!r} holds {len(body):,} bytes, {MANIFEST} lists "
                                  f"{m.size:,}: the member was altered or truncated")
            actual = hashlib.sha256(body).hexdigest()
            if actual != m.sha256:
                raise BundleError(f"{source}: member {m.path!r}: SHA-256 {actual} does not match {MANIFEST}'s "
                                  f"{m.sha256}: the member was altered")
            contents[m.path] = body
        return cls(path=Path(path), sha256=digest or hashlib.sha256(data).hexdigest(), size=len(data),
                   manifest=manifest, _data=contents)

    # -- reading ----------------------------------------------------------------------------------------------

    @property
    def names(self) -> list[str]:
        """Every member's path, ``bundle.json`` first, as in the archive."""
        return [MANIFEST] + [m.path for m in self.manifest.members]

    def read(self, member: str) -> bytes:
        """A member's verified bytes."""
        try:
            return self._data[member]
        except KeyError:
            raise BundleError(f"{self.path}: no member {member!r}; it holds " + ", ".join(self.names)) from None

    def read_json(self, member: str) -> dict:
        try:
            doc = json.loads(self.read(member).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise BundleError(f"{self.path}: member {member!r} is not valid JSON ({e})") from None
        if not isinstance(doc, dict):
            raise BundleError(f"{self.path}: member {member!r} is not a JSON object")
        return doc

    @property
    def bitstream(self) -> Optional[bytes]:
        board = self.manifest.board
        return None if board is None else self.read(board.bitstream)

    def extract(self, folder: PathLike, *, force: bool = False) -> Path:
        """Write every member (``bundle.json`` included) under ``folder``, under the rules of bitforge's output
        folders (``toolchain.outputs``: written whole beside it and renamed in; a folder bitforge did not write
        is replaced only with ``force``). Only names that passed :func:`name_problem` reach the file system,
        each created new (no following of links) inside the fresh folder. Returns the folder."""
        with output_folder(folder, kind="bundle", force=force, inputs=(self.path,)) as tmp:
            root = Path(os.path.realpath(tmp))
            for name in self.names:
                check_name(name, str(self.path))
                dest = root.joinpath(*name.split("/"))
                if not Path(os.path.realpath(dest.parent)).is_relative_to(root):  # cannot happen: checked names
                    raise BundleError(f"{self.path}: member {name!r} would be written outside {folder}")
                dest.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
                with os.fdopen(fd, "wb") as f:
                    f.write(self._data[name])
        return Path(folder)


def looks_like_bundle(path: PathLike) -> bool:
    """True for a path a command should open as a bundle: a ``.bfb`` name (opened, so a damaged one is reported
    as a bundle), or a file whose first zip member is ``bundle.json`` (as :func:`pack` writes them)."""
    path = Path(path)
    if path.suffix.lower() == SUFFIX:
        return True
    try:
        with path.open("rb") as f:
            head = f.read(_LOCAL.size + len(MANIFEST))
    except OSError:
        return False
    if len(head) < _LOCAL.size or head[:4] != b"PK\x03\x04":
        return False
    return _LOCAL.unpack(head[:_LOCAL.size])[9] == len(MANIFEST) and head[_LOCAL.size:] == MANIFEST.encode()


# -- writing --------------------------------------------------------------------------------------------------

def pack(manifest: Manifest, files: Mapping[str, bytes]) -> tuple[bytes, "Bundle"]:
    """The bundle's bytes (``manifest`` with its member list filled in from ``files``, path -> bytes, then every
    file) and the bundle they open as. Deterministic: the same arguments give the same bytes. The bytes are
    opened and verified before they are returned, so bitforge never writes a bundle it would refuse."""
    for name in files:
        check_name(name, "bundle")
        if name == MANIFEST:
            raise BundleError(f"bundle: {MANIFEST} is the manifest's own name; no other member may have it")
    members = tuple(Member(p, len(files[p]), hashlib.sha256(files[p]).hexdigest()) for p in sorted(files))
    manifest = replace(manifest, members=members)
    _check_members(manifest, "bundle")
    head = (json.dumps(manifest.to_json(), indent=2) + "\n").encode("utf-8")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, body in ((MANIFEST, head), *((m.path, files[m.path]) for m in members)):
            info = zipfile.ZipInfo(name, date_time=TIMESTAMP)
            info.create_system = 3  # Unix: the mode below is read as one
            info.external_attr = FILE_MODE << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, body, compresslevel=9)
    data = buf.getvalue()
    return data, Bundle.from_bytes(data, "bundle")
