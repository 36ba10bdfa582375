"""The curl lines of the docs, run line by line against a live server: each status must match.

docs/api.md's curl cookbook calls every route; the README's first requests are the first
lines a reader runs against `make run`. Both run here, the README's first, on one fresh
database."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess

import pytest

from app.config import PROJECT_ROOT

LINE = re.compile(r"^(curl .*?)\s+# → (\d{3})$")


def curls(page: str, section: str) -> list[tuple[str, int]]:
    """The `curl … # → status` lines of one section of a page."""
    text = (PROJECT_ROOT / page).read_text()
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return [(m[1], int(m[2])) for line in body.splitlines() if (m := LINE.match(line))]


def cookbook() -> list[tuple[str, int]]:
    return curls("docs/api.md", "curl cookbook")


def readme() -> list[tuple[str, int]]:
    return curls("README.md", "Three requests")


def test_the_readme_adds_a_memory_recalls_it_and_reads_context() -> None:
    routes = [re.findall(r"/v1/robots/alice/(\w+)", command) for command, _ in readme()]
    assert routes == [["memories"], ["recall"], ["context"]]


def test_the_cookbook_covers_every_route() -> None:
    import json

    from app.http.openapi import SPEC_PATH

    spec = json.loads(SPEC_PATH.read_text())
    commands = " ".join(c for c, _ in cookbook())
    for path, item in spec["paths"].items():
        pattern = re.sub(r"\{[^}]+\}", '[^/?" ]+', path) + r"(?=[?\"' ]|$)"
        for method in item:
            hits = [
                c
                for c, _ in cookbook()
                if re.search(r"\$HTM" + pattern, c)
                and (f"-X {method.upper()}" in c or (method == "get" and " -X " not in c))
            ]
            assert hits, f"docs/api.md's cookbook has no curl for {method.upper()} {path}"
    assert "$HTM" in commands


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
async def test_readme_curl_commands_return_the_documented_status(
    live_server_factory, database_factory
) -> None:
    from app.db.migrate import upgrade

    # A database of its own: the cookbook expects fresh ids (e.g. API key 1). The README's
    # lines come first, as a reader runs them; they take no key the cookbook takes.
    db = await database_factory()
    await asyncio.to_thread(upgrade, db)
    base = live_server_factory(database_url=db)
    for command, expected in readme() + cookbook():
        out = await asyncio.to_thread(
            subprocess.run,
            ["bash", "-c", f"{command} -o /dev/null -w '%{{http_code}}'"],
            env={"HTM": base, "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert out.stdout == str(expected), f"{command}\n→ {out.stdout} {out.stderr}"
