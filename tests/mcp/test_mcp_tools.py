"""The MCP server at /mcp, driven by the SDK's own client against a live server."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

TOOLS = [  # HTM_MCP_TOOLS=all, without an LLM (extract_facts needs one)
    "remember", "recall", "context", "forget", "memory_restore", "memory_update",
    "memory_importance", "memory_feedback", "memory_list", "stats", "list_tags", "memory_versions",
    "memory_history", "entities", "entity_memories", "memory_related", "memory_link",
    "session_append", "session_window", "prompt", "state_get", "state_set",
    "profile_get", "profile_set", "snapshot_create", "snapshot_list",
    "snapshot_restore", "group_create", "group_join", "group_leave", "group_status",
    "group_failover", "group_recall", "pools", "pool_put", "pool_grant",
]  # fmt: skip
READERS = {
    "context", "memory_list", "stats", "list_tags", "memory_versions", "memory_history",
    "memory_related", "group_status", "profile_get", "snapshot_list", "pools", "entities",
    "entity_memories", "state_get",
}  # fmt: skip


@asynccontextmanager
async def mcp_session(base: str, **headers: str) -> AsyncIterator[ClientSession]:
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(f"{base}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@pytest.fixture(scope="module")
def base(live_server_factory) -> str:
    return live_server_factory(mcp_tools="all")


async def test_lists_the_tools_with_titles_hints_and_output_schemas(base) -> None:
    async with mcp_session(base) as s:
        listed = (await s.list_tools()).tools
    assert [t.name for t in listed] == TOOLS
    for t in listed:
        assert t.title and t.description, t.name
        assert t.output_schema is not None and t.output_schema["type"] == "object", t.name
        assert t.input_schema["type"] == "object", t.name
        hints = t.annotations
        assert hints is not None and hints.open_world_hint is False, t.name
        if t.name in READERS:
            assert hints.read_only_hint is True, t.name
        else:
            assert hints.read_only_hint is None and hints.destructive_hint is not None, t.name
    by_name = {t.name: t for t in listed}
    assert by_name["forget"].annotations.destructive_hint is True
    assert by_name["remember"].annotations.destructive_hint is False
    link = by_name["memory_link"].annotations
    assert (link.destructive_hint, link.idempotent_hint) == (False, True)
    assert by_name["memory_link"].input_schema["required"] == ["key", "target"]
    assert set(by_name["memory_related"].output_schema["properties"]) == {"related"}
    assert by_name["recall"].input_schema["required"] == ["query"]
    assert set(by_name["recall"].output_schema["properties"]) == {"hits"}


async def test_tools_answer_compact_text_with_a_default_robot(base) -> None:
    ns = f"t-{uuid.uuid4().hex[:10]}"
    async with mcp_session(base, **{"X-Namespace": ns, "X-Robot": "ann"}) as s:
        added = await s.call_tool(
            "remember",
            {"key": "tea", "content": "Ann drinks green tea", "importance": 7, "tags": ["food"]},
        )
        assert not added.is_error, added.content
        assert added.content[0].text == "remembered tea"
        assert added.structured_content == {
            "key": "tea", "created": True, "superseded": [],
            "may_supersede": [],
        }  # fmt: skip
        assert (await s.call_tool("remember", {"content": "Bob likes coffee"})).is_error is False
        recalled = await s.call_tool(
            "recall", {"query": "green tea", "strategy": "fulltext", "tags": ["food"]}
        )
        [hit] = recalled.structured_content["hits"]
        assert (hit["key"], hit["content"]) == ("tea", "Ann drinks green tea")
        assert recalled.content[0].text == f"{hit['date']}\ntea: Ann drinks green tea"
        context = await s.call_tool("context", {"strategy": "important"})
        assert context.content[0].text == "Ann drinks green tea\n\nBob likes coffee"
        assert context.structured_content["items"] == 2
        stats = await s.call_tool("stats", {})
        assert stats.structured_content["long_term"]["memories"] == 2
        forgot = await s.call_tool("forget", {"key": "tea"})
        assert forgot.content[0].text == "forgot (restorable): tea"
        again = await s.call_tool("recall", {"query": "green tea", "strategy": "fulltext"})
        assert (again.structured_content, again.content[0].text) == (
            {"hits": []},
            "no memories found",
        )
        # A robot given wins over the connection's.
        other = await s.call_tool("remember", {"robot": "bob", "content": "Bob's note"})
        assert not other.is_error
    async with httpx2.AsyncClient(base_url=base, headers={"X-Namespace": ns}) as http:
        listed = (await http.get("/v1/robots/x/memories")).json()["items"]
        assert [(m["author"], m["content"]) for m in listed] == [
            ("bob", "Bob's note"), ("ann", "Bob likes coffee")
        ]  # fmt: skip
    async with mcp_session(base, **{"X-Namespace": ns}) as s:  # no default robot
        nobody = await s.call_tool("remember", {"content": "whose?"})
        assert nobody.is_error and nobody.structured_content["status"] == 422
        assert [e["field"] for e in nobody.structured_content["errors"]] == ["robot"]


async def test_the_lifecycle_tools(base) -> None:
    ns = f"t-{uuid.uuid4().hex[:10]}"
    async with mcp_session(base, **{"X-Namespace": ns, "X-Robot": "ann"}) as s:
        for key, tags in (("pg", ["db:postgres"]), ("redis", ["db:redis", "cache"])):
            r = await s.call_tool("remember", {"key": key, "content": key, "tags": tags})
            assert not r.is_error, r.content
        tags = (await s.call_tool("list_tags", {})).structured_content
        async with httpx2.AsyncClient(base_url=base, headers={"X-Namespace": ns}) as http:
            assert tags == (await http.get("/v1/tags")).json()
            await http.put("/v1/robots/ann/memories/pg", json={"content": "pg 18"})
        versions = await s.call_tool("memory_versions", {"key": "pg"})
        assert [(v["version"], v["content"]) for v in versions.structured_content["versions"]] == [
            (2, "pg 18"), (1, "pg")
        ]  # fmt: skip
        r = await s.call_tool(
            "remember", {"key": "pg@19", "content": "pg 19", "supersedes": ["pg"]}
        )
        assert r.content[0].text == "remembered pg@19; it supersedes pg"
        chain = (await s.call_tool("memory_history", {"key": "pg"})).structured_content["chain"]
        assert [(m["key"], m["depth"], m["valid_to"] is None) for m in chain] == [
            ("pg", 0, False), ("pg@19", 1, True)
        ]  # fmt: skip
        linked = await s.call_tool(
            "memory_link", {"key": "redis", "target": "pg@19", "type": "supports", "weight": 0.5}
        )
        assert linked.content[0].text == "linked redis supports pg@19 (.50)"
        assert linked.structured_content == {"weight": 0.5, "created": True}
        related = await s.call_tool("memory_related", {"key": "pg@19"})
        assert related.content[0].text == (
            "pg@19 supersedes pg 1.00: pg 18\nredis supports pg@19 .50: redis"
        )
        assert [
            (m["key"], m["edge"], m["direction"]) for m in related.structured_content["related"]
        ] == [("pg", "supersedes", "out"), ("redis", "supports", "in")]
        self_link = await s.call_tool("memory_link", {"key": "pg", "target": "pg"})
        assert self_link.is_error and self_link.structured_content["status"] == 422
        for extra, keys in (({}, ["pg@19"]), ({"valid_at": "2000-01-01"}, [])):
            hits = (
                await s.call_tool("recall", {"query": "pg", "strategy": "fulltext", **extra})
            ).structured_content["hits"]
            assert sorted(h["key"] for h in hits) == keys
        appended = await s.call_tool(
            "session_append",
            {"session": "chat-1", "messages": [{"role": "user", "content": "hello"},
                                                {"role": "assistant", "content": "hi, Ann"}]},
        )  # fmt: skip
        assert appended.content[0].text == "appended 2 to chat-1"
        window = await s.call_tool("session_window", {"session": "chat-1", "n": 1})
        assert window.content[0].text == "assistant: hi, Ann"
        prompt = await s.call_tool(
            "prompt", {"input": "which database?", "session": "chat-1", "context_window": 4000}
        )
        messages = prompt.structured_content["messages"]
        assert [m["role"] for m in messages][-3:] == ["user", "assistant", "user"]
        assert messages[-1]["content"] == "which database?"
        bad = await s.call_tool(
            "session_append", {"session": "chat-1", "messages": [{"role": "x", "content": "y"}]}
        )
        assert bad.is_error and bad.structured_content["status"] == 422


async def test_bad_input_is_a_tool_error_and_writes_nothing(base) -> None:
    ns = f"t-{uuid.uuid4().hex[:10]}"
    async with mcp_session(base, **{"X-Namespace": ns, "X-Robot": "ann"}) as s:
        bad = await s.call_tool("remember", {"content": "x", "importance": 99})
        assert bad.is_error
        assert bad.structured_content["status"] == 422
        assert [e["field"] for e in bad.structured_content["errors"]] == ["importance"]
        typo = await s.call_tool("remember", {"contnet": "x"})
        assert typo.is_error and typo.structured_content["status"] == 422
        missing = await s.call_tool("forget", {"key": "absent"})
        assert missing.is_error and missing.structured_content["status"] == 404
        with pytest.raises(MCPError) as unknown:  # not a tool's error: a protocol error
            await s.call_tool("teleport", {})
        assert (unknown.value.code, unknown.value.data["status"]) == (INVALID_PARAMS, 404)
    async with httpx2.AsyncClient(base_url=base, headers={"X-Namespace": ns}) as http:
        assert (await http.get("/v1/robots")).json() == []


async def test_remember_and_recall_carry_confidence_and_source(base) -> None:
    ns = f"t-{uuid.uuid4().hex[:10]}"
    async with mcp_session(base, **{"X-Namespace": ns, "X-Robot": "ann"}) as s:
        for key, confidence, source in (("web", 0.4, "tool:web"), ("told", 0.9, "user")):
            r = await s.call_tool(
                "remember",
                {"key": key, "content": f"tea fact {key}", "confidence": confidence,
                 "source": source},
            )  # fmt: skip
            assert not r.is_error, r.content
        for extra, keys in (
            ({}, ["told", "web"]),
            ({"min_confidence": 0.5}, ["told"]),
            ({"sources": ["tool:web"]}, ["web"]),
        ):
            hits = (
                await s.call_tool("recall", {"query": "tea", "strategy": "fulltext", **extra})
            ).structured_content["hits"]
            assert sorted(h["key"] for h in hits) == keys, extra
        bad = await s.call_tool("remember", {"content": "x", "source": "-web"})
        assert bad.is_error and bad.structured_content["status"] == 422
        assert [e["field"] for e in bad.structured_content["errors"]] == ["source"]
        bad = await s.call_tool("recall", {"query": "tea", "sources": ["-web"]})
        assert bad.is_error and bad.structured_content["status"] == 422
    async with httpx2.AsyncClient(base_url=base, headers={"X-Namespace": ns}) as http:
        listed = (await http.get("/v1/robots/x/memories")).json()["items"]
        assert [(m["key"], m["confidence"], m["source"]) for m in listed] == [
            ("told", 0.9, "user"), ("web", 0.4, "tool:web")
        ]  # fmt: skip


async def test_with_auth_on_mcp_needs_a_key_and_its_role(live_server_factory, database_url) -> None:
    base = live_server_factory(auth_enabled=True, mcp_tools="all")
    async with httpx2.AsyncClient() as http:
        r = await http.post(f"{base}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert r.status_code == 401
    assert r.headers["content-type"] == "application/problem+json"
    assert r.headers["www-authenticate"] == "Bearer"
    # The SDK's own client cannot even initialize without a key.
    with pytest.raises(Exception):  # noqa: B017
        async with mcp_session(base):
            pass

    ns = f"t-{uuid.uuid4().hex[:10]}"
    keys = {role: await _key(database_url, ns, role) for role in ("writer", "reader")}
    async with mcp_session(base, Authorization=f"Bearer {keys['writer']}") as s:
        added = await s.call_tool("remember", {"robot": "ann", "content": "kept"})
        assert not added.is_error, added.content
    async with mcp_session(base, Authorization=f"Bearer {keys['reader']}") as s:
        refused = await s.call_tool("remember", {"robot": "ann", "content": "not kept"})
        assert refused.is_error and refused.structured_content["status"] == 403
        stats = await s.call_tool("stats", {"robot": "ann"})
        assert stats.structured_content["long_term"]["memories"] == 1
        # The tools that read, as their REST routes (GET) do, take a reader key.
        for name, args in (("list_tags", {"robot": "ann"}), ("context", {"robot": "ann"})):
            assert not (await s.call_tool(name, args)).is_error, name
        versions = await s.call_tool("memory_versions", {"robot": "ann", "key": "missing"})
        assert versions.structured_content["status"] == 404
        refused = await s.call_tool("session_window", {"robot": "ann", "session": "s"})
        assert refused.structured_content["status"] == 403


def test_the_readme_names_the_tools_a_reader_may_call() -> None:
    """docs/mcp.md says which tools a reader key may call: exactly TOOLS' readers."""
    import re

    from app.config import PROJECT_ROOT
    from app.mcp.tools import TOOLS

    page = (PROJECT_ROOT / "docs" / "mcp.md").read_text()
    said = re.search(r"\(([^()]*) need `reader`, the others `writer`", page)
    assert said is not None
    named = re.findall(r"`([a-z_]+)`", said.group(1))
    assert sorted(named) == sorted(t.name for t in TOOLS.values() if t.role == "reader")


async def _key(database_url: str, namespace: str, role: str, robot: str | None = None) -> str:
    """A key made in the live server's database by the service layer, as `htm keys` does."""
    from app.auth.schemas import ApiKeyCreate
    from app.auth.service import ApiKeyService, KeyCache
    from app.cache import TtlCache
    from app.db.engine import create_engine
    from app.db.session import create_sessionmaker
    from app.namespaces.repository import NamespaceRepository
    from tests.conftest import make_settings

    engine = create_engine(make_settings(database_url, "redis://unused"))
    try:
        sessionmaker = create_sessionmaker(engine)
        ns_id = await NamespaceRepository.resolve(sessionmaker, TtlCache(0, 1), namespace)
        async with sessionmaker() as session, session.begin():
            created = await ApiKeyService(
                session=session, namespace_id=ns_id, cache=KeyCache()
            ).create(namespace, ApiKeyCreate(name=role, role=role, robot=robot))
    finally:
        await engine.dispose()
    return created.key


async def test_htm_mcp_serves_the_same_tools_over_stdio(database_url, redis_url, tmp_path) -> None:
    import os
    import sys

    from mcp.client.stdio import StdioServerParameters, stdio_client

    from app.config import PROJECT_ROOT

    ns = f"t-{uuid.uuid4().hex[:10]}"
    env = {
        "HTM_DATABASE_URL": database_url,
        "HTM_REDIS_URL": redis_url,
        "HTM_EMBEDDING_PROVIDER": "none",
        "HTM_DATA_DIR": str(tmp_path),
        "HTM_MCP_TOOLS": "all",
        **{k: v for k, v in os.environ.items() if k == "TIKTOKEN_CACHE_DIR"},
    }
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "app.cli", "mcp", "--namespace", ns, "--robot", "ann"],
        env=env,
        cwd=str(PROJECT_ROOT),
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
        await s.initialize()
        assert [t.name for t in (await s.list_tools()).tools] == TOOLS
        added = await s.call_tool("remember", {"content": "over stdio"})
        assert not added.is_error, added.content
        stats = await s.call_tool("stats", {})
        assert stats.structured_content["long_term"]["memories"] == 1
