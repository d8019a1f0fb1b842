"""``bitforge run``: a ``.npy`` batch through a deployed model on a device, the outputs to a ``.npy`` file.

The library half of the command (the CLI parses and prints): read and check the input file, open the bundle and
the device, stream the batch, write the result atomically (``toolchain.outputs.write_file``: a failed run
leaves no half-written file and an earlier one as it was).

An online learner's bundle runs a stream: with targets, every sample is predicted and then learned, in order,
as the golden run does (the predictions written are those made before each sample's update); without, it only
predicts, from the state the device holds. ``state`` writes the coefficients read back at the end.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Union

import numpy as np

from bitforge.toolchain.errors import BitforgeError
from bitforge.toolchain.outputs import check_file, write_file

from . import deployed
from .device import Device, InputError, LearnerState

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
    learned: bool = False
    state: Optional[Path] = None


def read_input(path: PathLike, option: str = "--input") -> np.ndarray:
    """A numeric ``.npy`` array (never unpickled), with a message naming the file when it is not one."""
    path = Path(path)
    if not path.is_file():
        raise BitforgeError(f"{path}: no such file; {option} takes a .npy array of shape (n, features) written by "
                            "numpy.save")
    try:
        x = np.load(path, allow_pickle=False)
    except (ValueError, EOFError, OSError) as e:
        why = ("it holds pickled Python objects, or is not a .npy file at all" if "allow_pickle" in str(e) else
               f"{type(e).__name__}: {e}")
        raise BitforgeError(f"{path}: not a readable .npy array ({why}); {option} takes a numeric array written by "
                            "numpy.save, shape (n, features)") from None
    if not isinstance(x, np.ndarray) or x.dtype.kind not in "biuf":
        raise BitforgeError(f"{path}: holds {getattr(x, 'dtype', type(x))}, not numbers; {option} takes a numeric "
                            "array of shape (n, features)")
    return x


def _npy_name(path: PathLike, suffix: str) -> str:
    return str(path) if str(path).endswith(suffix) else f"{path}{suffix}"  # as np.save / np.savez name it


def state_arrays(state: LearnerState) -> dict[str, np.ndarray]:
    """A read-back state as ``.npz`` arrays: ``layer<L>.<array>`` the real values (float64, exact: storage codes
    are at most 53 bits wide) and ``layer<L>.<array>.codes`` the storage codes (int64), shaped as the golden
    learner's state (a KAN's ``coeffs`` ``(out, in, G + k)``, an MLP's ``weight`` and ``bias``)."""
    out = {}
    for layer, (codes, values) in enumerate(zip(state.codes, state.values)):
        for name in codes:
            out[f"layer{layer}.{name}"] = np.asarray(values[name], dtype=np.float64)
            out[f"layer{layer}.{name}.codes"] = np.asarray(codes[name], dtype=np.int64)
    return out


def run_bundle(bundle: PathLike, input_path: PathLike, output: PathLike, *, device: str = "sim",
               baud: Optional[int] = None, expect_sha256: Optional[str] = None, codes: bool = False,
               timeout: Optional[float] = None, retries: Optional[int] = None,
               targets_path: Optional[PathLike] = None, state_path: Optional[PathLike] = None,
               progress: Optional[Callable[[int, int], None]] = None,
               note: Optional[Callable[[str], None]] = None) -> RunResult:
    """Run the ``.npy`` at ``input_path`` through ``bundle`` on ``device`` (``sim``, ``cpu`` or a serial port)
    and write the outputs (real values, or integer codes with ``codes``) to ``output``. An online learner's
    bundle learns from ``targets_path`` (one target row per input row; the outputs are the predictions made
    before each update) and, with ``state_path``, writes the state read back at the end (:func:`state_arrays`)."""
    x = read_input(input_path)
    t = None if targets_path is None else read_input(targets_path, "--targets")
    target = _npy_name(output, ".npy")
    state_target = None if state_path is None else _npy_name(state_path, ".npz")
    model = deployed.load(bundle, expect_sha256=expect_sha256)
    if model.learner is None and (t is not None or state_target is not None):
        raise BitforgeError(f"{bundle}: '{model.name}' is a compiled model, not an online learner: --targets and "
                            "--state need a learner's bundle (bitforge learn ... --rtl, then bitforge deploy)")
    check_file(target, inputs=(input_path, bundle))  # a bad -o or --state is named before the device runs
    if state_target is not None:
        check_file(state_target, inputs=(input_path, bundle), option="--state")
    kw = {} if retries is None else {"retries": retries}
    t0 = time.monotonic()
    with Device.open(model, device, baud=baud, timeout=timeout, progress=note, **kw) as dev:
        try:
            if t is not None:
                if len(t) != len(x):
                    raise InputError(f"{len(x)} input rows but {len(t)} target rows; give one target per sample")
                y = (dev.learn_codes(x, t.reshape(len(t), -1), progress=progress) if codes else
                     dev.learn(x, t, progress=progress))
            else:
                y = dev.predict_codes(x, progress=progress) if codes else dev.predict(x, progress=progress)
        except InputError as e:
            raise InputError(f"{input_path}" + ("" if t is None else f", {targets_path}") + f": {e}") from None
        state = None if state_target is None else dev.read_state()
        retried = None if dev.stats is None else dev.stats.retries
        where = "cpu" if dev.session is None else dev.session.link.name
        name = dev.model.name
    seconds = time.monotonic() - t0
    written = write_file(target, lambda f: np.save(f, y), inputs=(input_path, bundle))
    state_written = None
    if state is not None:
        state_written = write_file(state_target, lambda f: np.savez(f, **state_arrays(state)),
                                   inputs=(input_path, bundle), option="--state")
    samples = int(y.shape[0]) if y.ndim >= 2 else 1
    return RunResult(samples, written, tuple(y.shape), seconds, where, retried, name, t is not None, state_written)
