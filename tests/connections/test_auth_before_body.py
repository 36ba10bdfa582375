"""The caller is known before a body is read (app/http/routing.py), once per request
(app/http/deps.py); a body refused while it is read is answered by the gate
(app/http/middleware.py) on every route, /mcp included."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

import app.http.deps
from tests.auth.test_auth import bearer, make_key

PROBLEM = "application/problem+json"
M = "/v1/robots/a/memories"


@pytest.fixture
async def authed(app_factory):  # type: ignore[no-untyped-def]
    async with app_factory(auth_enabled=True, max_body_bytes=4096) as client:
        yield client


async def chunks(total: int, size: int = 512) -> AsyncIterator[bytes]:
    body = b'{"content": "' + b"x" * total + b'"}'
    for i in range(0, len(body), size):
        yield body[i : i + size]


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        (b"{", {}),  # malformed: was a 400, the body read before the key was looked at
        (b'{"content": 5}', {}),
        (b"{", {"Authorization": "Bearer htm_not-a-real-key"}),
    ],
)
async def test_without_a_valid_key_the_body_is_never_looked_at(authed, body, headers) -> None:
    r = await authed.post(M, content=body, headers={"content-type": "application/json", **headers})
    assert (r.status_code, r.headers["content-type"]) == (401, PROBLEM), r.text
    assert r.headers["www-authenticate"] == "Bearer"


async def test_a_reader_key_posting_is_403_before_its_body_is_parsed(authed) -> None:
    reader = await make_key(authed, f"t-{uuid.uuid4().hex[:10]}", "reader")
    headers = {"content-type": "application/json", **bearer(reader)}
    r = await authed.post(M, content=b"{", headers=headers)
    assert (r.status_code, r.json()["required"]) == (403, "writer")


async def test_a_body_over_the_limit_without_a_key_is_413_or_401_never_read(authed) -> None:
    declared = await authed.post(M, content=b"x" * 5000, headers={"content-type": "text/plain"})
    assert (declared.status_code, declared.json()["limit"]) == (413, 4096)
    streamed = await authed.post(M, content=chunks(5000), headers={"content-type": "text/plain"})
    assert streamed.status_code == 401  # no length declared: the key is asked for first


async def test_the_caller_is_identified_once_per_request(authed, monkeypatch) -> None:
    ns = f"t-{uuid.uuid4().hex[:10]}"
    writer = await make_key(authed, ns, "writer")
    calls: list[str] = []
    identify = app.http.deps.identify

    async def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(args[0])
        return await identify(*args, **kwargs)

    monkeypatch.setattr(app.http.deps, "identify", counted)
    r = await authed.post(M, json={"content": "once", "key": "once"}, headers=bearer(writer))
    assert r.status_code == 201, r.text
    r = await authed.get(M + "/once", headers=bearer(writer))
    assert r.status_code == 200
    assert calls == [f"Bearer {writer}"] * 2


async def test_a_body_over_the_limit_is_413_on_mcp_too_not_the_sdks_500(app_factory) -> None:
    async with app_factory(max_body_bytes=4096) as client:
        client.headers["X-Namespace"] = f"t-{uuid.uuid4().hex[:10]}"
        r = await client.post(
            "/mcp",
            content=chunks(5000),
            headers={
                "content-type": "application/json",
                "accept": "application/json, text/event-stream",
            },
        )
    assert (r.status_code, r.headers["content-type"]) == (413, PROBLEM), r.text
    assert (r.json()["limit"], r.json()["instance"]) == (4096, "/mcp")
    assert r.headers["connection"] == "close"
