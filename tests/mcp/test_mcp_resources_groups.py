"""MCP resources (the namespace's stats, tags and groups; a robot's working memory and recent
memories) and the group tools (create, join, leave, status, failover, group recall), through
the SDK's client against a live server."""

from __future__ import annotations

import json
import logging
import uuid

import httpx2
import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from tests.mcp.test_mcp_tools import _key, mcp_session


@pytest.fixture(scope="module")
def base(live_server_factory) -> str:
    return live_server_factory(mcp_tools="all")


async def _read(s, uri: str):
    r = await s.read_resource(uri)
    [content] = r.contents
    assert content.mime_type == "application/json"
    return json.loads(content.text)


async def test_resources_list_and_read(base) -> None:
    ns = f"t-{uuid.uuid4().hex[:10]}"
    async with mcp_session(base, **{"X-Namespace": ns, "X-Robot": "ann"}) as s:
        for key in ("one", "two"):
            await s.call_tool("remember", {"key": key, "content": f"memory {key}", "tags": ["x:y"]})
        await s.call_tool("group_create", {"group": "team", "members": ["bo", "cy"]})
        listed = [str(r.uri) for r in (await s.list_resources()).resources]
        assert listed == [
            "htm://stats", "htm://tags", "htm://groups",
            "htm://robots/ann/working-memory", "htm://robots/ann/recent",
            "htm://robots/ann/state",
        ]  # fmt: skip
        templates = [t.uri_template for t in (await s.list_resource_templates()).resource_templates]
        assert templates == [
            "htm://robots/{robot}/working-memory", "htm://robots/{robot}/recent",
            "htm://robots/{robot}/state",
        ]  # fmt: skip
        async with httpx2.AsyncClient(base_url=base, headers={"X-Namespace": ns}) as http:
            assert await _read(s, "htm://tags") == (await http.get("/v1/tags")).json()
            assert await _read(s, "htm://groups") == (await http.get("/v1/groups")).json()
            wm = (await http.get("/v1/robots/ann/working-memory")).json()
        assert (await _read(s, "htm://stats"))["memories"] == 2
        assert await _read(s, "htm://robots/ann/working-memory") == wm
        assert await _read(s, "htm://robots/ann/state") == {
            "robot": {"robot": "ann", "scope": "robot", "items": [], "next": None}
        }
        recent = await _read(s, "htm://robots/ann/recent")
        assert [(m["key"], m["content"]) for m in recent] == [
            ("two", "memory two"), ("one", "memory one")
        ]  # fmt: skip
        with pytest.raises(MCPError) as refused:
            await s.read_resource("htm://nothing")
        assert (refused.value.code, refused.value.message) == (
            INVALID_PARAMS, "no resource htm://nothing"
        )  # fmt: skip
        assert refused.value.data["status"] == 404


async def test_a_resource_of_another_robot_is_a_jsonrpc_error_logged_without_traceback(
    live_server_factory, database_url, caplog
) -> None:
    base = live_server_factory(auth_enabled=True, mcp_tools="all")
    ns = f"t-{uuid.uuid4().hex[:10]}"
    key = await _key(database_url, ns, "writer", robot="ann")
    caplog.set_level(logging.INFO)
    async with mcp_session(base, Authorization=f"Bearer {key}") as s:
        assert not (await s.call_tool("remember", {"key": "k", "content": "kept"})).is_error
        wm = await _read(s, "htm://robots/ann/working-memory")
        assert [i["key"] for i in wm["items"]] == ["k"]
        with pytest.raises(MCPError) as refused:
            await s.read_resource("htm://robots/bob/working-memory")
    error = refused.value
    assert (error.code, error.data["status"], error.data["uri"]) == (
        INVALID_PARAMS, 403, "htm://robots/bob/working-memory"
    )  # fmt: skip
    assert error.data["type"].endswith("/forbidden")
    assert [
        r.getMessage() for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR
    ] == []
    # each request is logged once, as every request (htm.request), not with the SDK's
    # stateless transport's "Terminating session: None" (issue 49)
    mcp_lines = [r.getMessage() for r in caplog.records if r.name == "htm.request"]
    assert mcp_lines and all(m.startswith("POST ") for m in mcp_lines), mcp_lines
    assert [r.getMessage() for r in caplog.records if "Terminating session" in r.getMessage()] == []


async def test_group_tools_create_join_leave_failover_and_recall(base) -> None:
    ns = f"t-{uuid.uuid4().hex[:10]}"
    async with mcp_session(base, **{"X-Namespace": ns, "X-Robot": "ann"}) as s:
        made = await s.call_tool("group_create", {"group": "ops", "members": ["bo"], "budget": 500})
        assert made.structured_content == {"group": "ops", "members": ["bo"], "budget": 500}
        joined = await s.call_tool("group_join", {"group": "ops"})  # the connection's robot
        assert joined.structured_content["members"] == ["ann", "bo"]
        assert joined.content[0].text == "group ops: ann, bo (500 tokens)"
        # a member's memory lands in the shared working memory
        await s.call_tool("remember", {"robot": "bo", "key": "db", "content": "the db is pg 18"})
        status = await s.call_tool("group_status", {"group": "ops"})
        assert status.structured_content["members"] == ["ann", "bo"]
        shared = await _read(s, "htm://robots/ann/working-memory")
        assert [i["key"] for i in shared["items"]] == ["db"]
        # bo fails: cy takes over, and the shared working memory stays
        over = await s.call_tool("group_failover", {"group": "ops", "failed": "bo", "to": "cy"})
        assert over.structured_content["members"] == ["ann", "cy"]
        taken = await _read(s, "htm://robots/cy/working-memory")
        assert [i["key"] for i in taken["items"]] == ["db"]
        alone = await _read(s, "htm://robots/bo/working-memory")
        assert alone["items"] == []
        left = await s.call_tool("group_leave", {"group": "ops", "robot": "ann"})
        assert left.structured_content["members"] == ["cy"]
        # group recall loads into the group's working memory
        await s.call_tool("remember", {"robot": "zed", "key": "tea", "content": "zed likes tea"})
        hits = await s.call_tool("group_recall", {"group": "ops", "query": "tea"})
        assert [h["key"] for h in hits.structured_content["hits"]] == ["tea"]
        shared = await _read(s, "htm://robots/cy/working-memory")
        assert sorted(i["key"] for i in shared["items"]) == ["db", "tea"]
        missing = await s.call_tool("group_status", {"group": "nope"})
        assert missing.is_error and missing.structured_content["status"] == 404
        taken_elsewhere = await s.call_tool("group_create", {"group": "b2", "members": ["cy"]})
        assert taken_elsewhere.is_error and taken_elsewhere.structured_content["status"] == 409
