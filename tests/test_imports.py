"""The package's import structure, read from the source (ast), so a violation is caught before it bites.

Rules (``docs/architecture.md``): the import graph of ``bitforge.toolchain``, ``bitforge.models`` and
``bitforge.runtime`` has no cycle (imports inside functions count: a lazy import only hides a cycle); library
code never imports the CLI (``toolchain/cli.py``); and no module imports another module's private (``_name``)
helpers.
"""
from __future__ import annotations

import ast
import importlib.util
from functools import cache
from pathlib import Path

PACKAGES = ("bitforge.toolchain", "bitforge.models", "bitforge.runtime")
CLI = "bitforge.toolchain.cli"


@cache
def modules() -> dict[str, Path]:
    """Dotted name -> source file of every module of :data:`PACKAGES` (a package is its ``__init__.py``)."""
    out = {}
    for pkg in PACKAGES:
        root = Path(importlib.util.find_spec(pkg).submodule_search_locations[0])
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join((pkg, *parts))] = path
    return out


def _is_package(name: str) -> bool:
    return modules()[name].name == "__init__.py"


def _resolve(importer: str, level: int, module: str | None) -> str:
    """The absolute name of ``from <.. module> import`` inside ``importer``."""
    if level == 0:
        return module or ""
    base = importer.split(".")
    if not _is_package(importer):
        base = base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _type_checking_only(node: ast.AST) -> bool:
    """``if TYPE_CHECKING:``: imports for annotations, never run."""
    return isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING"


def imports(name: str) -> list[tuple[str, int, list[str]]]:
    """(imported module, line, names taken from it) for every import statement that can run in module
    ``name``: at the top, inside functions and classes, not under ``if TYPE_CHECKING:``."""
    out = []
    todo = [ast.parse(modules()[name].read_text(), str(modules()[name]))]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append((_resolve(name, node.level, node.module), node.lineno, [a.name for a in node.names]))
        elif _type_checking_only(node):
            todo.extend(node.orelse)
        else:
            todo.extend(ast.iter_child_nodes(node))
    return sorted(out, key=lambda t: t[1])


@cache
def graph() -> dict[str, set[str]]:
    """Module -> the modules of :data:`PACKAGES` that importing it runs: the imported module, a submodule
    named in ``from pkg import sub``, and the packages above the imported module that are not also above the
    importer (those are already being imported when it runs)."""
    known = modules()
    edges: dict[str, set[str]] = {m: set() for m in known}
    for m in known:
        own = {m.rsplit(".", k)[0] for k in range(1, m.count(".") + 1)}
        for target, _, names in imports(m):
            hits = [target] + [f"{target}.{n}" for n in names]
            for t in hits:
                parts = t.split(".")
                for k in range(2, len(parts) + 1):
                    p = ".".join(parts[:k])
                    if p in known and p != m and p not in own:
                        edges[m].add(p)
    return edges


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a path that ends where it starts, or None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for t in sorted(edges[m]):
            if state.get(t) == 1:
                return path[path.index(t):] + [t]
            if t not in state and (c := visit(t)):
                return c
        state[m] = 2
        path.pop()
        return None

    for m in sorted(edges):
        if m not in state and (c := visit(m)):
            return c
    return None


def test_the_walk_sees_the_packages_and_their_imports():
    mods = modules()
    assert {"bitforge.toolchain.ir", "bitforge.toolchain.backends.rtl.generate", "bitforge.models.quant",
            "bitforge.runtime.formats.uniform", CLI} <= set(mods)
    assert "bitforge.toolchain.ir" in graph()["bitforge.toolchain.emulate"]
    assert "bitforge.toolchain.backends.rtl.stages" in graph()["bitforge.toolchain.backends.rtl.generate"]


def test_imports_under_type_checking_do_not_count():
    # validate.py names ir's classes in annotations only; ir calls validate at run time.
    assert "bitforge.toolchain.validate" in graph()["bitforge.toolchain.ir"]
    assert "bitforge.toolchain.ir" not in graph()["bitforge.toolchain.validate"]


def test_find_cycle_reports_a_cycle_and_accepts_a_tree():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycle():
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


#: The console script's entry point: it imports the CLI inside a try, so a Ctrl-C during that import is one line.
ENTRY = "bitforge.toolchain.entry"


def test_only_the_cli_imports_the_cli():
    offenders = [f"{m} ({modules()[m].name}:{line})" for m in modules() if m not in (CLI, ENTRY)
                 for target, line, names in imports(m)
                 if target == CLI or (target == "bitforge.toolchain" and "cli" in names)]
    assert not offenders, f"library modules import {CLI}: {', '.join(offenders)}"


def test_no_module_imports_another_modules_private_names():
    offenders = [f"{m}:{line} imports {n} from {target}" for m in modules() for target, line, names in imports(m)
                 for n in names if n.startswith("_") and not n.startswith("__") and target != m]
    assert not offenders, "private imports across modules:\n" + "\n".join(offenders)
