"""Read-modify-write of ``OUT/report.json``, safe when stages run at once.

``bitforge flow`` simulates while it synthesises and routes (the tools are separate processes, and on two cores
the simulators and nextpnr each get one), and ``bench`` may implement several targets of one folder in
parallel: every writer takes an exclusive lock on ``OUT/.report.lock``, re-reads the report, changes its own
section and replaces the file atomically, so no writer loses another's section and no reader sees half a file.
"""
from __future__ import annotations

import fcntl
import json
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from ..errors import BitforgeError
from ..jsonfile import read_json_object


class ReportError(BitforgeError):
    """A ``report.json`` that is not the JSON object bitforge writes (edited by hand, truncated)."""


def read_report(out: Path) -> dict:
    """``OUT/report.json`` ({} when there is none). Commands that add to it call this before their long work, so a
    damaged report stops them at once rather than after minutes of simulation or place and route."""
    path = Path(out) / "report.json"
    if not path.is_file():
        return {}
    return read_json_object(path, ReportError, "compile the model into OUT again, or delete the file to start a new "
                            "report")


@contextmanager
def report_lock(out: Path) -> Iterator[None]:
    with open(Path(out) / ".report.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def update_report(out: Path, change: Callable[[dict], None]) -> dict:
    """Apply ``change`` to the report (in place) under the lock, write it atomically and refresh report.md."""
    out = Path(out)
    path = out / "report.json"
    with report_lock(out):
        report = read_report(out)
        change(report)
        tmp = path.with_name(".report.json.tmp")
        tmp.write_text(json.dumps(report, indent=2) + "\n")
        tmp.replace(path)
        if "graph" in report:  # a compiled model's folder: keep report.md in step with report.json
            from . import md as report_md
            report_md.write(out)
    return report
