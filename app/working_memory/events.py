"""The working-memory change stream, GET /v1/robots/{robot}/working-memory/events: server-sent
events a standby agent follows to hold the same working set as the active one, and to take
over at once.

Every script that changes a working set appends its changes to the set's Redis stream in the
same atomic step (scripts/common.lua, emit_*): `added` (with the item), `evicted`, `removed`,
`cleared` (`reason`: cleared, or rebuilt when Redis lost the set and it was rebuilt from
PostgreSQL); and `state` (`key`, `version`, `op`: put or delete) for a change of the
holder's state keys (app/state/; written by scripts/state.lua, not while Redis is down).
Each event's SSE id is its stream entry id, increasing; `data` carries the
change's `seq`. A group member's stream is its group's.

A client connecting without `Last-Event-ID` first gets a `snapshot` event (every item, read
atomically with the stream's position); with a `Last-Event-ID` the stream still holds, it
gets exactly the events after it; with one the stream no longer holds (it keeps about the
last 1,000), a `snapshot` again. So a client applying events in order never misses a change
and never applies one twice. A comment line keeps idle connections open.

A stream outlives the request that authorized it, so it asks again (`allowed`) before it
sends each batch of events and at least every `block_ms` while idle: a revoked key's stream
ends with a `closed` event (`reason: unauthorized`) within the key cache's bound (1 s in every
process, app/auth/service.py), like any other request with that key. The client's reconnect
then gets the 401.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from time import monotonic
from typing import Any

import orjson

from app.errors import ServiceUnavailable
from app.working_memory.model import UNAVAILABLE, RedisUnavailable
from app.working_memory.robots import Robot, group_name
from app.working_memory.service import WorkingMemoryService

log = logging.getLogger(__name__)

EVENT_ID = re.compile(r"\d{1,20}-\d{1,20}")
KEEPALIVE_S = 15.0
_INTS = ("seq", "memory_id", "tokens", "version")


def sse(event_id: str, kind: str, data: dict[str, Any]) -> bytes:
    return b"id: %s\nevent: %s\ndata: %s\n\n" % (
        event_id.encode(),
        kind.encode(),
        orjson.dumps(data),
    )


def event_data(fields: dict[str, str]) -> dict[str, Any]:
    data: dict[str, Any] = dict(fields)
    for name in _INTS:
        if name in data:
            data[name] = int(data[name])
    if "importance" in data:
        data["importance"] = float(data["importance"])
    return data


Allowed = Callable[[], Awaitable[bool]]


async def always() -> bool:
    return True


class ChangeStream:
    def __init__(
        self, service: WorkingMemoryService, block_ms: int, allowed: Allowed = always
    ) -> None:
        self.service = service
        self.store = service.store
        self.block_ms = block_ms
        self.allowed = allowed

    async def open(self, robot_name: str, last_event_id: str | None) -> AsyncIterator[bytes]:
        """Everything that can fail (404, Redis down: 503) fails here, before the stream
        starts; then the events."""
        robot = await self.service._robot(robot_name)
        wm = robot.working_memory
        ns = self.service.namespace
        first: list[bytes] = []
        try:
            resume = (
                last_event_id is not None
                and EVENT_ID.fullmatch(last_event_id) is not None
                and await self.store.has_event(ns, wm.name, last_event_id)
            )
            if resume:
                assert last_event_id is not None
                cursor = last_event_id
            else:
                items, tokens, cursor = await self.service._read(
                    wm, lambda: self.store.snapshot_at(ns, wm.name)
                )
                first.append(sse(cursor, "snapshot", _snapshot(robot, items, tokens)))
        except (RedisUnavailable, *UNAVAILABLE) as exc:
            raise ServiceUnavailable(
                "working memory's change stream needs Redis, which is unavailable",
                dependency="redis",
            ) from exc
        return self._follow(first, ns, wm.name, cursor)

    async def _follow(
        self, first: list[bytes], ns: str, owner: str, cursor: str
    ) -> AsyncIterator[bytes]:
        for chunk in first:
            yield chunk
        quiet_since = monotonic()
        while True:
            try:
                entries = await self.store.events_after(ns, owner, cursor, block_ms=self.block_ms)
            except UNAVAILABLE as exc:  # the client reconnects with its Last-Event-ID
                log.warning("working-memory change stream of %s/%s ended: %s", ns, owner, exc)
                return
            if not await self.allowed():
                log.info("working-memory change stream of %s/%s ended: key revoked", ns, owner)
                yield sse(cursor, "closed", {"reason": "unauthorized"})
                return
            for entry_id, fields in entries:
                cursor = entry_id
                yield sse(entry_id, fields.get("kind", "change"), event_data(fields))
            if entries:
                quiet_since = monotonic()
            elif monotonic() - quiet_since >= KEEPALIVE_S:
                quiet_since = monotonic()
                yield b": keepalive\n\n"


def _snapshot(robot: Robot, items: list[Any], tokens: int) -> dict[str, Any]:
    wm = robot.working_memory
    return {
        "robot": robot.name,
        "group": group_name(robot.group.name) if robot.group else None,
        "tokens": tokens,
        "max_tokens": wm.budget,
        "items": [
            {
                "key": i.key,
                "memory_id": i.memory_id,
                "tokens": i.tokens,
                "importance": i.importance,
                "content": i.content,
            }
            for i in items
        ],
    }
