"""A data directory's embedded Redis (app/embedded/shared_redis.py), with real processes:
one redis-server per directory whoever asks, the last handle to leave stops it, a dead
process's handle does not keep it, a server found running is adopted, never doubled."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import redis

from app.config import PROJECT_ROOT
from app.embedded import EmbeddedRedis, SharedRedis, servers_in

HOLD = """
import sys
from pathlib import Path
from app.embedded import SharedRedis
h = SharedRedis(Path(sys.argv[1])).acquire()
print(h.port, flush=True)
try:
    sys.stdin.readline()
finally:
    h.release()
"""


class Holder:
    """Another process holding a handle until told to leave (a line on its stdin)."""

    def __init__(self, data_dir: Path, *, session: bool = False) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(data_dir)],
            cwd=PROJECT_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=session,  # as if started from a terminal of its own
        )
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())

    def leave(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        assert self.proc.wait(30) == 0

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "redis"
    yield d
    for pid in servers_in(d):  # a failed test leaves nothing running
        os.kill(pid, signal.SIGKILL)


def test_processes_on_one_directory_share_one_server_and_the_last_to_leave_stops_it(
    data_dir: Path,
) -> None:
    mine = SharedRedis(data_dir).acquire()
    [server] = servers_in(data_dir)
    other = Holder(data_dir)
    assert other.port == mine.port
    assert servers_in(data_dir) == [server]
    mine.release()  # the other process still uses it
    assert servers_in(data_dir) == [server]
    assert redis.Redis(port=other.port).ping() is True
    other.leave()
    assert servers_in(data_dir) == []
    assert not (data_dir / "server.json").exists()


def test_the_handle_of_a_killed_process_does_not_keep_the_server(data_dir: Path) -> None:
    other = Holder(data_dir)
    mine = SharedRedis(data_dir).acquire()
    assert mine.port == other.port
    other.kill()  # no release: its handle stays in handles.json
    mine.release()
    assert servers_in(data_dir) == []


def test_a_server_found_running_in_the_directory_is_adopted_not_doubled(data_dir: Path) -> None:
    # As an `htm` from before server.json started it.
    found = EmbeddedRedis(data_dir, persistent=True).start()
    assert found.process is not None
    try:
        mine = SharedRedis(data_dir).acquire()
        assert (mine.port, servers_in(data_dir)) == (found.port, [found.process.pid])
        mine.release()  # the last handle: it stops what it adopted
        assert found.process.wait(10) == 0
        assert servers_in(data_dir) == []
    finally:
        found.stop()


def test_a_ctrl_c_in_the_starters_terminal_does_not_stop_a_server_another_process_uses(
    data_dir: Path,
) -> None:
    starter = Holder(data_dir, session=True)
    [server] = servers_in(data_dir)
    assert os.getsid(server) not in (os.getsid(starter.proc.pid), os.getsid(0))
    mine = SharedRedis(data_dir).acquire()
    os.killpg(starter.proc.pid, signal.SIGINT)  # the terminal's Ctrl-C: its process group
    assert starter.proc.wait(30) != 0
    assert servers_in(data_dir) == [server]
    assert redis.Redis(port=mine.port).ping() is True
    mine.release()
    assert servers_in(data_dir) == []


def test_a_killed_server_is_started_again_on_its_port_from_its_append_only_file(
    data_dir: Path,
) -> None:
    mine = SharedRedis(data_dir).acquire()
    try:
        client = redis.Redis(port=mine.port)
        client.config_set("appendfsync", "always")  # the key is on disk before the kill
        client.set("k", "kept")
        [server] = servers_in(data_dir)
        os.kill(server, signal.SIGKILL)
        psutil.Process(server).wait(10)
        assert not mine.alive()
        assert mine.revive() is True
        assert mine.alive() and mine.revive() is False  # running: nothing to do
        [again] = servers_in(data_dir)
        assert again != server
        assert redis.Redis(port=mine.port).get("k") == b"kept"
    finally:
        mine.release()
    assert servers_in(data_dir) == []
