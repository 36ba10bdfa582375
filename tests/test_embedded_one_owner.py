"""Issue 29, defect 2: one owner per data directory. While `htm serve` (make run) serves,
`htm load`, `export`, `import` and `mcp` run on the same directory: every one of them uses
the servers already running (one redis-server and one postmaster serve the directory at
every moment), none stops them under another, and the service still places adds after."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from app.config import PROJECT_ROOT
from app.embedded import servers_in
from tests.htm_process import Served, htm, htm_env, leave_nothing_running, postmaster_pid

PLACED = {"admitted": True, "reason": "admitted", "evicted": []}


def postmasters(pgdata: Path) -> list[int]:
    """Live postmasters of pgdata (a backend's title is `postgres: ...`, without -D; a child
    the postmaster has just forked still carries its command line until it retitles itself,
    so a process whose parent is one of them is a child, not a second postmaster)."""
    found: dict[int, int] = {}
    for p in psutil.process_iter(["name", "cmdline", "status", "ppid"]):
        cmd = p.info["cmdline"] or []
        if (
            p.info["name"] == "postgres"
            and p.info["status"] != psutil.STATUS_ZOMBIE
            and str(pgdata) in cmd
        ):
            found[p.pid] = p.info["ppid"]
    return sorted(pid for pid, parent in found.items() if parent not in found)


class Watch:
    """Samples, every 20 ms, which redis-servers and postmasters serve the directory."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.seen: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            redis = tuple(servers_in(self.data_dir / "redis"))
            pg = tuple(postmasters(self.data_dir / "pgdata"))
            self.seen.add((redis, pg))
            self.samples += 1

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "data"
    yield d
    leave_nothing_running(d)  # a failed test leaves nothing running


async def remember_over_mcp(data_dir: Path, content: str) -> None:
    """`htm mcp` as an MCP client starts it: one tool call, then the client closes it."""
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "app.cli", "mcp"],
        env=htm_env(data_dir),
        cwd=str(PROJECT_ROOT),
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
        await s.initialize()
        added = await s.call_tool("remember", {"robot": "ann", "content": content})
        assert not added.is_error, added.content


def test_htm_commands_use_the_servers_of_a_running_htm_serve_and_leave_them_running(
    data_dir: Path, tmp_path: Path
) -> None:
    served = Served(data_dir).start()
    try:
        [redis] = servers_in(data_dir / "redis")
        postmaster = postmaster_pid(data_dir)
        docs = tmp_path / "docs"
        docs.mkdir()
        (docs / "notes.md").write_text("# Walrus\n\nTusks.\n\n# Tulip\n\nBulbs.\n")
        exported = tmp_path / "export.jsonl"
        with Watch(data_dir) as watch:
            loaded = htm(data_dir, "load", str(docs), "-q")
            assert loaded.returncode == 0, loaded.stderr
            assert "2 added" in loaded.stdout
            out = htm(data_dir, "export", "--out", str(exported), "-q")
            assert out.returncode == 0, out.stderr
            imported = htm(data_dir, "import", str(exported), "--namespace", "copy", "-q")
            assert imported.returncode == 0, imported.stderr
            assert "2 added" in imported.stdout
            asyncio.run(remember_over_mcp(data_dir, "over stdio"))
        assert watch.samples > 50
        assert watch.seen == {((redis,), (postmaster,))}
        lines = exported.read_text().splitlines()
        records = [json.loads(x) for x in lines[1:]]
        # a memory's line has no `kind` (robots', settings' and links' lines have one)
        contents = sorted(r["content"] for r in records if "kind" not in r)
        assert contents == ["# Tulip\n\nBulbs.", "# Walrus\n\nTusks."]
        r = served.add("a", "after the commands")
        assert (r.status_code, r.json()["working_memory"]) == (201, PLACED)
        wm = httpx.get(f"{served.url}/v1/robots/ann/working-memory").json()
        assert [i["content"] for i in wm["items"]] == ["over stdio"]
    finally:
        assert served.stop() == 0
    assert servers_in(data_dir / "redis") == []
    assert postmasters(data_dir / "pgdata") == []


def test_htm_serve_joins_the_servers_an_htm_mcp_started_and_keeps_them_after_it_exits(
    data_dir: Path,
) -> None:
    async def scenario() -> None:
        from mcp import ClientSession
        from mcp.client.stdio import StdioServerParameters, stdio_client

        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "app.cli", "mcp"],
            env=htm_env(data_dir),
            cwd=str(PROJECT_ROOT),
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            [started] = servers_in(data_dir / "redis")  # the MCP server started them
            served = await asyncio.to_thread(Served(data_dir).start)
            assert servers_in(data_dir / "redis") == [started]
            added = await s.call_tool("remember", {"robot": "ann", "content": "from mcp"})
            assert not added.is_error, added.content
        # The MCP client closed `htm mcp` (and waited for it): the servers stay for serve.
        assert served.proc is not None
        # Of this process's children only `htm serve` runs htm now (the suite's own servers,
        # started by its fixtures, are children too).
        htm_children = [
            c.pid for c in psutil.Process().children() if "app.cli" in " ".join(_cmdline(c))
        ]
        assert htm_children == [served.proc.pid]
        try:
            assert servers_in(data_dir / "redis") == [started]
            r = await asyncio.to_thread(served.add, "ann", "after mcp left")
            assert (r.status_code, r.json()["working_memory"]) == (201, PLACED)
        finally:
            assert await asyncio.to_thread(served.stop) == 0

    asyncio.run(scenario())
    assert servers_in(data_dir / "redis") == []
    assert postmasters(data_dir / "pgdata") == []


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return []
