"""A robot as working memory knows it (`Robot`: its id, budget, stale flag and group, whose
working memory it reads and writes), and the robots this process saw recently (`RobotCache`),
so the hot paths skip a database round trip. app/robots (registration, budgets, removal)
stands above working memory and fills this cache.

A robot's id never changes; its budget changes only through PUT /v1/robots/{robot}, which
refreshes the entry here at once. Another process's PUT is seen when its invalidation
arrives (app/invalidation: milliseconds), within TTL_S when it cannot (the Redis
scripts enforce whatever budget a request passes, so a briefly stale budget never breaks the
budget invariant; the next request simply applies the new one). The same holds for the
working_memory_stale flag set by another process.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from app.cache import TtlCache

TTL_S = 5.0


@dataclass(frozen=True)
class Robot:
    id: int
    name: str
    budget: int
    # Redis missed a removal while it was unreachable; rebuild before trusting it.
    stale: bool = False
    # The group whose working memory this robot shares (app/groups), if any.
    group: Robot | None = None

    @property
    def working_memory(self) -> Robot:
        """Whose working memory this robot reads and writes: its group's, or its own."""
        return self.group or self


# A group's working memory belongs to a robot row of this name: no robot's name has a `:`.
GROUP_PREFIX = "group:"


def group_row_name(group: str) -> str:
    return GROUP_PREFIX + group


def group_name(row_name: str) -> str:
    return row_name.removeprefix(GROUP_PREFIX)


def robot_from_row(row: Any, default_budget: int) -> Robot:
    """A robot table row (id, name, working_memory_budget, working_memory_stale, and its
    group's as g_id, g_name, g_budget, g_stale when it has one) as a Robot."""
    group = None
    if getattr(row, "g_id", None) is not None:
        group = Robot(row.g_id, row.g_name, row.g_budget or default_budget, row.g_stale)
    return Robot(
        row.id,
        row.name,
        row.working_memory_budget or default_budget,
        row.working_memory_stale,
        group,
    )


class RobotCache:
    """The robots this process read recently. A change this process commits evicts the
    entry at once (`forget`), and `announce` (app/invalidation, wired by the lifespan) tells
    the other processes, which `drop` theirs. `generation` moves with every eviction: a
    lookup that began before one does not put what it read (`put(..., since=)`)."""

    def __init__(self, ttl_s: float = TTL_S, max_entries: int = 100_000) -> None:
        self._entries: TtlCache[tuple[int, str], Robot] = TtlCache(ttl_s, max_entries)
        self.generation = 0
        self.announce: Callable[[int, str], None] | None = None

    @property
    def cache(self) -> TtlCache[tuple[int, str], Robot]:
        """The entries, for /metrics' hit ratio."""
        return self._entries

    def get(self, namespace_id: int, name: str) -> Robot | None:
        return self._entries.get((namespace_id, name))

    def put(self, namespace_id: int, robot: Robot, *, since: int | None = None) -> None:
        """Remember the robot; not when `since` (the generation a lookup began in) is
        older than the cache's: it may have read the row before a change."""
        if since is None or since == self.generation:
            self._entries.put((namespace_id, robot.name), robot)

    def forget(self, namespace_id: int, name: str) -> None:
        """Evict the robot here and in every other process (its row changed)."""
        self.drop(namespace_id, name)
        if self.announce is not None:
            self.announce(namespace_id, name)

    def drop(self, namespace_id: int, name: str) -> None:
        """Evict the robot here only (another process announced the change)."""
        self.generation += 1
        self._entries.pop((namespace_id, name))

    def clear(self) -> None:
        self.generation += 1
        self._entries.clear()


class Robots(Protocol):
    """How working memory finds a robot by name (robots.service.RobotService): a 404 when
    it does not exist; reads never register robots."""

    async def require(self, name: str) -> Robot: ...
