"""The one Jinja2 environment factory: every generated text (Verilog, yosys scripts, pin files, Vivado
projects, report.md) is rendered with the same settings.

An undefined value is an error, not an empty string (a missing parameter must never become an empty port
width in Verilog), and block tags leave no stray blank lines. Templates live beside the module that fills them.
"""
from __future__ import annotations

import jinja2


def environment(*packages: str) -> jinja2.Environment:
    """An environment over the ``templates/`` folders of ``packages`` (searched in order)."""
    loaders = [jinja2.PackageLoader(p, "templates") for p in packages]
    return jinja2.Environment(loader=loaders[0] if len(loaders) == 1 else jinja2.ChoiceLoader(loaders),
                              undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True,
                              lstrip_blocks=True)
