"""Import every compression-method module so that :data:`.api.METHODS` (and the checkpoint decoders they
register) is complete.

A module that does not exist (yet) is skipped and listed in :data:`MISSING`, so the CLI can say which methods are
unavailable and why; an import error *inside* a module that exists is a bug and is raised.
"""
from __future__ import annotations

import importlib

from .api import METHODS

METHOD_MODULES = ("uniform", "neuqi", "gptq", "lowrank", "osaq", "nvfp4", "littlebit")
MISSING: list[str] = []


def load_all() -> dict:
    """Import the method modules (once) and return the registry."""
    for mod in METHOD_MODULES:
        full = f"{__package__}.{mod}"
        try:
            importlib.import_module(full)
        except ModuleNotFoundError as e:
            if e.name != full:
                raise
            if mod not in MISSING:
                MISSING.append(mod)
    return METHODS


def describe_missing() -> str:
    load_all()
    if not MISSING:
        return ""
    return "not installed in this tree: " + ", ".join(f"toolchain/compress/{m}.py" for m in MISSING)


load_all()
