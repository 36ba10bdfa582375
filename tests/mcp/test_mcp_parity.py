"""The MCP tools that do what REST does (issue 48): restore, update (PUT), importance
(PATCH), feedback, list with filters and pages, state, through the official SDK client over
HTTP and stdio, each checked against its REST route's answer."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.mcp.test_mcp_tools import _key, mcp_session


@pytest.fixture(scope="module")
def base(live_server_factory) -> str:
    return live_server_factory(mcp_tools="all")


async def test_restore_undoes_a_forget_as_rest_does(base) -> None:
    ns = f"t-{uuid.uuid4().hex[:10]}"
    async with mcp_session(base, **{"X-Namespace": ns, "X-Robot": "ann"}) as s:
        await s.call_tool("remember", {"key": "tea", "content": "Ann drinks tea"})
        await s.call_tool("forget", {"key": "tea"})
        r = await s.call_tool("memory_restore", {"key": "tea"})
        assert (r.is_error, r.content[0].text) == (False, "restored tea")
        assert r.structured_content == {"key": "tea", "version": 1, "importance": 1.0}
        hits = await s.call_tool("recall", {"query": "tea", "strategy": "fulltext"})
        assert [h["key"] for h in hits.structured_content["hits"]] == ["tea"]
        missing = await s.call_tool("memory_restore", {"key": "absent"})
        assert (missing.is_error, missing.structured_content["status"]) == (True, 404)


async def test_update_is_a_put_and_importance_a_patch(base) -> None:
    ns = f"t-{uuid.uuid4().hex[:10]}"
    async with mcp_session(base, **{"X-Namespace": ns, "X-Robot": "ann"}) as s:
        made = await s.call_tool("memory_update", {"key": "db", "content": "pg 17", "tags": ["db"],
                                                    "importance": 6})  # fmt: skip
        assert (made.content[0].text, made.structured_content) == (
            "created db v1", {"key": "db", "version": 1, "importance": 6.0, "created": True}
        )  # fmt: skip
        # PUT: every field replaced, an absent one back to its default (tags, importance)
        put = await s.call_tool("memory_update", {"key": "db", "content": "pg 18"})
        assert (put.content[0].text, put.structured_content["importance"]) == (
            "updated db v2", 1.0
        )  # fmt: skip
        again = await s.call_tool("memory_update", {"key": "db", "content": "pg 18"})
        assert again.content[0].text == "updated db v2"  # a repeat changes nothing more
        boosted = await s.call_tool("memory_importance", {"key": "db", "boost": 2.5})
        assert boosted.content[0].text == "db v3: importance 3.5"
        sourced = await s.call_tool("memory_importance", {"key": "db", "source": "user",
                                                          "confidence": 0.8})  # fmt: skip
        assert sourced.structured_content == {"key": "db", "version": 4, "importance": 3.5}
        both = await s.call_tool("memory_importance", {"key": "db", "importance": 1, "boost": 1})
        assert (both.is_error, both.structured_content["status"]) == (True, 422)
        nothing = await s.call_tool("memory_importance", {"key": "db"})
        assert (nothing.is_error, nothing.structured_content["status"]) == (True, 422)
        bad = await s.call_tool("memory_update", {"key": "db", "content": "x", "importance": 11})
        assert [e["field"] for e in bad.structured_content["errors"]] == ["importance"]
    async with httpx2.AsyncClient(base_url=base, headers={"X-Namespace": ns}) as http:
        m = (await http.get("/v1/robots/ann/memories/db")).json()
        assert (m["content"], m["tags"], m["importance"], m["version"]) == ("pg 18", [], 3.5, 4)
        assert (m["source"], m["confidence"]) == ("user", 0.8)
        # the same refusal over REST, and nothing was written by the refused calls
        r = await http.patch("/v1/robots/ann/memories/db", json={"importance": 1, "boost": 1})
        assert r.status_code == 422
        versions = (await http.get("/v1/robots/ann/memories/db/versions")).json()["versions"]
        assert [v["version"] for v in versions] == [4, 3, 2, 1]


async def learned_of(http: httpx2.AsyncClient, robot: str, keys: list[str]) -> dict[str, tuple]:
    """Each memory's learned importance and feedback counts, once the access flush (about a
    second) has written every one of them."""
    with anyio.fail_after(15):
        while True:
            got = {k: (await http.get(f"/v1/robots/{robot}/memories/{k}")).json() for k in keys}
            if all(m["learned_importance"] is not None for m in got.values()):
                return {
                    k: (round(m["learned_importance"], 9), m["used_count"], m["unused_count"],
                        m["pinned_count"])
                    for k, m in got.items()
                }  # fmt: skip
            await anyio.sleep(0.2)


async def test_feedback_is_the_feedback_route_and_learns_what_it_learns(base) -> None:
    ns = f"t-{uuid.uuid4().hex[:10]}"
    R = "/v1/robots/ann/memories"
    async with httpx2.AsyncClient(base_url=base, headers={"X-Namespace": ns}) as http:
        keys = ["u-mcp", "u-rest", "n-mcp", "n-rest", "p-rest", "bad"]
        body = {"memories": [{"key": k, "content": f"note {k}"} for k in keys]}
        assert (await http.post(f"{R}/batch", json=body)).status_code == 201
        made = (await http.post(R, json={"content": "a key made up for me"})).json()["key"]
        rest = {
            k: (await http.post(f"{R}/{k}/feedback", json=sent)).json()
            for k, sent in (("u-rest", {"used": True}), ("n-rest", {"used": False}),
                            ("p-rest", {"pinned": True}))
        }  # fmt: skip
    async with mcp_session(base, **{"X-Namespace": ns, "X-Robot": "ann"}) as s:
        for args in (
            {"key": "bad"},  # neither
            {"key": "bad", "used": True, "pinned": True},  # both
            {"key": "bad", "pinned": False},
            {"key": "bad", "used": None},
            {"key": "bad", "used": "yes"},  # strict, as the REST body
            {"key": "bad", "used": 1},
            {"key": "bad", "used": True, "why": "x"},
        ):
            r = await s.call_tool("memory_feedback", args)
            assert (r.is_error, r.structured_content["status"]) == (True, 422), args
        for args in ({"key": "absent", "used": True}, {"key": "#999999999", "used": True}):
            r = await s.call_tool("memory_feedback", args)
            assert (r.is_error, r.structured_content["status"]) == (True, 404), args
        used = await s.call_tool("memory_feedback", {"key": "u-mcp", "used": True})
        assert used.content[0].text == "u-mcp: used; learned importance 0.2 of the way to 10"
        assert used.structured_content == {"key": "u-mcp", "used": True, "pinned": False,
                                           "step": 0.2}  # fmt: skip
        assert rest["u-rest"] == {**used.structured_content, "key": "u-rest",
                                  "learning_rate": 0.2}  # fmt: skip
        unused = await s.call_tool("memory_feedback", {"key": "n-mcp", "used": False})
        assert unused.content[0].text == "n-mcp: not used; learned importance 0.2 of the way to 0"
        assert rest["n-rest"] == {**unused.structured_content, "key": "n-rest",
                                  "learning_rate": 0.2}  # fmt: skip
        # a made-up key by its alias, as every answer writes it
        alias = (await s.call_tool("memory_list", {"limit": 1})).content[0].text.split()[1][:-1]
        assert alias.startswith("#")
        pinned = await s.call_tool("memory_feedback", {"key": alias, "pinned": True})
        assert pinned.content[0].text == f"{alias}: pinned; learned importance 0.4 of the way to 10"
        assert pinned.structured_content == {"key": made, "pinned": True, "step": 0.4}
        assert rest["p-rest"] == {**pinned.structured_content, "key": "p-rest", "used": None,
                                  "learning_rate": 0.2}  # fmt: skip
    async with httpx2.AsyncClient(base_url=base, headers={"X-Namespace": ns}) as http:
        learned = await learned_of(http, "ann", ["u-mcp", "u-rest", "n-mcp", "n-rest",
                                                 made, "p-rest"])  # fmt: skip
        # α = 0.2 from the writer's importance 1: used 1 + 0.2·9, not used 0.8·1, pinned 1 + 0.4·9
        assert learned == {
            "u-mcp": (2.8, 1, 0, 0), "u-rest": (2.8, 1, 0, 0),
            "n-mcp": (0.8, 0, 1, 0), "n-rest": (0.8, 0, 1, 0),
            made: (4.6, 0, 0, 1), "p-rest": (4.6, 0, 0, 1),
        }  # fmt: skip
        # the refused calls recorded nothing (the same flush wrote the others)
        m = (await http.get(f"{R}/bad")).json()
        assert (m["learned_importance"], m["used_count"], m["unused_count"], m["pinned_count"]) == (
            None, 0, 0, 0
        )  # fmt: skip


async def test_list_filters_and_pages_as_get_memories(base) -> None:
    ns = f"t-{uuid.uuid4().hex[:10]}"
    async with httpx2.AsyncClient(base_url=base, headers={"X-Namespace": ns}) as http:
        body = {"memories": [
            {"key": f"k{i}", "content": f"note {i}", "tags": ["even" if i % 2 == 0 else "odd"],
             "importance": i, "type": "fact" if i < 4 else "event"}
            for i in range(6)
        ]}  # fmt: skip
        assert (await http.post("/v1/robots/ann/memories/batch", json=body)).status_code == 201
        await http.post("/v1/robots/bob/memories", json={"key": "b", "content": "bob's"})
        await http.delete("/v1/robots/ann/memories/k0")
        rest = (await http.get("/v1/robots/ann/memories", params={"tag": "even"})).json()
    async with mcp_session(base, **{"X-Namespace": ns, "X-Robot": "ann"}) as s:
        even = await s.call_tool("memory_list", {"tags": ["even"]})
        assert [m["key"] for m in even.structured_content["memories"]] == [
            m["key"] for m in rest["items"]
        ]
        assert [m["key"] for m in even.structured_content["memories"]] == ["k4", "k2"]
        date = even.structured_content["memories"][0]["date"]
        assert even.content[0].text == f"{date} k4: note 4\n{date} k2: note 2"
        mine = await s.call_tool("memory_list", {"scope": "self", "type": "fact",
                                                 "min_importance": 2})  # fmt: skip
        assert [m["key"] for m in mine.structured_content["memories"]] == ["k3", "k2"]
        deleted = await s.call_tool("memory_list", {"include_deleted": True, "tags": ["even"]})
        assert [m["key"] for m in deleted.structured_content["memories"]] == ["k4", "k2", "k0"]
        first = await s.call_tool("memory_list", {"limit": 2})
        page = first.structured_content
        assert [m["key"] for m in page["memories"]] == ["b", "k5"]
        assert first.content[0].text.endswith(f"\nmore: cursor={page['next_cursor']}")
        rest_page = await s.call_tool("memory_list", {"limit": 10, "cursor": page["next_cursor"]})
        assert [m["key"] for m in rest_page.structured_content["memories"]] == [
            "k4", "k3", "k2", "k1"
        ]  # fmt: skip
        bad = await s.call_tool("memory_list", {"cursor": "not-ours"})
        assert (bad.is_error, bad.structured_content["status"]) == (True, 400)


async def test_a_reader_key_lists_but_does_not_update(live_server_factory, database_url) -> None:
    base = live_server_factory(auth_enabled=True, mcp_tools="all")
    ns = f"t-{uuid.uuid4().hex[:10]}"
    writer = await _key(database_url, ns, "writer")
    reader = await _key(database_url, ns, "reader")
    async with mcp_session(base, Authorization=f"Bearer {writer}", **{"X-Robot": "ann"}) as s:
        assert not (await s.call_tool("remember", {"key": "x", "content": "kept"})).is_error
    async with mcp_session(base, Authorization=f"Bearer {reader}", **{"X-Robot": "ann"}) as s:
        listed = await s.call_tool("memory_list", {})
        assert [m["key"] for m in listed.structured_content["memories"]] == ["x"]
        for name, args in (
            ("memory_update", {"key": "x", "content": "changed"}),
            ("memory_importance", {"key": "x", "boost": 1}),
            ("memory_restore", {"key": "x"}),
            ("memory_feedback", {"key": "x", "used": True}),
        ):
            r = await s.call_tool(name, args)
            assert (r.is_error, r.structured_content["status"]) == (True, 403), name


@asynccontextmanager
async def stdio_session(
    database_url: str, redis_url: str, tmp_path, ns: str, tools: str = "all", **session: Any
) -> AsyncIterator[ClientSession]:
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from app.config import PROJECT_ROOT

    env = {
        "HTM_DATABASE_URL": database_url,
        "HTM_REDIS_URL": redis_url,
        "HTM_EMBEDDING_PROVIDER": "none",
        "HTM_DATA_DIR": str(tmp_path),
        "HTM_MCP_TOOLS": tools,
        **{k: v for k, v in os.environ.items() if k == "TIKTOKEN_CACHE_DIR"},
    }
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "app.cli", "mcp", "--namespace", ns, "--robot", "ann"],
        env=env,
        cwd=str(PROJECT_ROOT),
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write, **session) as s:
        await s.initialize()
        yield s


async def test_the_parity_tools_over_stdio(base, database_url, redis_url, tmp_path) -> None:
    ns = f"t-{uuid.uuid4().hex[:10]}"
    async with stdio_session(database_url, redis_url, tmp_path, ns) as s:
        r = await s.call_tool("memory_update", {"key": "db", "content": "pg 18"})
        assert r.content[0].text == "created db v1"
        r = await s.call_tool("memory_importance", {"key": "db", "importance": 7})
        assert r.content[0].text == "db v2: importance 7"
        await s.call_tool("forget", {"key": "db"})
        gone = await s.call_tool("memory_list", {})
        assert gone.structured_content == {"memories": []}
        r = await s.call_tool("memory_restore", {"key": "db"})
        assert r.content[0].text == "restored db"
        listed = await s.call_tool("memory_list", {})
        assert [m["key"] for m in listed.structured_content["memories"]] == ["db"]
        r = await s.call_tool("state_set", {"key": "plan", "value": {"step": 1}})
        v = r.structured_content["version"]
        got = await s.call_tool("state_get", {"key": "plan"})
        assert got.content[0].text == f'plan v{v}: {{"step":1}}'
        r = await s.call_tool("memory_feedback", {"key": "db", "pinned": True})
        assert r.content[0].text == "db: pinned; learned importance 0.4 of the way to 10"
        bad = await s.call_tool("memory_feedback", {"key": "db", "pinned": False})
        assert (bad.is_error, bad.structured_content["status"]) == (True, 422)
    # the stdio process's flush wrote it (at its interval or at its exit): from importance 7,
    # 7 + 0.4·3, as the REST route's pin would
    async with httpx2.AsyncClient(base_url=base, headers={"X-Namespace": ns}) as http:
        assert await learned_of(http, "ann", ["db"]) == {"db": (8.2, 0, 0, 1)}


# The SDK's client warns that MCP 2026-07-28 replaced these with subscriptions/listen.
@pytest.mark.filterwarnings("ignore:resources/(un)?subscribe is removed")
async def test_resources_subscribe_over_stdio_delivers_changes(
    database_url, redis_url, tmp_path
) -> None:
    """A handshake-era client (2025-11-25) on a connection that lasts: resources/subscribe."""
    updated: list[str] = []
    arrived = anyio.Event()

    async def on_message(message: Any) -> None:
        nonlocal arrived
        if getattr(message, "method", None) == "notifications/resources/updated":
            updated.append(str(message.params.uri))
            arrived.set()

    async def next_update() -> str:
        nonlocal arrived
        with anyio.fail_after(10):
            await arrived.wait()
        arrived = anyio.Event()
        return updated.pop(0)

    ns = f"t-{uuid.uuid4().hex[:10]}"
    wm, state = "htm://robots/ann/working-memory", "htm://robots/ann/state"
    async with stdio_session(
        database_url, redis_url, tmp_path, ns, message_handler=on_message
    ) as s:
        await s.call_tool("remember", {"key": "one", "content": "first"})
        for uri in (wm, state):
            await s.subscribe_resource(uri)
        await s.call_tool("remember", {"key": "two", "content": "second"})
        assert await next_update() == wm
        await s.call_tool("state_set", {"key": "plan", "value": 1})
        assert await next_update() == state
        await s.unsubscribe_resource(wm)
        await s.call_tool("forget", {"key": "two"})  # no longer followed
        await s.call_tool("state_set", {"key": "plan", "value": 2})
        assert await next_update() == state
        assert updated == []


async def test_over_http_a_handshake_client_is_not_offered_resources_subscribe(base) -> None:
    async with (
        httpx2.AsyncClient(timeout=30) as http,
        streamable_http_client(f"{base}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as s,
    ):
        init = await s.initialize()
        assert init.capabilities.resources is not None
        assert not init.capabilities.resources.subscribe


async def test_a_listen_over_stdio_delivers_a_change(database_url, redis_url, tmp_path) -> None:
    """A client on MCP 2026-07-28 over stdio listens as it would over HTTP."""
    from mcp.client.client import Client
    from mcp.client.stdio import StdioServerParameters
    from mcp.shared.subscriptions import ResourceUpdated

    from app.config import PROJECT_ROOT

    ns = f"t-{uuid.uuid4().hex[:10]}"
    env = {
        "HTM_DATABASE_URL": database_url,
        "HTM_REDIS_URL": redis_url,
        "HTM_EMBEDDING_PROVIDER": "none",
        "HTM_DATA_DIR": str(tmp_path),
        **{k: v for k, v in os.environ.items() if k == "TIKTOKEN_CACHE_DIR"},
    }
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "app.cli", "mcp", "--namespace", ns, "--robot", "ann"],
        env=env,
        cwd=str(PROJECT_ROOT),
    )
    wm = "htm://robots/ann/working-memory"
    async with Client(params, mode="2026-07-28") as client:
        await client.call_tool("remember", {"key": "one", "content": "first"})
        async with client.listen(resource_subscriptions=[wm]) as sub:
            await client.call_tool("remember", {"key": "two", "content": "second"})
            with anyio.fail_after(10):
                assert await sub.__anext__() == ResourceUpdated(uri=wm)
