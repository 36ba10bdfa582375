from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from app.db.session import DbSession
from app.db.sql import sql
from app.errors import ServiceUnavailable, is_node_unreachable

log = logging.getLogger(__name__)

_COLUMNS = (
    "id, name, working_memory_budget, working_memory_stale, session_ttl_s, summarize_evictions, "
    "created_at, last_seen_at"
)
# The row's version: the transaction that wrote it last (a registration that is undone must
# find the row as it wrote it, not as a concurrent PUT or working-memory change left it).
_VERSION = "CAST(CAST(xmin AS text) AS bigint) AS row_version"
# How long a discarded registration's transaction may wait for a lock (RobotRepository.
# lock_unused): well under deadlock_timeout (1 s), so that it gives up before a deadlock with
# an insert in flight could be detected and cost that insert its transaction.
UNUSED_LOCK_WAIT = "100ms"
# A robot's last_seen_at is refreshed at most this often.
SEEN_EVERY = timedelta(minutes=1)
# A robot with its group's working-memory columns (app/groups), which robot_from_row reads.
_WITH_GROUP = f"""
    SELECT {", ".join("r." + c.strip() for c in _COLUMNS.split(","))},
           g.id AS g_id, g.name AS g_name, g.working_memory_budget AS g_budget,
           g.working_memory_stale AS g_stale
    FROM robot r LEFT JOIN robot g ON g.id = r.group_id"""


class RobotRepository:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    async def ensure(self, namespace_id: int, name: str) -> tuple[Any, bool]:
        """(row, created): register on first use.

        Read first, and write only what needs writing: the row when it is missing (DO
        NOTHING on conflict: concurrent requests of one robot must not queue on its row
        lock), last_seen_at when it is a minute old. On Citus `robot` is a reference table,
        and a write to it needs every node: a robot that exists is then served while a worker
        is down (tests/citus)."""
        found = await self.get(namespace_id, name)
        if found is not None:
            await self._seen(found)
            return found, False
        row = (
            await self.session.execute(
                sql(f"""
                INSERT INTO robot (namespace_id, name) VALUES (:ns, :name)
                ON CONFLICT (namespace_id, name) DO NOTHING
                RETURNING {_COLUMNS}, {_VERSION}"""),
                {"ns": namespace_id, "name": name},
            )
        ).one_or_none()
        if row is not None:
            return row, True
        row = await self.get(namespace_id, name)
        if row is None:  # deleted between the two statements: register it again
            return await self.ensure(namespace_id, name)
        await self._seen(row)
        return row, False

    async def _seen(self, row: Any) -> None:
        """last_seen_at = now(), when the row read says it is over a minute old (the clocks
        of this process and the database need not agree: the statement checks again).
        SKIP LOCKED: another transaction holds the row's lock (a PUT, or a rebuild clearing
        the stale flag); waiting for it would put a robot lock after other locks this
        transaction may take (a memory's row), and the next request refreshes it anyway.
        Best effort, under a savepoint: on Citus `robot` is a reference table, whose write
        needs every node, and while a worker is down the request must not fail for it
        (every robot's requests would, a minute into the outage: tests/citus)."""
        if row.last_seen_at is not None and row.last_seen_at > datetime.now(UTC) - SEEN_EVERY:
            return
        await self.session.execute(sql("SAVEPOINT robot_seen"))
        try:
            await self.session.execute(
                sql("""
                UPDATE robot SET last_seen_at = now()
                WHERE id = (SELECT id FROM robot
                            WHERE id = :id AND last_seen_at < now() - interval '1 minute'
                            FOR NO KEY UPDATE SKIP LOCKED)"""),
                {"id": row.id},
            )
        except ServiceUnavailable as exc:
            if not is_node_unreachable(exc):
                raise
            await self.session.execute(sql("ROLLBACK TO SAVEPOINT robot_seen"))
            log.info("robot %s: last_seen_at not written (a Citus worker is down)", row.id)
        else:
            await self.session.execute(sql("RELEASE SAVEPOINT robot_seen"))

    async def get(self, namespace_id: int, name: str) -> Any | None:
        return (
            await self.session.execute(
                sql(f"{_WITH_GROUP} WHERE r.namespace_id = :ns AND r.name = :name"),
                {"ns": namespace_id, "name": name},
            )
        ).one_or_none()

    async def list(self, namespace_id: int) -> list[Any]:
        return list(
            await self.session.execute(
                sql(f"{_WITH_GROUP} WHERE r.namespace_id = :ns AND NOT r.is_group ORDER BY r.name"),
                {"ns": namespace_id},
            )
        )

    async def upsert_budget(
        self,
        namespace_id: int,
        name: str,
        budget: int | None,
        *,
        session_ttl_s: int | None,
        summarize: bool = False,
    ) -> Any:
        """Turning summaries on starts them from now: the watermark moves to the robot's last
        eviction so far (app/summaries)."""
        return (
            await self.session.execute(
                sql(f"""
                INSERT INTO robot (namespace_id, name, working_memory_budget, session_ttl_s,
                                   summarize_evictions)
                VALUES (:ns, :name, :budget, :ttl, :summarize)
                ON CONFLICT (namespace_id, name) DO UPDATE
                    SET working_memory_budget = excluded.working_memory_budget,
                        session_ttl_s = excluded.session_ttl_s,
                        summarized_through = CASE
                            WHEN excluded.summarize_evictions AND NOT robot.summarize_evictions
                            THEN coalesce((SELECT max(e.id) FROM memory_event e
                                           WHERE e.robot_id = robot.id AND e.kind = 'evict'), 0)
                            ELSE robot.summarized_through END,
                        summarize_evictions = excluded.summarize_evictions,
                        last_seen_at = now()
                RETURNING {_COLUMNS}"""),
                {
                    "ns": namespace_id,
                    "name": name,
                    "budget": budget,
                    "ttl": session_ttl_s,
                    "summarize": summarize,
                },
            )
        ).one()

    async def lock_for_removal(self, namespace_id: int, name: str) -> Any | None:
        """Lock a robot's row FOR UPDATE (a concurrent write referring to it waits for this
        transaction: its foreign key check takes FOR KEY SHARE), then count, in a statement
        of its own so that it sees what committed while it waited, what the robot holds."""
        robot_id = (
            await self.session.execute(
                sql("""
                SELECT id FROM robot
                WHERE namespace_id = :ns AND name = :name AND NOT is_group
                FOR UPDATE"""),
                {"ns": namespace_id, "name": name},
            )
        ).scalar()
        return None if robot_id is None else await self._held(namespace_id, robot_id)

    async def lock_unused(self, namespace_id: int, name: str) -> Any | None:
        """As `lock_for_removal`, without waiting: None when the row is locked (a write in
        flight refers to it: its foreign key check holds FOR KEY SHARE, or a working-memory
        change holds it). The transaction waits for no lock past LOCK_WAIT (a delete's own
        foreign key checks meeting a row inserted in flight): it fails instead (55P03), and
        a deadlock with that insert cannot form."""
        await self.session.execute(sql(f"SET LOCAL lock_timeout = '{UNUSED_LOCK_WAIT}'"))
        robot_id = (
            await self.session.execute(
                sql("""
                SELECT id FROM robot
                WHERE namespace_id = :ns AND name = :name AND NOT is_group
                FOR UPDATE SKIP LOCKED"""),
                {"ns": namespace_id, "name": name},
            )
        ).scalar()
        return None if robot_id is None else await self._held(namespace_id, robot_id)

    async def _held(self, namespace_id: int, robot_id: int) -> Any:
        """What a locked robot holds, and its row's version (each count names the namespace:
        on Citus one task on its shard)."""
        return (
            await self.session.execute(
                sql("""
                SELECT CAST(:id AS bigint) AS id,
                       (SELECT CAST(CAST(xmin AS text) AS bigint) FROM robot
                        WHERE id = CAST(:id AS bigint)) AS row_version,
                       (SELECT count(*) FROM memory
                        WHERE namespace_id = :ns AND author_robot_id = :id
                          AND deleted_at IS NULL) AS memories,
                       (SELECT count(*) FROM memory
                        WHERE namespace_id = :ns AND author_robot_id = :id
                          AND deleted_at IS NOT NULL) AS forgotten,
                       (SELECT count(*) FROM session
                        WHERE namespace_id = :ns AND robot_id = :id) AS sessions,
                       (SELECT count(*) FROM working_memory_item
                        WHERE namespace_id = :ns AND robot_id = :id
                          AND in_working_memory) AS working_memory"""),
                {"ns": namespace_id, "id": robot_id},
            )
        ).one()

    async def delete(self, robot_id: int) -> None:
        """The robot's row and its counters (all zero: it authored nothing)."""
        await self.session.execute(
            sql("""
            WITH counts AS (DELETE FROM robot_memory_count WHERE robot_id = :id),
                 days AS (DELETE FROM robot_activity_day WHERE robot_id = :id)
            DELETE FROM robot WHERE id = :id"""),
            {"id": robot_id},
        )
