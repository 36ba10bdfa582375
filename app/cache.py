"""The one process-local cache type: bounded, with a time to live per entry.

Every cache in the service is one of these, owned by the app's composition root
(app/lifespan.py) and handed to whatever uses it, so two apps in one process (tests) never
share an entry. ARCHITECTURE.md lists each cache with its bound and how it is invalidated.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class TtlCache(Generic[K, V]):
    """At most `max_entries` entries, each answered for `ttl_s` after it was put (or after
    the moment given as `since`: when the lookup that produced the value began). Past the
    bound the least recently put entry goes first; expired entries are never answered."""

    def __init__(
        self,
        ttl_s: float,
        max_entries: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.clock = clock
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()
        # Lookups answered and not (absent or expired), for /metrics' hit ratios.
        self.hits = 0
        self.misses = 0

    def get(self, key: K) -> V | None:
        hit = self._entries.get(key)
        if hit is None:
            self.misses += 1
            return None
        if hit[0] <= self.clock():
            del self._entries[key]
            self.misses += 1
            return None
        self.hits += 1
        return hit[1]

    def __contains__(self, key: K) -> bool:
        return self.get(key) is not None

    def put(self, key: K, value: V, *, since: float | None = None) -> None:
        start = self.clock() if since is None else since
        self._entries.pop(key, None)
        self._entries[key] = (start + self.ttl_s, value)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def pop(self, key: K) -> None:
        self._entries.pop(key, None)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
