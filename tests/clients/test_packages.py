"""The client packages (clients/python, clients/typescript): generated from the committed
spec as `make clients` does, built, installed into a clean environment (a new venv; a new npm
project) and their README's quickstart run against a live service. Their versions are the
API's."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from app import VERSION
from app.config import PROJECT_ROOT
from app.http.openapi import SPEC_PATH

CLIENTS = PROJECT_ROOT / "clients"


def run(args: list[str], cwd: Path, timeout: int = 600) -> str:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(args)}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_packages_carry_the_api_s_version() -> None:
    spec = json.loads(SPEC_PATH.read_text())["info"]["version"]
    python = tomllib.loads((CLIENTS / "python" / "pyproject.toml").read_text())
    typescript = json.loads((CLIENTS / "typescript" / "package.json").read_text())
    assert python["project"]["version"] == typescript["version"] == spec == VERSION


def check(out: list[str], admitted: str) -> None:
    """The made-up key and its admission, then a line per hit: this one among them."""
    key, said = out[0].split()
    assert key.startswith("m-") and said == admitted
    assert any(line.startswith(f"{key} ") and line.endswith(" Staging runs PostgreSQL 18.")
               for line in out[1:]), out  # fmt: skip


def test_the_python_package_builds_installs_and_runs_its_quickstart(
    client_server, tmp_path: Path
) -> None:
    url, key = client_server
    pkg = tmp_path / "python"
    shutil.copytree(CLIENTS / "python", pkg, ignore=shutil.ignore_patterns("htm_client", "build"))
    generate = [sys.executable, "-m", "openapi_python_client", "generate", "--path",
                str(SPEC_PATH), "--config", "generate.yml", "--meta", "none",
                "--output-path", "htm_client"]  # fmt: skip
    run(generate, pkg)
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"),
         str(pkg)], tmp_path)  # fmt: skip
    [wheel] = (tmp_path / "dist").glob("htm_client-*.whl")
    assert wheel.name == f"htm_client-{VERSION}-py3-none-any.whl"
    run([sys.executable, "-m", "venv", str(tmp_path / "clean")], tmp_path)
    python = tmp_path / "clean" / "bin" / "python"
    run([str(python), "-m", "pip", "install", "-q", str(wheel)], tmp_path)
    check(run([str(python), str(pkg / "quickstart.py"), url, key], tmp_path).splitlines(), "True")


@pytest.mark.skipif(shutil.which("npm") is None, reason="needs node and npm")
def test_the_typescript_package_packs_installs_and_runs_its_quickstart(
    client_server, tmp_path: Path
) -> None:
    url, key = client_server
    pkg = tmp_path / "typescript"
    generated = shutil.ignore_patterns("node_modules", "dist", "*.tgz", "schema.d.ts")
    shutil.copytree(CLIENTS / "typescript", pkg, ignore=generated)
    run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], pkg)
    run(["npx", "openapi-typescript", str(SPEC_PATH), "-o", "src/schema.d.ts",
         "--default-non-nullable=false"], pkg)  # fmt: skip
    run(["npm", "run", "build"], pkg)
    [tarball] = run(["npm", "pack", "--silent"], pkg).split()
    assert tarball == f"htm-client-{VERSION}.tgz"
    project = tmp_path / "project"
    project.mkdir()
    (project / "package.json").write_text('{"name": "quickstart", "type": "module"}')
    run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", str(pkg / tarball)],
        project)  # fmt: skip
    shutil.copy(pkg / "quickstart.mjs", project)
    check(run(["node", "quickstart.mjs", url, key], project).splitlines(), "true")
