"""Reading a ``torch.export`` archive (``.pt2``) without running code that the archive carries.

``torch.export.load`` trusts its input: its documentation says "never load data from an untrusted source".
In torch 2.13 an archive can make it run code in five ways, all found by reading
``torch/export/pt2_archive/_package.py`` and ``torch/_export/serde/serialize.py``:

* payloads marked ``use_pickle`` in ``data/weights/*_weights_config.json`` or
  ``data/constants/*_constants_config.json`` are unpickled with ``torch.load(weights_only=False)``;
* constants named ``custom_obj_*`` (TorchScript objects) and ``opaque_obj_*`` (``pickle.loads``) are
  unpickled without restriction;
* the sample inputs (``data/sample_inputs/*.pt``) and legacy state dicts are read with
  ``torch.load(weights_only=True)`` and, when that refuses, again with ``weights_only=False``;
* symbolic sizes (``expr_str`` in ``models/*.json``) go through ``sympy.sympify``, which is ``eval``;
* pytree specs (``in_spec``/``out_spec``) import any module an enum or ``defaultdict`` context names, and
  ``data/aotinductor/`` holds shared libraries that ``torch.export.load`` opens.

:func:`read_archive` reads the file once, checks every entry against those paths, and returns the bytes it
checked, so the caller loads exactly what was inspected (the file cannot change in between). A weights-only
pickle is tried here with torch's restricted unpickler (the one torch tries first); torch's own load then
succeeds with it too and never reaches its unrestricted fallback. Archives that ``torch.export.save`` writes
for ordinary modules (plain tensors, static or symbolic shapes) pass.
"""
from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import zipfile
from pathlib import Path
from typing import Iterator

from ..errors import BitforgeError

#: What to do when an entry is refused (every message ends with it).
REMEDY = ("bitforge does not unpickle or evaluate code from model files; re-save the program with "
          "torch.export.save from a module whose parameters, buffers and example inputs are plain tensors, or "
          "export the model to ONNX")

#: The archive's own markers (torch/csrc/export/pt2_archive_constants.h).
ARCHIVE_FORMAT, ARCHIVE_VERSION = "pt2", "0"

# The constructors and assumption keywords that sympy's ``srepr`` writes for torch's symbolic sizes, and the
# functions torch's deserializer hands to sympify (ExportedProgramDeserializer.sympy_functions).
_SYMPY_NAMES = frozenset("""
    Symbol Integer Rational Float Add Mul Pow Max Min Abs Mod Eq Ne Lt Le Gt Ge StrictLessThan StrictGreaterThan
    LessThan GreaterThan Equality Unequality And Or Not Piecewise ExprCondPair floor ceiling Infinity
    NegativeInfinity IntInfinity NegativeIntInfinity BooleanTrue BooleanFalse true false oo zoo nan Half One Zero
    NegativeOne True False
    FloorDiv ModularIndexing Where PythonMod CleanDiv CeilToInt FloorToInt CeilDiv LShift RShift PowByNatural
    FloatPow FloatTrueDiv IntTrueDiv IsNonOverlappingAndDenseIndicator TruncToFloat TruncToInt RoundToInt
    RoundDecimal ToFloat Identity
    positive negative nonnegative nonpositive integer real finite infinite zero nonzero commutative even odd
    rational precision evaluate
""".split())
# One token of an srepr string: a quoted symbol name or number, a name, a number, or punctuation. Anything
# else (attribute access, subscripts, other quotes, operators beyond arithmetic) fails the match.
_SYMPY_TOKEN = re.compile(r"\s*(?:'(?:[A-Za-z]{1,4}\d+|[0-9.eE+-]+)'"  # a quoted symbol name or number
                          r"|([A-Za-z_][A-Za-z0-9_]*)"  # a name (checked against _SYMPY_NAMES)
                          r"|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|[-+*/(),=<>])")


class ArchiveError(BitforgeError):
    """An archive that bitforge will not load; the message names the entry, why, and what to do."""


def _unreadable(what: str) -> ArchiveError:
    return ArchiveError(f"cannot read as a torch.export archive: {what}; expected a .pt2 file written by "
                        "torch.export.save")


def _refused(what: str) -> ArchiveError:
    return ArchiveError(f"refused: {what}; {REMEDY}")


def read_archive(path: Path) -> bytes:
    """The bytes of ``path``, after checking that loading them runs no code from the archive."""
    data = Path(path).read_bytes()
    check_archive(data)
    return data


def check_archive(data: bytes) -> None:
    """Raise :class:`ArchiveError` unless ``data`` is a pt2 archive whose entries load without running code."""
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
        names = zf.namelist()
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise _unreadable(f"not a zip file ({e})") from None
    with zf:
        entries = _entries(names)

        def read(rel: str) -> bytes:
            try:
                return zf.read(entries[rel])
            except (KeyError, zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
                raise _unreadable(f"entry '{rel}' is missing or corrupt ({type(e).__name__}: {e})") from None

        def text(rel: str) -> str:
            try:
                return read(rel).decode("utf-8")
            except UnicodeDecodeError as e:
                raise _unreadable(f"entry '{rel}' is not UTF-8 text ({e})") from None

        fmt = text("archive_format").strip() if "archive_format" in entries else None
        version = text("archive_version").strip() if "archive_version" in entries else None
        if (fmt, version) != (ARCHIVE_FORMAT, ARCHIVE_VERSION):
            raise ArchiveError(f"cannot read as a torch.export archive: archive_format {fmt!r} and archive_version "
                               f"{version!r} are not this torch's ({ARCHIVE_FORMAT!r}, {ARCHIVE_VERSION!r}); "
                               "re-save it with torch.export.save")
        for rel in entries:
            if rel.startswith("data/aotinductor/"):
                raise _refused(f"entry '{rel}' is AOTInductor code (a compiled library that torch would load)")
        models = [rel[len("models/"):-len(".json")] for rel in entries
                  if rel.startswith("models/") and rel.endswith(".json")]
        for model in models:
            _check_program(f"models/{model}.json", text(f"models/{model}.json"))
            for kind in ("weights", "constants"):
                config = f"data/{kind}/{model}_{kind}_config.json"
                if config in entries:
                    _check_payload_config(config, text(config), kind)
                legacy = f"data/{kind}/{model}.pt"
                if legacy in entries:
                    _check_weights_only(legacy, read(legacy))
            sample = f"data/sample_inputs/{model}.pt"
            if sample in entries:
                _check_weights_only(sample, read(sample))


def _entries(names: list[str]) -> dict[str, str]:
    """``{name inside the archive: zip member name}``: torch's reader strips one root folder, whatever its name.
    A member outside that folder is refused: torch's fallback for older archives reads top-level members."""
    roots = {n.split("/", 1)[0] for n in names}
    top = sorted(n for n in names if "/" not in n)
    if len(roots) != 1 or top:
        raise _unreadable(f"its members are not all inside one root folder (top-level: {top[:5]}, roots: "
                          f"{sorted(roots)[:5]})")
    return {n.split("/", 1)[1]: n for n in names if not n.endswith("/")}


def _check_payload_config(rel: str, text: str, kind: str) -> None:
    try:
        items = list(json.loads(text)["config"].items())
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
        raise _unreadable(f"entry '{rel}' is not a payload config ({type(e).__name__}: {e})") from None
    for fqn, meta in items:
        if not isinstance(meta, dict):
            raise _unreadable(f"entry '{rel}': {kind} '{fqn}' has no payload description")
        path_name = str(meta.get("path_name", ""))
        if kind == "constants" and not path_name.startswith("tensor_"):
            raise _refused(f"entry 'data/constants/{path_name}' (constant '{fqn}') is a pickled object, not a "
                           "tensor, and unpickling it can run any code")
        if meta.get("use_pickle"):
            raise _refused(f"entry 'data/{kind}/{path_name}' ({kind[:-1]} '{fqn}') is a pickle that torch would "
                           "load with weights_only=False, which can run any code")


def _check_weights_only(rel: str, payload: bytes) -> None:
    """Torch reads this entry with its weights-only unpickler and, if that refuses, unpickles it unrestricted:
    refuse what the weights-only unpickler refuses."""
    import pickle

    import torch

    try:
        torch.load(io.BytesIO(payload), weights_only=True)
    except pickle.UnpicklingError as e:
        m = re.search(r"WeightsUnpickler error:\s*(.+?)(?:\. Please|\n|$)", str(e), re.S)
        why = " ".join((m.group(1) if m else str(e).splitlines()[0]).split())
        raise _refused(f"entry '{rel}' is a pickle that torch's weights-only loader refuses ({why}); torch would "
                       "then unpickle it without restriction, which can run any code") from None
    except Exception as e:  # noqa: BLE001 - torch.load raises many types for a corrupt payload
        raise _unreadable(f"entry '{rel}' is not a readable torch.save payload ({type(e).__name__}: {e})") from None


def _check_program(rel: str, text: str) -> None:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise _unreadable(f"entry '{rel}' is not valid JSON ({e})") from None
    for key, value in _items(doc):
        if key == "expr_str" and not _is_sympy_repr(value):
            raise _refused(f"entry '{rel}': symbolic size {_short(value)} is not an expression that torch.export "
                           "writes, and torch would evaluate it as Python")
        if key in ("in_spec", "out_spec") and isinstance(value, str) and (
                "__enum__" in value or "default_factory_module" in value):
            raise _refused(f"entry '{rel}': {key} names a Python module for torch to import (an enum or "
                           "defaultdict context)")


def _items(doc) -> Iterator[tuple[str, object]]:
    """Every ``(key, value)`` pair in a JSON document, depth first."""
    stack = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for k, v in node.items():
                yield k, v
                stack.append(v)
        elif isinstance(node, list):
            stack.extend(node)


def _is_sympy_repr(value) -> bool:
    """True when ``value`` is built only from sympy constructors, symbol names and numbers (what ``srepr`` of a
    torch symbolic size looks like): no attribute access, no other names, so sympify can only build sympy
    objects."""
    if not isinstance(value, str) or len(value) > 10_000:
        return False
    pos = 0
    while pos < len(value):
        m = _SYMPY_TOKEN.match(value, pos)
        if m is None or m.end() == pos:
            return not value[pos:].strip()
        if m.group(1) is not None and m.group(1) not in _SYMPY_NAMES:
            return False
        pos = m.end()
    return True


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


@contextlib.contextmanager
def quiet_torch_export_logs() -> Iterator[list[logging.LogRecord]]:
    """Keep ``torch.export``'s own log lines (a warning with a 20-line traceback when an archive does not
    deserialize) off the console; the records are collected so the caller can report their cause in one line."""
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Collect()
    saved = []
    for name in ("torch.export", "torch._export"):
        logger = logging.getLogger(name)
        saved.append((logger, logger.propagate, logger.handlers[:]))
        logger.handlers, logger.propagate = [handler], False
    try:
        yield records
    finally:
        for logger, propagate, handlers in saved:
            logger.handlers, logger.propagate = handlers, propagate


def logged_cause(records: list[logging.LogRecord]) -> str:
    """The exception behind the first collected record that carries one, as ``Type: message`` (or '')."""
    for r in records:
        if r.exc_info and r.exc_info[1] is not None:
            e = r.exc_info[1]
            return f"{type(e).__name__}: {' '.join(str(e).split())}"
    return ""
