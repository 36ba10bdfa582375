"""The entity tools through the SDK's own client against a live server: "everything about
Carla" lists her memories, newest first, as the robot may read them; the entity list."""

from __future__ import annotations

import uuid

import pytest

from tests.mcp.test_mcp_tools import mcp_session


@pytest.fixture(scope="module")
def base(live_server_factory) -> str:
    return live_server_factory(mcp_tools="all")


async def test_everything_about_carla_over_mcp(base) -> None:
    ns = {"X-Namespace": f"t-{uuid.uuid4().hex[:10]}"}
    memories = [
        ("ann", {"key": "c1", "content": "Carla moved to Lisbon."}),
        ("ann", {"key": "c2", "content": "I love pottery", "metadata": {"speaker": "Carla"}}),
        ("ann", {"key": "a1", "content": "Ana likes Lisbon."}),
        ("bob", {"key": "c3", "content": "Carla's surprise party", "visibility": "private"}),
        ("ann", {"key": "c4", "content": "we had dinner with Carla"}),
    ]
    for robot, body in memories:
        async with mcp_session(base, **ns, **{"X-Robot": robot}) as s:
            r = await s.call_tool("remember", body)
            assert not r.is_error, r.content
    async with mcp_session(base, **ns, **{"X-Robot": "ann"}) as s:
        r = await s.call_tool("entity_memories", {"entity": "carla"})
        assert not r.is_error, r.content
        assert [m["key"] for m in r.structured_content["memories"]] == ["c4", "c2", "c1"]
        lines = r.content[0].text.splitlines()
        assert [line.split(" ", 2)[1] for line in lines] == ["c4:", "c2:", "c1:"]
        assert lines[0].endswith("c4: we had dinner with Carla")
        r = await s.call_tool("entity_memories", {"entity": "Carla", "limit": 2})
        assert [m["key"] for m in r.structured_content["memories"]] == ["c4", "c2"]
        cursor = r.structured_content["next_cursor"]
        assert r.content[0].text.endswith(f"more: cursor={cursor}")
        r = await s.call_tool("entity_memories", {"entity": "Carla", "cursor": cursor})
        assert [m["key"] for m in r.structured_content["memories"]] == ["c1"]
        r = await s.call_tool("entity_memories", {"entity": "Nobody"})
        assert (r.is_error, r.content[0].text) == (False, "nothing about Nobody")
        r = await s.call_tool("entities", {})
        got = [(e["entity"], e["kinds"], e["memories"]) for e in r.structured_content["entities"]]
        assert got == [
            ("carla", ["name", "person"], 3),
            ("lisbon", ["name"], 2),
            ("ana", ["name"], 1),
        ]
        assert r.content[0].text == "carla (name/person): 3\nlisbon (name): 2\nana (name): 1"
        r = await s.call_tool("entities", {"kind": "person"})
        assert [e["entity"] for e in r.structured_content["entities"]] == ["carla"]
        for bad in ({"entity": "'s"}, {"entity": ""}, {"entity": "a\u0000"}, {"entity": 1}):
            r = await s.call_tool("entity_memories", bad)
            assert r.is_error, bad
        r = await s.call_tool("entities", {"kind": "place"})
        assert r.is_error
    async with mcp_session(base, **ns, **{"X-Robot": "bob"}) as s:
        r = await s.call_tool("entity_memories", {"entity": "carla"})
        assert [m["key"] for m in r.structured_content["memories"]] == ["c4", "c3", "c2", "c1"]
