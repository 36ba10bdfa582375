"""Graceful shutdown of a real `htm serve`: on SIGTERM /readyz reads 503 at once, requests in
flight finish (within HTM_SHUTDOWN_TIMEOUT_S), a request that arrives meanwhile on a kept-alive
connection is answered 503, the lifespan then stops the background worker before the pools,
and the process exits 0. (Under load, one process and several: tests/processes.)"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from http.client import HTTPConnection, HTTPResponse
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from app.config import Settings
from app.db.engine import create_engine
from app.embedded import free_port
from tests.stubs import Recorded, StubServer

VECTOR = [1.0] + [0.0] * 383


@pytest.fixture(scope="module")
async def own_database(database_factory) -> str:  # type: ignore[no-untyped-def]
    """A database of its own: the served process runs the embedding worker, which would
    embed other tests' pending memories in the shared one."""
    from app.db.migrate import upgrade

    url = await database_factory()
    await asyncio.to_thread(upgrade, url)
    return url


def embeddings(req: Recorded) -> tuple[int, object]:
    texts = req.body["input"]
    return 200, {"data": [{"index": i, "embedding": VECTOR} for i in range(len(texts))]}


@pytest.fixture
async def served(own_database: str, redis_url: str, stub: StubServer, tmp_path: Path):  # type: ignore[no-untyped-def]
    """Start `htm serve` against the test servers; yields (url, start(**env) -> process)."""
    stub.reply = embeddings
    procs: list[subprocess.Popen[bytes]] = []
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    async def start(**env: str) -> subprocess.Popen[bytes]:
        environ = {
            **{k: v for k, v in os.environ.items() if not k.startswith("HTM_")},
            "HTM_DATABASE_URL": own_database,
            "HTM_REDIS_URL": redis_url,
            "HTM_PORT": str(port),
            "HTM_EMBEDDING_PROVIDER": "openai",
            "HTM_EMBEDDING_URL": stub.url,
            "HTM_EMBEDDING_BATCH_WAIT_MS": "0",
            "HTM_LOG_FORMAT": "text",  # the steps below are found as text
            **env,
        }
        log = open(tmp_path / f"serve-{len(procs)}.log", "wb")  # noqa: ASYNC230
        proc = subprocess.Popen(  # noqa: ASYNC220
            [sys.executable, "-m", "app.cli", "serve", "--no-migrate"],
            env=environ,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        proc.log_path = log.name  # type: ignore[attr-defined]
        procs.append(proc)
        async with httpx.AsyncClient() as http:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                assert proc.poll() is None, log_of(proc)
                try:
                    if (await http.get(f"{url}/readyz", timeout=2)).status_code == 200:
                        return proc
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.1)
        raise AssertionError("htm serve did not become ready")

    yield url, start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def log_of(proc: subprocess.Popen[bytes]) -> str:
    return Path(proc.log_path).read_text()  # type: ignore[attr-defined]


async def wait_until_embedding(stub: StubServer, content: str) -> None:
    """Until the add of `content` is inside its (slow) embedding call: in flight."""
    for _ in range(200):
        if any(r.body and r.body.get("input") == [content] for r in stub.requests):
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the add never reached the embedder")


async def stored(database_url: str, key: str) -> int:
    engine = create_engine(Settings(_env_file=None, database_url=database_url))
    try:
        async with engine.connect() as conn:
            query = text("SELECT count(*) FROM memory WHERE key = :k")
            return int((await conn.execute(query, {"k": key})).scalar_one())
    finally:
        await engine.dispose()


async def test_sigterm_flips_readiness_and_lets_a_request_in_flight_finish(
    served, stub: StubServer, own_database: str
) -> None:
    url, start = served
    grace, timeout = 1.5, 10.0
    proc = await start(HTM_SHUTDOWN_GRACE_S=str(grace), HTM_SHUTDOWN_TIMEOUT_S=str(timeout))
    stub.delay_s = 3.0
    async with httpx.AsyncClient(timeout=30) as http:
        body = {"content": "in flight at SIGTERM", "key": "in-flight"}
        add = asyncio.create_task(http.post(f"{url}/v1/robots/a/memories", json=body))
        await wait_until_embedding(stub, body["content"])
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        # The socket stays open for the grace period, and readiness says 503 from the start.
        ready = None
        while time.monotonic() - signalled < 1.0:
            ready = await http.get(f"{url}/readyz")
            if ready.status_code != 200:
                break
            await asyncio.sleep(0.02)
        assert ready is not None and time.monotonic() - signalled < grace
        assert ready.status_code == 503
        assert ready.headers["content-type"] == "application/problem+json"
        assert ready.json()["draining"] is True
        assert ready.json()["detail"] == "not ready: the service is shutting down"
        # Liveness still answers while draining.
        assert (await http.get(f"{url}/healthz")).status_code == 200

        added = await add
    assert added.status_code == 201, added.text
    assert added.json()["embedding_status"] == "ready"
    rc = await asyncio.to_thread(proc.wait, grace + timeout + 10)
    took = time.monotonic() - signalled
    log = log_of(proc)
    assert rc == 0, log
    assert 3.0 - 1.0 < took < grace + timeout, log  # waited for the add, not for the bound
    assert await stored(own_database, "in-flight") == 1
    # The order of the shutdown, as the process logged it.
    steps = [
        "SIGTERM: draining",
        "Shutting down",
        "draining: 1 request(s) in flight",
        "stopping background workers",
        "app.main: stopped",
    ]
    positions = [log.find(step) for step in steps]
    assert -1 not in positions and positions == sorted(positions), log


async def test_requests_still_running_after_the_shutdown_timeout_are_cut_off(
    served, stub: StubServer, own_database: str
) -> None:
    url, start = served
    proc = await start(
        HTM_SHUTDOWN_GRACE_S="0", HTM_SHUTDOWN_TIMEOUT_S="1", HTM_EMBEDDING_TIMEOUT_S="3"
    )
    stub.delay_s = 8.0
    async with httpx.AsyncClient(timeout=30) as http:
        body = {"content": "too slow to finish", "key": "cut-off"}
        add = asyncio.create_task(http.post(f"{url}/v1/robots/a/memories", json=body))
        await wait_until_embedding(stub, body["content"])
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = await asyncio.to_thread(proc.wait, 30)
        took = time.monotonic() - signalled
        with pytest.raises(httpx.HTTPError):
            (await add).raise_for_status()
    log = log_of(proc)
    assert rc == 0, log
    # Requests are cut off after the shutdown timeout (1 s); closing the embedder then waits
    # for its batch in flight, which the embedding timeout (3 s from the add's start) ends.
    # The stub would have answered after 8 s.
    assert 1.0 < took < 3.0 + 2.0, log
    assert "Application shutdown complete" in log and "app.main: stopped" in log
    assert "timeout graceful shutdown exceeded" in log
    assert await stored(own_database, "cut-off") == 0  # cancelled before anything was written


def kept_alive(port: int) -> HTTPConnection:
    """A connection that has had one answer and stays open (HTTP/1.1 keep-alive)."""
    conn = HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/healthz")
    answer = conn.getresponse()
    assert (answer.status, answer.read()) == (200, b'{"status":"ok"}')
    return conn


async def logged(proc: subprocess.Popen[bytes], line: str) -> None:
    for _ in range(500):
        if line in log_of(proc):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never logged {line!r}:\n{log_of(proc)}")


async def test_a_request_arriving_on_a_kept_alive_connection_during_the_drain_gets_503(
    served, stub: StubServer, own_database: str
) -> None:
    url, start = served
    proc = await start(HTM_SHUTDOWN_GRACE_S="0", HTM_SHUTDOWN_TIMEOUT_S="10")
    port = int(url.rsplit(":", 1)[1])
    stub.delay_s = 2.0
    late, idle = await asyncio.gather(*(asyncio.to_thread(kept_alive, port) for _ in "ab"))
    unused = HTTPConnection("127.0.0.1", port, timeout=30)  # connected, no request yet
    unused.connect()
    async with httpx.AsyncClient(timeout=30) as http:
        body = {"content": "in flight as another arrives", "key": "answered"}
        add = asyncio.create_task(http.post(f"{url}/v1/robots/a/memories", json=body))
        await wait_until_embedding(stub, body["content"])
        proc.send_signal(signal.SIGTERM)
        await logged(proc, "Shutting down")

        def refused_add(conn: HTTPConnection, key: str) -> HTTPResponse:
            conn.request(
                "POST",
                "/v1/robots/a/memories",
                body=json.dumps({"content": f"arrived during the drain: {key}", "key": key}),
                headers={"content-type": "application/json"},
            )
            return conn.getresponse()

        refused = await asyncio.to_thread(refused_add, late, "late")
        assert refused.status == 503
        assert refused.getheader("content-type") == "application/problem+json"
        assert refused.getheader("retry-after") == "1"
        assert refused.getheader("connection") == "close"
        assert json.loads(refused.read()) == {
            "type": "https://htm.dev/problems/unavailable",
            "title": "Service unavailable",
            "status": 503,
            "detail": "the service is shutting down; the request was not processed: retry it",
            "draining": True,
        }
        # The listener is closed: a new connection is refused, nothing sent.
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        added = await add
        # A connection opened before the drain is not closed before its first request,
        # even with nothing in flight any more: its client opened it to send one.
        await asyncio.sleep(1.0)
        first = await asyncio.to_thread(refused_add, unused, "first")
        assert (first.status, first.getheader("connection")) == (503, "close")
    assert (added.status_code, added.headers["connection"]) == (201, "close"), added.text
    # The connection that stayed idle is closed once nothing is in flight.
    assert idle.sock is not None and idle.sock.recv(1) == b""
    rc = await asyncio.to_thread(proc.wait, 30)
    log = log_of(proc)
    assert rc == 0, log
    assert "the drain answered 2 request(s) 503" in log
    assert await stored(own_database, "answered") == 1
    assert await stored(own_database, "late") == await stored(own_database, "first") == 0


async def test_a_second_sigterm_still_lets_the_request_in_flight_finish(
    served, stub: StubServer, own_database: str
) -> None:
    """systemd (KillMode=control-group) and `timeout` signal every process of the group, and
    `htm serve --workers`' supervisor sends each worker its own SIGTERM too."""
    url, start = served
    proc = await start(HTM_SHUTDOWN_GRACE_S="0", HTM_SHUTDOWN_TIMEOUT_S="10")
    stub.delay_s = 2.0
    async with httpx.AsyncClient(timeout=30) as http:
        body = {"content": "in flight at two SIGTERMs", "key": "twice"}
        add = asyncio.create_task(http.post(f"{url}/v1/robots/a/memories", json=body))
        await wait_until_embedding(stub, body["content"])
        proc.send_signal(signal.SIGTERM)
        await logged(proc, "Shutting down")
        proc.send_signal(signal.SIGTERM)
        added = await add
    assert added.status_code == 201, added.text
    rc = await asyncio.to_thread(proc.wait, 30)
    log = log_of(proc)
    assert rc == 0, log
    assert "stopping background workers" in log and "app.main: stopped" in log
    assert await stored(own_database, "twice") == 1
