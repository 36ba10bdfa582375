"""One version: the installed package's (pyproject.toml), the API's and the changelog's."""

from __future__ import annotations

import json
import re
import tomllib
from importlib.metadata import version

from app import VERSION
from app.config import PROJECT_ROOT
from app.http.openapi import SPEC_PATH


def test_the_package_the_api_and_the_changelog_carry_one_version() -> None:
    declared = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert version("htm-service") == VERSION == declared
    assert json.loads(SPEC_PATH.read_text())["info"]["version"] == declared
    released = re.findall(
        r"^## \[(\d+\.\d+\.\d+)\]", (PROJECT_ROOT / "CHANGELOG.md").read_text(), re.M
    )
    assert released[0] == declared  # the newest release in the changelog is this one


def test_htm_version_prints_the_one_version() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=PROJECT_ROOT,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, f"htm {VERSION}\n", "")
