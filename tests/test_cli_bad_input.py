"""Every `htm` command with each class of bad input (issue 29, defect 3): a name the API
refuses, a number out of range, a value not among the choices, a missing or malformed file, a
missing argument. Each is refused in one line on stderr (exit 2), never with a traceback, and
writes nothing: no namespace, no robot, no key, no memory appears."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from tests.transfer.conftest import htm  # noqa: F401  (the fixture)

BAD_ROBOT, BAD_NS = "bad robot!", "bad ns!"


def cases(tmp: Path) -> list[tuple[str, list[str], str]]:
    """(class of bad input, the command line, what its one line says)."""
    not_json = tmp / "not.jsonl"
    not_json.write_text("this is not JSON\n")
    missing = str(tmp / "missing")
    robot_rule = f"robot name '{BAD_ROBOT}' is not valid"
    ns_rule = f"namespace name '{BAD_NS}' is not valid"
    return [
        ("name", ["load", str(tmp), "--robot", BAD_ROBOT], robot_rule),
        ("name", ["export", "--robot", BAD_ROBOT], robot_rule),
        ("name", ["dedupe", "--robot", BAD_ROBOT, "--apply"], robot_rule),
        ("name", ["load", str(tmp), "--namespace", BAD_NS], ns_rule),
        ("name", ["export", "--namespace", BAD_NS], ns_rule),
        ("name", ["import", str(not_json), "--namespace", BAD_NS], ns_rule),
        ("name", ["reembed", "--namespace", BAD_NS], ns_rule),
        ("name", ["reindex", "--namespace", BAD_NS], ns_rule),
        ("name", ["dedupe", "--namespace", BAD_NS], ns_rule),
        ("name", ["mcp", "--namespace", BAD_NS], ns_rule),
        ("name", ["retention", "--namespace", BAD_NS], ns_rule),
        ("name", ["maintenance", "--namespace", BAD_NS], ns_rule),
        (
            "name",
            ["keys", "create", "--namespace", BAD_NS, "--role", "admin", "--name", "x"],
            ns_rule,
        ),
        ("name", ["keys", "list", "--namespace", BAD_NS], ns_rule),
        ("name", ["stats", "--namespace", BAD_NS], ns_rule),
        ("name", ["stats", "--robot", BAD_ROBOT], robot_rule),
        ("name", ["keys", "revoke", "1", "--namespace", BAD_NS], ns_rule),
        ("number", ["import", str(not_json), "--batch", "0"], "must be at least 1, not 0"),
        ("number", ["reembed", "--batch", "-5"], "must be at least 1, not -5"),
        ("number", ["reembed", "--batch", "many"], "must be a whole number, not 'many'"),
        ("number", ["reindex", "--batch", "0"], "must be at least 1, not 0"),
        ("number", ["stats", "--robot", "ann", "--days", "400"], "must be at most 366, not 400"),
        ("number", ["dedupe", "--threshold", "2"], "--threshold must be in (0, 1], not 2.0"),
        ("number", ["keys", "revoke", "first"], "invalid int value: 'first'"),
        ("number", ["serve", "--port", "http"], "invalid int value: 'http'"),
        ("number", ["serve", "--workers", "0"], "--workers: 0 is not between 1 and 64"),
        ("number", ["serve", "--workers", "two"], "--workers: 'two' is not a whole number"),
        ("choice", ["keys", "create", "--role", "god", "--name", "x"], "invalid choice: 'god'"),
        ("choice", ["dedupe", "--mode", "fuzzy"], "invalid choice: 'fuzzy'"),
        ("choice", ["frobnicate"], "invalid choice: 'frobnicate'"),
        ("missing", ["keys", "create", "--role", "admin"], "the following arguments are required"),
        ("missing", ["import"], "the following arguments are required: file"),
        ("file", ["import", missing], f"{missing}"),
        ("file", ["load", missing], f"{missing} is neither a file nor a folder"),
        ("file", ["import", str(not_json)], f"{not_json}:1: not JSON"),
        ("value", ["keys", "create", "--role", "admin", "--name", ""], "--name: String should"),
        (
            "value",
            ["keys", "create", "--role", "admin", "--name", "x", "--robot", "ann"],
            "an admin key acts for the whole namespace",
        ),
        (
            "value",
            ["keys", "create", "--role", "writer", "--name", "x", "--robot", "a b"],
            "--robot: String should match pattern",
        ),
    ]


async def _counts(database_url: str) -> tuple[int, ...]:
    engine = create_async_engine(database_url)
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT (SELECT count(*) FROM namespace), (SELECT count(*) FROM robot),"
                    " (SELECT count(*) FROM api_key), (SELECT count(*) FROM memory)"
                )
            )
        ).one()
    await engine.dispose()
    return tuple(row)


CASES = 38  # len(cases(...)): test_the_cases_cover_every_command checks it


@pytest.mark.parametrize("index", range(CASES))
async def test_each_command_refuses_each_class_of_bad_input_in_one_line(
    htm,  # noqa: F811
    database_url: str,
    tmp_path: Path,
    index: int,
) -> None:
    kind, argv, says = cases(tmp_path)[index]
    (tmp_path / "a.md").write_text("# A heading\n\nA line.\n")
    before = await _counts(database_url)
    out = await asyncio.to_thread(htm, *argv)
    lines = out.stderr.strip().splitlines()
    assert out.returncode in (1, 2), (kind, argv, out.returncode, out.stderr)
    assert len(lines) == 1 and lines[0].startswith("htm"), (kind, argv, out.stderr)
    assert says in lines[0], (kind, argv, lines[0])
    assert "Traceback" not in out.stderr + out.stdout
    assert await _counts(database_url) == before, (kind, argv)


def test_the_cases_cover_every_command(tmp_path: Path) -> None:
    from app.cli import build_parser

    assert len(cases(tmp_path)) == CASES  # each one run above
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    commands = set(sub.choices) - {"openapi", "migrate"}  # nothing to give them but a revision
    named = {argv[0] for _, argv, _ in cases(tmp_path)}
    assert commands <= named | {"serve"}, commands - named
