"""``bitforge deploy``: a compiled output folder to one bundle file (``bitforge.runtime.bundle``).

The folder is what ``bitforge compile MODEL --to onnx --to rtl -o OUT`` or ``bitforge flow`` wrote, or an online
learner's ``bitforge learn ... --rtl -o OUT`` / ``bitforge flow learn:TASK``. Without a board the bundle serves
the simulated board and the CPU (no bitstream); with one, the bitstream that ``bitforge flow MODEL --board B -o
OUT`` recorded in ``report.json`` under ``boards.<B>`` goes in too. Only files bitforge names (the IR, the ONNX
model, a learner's initial state, the reports, the Verilog listed in ``rtl/manifest.json``, the board's bitstream
and constraints) are taken, each a regular file inside OUT: a link out of the folder is refused, not followed.

A learner's bundle carries the state the device starts from (``OUT/learner/``: the bitstream holds those
coefficients), not the one the golden run ended with (``OUT/final/``).
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from ..runtime.bundle import LEARNER_REQUIRED, REQUIRED, Board, Device, Manifest, TensorFormat, name_problem, pack
from ..runtime.learner_manifest import fixed_format, learner_info, learner_words
from ..runtime.protocol import PROTOCOL_VERSION
from . import identity, ir
from .errors import BitforgeError
from .jsonfile import read_json_object
from .version import bitforge_version
from .outputs import MARKER, is_bitforge_output, write_file
from .report.file import read_report

PathLike = Union[str, os.PathLike]


class DeployError(BitforgeError):
    """An output folder that cannot become a bundle: not bitforge's, a file missing, a board not built."""


@dataclass(frozen=True)
class Deployed:
    """A bundle just written: where, its SHA-256 (to give to whoever checks it with ``--expect-sha256``), its
    size and manifest."""

    path: Path
    sha256: str
    size: int
    manifest: Manifest


def tensor_format(spec: ir.TensorSpec) -> TensorFormat:
    return fixed_format(spec.name, tuple(spec.shape), spec.dtype)


def _model_hint(report: dict) -> str:
    model = report.get("model")
    name = model.get("name") if isinstance(model, dict) else None
    return name if isinstance(name, str) and name else "MODEL"


class _Folder:
    """The output folder being bundled: reads the files bitforge names, refusing anything outside it."""

    def __init__(self, out: Path):
        self.out = out
        self.root = Path(os.path.realpath(out))
        self.files: dict[str, bytes] = {}

    def add(self, rel: Any, named_by: str, remedy: str) -> str:
        if not isinstance(rel, str):
            raise DeployError(f"{named_by}: a file path should be a string, found {rel!r}; {remedy}")
        why = name_problem(rel)
        if why is not None:
            raise DeployError(f"{named_by} names {rel!r}, which cannot go into a bundle: {why}")
        path = self.out / rel
        if os.path.islink(path) or not Path(os.path.realpath(path)).is_relative_to(self.root):
            raise DeployError(f"{path} (named by {named_by}) is a symbolic link or lies outside {self.out}; a "
                              "bundle takes only the files bitforge wrote inside OUT")
        if not path.is_file():
            raise DeployError(f"{path} (named by {named_by}) is missing; {remedy}")
        try:
            self.files[rel] = path.read_bytes()
        except OSError as e:
            raise DeployError(f"{path}: cannot read ({e.strerror or e})") from None
        return rel


def _protocol_version(man: dict, where: Path, redo: str) -> int:
    """The protocol version the device's Verilog speaks, as its manifest records it (an output folder compiled by
    an older bitforge keeps its version: the host talks to the device as it was built)."""
    version = man["device"].get("protocol_version", PROTOCOL_VERSION)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise DeployError(f"{where}: device.protocol_version should be a positive integer, found {version!r}; {redo}")
    return version


def _device(out: Path, man: dict, g: Optional[ir.Graph], redo: str, learner=None) -> Device:
    """The bundle's ``device`` section from ``rtl/manifest.json``: a compiled model's (``g``) stream words are
    the core's first and last tensors, a learner's its input and prediction formats (``x`` and ``y``)."""
    where = out / "rtl" / "manifest.json"
    section = man.get("device")
    if not isinstance(section, dict):
        raise DeployError(f"{where} has no 'device' section (the UART device wrapper that a board or the simulated "
                          f"board runs): {redo}")
    top, files = section.get("top"), section.get("files")
    if not isinstance(top, str) or not top or not isinstance(files, list) or not files:
        raise DeployError(f"{where}: device.top should be a module name and device.files a list of Verilog files; "
                          f"{redo}")
    if learner is not None:
        x, _, y = learner_words(learner)
        tensors = [x, y]
    else:
        tensors = []
        for key in ("input_tensor", "output_tensor"):
            name = man.get(key)
            if not isinstance(name, str) or name not in g.tensors:
                raise DeployError(f"{where}: {key} {name!r} is not a tensor of {out / 'model.json'}; {redo}")
            tensors.append(tensor_format(g.tensors[name]))
    numbers = {}
    for key in ("bus_width", "latency_cycles", "ii"):
        value = man.get(key, 8 if key == "bus_width" and learner is not None else None)  # learners: 8-bit tops
        if not isinstance(value, int) or isinstance(value, bool) or value < (0 if key == "latency_cycles" else 1):
            raise DeployError(f"{where}: {key} should be a {'non-negative' if key == 'latency_cycles' else 'positive'}"
                              f" integer, found {value!r}; {redo}")
        numbers[key] = value
    hello = section.get("hello", {})
    weights = man.get("weights", section.get("weights"))
    if not isinstance(hello, dict) or not (weights is None or isinstance(weights, dict)):
        raise DeployError(f"{where}: device.hello and weights should be JSON objects; {redo}")
    built_for = (weights or {}).get("arch_id")
    if learner is None and built_for is not None and built_for != identity.arch_id(g):
        raise DeployError(f"{where}: the Verilog was generated for architecture {built_for}, but "
                          f"{out / 'model.json'} has {identity.arch_id(g)}: the folder mixes two compiles; {redo}")
    return Device(top=top, files=tuple(files), input=tensors[0], output=tensors[1], hello=hello, weights=weights,
                  **numbers)


#: The board entry's numbers the host needs (the rest are copied when present).
_BOARD_NUMBERS = {"clock_hz": float, "baud": float, "clks_per_bit": int}


def _board(out: Path, report: dict, board: str, folder: _Folder, flow: Optional[str] = None) -> Board:
    flow = flow or f"bitforge flow {_model_hint(report)} --board {board} -o {out}"
    boards = report.get("boards")
    built = sorted(boards) if isinstance(boards, dict) else []
    entry = boards.get(board) if isinstance(boards, dict) else None
    if entry is None:
        raise DeployError(f"{out}: no bitstream for board {board!r} (built for: {', '.join(built) or 'no board'}); "
                          f"run '{flow}' first")
    where = f"{out / 'report.json'}: boards.{board}"
    if not isinstance(entry, dict):
        raise DeployError(f"{where} is not a JSON object; run '{flow}' again")
    if entry.get("status", "ok") != "ok" or not entry.get("bitstream"):
        raise DeployError(f"{where}: the board build did not produce a bitstream ({entry.get('error', 'no path')}); "
                          f"run '{flow}' again and fix what it reports")
    for key, kind in _BOARD_NUMBERS.items():
        value = entry.get(key)
        if not isinstance(value, (int, float) if kind is float else int) or isinstance(value, bool) or not value > 0:
            what = "positive number" if kind is float else "positive integer"
            raise DeployError(f"{where}.{key} should be a {what}, found {value!r}; run '{flow}' again")
    bitstream = folder.add(entry["bitstream"], f"{where}.bitstream", f"run '{flow}' again")
    recorded = entry.get("sha256")
    if isinstance(recorded, str) and hashlib.sha256(folder.files[bitstream]).hexdigest() != recorded.lower():
        raise DeployError(f"{out / bitstream}: its SHA-256 differs from the one the board flow recorded in {where}: "
                          f"the bitstream changed after it was built; run '{flow}' again")
    constraints = entry.get("constraints")
    constraints = (folder.add(constraints, f"{where}.constraints", f"run '{flow}' again")
                   if isinstance(constraints, str) else None)

    def opt(key: str, kind: type) -> Any:
        value = entry.get(key)
        return value if isinstance(value, kind) and not isinstance(value, bool) else None

    return Board(board=str(entry.get("board") or board), target=str(entry.get("target") or ""),
                 bitstream=bitstream, clock_hz=entry["clock_hz"], baud=entry["baud"],
                 clks_per_bit=entry["clks_per_bit"], top=opt("top", str),
                 core_clock_hz=opt("core_clock_hz", (int, float)),
                 baud_requested=opt("baud_requested", int), pll=opt("pll", dict), constraints=constraints,
                 fmax_mhz=opt("fmax_mhz", (int, float)), resources=opt("resources", dict) or {})


def collect(out: PathLike, board: Optional[str] = None) -> tuple[Manifest, dict[str, bytes]]:
    """The manifest (members not yet listed) and the member files of ``out``'s bundle."""
    out = Path(out)
    if not out.is_dir():
        raise DeployError(f"{out}: no such folder; deploy takes an output folder of 'bitforge compile MODEL --to "
                          "onnx --to rtl -o OUT' or 'bitforge flow'")
    from .learn.spec import find_learner

    if find_learner(out) == out:
        raise DeployError(f"{out}: an online learner's IR folder, not the output folder of 'bitforge learn'; deploy "
                          "the folder that 'bitforge learn TASK --rtl -o OUT' wrote (its learner/ is the initial state "
                          "the device starts from, its rtl/ the device)")
    if not is_bitforge_output(out):
        raise DeployError(f"{out}: not a bitforge output folder (no {MARKER}); deploy takes what 'bitforge compile "
                          "MODEL --to onnx --to rtl -o OUT', 'bitforge flow' or 'bitforge learn ... --rtl' wrote")
    if (out / "learner").is_dir() or find_learner(out) is not None:
        return _collect_learner(out, board)
    report = read_report(out)
    redo = f"compile it again with this bitforge: bitforge compile {_model_hint(report)} --to onnx --to rtl -o {out}"
    for name, why in (("model.json", "the IR"), ("model.onnx", "the CPU path's ONNX model (--to onnx)"),
                      ("rtl/manifest.json", "the Verilog (--to rtl)"), ("report.json", "the report")):
        if not (out / name).is_file():
            raise DeployError(f"{out / name} is missing ({why}); {redo}")
    g = ir.load(out)
    where = out / "rtl" / "manifest.json"
    man = read_json_object(where, DeployError, redo)
    device = _device(out, man, g, redo)
    folder = _folder_with(out, REQUIRED, man, where, device, redo)
    manifest = Manifest(bitforge_version=bitforge_version(), protocol_version=_protocol_version(man, where, redo),
                        model_name=g.name, model_id=identity.model_id(g), arch_id=identity.arch_id(g),
                        inputs=tuple(tensor_format(g.tensors[n]) for n in g.inputs),
                        outputs=tuple(tensor_format(g.tensors[n]) for n in g.outputs), device=device,
                        board=None if board is None else _board(out, report, board, folder))
    return manifest, folder.files


def _folder_with(out: Path, required, man: dict, where: Path, device: Device, redo: str) -> "_Folder":
    """The members every bundle of ``out`` takes: ``required``, then the Verilog the RTL manifest and the device
    name (each checked by ``_Folder.add``)."""
    folder = _Folder(out)
    for rel in required:
        folder.add(rel, "bitforge deploy", redo)
    rtl_files = man.get("files")
    if not isinstance(rtl_files, list):
        raise DeployError(f"{where}: 'files' should be a list of paths; {redo}")
    for rel in sorted(set(rtl_files) | set(device.files), key=str):
        folder.add(rel, str(where), redo)
    return folder


def _collect_learner(out: Path, board: Optional[str]) -> tuple[Manifest, dict[str, bytes]]:
    """An online learner's output folder (``bitforge learn --rtl`` or ``bitforge flow learn:TASK``): its initial
    state (``learner/``), its device's Verilog, the report and, with ``board``, the bitstream."""
    from .learn.spec import load_learner

    state = out / "learner"
    if not (state / "model.json").is_file():
        raise DeployError(f"{state / 'model.json'} is missing (the learner's initial state, which the device starts "
                          f"from); run 'bitforge learn TASK --rtl -o {out}' again")
    try:
        learner = load_learner(state)
    except BitforgeError as e:
        raise DeployError(f"{state}: not a readable learner ({e}); run 'bitforge learn TASK --rtl -o {out}' again") \
            from None
    spec = learner.spec
    redo = (f"run 'bitforge learn ... --rtl -o {out}' again with this bitforge (learn --rtl writes the device; "
            f"{spec.kind} {list(spec.sizes)}, lr_shift {spec.rule.lr_shift})")
    where = out / "rtl" / "manifest.json"
    if not where.is_file():
        raise DeployError(f"{where} is missing: the learner was run without --rtl, so there is no device to "
                          f"deploy; {redo}")
    if not (out / "report.json").is_file():
        raise DeployError(f"{out / 'report.json'} is missing; {redo}")
    report = read_report(out)
    man = read_json_object(where, DeployError, redo)
    device = _device(out, man, None, redo, learner)
    hello = device.hello
    mid, aid = identity.learner_model_id(learner), identity.learner_arch_id(learner)
    if (hello.get("arch_id"), hello.get("model_id")) != (aid[:32], mid[:32]):
        raise DeployError(f"{where}: the device's hello carries arch_id {hello.get('arch_id')} and model_id "
                          f"{hello.get('model_id')}, but {state} is arch_id {aid[:32]} and model_id {mid[:32]} (its "
                          "update rule, formats and initial state): the Verilog was generated for another learner "
                          f"or by an older bitforge; {redo}")
    words = (hello.get("state_word_bits"), hello.get("state_words"))
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in words):
        raise DeployError(f"{where}: device.hello.state_word_bits and state_words should be positive integers (a "
                          f"learner reads its state back), found {words[0]!r} and {words[1]!r}; {redo}")
    folder = _folder_with(out, LEARNER_REQUIRED, man, where, device, redo)
    info = learner_info(learner, *words)
    manifest = Manifest(bitforge_version=bitforge_version(), protocol_version=_protocol_version(man, where, redo),
                        model_name=learner.graph.name, model_id=mid, arch_id=aid, inputs=(info.x,),
                        outputs=(info.y,), device=device, learner=info,
                        board=None if board is None else _board(
                            out, report, board, folder, f"bitforge learn ... --board {board} -o {out}"))
    return manifest, folder.files


def write_bundle(out: PathLike, board: Optional[str], bundle_path: PathLike) -> Deployed:
    """Bundle ``out`` (for ``board``, or for the simulated board and the CPU when None) into ``bundle_path``,
    written atomically (``outputs.write_file``): a failed deploy leaves no file and an earlier bundle as it was."""
    out = Path(out)
    manifest, files = collect(out, board)
    if Path(os.path.realpath(bundle_path)).is_relative_to(Path(os.path.realpath(out))):
        raise DeployError(f"-o {bundle_path}: inside the output folder {out}, which deploy reads; write the bundle "
                          "beside it, e.g. -o model.bfb")
    data, bundle = pack(manifest, files)
    written = write_file(bundle_path, lambda f: f.write(data), inputs=(out,))
    return Deployed(path=written, sha256=bundle.sha256, size=bundle.size, manifest=bundle.manifest)
