"""The profile and snapshot tools (issue 35): their hints, and a round trip in compact text."""

from __future__ import annotations

import uuid

import pytest

from tests.mcp.test_mcp_tools import mcp_session


@pytest.fixture(scope="module")
def base(live_server_factory) -> str:
    return live_server_factory(mcp_tools="all")


async def test_the_profile_and_snapshot_tools_have_their_hints(base) -> None:
    async with mcp_session(base) as s:
        listed = {t.name: t for t in (await s.list_tools()).tools}
    hints = {
        name: (h.read_only_hint, h.destructive_hint, h.idempotent_hint)
        for name in ("profile_get", "profile_set", "snapshot_create", "snapshot_list",
                     "snapshot_restore")
        if (h := listed[name].annotations) is not None
    }  # fmt: skip
    assert hints == {
        "profile_get": (True, None, None),
        "profile_set": (None, True, True),
        "snapshot_create": (None, False, None),  # not idempotent: the default, unsaid
        "snapshot_list": (True, None, None),
        "snapshot_restore": (None, True, True),
    }
    assert set(listed["profile_set"].output_schema["properties"]) == {"subject", "slots", "tokens"}
    assert set(listed["snapshot_restore"].output_schema["properties"]) == {
        "restored", "skipped", "evicted", "tokens",
    }  # fmt: skip
    assert listed["profile_set"].input_schema["required"] == ["subject", "slots"]


async def test_profiles_and_snapshots_through_mcp(base) -> None:
    ns = f"t-{uuid.uuid4().hex[:10]}"
    async with mcp_session(base, **{"X-Namespace": ns, "X-Robot": "ann"}) as s:
        r = await s.call_tool("profile_set", {"subject": "maria", "slots": {"city": "Lisbon"}})
        assert not r.is_error, r.content
        r = await s.call_tool(
            "profile_set", {"subject": "maria", "slots": {"city": "Porto", "pet": "cat"}}
        )
        assert r.content[0].text == "city: Porto\npet: cat"
        assert r.structured_content["slots"] == {"city": "Porto", "pet": "cat"}
        got = await s.call_tool("profile_get", {"subject": "maria"})
        assert got.structured_content == r.structured_content
        none = await s.call_tool("profile_get", {"subject": "nobody"})
        assert none.content[0].text == "no profile of nobody"
        bad = await s.call_tool("profile_set", {"subject": "maria", "slots": {"Bad Slot": "x"}})
        assert bad.is_error and bad.structured_content["status"] == 422

        for key in ("a", "b"):
            assert not (await s.call_tool("remember", {"key": key, "content": key})).is_error
        snap = await s.call_tool("snapshot_create", {"name": "two"})
        sid = snap.structured_content["id"]
        assert snap.structured_content == {"id": sid, "items": 2, "tokens": 2}
        assert snap.content[0].text == f"snapshot {sid}: 2 items, 2 tokens"
        listed = await s.call_tool("snapshot_list", {})
        assert [x["id"] for x in listed.structured_content["snapshots"]] == [sid]
        assert not (await s.call_tool("forget", {"key": "b"})).is_error
        assert not (await s.call_tool("remember", {"key": "c", "content": "c"})).is_error
        restored = await s.call_tool("snapshot_restore", {"id": sid})
        assert restored.structured_content == {
            "restored": ["a"], "skipped": ["b (forgotten)"], "evicted": [], "tokens": 1,
        }  # fmt: skip
        assert restored.content[0].text == "restored 1 items, 1 tokens; skipped b (forgotten)"
        context = await s.call_tool("context", {})
        assert context.content[0].text == "a"
        missing = await s.call_tool("snapshot_restore", {"id": sid + 1000})
        assert missing.is_error and missing.structured_content["status"] == 404
