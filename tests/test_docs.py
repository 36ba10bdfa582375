"""The docs name only code that exists.

Scanned: README.md, ARCHITECTURE.md, docs/*.md and bench/README.md. In each, every inline
code span (`...`, outside fenced blocks) is classified, and what it names must exist:

- **A path**: a span without spaces that ends in `.py`, `.lua`, `.sql`, `.md` or `/` (a
  folder), optionally followed by `::test_name` (a pytest id). Spans that start with `/`,
  `.`, `$` or `~`, or hold `://`, are routes, data directories, shell variables or URLs and
  are skipped. A path whose first part is a top folder of the repository (`app/`, `tests/`,
  `bench/`, `chaos/`, `alembic/`, `evals/`, `docs/`, `openapi/`) must exist from the root; a
  bare name (`test_cluster.py`, `static/`) must be the name of some file or folder there;
  any other (`memories/adds.py`, `scripts/common.lua`, a package's relative form) must be the
  end of such a path. `<…>` and `…` in a path match anything
  (`scripts/context_<strategy>.lua`). With `::name`, one of the files found must define a
  function `name`. A bare name that is not a file but is a module's dotted name (`db.sql`)
  counts as that module.
- **A dotted Python name** (`planner.route`, `MemoryService.add_many`,
  `app.recall.query.SearchQuery`, `recall.caches.PgvectorVersions(forced=…)`,
  `GroupCommit.memories/adds/commits`), when its first part names an app module or package
  (by the last parts of its dotted path, e.g. `planner` or `recall.caches`; `app.…` must be
  the full path) or a class defined in app/. The longest such module prefix is taken, then
  each next part must be defined where the previous one points: in a module, a top-level
  class, function or assignment (not a name it merely imports; a package also offers its
  submodules and what its `__init__` imports); in a class, a method, a class attribute, a
  field, a `self.x` assignment, or one of those of its app base classes. Where several
  modules or classes share the name, one that defines the rest is enough. `a/b/c` after the
  last dot names alternatives, each checked. `name=` arguments in parentheses must be
  parameters of the class's `__init__` (or its fields, for a dataclass or a model) or of the
  function. A span whose first part is neither a module nor a class is skipped
  (`robot.group_id`, a column; `asyncio.to_thread`), unless a later part is CamelCase: then
  it names a class in a module that is gone (`http_protocol.HeaderDeadlineProtocol`) and fails.
- **A CamelCase name** standing alone (`SearchQuery`, `RepairQueue`: two humps or more):
  a class, function or assignment of app/, or a name app/ imports from a library.
- **Settings**: every `HTM_*` word anywhere in the text (fenced blocks included; `$HTM_…`
  shell variables aside) must be a field of `app.config.Settings`, except `HTM_TEST_*` and
  `HTM_BENCH_*`, which must appear in the sources of tests/ or bench/ respectively.

Relative markdown links (`[text](path)`, anchors aside) must point at files that exist, and
no document points at the old design page outside the repository (`../shared/DESIGN.md`).
Snake_case words standing alone (`mark_holders`, a field, a SQL function) are not checked.

Two more tests: docs/configuration.md is what app/config_docs.py renders from the settings,
and ARCHITECTURE.md's "Layers" table is tests/test_architecture.py's LAYERS.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "app"
TOP_FOLDERS = ("app", "tests", "bench", "chaos", "alembic", "evals", "docs", "openapi", "clients")
SKIP_DIRS = {"__pycache__", ".venv", ".git", ".htm", "node_modules", ".pytest_cache"}


def documents() -> list[Path]:
    found = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", ROOT / "bench" / "README.md"]
    found += sorted((ROOT / "docs").glob("*.md"))
    return [p for p in found if p.exists()]


# --- what app/ defines -----------------------------------------------------------------------


@dataclass
class ClassInfo:
    name: str
    bases: list[str]
    members: set[str] = field(default_factory=set)
    params: set[str] = field(default_factory=set)  # __init__'s, or the fields
    has_init: bool = False
    takes_kwargs: bool = False


@dataclass
class ModuleInfo:
    name: str  # app.recall.planner
    is_package: bool
    defined: set[str] = field(default_factory=set)  # classes, functions, assignments
    imported: set[str] = field(default_factory=set)
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
    classes: dict[str, ClassInfo] = field(default_factory=dict)


def _targets(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Assign):
        return [n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    if isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[set[str], bool]:
    a = fn.args
    names = {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]} - {"self", "cls"}
    return names, a.kwarg is not None


def _class(node: ast.ClassDef) -> ClassInfo:
    info = ClassInfo(node.name, [ast.unparse(b).split(".")[-1] for b in node.bases])
    fields: set[str] = set()
    for item in node.body:
        info.members |= set(_targets(item))
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            fields.add(item.target.id)
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            info.members.add(item.name)
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if item.name == "__init__":
                info.has_init = True
                info.params, info.takes_kwargs = _params(item)
            for sub in ast.walk(item):
                for t in getattr(sub, "targets", [getattr(sub, "target", None)]):
                    if (
                        isinstance(t, ast.Attribute)
                        and isinstance(t.value, ast.Name)
                        and t.value.id == "self"
                    ):
                        info.members.add(t.attr)
    if not info.has_init:
        info.params = fields
    return info


@cache
def app_index() -> dict[str, ModuleInfo]:
    modules: dict[str, ModuleInfo] = {}
    for path in sorted(APP.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if package else parts)
        info = ModuleInfo(name, package)
        tree = ast.parse(path.read_text())
        for node in tree.body:
            info.defined |= set(_targets(node))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                info.defined.add(node.name)
                info.functions[node.name] = node
            elif isinstance(node, ast.ClassDef):
                info.defined.add(node.name)
                info.classes[node.name] = _class(node)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                info.imported |= {(a.asname or a.name).split(".")[0] for a in node.names}
        modules[name] = info
    # A package offers its submodules, and what its __init__ imports.
    for name, info in modules.items():
        if info.is_package:
            prefix = name + "."
            info.defined |= {m[len(prefix) :] for m in modules if m.startswith(prefix)}
            info.defined = {d.split(".")[0] for d in info.defined} | info.imported
    return modules


@cache
def classes_by_name() -> dict[str, list[ClassInfo]]:
    found: dict[str, list[ClassInfo]] = {}
    for info in app_index().values():
        for c in info.classes.values():
            found.setdefault(c.name, []).append(c)
    return found


def class_members(c: ClassInfo, seen: frozenset[str] = frozenset()) -> set[str]:
    members = set(c.members)
    for base in c.bases:
        if base not in seen:
            for b in classes_by_name().get(base, []):
                members |= class_members(b, seen | {c.name})
    return members


def class_params(c: ClassInfo) -> tuple[set[str], bool]:
    """What the constructor takes: its own __init__, else the nearest base's, plus the
    fields of every class on the way (dataclasses and models)."""
    if c.has_init:
        return c.params, c.takes_kwargs
    params, kwargs = set(c.params), False
    for base in c.bases:
        for b in classes_by_name().get(base, []):
            p, k = class_params(b)
            params |= p
            kwargs = kwargs or k
    return params, kwargs


def modules_ending_with(parts: list[str]) -> list[ModuleInfo]:
    """Modules whose dotted path ends with these parts (`app.…` must be the whole path)."""
    dotted = ".".join(parts)
    if parts[0] == "app":
        return [m for n, m in app_index().items() if n == dotted]
    return [m for n, m in app_index().items() if n == dotted or n.endswith("." + dotted)]


# --- resolving a span ------------------------------------------------------------------------

DOTTED = re.compile(
    r"^(?P<name>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?:/[A-Za-z_]\w*)*)(?:\((?P<args>[^()]*)\))?$"
)
CAMEL = re.compile(r"^(?P<name>[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+)(?:\((?P<args>[^()]*)\))?$")
PATH_END = re.compile(r"(\.py|\.lua|\.sql|\.md|/)(::\w+)?$")
SETTING = re.compile(r"(?<![$\w])HTM_[A-Z0-9_]*[A-Z0-9]")


def keywords(args: str | None) -> set[str]:
    return set(re.findall(r"(?:^|,)\s*(\w+)\s*=", args or ""))


def resolve_in_class(classes: list[ClassInfo], rest: list[str], kw: set[str]) -> bool:
    if not rest:
        return any(kw <= p or k for p, k in map(class_params, classes))
    for c in classes:
        if rest[0] in class_members(c):
            nested = classes_by_name().get(rest[0], [])
            if len(rest) == 1:
                if not kw:
                    return True
                if nested and resolve_in_class(nested, [], kw):
                    return True
                continue
            if nested and resolve_in_class(nested, rest[1:], kw):
                return True
    return False


def resolve_in_module(module: ModuleInfo, rest: list[str], kw: set[str]) -> bool:
    head, tail = rest[0], rest[1:]
    if head not in module.defined:
        return False
    if module.is_package and (sub := app_index().get(f"{module.name}.{head}")):
        return not tail or resolve_in_module(sub, tail, kw)
    if head in module.classes:
        return resolve_in_class([module.classes[head]], tail, kw)
    if head in module.functions:
        params, kwargs = _params(module.functions[head])
        return not tail and (kwargs or kw <= params)
    if module.is_package:  # a name its __init__ imports: look it up by its own name
        return resolve_name([head, *tail], kw) is not False
    return not tail and not kw  # a module-level assignment


def resolve_name(parts: list[str], kw: set[str]) -> bool | None:
    """True: defined; False: not defined; None: not a reference to app's code."""
    for n in range(len(parts), 0, -1):
        modules = modules_ending_with(parts[:n])
        if modules:
            rest = parts[n:]
            if not rest:
                return not kw
            return any(resolve_in_module(m, rest, kw) for m in modules)
    if parts[0] in classes_by_name():
        return resolve_in_class(classes_by_name()[parts[0]], parts[1:], kw)
    return None


def check_dotted(span: str) -> str | None:
    m = DOTTED.match(span)
    if not m:
        return None
    *dots, last = m["name"].split(".")
    kw = keywords(m["args"])
    for alternative in last.split("/"):
        parts = [*dots, alternative]
        found = resolve_name(parts, kw)
        if found is None and any(CAMEL.match(p) for p in parts[1:]):
            found = False  # `gone_module.SomeClass`: a class's module must exist
        if found is False and kw and resolve_name(parts, set()):
            return f"{span}: {'.'.join(parts)} takes no {', '.join(sorted(kw))}"
        if found is False:
            return f"{span}: {'.'.join(parts)} is not defined in app/"
    return None


@cache
def imported_anywhere() -> set[str]:
    return set().union(*(m.imported for m in app_index().values()))


def check_camel(span: str) -> str | None:
    m = CAMEL.match(span)
    if not m:
        return None
    name, kw = m["name"], keywords(m["args"])
    if name in classes_by_name():
        if resolve_in_class(classes_by_name()[name], [], kw):
            return None
        return f"{span}: {name} takes no {', '.join(sorted(kw))}"
    for info in app_index().values():
        if name in info.functions:
            params, kwargs = _params(info.functions[name])
            if kwargs or kw <= params:
                return None
        elif name in info.defined and not kw:
            return None
    if name in imported_anywhere() and not kw:
        return None
    return f"{span}: no class, function or name {name} in app/"


@cache
def repository_paths() -> tuple[list[str], list[str]]:
    """Every file and folder of the repository's code and docs, relative to the root."""
    files: list[str] = []
    folders: list[str] = []
    for top in TOP_FOLDERS:
        for p in (ROOT / top).rglob("*"):
            if SKIP_DIRS & set(p.relative_to(ROOT).parts):
                continue
            (folders if p.is_dir() else files).append(p.relative_to(ROOT).as_posix())
        folders.append(top)
    files += [p.name for p in ROOT.iterdir() if p.is_file()]
    return files, folders


def is_path(span: str) -> bool:
    return not (
        " " in span
        or span.startswith(("/", ".", "$", "~"))
        or "://" in span
        or not PATH_END.search(span)
    )


def check_path(span: str) -> str | None:
    path, _, test = span.partition("::")
    folder = path.endswith("/")
    pattern = re.sub(r"<[^>]*>|…", "*", path.rstrip("/"))
    files, folders = repository_paths()
    candidates = folders if folder else files
    if "/" not in pattern:  # a file or folder name, anywhere
        hits = [c for c in candidates if fnmatch.fnmatchcase(c.rsplit("/", 1)[-1], pattern)]
    elif pattern.split("/")[0] in TOP_FOLDERS:  # from the root
        hits = [c for c in candidates if fnmatch.fnmatchcase(c, pattern)]
    else:  # the end of a path (a package's own relative form)
        hits = [c for c in candidates if fnmatch.fnmatchcase(c, f"*/{pattern}")]
    if not hits:
        return f"{span}: no such {'folder' if folder else 'file'}"
    if test:
        for h in hits:
            tree = ast.parse((ROOT / h).read_text())
            if any(
                isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == test
                for n in ast.walk(tree)
            ):
                return None
        return f"{span}: no test {test} in {', '.join(hits)}"
    return None


@cache
def settings_fields() -> set[str]:
    from app.config import Settings

    return {f"HTM_{name.upper()}" for name in Settings.model_fields}


def read_in(folder: str, name: str) -> bool:
    return any(name in p.read_text() for p in (ROOT / folder).rglob("*.py"))


def check_setting(name: str) -> str | None:
    if name.startswith("HTM_TEST_"):
        return None if read_in("tests", name) else f"{name}: not read by the tests"
    if name.startswith("HTM_BENCH_"):
        return None if read_in("bench", name) else f"{name}: not read by the bench"
    return None if name in settings_fields() else f"{name}: not a field of app.config.Settings"


SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)\s#]+)(#[^)]*)?\)")


def problems(doc: Path) -> list[str]:
    text = doc.read_text()
    prose = FENCE.sub("", text)
    found: list[str] = []
    for span in SPAN.findall(prose):
        span = span.strip()
        if is_path(span):
            why = check_path(span)
            if why and "/" not in span and resolve_name(span.split("."), set()):
                why = None  # a module's dotted name, `db.sql`
        else:
            why = check_dotted(span) or check_camel(span)
        if why is not None:
            found.append(why)
    for name in sorted(set(SETTING.findall(text))):
        if (why := check_setting(name)) is not None:
            found.append(why)
    for target, _ in LINK.findall(prose):
        if "://" not in target and not target.startswith("mailto:"):
            if not (doc.parent / target).exists():
                found.append(f"link ({target}): no such file")
    if "shared/DESIGN.md" in text:
        found.append("points at ../shared/DESIGN.md: the design lives in docs/design.md")
    return found


@pytest.mark.parametrize("doc", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_code_reference_in_the_docs_exists(doc: Path) -> None:
    assert problems(doc) == []


def test_the_configuration_page_is_what_the_settings_generate() -> None:
    from app.config_docs import DOC_PATH, render

    assert DOC_PATH.read_text() == render(), "docs/configuration.md is stale: run `make docs`"


def test_architecture_md_lists_the_layers_the_architecture_test_checks() -> None:
    """ARCHITECTURE.md's "Layers" table is tests/test_architecture.py's LAYERS, floor by floor."""
    from tests.test_architecture import LAYERS

    text = (ROOT / "ARCHITECTURE.md").read_text()
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|") for line in section.splitlines() if re.match(r"^\| \d+ \|", line)]
    assert [set(re.findall(r"`(\w+)`", row[2])) for row in rows] == LAYERS
