"""The MCP tools state_get and state_set (issue 48): in the default set (HTM_MCP_TOOLS), the same
service as the REST routes, over the official SDK client against a live server."""

from __future__ import annotations

import uuid

import pytest
from mcp.shared.exceptions import MCPError

from tests.mcp.test_mcp_tools import mcp_session


async def test_state_tools_round_trip_with_compare_and_set(live_server_factory) -> None:
    base = live_server_factory()
    ns = f"t-{uuid.uuid4().hex[:12]}"
    async with mcp_session(base, **{"X-Namespace": ns, "X-Robot": "agent"}) as s:
        names = [t.name for t in (await s.list_tools()).tools]
        assert [n for n in names if n.startswith("state")] == ["state_get", "state_set"]
        r = await s.call_tool("state_set", {"key": "plan", "value": {"step": 1}, "pinned": True})
        assert r.is_error is False
        v1 = r.structured_content["version"]
        assert r.content[0].text == f"plan v{v1}"
        got = await s.call_tool("state_get", {"key": "plan"})
        assert got.structured_content == {"key": "plan", "value": {"step": 1}, "version": v1,
                                          "deleted": False}  # fmt: skip
        assert got.content[0].text == f'plan v{v1}: {{"step":1}}'

        r = await s.call_tool("state_set", {"key": "plan", "value": 2, "version": v1})
        v2 = r.structured_content["version"]
        assert v2 > v1
        stale = await s.call_tool("state_set", {"key": "plan", "value": 3, "version": v1})
        assert stale.is_error is True
        assert (stale.structured_content["status"], stale.structured_content["version"]) == (
            412,
            v2,
        )
        gone = await s.call_tool("state_set", {"key": "plan", "value": None})
        assert gone.structured_content == {"key": "plan", "deleted": True}
        missing = await s.call_tool("state_get", {"key": "plan"})
        assert (missing.is_error, missing.structured_content["status"]) == (True, 404)


async def test_state_tools_are_not_offered_when_the_setting_leaves_them_out(
    live_server_factory,
) -> None:
    base = live_server_factory(mcp_tools="remember,recall")
    async with mcp_session(base, **{"X-Namespace": f"t-{uuid.uuid4().hex[:12]}"}) as s:
        assert not [t.name for t in (await s.list_tools()).tools if t.name.startswith("state")]
        with pytest.raises(MCPError):
            await s.call_tool("state_get", {"robot": "a", "key": "k"})
