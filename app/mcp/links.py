"""The relationship tools' runs (app/mcp/tools.py's table names them)."""

from __future__ import annotations

from typing import Any

from app.mcp.schemas import Linked, LinkIn, RelatedIn, RelatedOut, score
from app.relationships.schemas import LinkCreate
from app.unit import UnitOfWork


async def related_tool(u: UnitOfWork, i: RelatedIn, robot: str) -> tuple[Any, str]:
    found = await u.links.related(robot, i.key, i.depth, limit=i.limit, types=None)
    # Each edge as it reads, `source type target` (digest derived_from notes), then the weight
    # of the path and the memory's text.
    lines = [
        (f"{m.via} {m.edge} {m.key}" if m.direction == "out" else f"{m.key} {m.edge} {m.via}")
        + f" {score(m.weight)}: {m.content}"
        for m in found.memories
    ]
    rows = [
        {"key": m.key, "weight": round(m.weight, 3), "depth": m.depth, "edge": m.edge,
         "direction": m.direction, "via": m.via, "content": m.content}
        for m in found.memories
    ]  # fmt: skip
    return RelatedOut(related=rows), "\n".join(lines) or "nothing related"


async def link_tool(u: UnitOfWork, i: LinkIn, robot: str) -> tuple[Any, str]:
    link = await u.links.link(
        robot, i.key, LinkCreate(target=i.target, type=i.type, weight=i.weight)
    )
    how = "linked" if link.created else "link updated:"
    text = f"{how} {link.source} {link.type} {link.target} ({score(link.weight)})"
    return Linked(weight=link.weight, created=link.created), text
