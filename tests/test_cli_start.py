"""Issue 49, the CLI: `htm --version` and `htm --help` answer at once (lazy imports). Held
without timing: the process that answers them has imported none of the heavy libraries a
command uses (the web framework, the database drivers, pydantic, numpy, the model runtimes),
so its CPU time stays that of argparse (about 0.07 s against 1.1 s before)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from app import VERSION
from app.config import PROJECT_ROOT

HEAVY = {
    "fastapi", "starlette", "uvicorn", "sqlalchemy", "asyncpg", "alembic", "redis", "pydantic",
    "pydantic_settings", "numpy", "rich", "httpx", "torch", "onnxruntime", "tokenizers",
    "tiktoken", "transformers", "sentence_transformers", "opentelemetry",
}  # fmt: skip

# main() as `htm` runs it, then the top-level packages the process imported.
PROBE = """
import json, sys
from app.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules})))
"""

ANSWERED_AT_ONCE = [
    ["--version"],
    ["--help"],
    ["keys", "--help"],
    ["keys", "create", "--help"],
    ["stats", "--help"],
    ["export", "--help"],
    ["serve", "--help"],
]


def imported(*args: str, refused: bool = False) -> tuple[list[str], set[str]]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert (out.stderr != "") == refused, out.stderr
    *printed, modules = out.stdout.splitlines()
    return printed, set(json.loads(modules))


@pytest.mark.parametrize("args", ANSWERED_AT_ONCE, ids=" ".join)
def test_version_and_help_import_none_of_the_heavy_libraries(args: list[str]) -> None:
    printed, modules = imported(*args)
    assert modules & HEAVY == set()
    assert printed  # it did answer
    if args == ["--version"]:
        assert printed == [f"htm {VERSION}"]


def test_the_probe_sees_what_a_command_imports() -> None:
    """The same probe on a command that parses its settings: it does see pydantic (so the
    test above can fail)."""
    _, modules = imported("keys", "create", "--role", "god", "--name", "x", refused=True)
    assert "pydantic" not in modules  # refused by the parser: nothing imported yet
    _, modules = imported("openapi", "--check")
    assert {"fastapi", "pydantic", "sqlalchemy"} <= modules
