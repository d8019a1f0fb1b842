"""``--designs a,b``-style lists of names for the benchmarks: one parser, one message."""
from __future__ import annotations

from typing import Iterable, Optional

__all__ = ["pick_names"]


def pick_names(text: Optional[str], choices: Iterable[str], flag: str, error: type[Exception],
               what: str = "design") -> list[str]:
    """``a,b`` -> the names in the order given; None or ``all`` -> every choice; anything else raises ``error``
    naming ``flag``, the unknown names and the choices."""
    choices = list(choices)
    if text is None or text.strip() == "all":
        return choices
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in choices]
    if unknown or not names:
        raise error(f"{flag}: unknown {what}(s) {', '.join(unknown) or repr(text)}; choose from {', '.join(choices)} "
                    "(comma-separated) or 'all'")
    return names
