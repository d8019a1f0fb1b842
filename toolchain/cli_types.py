"""The argparse ``type=`` functions of every bitforge command: each number and path is checked while the
command line is parsed, before any model is loaded, with a message that says what was expected.

argparse turns an :class:`argparse.ArgumentTypeError` into ``bitforge CMD: error: argument --X: MESSAGE`` and
exit status 2, so the message names the option and the value; these functions only say what is wrong.
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Callable

#: Seeds go to numpy (``SeedSequence``, legacy ``RandomState``: below 2**32), torch and the simulators.
SEED_LIMIT = 2**32
#: Verification vectors (and benchmark batches) are held in memory at once, every intermediate tensor
#: included: ``/usr/bin/time -v bitforge compile jet-mlp --vectors N`` peaks at 484, 1,041 and 2,368 MB for
#: N = 10,000, 100,000 and 300,000, about 650 MB more per 100,000 vectors, so the cap costs ~7 GB there.
MAX_VECTORS = 1_000_000
MB_PER_100K_VECTORS = 650


def _whole(text: str) -> int:
    try:
        return int(str(text).replace("_", ""), 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def bounded_int(lo: int, hi: int | None = None, why: str = "") -> Callable[[str], int]:
    """A whole number in ``[lo, hi]`` (``hi`` None: no upper bound); ``why`` explains the upper bound."""
    def parse(text: str) -> int:
        value = _whole(text)
        if value < lo or (hi is not None and value > hi):
            bounds = f">= {lo:,}" if hi is None else f"from {lo:,} to {hi:,}"
            raise argparse.ArgumentTypeError(f"expected a whole number {bounds}, got {value:,}" +
                                             (f" ({why})" if why and hi is not None and value > hi else ""))
        return value
    parse.__name__ = "whole number"  # argparse's "invalid <name> value" for errors outside these checks
    return parse


positive_int = bounded_int(1)
non_negative_int = bounded_int(0)
seed = bounded_int(0, SEED_LIMIT - 1, "seeds are 32-bit: numpy's and the simulators' generators take no more")
vector_count = bounded_int(
    1, MAX_VECTORS, f"all vectors and every intermediate tensor are held in memory at once: about "
    f"{MB_PER_100K_VECTORS:,} MB per 100,000 vectors of jet-mlp; run again with another --seed for more")
repeat_count = bounded_int(1, 10_000, "a median of more runs measures nothing new")


def positive_float(text: str) -> float:
    """A finite number > 0 (a clock, a learning rate, a bit budget)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return value


def positive_int_list(text: str) -> tuple[int, ...]:
    """Comma-separated whole numbers >= 1, e.g. ``5,10,20``."""
    items = [t.strip() for t in str(text).split(",")]
    if not any(items):
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers >= 1 (e.g. 5,10,20), got {text!r}")
    out = []
    for t in items:
        if not t:
            continue
        try:
            value = int(t)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers >= 1 (e.g. 5,10,20), "
                                             f"got {t!r}" + (f" in {text!r}" if t != text else "")) from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"expected whole numbers >= 1, got {value}" +
                                             (f" in {text!r}" if t != text else ""))
        out.append(value)
    return tuple(out)


def output_file(text: str) -> str:
    """A file to write (``--json``): not an existing folder, and its folder must exist."""
    p = Path(text)
    if not text or p.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; give a file name, e.g. "
                                         f"{Path(text or '.') / 'result.json'}")
    if not p.parent.is_dir():
        raise argparse.ArgumentTypeError(f"the folder of {text!r} ({p.parent}) does not exist; create it first")
    return text
