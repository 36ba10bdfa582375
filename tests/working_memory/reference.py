"""A pure-Python reference model of one robot's working memory, for property tests.

It spells out the store's semantics as plainly as possible; the tests drive it and the Redis
store with the same operations and demand identical results after every step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.working_memory.items import WMItem


class NotInitialized(Exception):
    pass


@dataclass
class ReferenceModel:
    initialized: bool = False
    items: dict[str, WMItem] = field(default_factory=dict)
    seq: int = 0

    @property
    def tokens(self) -> int:
        return sum(i.tokens for i in self.items.values())

    def eviction_order(self) -> list[WMItem]:
        # Redis orders equal scores by member bytes: "%020d:key", i.e. added_at, then key bytes.
        return sorted(
            self.items.values(), key=lambda i: (i.importance, i.added_at_us, i.key.encode())
        )

    def access_order(self) -> list[tuple[str, float]]:
        ordered = sorted(self.items.values(), key=lambda i: (i.last_access_ms, i.key.encode()))
        return [(i.key, float(i.last_access_ms)) for i in ordered]

    def _require(self) -> None:
        if not self.initialized:
            raise NotInitialized

    def place(self, items: list[WMItem], budget: int) -> tuple[list[str], list[str], list[str]]:
        """Returns (admitted, rejected, evicted) as defined by PlaceResult."""
        self._require()
        self.seq += 1
        return self._place(items, budget)

    def _place(self, items: list[WMItem], budget: int) -> tuple[list[str], list[str], list[str]]:
        final: dict[str, str] = {}
        lists: dict[str, list[str]] = {"admitted": [], "rejected": [], "evicted": []}

        def note(key: str, outcome: str) -> None:
            final[key] = outcome
            if key not in lists[outcome]:
                lists[outcome].append(key)

        def make_room(need: int) -> None:
            while self.tokens + need > budget:
                victim = self.eviction_order()[0]
                del self.items[victim.key]
                note(victim.key, "evicted")

        make_room(0)
        for item in items:
            old = self.items.pop(item.key, None)
            # A key re-used by another memory replaces that memory outright.
            if old is not None and old.memory_id == item.memory_id:
                item = item._replace(
                    added_at_us=old.added_at_us,
                    last_access_ms=max(item.last_access_ms, old.last_access_ms),
                )
            if item.tokens > budget:
                note(item.key, "rejected")
                continue
            make_room(item.tokens)
            self.items[item.key] = item._replace(importance=float(item.importance))
            note(item.key, "admitted")
        admitted, rejected, evicted = (
            [k for k in lists[o] if final[k] == o] for o in ("admitted", "rejected", "evicted")
        )
        return admitted, rejected, evicted

    def touch(self, key: str, access_ms: int) -> int | None:
        """Not a change of the working set: seq stays. The memory id found, or None."""
        self._require()
        item = self.items.get(key)
        if item is None:
            return None
        self.items[key] = item._replace(last_access_ms=max(item.last_access_ms, access_ms))
        return item.memory_id

    def remove(self, entries: list[tuple[str, int]]) -> list[str]:
        """Each (key, memory id) whose item is that memory."""
        self._require()
        self.seq += 1
        removed = []
        for key, memory_id in entries:
            item = self.items.get(key)
            if item is not None and item.memory_id == memory_id:
                del self.items[key]
                removed.append(key)
        return removed

    def clear(self) -> int:
        self._require()
        self.seq += 1
        n = len(self.items)
        self.items.clear()
        return n

    def load(
        self, items: list[WMItem], budget: int, seq: int
    ) -> tuple[list[str], list[str], list[str]]:
        """Rebuild. seq is the store's (clock-seeded) new seq; it must exceed the old one."""
        assert seq > self.seq, f"load seq {seq} not above previous {self.seq}"
        self.initialized = True
        self.items = {}
        self.seq = seq
        return self._place(items, budget)
