"""All SQL of duplicates: finding the memory an add duplicates and reinforcing it (the rules:
app/memories/dedupe.py), and `htm dedupe`'s clusters and merges (app/memories/merge.py),
with the aliases a merged memory's key resolves through (memory_alias, migration 0011)."""

from __future__ import annotations

from typing import Any

from app.db.session import DbSession
from app.db.sql import ACCESS_COUNT, sql
from app.memories.read_repository import read_columns
from app.visibility import Reader

# Not superseded, not ended: what a new fact may repeat.
# Only namespace-wide memories are merged or taken as an add's duplicate (app/visibility.py).
_CURRENT = (
    "m.superseded_by IS NULL AND (m.valid_to IS NULL OR m.valid_to > now()) "
    "AND m.visibility = 'namespace'"
)


class DuplicateRepository:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    # --- on add ---------------------------------------------------------------------------

    async def lock(self, keys: set[int]) -> None:
        """Held until the transaction ends; taken in one order, so adds never deadlock."""
        if keys:
            await self.session.execute(
                sql("SELECT pg_advisory_xact_lock(k) FROM unnest(CAST(:keys AS bigint[])) k"),
                {"keys": sorted(keys)},
            )

    async def exact(self, namespace_id: int, type_: str, content: str) -> Any | None:
        """The oldest live, current memory of this type with this content
        (memory_content_md5); a superseded or ended one is no duplicate of a new fact."""
        return (
            await self.session.execute(
                sql(f"""
                SELECT m.key FROM memory m
                JOIN memory_key k ON k.memory_id = m.id
                WHERE m.namespace_id = :ns AND m.type = :type AND m.deleted_at IS NULL
                  AND md5(m.content) = md5(CAST(:content AS text)) AND m.content = :content
                  AND {_CURRENT}
                ORDER BY m.created_at, m.id LIMIT 1"""),
                {"ns": namespace_id, "type": type_, "content": content},
            )
        ).one_or_none()

    async def any_exact(self, namespace_id: int, drafts: list[tuple[str, str]]) -> bool:
        """Whether a live memory has the type and content of any of these (type, content):
        one statement for an add's drafts (memory_content_md5)."""
        if not drafts:
            return False
        return bool(
            (
                await self.session.execute(
                    sql(f"""
                    SELECT EXISTS (
                        SELECT 1 FROM unnest(CAST(:types AS text[]), CAST(:contents AS text[]))
                             AS d(type, content)
                        JOIN memory m ON m.namespace_id = :ns AND m.type = d.type
                             AND m.deleted_at IS NULL AND {_CURRENT}
                             AND md5(m.content) = md5(d.content) AND m.content = d.content)"""),
                    {
                        "ns": namespace_id,
                        "types": [t for t, _ in drafts],
                        "contents": [c for _, c in drafts],
                    },
                )
            ).scalar()
        )

    async def survivor(self, memory_id: int, reader: Reader) -> Any | None:
        """The live memory a merged memory's key resolves to (`htm dedupe`), if `reader` may
        read it (a survivor narrowed since its merge is not shown through the merged key)."""
        readable, params = reader.where()
        columns, shown = read_columns(reader.namespace_id, reader)
        return (
            await self.session.execute(
                sql(f"""
                SELECT {columns}
                FROM memory_alias a
                JOIN memory_key k ON k.memory_id = a.survivor_id
                JOIN memory m ON m.id = k.memory_id AND m.created_at = k.memory_created_at
                JOIN robot r ON r.id = m.author_robot_id
                WHERE a.memory_id = :id AND m.deleted_at IS NULL AND {readable}"""),
                {"id": memory_id, **params, **shown},
            )
        ).one_or_none()

    async def accessed(self, id_: int, times: int, at: Any) -> Any:
        """Count `times` accesses at `at`; returns (access_count, last_accessed_at)."""
        return (
            await self.session.execute(
                sql("""
                INSERT INTO memory_access AS a (memory_id, access_count, last_accessed_at)
                VALUES (:id, :n, :at)
                ON CONFLICT (memory_id) DO UPDATE
                SET access_count = a.access_count + excluded.access_count,
                    last_accessed_at = greatest(a.last_accessed_at, excluded.last_accessed_at)
                RETURNING access_count, last_accessed_at"""),
                {"id": id_, "n": times, "at": at},
            )
        ).one()

    # --- htm dedupe -----------------------------------------------------------------------

    async def exact_groups(self, namespace_id: int, type_: str | None) -> list[list[int]]:
        """The ids of each group of live, current memories of one type with the same content
        (a superseded fact is no duplicate of the current one)."""
        rows = await self.session.execute(
            sql(f"""
            SELECT array_agg(id ORDER BY id) AS ids FROM memory m
            WHERE namespace_id = :ns AND deleted_at IS NULL AND {_CURRENT}
              AND (CAST(:type AS text) IS NULL OR type = :type)
            GROUP BY type, md5(content), content HAVING count(*) > 1"""),
            {"ns": namespace_id, "type": type_},
        )
        return [list(r.ids) for r in rows]

    async def embedded(
        self, namespace_id: int, type_: str | None, after: int, page: int
    ) -> list[Any]:
        """A page of live, current, embedded memories (id, type, the vector as text), by id
        after `after`."""
        return list(
            (
                await self.session.execute(
                    sql(f"""
                    SELECT id, type, CAST(embedding AS text) AS embedding FROM memory m
                    WHERE namespace_id = :ns AND deleted_at IS NULL AND embedding IS NOT NULL
                      AND {_CURRENT}
                      AND (CAST(:type AS text) IS NULL OR type = :type) AND id > :after
                    ORDER BY id LIMIT :page"""),
                    {"ns": namespace_id, "type": type_, "after": after, "page": page},
                )
            ).all()
        )

    async def members(self, ids: list[int]) -> dict[int, Any]:
        """What ranks a cluster's live members, by id."""
        rows = await self.session.execute(
            sql(f"""
            SELECT id, key, type, importance, {ACCESS_COUNT} AS access_count, created_at
            FROM memory m WHERE id = ANY(CAST(:ids AS bigint[])) AND deleted_at IS NULL"""),
            {"ids": ids},
        )
        return {r.id: r for r in rows}

    async def alias(self, memory_id: int, survivor_id: int) -> None:
        """The merged memory's key resolves to the survivor from now on, and so do the keys
        merged into it before."""
        await self.session.execute(
            sql("""
            INSERT INTO memory_alias (memory_id, survivor_id) VALUES (:id, :survivor)
            ON CONFLICT (memory_id) DO UPDATE SET survivor_id = :survivor,
                                                  merged_at = now()"""),
            {"id": memory_id, "survivor": survivor_id},
        )
        await self.session.execute(
            sql("UPDATE memory_alias SET survivor_id = :survivor WHERE survivor_id = :id"),
            {"id": memory_id, "survivor": survivor_id},
        )
