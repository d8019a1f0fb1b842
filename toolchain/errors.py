"""The one base class of bitforge's user-facing errors.

Anything raised as a :class:`BitforgeError` (or another ``ValueError`` raised from a bitforge module) is a
problem with the user's input: the CLI prints its message and exits with status 2, with no traceback.
"""
from __future__ import annotations


class BitforgeError(ValueError):
    """Bad input: the message names the file, node or layer, what was expected and found, and what to do."""


class IRError(BitforgeError):
    """A graph that breaks one of the IR's rules; the message names the node or tensor (``bitforge.toolchain.ir``
    re-exports it: the IR's rules live in ``validate``, which must not import ``ir``)."""


class OutputError(BitforgeError):
    """An output path bitforge will not write: it would delete files bitforge did not write, or the input, or a
    folder such as ``/``, the home folder or the current one; or the file system cannot hold it there."""


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP ended the run. Raised like Ctrl-C's ``KeyboardInterrupt`` (a subclass of it), so every
    ``finally`` and ``except BaseException`` cleanup runs (temporary folders, child process groups); the CLI
    exits with 128 + ``signum``."""

    def __init__(self, signum: int):
        super().__init__(f"signal {signum}")
        self.signum = signum


class VerificationFailed(RuntimeError):
    """An executor disagreed with the golden model: a bug to report, never a tolerance to widen (exit 1)."""


def is_user_error(exc: BaseException) -> bool:
    """True for errors that describe bad input rather than a bug in bitforge."""
    return isinstance(exc, (BitforgeError, FileNotFoundError)) or (
        isinstance(exc, ValueError) and type(exc).__module__.startswith("bitforge.")
    )
