"""The shape ARCHITECTURE.md promises, checked: packages stand in layers and import only
those below them (so no package cycle), no import cycles between the app's modules, only the
entry points reach the composition root, one place builds services, SQL runs only in
repositories, and no domain package imports FastAPI. (A module is one concept, whatever its
length: there is no line cap.)"""

from __future__ import annotations

import ast
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "app"
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


# The packages (and top-level modules) of app/, top to bottom: each imports only those of
# the layers below its own. A package not in the table fails the test: place it on purpose.
LAYERS: list[set[str]] = [
    {"cli", "config_docs"},  # entry points (config_docs: `make docs`)
    {"main"},
    {"mcp", "http", "transfer"},  # the ways in: MCP, HTTP, the CLI's commands
    {"problem"},  # problem+json, answered by HTTP and MCP alike
    {"lifespan", "observability"},  # the composition root; each request's id, metric, log line
    {"unit"},  # the unit of work: the one place that builds services
    {"components"},
    {"prompt", "maintenance"},  # domain: what is built from other domain packages...
    {"sessions", "summaries", "enrichment", "facts", "metrics", "retention", "profiles"},
    {"memories"},
    {"recall", "groups", "stats", "tags", "snapshots"},
    {"pools", "relationships", "entities", "state"},
    {"robots", "auth"},
    {"working_memory", "namespaces", "events", "timeframes", "health", "claims"},  # ...down to
    {"names", "conversation", "visibility"},
    {"db", "embeddings", "llm", "rerank", "tokens", "common", "workers"},  # infrastructure
    {"errors", "cache", "clock", "config", "embedded", "provider_http", "tracing", "invalidation"},
]
# The HTTP framework stays in the HTTP layer and the entry points (and the embedded server
# has no business with it either).
FASTAPI_ALLOWED = {"http", "observability", "problem", "main", "mcp", "cli"}
# What builds services: the unit of work alone (app/unit.py).
SERVICES = (
    "MemoryService", "MemoryReader", "VersionService", "Merger", "RecallService",
    "WorkingMemoryService", "Consolidator", "SessionService", "PromptService", "StatsService",
    "TagService", "GroupService", "ApiKeyService", "RobotService", "RetentionService",
    "PoolService", "MaintenanceService", "SnapshotService", "ProfileService", "LinkService",
    "FactService", "StateService",
)  # fmt: skip


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


def package_of(module: str) -> str:
    """app.memories.service -> memories; app.unit -> unit."""
    return module.split(".")[1]


def package_imports() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, deps in imports().items():
        if module == "app":
            continue
        src = package_of(module)
        graph.setdefault(src, set()).update(
            package_of(d) for d in deps if d != "app" and package_of(d) != src
        )
    return graph


def test_packages_import_only_the_layers_below_them() -> None:
    layer = {package: n for n, packages in enumerate(LAYERS) for package in packages}
    graph = package_imports()
    assert set(graph) - set(layer) == set(), "a package not placed in LAYERS"
    upward = sorted(
        (src, dst) for src, deps in graph.items() for dst in deps if layer[dst] <= layer[src]
    )
    assert upward == []


def test_only_the_http_layer_and_the_entry_points_import_fastapi() -> None:
    offenders = set()
    for path in APP.rglob("*.py"):
        if module_name(path) == "app":
            continue
        package = package_of(module_name(path))
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n.split(".")[0] in ("fastapi", "starlette") for n in names):
                if package not in FASTAPI_ALLOWED:
                    offenders.add(str(path.relative_to(APP.parent)))
    assert offenders == set()


def test_services_are_built_by_the_unit_of_work_alone() -> None:
    """A service's collaborators are named in one place (app/unit.py) for every way in."""
    offenders = set()
    for path in APP.rglob("*.py"):
        if module_name(path) == "app.unit":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                f = node.func
                called = f.id if isinstance(f, ast.Name) else getattr(f, "attr", "")
                if called in SERVICES:
                    offenders.add(f"{path.relative_to(APP.parent)}:{node.lineno}: {called}")
    assert offenders == set()
