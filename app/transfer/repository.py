"""The SQL of export, import, load, re-embed and re-index: pages of a namespace in key order
of time, the current state of given keys, the re-embedding queue, search texts rewritten."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from app.db.session import DbSession
from app.db.sql import ACCESS_COUNT, FEEDBACK, LAST_ACCESSED_AT, sql

# Who may read a memory (app/visibility.py), its pool and group by name.
AUDIENCE = """m.visibility, m.readers,
           (SELECT p.name FROM pool p WHERE p.id = m.pool_id) AS pool,
           (SELECT g.name FROM robot g WHERE g.id = m.group_id) AS group_row"""
SUPERSEDED_BY = (
    "(SELECT s.key FROM memory_key s WHERE s.memory_id = m.superseded_by) AS superseded_by"
)
_PAGE = """
    SELECT m.id, m.key, m.content, m.type, m.importance, m.confidence, m.source, m.tags,
           m.metadata, r.name AS author, m.created_at, m.updated_at, m.deleted_at, m.version,
           m.embedding_status, m.embedding_model, {vector} AS embedding, m.archived, m.valid_from,
           m.valid_to, {superseded_by}, {audience}, {access_count} AS access_count,
           {last_accessed_at} AS last_accessed_at, {feedback} AS feedback
    FROM memory m JOIN robot r ON r.id = m.author_robot_id
    WHERE {where}
    ORDER BY m.created_at, m.id
    LIMIT :limit"""

# Rows a model other than the deployment's embedded ('client' vectors are the caller's: the
# service cannot make them again, so they are left as they are).
_STALE = """
    m.namespace_id = :ns AND m.deleted_at IS NULL AND m.embedding_status = 'ready'
    AND m.embedding_model IS DISTINCT FROM :model AND m.embedding_model <> 'client'"""

# What `htm reindex` checks: the live conversation memories (app/conversation.py), and any
# other live row with a search text (under `plain`, or no longer a conversation, it is NULL).
_INDEXED = """
    m.namespace_id = :ns AND m.deleted_at IS NULL
    AND (m.metadata ? 'speaker' OR m.metadata ? 'session' OR m.search_text IS NOT NULL)"""
_CLIENT = "m.embedding_model = 'client'"  # a client's vector: kept, with its state


class TransferRepository:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    async def snapshot(self) -> None:
        """The rest of this transaction reads one snapshot (an export's pages agree)."""
        await self.session.execute(sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"))

    async def namespace_id(self, name: str) -> int | None:
        return (
            await self.session.execute(
                sql("SELECT id FROM namespace WHERE name = :name"), {"name": name}
            )
        ).scalar()

    async def robot_id(self, namespace_id: int, name: str) -> int | None:
        return (
            await self.session.execute(
                sql("SELECT id FROM robot WHERE namespace_id = :ns AND name = :name"),
                {"ns": namespace_id, "name": name},
            )
        ).scalar()

    async def count(self, namespace_id: int, robot_id: int | None) -> int:
        where = "namespace_id = :ns" + (" AND author_robot_id = :robot" if robot_id else "")
        return int(
            (
                await self.session.execute(
                    sql(f"SELECT count(*) FROM memory WHERE {where}"),
                    {"ns": namespace_id, "robot": robot_id} if robot_id else {"ns": namespace_id},
                )
            ).scalar_one()
        )

    async def page(
        self,
        namespace_id: int,
        robot_id: int | None,
        after: tuple[datetime, int] | None,
        *,
        limit: int,
        vectors: bool,
    ) -> list[Any]:
        """Oldest first, deleted ones too; keyset pagination on (created_at, id)."""
        where = ["m.namespace_id = :ns"]
        params: dict[str, Any] = {"ns": namespace_id, "limit": limit}
        if robot_id is not None:
            where.append("m.author_robot_id = :robot")
            params["robot"] = robot_id
        if after is not None:
            where.append("(m.created_at, m.id) > (:after_c, :after_id)")
            params["after_c"], params["after_id"] = after
        statement = _PAGE.format(
            vector="CAST(m.embedding AS text)" if vectors else "NULL",
            audience=AUDIENCE,
            superseded_by=SUPERSEDED_BY,
            access_count=ACCESS_COUNT,
            last_accessed_at=LAST_ACCESSED_AT,
            feedback=FEEDBACK,
            where=" AND ".join(where),
        )
        return list((await self.session.execute(sql(statement), params)).all())

    async def current(self, namespace_id: int, keys: Sequence[str]) -> dict[str, Any]:
        """The stored fields of those keys that exist (deleted ones too), by key."""
        rows = await self.session.execute(
            sql(f"""
            SELECT m.key, m.content, m.type, m.importance, m.confidence, m.source, m.tags,
                   m.metadata, m.created_at, m.deleted_at, m.valid_from, m.valid_to, m.archived,
                   m.version, {SUPERSEDED_BY}, {AUDIENCE}, {ACCESS_COUNT} AS access_count,
                   {LAST_ACCESSED_AT} AS last_accessed_at, {FEEDBACK} AS feedback
            FROM memory_key k
            JOIN memory m ON m.id = k.memory_id AND m.created_at = k.memory_created_at
            WHERE k.namespace_id = :ns AND k.key = ANY(CAST(:keys AS text[]))"""),
            {"ns": namespace_id, "keys": list(keys)},
        )
        return {r.key: r for r in rows}

    async def keys(self, namespace_id: int, keys: Sequence[str]) -> set[str]:
        """Those of `keys` the namespace has (deleted or not)."""
        rows = await self.session.execute(
            sql("""
            SELECT key FROM memory_key
            WHERE namespace_id = :ns AND key = ANY(CAST(:keys AS text[]))"""),
            {"ns": namespace_id, "keys": list(keys)},
        )
        return {r.key for r in rows}

    async def audiences(self, namespace_id: int, robot_id: int) -> tuple[list[str], list[str]]:
        """The pools and the groups (their rows' names) that the robot's memories are in."""
        rows = await self.session.execute(
            sql("""
            SELECT p.name AS pool, g.name AS group_row
            FROM (SELECT DISTINCT pool_id, group_id FROM memory
                  WHERE namespace_id = :ns AND author_robot_id = :robot
                    AND (pool_id IS NOT NULL OR group_id IS NOT NULL)) m
            LEFT JOIN pool p ON p.id = m.pool_id
            LEFT JOIN robot g ON g.id = m.group_id"""),
            {"ns": namespace_id, "robot": robot_id},
        )
        found = rows.all()
        return (
            sorted({r.pool for r in found if r.pool}),
            sorted({r.group_row for r in found if r.group_row}),
        )

    async def explicit_links(self, namespace_id: int, robot_id: int | None) -> list[Any]:
        """(source, target, type, weight) of the links written explicitly, by their memories'
        keys (of one robot's memories: both ends its own), in key order."""
        mine = (
            """JOIN memory ms ON ms.id = s.memory_id AND ms.created_at = s.memory_created_at
                                 AND ms.author_robot_id = :robot
               JOIN memory mt ON mt.id = t.memory_id AND mt.created_at = t.memory_created_at
                                 AND mt.author_robot_id = :robot"""
            if robot_id
            else ""
        )
        rows = await self.session.execute(
            sql(f"""
            SELECT s.key AS source, t.key AS target, l.type, l.weight
            FROM memory_link l
            JOIN memory_key s ON s.memory_id = l.source_id
            JOIN memory_key t ON t.memory_id = l.target_id
            {mine}
            WHERE l.namespace_id = :ns AND l.origin = 'explicit'
            ORDER BY s.key, t.key, l.type"""),
            {"ns": namespace_id, "robot": robot_id} if robot_id else {"ns": namespace_id},
        )
        return list(rows)

    async def carry_accesses(
        self,
        namespace_id: int,
        keys: Sequence[str],
        counts: Sequence[int],
        lasts: Sequence[datetime | None],
    ) -> None:
        """The accesses an import brought along, on memories that have fewer: a count and a
        last access only ever raised (the memory's own since stay)."""
        await self.session.execute(
            sql("""
            INSERT INTO memory_access AS a (memory_id, access_count, last_accessed_at)
            SELECT k.memory_id, t.n, t.at
            FROM unnest(CAST(:keys AS text[]), CAST(:counts AS int[]),
                        CAST(:lasts AS timestamptz[])) AS t(key, n, at)
            JOIN memory_key k ON k.namespace_id = :ns AND k.key = t.key
            ORDER BY k.memory_id
            ON CONFLICT (memory_id) DO UPDATE
            SET access_count = greatest(a.access_count, excluded.access_count),
                last_accessed_at = greatest(a.last_accessed_at, excluded.last_accessed_at)
            WHERE a.access_count < excluded.access_count
               OR a.last_accessed_at < excluded.last_accessed_at
               OR (a.last_accessed_at IS NULL AND excluded.last_accessed_at IS NOT NULL)"""),
            {"ns": namespace_id, "keys": list(keys), "counts": list(counts), "lasts": list(lasts)},
        )

    async def carry_feedback(
        self, namespace_id: int, keys: Sequence[str], feedback: Sequence[Sequence[float]]
    ) -> None:
        """The feedback an import brought along (app/memories/learning.py: scale, shift,
        used, unused, pinned, forgotten nearby), on memories that have had fewer steps: the
        file's steps replace theirs."""
        await self.session.execute(
            sql("""
            INSERT INTO memory_access AS a (memory_id, access_count, learn_scale, learn_shift,
                                            uses, misses, pins, nearby_forgets)
            SELECT k.memory_id, 0, t.scale, t.shift, t.used, t.unused, t.pinned, t.nearby
            FROM unnest(CAST(:keys AS text[]), CAST(:scales AS float8[]),
                        CAST(:shifts AS float8[]), CAST(:used AS int[]),
                        CAST(:unused AS int[]), CAST(:pinned AS int[]),
                        CAST(:nearby AS int[])) AS t(key, scale, shift, used, unused, pinned,
                                                     nearby)
            JOIN memory_key k ON k.namespace_id = :ns AND k.key = t.key
            ORDER BY k.memory_id
            ON CONFLICT (memory_id) DO UPDATE
            SET learn_scale = excluded.learn_scale, learn_shift = excluded.learn_shift,
                uses = excluded.uses, misses = excluded.misses, pins = excluded.pins,
                nearby_forgets = excluded.nearby_forgets
            WHERE a.uses + a.misses + a.pins + a.nearby_forgets
                < excluded.uses + excluded.misses + excluded.pins + excluded.nearby_forgets"""),
            {
                "ns": namespace_id,
                "keys": list(keys),
                "scales": [f[0] for f in feedback],
                "shifts": [f[1] for f in feedback],
                "used": [int(f[2]) for f in feedback],
                "unused": [int(f[3]) for f in feedback],
                "pinned": [int(f[4]) for f in feedback],
                "nearby": [int(f[5]) for f in feedback],
            },
        )

    async def name_models(self, namespace_id: int, models: dict[str, str]) -> None:
        """Record the model that made vectors an import brought along (the service stores a
        given vector as the client's)."""
        await self.session.execute(
            sql("""
            UPDATE memory m SET embedding_model = t.model
            FROM unnest(CAST(:keys AS text[]), CAST(:models AS text[])) AS t(key, model),
                 memory_key k
            WHERE k.namespace_id = :ns AND k.key = t.key
              AND m.id = k.memory_id AND m.created_at = k.memory_created_at
              AND m.embedding_model = 'client'"""),
            {"ns": namespace_id, "keys": list(models), "models": list(models.values())},
        )

    async def loaded(self, namespace_id: int, path: str) -> list[str]:
        """Keys of the live memories `htm load` made from files at or under `path`."""
        rows = await self.session.execute(
            sql("""
            SELECT key FROM memory
            WHERE namespace_id = :ns AND deleted_at IS NULL
              AND metadata->>'source' = 'htm load'
              AND (metadata->>'path' = :path OR starts_with(metadata->>'path', :under))"""),
            {"ns": namespace_id, "path": path, "under": path.rstrip("/") + "/"},
        )
        return [r.key for r in rows]

    # --- re-embedding ----------------------------------------------------------------------

    async def count_reembed(self, namespace_id: int, model: str) -> tuple[int, int, int]:
        """(rows of another model, rows pending, rows failed) in the namespace."""
        row = (
            await self.session.execute(
                sql(f"""
                SELECT count(*) FILTER (WHERE {_STALE}) AS stale,
                       count(*) FILTER (WHERE m.embedding_status = 'pending'
                                          AND m.deleted_at IS NULL) AS pending,
                       count(*) FILTER (WHERE m.embedding_status = 'failed'
                                          AND m.deleted_at IS NULL) AS failed
                FROM memory m WHERE m.namespace_id = :ns"""),
                {"ns": namespace_id, "model": model},
            )
        ).one()
        return int(row.stale), int(row.pending), int(row.failed)

    async def mark_pending(self, namespace_id: int, model: str, limit: int) -> int:
        """Up to `limit` rows of another model become pending, first in the embedding worker's
        queue. Their old vector stays in the column, unused (vector search reads only ready
        rows) until the worker writes the new one."""
        rows = await self.session.execute(
            sql(f"""
            UPDATE memory m SET embedding_status = 'pending', embedding_next_at = NULL,
                   embedding_attempts = 0, embedding_error = NULL
            FROM (SELECT id, created_at FROM memory m WHERE {_STALE}
                  ORDER BY id LIMIT :limit FOR UPDATE SKIP LOCKED) AS c
            WHERE m.id = c.id AND m.created_at = c.created_at
            RETURNING m.id"""),
            {"ns": namespace_id, "model": model, "limit": limit},
        )
        return len(rows.all())

    # --- re-indexing (search texts) --------------------------------------------------------

    async def count_reindex(self, namespace_id: int) -> int:
        """The memories of the namespace `htm reindex` checks."""
        return int(
            (
                await self.session.execute(
                    sql(f"SELECT count(*) FROM memory m WHERE {_INDEXED}"), {"ns": namespace_id}
                )
            ).scalar_one()
        )

    async def reindex_page(
        self, namespace_id: int, after: tuple[datetime, int] | None, limit: int
    ) -> Sequence[Any]:
        """The next memories to check in (created_at, id) order: `limit` of them, and the
        rest of the last one's instant, so that no page ends between two turns of one
        instant (the turn before a page's first turn of a session is read as stored before
        its instant)."""
        keyset = "AND (m.created_at, m.id) > (:at, :id)" if after else ""
        return (
            await self.session.execute(
                sql(f"""
                WITH page AS (
                    SELECT m.created_at FROM memory m WHERE {_INDEXED} {keyset}
                    ORDER BY m.created_at, m.id LIMIT :limit)
                SELECT m.id, m.created_at, m.version, m.content, m.metadata, m.search_text
                FROM memory m WHERE {_INDEXED} {keyset}
                  AND m.created_at <= (SELECT max(created_at) FROM page)
                ORDER BY m.created_at, m.id"""),
                {"ns": namespace_id, "limit": limit}
                | ({"at": after[0], "id": after[1]} if after else {}),
            )
        ).all()

    async def set_search_texts(
        self, rows: Sequence[Any], texts: Sequence[str | None], *, every: bool = False
    ) -> tuple[int, list[tuple[int, datetime]]]:
        """Write the search texts that differ (`every`: all of them), on rows still at the
        version read (one
        rewritten meanwhile got its text from its write). Each becomes pending, first in the
        embedding worker's queue (its old vector unused until the new one is written),
        except a client's vector, kept with its state. Returns (rows rewritten, the (id,
        created_at) of those now waiting for a vector)."""
        done = (
            await self.session.execute(
                sql(f"""
                UPDATE memory m SET search_text = t.text,
                       embedding_status = CASE WHEN {_CLIENT} THEN m.embedding_status
                                               ELSE 'pending' END,
                       embedding_next_at = CASE WHEN {_CLIENT} THEN m.embedding_next_at END,
                       embedding_attempts = CASE WHEN {_CLIENT} THEN m.embedding_attempts
                                                 ELSE 0 END,
                       embedding_error = CASE WHEN {_CLIENT} THEN m.embedding_error END
                FROM unnest(CAST(:ids AS bigint[]), CAST(:cs AS timestamptz[]),
                            CAST(:versions AS int[]), CAST(:texts AS text[]))
                     AS t(id, c, v, text)
                WHERE m.id = t.id AND m.created_at = t.c AND m.version = t.v
                  AND m.deleted_at IS NULL
                  AND (m.search_text IS DISTINCT FROM t.text OR CAST(:every AS boolean))
                RETURNING m.id, m.created_at, NOT coalesce({_CLIENT}, false) AS waits"""),
                {
                    "every": every,
                    "ids": [r.id for r in rows],
                    "cs": [r.created_at for r in rows],
                    "versions": [r.version for r in rows],
                    "texts": list(texts),
                },
            )
        ).all()
        return len(done), [(r.id, r.created_at) for r in done if r.waits]

    async def vector_states(self, rows: Sequence[tuple[int, datetime]]) -> tuple[int, int, int]:
        """Of these memories, (how many have a vector, how many the provider refused, how
        many live ones still wait for one)."""
        row = (
            await self.session.execute(
                sql("""
                SELECT count(*) FILTER (WHERE m.embedding_status = 'ready') AS ready,
                       count(*) FILTER (WHERE m.embedding_status = 'failed') AS failed,
                       count(*) FILTER (WHERE m.embedding_status = 'pending'
                                          AND m.deleted_at IS NULL) AS waiting
                FROM memory m
                JOIN unnest(CAST(:ids AS bigint[]), CAST(:cs AS timestamptz[])) AS t(id, c)
                  ON m.id = t.id AND m.created_at = t.c"""),
                {"ids": [i for i, _ in rows], "cs": [c for _, c in rows]},
            )
        ).one()
        return int(row.ready), int(row.failed), int(row.waiting)
