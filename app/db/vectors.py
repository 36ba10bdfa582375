"""How memory.embedding is stored: pgvector `vector` (float32) or `halfvec` (float16).

Migration 0005 chose it from HTM_VECTOR_STORAGE; the service reads it from the catalog
instead of trusting its own environment, so a database keeps the storage it was migrated
with. Every statement that casts a vector casts to this type, so none depends on pgvector's
implicit casts: vector → halfvec is implicit (a vector query against a halfvec column would
still be indexed), but halfvec → vector is not, so a halfvec query against a vector column
would convert the column row by row and bypass the HNSW index.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np

from app.cache import TtlCache
from app.config import VectorStorage
from app.db.session import DbSession
from app.db.sql import sql
from app.errors import Unprocessable

HALFVEC_MAX = 65504.0
# pgvector's GUC limits hnsw.ef_search to [1, 1000]: the deepest list an index scan yields in
# one walk (app/recall/planner.py), and so the deepest list hybrid asks for (recall/fusion.py).
EF_SEARCH_MAX = 1000

_STORED = sql("""
    SELECT t.typname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
    WHERE a.attrelid = 'memory'::regclass AND a.attname = 'embedding'""")


# memory.embedding's dimension (vector(n) and halfvec(n) keep n as the type modifier); no
# row before the first migration.
_DIMENSION = sql("""
    SELECT a.atttypmod FROM pg_attribute a
    WHERE a.attrelid = to_regclass('memory') AND a.attname = 'embedding'""")


async def stored_dimension(session: DbSession) -> int | None:
    """The dimension the database stores, or None when it has no memory table yet."""
    row = (await session.execute(_DIMENSION)).one_or_none()
    return None if row is None else int(row[0])


# The model of the newest memory with a vector the service made (not a client's): the backward
# walk of the primary key stops at the first such row.
_NEWEST_MODEL = sql("""
    SELECT embedding_model FROM memory
    WHERE embedding_model IS NOT NULL AND embedding_model <> 'client'
    ORDER BY id DESC LIMIT 1""")


async def newest_embedding_model(session: DbSession) -> str | None:
    """The model that embedded the newest memory with a vector of the service's, or None
    (none yet). Call it on a migrated database (`stored_dimension` is not None)."""
    row = (await session.execute(_NEWEST_MODEL)).one_or_none()
    return None if row is None else str(row[0])


class StoredVectors:
    """The column's type, read once per TTL, per app (the composition root makes one). A
    storage changed under a running service (it takes a migration) is picked up after the
    TTL; statements cast for the old type stay correct meanwhile, only unindexed."""

    def __init__(self, ttl_s: float = 300.0, forced: VectorStorage | None = None) -> None:
        self.forced = forced
        self._read: TtlCache[None, VectorStorage] = TtlCache(ttl_s, 1)
        # One reader at a time: concurrent requests that find the cache empty wait for the
        # first one's answer instead of each checking out a connection to ask (adds waiting
        # on a group commit while holding those ran the pool dry).
        self._reading = asyncio.Lock()

    @property
    def cache(self) -> TtlCache[None, VectorStorage]:
        """The one entry, for /metrics' hit ratio."""
        return self._read

    async def storage(self, session: DbSession) -> VectorStorage:
        found = self.forced or self._read.get(None)
        if found is not None:
            return found
        async with self._reading:
            found = self._read.get(None)
            if found is None:
                typname = (await session.execute(_STORED)).scalar_one()
                found = "halfvec" if typname == "halfvec" else "vector"
                self._read.put(None, found)
        return found


def check_storable(
    vectors: Sequence[Sequence[float] | None], storage: VectorStorage, field: str = "embedding"
) -> None:
    """A 422 for a client's vector the storage cannot hold: float16 overflows past 65,504,
    and a vector whose every element rounds to 0 has no direction (every distance NaN).
    float32 bounds are the schemas' (app/common.py)."""
    if storage != "halfvec":
        return
    for v in vectors:
        if v is None:
            continue
        with np.errstate(over="ignore"):
            half = np.asarray(v, dtype=np.float32).astype(np.float16)
        if not np.all(np.isfinite(half)):
            problem = f"has an element beyond ±{HALFVEC_MAX:g}, the largest half-precision value"
        elif not np.any(half):
            problem = "is all zeros in half precision: it has no direction"
        else:
            continue
        raise Unprocessable(
            f"{field} {problem} (this deployment stores vectors as halfvec)",
            errors=[{"field": field, "message": problem}],
        )
