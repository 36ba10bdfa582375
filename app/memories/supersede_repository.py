"""All SQL of supersede (migration 0017): the detector's deterministic rules and a memory's
supersede chain."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from app.db.session import DbSession
from app.db.sql import sql
from app.memories.read_repository import read_columns
from app.visibility import Reader

# A current, live memory: what a new one may supersede.
# Only namespace-wide memories: a private, group or pool memory is never another's duplicate
# nor superseded by a finding (app/visibility.py); an explicit `supersedes` may name one.
_CURRENT = "m.deleted_at IS NULL AND m.valid_to IS NULL AND m.visibility = 'namespace'"

# The `statement` rule parses at most this many memories of an add's words, the newest.
STATEMENT_CANDIDATES = 100

# The chain a memory is part of: walked back through what it superseded and forward through
# what superseded it, each link one indexed lookup (memory_key's memory_id, the primary key).
_CHAIN = """
    WITH RECURSIVE back(id, depth) AS (
        SELECT CAST(:id AS bigint), 0
        UNION ALL
        SELECT m.id, b.depth - 1 FROM back b
        JOIN memory m ON m.superseded_by = b.id AND m.namespace_id = :ns
        WHERE b.depth > -CAST(:max AS int)
    ), ahead(id, depth) AS (
        SELECT m.superseded_by, 1 FROM memory m WHERE m.id = :id AND m.superseded_by IS NOT NULL
        UNION ALL
        SELECT m.superseded_by, a.depth + 1 FROM ahead a
        JOIN memory m ON m.id = a.id AND m.superseded_by IS NOT NULL
        WHERE a.depth < CAST(:max AS int)
    )
    SELECT DISTINCT ON (m.id) c.depth, {read}
    FROM (SELECT * FROM back UNION ALL SELECT * FROM ahead) c
    JOIN memory m ON m.id = c.id
    JOIN robot r ON r.id = m.author_robot_id
    WHERE {readable}
    ORDER BY m.id, c.depth"""


class SupersedeRepository:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    async def same_subject(self, namespace_id: int, subject: str, attribute: str) -> list[Any]:
        """Current memories whose metadata has this `subject` and `attribute` (the GIN index
        memory_metadata serves the containment)."""
        return list(
            (
                await self.session.execute(
                    sql(f"""
                    SELECT m.key, m.content FROM memory m
                    WHERE m.namespace_id = :ns AND m.metadata @> CAST(:md AS jsonb)
                      AND {_CURRENT}
                    ORDER BY m.created_at, m.id"""),
                    {
                        "ns": namespace_id,
                        "md": json.dumps({"subject": subject, "attribute": attribute}),
                    },
                )
            ).all()
        )

    async def same_statement(
        self,
        namespace_id: int,
        terms: Sequence[Sequence[str]],
        before: datetime | None,
        most: int = STATEMENT_CANDIDATES,
    ) -> list[Any]:
        """The newest `most` current memories valid from before `before` (None: the clock
        now, as for an add stamped when it is written) whose searched text
        has a word of each group of `terms` (the GIN index memory_search_tsv): what the
        `statement` rule parses (app/claims.py). Key, content, metadata and author."""
        query = " & ".join(
            "(" + " | ".join(ws) + ")"
            for group in terms
            if (ws := [w for w in group if re.fullmatch(r"[a-z0-9]+", w)])
        )
        if not query:
            return []
        return list(
            (
                await self.session.execute(
                    sql(f"""
                    SELECT m.key, m.content, m.metadata, r.name AS author FROM memory m
                    JOIN robot r ON r.id = m.author_robot_id
                    WHERE m.namespace_id = :ns
                      AND m.search_tsv @@ to_tsquery('english', :query)
                      AND coalesce(m.valid_from, m.created_at)
                          < coalesce(CAST(:before AS timestamptz), clock_timestamp())
                      AND {_CURRENT}
                    ORDER BY m.created_at DESC, m.id DESC
                    LIMIT :most"""),
                    {"ns": namespace_id, "query": query, "before": before, "most": most},
                )
            ).all()
        )

    async def same_family(self, namespace_id: int, family: str) -> list[Any]:
        """Current memories whose key is `family` or `family@...`."""
        return list(
            (
                await self.session.execute(
                    sql(f"""
                    SELECT m.key, m.content FROM memory_key k
                    JOIN memory m ON m.id = k.memory_id AND m.created_at = k.memory_created_at
                    WHERE k.namespace_id = :ns
                      AND (k.key = :family OR left(k.key, length(:family) + 1) = :prefix)
                      AND {_CURRENT}
                    ORDER BY m.created_at, m.id"""),
                    {"ns": namespace_id, "family": family, "prefix": family + "@"},
                )
            ).all()
        )

    async def close(self, row: Any, by_memory: int, end: datetime, *, version: int, by: int) -> Any:
        """Supersede a locked memory: its validity ends at `end`, linked to the memory that
        replaced it; robot `by` wrote this new version. Returns (updated_at, valid_to)."""
        return (
            await self.session.execute(
                sql("""
                UPDATE memory SET valid_to = :end, superseded_by = :by_memory,
                                  version = :version, changed_by_robot_id = :by,
                                  changed_at = now(), updated_at = now()
                WHERE id = :id AND created_at = :c
                RETURNING updated_at, valid_to"""),
                {
                    "id": row.id,
                    "c": row.created_at,
                    "end": end,
                    "by_memory": by_memory,
                    "version": version,
                    "by": by,
                },
            )
        ).one()

    async def lock_keys(
        self, namespace_id: int, keys: Sequence[str], reader: Reader
    ) -> dict[str, Any]:
        """The memories of `keys` that `reader` may read, locked FOR UPDATE in key order (two
        supersedes of overlapping keys cannot deadlock); a key without one is absent."""
        readable, params = reader.where()
        columns, shown = read_columns(namespace_id, reader)
        rows = (
            await self.session.execute(
                sql(f"""
                SELECT {columns}
                FROM memory_key k
                JOIN memory m ON m.id = k.memory_id AND m.created_at = k.memory_created_at
                JOIN robot r ON r.id = m.author_robot_id
                WHERE k.namespace_id = :ns AND k.key = ANY(CAST(:keys AS text[])) AND {readable}
                ORDER BY k.key
                FOR UPDATE OF m"""),
                {"ns": namespace_id, "keys": sorted(set(keys)), **params, **shown},
            )
        ).all()
        return {r.key: r for r in rows}

    async def neighbours(self, namespace_id: int, row: Any) -> list[Any]:
        """The memories the locked memory `row` superseded, and the one that superseded it
        (`successor` true): key, author and audience (app/visibility.Audience.of's columns),
        whoever may read them (the memory_superseded_by index and the primary key)."""
        return list(
            await self.session.execute(
                sql("""
                SELECT m.key, r.name AS author, m.visibility, m.readers, m.group_id, m.pool_id,
                       NULL AS pool, m.id <> :id AND m.superseded_by IS DISTINCT FROM :id
                       AS successor
                FROM memory m JOIN robot r ON r.id = m.author_robot_id
                WHERE m.namespace_id = :ns
                  AND (m.superseded_by = :id
                       OR m.id = (SELECT superseded_by FROM memory
                                  WHERE id = :id AND created_at = :c))
                ORDER BY m.key"""),
                {"ns": namespace_id, "id": row.id, "c": row.created_at},
            )
        )

    async def clock(self) -> datetime:
        """The server's clock now (clock_timestamp(), not the transaction's start)."""
        return (await self.session.execute(sql("SELECT clock_timestamp()"))).scalar_one()  # type: ignore[no-any-return]

    async def chain(
        self, namespace_id: int, memory_id: int, most: int, reader: Reader
    ) -> list[Any]:
        """The memories of `memory_id`'s supersede chain (itself included) that `reader` may
        read, oldest first, each with its `depth` (0: itself, −1: what it superseded, 1: what
        superseded it); at most `most` links each way."""
        readable, params = reader.where()
        columns, shown = read_columns(namespace_id, reader)
        rows = (
            await self.session.execute(
                sql(_CHAIN.replace("{read}", columns).replace("{readable}", readable)),
                {"ns": namespace_id, "id": memory_id, "max": most, **params, **shown},
            )
        ).all()
        return sorted(rows, key=lambda r: r.depth)
