"""The client packages (clients/python, clients/typescript): built from the committed spec
by clients/build.sh (what `make clients` and the release workflow run) into a wheel and an npm
tarball, installed into a clean environment (a new venv; a new npm project), and their
README's quickstart and agent loop run against a live service; the TypeScript ones compiled
with `tsc --strict` first. Their versions are the API's."""

from __future__ import annotations

import json
import re
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


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """clients/build.sh run on a copy of clients/ (the tree's generated files left alone),
    the spec beside it as in the repository: the directory of what it built."""
    if shutil.which("npm") is None:
        pytest.skip("needs node and npm")
    root = tmp_path_factory.mktemp("clients")
    generated = shutil.ignore_patterns(
        "htm_client", "build", "dist", "node_modules", "*.tgz", "schema.d.ts", "*.egg-info"
    )
    shutil.copytree(CLIENTS, root / "clients", ignore=generated)
    (root / "openapi").mkdir()
    shutil.copy(SPEC_PATH, root / "openapi" / "openapi.json")
    out = root / "dist"
    listed = run(["bash", str(root / "clients" / "build.sh"), sys.executable, str(out)], root)
    names = [f"htm-client-{VERSION}.tgz", f"htm_client-{VERSION}-py3-none-any.whl"]
    assert sorted(listed.split()) == sorted(p.name for p in out.iterdir()) == names
    return out


def check(out: list[str], admitted: str) -> None:
    """The made-up key and its admission, then a line per hit: this one among them."""
    key, said = out[0].split()
    assert said == admitted
    assert any(line.startswith(f"{key} ") and line.endswith(" Staging runs PostgreSQL 18.")
               for line in out[1:]), out  # fmt: skip


# What agent_loop.py and agent_loop.ts print: each statement held in working memory, each
# question answered by the statement it asks about, then the context they make.
AGENT_LOOP = [
    "remembered and holding: The staging database runs PostgreSQL 18.",
    "remembered and holding: Deploys happen on Fridays after the backup.",
    "When do deploys happen? → Deploys happen on Fridays after the backup.",
    "Which database runs staging? → The staging database runs PostgreSQL 18.",
]


def check_agent_loop(out: list[str]) -> None:
    assert out[:4] == AGENT_LOOP
    assert re.fullmatch(r"context: 2 items, \d+ tokens", out[4]) and len(out) == 5, out


def test_the_python_wheel_installs_and_runs_its_quickstart_and_agent_loop(
    client_server, built: Path, tmp_path: Path
) -> None:
    url, key = client_server
    run([sys.executable, "-m", "venv", str(tmp_path / "clean")], tmp_path)
    python = tmp_path / "clean" / "bin" / "python"
    wheel = built / f"htm_client-{VERSION}-py3-none-any.whl"
    run([str(python), "-m", "pip", "install", "-q", str(wheel)], tmp_path)
    pkg = CLIENTS / "python"
    check(run([str(python), str(pkg / "quickstart.py"), url, key], tmp_path).splitlines(), "True")
    loop = run([str(python), str(pkg / "agent_loop.py"), url, key, "agent-py"], tmp_path)
    check_agent_loop(loop.splitlines())


def readme_typescript() -> str:
    """The TypeScript README's quickstart, as a reader copies it."""
    text = (CLIENTS / "typescript" / "README.md").read_text()
    [block] = re.findall(r"```ts\n(.*?)```", text, re.S)
    return block


TSCONFIG = {
    "compilerOptions": {
        "target": "ES2022", "module": "NodeNext", "moduleResolution": "NodeNext",
        "strict": True, "noEmitOnError": True, "outDir": "dist", "types": [],
    },
    "files": ["quickstart.ts", "agent_loop.ts"],
}  # fmt: skip


def test_the_npm_tarball_installs_and_its_readme_and_agent_loop_pass_tsc_strict_and_run(
    client_server, built: Path, tmp_path: Path
) -> None:
    url, key = client_server
    project = tmp_path / "project"
    project.mkdir()
    (project / "package.json").write_text('{"name": "quickstart", "type": "module"}')
    typescript = json.loads((CLIENTS / "typescript" / "package.json").read_text())
    tsc = "typescript@" + typescript["devDependencies"]["typescript"]
    run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error",
         str(built / f"htm-client-{VERSION}.tgz"), tsc], project)  # fmt: skip
    # The README's lines as they are, but for the service's address and key.
    quickstart = readme_typescript()
    assert '"http://127.0.0.1:8000"' in quickstart and '"htm_…"' in quickstart
    quickstart = quickstart.replace('"http://127.0.0.1:8000"', json.dumps(url))
    (project / "quickstart.ts").write_text(quickstart.replace('"htm_…"', json.dumps(key)))
    shutil.copy(CLIENTS / "typescript" / "agent_loop.ts", project)
    (project / "tsconfig.json").write_text(json.dumps(TSCONFIG))
    run(["npx", "tsc", "-p", "tsconfig.json", "--strict"], project)
    check(run(["node", "dist/quickstart.js"], project).splitlines(), "true")
    loop = run(["node", "dist/agent_loop.js", url, key, "agent-ts"], project)
    check_agent_loop(loop.splitlines())


def test_the_release_workflow_publishes_what_build_sh_builds_on_a_version_tag() -> None:
    import yaml

    flow = yaml.safe_load((PROJECT_ROOT / ".github" / "workflows" / "release.yml").read_text())
    assert flow[True] == {"push": {"tags": ["v*"]}}  # YAML 1.1 reads the key `on` as True
    jobs = flow["jobs"]
    assert {name: job.get("needs") for name, job in jobs.items()} == {
        "build": None, "pypi": "build", "npm": "build", "github": ["pypi", "npm"]
    }  # fmt: skip
    build = [s.get("run", "") for s in jobs["build"]["steps"]]
    assert "clients/build.sh .venv/bin/python clients/dist" in build
    assert ".venv/bin/python -m pytest -q tests/clients/test_packages.py" in build
    uses = {name: [s.get("uses", "").split("@")[0] for s in j["steps"]] for name, j in jobs.items()}
    assert "pypa/gh-action-pypi-publish" in uses["pypi"]
    assert jobs["pypi"]["permissions"] == {"id-token": "write"}
    publish = [s for s in jobs["npm"]["steps"] if "npm publish" in s.get("run", "")]
    assert publish[0]["env"] == {"NODE_AUTH_TOKEN": "${{ secrets.NPM_TOKEN }}"}
    assert "dist/htm-client-*.tgz" in publish[0]["run"]
