"""All SQL of snapshots (migration 0022): a snapshot, its items and the memories readable when
it was taken."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from app.db.session import DbSession
from app.db.sql import sql
from app.timeframes.validity import Validity
from app.visibility import Reader

_SNAPSHOT = """s.id, r.name AS robot, s.name, s.created_at, s.item_count, s.tokens"""


class SnapshotRepository:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    async def create(
        self,
        namespace_id: int,
        robot_id: int,
        name: str | None,
        at: datetime,
        items: Sequence[dict[str, Any]],
    ) -> int:
        """A snapshot and its items (in the order given: `position`), in one statement."""
        return int(
            (
                await self.session.execute(
                    sql("""
                    WITH s AS (
                        INSERT INTO working_memory_snapshot
                            (namespace_id, robot_id, name, created_at, item_count, tokens)
                        VALUES (:ns, :robot, :name, :at, cardinality(CAST(:ids AS bigint[])),
                                (SELECT coalesce(sum(t), 0) FROM unnest(CAST(:tokens AS int[])) t))
                        RETURNING id
                    ), items AS (
                        INSERT INTO working_memory_snapshot_item (snapshot_id, position,
                            memory_id, key, version, tokens, importance, added_at,
                            last_access_at, from_recall)
                        SELECT s.id, t.n, t.id, t.key, t.version, t.tokens, t.importance,
                               t.added_at, t.last_access_at, t.from_recall
                        FROM s, unnest(CAST(:ids AS bigint[]), CAST(:keys AS text[]),
                                       CAST(:versions AS int[]), CAST(:tokens AS int[]),
                                       CAST(:importances AS float8[]),
                                       CAST(:added AS timestamptz[]),
                                       CAST(:access AS timestamptz[]),
                                       CAST(:recall AS boolean[]))
                             WITH ORDINALITY AS t(id, key, version, tokens, importance,
                                                  added_at, last_access_at, from_recall, n)
                    )
                    SELECT id FROM s"""),
                    {
                        "ns": namespace_id,
                        "robot": robot_id,
                        "name": name,
                        "at": at,
                        "ids": [i["memory_id"] for i in items],
                        "keys": [i["key"] for i in items],
                        "versions": [i["version"] for i in items],
                        "tokens": [i["tokens"] for i in items],
                        "importances": [i["importance"] for i in items],
                        "added": [i["added_at"] for i in items],
                        "access": [i["last_access_at"] for i in items],
                        "recall": [i["from_recall"] for i in items],
                    },
                )
            ).scalar_one()
        )

    async def record_readable(
        self, snapshot_id: int, namespace_id: int, at: datetime, reader: Reader
    ) -> None:
        """The memories `reader` (the snapshot's robot, every pool it may read included) can
        read at `at`, recorded for the snapshot: current, not deleted, and readable by the one
        predicate of app/visibility.py."""
        valid, params = Validity.now(at).where()
        readable, bound = reader.where()
        await self.session.execute(
            sql(f"""
            INSERT INTO working_memory_snapshot_readable (snapshot_id, memory_id)
            SELECT :id, m.id FROM memory m
            WHERE m.namespace_id = :ns AND m.deleted_at IS NULL AND {" AND ".join(valid)}
              AND {readable}"""),
            {"id": snapshot_id, "ns": namespace_id, **params, **bound},
        )

    async def of_robot(self, robot_id: int) -> list[Any]:
        return list(
            await self.session.execute(
                sql(f"""
                SELECT {_SNAPSHOT} FROM working_memory_snapshot s JOIN robot r ON r.id = s.robot_id
                WHERE s.robot_id = :robot ORDER BY s.id"""),
                {"robot": robot_id},
            )
        )

    async def get(self, robot_id: int, snapshot_id: int) -> Any:
        """The robot's snapshot, with how many memories were readable; None if not its own."""
        return (
            await self.session.execute(
                sql(f"""
                SELECT {_SNAPSHOT}, (SELECT count(*) FROM working_memory_snapshot_readable x
                                      WHERE x.snapshot_id = s.id) AS readable
                FROM working_memory_snapshot s JOIN robot r ON r.id = s.robot_id
                WHERE s.id = :id AND s.robot_id = :robot"""),
                {"id": snapshot_id, "robot": robot_id},
            )
        ).one_or_none()

    async def items(self, snapshot_id: int) -> list[Any]:
        return list(
            await self.session.execute(
                sql("""
                SELECT memory_id, key, version, tokens, importance, added_at, last_access_at,
                       from_recall
                FROM working_memory_snapshot_item WHERE snapshot_id = :id ORDER BY position"""),
                {"id": snapshot_id},
            )
        )

    async def delete(self, robot_id: int, snapshot_id: int) -> bool:
        done = await self.session.execute(
            sql("""
            DELETE FROM working_memory_snapshot WHERE id = :id AND robot_id = :robot
            RETURNING id"""),
            {"id": snapshot_id, "robot": robot_id},
        )
        return done.one_or_none() is not None

    async def why_skipped(self, memory_ids: Sequence[int]) -> dict[int, str]:
        """Why a restore skipped each of these memories (read after it, in its transaction):
        `superseded` (its validity ended), `no_access` (current, but its robot may no longer
        read it); a memory absent here was forgotten (soft-deleted, or gone)."""
        rows = await self.session.execute(
            sql("""
            SELECT m.id, CASE WHEN m.valid_to IS NOT NULL AND m.valid_to <= now()
                              THEN 'superseded' ELSE 'no_access' END AS reason
            FROM memory_key k
            JOIN memory m ON m.id = k.memory_id AND m.created_at = k.memory_created_at
            WHERE k.memory_id = ANY(CAST(:ids AS bigint[])) AND m.deleted_at IS NULL"""),
            {"ids": list(memory_ids)},
        )
        return {r.id: r.reason for r in rows}

    # --- export and import -----------------------------------------------------------------

    async def of_namespace(self, namespace_id: int, robot_id: int | None) -> list[Any]:
        """Every snapshot of the namespace (or one robot's), oldest first, each with its items
        (as JSON, in order) and the keys of its readable memories that still have one."""
        where = "s.namespace_id = :ns" + (" AND s.robot_id = :robot" if robot_id else "")
        return list(
            await self.session.execute(
                sql(f"""
                SELECT {_SNAPSHOT},
                       (SELECT coalesce(json_agg(json_build_object(
                                   'key', i.key, 'version', i.version, 'tokens', i.tokens,
                                   'importance', i.importance, 'added_at', i.added_at,
                                   'last_access_at', i.last_access_at,
                                   'from_recall', i.from_recall) ORDER BY i.position), '[]')
                        FROM working_memory_snapshot_item i WHERE i.snapshot_id = s.id) AS entries,
                       ARRAY(SELECT k.key FROM working_memory_snapshot_readable x
                             JOIN memory_key k ON k.memory_id = x.memory_id
                             WHERE x.snapshot_id = s.id ORDER BY k.key) AS readable
                FROM working_memory_snapshot s JOIN robot r ON r.id = s.robot_id
                WHERE {where} ORDER BY s.id"""),
                {"ns": namespace_id, "robot": robot_id} if robot_id else {"ns": namespace_id},
            )
        )

    async def exists(self, robot_id: int, name: str | None, at: datetime) -> bool:
        return (
            await self.session.execute(
                sql("""
                SELECT 1 FROM working_memory_snapshot
                WHERE robot_id = :robot AND created_at = :at AND name IS NOT DISTINCT FROM :name
                LIMIT 1"""),
                {"robot": robot_id, "at": at, "name": name},
            )
        ).one_or_none() is not None

    async def ids_of(self, namespace_id: int, keys: Sequence[str]) -> dict[str, int]:
        """The memory id of each key of the namespace that has one."""
        rows = await self.session.execute(
            sql("""
            SELECT key, memory_id FROM memory_key
            WHERE namespace_id = :ns AND key = ANY(CAST(:keys AS text[]))"""),
            {"ns": namespace_id, "keys": list(keys)},
        )
        return {r.key: r.memory_id for r in rows}

    async def add_readable(self, snapshot_id: int, memory_ids: Sequence[int]) -> None:
        """An imported snapshot's readable memories, as the file names them."""
        await self.session.execute(
            sql("""
            INSERT INTO working_memory_snapshot_readable (snapshot_id, memory_id)
            SELECT :id, unnest(CAST(:ids AS bigint[])) ON CONFLICT DO NOTHING"""),
            {"id": snapshot_id, "ids": list(memory_ids)},
        )
