"""Small builders and raw readers shared by the working-memory tests."""

from __future__ import annotations

from app.working_memory.items import WMItem
from app.working_memory.store import robot_keys

NS = "wmtest"


def item(
    key: str,
    tokens: int = 10,
    importance: float = 1.0,
    added: int = 1_700_000_000_000_000,
    access: int = 1_700_000_000_000,
    content: str | None = None,
    from_recall: bool = False,
) -> WMItem:
    return WMItem(
        key=key,
        content=f"content of {key}" if content is None else content,
        tokens=tokens,
        importance=importance,
        added_at_us=added,
        last_access_ms=access,
        from_recall=from_recall,
    )


async def access_order(redis, ns: str, robot: str) -> list[tuple[str, float]]:
    """The raw access ZSET, oldest access first."""
    return await redis.zrange(robot_keys(ns, robot).access, 0, -1, withscores=True)


async def meta(redis, ns: str, robot: str) -> dict[str, str]:
    return await redis.hgetall(robot_keys(ns, robot).meta)
