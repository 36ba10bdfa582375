"""The working-memory tier's value types, shared by the write protocol, the reads and the
repair worker: what is placed, who holds a memory, a protocol's scope, and how Redis being
unreachable is told apart from a bug (UNAVAILABLE, and ClusterConnection's one shape)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from redis.asyncio.connection import Connection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, RedisError

from app.visibility import NAMESPACE, Audience
from app.working_memory.items import WMItem

# Errors that mean "Redis is not there right now" rather than a bug. A cluster client raises
# RedisClusterException, which is no RedisError, when no node answers to tell it the slots,
# and its SlotNotCoveredError while a failover leaves a slot without a master.
UNAVAILABLE = (RedisError, RedisClusterException, OSError, TimeoutError)


class ClusterConnection(Connection):
    """A Redis Cluster node's connection (app/lifespan.create_redis). In a failover redis-py's
    cluster client closes every node's connections (after a ClusterDownError), also one
    another command has taken and not yet written on (its write runs a loop turn later, in
    asyncio.wait_for's task): that write met no writer, an AttributeError, and the request a
    500. That shape alone is a connection error: the client finds the slots again and sends
    the command once more, which is safe as none of it was sent; if that fails too, Redis is
    unavailable."""

    async def send_packed_command(
        self, command: bytes | str | Iterable[bytes], check_health: bool = True
    ) -> None:
        try:
            await super().send_packed_command(command, check_health)
        except AttributeError as exc:
            if exc.obj is not None or exc.name != "writelines":
                raise
            raise RedisConnectionError("the connection was closed before the write") from exc


def to_us(t: datetime) -> int:
    return int(t.timestamp() * 1_000_000)


def from_us(us: int) -> datetime:
    return datetime.fromtimestamp(us / 1_000_000, UTC)


class RedisUnavailable(Exception):
    pass


def member_items(rows: Sequence[Any]) -> list[WMItem]:
    """Mirror rows (MembershipRepository.members) as the items Redis holds for them."""
    return [
        WMItem(
            r.key,
            r.content,
            r.token_count,
            r.importance,
            to_us(r.added_at),
            to_us(r.last_access_at) // 1000,
            r.from_recall,
            r.id,
        )
        for r in rows
    ]


@dataclass
class RedisBreaker:
    """After a Redis failure, skip Redis for a short while instead of paying a connect
    timeout on every request; the first request after the pause tries again, and so does
    the lifespan's probe (every 0.1 s), which closes it as soon as Redis answers: the pause
    bounds how often a request pays for a Redis that is down, not how long one that is back
    stays unused. One per app."""

    pause_s: float
    down_until: float = 0.0
    failures: int = 0  # Redis failures seen (each trips the breaker), for /metrics

    @property
    def open(self) -> bool:
        return time.monotonic() < self.down_until

    def trip(self) -> None:
        self.failures += 1
        self.down_until = time.monotonic() + self.pause_s

    def reset(self) -> None:
        self.down_until = 0.0

    async def probe(self, ping: Callable[[], Awaitable[object]]) -> None:
        """While open: try Redis once; close at once if it answers."""
        if not self.open:
            return
        try:
            await ping()
        except UNAVAILABLE:
            return
        self.reset()


@dataclass
class TierCounts:
    """What the write protocol did over the app's lifetime, for /metrics: memories evicted
    from working memory (by a placement, a budget change or a rebuild's trim) and robots
    rebuilt from the mirror (ones with something to load)."""

    evictions: int = 0
    rebuilds: int = 0


@dataclass
class RepairQueue:
    """Robots whose working memory may be out of line with the mirror where PostgreSQL could
    not even record that (it failed after the Redis script). Process-local; the repair
    worker rebuilds them once PostgreSQL answers."""

    robots: dict[int, tuple[int, str, str]] = field(default_factory=dict)

    def add(self, namespace_id: int, namespace: str, robot_id: int, robot: str) -> None:
        self.robots[robot_id] = (namespace_id, namespace, robot)

    def take(self) -> list[tuple[int, int, str, str]]:
        taken = [(rid, *rest) for rid, rest in self.robots.items()]
        self.robots.clear()
        return taken


@dataclass(frozen=True)
class Placement:
    """A memory to place, as read at `version`."""

    memory_id: int
    created_at: datetime
    version: int
    key: str
    content: str
    tokens: int
    importance: float
    audience: Audience = NAMESPACE  # who may read it (app/visibility.py)
    # Its last access, when not the placement's own instant: a recall's load applied after
    # the recall answered (app/working_memory/loads.py) records the recall's.
    at: datetime | None = None


@dataclass(frozen=True)
class Holder:
    robot_id: int
    robot: str


@dataclass(frozen=True)
class Scope:
    """The namespace a protocol instance works in: Redis keys use its name, rows its id."""

    namespace_id: int
    namespace: str
