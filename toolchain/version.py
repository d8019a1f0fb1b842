"""bitforge's own version, as every artefact that records it (markers, ONNX metadata, bundles, a device's hello)
writes it: the installed distribution's, or ``unknown`` for a source tree that is not installed."""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def bitforge_version() -> str:
    try:
        return version("bitforge")
    except PackageNotFoundError:
        return "unknown"
