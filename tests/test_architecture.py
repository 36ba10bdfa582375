"""The shape ARCHITECTURE.md promises, checked: no import cycles between the app's modules,
only the entry points reach the composition root, and no module grows past 400 lines."""

from __future__ import annotations

import ast
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "app"
MAX_LINES = 400
# The modules that may import the composition root (app.lifespan) or the app (app.main).
ENTRY_POINTS = {"app.cli", "app.main"}


def module_name(path: Path) -> str:
    parts = path.relative_to(APP.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    """Every app module and the app modules it imports, at any depth of its code (imports
    inside functions count: they are cycles all the same, only deferred)."""
    modules = {module_name(p): p for p in APP.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            found |= {t for t in targets if t in modules and t != name}
        graph[name] = found
    return graph


def test_no_module_imports_the_composition_root_but_the_entry_points() -> None:
    graph = imports()
    offenders = sorted(
        (m, root)
        for m, deps in graph.items()
        for root in ("app.main", "app.lifespan")
        if root in deps and m not in ENTRY_POINTS
    )
    assert offenders == []


def test_no_import_cycles() -> None:
    graph = imports()
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                cycles.append([*path[path.index(d) :], d])
            elif d not in state:
                visit(d, [*path, d])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert cycles == []


def test_no_module_is_longer_than_400_lines() -> None:
    sizes = {
        str(p.relative_to(APP.parent)): len(p.read_text().splitlines())
        for p in [*APP.rglob("*.py"), *APP.rglob("*.lua")]
    }
    assert {p: n for p, n in sizes.items() if n > MAX_LINES} == {}
