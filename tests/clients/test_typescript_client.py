"""A TypeScript client (openapi-typescript types + openapi-fetch, from the npm registry),
generated from the committed spec and type-checked with tsc --strict, runs
add → recall → context → stats → replace → versions → tags → restore → forget with node
against a live server."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from app.http.openapi import SPEC_PATH

TS_DIR = Path(__file__).parent / "ts"


def run(*args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=TS_DIR, capture_output=True, text=True, timeout=timeout)


@pytest.mark.skipif(shutil.which("npm") is None, reason="needs node and npm")
def test_generated_typescript_client_round_trip(client_server) -> None:
    url, key = client_server
    if not (TS_DIR / "node_modules" / ".package-lock.json").exists():
        installed = run("npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
        assert installed.returncode == 0, installed.stderr
    # Fields with defaults are optional in requests: --default-non-nullable=false says so.
    gen = run(
        "npx",
        "openapi-typescript",
        str(SPEC_PATH),
        "-o",
        "schema.d.ts",
        "--default-non-nullable=false",
    )
    assert gen.returncode == 0, gen.stderr
    tsc = run("npx", "tsc", "-p", "tsconfig.json")
    assert tsc.returncode == 0, tsc.stdout + tsc.stderr
    out = run("node", "dist/client.js", url, key, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"ok": True, "hits": 1, "tokens": 8}
