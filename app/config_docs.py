"""docs/configuration.md, generated from the settings: each `Settings` field's variable,
default, accepted values and description, under the section comments of app/config.py.

`python -m app.config_docs` writes it (also `make docs`); tests/test_docs.py fails when the
committed file differs from what this renders, so a setting is documented where it is
declared, in its Field's description.
"""

from __future__ import annotations

import ast
import re
import sys
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from annotated_types import Ge, Gt, Le, Lt
from pydantic import SecretStr
from pydantic.fields import FieldInfo

from app.config import PROJECT_ROOT, Settings

DOC_PATH = PROJECT_ROOT / "docs" / "configuration.md"
SECTION = re.compile(r"^\s*# --- (.+?) -+$")

HEADER = """\
# Configuration

Every setting is an environment variable with the `HTM_` prefix (or a line in `.env`), read
once into `app.config.Settings`; nothing else in the service reads the environment. A value
a setting does not accept stops `htm` at start, in one line.

This page is generated from the settings' declarations in app/config.py by `make docs`
(`python -m app.config_docs`): edit a description there, not here (`tests/test_docs.py`
fails when the two differ). How the embedded servers, your own PostgreSQL and Redis, auth and
shutdown fit together: [operations](operations.md).
"""


def sections() -> dict[str, str]:
    """Each field's section: the last `# --- title ---` comment above it in Settings."""
    source = Path(sys.modules[Settings.__module__].__file__ or "").read_text()
    lines = source.splitlines()
    cls = next(
        n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "Settings"
    )
    found: dict[str, str] = {}
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            above = (SECTION.match(line) for line in reversed(lines[: node.lineno - 1]))
            title = next((m[1] for m in above if m), "general")
            title = re.sub(r"\s*\(issue \d+\)", "", title)  # the history stays in git
            found[node.target.id] = title[0].upper() + title[1:]
    return found


def default(name: str, info: FieldInfo) -> str:
    value = info.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float):
        return f"`{number(value)}`"
    if isinstance(value, Path):
        try:
            return f"`./{value.relative_to(PROJECT_ROOT)}`"
        except ValueError:
            return f"`{value}`"
    return f"`{value}`"


def number(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def accepts(annotation: Any, info: FieldInfo) -> str:
    optional = False
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        optional = len(args) < len(get_args(annotation))
        annotation = args[0]
    if get_origin(annotation) is Literal:
        what = " / ".join(f"`{v}`" for v in get_args(annotation))
    elif annotation is bool:
        what = "`true` / `false`"
    elif annotation in (int, float):
        low = next((number(m.ge) for m in info.metadata if isinstance(m, Ge)), None)
        above = next((number(m.gt) for m in info.metadata if isinstance(m, Gt)), None)
        high = next((number(m.le) for m in info.metadata if isinstance(m, Le)), None)
        below = next((number(m.lt) for m in info.metadata if isinstance(m, Lt)), None)
        kind = "an integer" if annotation is int else "a number"
        bounds = [
            f"≥ {low}" if low is not None else f"> {above}" if above is not None else "",
            f"≤ {high}" if high is not None else f"< {below}" if below is not None else "",
        ]
        what = f"{kind} {', '.join(b for b in bounds if b)}".strip()
    elif annotation is SecretStr:
        what = "a secret (never logged)"
    elif annotation is Path:
        what = "a path"
    else:
        what = "text"
    return f"{what}, or unset" if optional else what


def render() -> str:
    out = [HEADER.rstrip()]
    current = None
    for name, info in Settings.model_fields.items():
        section = sections().get(name, "General")
        if section != current:
            out += [
                f"\n## {section}\n",
                "| variable | default | accepts | meaning |",
                "|---|---|---|---|",
            ]
            current = section
        meaning = (info.description or "").replace("|", "\\|")
        out.append(
            f"| `HTM_{name.upper()}` | {default(name, info)} | "
            f"{accepts(info.annotation, info)} | {meaning} |"
        )
    return "\n".join(out) + "\n"


def main() -> None:
    DOC_PATH.write_text(render())
    print(f"wrote {DOC_PATH.relative_to(PROJECT_ROOT)}")


if __name__ == "__main__":
    main()
