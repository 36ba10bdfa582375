"""Request ids (X-Request-ID in, out, and in every problem body) and the request log line:
JSON with exact fields, never a memory's content or an API key."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import pty
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator

import httpx
import pytest

from app.config import PROJECT_ROOT
from app.observability.logs import REQUEST_LOGGER, JsonFormatter, formatter
from tests.auth.test_auth import bearer, make_key

GENERATED = re.compile(r"[0-9a-f]{32}")


@contextlib.contextmanager
def captured(logger: str = "", level: int = logging.INFO) -> Iterator[io.StringIO]:
    """Every line `logger` (the root by default) writes meanwhile, as the service writes it."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    target = logging.getLogger(logger)
    old_level = target.level
    target.addHandler(handler)
    target.setLevel(level)
    try:
        yield out
    finally:
        target.removeHandler(handler)
        target.setLevel(old_level)


def lines(out: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


async def test_a_safe_request_id_is_echoed_in_the_response_header(client) -> None:
    r = await client.get("/healthz", headers={"X-Request-ID": "trace-42:abc_DEF.1"})
    assert r.headers["x-request-id"] == "trace-42:abc_DEF.1"


@pytest.mark.parametrize("given", [None, "", "has space", "x" * 129, "semi;colon", "é".encode()])
async def test_a_missing_or_unsafe_request_id_is_replaced_by_a_generated_one(client, given) -> None:
    headers = {} if given is None else {"X-Request-ID": given}
    r = await client.get("/healthz", headers=headers)
    assert GENERATED.fullmatch(r.headers["x-request-id"]), r.headers["x-request-id"]
    other = await client.get("/healthz", headers=headers)
    assert other.headers["x-request-id"] != r.headers["x-request-id"]


async def test_every_problem_body_carries_the_request_id(app_factory) -> None:
    async with app_factory(max_body_bytes=4096) as client:
        client.headers["X-Namespace"] = f"t-{uuid.uuid4().hex[:10]}"
        cases = {
            404: await client.get("/v1/robots/a/memories/absent", headers={"X-Request-ID": "r404"}),
            422: await client.post(
                "/v1/robots/a/memories",
                json={"content": "x", "importance": 99},
                headers={"X-Request-ID": "r422"},
            ),
            413: await client.post(
                "/v1/robots/a/memories",
                json={"content": "z" * 5000},
                headers={"X-Request-ID": "r413"},
            ),
            400: await client.post(
                "/v1/robots/a/memories",
                content=b"{",
                headers={"content-type": "application/json", "X-Request-ID": "r400"},
            ),
        }
        for status, r in cases.items():
            assert r.status_code == status
            assert r.json()["request_id"] == r.headers["x-request-id"] == f"r{status}"
        generated = await client.get("/v1/robots/a/memories/absent")
        assert generated.json()["request_id"] == generated.headers["x-request-id"]
        assert GENERATED.fullmatch(generated.json()["request_id"])


async def test_a_500_carries_the_request_id_in_body_and_header_and_is_logged(
    app_factory,
) -> None:
    async with app_factory() as c:
        app = c.app

        async def boom() -> None:
            raise RuntimeError("a bug")

        app.add_api_route("/boom", boom)
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://htm") as client:
            with captured(REQUEST_LOGGER) as out:
                r = await client.get("/boom", headers={"X-Request-ID": "r500"})
    assert r.status_code == 500
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["request_id"] == r.headers["x-request-id"] == "r500"
    [line] = lines(out)
    assert (line["route"], line["status"], line["request_id"]) == ("/boom", 500, "r500")


async def test_the_request_line_is_json_with_exactly_these_fields(client) -> None:
    ns = client.headers["X-Namespace"]
    with captured(REQUEST_LOGGER) as out:
        r = await client.post(
            "/v1/robots/ann/memories", json={"content": "x"}, headers={"X-Request-ID": "rid-1"}
        )
        assert r.status_code == 201
        await client.get("/nowhere/at/all", headers={"X-Request-ID": "rid-2"})
    added, unmatched = lines(out)
    assert isinstance(added.pop("ts"), str)
    duration = added.pop("duration_ms")
    assert isinstance(duration, float) and duration > 0
    assert added == {
        "level": "info",
        "logger": "htm.request",
        "message": "POST /v1/robots/{robot}/memories 201",
        "method": "POST",
        "route": "/v1/robots/{robot}/memories",
        "status": 201,
        "request_id": "rid-1",
        "namespace": ns,
        "robot": "ann",
    }
    # No route: no robot, no namespace (no caller was identified), and never the raw path.
    assert {k: unmatched[k] for k in ("route", "status", "namespace", "robot")} == {
        "route": "unmatched",
        "status": 404,
        "namespace": None,
        "robot": None,
    }


async def test_logs_never_hold_memory_content_queries_or_api_keys(app_factory) -> None:
    ns = f"t-{uuid.uuid4().hex[:10]}"
    secret = f"the vault code is {uuid.uuid4().hex}"
    question = f"which vault {uuid.uuid4().hex}"
    async with app_factory(auth_enabled=True) as client:
        key = await make_key(client, ns, "admin")
        with captured(level=logging.DEBUG) as out:
            h = bearer(key)
            r = await client.post("/v1/robots/r/memories", json={"content": secret}, headers=h)
            assert r.status_code == 201
            r = await client.post("/v1/robots/r/recall", json={"query": question}, headers=h)
            assert r.status_code == 200
            assert (await client.get("/v1/robots/r/context", headers=h)).status_code == 200
            assert (await client.get("/v1/robots", headers=bearer(key + "x"))).status_code == 401
    text = out.getvalue()
    request_lines = [x for x in lines(out) if x["logger"] == REQUEST_LOGGER]
    assert [(x["route"], x["status"], x["namespace"]) for x in request_lines] == [
        ("/v1/robots/{robot}/memories", 201, ns),
        ("/v1/robots/{robot}/recall", 200, ns),
        ("/v1/robots/{robot}/context", 200, ns),
        ("/v1/robots", 401, None),
    ]
    for leaked in (secret, question, key, key[8:24]):
        assert leaked not in text


def test_log_records_written_during_a_request_carry_its_id() -> None:
    from app.observability import request_id

    record = logging.makeLogRecord({"name": "app.x", "msg": "hello %s", "args": ("you",)})
    token = request_id.current.set("rid-9")
    try:
        as_json = json.loads(formatter("json").format(record))
        as_text = formatter("text").format(record)
    finally:
        request_id.current.reset(token)
    assert (as_json["message"], as_json["request_id"]) == ("hello you", "rid-9")
    assert as_text.endswith("app.x: hello you [rid-9]")


async def test_an_mcp_request_logs_its_request_line_and_not_the_sdk_s_session_chatter(
    live_server_factory,
) -> None:
    from app.observability.logs import configure
    from tests.mcp.test_mcp_tools import mcp_session

    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    base = live_server_factory()
    try:
        configure("json", "info")
        with captured() as out:
            headers = {"X-Namespace": f"t-{uuid.uuid4().hex[:10]}", "X-Robot": "ann"}
            async with mcp_session(base, **headers) as s:
                said = await s.call_tool("remember", {"key": "tea", "content": "Ann drinks tea"})
                assert not said.is_error, said.content
        mcp = [x for x in lines(out) if x.get("route") == "/mcp"]
        assert {(x["method"], x["status"]) for x in mcp} <= {("POST", 200), ("POST", 202)}
        assert len(mcp) >= 3  # initialize, the notification, the call (the list may lag)
        assert not [x for x in lines(out) if "Terminating session" in x["message"]]
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])


AUTO = """
import logging
from app.observability.logs import configure
configure("auto", "info")
logging.getLogger("app.x").info("hello")
"""


def _logged_auto(stderr_is_a_terminal: bool) -> str:
    """What a process configured with HTM_LOG_FORMAT=auto writes on its stderr: a terminal
    (a pseudo-terminal) or a pipe."""
    if not stderr_is_a_terminal:
        out = subprocess.run([sys.executable, "-c", AUTO], cwd=PROJECT_ROOT, capture_output=True,
                             text=True, timeout=60)  # fmt: skip
        assert out.returncode == 0
        return out.stderr
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run([sys.executable, "-c", AUTO], cwd=PROJECT_ROOT, stderr=follower,
                              stdout=subprocess.DEVNULL, timeout=60)  # fmt: skip
        assert proc.returncode == 0
        return os.read(leader, 4096).decode().replace("\r\n", "\n")
    finally:
        os.close(leader)
        os.close(follower)


def test_auto_logs_text_on_a_terminal_and_json_elsewhere() -> None:
    """Issue 49: a person running `make run` reads text; a container's collector gets JSON."""
    [text] = _logged_auto(stderr_is_a_terminal=True).splitlines()
    assert text.endswith(" INFO app.x: hello"), text
    [line] = _logged_auto(stderr_is_a_terminal=False).splitlines()
    assert {k: v for k, v in json.loads(line).items() if k != "ts"} == {
        "level": "info", "logger": "app.x", "message": "hello",
    }  # fmt: skip
