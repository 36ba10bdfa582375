"""MCP prompts (recall-then-answer, remember-this-session) and resource subscriptions (a
robot's working memory and state, over MCP 2026-07-28's `subscriptions/listen`), through the
official SDK client against a live server."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import httpx2
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ResourceUpdated
from mcp_types import INVALID_PARAMS

from tests.mcp.test_mcp_tools import _key, mcp_session


@pytest.fixture(scope="module")
def base(live_server_factory) -> str:
    return live_server_factory()


@asynccontextmanager
async def modern(base: str, **headers: str) -> AsyncIterator[Client]:
    """A client on MCP 2026-07-28 (per-request, no handshake), the version that listens."""
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(f"{base}/mcp", http_client=http), mode="2026-07-28") as c,
    ):
        yield c


async def test_prompts_are_listed_with_their_arguments(base) -> None:
    async with mcp_session(base) as s:
        listed = (await s.list_prompts()).prompts
    assert [(p.name, [(a.name, a.required) for a in p.arguments or []]) for p in listed] == [
        ("recall_then_answer", [("question", True), ("robot", False)]),
        ("remember_this_session", [("session", True), ("robot", False)]),
    ]
    assert all(p.title and p.description for p in listed)


async def test_recall_then_answer_carries_the_recalled_memories(base) -> None:
    ns = f"t-{uuid.uuid4().hex[:10]}"
    async with mcp_session(base, **{"X-Namespace": ns, "X-Robot": "ann"}) as s:
        await s.call_tool("remember", {"key": "db", "content": "Staging runs PostgreSQL 18"})
        await s.call_tool("remember", {"key": "tea", "content": "Ann drinks green tea"})
        await s.call_tool("forget", {"key": "tea"})
        got = await s.get_prompt("recall_then_answer", {"question": "PostgreSQL"})
        [message] = got.messages
        assert message.role == "user"
        hit = await s.call_tool("recall", {"query": "PostgreSQL"})
        lines = hit.content[0].text
        assert message.content.text == (
            "Answer the question from these memories (a date line, then `key: content`, best "
            "first). Say so if they do not answer it; if the answer changes a fact, remember "
            f"the new one with supersedes.\n\n{lines}\n\nQuestion: PostgreSQL"
        )
        context = await s.call_tool("context", {})
        assert context.content[0].text == "Staging runs PostgreSQL 18"  # loaded, as recall does
        with pytest.raises(MCPError) as bad:
            await s.get_prompt("recall_then_answer", {"question": ""})
        assert (bad.value.code, bad.value.data["status"]) == (INVALID_PARAMS, 422)
        with pytest.raises(MCPError) as unknown:
            await s.get_prompt("recall_then_answer", {"question": "x", "topic": "y"})
        assert unknown.value.data["status"] == 422
        with pytest.raises(MCPError) as missing:
            await s.get_prompt("summarise", {})
        assert missing.value.message == (
            "no prompt 'summarise'; prompts: recall_then_answer, remember_this_session"
        )


async def test_remember_this_session_carries_the_conversation(base) -> None:
    ns = f"t-{uuid.uuid4().hex[:10]}"
    async with mcp_session(base, **{"X-Namespace": ns}) as s:
        said = [{"role": "user", "content": "I moved to Lisbon"},
                {"role": "assistant", "content": "Noted, Lisbon."}]  # fmt: skip
        await s.call_tool("session_append", {"robot": "ann", "session": "c1", "messages": said})
        got = await s.get_prompt("remember_this_session", {"session": "c1", "robot": "ann"})
        assert got.messages[0].content.text.endswith(
            "Conversation c1:\nuser: I moved to Lisbon\nassistant: Noted, Lisbon."
        )
        with pytest.raises(MCPError) as nobody:  # no robot given, none on the connection
            await s.get_prompt("remember_this_session", {"session": "c1"})
        assert nobody.value.data["status"] == 422


async def test_a_reader_key_cannot_get_a_prompt_that_writes(live_server_factory, database_url):
    base = live_server_factory(auth_enabled=True)
    reader = await _key(database_url, f"t-{uuid.uuid4().hex[:10]}", "reader")
    async with mcp_session(base, Authorization=f"Bearer {reader}") as s:
        with pytest.raises(MCPError) as refused:
            await s.get_prompt("recall_then_answer", {"question": "x", "robot": "ann"})
        assert refused.value.data["status"] == 403


async def _next(sub) -> ResourceUpdated:
    with anyio.fail_after(10):
        return await sub.__anext__()


async def test_a_subscription_delivers_working_memory_and_state_changes(base) -> None:
    ns = f"t-{uuid.uuid4().hex[:10]}"
    wm, state = "htm://robots/ann/working-memory", "htm://robots/ann/state"
    async with httpx2.AsyncClient(base_url=base, headers={"X-Namespace": ns}) as rest:
        await rest.post("/v1/robots/ann/memories", json={"key": "first", "content": "first"})
        async with (
            modern(base, **{"X-Namespace": ns, "X-Robot": "ann"}) as client,
            client.listen(resource_subscriptions=[wm, state, "htm://nothing"]) as sub,
        ):
            assert sorted(sub.honored.resource_subscriptions or []) == [state, wm]
            r = await rest.post("/v1/robots/ann/memories", json={"key": "k", "content": "new"})
            assert r.status_code == 201
            assert await _next(sub) == ResourceUpdated(uri=wm)
            body = await client.read_resource(wm)
            assert '"key":"k"' in body.contents[0].text
            r = await rest.put("/v1/robots/ann/state/plan", json={"value": {"step": 1}})
            assert r.status_code in (200, 201), r.text
            assert await _next(sub) == ResourceUpdated(uri=state)
            read = await client.read_resource(state)
            assert '"key":"plan"' in read.contents[0].text
            # over MCP too: a tool's change reaches the subscription
            done = await client.call_tool("forget", {"key": "first"})
            assert not done.is_error
            assert await _next(sub) == ResourceUpdated(uri=wm)


async def test_a_subscription_is_refused_for_another_robot_of_a_bound_key(
    live_server_factory, database_url
) -> None:
    base = live_server_factory(auth_enabled=True)
    ns = f"t-{uuid.uuid4().hex[:10]}"
    bound = await _key(database_url, ns, "writer", robot="ann")
    async with modern(base, Authorization=f"Bearer {bound}") as client:
        with pytest.raises(MCPError) as refused:
            async with client.listen(resource_subscriptions=["htm://robots/bob/working-memory"]):
                pass
        assert (refused.value.code, refused.value.data["status"]) == (INVALID_PARAMS, 403)
