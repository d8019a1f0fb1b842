"""``report.md``: the run summarised as tables, rendered from ``report.json`` (which stays the source of truth)."""
from __future__ import annotations

import json
from pathlib import Path

from ..templating import environment


class _Obj(dict):
    """Attribute access for the template (``r.graph.name``) over plain JSON dicts."""

    def __getattr__(self, key):
        return self.get(key)


def render(report: dict) -> str:
    return environment("bitforge.toolchain.report").get_template("report.md.j2").render(r=_wrap(report))


def _wrap(v):
    """Dicts (nested, also inside lists) become :class:`_Obj` for attribute access in the template."""
    if isinstance(v, dict):
        return _Obj({k: _wrap(x) for k, x in v.items()})
    if isinstance(v, list):
        return [_wrap(x) for x in v]
    return v


def write(folder: Path) -> None:
    """Re-render ``folder/report.md`` from ``folder/report.json``."""
    folder = Path(folder)
    (folder / "report.md").write_text(render(json.loads((folder / "report.json").read_text())))
