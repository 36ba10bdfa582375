"""Invariant 9: bad input gets a 4xx problem+json, never a 500 and never a partial write.

One table per class of bad input (issue 14). Every case runs in a fresh namespace and checks
the exact status, the problem+json media type, the field named in `errors` where there is
one, and that nothing was written: no robot, memory, key, event or API key.
"""

from __future__ import annotations

import base64
import functools
import importlib
import json
import pkgutil
from collections.abc import AsyncIterator, Iterator
from typing import Any

import jsonschema
import pytest
from pydantic import BaseModel
from sqlalchemy import text

import app
from app.http.openapi import SPEC_PATH

PROBLEM = "application/problem+json"
DIM = 384
TABLES = ("robot", "memory", "memory_key", "memory_event", "api_key")


def vec(i: int = 0) -> list[float]:
    v = [0.0] * DIM
    v[i] = 1.0
    return v


def with_first(x: float) -> list[float]:
    return [x] + [0.0] * (DIM - 1)


def nested(depth: int, leaf: str = "{}", *, array: bool = False) -> str:
    """A JSON value of `depth` containers, built as text (json.dumps would recurse)."""
    if array:
        return "[" * depth + "]" * depth
    return '{"a":' * (depth - 1) + leaf + "}" * (depth - 1)


async def rows_written(client: Any, ns: str) -> dict[str, int]:
    res = client.app.state.components
    counts = {}
    async with res.sessionmaker() as s:
        for table in TABLES:
            counts[table] = (
                await s.execute(
                    text(
                        f"SELECT count(*) FROM {table} t JOIN namespace n ON n.id = t.namespace_id "
                        "WHERE n.name = :ns"
                    ),
                    {"ns": ns},
                )
            ).scalar_one()
    return counts


async def assert_nothing_written(client: Any, ns: str) -> None:
    assert (await client.get("/v1/robots")).json() == []
    listed = await client.get("/v1/robots/probe/memories", params={"include_deleted": "true"})
    assert listed.json() == {"items": [], "next_cursor": None}
    assert await rows_written(client, ns) == dict.fromkeys(TABLES, 0)


async def send(client: Any, method: str, url: str, body: Any = None, **kw: Any) -> Any:
    if isinstance(body, str):  # raw JSON text
        kw["content"] = body.encode()
        kw.setdefault("headers", {})["content-type"] = "application/json"
    elif body is not None:
        kw["json"] = body
    return await client.request(method, url, **kw)


def assert_problem(r: Any, status: int, field: str | None = None) -> dict[str, Any]:
    assert (r.status_code, r.headers["content-type"]) == (status, PROBLEM), r.text
    problem = r.json()
    assert problem["status"] == status
    if field is not None:
        assert field in [e["field"] for e in problem["errors"]], problem
    return problem


M = "/v1/robots/a/memories"
R = "/v1/robots/a/recall"

# --- 1. NUL -----------------------------------------------------------------------------

NUL_CASES = [
    ("POST", M, {"content": "a\u0000b"}, {}, "body.content"),
    ("POST", M, {"content": "x", "key": "k\u0000"}, {}, "body.key"),
    ("POST", M, {"content": "x", "type": "fact\u0000"}, {}, "body.type"),
    ("POST", M, {"content": "x", "tags": ["ok", "t\u0000"]}, {}, "body.tags.1"),
    ("POST", M, {"content": "x", "metadata": {"k\u0000": 1}}, {}, "body.metadata"),
    ("POST", M, {"content": "x", "metadata": {"a": [1, {"b": "v\u0000"}]}}, {}, "body.metadata"),
    (
        "POST",
        M,
        '{"content": "x", "metadata": ' + nested(60, '"\\u0000"') + "}",
        {},
        "body.metadata",
    ),
    (
        "POST",
        M + "/batch",
        {"memories": [{"content": "fine"}, {"content": "\u0000"}]},
        {},
        "body.memories.1.content",
    ),
    ("PUT", M + "/k", {"content": "a\u0000"}, {}, "body.content"),
    ("PUT", M + "/k", {"content": "a", "metadata": {"x": "\u0000"}}, {}, "body.metadata"),
    ("POST", R, {"query": "a\u0000"}, {}, "body.query"),
    ("POST", R, {"query": "a", "timeframe": "today\u0000"}, {}, "body.timeframe"),
    ("POST", R, {"query": "a", "filters": {"types": ["fact\u0000"]}}, {}, "body.filters.types.0"),
    ("POST", R, {"query": "a", "filters": {"tags_all": ["\u0000"]}}, {}, "body.filters.tags_all.0"),
    (
        "POST",
        R,
        {"query": "a", "filters": {"metadata": {"\u0000": 1}}},
        {},
        "body.filters.metadata",
    ),
    ("GET", M, None, {"params": {"type": "fact\u0000"}}, "query.type"),
    ("GET", M, None, {"params": {"tag": "t\u0000"}}, "query.tag.0"),
    ("GET", M, None, {"params": {"timeframe": "today\u0000"}}, "query.timeframe"),
    ("GET", M, None, {"params": {"cursor": "abc\u0000"}}, "query.cursor"),
    ("DELETE", M + "/k", None, {"params": {"hard": "true", "confirm": "k\u0000"}}, "query.confirm"),
    ("GET", "/v1/robots/a%00/memories", None, {}, "path.robot"),
    ("GET", M + "/k%00", None, {}, "path.key"),
    ("POST", "/v1/keys", {"name": "n\u0000", "role": "reader"}, {}, "body.name"),
    ("GET", "/v1/robots", None, {"headers": {"X-Namespace": "t\u0000"}}, "header.x-namespace"),
]


@pytest.mark.parametrize(("method", "url", "body", "kw", "field"), NUL_CASES)
async def test_nul_anywhere_is_422_naming_the_field(client, ns, method, url, body, kw, field):
    r = await send(client, method, url, body, **kw)
    assert_problem(r, 422, field)
    await assert_nothing_written(client, ns)


# --- 2. vectors -------------------------------------------------------------------------

VECTOR_CASES = [
    ("POST", M, {"content": "x", "embedding": with_first(1e39)}, "body.embedding.0"),
    ("POST", M, {"content": "x", "embedding": with_first(-1e308)}, "body.embedding.0"),
    ("POST", M, {"content": "x", "embedding": [0.0] * DIM}, "body.embedding"),
    ("POST", M, {"content": "x", "embedding": [1e-30] * DIM}, "body.embedding"),  # 0 in float32
    ("POST", M, {"content": "x", "embedding": [1e-19] * DIM}, "body.embedding"),  # < 1e-18
    ("POST", M, {"content": "x", "embedding": [1e20] * DIM}, "body.embedding.0"),  # > 1e17
    ("POST", M, {"content": "x", "embedding": with_first(1.1e17)}, "body.embedding.0"),
    ("POST", M, {"content": "x", "embedding": []}, "body.embedding"),
    ("PUT", M + "/k", {"content": "x", "embedding": with_first(1e308)}, "body.embedding.0"),
    (
        "POST",
        M + "/batch",
        {
            "memories": [
                {"content": "a", "embedding": vec()},
                {"content": "b", "embedding": [0] * DIM},
            ]
        },
        "body.memories.1.embedding",
    ),
    ("POST", R, {"query": "x", "embedding": with_first(1e39)}, "body.embedding.0"),
    ("POST", R, {"query": "x", "strategy": "vector", "embedding": [0.0] * DIM}, "body.embedding"),
]


@pytest.mark.parametrize(("method", "url", "body", "field"), VECTOR_CASES)
async def test_vectors_outside_float32_or_without_direction_are_422(
    client, ns, method, url, body, field
):
    r = await send(client, method, url, body)
    assert_problem(r, 422, field)
    await assert_nothing_written(client, ns)


async def test_a_stored_zero_vector_is_recalled_with_similarity_zero_not_nan(client, ns) -> None:
    """A provider can return a zero vector; its cosine distance is NaN, which is no JSON
    number. It is reported as similarity 0.0 and ranked last."""
    for key, embedding in [("real", vec(1)), ("zero", None)]:
        body = {"key": key, "content": f"{key} memory", "embedding": embedding}
        assert (await client.post(M, json=body)).status_code == 201
    async with client.app.state.components.sessionmaker() as s:
        await s.execute(
            text(
                "UPDATE memory SET embedding = CAST(:v AS vector), embedding_status = 'ready' "
                "WHERE key = 'zero' AND namespace_id = (SELECT id FROM namespace WHERE name = :ns)"
            ),
            {"v": [0.0] * DIM, "ns": ns},
        )
        await s.commit()

    ask = {"query": "memory", "strategy": "vector", "embedding": vec(1), "min_score": 0}
    r = await client.post(R, json=ask)
    assert r.status_code == 200
    assert [(h["key"], h["score"], h["vector_similarity"]) for h in r.json()["hits"]] == [
        ("real", 1.0, 1.0),
        ("zero", 0.0, 0.0),
    ]
    r = await client.post(R, json={**ask, "query": "nothing", "strategy": "hybrid"})
    assert r.status_code == 200
    assert [(h["key"], h["vector_rank"], h["vector_similarity"]) for h in r.json()["hits"]] == [
        ("real", 1, 1.0),
        ("zero", 2, 0.0),
    ]


# --- 3. instants ------------------------------------------------------------------------

INSTANT_CASES = [
    ("POST", M, {"content": "x", "created_at": "0001-01-01T00:00:00+05:00"}, {}, "body.created_at"),
    ("POST", M, {"content": "x", "created_at": "9999-12-31T23:00:00-05:00"}, {}, "body.created_at"),
    ("POST", M, {"content": "x", "created_at": "1899-12-31T23:59:59Z"}, {}, "body.created_at"),
    ("POST", M, {"content": "x", "created_at": "9999-01-01T00:00:00Z"}, {}, "body.created_at"),
    ("PUT", M + "/k", {"content": "x", "created_at": "0001-01-01T00:00:00+05:00"}, {}, None),
    ("POST", R, {"query": "x", "now": "0001-01-01T00:00:00+05:00"}, {}, "body.now"),
    ("POST", R, {"query": "x", "now": "9999-12-31T23:00:00-05:00"}, {}, "body.now"),
    (
        "POST",
        R,
        {"query": "x", "timeframe": "since 0001-01-01T00:00:00+05:00"},
        {},
        "body.timeframe",
    ),
    (
        "POST",
        R,
        {"query": "x", "timeframe": "before 9999-12-31T23:00:00-05:00"},
        {},
        "body.timeframe",
    ),
    ("POST", R, {"query": "x", "timeframe": "1899-12-31/P2D"}, {}, "body.timeframe"),
    (
        "GET",
        M,
        None,
        {"params": {"timeframe": "since 0001-01-01T00:00:00+05:00"}},
        "query.timeframe",
    ),
]


@pytest.mark.parametrize(("method", "url", "body", "kw", "field"), INSTANT_CASES)
async def test_instants_outside_1900_to_9999_are_422(client, ns, method, url, body, kw, field):
    r = await send(client, method, url, body, **kw)
    assert_problem(r, 422, field or "body.created_at")
    await assert_nothing_written(client, ns)


async def test_the_ends_of_the_instant_range(client) -> None:
    for created_at in ["1900-01-01T00:00:00Z", "9998-12-31T23:59:59.999999Z"]:
        r = await client.post(M, json={"content": "x", "created_at": created_at})
        assert r.status_code == 201, r.text
    r = await client.post(R, json={"query": "x", "now": "9998-12-31T23:00:00-00:30"})
    assert r.status_code == 200, r.text


# --- 4. cursors -------------------------------------------------------------------------


def cursor(raw: Any) -> str:
    data = raw if isinstance(raw, bytes) else json.dumps(raw).encode()
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


CURSOR_CASES = [
    ["2025-01-01T00:00:00+00:00", 2**63],
    ["2025-01-01T00:00:00+00:00", 0],
    ["2025-01-01T00:00:00+00:00", -1],
    ["2025-01-01T00:00:00+00:00", True],
    ["2025-01-01T00:00:00+00:00", "1"],
    ["2025-01-01T00:00:00+00:00", 1.5],
    ["2025-01-01T00:00:00", 1],
    ["0001-01-01T00:00:00+05:00", 1],
    ["9999-12-31T23:00:00-05:00", 1],
    ["yesterday", 1],
    ["2025-01-01T00:00:00+00:00", 1, 2],
    {"at": "2025-01-01T00:00:00+00:00", "id": 1},
    b"not json",
    b"\xff\xfe",
]


@pytest.mark.parametrize("raw", CURSOR_CASES)
async def test_forged_cursors_are_400(client, ns, raw) -> None:
    r = await client.get(M, params={"cursor": cursor(raw)})
    assert_problem(r, 400)
    assert r.json()["field"] == "cursor"
    await assert_nothing_written(client, ns)


async def test_not_base64_cursor_is_400(client, ns) -> None:
    assert_problem(await client.get(M, params={"cursor": "%%%"}), 400)
    await assert_nothing_written(client, ns)


# --- 5. path integers -------------------------------------------------------------------

KEY_ID_CASES = [
    ("9223372036854775808", 422),
    ("99999999999999999999999", 422),
    ("0", 422),
    ("-1", 422),
    ("1.5", 422),
    ("9223372036854775807", 404),  # the largest bigint: well formed, no such key
]


@pytest.mark.parametrize(("key_id", "status"), KEY_ID_CASES)
async def test_api_key_ids_are_bounded_to_bigint(client, ns, key_id, status) -> None:
    problem = assert_problem(await client.delete(f"/v1/keys/{key_id}"), status)
    if status == 422:
        assert [e["field"] for e in problem["errors"]] == ["path.key_id"]
    await assert_nothing_written(client, ns)


# --- 6. metadata depth ------------------------------------------------------------------

DEPTH_CASES = [
    (M, '{"content": "x", "metadata": ' + nested(150) + "}", 422, "nested deeper than 64"),
    (M, '{"content": "x", "metadata": {"a": ' + nested(150, array=True) + "}}", 422, "than 64"),
    (M, '{"content": "x", "metadata": ' + nested(65) + "}", 422, "nested deeper than 64"),
    (M, '{"content": "x", "metadata": ' + nested(64) + "}", 422, "nested deeper than 5"),
    (M, '{"content": "x", "metadata": ' + nested(6) + "}", 422, "nested deeper than 5"),
    (
        M + "/batch",
        '{"memories": [{"content": "x", "metadata": ' + nested(150) + "}]}",
        422,
        "nested deeper than 64",
    ),
    (R, '{"query": "x", "filters": {"metadata": ' + nested(150) + "}}", 422, "than 64"),
    # Past the JSON parser's own nesting limit (about 200, app/http/routing.py) the body is
    # not parsed, and is refused as the schemas would refuse it: a 422 about depth.
    (
        M,
        '{"content": "x", "metadata": ' + nested(1000) + "}",
        422,
        "body: is nested deeper than 64",
    ),
    (
        M,
        '{"content": "x", "metadata": ' + nested(5000) + "}",
        422,
        "body: is nested deeper than 64",
    ),
    (R, "[" * 300 + "]" * 300, 422, "body: is nested deeper than 64 levels"),
]


@pytest.mark.parametrize(("url", "body", "status", "detail"), DEPTH_CASES)
async def test_deep_metadata_is_rejected_before_anything_recurses(
    client, ns, url, body, status, detail
) -> None:
    r = await send(client, "POST", url, body)
    assert detail in assert_problem(r, status)["detail"]
    if detail.startswith("body: "):
        assert r.json()["errors"] == [
            {"field": "body", "message": "is nested deeper than 64 levels", "type": "json_too_deep"}
        ]
    await assert_nothing_written(client, ns)


async def test_the_schema_caps_depth_at_64_whatever_the_deployment_allows(app_factory, ns):
    async with app_factory(max_metadata_depth=1000) as client:
        client.headers["X-Namespace"] = ns
        r = await send(client, "POST", M, '{"content": "x", "metadata": ' + nested(65) + "}")
        assert "nested deeper than 64" in assert_problem(r, 422, "body.metadata")["detail"]
        await assert_nothing_written(client, ns)
        r = await send(client, "POST", M, '{"content": "x", "metadata": ' + nested(64) + "}")
        assert r.status_code == 201


# --- 7. keys are one path segment -------------------------------------------------------

SLASH_CASES = [
    (M, {"content": "x", "key": "a/b"}, "body.key"),
    (M, {"content": "x", "key": "/"}, "body.key"),
    (
        M + "/batch",
        {"memories": [{"content": "x", "key": "ok"}, {"content": "y", "key": "x/"}]},
        None,
    ),
]


@pytest.mark.parametrize(("url", "body", "field"), SLASH_CASES)
async def test_keys_with_a_slash_cannot_be_created(client, ns, url, body, field) -> None:
    assert_problem(await client.post(url, json=body), 422, field or "body.memories.1.key")
    await assert_nothing_written(client, ns)


async def test_tags_may_still_hold_a_slash(client) -> None:
    r = await client.post(M, json={"content": "x", "key": "a:b@c", "tags": ["team/infra"]})
    assert (r.status_code, r.json()["tags"]) == (201, ["team/infra"])
    assert (await client.get(M + "/a:b@c")).status_code == 200


# --- 8. strict types --------------------------------------------------------------------

STRICT_CASES = [
    ("PUT", "/v1/robots/a", {"working_memory_budget": True}, "body.working_memory_budget"),
    ("PUT", "/v1/robots/a", {"working_memory_budget": "5"}, "body.working_memory_budget"),
    ("PUT", "/v1/robots/a", {"working_memory_budget": 5.5}, "body.working_memory_budget"),
    ("POST", M, {"content": 5}, "body.content"),
    ("POST", M, {"content": "x", "importance": "5"}, "body.importance"),
    ("POST", M, {"content": "x", "importance": True}, "body.importance"),
    ("POST", M, {"content": "x", "key": 5}, "body.key"),
    ("POST", M, {"content": "x", "tags": "infra"}, "body.tags"),
    ("POST", M, {"content": "x", "metadata": "{}"}, "body.metadata"),
    ("POST", M, {"content": "x", "embedding": ["1"] + [0.0] * (DIM - 1)}, "body.embedding.0"),
    ("POST", M, {"content": "x", "created_at": 1700000000}, "body.created_at"),
    ("POST", M, {"content": "x", "created_at": "1700000000"}, "body.created_at"),
    ("POST", M + "/batch", {"memories": {"content": "x"}}, "body.memories"),
    ("PUT", M + "/k", {"content": "x", "importance": "1"}, "body.importance"),
    ("POST", R, {"query": 1}, "body.query"),
    ("POST", R, {"query": "x", "limit": "5"}, "body.limit"),
    ("POST", R, {"query": "x", "limit": True}, "body.limit"),
    ("POST", R, {"query": "x", "limit": 5.5}, "body.limit"),
    (
        "POST",
        R,
        {"query": "x", "load_into_working_memory": "false"},
        "body.load_into_working_memory",
    ),
    ("POST", R, {"query": "x", "load_into_working_memory": 0}, "body.load_into_working_memory"),
    ("POST", R, {"query": "x", "filters": {"min_importance": "2"}}, "body.filters.min_importance"),
    ("POST", R, {"query": "x", "now": 0}, "body.now"),
    ("POST", "/v1/keys", {"name": 7, "role": "reader"}, "body.name"),
]


@pytest.mark.parametrize(("method", "url", "body", "field"), STRICT_CASES)
async def test_loose_types_are_422(client, ns, method, url, body, field) -> None:
    assert_problem(await send(client, method, url, body), 422, field)
    await assert_nothing_written(client, ns)


async def test_ints_are_floats_integral_floats_ints_and_iso_strings_instants(client) -> None:
    """What JSON Schema calls valid stays valid: 5 is a number, 5.0 an integer."""
    r = await client.put("/v1/robots/a", json={"working_memory_budget": 64000.0})
    assert (r.status_code, r.json()["working_memory_budget"]) == (200, 64000)
    r = await client.post(
        M,
        json={
            "content": "PostgreSQL uses MVCC",
            "importance": 5,
            "embedding": [1] + [0] * (DIM - 1),
            "created_at": "2025-06-02T09:00:00+02:00",
        },
    )
    assert r.status_code == 201, r.text
    body = r.json()
    assert (body["importance"], body["created_at"]) == (5.0, "2025-06-02T07:00:00Z")
    r = await client.post(R, json={"query": "MVCC", "limit": 5.0, "filters": {"min_importance": 5}})
    assert [h["importance"] for h in r.json()["hits"]] == [5.0]


# --- 9. body size -----------------------------------------------------------------------


async def chunks(total: int, size: int = 100) -> AsyncIterator[bytes]:
    body = json.dumps({"content": "x" * total}).encode()
    for i in range(0, len(body), size):
        yield body[i : i + size]


@pytest.mark.parametrize(
    ("content_bytes", "chunked", "status"),
    [(5000, True, 413), (5000, False, 413), (900, True, 201), (900, False, 201)],
)
async def test_bodies_over_the_limit_are_413_chunked_or_not(
    app_factory, ns, content_bytes, chunked, status
) -> None:
    async with app_factory(max_body_bytes=1024) as client:
        client.headers["X-Namespace"] = ns
        if chunked:
            headers = {"content-type": "application/json"}
            r = await client.post(M, content=chunks(content_bytes), headers=headers)
            assert "content-length" not in r.request.headers
        else:
            r = await client.post(M, json={"content": "x" * content_bytes})
        assert r.status_code == status, r.text
        if status == 413:
            assert_problem(r, 413)
            assert r.json()["limit"] == 1024
            await assert_nothing_written(client, ns)
        else:
            assert r.json()["content"] == "x" * content_bytes


# --- undeclared methods -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "url", "allow"),
    [
        ("POST", M + "/k", "DELETE, GET, PATCH, PUT"),
        ("OPTIONS", M, "GET, POST"),
        ("POST", "/v1/robots/a", "DELETE, GET, PUT"),
        ("TRACE", "/v1/stats", "GET"),
        ("OPTIONS", M + "/batch", "POST"),  # a concrete path wins over /memories/{key}
    ],
)
async def test_405_lists_every_method_the_path_has(client, ns, method, url, allow) -> None:
    """RFC 9110: a 405 carries `Allow`. Each method of a path is its own route, and
    Starlette's 405 names only the first one's."""
    r = await client.request(method, url)
    assert_problem(r, 405)
    assert r.headers["allow"] == allow
    await assert_nothing_written(client, ns)


# --- 7. one shape for every field error, 415, a key auth does not check ------------------


async def test_a_service_s_field_errors_are_named_as_the_schema_s_are(client, ns) -> None:
    """Where the field was and a `type`, whether the schema or a service refused it."""
    r = await client.post(R, json={"query": "x", "limit": 1000})  # over HTM_MAX_RECALL_LIMIT
    assert_problem(r, 422)
    assert r.json()["errors"] == [
        {"field": "body.limit", "message": "at most 100", "type": "value_error"}
    ]
    r = await client.get(M, params={"valid_at": "someday soon"})
    [error] = assert_problem(r, 422)["errors"]
    assert (error["field"], error["type"]) == ("query.valid_at", "value_error")
    batch = {"memories": [{"content": "x"}, {"content": "y", "embedding": [1.0]}]}
    [error] = assert_problem(await client.post(M + "/batch", json=batch), 422)["errors"]
    assert error["field"] == "body.memories.1.embedding"
    # A batch of one is still a batch: its fields are memories[0]'s.
    one = {"content": "y", "embedding": [1.0], "valid_from": "2026-01-02T00:00:00Z"}
    [error] = assert_problem(await client.post(M + "/batch", json={"memories": [one]}), 422)[
        "errors"
    ]
    assert error["field"] == "body.memories.0.embedding"
    one = {"content": "y", "valid_to": "2000-01-01T00:00:00Z"}  # before now, its start
    [error] = assert_problem(await client.post(M + "/batch", json={"memories": [one]}), 422)[
        "errors"
    ]
    assert error["field"] == "body.memories.0.valid_to"
    await assert_nothing_written(client, ns)


@pytest.mark.parametrize(
    "headers",
    [{}, {"content-type": "text/plain"}, {"content-type": "application/x-www-form-urlencoded"}],
)
async def test_a_body_not_said_to_be_json_is_415_and_writes_nothing(client, ns, headers) -> None:
    r = await client.post(M, content=b'{"content": "x"}', headers=headers)
    problem = assert_problem(r, 415)
    assert problem["type"].endswith("/unsupported-media-type")
    await assert_nothing_written(client, ns)
    for json_type in ("application/json; charset=utf-8", "application/merge-patch+json"):
        r = await client.post(M, content=b'{"content": "x"}', headers={"content-type": json_type})
        assert r.status_code == 201, (json_type, r.text)


async def test_a_key_sent_while_auth_is_off_is_said_to_be_ignored(client) -> None:
    r = await client.get("/v1/robots", headers={"Authorization": "Bearer htm_not_checked"})
    assert r.status_code == 200
    assert r.headers["x-htm-auth"].startswith("ignored: auth is off")
    assert "x-htm-auth" not in (await client.get("/v1/robots")).headers


# --- 12. a limit's message names what it counts -----------------------------------------


def _sequence_bounds_on_text(node: Any, field: str = "") -> Iterator[str]:
    """Fields whose string length is checked by pydantic's generic length validator (its
    message counts "items"): a Field's bounds placed after a validator on an optional str."""
    if isinstance(node, dict):
        fn = node.get("function")
        f = fn.get("function") if isinstance(fn, dict) else None
        if isinstance(f, functools.partial) and f.func.__name__.endswith("_length_validator"):
            inner = node["schema"]
            while inner.get("type", "").startswith("function") or inner.get("type") == "nullable":
                inner = inner["schema"]
            if inner.get("type") == "str":
                yield field
        for k, v in node.items():
            if k == "fields" and isinstance(v, dict):
                for name, schema in v.items():
                    yield from _sequence_bounds_on_text(schema, name)
            else:
                yield from _sequence_bounds_on_text(v, field)
    elif isinstance(node, list):
        for v in node:
            yield from _sequence_bounds_on_text(v, field)


def test_every_text_bound_counts_characters() -> None:
    found = []
    for info in pkgutil.walk_packages(app.__path__, "app."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if isinstance(obj, type) and issubclass(obj, BaseModel) and obj.__module__ == info.name:
                found += [f"{info.name}.{name}.{f}" for f in _sequence_bounds_on_text(
                    obj.__pydantic_core_schema__
                )]  # fmt: skip
    assert found == []


async def test_a_long_timeframe_is_422_counting_characters(client, ns) -> None:
    for r in (
        await client.get(M, params={"timeframe": "x" * 1000}),
        await client.post(R, json={"query": "x", "timeframe": "x" * 1000}),
    ):
        [error] = assert_problem(r, 422)["errors"]
        assert error["message"] == "String should have at most 200 characters", error
    await assert_nothing_written(client, ns)


# --- 13. headers: refused exactly when the spec refuses them -----------------------------

HEADER_CASES = [
    ("x-namespace", "t-other.ns_1"),
    ("x-namespace", "n" * 64),
    ("x-namespace", "n" * 65),
    ("x-namespace", "a b"),
    ("x-namespace", "a/b"),
    ("HTM-Consistency-Token", "0/1A2B3C4"),
    ("HTM-Consistency-Token", "1/2/3"),
    ("HTM-Consistency-Token", "null"),
]


@pytest.mark.parametrize(("header", "value"), HEADER_CASES)
async def test_a_header_is_refused_exactly_when_the_spec_refuses_it(client, header, value) -> None:
    spec = json.loads(SPEC_PATH.read_text())
    [schema] = [
        p["schema"] for p in spec["paths"]["/v1/stats"]["get"]["parameters"] if p["name"] == header
    ]
    allowed = jsonschema.Draft202012Validator(schema).is_valid(value)
    r = await client.get("/v1/stats", headers={header: value})
    assert r.status_code == (200 if allowed else 422), r.text
    if not allowed:
        assert [e["field"] for e in r.json()["errors"]] == [f"header.{header}"]


async def test_an_optional_header_sent_empty_is_one_not_sent(client) -> None:
    r = await client.get("/v1/stats", headers={"X-Namespace": "", "HTM-Consistency-Token": ""})
    assert r.status_code == 200, r.text
    del client.headers["X-Namespace"]
    assert r.json() == (await client.get("/v1/stats")).json()  # the default namespace's
