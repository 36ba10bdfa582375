"""The entity tools' runs (app/mcp/tools.py's table names them): the REST routes' services,
answered as compact lines."""

from __future__ import annotations

from typing import Any

from app.mcp.schemas import About, Entities, EntitiesIn, EntityIn, when
from app.memories.model import ListFilters
from app.unit import UnitOfWork


async def entities_tool(u: UnitOfWork, i: EntitiesIn, robot: str) -> tuple[Any, str]:
    page = await u.entities.list(robot, kind=i.kind, limit=i.limit, cursor=i.cursor)
    rows: list[dict[str, Any]] = [
        {"entity": e.entity, "kinds": e.kinds, "memories": e.memories, "latest": when(e.latest_at)}
        for e in page.items
    ]
    text = "\n".join(f"{e.entity} ({'/'.join(e.kinds)}): {e.memories}" for e in page.items)
    if page.next_cursor:
        text += f"\nmore: cursor={page.next_cursor}"
    return Entities(entities=rows, next_cursor=page.next_cursor), text or "no entities"


async def about_tool(u: UnitOfWork, i: EntityIn, robot: str) -> tuple[Any, str]:
    page = await u.reader.list(
        robot, "all", ListFilters(), timeframe=None, limit=i.limit, cursor=i.cursor,
        entity=i.entity,
    )  # fmt: skip
    rows = [{"key": m.key, "date": when(m.created_at), "content": m.content} for m in page.items]
    text = "\n".join(f"{r['date']} {r['key']}: {r['content']}" for r in rows)
    if page.next_cursor:
        text += f"\nmore: cursor={page.next_cursor}"
    return About(memories=rows, next_cursor=page.next_cursor), text or f"nothing about {i.entity}"
