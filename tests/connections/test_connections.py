"""Connections against a real server (uvicorn in its own process, as `htm serve` runs it):
a body is never read before its caller is known, slow headers and slow bodies are cut off
with 408, and a client that leaves mid-body is a 499, never a 500."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.config import PROJECT_ROOT
from tests.auth.test_auth import make_key

PROBLEM = "application/problem+json"
LIMIT = 16 * 1024 * 1024  # HTM_MAX_BODY_BYTES' default
ADD = "/v1/robots/a/memories"
NS = f"t-{uuid.uuid4().hex[:10]}"


@dataclass
class Server:
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def rss(self) -> int:
        return psutil.Process(self.proc.pid).memory_info().rss

    def request_lines(self) -> list[dict]:
        lines = self.log.read_text(errors="replace").splitlines()
        logged = [json.loads(x) for x in lines if x.startswith("{")]
        return [x for x in logged if x["logger"] == "htm.request"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(database_url: str, redis_url: str, tmp_path_factory) -> Iterator[Server]:  # type: ignore[no-untyped-def]
    port = _free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("HTM_")},
        "HTM_DATABASE_URL": database_url,
        "HTM_REDIS_URL": redis_url,
        "HTM_EMBEDDING_PROVIDER": "none",
        "HTM_DB_POOL_SIZE": "5",
        "HTM_PORT": str(port),
        "HTM_AUTH_ENABLED": "true",
        "HTM_METRICS_PUBLIC": "true",
        "HTM_HEADER_TIMEOUT_S": "1",
        "HTM_BODY_TIMEOUT_S": "1",
        # Its background workers' queues span every namespace of the shared test database:
        # left on, a pass would summarise, repair or expire another test's rows mid-assertion.
        "HTM_SUMMARY_INTERVAL_S": "3600",
        "HTM_WORKING_MEMORY_REPAIR_INTERVAL_S": "3600",
        "HTM_SESSION_EXPIRY_INTERVAL_S": "3600",
    }
    with log.open("ab") as err:
        command = [sys.executable, "-m", "tests.connections.serving"]
        proc = subprocess.Popen(
            command, cwd=PROJECT_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err
        )
    server = Server(port, proc, log)
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if httpx.get(f"{server.url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the server did not become ready"
            time.sleep(0.2)
        yield server
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)


@pytest.fixture(scope="module")
async def writer(app_factory, server: Server) -> str:  # type: ignore[no-untyped-def]
    """A writer key of NS, made in the suite's database, which the server reads."""
    async with app_factory(auth_enabled=True) as client:
        return await make_key(client, NS, "writer")


# --- raw HTTP/1.1 --------------------------------------------------------------------------


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def problem(self) -> dict:
        assert self.headers["content-type"] == PROBLEM, self
        return json.loads(self.body)  # type: ignore[no-any-return]


def head(method: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: htm", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def connect(server: Server) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=30)


def send_quietly(sock: socket.socket, data: bytes) -> None:
    """Send what the server may already have stopped reading (it answered and closed)."""
    try:
        sock.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass


def answer_then_closed(sock: socket.socket) -> Answer:
    """The one response on this connection, read until the server closes it (a socket
    timeout, 30 s, fails the test: the connection was left open)."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass  # closed with the client's unread bytes still coming in: a reset, after the answer
    sock.close()
    raw_head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = raw_head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    assert headers.get("connection") == "close", raw_head
    assert len(body) == int(headers["content-length"])
    return Answer(int(status_line.split()[1]), headers, body)


def trickle(socks: list[socket.socket], data: bytes, stop: threading.Event) -> threading.Thread:
    """Send `data` a byte every 0.1 s on each socket, in the background, until each fails or
    `stop` is set (a slow client)."""

    def run() -> None:
        live = list(socks)
        for byte in data:
            if stop.is_set() or not live:
                return
            for s in list(live):
                try:
                    s.send(bytes([byte]))
                except OSError:
                    live.remove(s)
            time.sleep(0.1)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


# --- authentication before the body --------------------------------------------------------


def test_without_a_key_a_body_is_refused_401_before_it_is_read(server: Server) -> None:
    # 16 clients declare a body just under the limit, send 256 KiB of it and stall: each is
    # answered 401 at once and its connection closed, and the server holds none of them.
    declared = {"Content-Type": "application/json", "Content-Length": str(LIMIT - 1)}
    send_quietly(warm := connect(server), head("POST", ADD, declared))
    assert answer_then_closed(warm).status == 401
    before = server.rss()
    socks = [connect(server) for _ in range(16)]
    for s in socks:
        send_quietly(s, head("POST", ADD, declared) + b"x" * (256 * 1024))
    answers = [answer_then_closed(s) for s in socks]
    assert [a.status for a in answers] == [401] * 16
    assert {a.problem()["type"] for a in answers} == {"https://htm.dev/problems/unauthorized"}
    assert server.rss() - before < 16 * 2**20  # the 16 declared 256 MB between them


def test_a_declared_body_over_the_limit_is_413_before_anything_else(server: Server) -> None:
    s = connect(server)
    over = {"Content-Type": "application/json", "Content-Length": str(LIMIT + 1)}
    send_quietly(s, head("POST", ADD, over) + b"x" * 1024)
    a = answer_then_closed(s)
    assert (a.status, a.problem()["limit"]) == (413, LIMIT)


# --- read timeouts ---------------------------------------------------------------------------


def test_slow_headers_are_cut_off_with_408(server: Server) -> None:
    # 32 clients send their headers a byte at a time (each byte restarts uvicorn's own
    # keep-alive timer), one connects and sends nothing: HTM_HEADER_TIMEOUT_S is 1 s here.
    socks = [connect(server) for _ in range(33)]
    stop = threading.Event()
    trickle(socks[:32], head("POST", ADD, {"Content-Type": "application/json"}), stop)
    try:
        answers = [answer_then_closed(s) for s in socks]
    finally:
        stop.set()
    assert [a.status for a in answers] == [408] * 33
    assert {a.problem()["type"] for a in answers} == {"https://htm.dev/problems/request-timeout"}


def test_a_kept_alive_connection_idle_longer_than_the_header_deadline_still_serves(
    server: Server,
) -> None:
    # The deadline runs from a request's first byte: idle time between requests is
    # uvicorn's timeout_keep_alive (5 s), which connection pools count on.
    s = connect(server)
    for _ in range(2):
        s.sendall(head("GET", "/healthz", {}))
        raw = b""
        while b"\r\n\r\n" not in raw or not raw.endswith(b"}"):  # {"status":"ok"}
            chunk = s.recv(65536)
            assert chunk, raw  # closed by the server
            raw += chunk
        assert raw.startswith(b"HTTP/1.1 200 "), raw
        assert b"connection: close" not in raw.lower()
        time.sleep(1.5)  # HTM_HEADER_TIMEOUT_S is 1 s here
    s.close()


def test_headers_past_their_size_limit_are_431(server: Server) -> None:
    # uvicorn's httptools protocol would gather a header without bound.
    s = connect(server)
    send_quietly(s, b"GET /healthz HTTP/1.1\r\nHost: htm\r\nX-Big: " + b"a" * (128 * 1024))
    a = answer_then_closed(s)
    assert (a.status, a.problem()["limit"]) == (431, 64 * 1024)


def test_a_slow_body_is_cut_off_with_408_and_nothing_is_written(
    server: Server, writer: str
) -> None:
    body = json.dumps({"content": "slow", "key": "slow"}).encode()
    headers = {
        "Authorization": f"Bearer {writer}",
        "Content-Type": "application/json",
        "Content-Length": str(len(body)),
    }
    socks = [connect(server) for _ in range(32)]
    for s in socks:
        s.sendall(head("POST", "/v1/robots/slow/memories", headers))
    stop = threading.Event()
    trickle(socks, body, stop)  # 3.5 s for the whole body: past HTM_BODY_TIMEOUT_S
    try:
        answers = [answer_then_closed(s) for s in socks]
    finally:
        stop.set()
    assert [a.status for a in answers] == [408] * 32
    assert {a.problem()["instance"] for a in answers} == {"/v1/robots/slow/memories"}
    r = httpx.get(f"{server.url}/v1/robots", headers={"Authorization": f"Bearer {writer}"})
    assert (r.status_code, r.json()) == (200, [])


# --- a client that leaves --------------------------------------------------------------------


def _requests(server: Server, method: str, route: str) -> dict[str, float]:
    """htm_http_requests_total for this method and route, by status."""
    text = httpx.get(f"{server.url}/metrics").text
    counts = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "htm_http_requests_total" and (
                labels["method"],
                labels["route"],
            ) == (method, route):
                counts[labels["status"]] = sample.value
    return counts


def test_a_client_leaving_mid_body_is_a_499_in_the_log_and_the_metrics(
    server: Server, writer: str
) -> None:
    route = "/v1/robots/{robot}/memories"
    body = json.dumps({"content": "half", "key": "half"}).encode()
    headers = {
        "Authorization": f"Bearer {writer}",
        "Content-Type": "application/json",
        "Content-Length": str(len(body)),
        "X-Request-ID": f"half-{uuid.uuid4().hex[:8]}",
    }
    for _ in range(3):
        s = connect(server)
        s.sendall(head("POST", "/v1/robots/left/memories", headers) + body[: len(body) // 2])
        s.close()
    deadline = time.monotonic() + 20
    rid = headers["X-Request-ID"]
    while len(mine := [x for x in server.request_lines() if x.get("request_id") == rid]) < 3:
        assert time.monotonic() < deadline, server.log.read_text()[-2000:]
        time.sleep(0.1)
    assert [(x["method"], x["route"], x["status"], x["namespace"]) for x in mine] == [
        ("POST", route, 499, NS)
    ] * 3
    assert [x["message"] for x in mine] == [f"POST {route} 499"] * 3
    counts = _requests(server, "POST", route)
    assert counts["499"] == 3
    assert not any(status.startswith("5") for status in counts), counts
    r = httpx.get(f"{server.url}/v1/robots", headers={"Authorization": f"Bearer {writer}"})
    assert "left" not in [robot["name"] for robot in r.json()]
