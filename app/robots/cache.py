"""Robots seen recently by this process, so the hot paths skip a database round trip.

A robot's id never changes; its budget changes only through PUT /v1/robots/{robot}, which
refreshes the entry here at once. Another process's PUT is seen within TTL_S (the Redis
scripts enforce whatever budget a request passes, so a briefly stale budget never breaks the
budget invariant; the next request simply applies the new one). The same holds for the
working_memory_stale flag set by another process.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

TTL_S = 5.0


@dataclass(frozen=True)
class Robot:
    id: int
    name: str
    budget: int
    # Redis missed a removal while it was unreachable; rebuild before trusting it.
    stale: bool = False


class RobotCache:
    def __init__(self, ttl_s: float = TTL_S) -> None:
        self.ttl_s = ttl_s
        self._entries: dict[tuple[int, str], tuple[float, Robot]] = {}

    def get(self, namespace_id: int, name: str) -> Robot | None:
        hit = self._entries.get((namespace_id, name))
        if hit is None or hit[0] < time.monotonic():
            return None
        return hit[1]

    def put(self, namespace_id: int, robot: Robot) -> None:
        self._entries[(namespace_id, robot.name)] = (time.monotonic() + self.ttl_s, robot)

    def forget(self, namespace_id: int, name: str) -> None:
        self._entries.pop((namespace_id, name), None)
