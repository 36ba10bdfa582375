"""Query embeddings kept per process: an agent asks the same questions again (a retry, a
loop, a prompt assembled twice), and a question's vector does not change while its model
does not. Bounded (least recently used goes first) and keyed by (model, text); its hit ratio
is in GET /v1/stats."""

from __future__ import annotations

import math

from app.cache import TtlCache


class QueryEmbeddingCache:
    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._vectors: TtlCache[tuple[str, str], list[float]] | None = (
            TtlCache(math.inf, max_entries) if max_entries > 0 else None
        )
        self.hits = 0
        self.misses = 0

    def get(self, model: str | None, text: str) -> list[float] | None:
        if self._vectors is None or model is None:
            return None
        found = self._vectors.get((model, text))
        if found is None:
            self.misses += 1
            return None
        # Looked up again: the most recently used now, so the bound drops it last.
        self._vectors.put((model, text), found)
        self.hits += 1
        return found

    def put(self, model: str, text: str, vector: list[float]) -> None:
        if self._vectors is not None:
            self._vectors.put((model, text), vector)

    def __len__(self) -> int:
        return 0 if self._vectors is None else len(self._vectors)
