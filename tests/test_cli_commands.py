"""Issue 29, defect 12 and "what to build" 8 (the CLI): every `htm` command works on a fresh
data directory (the ones that use the database migrate it first, as `htm serve` does), and
every failure is one line on stderr with a non-zero status, never a traceback; the embedded
servers a command started are stopped when it ends."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.embedded import free_port, servers_in
from tests.htm_process import htm, leave_nothing_running

HEADER = {
    "format": "htm-export",
    "version": 1,
    "namespace": "acme",
    "robot": None,
    "model": None,
    "dimension": 384,
    "embeddings": False,
    "exported_at": "2031-05-06T08:00:00Z",
}
RECORD = {
    "key": "k1",
    "content": "imported",
    "author": "ann",
    "created_at": "2031-05-06T08:00:00Z",
}


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "data"
    yield d
    leave_nothing_running(d)  # a failed test leaves nothing running


def files(tmp_path: Path) -> dict[str, str]:
    """An export file and a folder of markdown, for import and load."""
    export = tmp_path / "in.jsonl"
    export.write_text("\n".join(json.dumps(x) for x in (HEADER, RECORD)) + "\n")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Walrus\n\nTusks.\n")
    return {"file": str(export), "docs": str(docs)}


def no_traceback(out: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in out.stderr, out.stderr


# (arguments, exit status, what stdout or stderr says): each on a data directory never used.
FRESH = [
    (["keys", "create", "--namespace", "acme", "--role", "admin", "--name", "ops"], 0,
     "created key 1 (admin) in namespace acme"),
    (["keys", "list", "--namespace", "acme"], 0, ""),
    (["migrate"], 0, ""),
    (["import", "{file}", "-q"], 0,
     "imported into namespace acme: 1 added, 0 updated, 0 forgotten, 0 unchanged"),
    (["load", "{docs}", "-q"], 0, "1 added"),
    (["dedupe", "--mode", "exact"], 0, "0 clusters, 0 duplicates in namespace default"),
    # Failures that are the command's answer: one line, no traceback.
    (["keys", "revoke", "7"], 1, "htm keys: "),
    (["export"], 1, "htm export: namespace 'default' does not exist"),
    (["reembed", "-q"], 2, "htm reembed: no embedding model to re-embed with"),
    (["reindex", "-q"], 2, "htm reindex: no embedding model to embed the new search texts"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "status", "says"), FRESH, ids=[" ".join(f[0]) for f in FRESH])
def test_each_command_works_on_a_fresh_data_directory(
    data_dir: Path, tmp_path: Path, args: list[str], status: int, says: str
) -> None:
    paths = files(tmp_path)
    out = htm(data_dir, *[a.format(**paths) for a in args], log_level="warning")
    no_traceback(out)
    assert out.returncode == status, out.stderr
    if status == 0:
        assert says in out.stdout + out.stderr
    else:
        assert out.stderr.splitlines()[-1].startswith(says), out.stderr
    assert servers_in(data_dir / "redis") == []  # the last (only) handle stopped it
    assert not (data_dir / "pgdata" / "postmaster.pid").exists()


def test_the_readme_bootstrap_key_then_the_service_accepts_it(data_dir: Path) -> None:
    """`htm keys create` before any `make run`, then `htm mcp --key`: the key works."""
    created = htm(data_dir, "keys", "create", "--namespace", "acme", "--role", "admin",
                  "--name", "ops")  # fmt: skip
    assert created.returncode == 0, created.stderr
    key = created.stdout.splitlines()[-1]
    listed = htm(data_dir, "keys", "list", "--namespace", "acme")
    assert listed.returncode == 0, listed.stderr
    assert [line.split("\t")[2:] for line in listed.stdout.splitlines()] == [
        ["admin", "ops", "-", "active"]
    ]
    mcp = htm(data_dir, "mcp", "--key", key, stdin="", auth_enabled="true")
    assert mcp.returncode == 0, mcp.stderr


# Every command that reaches the database, with HTM_DATABASE_URL naming a port nobody serves.
UNREACHABLE = [
    ["serve"],
    ["migrate"],
    ["keys", "create", "--role", "admin", "--name", "ops"],
    ["keys", "list"],
    ["keys", "revoke", "1"],
    ["mcp"],
    ["export"],
    ["import", "{file}"],
    ["load", "{docs}"],
    ["reembed"],
    ["reindex"],
    ["dedupe"],
]


@pytest.mark.parametrize("args", UNREACHABLE, ids=lambda a: " ".join(a))
def test_each_command_says_in_one_line_that_the_database_is_unreachable(
    tmp_path: Path, args: list[str]
) -> None:
    port = free_port()
    data_dir = tmp_path / "data"
    paths = files(tmp_path)
    out = htm(
        data_dir,
        *[a.format(**paths) for a in args],
        stdin="",
        database_url=f"postgresql+asyncpg://postgres:secret@127.0.0.1:{port}/htm",
        redis_url=f"redis://127.0.0.1:{free_port()}/0",
        log_level="warning",
    )
    no_traceback(out)
    assert out.returncode == 1
    [line] = out.stderr.splitlines()
    assert line.startswith(
        f"htm {args[0]}: the database postgresql+asyncpg://postgres:***@127.0.0.1:{port}/htm "
        "could not be reached or migrated ("
    ), line
    assert line.endswith("check HTM_DATABASE_URL, or unset it to use the embedded server under "
                         "HTM_DATA_DIR")  # fmt: skip
    assert "secret" not in line
    assert not data_dir.exists()  # URLs given: no embedded server was started


def test_a_command_prints_only_its_answer_unless_asked_for_its_log(data_dir: Path) -> None:
    """Issue 49: no log records before a command's output (the embedded servers starting, 21
    migrations, the platformdirs warning), on a fresh data directory with no HTM_LOG_LEVEL;
    -v shows them."""
    out = htm(data_dir, "keys", "create", "--namespace", "acme", "--role", "admin",
              "--name", "ops")  # fmt: skip
    assert (out.returncode, out.stderr) == (0, "")
    first, shown, key = out.stdout.splitlines()
    assert (first, shown) == ("created key 1 (admin) in namespace acme",
                              "the secret is shown only now:")  # fmt: skip
    assert key.startswith("htm_") and len(key) == 47

    out = htm(data_dir, "keys", "list", "--namespace", "acme", "-v")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\t")[2:4] == ["admin", "ops"]
    logged = [line.split(" ", 3)[2:] for line in out.stderr.splitlines()]  # date time LEVEL ...
    assert ["INFO", f"app.embedded.services: embedded PostgreSQL in {data_dir}/pgdata"] in logged
    assert "XDG_RUNTIME_DIR" not in out.stderr
