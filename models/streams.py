"""A user's learning stream from files: inputs X and targets Y, float, one row per sample, in time order.

``bitforge learn --data`` runs an online learner on it as on the built-in tasks. Accepted files:

- ``stream.npz`` with arrays ``X`` ``(n, d_in)`` and ``Y`` ``(n, d_out)`` (``x``/``y`` too; 1-D arrays are one
  feature), e.g. ``np.savez("stream.npz", X=x, Y=y)``;
- a pair of ``.npy`` files, inputs then targets (``--data x.npy,y.npy``);
- a ``.csv`` file, one sample per row: the inputs, then the last ``d_out`` columns the targets (``d_out`` is the
  last of ``--layers``, 1 by default); a header row (any non-numeric first row) is skipped.

Every problem is a :class:`~bitforge.models.online_tasks.TaskError` (exit status 2 on the command line) naming
the file and what to change: a missing array, wrong shapes, non-numeric data, NaN or Inf (with the first row),
inputs and targets of different lengths, or fewer samples than a stream needs.
"""
from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Optional, Union

import numpy as np

from .online_tasks import MIN_STREAM_SAMPLES, Task, TaskError, stream_task

__all__ = ["load_stream", "parse_data_argument"]

PathLike = Union[str, os.PathLike]
_FORMS = ("a .npz file with arrays X and Y, a pair of .npy files 'X.npy,Y.npy', or a .csv file (inputs, then "
          "the target columns)")


def parse_data_argument(text: str) -> tuple[Path, Optional[Path]]:
    """``--data``'s value: one file, or ``X.npy,Y.npy`` (inputs, targets)."""
    parts = [p.strip() for p in str(text).split(",")]
    if len(parts) == 1:
        return Path(parts[0]), None
    if len(parts) == 2 and all(parts):
        return Path(parts[0]), Path(parts[1])
    raise TaskError(f"--data {text!r}: expected {_FORMS}")


def load_stream(path: PathLike, targets: Optional[PathLike] = None, *, d_out: Optional[int] = None,
                samples: Optional[int] = None, name: Optional[str] = None) -> Task:
    """The stream in ``path`` (with ``targets`` for an ``.npy`` pair) as a prequential task.

    ``d_out``: target columns of a CSV file (default 1); for the array forms, the targets' width is checked
    against it when given. ``samples``: use the first ``samples`` rows only. ``name`` defaults to the file's stem.
    """
    path = Path(path)
    for p in (path, targets):
        if p is not None and not Path(p).is_file():
            raise TaskError(f"{p}: no such file; expected {_FORMS}")
    suffix = path.suffix.lower()
    if targets is not None:
        if suffix != ".npy" or Path(targets).suffix.lower() != ".npy":
            raise TaskError(f"{path}, {targets}: a pair of files must be two .npy arrays (inputs, targets)")
        x, y = _npy(path, "inputs"), _npy(Path(targets), "targets")
        where = f"{path}, {targets}"
    elif suffix == ".npz":
        x, y = _npz(path)
        where = str(path)
    elif suffix == ".npy":
        raise TaskError(f"{path}: a .npy file holds one array; give the inputs and the targets as a pair "
                        f"(--data {path},targets.npy) or both in one .npz (np.savez('stream.npz', X=x, Y=y))")
    elif suffix == ".csv":
        x, y = _csv(path, 1 if d_out is None else d_out)
        where = str(path)
    else:
        raise TaskError(f"{path}: unknown stream file type {suffix or '(none)'!r}; expected {_FORMS}")
    x, y = _two_d(x, "X (inputs)", where), _two_d(y, "Y (targets)", where)
    if x.shape[0] != y.shape[0]:
        raise TaskError(f"{where}: {x.shape[0]:,} input rows but {y.shape[0]:,} target rows; a stream has one "
                        "target row per input row")
    if d_out is not None and y.shape[1] != d_out:
        raise TaskError(f"{where}: the targets have {y.shape[1]} columns, the learner {d_out} outputs; make the "
                        f"last of --layers {y.shape[1]} (or give targets of shape (n, {d_out}))")
    if samples is not None:
        if samples < 1 or samples > x.shape[0]:
            raise TaskError(f"{where}: --samples {samples}, but the stream has {x.shape[0]:,} samples; use 1.."
                            f"{x.shape[0]:,}")
        x, y = x[:samples], y[:samples]
    for a, what in ((x, "inputs"), (y, "targets")):
        bad = ~np.isfinite(a).all(axis=1)
        if bad.any():
            rows = np.flatnonzero(bad)
            raise TaskError(f"{where}: {rows.size:,} sample(s) with NaN or Inf {what}, the first at row {rows[0]} "
                            "(counting from 0); remove or fill them")
    if x.shape[0] < MIN_STREAM_SAMPLES:
        raise TaskError(f"{where}: {x.shape[0]} samples; a stream needs at least {MIN_STREAM_SAMPLES} (a warm-up "
                        "and a window to score)")
    return stream_task(name or path.stem, x, y)


def _npy(path: Path, what: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError) as e:
        raise TaskError(f"{path}: not a readable .npy array of {what} ({e})") from None


def _npz(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (ValueError, OSError) as e:
        raise TaskError(f"{path}: not a readable .npz archive ({e})") from None
    found = {k.lower(): k for k in arrays}
    missing = [k for k in ("X", "Y") if k.lower() not in found]
    if missing:
        have = ", ".join(sorted(arrays)) or "no arrays"
        raise TaskError(f"{path}: holds {have}; expected arrays X (inputs, shape (n, d_in)) and Y (targets, shape "
                        "(n, d_out)), e.g. np.savez('stream.npz', X=x, Y=y)")
    return arrays[found["x"]], arrays[found["y"]]


def _csv(path: Path, d_out: int) -> tuple[np.ndarray, np.ndarray]:
    try:
        with open(path, newline="") as fh:
            rows = [r for r in csv.reader(fh) if any(c.strip() for c in r)]
    except (OSError, UnicodeDecodeError) as e:
        raise TaskError(f"{path}: cannot read it as CSV text ({e})") from None
    if rows and not _numeric(rows[0]):
        rows = rows[1:]  # a header
    if not rows:
        raise TaskError(f"{path}: no data rows; expected one sample per row: inputs, then {d_out} target column(s)")
    width = len(rows[0])
    if width < d_out + 1:
        raise TaskError(f"{path}: {width} column(s); expected the inputs, then {d_out} target column(s) (the last of "
                        "--layers)")
    values = np.empty((len(rows), width))
    for i, r in enumerate(rows):
        if len(r) != width:
            raise TaskError(f"{path}: data row {i + 1} has {len(r)} columns, the first row {width}")
        try:
            values[i] = [float(c) for c in r]
        except ValueError:
            raise TaskError(f"{path}: data row {i + 1} holds a value that is not a number: {r}") from None
    return values[:, :width - d_out], values[:, width - d_out:]


def _numeric(row: list[str]) -> bool:
    try:
        [float(c) for c in row]
    except ValueError:
        return False
    return True


def _two_d(a: np.ndarray, what: str, where: str) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype.kind not in "fiu":
        raise TaskError(f"{where}: {what} have dtype {a.dtype}; expected numbers (float)")
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2 or a.shape[1] < 1:
        raise TaskError(f"{where}: {what} have shape {a.shape}; expected (n, features) with one row per sample, "
                        "or (n,) for one feature")
    return a.astype(np.float64)
