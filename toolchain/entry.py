"""The ``bitforge`` console script.

Importing the CLI takes about a second (numpy, rich, the argument parser); a Ctrl-C in that second must end the
run like any other: one line and exit status 130, not a traceback from inside an import. So the script's
entry point is this module, which imports nothing heavy itself.
"""
from __future__ import annotations

import sys


def main() -> int:
    try:
        from .cli import main as cli_main
    except KeyboardInterrupt:
        sys.stderr.write("stopped by SIGINT\n")
        return 130
    return cli_main()
