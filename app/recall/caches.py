"""What recall remembers between requests, per app (the composition root makes one
SearchCaches and hands it to every SearchRepository): facts that change rarely and cost a
statement to learn. Each is a TtlCache (app/cache.py); ARCHITECTURE.md lists the bounds."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from app.cache import TtlCache
from app.db.vectors import StoredVectors
from app.recall.planner import LexemeFrequencies, PgvectorVersion


class LargeNamespaces:
    """Namespaces recently counted as holding more than EXACT_SEARCH_MAX_ROWS embedded
    memories, so an unfiltered vector search does not count again only to learn that the
    index is the way. Namespaces rarely shrink; if one does, the index path's exact
    fallback still fills the page."""

    def __init__(self, ttl_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._seen: TtlCache[int, bool] = TtlCache(ttl_s, 100_000, clock)

    def __contains__(self, namespace_id: int) -> bool:
        return namespace_id in self._seen

    def add(self, namespace_id: int) -> None:
        self._seen.put(namespace_id, True)


class LexemeStats:
    """The column statistics of memory.search_tsv as frequencies, re-read at most once per
    TTL. Full-text search needs to know which question words are rare; counting each word's
    matches costs a scan per common word that grows with the table, while ANALYZE
    (autovacuum) keeps the answer already: exactly in a table it reads whole, to within its
    sample above. Below `min_rows` counting is cheap and is used instead (as it is when the
    table has no statistics yet)."""

    def __init__(
        self,
        min_rows: float = 10_000,
        ttl_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.min_rows = min_rows
        # One entry; the value is wrapped so that "no statistics" (None) is cached too.
        self._read: TtlCache[None, tuple[LexemeFrequencies | None]] = TtlCache(ttl_s, 1, clock)

    def current(self) -> tuple[LexemeFrequencies | None] | None:
        """The cached answer (itself possibly None), or None when it must be read again."""
        return self._read.get(None)

    def remember(self, frequencies: LexemeFrequencies | None) -> None:
        self._read.put(None, (frequencies,))

    def forget(self) -> None:
        """Read them again next time (this process just ran ANALYZE)."""
        self._read.clear()


class TableRows:
    """memory's row count as ANALYZE last estimated it (its chunks' on a hypertable), re-read
    at most once per TTL: the size of the HNSW index a filter's selectivity is taken of."""

    def __init__(self, ttl_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._read: TtlCache[None, float] = TtlCache(ttl_s, 1, clock)

    def current(self) -> float | None:
        return self._read.get(None)

    def remember(self, rows: float) -> None:
        self._read.put(None, rows)

    def forget(self) -> None:
        self._read.clear()


class PgvectorVersions:
    """The installed pgvector version, re-read every few minutes (an ALTER EXTENSION UPDATE
    takes effect without a restart). `forced` pins it: a deployment (or a test) can run the
    code path of an older pgvector on a newer one."""

    def __init__(self, ttl_s: float = 300.0, forced: PgvectorVersion | None = None) -> None:
        self.forced = forced
        self._read: TtlCache[None, PgvectorVersion] = TtlCache(ttl_s, 1)

    def current(self) -> PgvectorVersion | None:
        return self.forced or self._read.get(None)

    def remember(self, version: PgvectorVersion) -> None:
        self._read.put(None, version)


class Speakers:
    """Each namespace's speakers (the speaker table), re-read at most once per TTL: a recall
    takes their names out of the question's vector and lifts a named speaker's turns. A
    speaker first named within the TTL is found by the recalls after it."""

    def __init__(self, ttl_s: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.cache: TtlCache[int, tuple[str, ...]] = TtlCache(ttl_s, 10_000, clock)

    def current(self, namespace_id: int) -> tuple[str, ...] | None:
        return self.cache.get(namespace_id)

    def remember(self, namespace_id: int, names: list[str]) -> None:
        self.cache.put(namespace_id, tuple(names))


@dataclass
class SearchCaches:
    large_namespaces: LargeNamespaces = field(default_factory=LargeNamespaces)
    lexeme_stats: LexemeStats = field(default_factory=LexemeStats)
    pgvector: PgvectorVersions = field(default_factory=PgvectorVersions)
    vectors: StoredVectors = field(default_factory=StoredVectors)
    table_rows: TableRows = field(default_factory=TableRows)
    speakers: Speakers = field(default_factory=Speakers)
