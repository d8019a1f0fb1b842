"""Implementation flows: yosys synthesis, nextpnr place and route, bitstream packers, target database.

Entry point: :func:`bitforge.toolchain.flows.implement.implement`. Generated text (yosys scripts, pin files,
Vivado projects) comes from the Jinja2 templates in ``templates/``.
"""
from __future__ import annotations

from ..templating import environment


def render_template(name: str, **values: object) -> str:
    """Render ``templates/<name>``; an undefined value is an error, not an empty string."""
    return environment("bitforge.toolchain.flows").get_template(name).render(**values)
