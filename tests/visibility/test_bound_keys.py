"""Keys bound to a robot (issue 35): such a key acts as its robot alone, over REST and MCP,
so the holder of one robot's key never reads another robot's private memories; and visibility
through the MCP tools, checked by the official SDK client."""

from __future__ import annotations

import uuid

import pytest

from tests.auth.test_auth import bearer
from tests.mcp.test_mcp_tools import _key, mcp_session

PROBLEM = "application/problem+json"


@pytest.fixture(scope="module")
def base(live_server_factory) -> str:
    return live_server_factory(auth_enabled=True, mcp_tools="all")


async def test_a_bound_key_acts_only_as_its_robot(base, database_url) -> None:
    import httpx

    ns = f"t-{uuid.uuid4().hex[:10]}"
    admin = bearer(await _key(database_url, ns, "admin"))
    ann = bearer(await _key(database_url, ns, "writer", robot="ann"))
    async with httpx.AsyncClient(base_url=base, timeout=10) as http:
        r = await http.post(
            "/v1/robots/bob/memories",
            headers=admin,
            json={"key": "bob-diary", "content": "bob diary entry", "visibility": "private"},
        )
        assert r.status_code == 201
        r = await http.post(
            "/v1/robots/ann/memories", headers=ann, json={"key": "a1", "content": "ann note"}
        )
        assert r.status_code == 201
        for method, path in [
            ("GET", "/v1/robots/bob/memories/bob-diary"),
            ("GET", "/v1/robots/bob/memories"),
            ("POST", "/v1/robots/bob/recall"),
            ("GET", "/v1/robots/bob/working-memory"),
            ("GET", "/v1/robots/bob/working-memory/events"),
            ("GET", "/v1/tags?robot=bob"),
            ("PUT", "/v1/groups/spies"),
        ]:
            body = {"query": "diary"} if path.endswith("recall") else {"members": ["ann", "bob"]}
            r = await http.request(method, path, headers=ann, json=body)
            assert r.status_code == 403, (path, r.text)
            assert r.headers["content-type"] == PROBLEM
            assert "diary entry" not in r.text
        assert (await http.get("/v1/groups", headers=admin)).json() == []
        keys = (await http.get("/v1/keys", headers=admin)).json()
        assert sorted((k["role"], k["robot"]) for k in keys) == [("admin", None), ("writer", "ann")]
        r = await http.post(
            "/v1/keys", headers=admin, json={"name": "x", "role": "admin", "robot": "ann"}
        )
        assert r.status_code == 422

    async with mcp_session(base, **ann) as s:
        # The bound robot is the connection's default robot.
        r = await s.call_tool("recall", {"query": "note", "strategy": "fulltext"})
        assert [h["key"] for h in r.structured_content["hits"]] == ["a1"]
        r = await s.call_tool("recall", {"query": "diary", "robot": "bob"})
        assert r.is_error and r.structured_content["status"] == 403
        r = await s.call_tool("group_create", {"group": "spies", "members": ["ann", "bob"]})
        assert r.is_error and r.structured_content["status"] == 403
        with pytest.raises(Exception):  # noqa: B017 - a resource of another robot
            await s.read_resource("htm://robots/bob/recent")


async def test_mcp_tools_read_and_write_by_visibility(live_server_factory) -> None:
    base = live_server_factory(mcp_tools="all")
    ns = {"X-Namespace": f"t-{uuid.uuid4().hex[:10]}"}
    async with mcp_session(base, **ns, **{"X-Robot": "ann"}) as ann:
        r = await ann.call_tool(
            "remember",
            {
                "key": "p1",
                "content": "ann private plan",
                "visibility": "private",
                "readers": ["cy"],
            },
        )
        assert not r.is_error, r.content
        r = await ann.call_tool("remember", {"key": "n1", "content": "shared plan"})
        assert not r.is_error
        r = await ann.call_tool("pool_put", {"pool": "ops", "type": "shared", "writers": ["ann"]})
        assert r.content[0].text == "pool ops shared: read: -; write: ann"
        r = await ann.call_tool("remember", {"key": "o1", "content": "ops plan", "pool": "ops"})
        assert not r.is_error, r.content
    async with mcp_session(base, **ns, **{"X-Robot": "bob"}) as bob:
        r = await bob.call_tool("recall", {"query": "plan", "strategy": "fulltext"})
        assert [h["key"] for h in r.structured_content["hits"]] == ["n1"]
        r = await bob.call_tool("memory_versions", {"key": "p1"})
        assert r.is_error and r.structured_content["status"] == 404
        r = await bob.call_tool("recall", {"query": "plan", "pools": ["ops"]})
        assert r.is_error and r.structured_content["status"] == 403
        r = await bob.call_tool("pool_grant", {"pool": "ops", "robot": "bob", "level": "read"})
        assert r.content[0].text == "pool ops shared: read: bob; write: ann"
        r = await bob.call_tool(
            "recall", {"query": "plan", "strategy": "fulltext", "pools": ["ops"]}
        )
        assert sorted(h["key"] for h in r.structured_content["hits"]) == ["n1", "o1"]
        r = await bob.call_tool("pool_grant", {"pool": "ops", "robot": "bob", "level": "none"})
        assert r.content[0].text == "pool ops shared: read: -; write: ann"
        r = await bob.call_tool("context", {})
        assert "ops plan" not in r.content[0].text
        r = await bob.call_tool("pools", {"pool": "ops"})
        assert r.structured_content["pools"][0]["memories"] == 1
    async with mcp_session(base, **ns, **{"X-Robot": "cy"}) as cy:
        r = await cy.call_tool("recall", {"query": "plan", "strategy": "fulltext"})
        assert sorted(h["key"] for h in r.structured_content["hits"]) == ["n1", "p1"]
