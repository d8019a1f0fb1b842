"""``bitforge run``: a ``.npy`` batch through a deployed model on a device, the outputs to a ``.npy`` file.

The library half of the command (the CLI parses and prints): read and check the input file, open the bundle and
the device, stream the batch, write the result atomically (``toolchain.outputs.write_file``: a failed run
leaves no half-written file and an earlier one as it was).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Union

import numpy as np

from bitforge.toolchain.errors import BitforgeError
from bitforge.toolchain.outputs import write_file

from .device import Device, InputError

PathLike = Union[str, os.PathLike]


@dataclass(frozen=True)
class RunResult:
    """What a run did: samples, where, the output's shape, the time, and the link's retries (None on the CPU)."""

    samples: int
    output: Path
    shape: tuple[int, ...]
    seconds: float
    device: str
    retries: Optional[int]
    model_name: str


def read_input(path: PathLike) -> np.ndarray:
    """A numeric ``.npy`` array (never unpickled), with a message naming the file when it is not one."""
    path = Path(path)
    if not path.is_file():
        raise BitforgeError(f"{path}: no such file; --input takes a .npy array of shape (n, features) written by "
                            "numpy.save")
    try:
        x = np.load(path, allow_pickle=False)
    except (ValueError, EOFError, OSError) as e:
        why = ("it holds pickled Python objects, or is not a .npy file at all" if "allow_pickle" in str(e) else
               f"{type(e).__name__}: {e}")
        raise BitforgeError(f"{path}: not a readable .npy array ({why}); --input takes a numeric array written by "
                            "numpy.save, shape (n, features)") from None
    if not isinstance(x, np.ndarray) or x.dtype.kind not in "biuf":
        raise BitforgeError(f"{path}: holds {getattr(x, 'dtype', type(x))}, not numbers; --input takes a numeric "
                            "array of shape (n, features)")
    return x


def run_bundle(bundle: PathLike, input_path: PathLike, output: PathLike, *, device: str = "sim",
               baud: Optional[int] = None, expect_sha256: Optional[str] = None, codes: bool = False,
               timeout: Optional[float] = None, retries: Optional[int] = None,
               progress: Optional[Callable[[int, int], None]] = None,
               note: Optional[Callable[[str], None]] = None) -> RunResult:
    """Run the ``.npy`` at ``input_path`` through ``bundle`` on ``device`` (``sim``, ``cpu`` or a serial port)
    and write the outputs (real values, or integer codes with ``codes``) to ``output``."""
    x = read_input(input_path)
    target = str(output) if str(output).endswith(".npy") else f"{output}.npy"  # as np.save names it
    kw = {} if retries is None else {"retries": retries}
    t0 = time.monotonic()
    with Device.open(bundle, device, baud=baud, expect_sha256=expect_sha256, timeout=timeout, progress=note,
                     **kw) as dev:
        try:
            y = dev.predict_codes(x, progress=progress) if codes else dev.predict(x, progress=progress)
        except InputError as e:
            raise InputError(f"{input_path}: {e}") from None
        retried = None if dev.stats is None else dev.stats.retries
        where = "cpu" if dev.session is None else dev.session.link.name
        name = dev.model.name
    seconds = time.monotonic() - t0
    written = write_file(target, lambda f: np.save(f, y), inputs=(input_path, bundle))
    samples = int(y.shape[0]) if y.ndim >= 2 else 1
    return RunResult(samples, written, tuple(y.shape), seconds, where, retried, name)
