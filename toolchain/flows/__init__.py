"""Implementation flows: yosys synthesis, nextpnr place and route, bitstream packers, target database.

Entry point: :func:`bitforge.toolchain.flows.implement.implement`. Generated text (yosys scripts, pin files,
Vivado projects) comes from the Jinja2 templates in ``templates/``.
"""
from __future__ import annotations

import jinja2


def render_template(name: str, **values: object) -> str:
    """Render ``templates/<name>``; an undefined value is an error, not an empty string."""
    env = jinja2.Environment(loader=jinja2.PackageLoader("bitforge.toolchain.flows", "templates"),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True,
                             lstrip_blocks=True)
    return env.get_template(name).render(**values)
