"""The shape ARCHITECTURE.md promises, checked: no import cycles between the app's modules,
only the entry points reach the composition root, no module grows past 400 lines, and SQL
runs only in repositories."""

from __future__ import annotations

import ast
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "app"
MAX_LINES = 400
# The modules that may import the composition root (app.lifespan) or the app (app.main).
ENTRY_POINTS = {"app.cli", "app.main"}
# The modules that may run SQL without being a repository or infrastructure (app/db/), and why.
SQL_OUTSIDE_REPOSITORIES = {
    # The embedded server's own administration through psql: its database, shared_buffers,
    # the extension updates pg_upgrade leaves. It runs below every schema.
    "app.embedded",
}
# Receivers whose .execute() runs SQL: a DbSession, an asyncpg or SQLAlchemy connection
# (Redis pipelines have an execute() too).
SQL_RECEIVERS = ("session", "conn", "connection")


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


def is_repository(path: Path) -> bool:
    return path.name == "repository.py" or path.name.endswith("_repository.py")


def sql_calls(path: Path) -> list[str]:
    """Where a module builds or runs SQL: sql(…) / text(…) clauses (or imports those
    functions, under any name), .execute(…) on a session or connection, .psql(…)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        what = None
        if isinstance(node, ast.ImportFrom) and node.module in ("app.db.sql", "sqlalchemy"):
            if any(a.name in ("sql", "text") for a in node.names):
                what = f"from {node.module} import sql/text"
        elif isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in ("sql", "text"):
                what = f"{f.id}(…)"
            elif isinstance(f, ast.Attribute) and f.attr == "psql":
                what = ".psql(…)"
            elif isinstance(f, ast.Attribute) and f.attr in ("execute", "executemany"):
                v = f.value
                receiver = v.id if isinstance(v, ast.Name) else getattr(v, "attr", "")
                if receiver.endswith(SQL_RECEIVERS):
                    what = f"{receiver}.{f.attr}(…)"
        if what is not None:
            found.append((node.lineno, what))
    return [f"line {line}: {what}" for line, what in sorted(found)]


def test_sql_runs_only_in_repositories() -> None:
    """Outside `repository.py` / `*_repository.py` files, app/db/ (the session, the engine,
    migrations, the lease helper, the schema dump) and SQL_OUTSIDE_REPOSITORIES, no module
    builds or runs SQL: services, workers and rules call a repository."""
    offenders = {}
    for path in APP.rglob("*.py"):
        name = module_name(path)
        if (
            is_repository(path)
            or name == "app.db"
            or name.startswith("app.db.")
            or any(name == m or name.startswith(f"{m}.") for m in SQL_OUTSIDE_REPOSITORIES)
        ):
            continue
        if found := sql_calls(path):
            offenders[str(path.relative_to(APP.parent))] = found
    assert offenders == {}
