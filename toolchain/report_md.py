"""``report.md``: the run summarised as tables, rendered from ``report.json`` (which stays the source of truth)."""
from __future__ import annotations

import json
from pathlib import Path

import jinja2


class _Obj(dict):
    """Attribute access for the template (``r.graph.name``) over plain JSON dicts."""

    def __getattr__(self, key):
        v = self.get(key)
        return _Obj(v) if isinstance(v, dict) else v


def render(report: dict) -> str:
    env = jinja2.Environment(loader=jinja2.PackageLoader("bitforge.toolchain", "templates"), trim_blocks=True,
                             lstrip_blocks=True, keep_trailing_newline=True)
    wrap = lambda d: _Obj({k: wrap(v) if isinstance(v, dict) else ([wrap(x) if isinstance(x, dict) else x for x in v]  # noqa: E731
                                                                       if isinstance(v, list) else v)
                            for k, v in d.items()})
    return env.get_template("report.md.j2").render(r=wrap(report))


def write(folder: Path) -> None:
    """Re-render ``folder/report.md`` from ``folder/report.json``."""
    folder = Path(folder)
    (folder / "report.md").write_text(render(json.loads((folder / "report.json").read_text())))
