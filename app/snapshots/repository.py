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
# A snapshot's memory (`{id}`) its robot may no longer read: one that exists and the reader's
# predicate refuses (a memory deleted for good is nobody's: its key stays). What a robot is
# shown of a snapshot leaves these out, counts included (app/visibility.py).
_HIDDEN = "EXISTS (SELECT 1 FROM memory m WHERE m.id = {id} AND ({readable}) IS NOT TRUE)"
# A snapshot as its robot is shown it: its items and the memories readable then, counted
# without those it may no longer read.
_SHOWN = """s.id, r.name AS robot, s.name, s.created_at,
    (SELECT count(*) FROM working_memory_snapshot_item i
     WHERE i.snapshot_id = s.id AND NOT {item}) AS item_count,
    (SELECT coalesce(sum(i.tokens), 0) FROM working_memory_snapshot_item i
     WHERE i.snapshot_id = s.id AND NOT {item}) AS tokens,
    (SELECT count(*) FROM working_memory_snapshot_readable x
     WHERE x.snapshot_id = s.id AND NOT {readable}) AS readable"""


def _hidden(memory_id: str, reader: Reader) -> tuple[str, dict[str, Any]]:
    """_HIDDEN for the memory id `memory_id` (an SQL expression), and its bind values."""
    predicate, params = reader.where()
    return _HIDDEN.replace("{readable}", predicate).replace("{id}", memory_id), params


def _shown(reader: Reader) -> tuple[str, dict[str, Any]]:
    (item, params), (readable, _) = _hidden("i.memory_id", reader), _hidden("x.memory_id", reader)
    return _SHOWN.replace("{item}", item).replace("{readable}", readable), params


# A snapshot and its items (in the order given: `position`), in one statement.
_CREATE = sql("""
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
    SELECT id FROM s""")


class SnapshotRepository:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    async def create(
        self,
        namespace_id: int,
        robot_id: int,
        name: str | None,
        *,
        at: datetime,
        items: Sequence[dict[str, Any]],
    ) -> int:
        """A snapshot and its items (in the order given: `position`), in one statement."""
        return int(
            (
                await self.session.execute(
                    _CREATE,
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

    async def of_robot(self, robot_id: int, reader: Reader) -> list[Any]:
        """The robot's snapshots as `reader` (the robot) is shown them."""
        shown, params = _shown(reader)
        return list(
            await self.session.execute(
                sql(f"""
                SELECT {shown} FROM working_memory_snapshot s JOIN robot r ON r.id = s.robot_id
                WHERE s.robot_id = :robot ORDER BY s.id"""),
                {"robot": robot_id, **params},
            )
        )

    async def get(self, robot_id: int, snapshot_id: int, reader: Reader) -> Any:
        """The robot's snapshot as `reader` (the robot) is shown it, with how many memories
        were readable; None if not its own."""
        shown, params = _shown(reader)
        return (
            await self.session.execute(
                sql(f"""
                SELECT {shown}
                FROM working_memory_snapshot s JOIN robot r ON r.id = s.robot_id
                WHERE s.id = :id AND s.robot_id = :robot"""),
                {"id": snapshot_id, "robot": robot_id, **params},
            )
        ).one_or_none()

    async def items(self, snapshot_id: int, reader: Reader | None = None) -> list[Any]:
        """The snapshot's items in order; with `reader`, those it is shown."""
        hidden, params = ("false", {}) if reader is None else _hidden("i.memory_id", reader)
        return list(
            await self.session.execute(
                sql(f"""
                SELECT memory_id, key, version, tokens, importance, added_at, last_access_at,
                       from_recall
                FROM working_memory_snapshot_item i
                WHERE snapshot_id = :id AND NOT {hidden} ORDER BY position"""),
                {"id": snapshot_id, **params},
            )
        )

    async def hidden(self, memory_ids: Sequence[int], reader: Reader) -> set[int]:
        """Of these memories, those `reader` may no longer read."""
        hidden, params = _hidden("x.id", reader)
        rows = await self.session.execute(
            sql(f"SELECT x.id FROM unnest(CAST(:ids AS bigint[])) AS x(id) WHERE {hidden}"),
            {"ids": list(memory_ids), **params},
        )
        return {r.id for r in rows}

    async def delete(self, robot_id: int, snapshot_id: int) -> bool:
        done = await self.session.execute(
            sql("""
            DELETE FROM working_memory_snapshot WHERE id = :id AND robot_id = :robot
            RETURNING id"""),
            {"id": snapshot_id, "robot": robot_id},
        )
        return done.one_or_none() is not None

    async def ended(self, memory_ids: Sequence[int]) -> set[int]:
        """Of these memories, those that exist undeleted (so a restore skipped them because
        their validity ended, not because they were forgotten)."""
        rows = await self.session.execute(
            sql("""
            SELECT m.id FROM memory_key k
            JOIN memory m ON m.id = k.memory_id AND m.created_at = k.memory_created_at
            WHERE k.memory_id = ANY(CAST(:ids AS bigint[])) AND m.deleted_at IS NULL"""),
            {"ids": list(memory_ids)},
        )
        return {r.id for r in rows}

    # --- export and import -----------------------------------------------------------------

    async def of_namespace(self, namespace_id: int, robot_id: int | None) -> list[Any]:
        """Every snapshot of the namespace (or one robot's), oldest first, each with its items
        (as JSON, in order) and the keys of its readable memories, each naming a memory the
        export holds: one that still has its key (a hard delete takes it) and, for one
        robot's export, that robot authored."""
        where = "s.namespace_id = :ns" + (" AND s.robot_id = :robot" if robot_id else "")
        # The exported memories among the snapshot's (`x`).
        exported = """JOIN memory_key k ON k.memory_id = x.memory_id""" + (
            """
                        JOIN memory m ON m.id = k.memory_id AND m.created_at = k.memory_created_at
                                     AND m.author_robot_id = :robot"""
            if robot_id
            else ""
        )
        return list(
            await self.session.execute(
                sql(f"""
                SELECT {_SNAPSHOT},
                       (SELECT coalesce(json_agg(json_build_object(
                                   'key', k.key, 'version', x.version, 'tokens', x.tokens,
                                   'importance', x.importance, 'added_at', x.added_at,
                                   'last_access_at', x.last_access_at,
                                   'from_recall', x.from_recall) ORDER BY x.position), '[]')
                        FROM working_memory_snapshot_item x {exported}
                        WHERE x.snapshot_id = s.id) AS entries,
                       ARRAY(SELECT k.key FROM working_memory_snapshot_readable x {exported}
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
