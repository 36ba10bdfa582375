"""All SQL for the tag ontology: the tree's counts and renaming a subtree."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from app.db.session import DbSession
from app.db.sql import sql
from app.visibility import Reader

# A memory counts once for each of its tags' paths (tag_paths() is distinct per memory):
# `total` is the memories tagged with the path or a descendant, `count` those tagged with
# exactly it.
_TREE = """
    SELECT p.path, count(*) FILTER (WHERE p.path = ANY(m.tags)) AS count, count(*) AS total
    FROM memory m CROSS JOIN LATERAL unnest(tag_paths(m.tags)) AS p(path)
    WHERE {where}
    GROUP BY p.path"""

# The tag itself or a descendant, renamed with its suffix kept.
_RENAMED = """CASE WHEN u.tag = :src OR starts_with(u.tag, :src || ':')
                   THEN :dst || substr(u.tag, char_length(:src) + 1) ELSE u.tag END"""


class TagRepository:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    async def tree(
        self,
        namespace_id: int,
        author_robot_id: int | None,
        start: datetime | None,
        *,
        end: datetime | None,
        reader: Reader,
    ) -> list[Any]:
        """(path, count, total) of the memories not deleted that `reader` may read, by path."""
        readable, params = reader.where()
        where = ["m.namespace_id = :ns", "m.deleted_at IS NULL", readable]
        params["ns"] = namespace_id
        if author_robot_id is not None:
            where.append("m.author_robot_id = :author")
            params["author"] = author_robot_id
        if start is not None:
            where.append("m.created_at >= :start")
            params["start"] = start
        if end is not None:
            where.append("m.created_at < :end")
            params["end"] = end
        statement = sql(_TREE.format(where=" AND ".join(where)))
        return list((await self.session.execute(statement, params)).all())

    async def subtree_extent(self, namespace_id: int, path: str) -> Any:
        """Over the tags at or under `path` in the namespace (deleted memories included):
        how many memories carry one, and the longest suffix after `path` in characters and
        in segments."""
        return (
            await self.session.execute(
                sql("""
                SELECT count(DISTINCT m.id) AS memories,
                       coalesce(max(char_length(u.tag)), 0) - char_length(:src) AS extra_chars,
                       coalesce(max(cardinality(string_to_array(u.tag, ':'))), 0)
                           - cardinality(string_to_array(:src, ':')) AS extra_depth
                FROM memory m CROSS JOIN LATERAL unnest(m.tags) AS u(tag)
                WHERE m.namespace_id = :ns
                  AND tag_paths(m.tags) && ARRAY[CAST(:src AS text)]
                  AND (u.tag = :src OR starts_with(u.tag, :src || ':'))"""),
                {"ns": namespace_id, "src": path},
            )
        ).one()

    async def rename(self, namespace_id: int, src: str, dst: str) -> int:
        """Every tag at or under `src` moves under `dst` (its suffix kept), on every memory of
        the namespace, soft-deleted ones included; a memory that ends up with a tag twice keeps
        its first place. Rows are locked in id order, so two renames cannot deadlock.
        Returns the memories changed. Migration 0023's trigger is told it is a rename
        (`htm.tag_rename`, for this statement): each memory's tag index follows, but its tag
        edges are not recomputed, one memory at a time, for every carrier of the tag (a
        rename changes no similarity, and a merge only some; reads weigh tag edges by the
        tags as they are)."""
        await self.session.execute(sql("SELECT set_config('htm.tag_rename', 'on', true)"))
        changed = len(
            (
                await self.session.execute(
                    sql(f"""
                    WITH target AS (
                        SELECT id, created_at FROM memory
                        WHERE namespace_id = :ns
                          AND tag_paths(tags) && ARRAY[CAST(:src AS text)]
                        ORDER BY id
                        FOR UPDATE
                    )
                    UPDATE memory m SET updated_at = now(), tags = ARRAY(
                        SELECT r.tag FROM (
                            SELECT {_RENAMED} AS tag, u.ord
                            FROM unnest(m.tags) WITH ORDINALITY AS u(tag, ord)
                        ) AS r
                        GROUP BY r.tag ORDER BY min(r.ord))
                    FROM target t
                    WHERE m.id = t.id AND m.created_at = t.created_at
                    RETURNING m.id"""),
                    {"ns": namespace_id, "src": src, "dst": dst},
                )
            ).all()
        )
        await self.session.execute(sql("SELECT set_config('htm.tag_rename', 'off', true)"))
        return changed
