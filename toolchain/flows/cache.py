"""Content-hashed stage caches: a rerun with nothing changed reuses each stage's outputs at once.

A stage's key hashes everything that can change its outputs: the bytes of its input files, the target,
seed, clock, tool versions and the exact command line. The record keeps the key, the sha256 of every
output file and the parsed results; it is valid only while the key matches and every output file still has
the recorded hash (an edited or deleted output reruns the stage). Records are written atomically after the
stage succeeded, so a failed or interrupted stage is never reused.
"""
from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from ..outputs import file_mode


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def stage_key(inputs: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of ``inputs`` (file digests, options, versions, command line)."""
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def write_atomic(path: Path, text: str | bytes) -> None:
    """Write ``text`` (str or bytes) to ``path`` through a temporary file and a rename: readers see old or new,
    never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, file_mode())  # mkstemp's 0o600 would leave a shared report unreadable to others
        with os.fdopen(fd, "wb" if isinstance(text, bytes) else "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclass
class StageRecord:
    stage: str
    key: str
    outputs: dict[str, str]  # file name in the work folder -> sha256
    result: dict
    seconds: float  # wall time of the run that produced the outputs


class StageCache:
    """Stage records of one work folder, in ``<work>/cache/<stage>.json``."""

    def __init__(self, work: Path):
        self.work = Path(work)
        self.folder = self.work / "cache"

    def _path(self, stage: str) -> Path:
        return self.folder / f"{stage}.json"

    def lookup(self, stage: str, key: str) -> Optional[StageRecord]:
        try:
            record = StageRecord(**json.loads(self._path(stage).read_text()))
        except (FileNotFoundError, json.JSONDecodeError, TypeError):
            return None
        if record.key != key:
            return None
        for name, digest in record.outputs.items():
            p = self.work / name
            if not p.is_file() or sha256_file(p) != digest:
                return None
        return record

    def store(self, stage: str, key: str, outputs: list[str], result: dict, seconds: float) -> StageRecord:
        record = StageRecord(stage, key, {n: sha256_file(self.work / n) for n in outputs}, result, round(seconds, 3))
        write_atomic(self._path(stage), json.dumps(asdict(record), indent=2, sort_keys=True) + "\n")
        return record

    def forget(self, stage: str) -> None:
        self._path(stage).unlink(missing_ok=True)


@dataclass
class StageRun:
    """How a stage went, for the report: ``seconds`` is this call (near zero when cached), ``tool_seconds``
    the run that made the outputs."""

    seconds: float
    tool_seconds: float
    cached: bool
    command: str
    log: str  # relative to the work folder

    def to_json(self) -> dict:
        return {"seconds": round(self.seconds, 3), "tool_seconds": self.tool_seconds, "cached": self.cached,
                "command": self.command, "log": self.log}


class StageNotCached(RuntimeError):
    """Raised inside :func:`cached_only` when a stage would have to run its tool."""


_CACHED_ONLY: contextvars.ContextVar[bool] = contextvars.ContextVar("bitforge_cached_only", default=False)


@contextlib.contextmanager
def cached_only():
    """Within this block stages only reuse records; one that would run its tool raises :class:`StageNotCached`
    (redrawing a benchmark's tables from finished flows without starting the missing ones)."""
    token = _CACHED_ONLY.set(True)
    try:
        yield
    finally:
        _CACHED_ONLY.reset(token)


def run_stage(cache: StageCache, stage: str, key: str, execute: Callable[[], tuple[list[str], dict, float]], *,
              command: str, log: str, label: str, progress: Callable[[str], None]) -> tuple[dict, StageRun]:
    """Reuse the stage's record when its key and outputs still match; otherwise ``execute()`` it.

    ``execute`` returns (output files, parsed result, tool seconds); it raises on failure, and then
    nothing is recorded.
    """
    t0 = time.perf_counter()
    record = cache.lookup(stage, key)
    if record is None:
        if _CACHED_ONLY.get():
            raise StageNotCached(f"{label}: no cached result for these inputs")
        cache.forget(stage)
        outputs, result, seconds = execute()
        record = cache.store(stage, key, outputs, result, seconds)
        cached = False
    else:
        progress(f"{label}: cached, inputs unchanged ({record.seconds:.1f} s saved)")
        cached = True
    return record.result, StageRun(time.perf_counter() - t0, record.seconds, cached, command, log)
