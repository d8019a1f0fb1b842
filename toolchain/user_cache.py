"""bitforge's per-user cache folder (compiled kernels, converted tokenizers, simulated boards).

Its own module so that light users (the host runtime's simulated board) need not import the heavy modules that
also cache things.
"""
from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """bitforge's cache folder: ``$BITFORGE_CACHE``, else ``$XDG_CACHE_HOME/bitforge``, else ``~/.cache/bitforge``."""
    if os.environ.get("BITFORGE_CACHE"):
        return Path(os.environ["BITFORGE_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "bitforge"
