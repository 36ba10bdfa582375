"""`htm serve` (what `make run` runs): embedded servers up, migrations applied, HTTP served;
stopping it stops what it started; a second run reuses the data."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from app.config import PROJECT_ROOT, Settings
from app.embedded import POSTGRES_MAJOR, free_port
from app.http.serving import is_loopback, refuse_unauthenticated

# The migrations' head and count, read from their files.
_REVISIONS = sorted((PROJECT_ROOT / "alembic" / "versions").glob("*.py"))
MIGRATIONS = len(_REVISIONS)
HEAD = max(
    line.split("=")[1].strip().strip("\"'")
    for p in _REVISIONS
    for line in p.read_text().splitlines()
    if line.startswith("revision")
)


def _env(data_dir: Path, port: int) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("HTM_")},
        "HTM_DATA_DIR": str(data_dir),
        "HTM_EMBEDDING_PROVIDER": "none",
        "HTM_PORT": str(port),
    }


def _serve(data_dir: Path, port: int) -> subprocess.Popen[bytes]:
    # stderr to a file, not a pipe: the service logs a line per request (the readiness polls
    # below too), more than a pipe nobody reads holds before the server blocks on it.
    log = (data_dir / "serve.log").open("ab")
    return subprocess.Popen([sys.executable, "-m", "app.cli", "serve"], env=_env(data_dir, port),
                            stdout=subprocess.DEVNULL, stderr=log)  # fmt: skip


def _logged(data_dir: Path) -> str:
    return (data_dir / "serve.log").read_text(errors="replace")


def _wait_ready(url: str, proc: subprocess.Popen[bytes], data_dir: Path) -> dict:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert proc.poll() is None, _logged(data_dir)
        try:
            r = httpx.get(f"{url}/readyz", timeout=2)
            if r.status_code == 200:
                return r.json()
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError("htm serve did not become ready")


def _gone(pid: int) -> bool:
    # The postmaster is daemonized by pg_ctl; where PID 1 does not reap, it lingers as a zombie.
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _children(proc: subprocess.Popen[bytes]) -> list[psutil.Process]:
    return psutil.Process(proc.pid).children(recursive=True)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGINT)
    assert proc.wait(60) == 0


def test_serve_starts_embedded_servers_and_stops_them(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = _serve(tmp_path, port)
    try:
        ready = _wait_ready(url, proc, tmp_path)
        assert ready["postgres"].startswith(f"{POSTGRES_MAJOR}.") and ready["pgvector"] == "0.8.5"
        redis_server = [p for p in _children(proc) if p.name() == "redis-server"]
        assert len(redis_server) == 1
        r = httpx.post(f"{url}/v1/robots/a/memories", json={"content": "kept", "key": "k"})
        assert r.status_code == 201
        postmaster = int((tmp_path / "pgdata" / "postmaster.pid").read_text().split()[0])
    finally:
        _stop(proc)
    assert not redis_server[0].is_running()
    assert _gone(postmaster)
    # HTM_LOG_FORMAT's default: the service's own lines (uvicorn's too) are JSON objects.
    logged = [json.loads(x) for x in _logged(tmp_path).splitlines() if x.startswith("{")]
    added = [x for x in logged if x.get("route") == "/v1/robots/{robot}/memories"]
    assert [(x["method"], x["status"], x["robot"]) for x in added] == [("POST", 201, "a")]
    assert any(x["logger"] == "uvicorn.error" for x in logged)

    # Second run: same data directory, the memory is still there.
    proc = _serve(tmp_path, port)
    try:
        _wait_ready(url, proc, tmp_path)
        r = httpx.get(f"{url}/v1/robots/a/memories/k")
        assert (r.status_code, r.json()["content"]) == (200, "kept")
    finally:
        _stop(proc)


def test_serve_says_ready_once_the_port_answers_in_a_few_quiet_lines(tmp_path: Path) -> None:
    """Issue 49, the first run: one ready line on stdout naming the API, /docs and /ui,
    printed when the port answers (not when the socket is bound); the migrations of a fresh
    data directory in one line; no platformdirs warning."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (tmp_path / "serve.log").open("ab")
    env = {**_env(tmp_path, port), "HTM_LOG_FORMAT": "text"}
    env.pop("XDG_RUNTIME_DIR", None)
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve"], env=env,
                            stdout=subprocess.PIPE, stderr=log, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the line is printed
        assert line == f"ready: API {url}, docs {url}/docs, dashboard {url}/ui\n"
        assert httpx.get(f"{url}/docs", timeout=5).status_code == 200  # answering already
        assert httpx.get(f"{url}/ui", timeout=5).status_code == 200
    finally:
        _stop(proc)
    assert proc.stdout.read() == ""  # one line, and only one
    logged = _logged(tmp_path)
    migrated = [x for x in logged.splitlines() if "migrat" in x.lower()]
    assert len(migrated) == 1, migrated
    assert migrated[0].endswith(f"app.db.migrate: migrated the database from empty to {HEAD} "
                                f"({MIGRATIONS} migrations)")  # fmt: skip
    assert "Running upgrade" not in logged and "Uvicorn running on" not in logged
    assert "XDG_RUNTIME_DIR" not in logged and "Warning" not in logged
    # What a person reads before the ready line: the embedded servers and the migration, not
    # uvicorn's or the MCP SDK's start-up lines (DEBUG: app/observability/logs.QuietAtStart).
    lines = [" ".join(x.split(" ")[2:]) for x in logged.splitlines()]
    first_request = next(i for i, x in enumerate(lines) if x.startswith("INFO htm.request:"))
    assert [re.sub(r"port \d+", "port N", x) for x in lines[:first_request]] == [
        f"INFO app.embedded.services: embedded PostgreSQL in {tmp_path}/pgdata",
        f"INFO app.embedded.services: embedded Redis in {tmp_path}/redis",
        f"INFO app.embedded.shared_redis: started embedded Redis in {tmp_path}/redis on port N",
        migrated[0].split(" ", 2)[2],
    ]


def test_start_up_lines_are_debug_records_shown_at_the_debug_level() -> None:
    """As a single-process `htm serve` logs (`run` adds `_STARTING`; with --workers each
    worker's "Started server process [pid]" stays, tests/processes/test_workers_start.py)."""
    from app.http.serving import _STARTING

    seen: list[tuple[str, str]] = []
    handler = logging.Handler()
    handler.emit = lambda r: seen.append((r.levelname, r.getMessage()))  # type: ignore[method-assign]
    logger = logging.getLogger("uvicorn.error")
    before = logger.level
    logger.addHandler(handler)
    logger.addFilter(_STARTING)
    try:
        for level in (logging.INFO, logging.DEBUG):
            logger.setLevel(level)
            logger.info("Uvicorn running on %s://%s:%d", "http", "127.0.0.1", 8000)
            logger.info("Started server process [%d]", 7)
            logger.info("Waiting for application startup.")
            logger.info("Shutting down")
    finally:
        logger.removeFilter(_STARTING)
        logger.removeHandler(handler)
        logger.setLevel(before)
    assert seen == [
        ("INFO", "Shutting down"),
        ("DEBUG", "Uvicorn running on http://127.0.0.1:8000"),
        ("DEBUG", "Started server process [7]"),
        ("DEBUG", "Waiting for application startup."),
        ("INFO", "Shutting down"),
    ]


# --- safe defaults: no unauthenticated service on a public address -------------------------


@pytest.mark.parametrize(
    ("args", "env"),
    [
        ([], {"HTM_HOST": "0.0.0.0"}),  # the Dockerfile's HTM_HOST, with auth left off
        (["--host", "::"], {}),
        (["--host", "192.0.2.7"], {"HTM_AUTH_ENABLED": "false"}),
    ],
)
def test_serve_refuses_a_public_address_with_auth_off_before_starting_anything(
    tmp_path: Path, args: list[str], env: dict[str, str]
) -> None:
    data_dir = tmp_path / "data"
    out = subprocess.run(
        [sys.executable, "-m", "app.cli", "serve", *args],
        env={**_env(data_dir, free_port()), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "refusing to listen on" in out.stderr
    assert "HTM_AUTH_ENABLED=true" in out.stderr
    assert "HTM_ALLOW_UNAUTHENTICATED=true" in out.stderr
    assert not data_dir.exists()  # no embedded PostgreSQL or Redis was started


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "127.3.2.1", "::1", "[::1]", "localhost", "LOCALHOST", "::ffff:127.0.0.1"]
)
def test_loopback_addresses_may_serve_without_auth(host: str) -> None:
    assert is_loopback(host)
    assert refuse_unauthenticated(Settings(_env_file=None, auth_enabled=False), host) is None


@pytest.mark.parametrize(
    "host", ["0.0.0.0", "::", "10.0.0.1", "192.0.2.7", "::ffff:10.0.0.1", "example.com", ""]
)
def test_other_addresses_need_auth_or_an_explicit_opt_out(host: str) -> None:
    assert not is_loopback(host)
    assert refuse_unauthenticated(Settings(_env_file=None, auth_enabled=False), host)
    assert refuse_unauthenticated(Settings(_env_file=None, auth_enabled=True), host) is None
    opted_out = Settings(_env_file=None, auth_enabled=False, allow_unauthenticated=True)
    assert refuse_unauthenticated(opted_out, host) is None


def test_serve_says_not_ready_when_the_tokenizer_cannot_load(tmp_path: Path) -> None:
    """The line names what /readyz answers 503 for, instead of "ready" (the walk of
    2026-12-07: `htm serve` without TIKTOKEN_CACHE_DIR on an offline machine said "ready"
    while every add was a 503)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (tmp_path / "serve.log").open("ab")
    env = {**_env(tmp_path, port), "HTM_LOG_FORMAT": "text", "HTM_TIKTOKEN_ENCODING": "no_such"}
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve"], env=env,
                            stdout=subprocess.PIPE, stderr=log, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line == (
            f"not ready: tokenizer unavailable ({url}/readyz says why); "
            f"API {url}, docs {url}/docs, dashboard {url}/ui\n"
        )
        r = httpx.get(f"{url}/readyz", timeout=5)
        assert (r.status_code, list(r.json()["unavailable"])) == (503, ["tokenizer"])
    finally:
        _stop(proc)
    assert "ERROR app.tokens: tiktoken encoding 'no_such' could not be loaded" in _logged(tmp_path)
