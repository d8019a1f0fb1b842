"""Reading the JSON files bitforge writes into an output folder (``report.json``, ``rtl/manifest.json``): a
damaged file stops a command at once with its path and what to do, not minutes later deep inside a stage."""
from __future__ import annotations

import json
from pathlib import Path

from .errors import BitforgeError


def read_json_object(path: Path, error: type[BitforgeError], remedy: str) -> dict:
    """The JSON object in ``path``; ``error(...)`` naming the file and ``remedy`` when it is not valid JSON or not
    an object. The caller checks that the file exists (a missing file means different things to different files)."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise error(f"{path}: not valid JSON ({e}); {remedy}") from None
    if not isinstance(doc, dict):
        raise error(f"{path}: expected a JSON object, found a {type(doc).__name__}; {remedy}")
    return doc
