"""Issue 29, defect 5: the embedded servers of a real `htm serve` come back by themselves.
SIGKILL its redis-server, then its postmaster: each is started again on its own data and
its own address (the URLs the service holds stay valid), adds answer 201 and place in working
memory again, nothing acknowledged is lost; /readyz says what the supervisor knows, also
when it gives up."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.embedded import servers_in
from app.embedded.supervisor import MAX_ATTEMPTS
from tests.htm_process import Served, leave_nothing_running, postmaster_pid

PLACED = {"admitted": True, "reason": "admitted", "evicted": []}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    s = Served(tmp_path / "data")
    try:
        yield s.start()
    finally:
        try:
            s.stop()  # leaves its servers as the last handle does: stopped
        finally:
            leave_nothing_running(s.data_dir)


def until_placed(s: Served, robot: str, content: str, limit_s: float = 60) -> dict:
    """Add until one answers 201 with the memory placed in working memory; its body."""
    deadline = time.monotonic() + limit_s
    n = 0
    while time.monotonic() < deadline:
        n += 1
        r = s.add(robot, f"{content} {n}", key=f"{content}-{n}")
        if r.status_code == 201 and r.json()["working_memory"] == PLACED:
            return dict(r.json())
        assert r.status_code in (201, 503), r.text  # down: a 503, never a 500
        time.sleep(0.1)
    raise AssertionError(f"adds never placed again:\n{s.log()}")


def until_running(s: Served, name: str, limit_s: float = 30) -> httpx.Response:
    """/readyz once the supervisor has recorded the restart it made (it may answer a request
    on the new server a moment before it records it)."""
    deadline = time.monotonic() + limit_s
    while True:
        r = httpx.get(f"{s.url}/readyz")
        if r.json()["embedded"][name]["state"] == "running" or time.monotonic() > deadline:
            return r
        time.sleep(0.1)


def test_a_killed_redis_is_started_again_on_its_port_and_adds_place_again(
    served: Served,
) -> None:
    assert served.add("a", "before", key="before").json()["working_memory"] == PLACED
    redis_dir = served.data_dir / "redis"
    [server] = servers_in(redis_dir)
    before = httpx.get(f"{served.url}/readyz").json()
    assert before["embedded"]["redis"] == {"state": "running", "restarts": 0}

    os.kill(server, signal.SIGKILL)
    until_placed(served, "a", "after")
    [again] = servers_in(redis_dir)
    assert again != server
    ready = until_running(served, "redis")
    assert ready.status_code == 200
    assert ready.json()["embedded"]["redis"] == {"state": "running", "restarts": 1}
    # The service's URL still reaches it: the same port as before.
    assert ready.json()["redis"] == before["redis"]
    items = httpx.get(f"{served.url}/v1/robots/a/working-memory").json()["items"]
    assert [i["key"] for i in items][:1] == ["before"]  # rebuilt, or kept by the AOF
    log = served.log()
    assert "embedded redis" in log and "attempt 1 of 5" in log and "is running again" in log
    assert served.stop() == 0
    assert servers_in(redis_dir) == []


def test_a_killed_postmaster_is_started_again_on_its_socket_and_adds_answer_201_again(
    served: Served,
) -> None:
    first = served.add("a", "before", key="before")
    assert first.status_code == 201
    postmaster = postmaster_pid(served.data_dir)

    os.kill(postmaster, signal.SIGKILL)
    until_placed(served, "a", "after")
    assert postmaster_pid(served.data_dir) != postmaster
    ready = until_running(served, "postgres")
    assert ready.status_code == 200
    assert ready.json()["embedded"]["postgres"] == {"state": "running", "restarts": 1}
    kept = httpx.get(f"{served.url}/v1/robots/a/memories/before")
    assert (kept.status_code, kept.json()["content"]) == (200, "before")
    log = served.log()
    assert "embedded postgres" in log and "is running again" in log
    new_postmaster = postmaster_pid(served.data_dir)
    assert served.stop() == 0
    with pytest.raises(FileNotFoundError):  # stopped with the service: the last handle
        postmaster_pid(served.data_dir)
    assert not _runs(new_postmaster)


def test_readyz_says_the_supervisor_is_restarting_redis_then_that_it_gave_up(
    served: Served,
) -> None:
    redis_dir = served.data_dir / "redis"
    [server] = servers_in(redis_dir)
    # An append-only file Redis refuses to load: every restart fails.
    with (redis_dir / "appendonly.aof").open("ab") as aof:
        aof.write(b"not a redis command\r\n")
    os.kill(server, signal.SIGKILL)
    seen = set()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        r = httpx.get(f"{served.url}/readyz")
        if r.status_code == 503:
            body = r.json()
            state = body["embedded"]["redis"]["state"]
            seen.add(state)
            if state == "gave_up":
                break
        time.sleep(0.2)
    # "running" too if a check ran before the supervisor's next look (every 0.5 s).
    assert {"restarting", "gave_up"} <= seen <= {"running", "restarting", "gave_up"}
    assert body["embedded"]["redis"]["attempts"] == MAX_ATTEMPTS
    assert "Bad file format" in body["embedded"]["redis"]["error"]
    assert set(body["unavailable"]) == {"redis"}
    assert "could not be restarted" in body["unavailable"]["redis"]
    assert body["embedded"]["postgres"] == {"state": "running", "restarts": 0}
    assert servers_in(redis_dir) == []  # given up: nothing runs there
    # Adds are still acknowledged: working memory waits for Redis.
    r = served.add("a", "while redis is gone")
    assert (r.status_code, r.json()["working_memory"]["reason"]) == (201, "unavailable")
    assert "could not be restarted after 5 attempts" in served.log()


def _runs(pid: int) -> bool:
    from app.embedded.processes import alive

    return alive(pid)
