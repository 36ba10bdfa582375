"""The statistics pass's SQL (app/maintenance/statistics.py): how much of memory changed since
its last ANALYZE, and the ANALYZE."""

from __future__ import annotations

from dataclasses import dataclass

from app.db.session import DbSession
from app.db.sql import sql

# autovacuum_analyze_scale_factor's default: a table is stale once a tenth of it changed.
ANALYZE_SCALE = 0.1

# memory and its inheritance children (a hypertable's chunks hold its rows): the rows changed
# since each was last analyzed, the rows ANALYZE last counted, and whether autovacuum is off.
_STALENESS = sql("""
    WITH t AS (
        SELECT 'memory'::regclass::oid AS oid
        UNION ALL
        SELECT i.inhrelid FROM pg_inherits i WHERE i.inhparent = 'memory'::regclass)
    SELECT coalesce(sum(s.n_mod_since_analyze), 0)::bigint AS changed,
           coalesce(sum(greatest(c.reltuples, 0)), 0)::float8 AS rows,
           EXISTS (SELECT 1 FROM pg_class p, unnest(p.reloptions) AS o
                   WHERE p.oid = 'memory'::regclass
                     AND lower(replace(o, ' ', '')) IN ('autovacuum_enabled=false',
                         'autovacuum_enabled=off', 'autovacuum_enabled=0',
                         'autovacuum_enabled=no')) AS autovacuum_off
    FROM t JOIN pg_class c ON c.oid = t.oid
    LEFT JOIN pg_stat_user_tables s ON s.relid = t.oid""")

_ANALYZE = sql("ANALYZE memory")


@dataclass(frozen=True)
class Staleness:
    changed: int  # rows inserted, updated or deleted since the last analyze
    rows: float  # the rows ANALYZE last counted (0 before the first)
    autovacuum_off: bool

    def due(self, min_changed: int) -> bool:
        if self.autovacuum_off:
            return False
        return self.changed >= max(min_changed, ANALYZE_SCALE * self.rows)


class StatisticsRepository:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    async def staleness(self) -> Staleness:
        row = (await self.session.execute(_STALENESS)).one()
        return Staleness(int(row.changed), float(row.rows), bool(row.autovacuum_off))

    async def analyze(self) -> None:
        await self.session.execute(_ANALYZE)
