"""The resources: what an MCP client may read for its model without a tool call. The
namespace's statistics, tag tree and groups; a robot's working memory and its recent
memories, its state keys (templates, and listed for the connection's default robot). A
client following a robot's working memory or state subscribes to it (app/mcp/subscriptions.py)."""

from __future__ import annotations

import re
from typing import Any

from app.auth.caller import acts_as
from app.memories.model import ListFilters
from app.unit import UnitOfWork

TEMPLATES = [
    ("htm://robots/{robot}/working-memory", "working memory", "A robot's working memory"),
    ("htm://robots/{robot}/recent", "recent memories", "The 20 memories a robot added last"),
    ("htm://robots/{robot}/state", "state", "A robot's state keys with values (and its group's)"),
]
_FIXED = [
    ("htm://stats", "statistics", "The namespace's memories, robots and activity"),
    ("htm://tags", "tag tree", "The namespace's tags with counts"),
    ("htm://groups", "groups", "The namespace's robot groups"),
]
_ROBOT = re.compile(r"htm://robots/([A-Za-z0-9][A-Za-z0-9._-]{0,63})/(working-memory|recent|state)")
RECENT = 20
STATE_KEYS = 100


def RESOURCES(robot: str | None) -> list[tuple[str, str, str]]:
    mine = [(t.replace("{robot}", robot), n, d) for t, n, d in TEMPLATES] if robot else []
    return [*_FIXED, *mine]


async def read(u: UnitOfWork, uri: str) -> Any:
    """The resource's body (JSON-able), or None when there is no such resource."""
    if uri == "htm://stats":
        return (await u.stats.namespace()).model_dump(mode="json")
    if uri == "htm://tags":
        return (await u.tags.tree(None, None)).model_dump(mode="json")
    if uri == "htm://groups":
        return [g.model_dump(mode="json") for g in await u.groups.list()]
    found = _ROBOT.fullmatch(uri)
    if found is None:
        return None
    robot, what = found.groups()
    acts_as(u.caller, robot)
    if what == "working-memory":
        return (await u.working_memory.read(robot)).model_dump(mode="json")
    if what == "state":
        mine = await u.state.page(robot, limit=STATE_KEYS, values=True)
        body = {"robot": mine.model_dump(mode="json")}
        if (await u.robots.require(robot)).group is not None:
            group = await u.state.page(robot, scope="group", limit=STATE_KEYS, values=True)
            body["group"] = group.model_dump(mode="json")
        return body
    page = await u.reader.list(
        robot, "self", ListFilters(), timeframe=None, limit=RECENT, cursor=None
    )
    return [
        {"key": m.key, "date": m.created_at.isoformat(), "content": m.content} for m in page.items
    ]
