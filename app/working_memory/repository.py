"""Working-memory membership in Postgres (invariant 7): the mirror of each robot's Redis
working set, the source for rebuilding it and for serving context while Redis is down.

Every statement here that changes a robot's membership runs under that robot's row lock,
taken by `lock()` (see app/working_memory/protocol.py for the order of a change).

A repository serves one namespace (`namespace_id`): every statement names it, so that on
Citus (migrations 0031, 0033: working_memory_item distributed by namespace_id, co-located
with memory) each one runs as one task on the namespace's shard.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.db.session import DbSession
from app.db.sql import RELAXED_FLUSH_CTE, sql
from app.visibility import Reader
from app.working_memory.store import Change

# Evictions are logged in the statement that records them.
_EVICT_EVENTS = """
    INSERT INTO memory_event (namespace_id, robot_id, memory_id, kind, at)
    SELECT :ns, :robot, e, 'evict', coalesce(CAST(:at AS timestamptz), now())
    FROM unnest(CAST(:evicted AS bigint[])) AS e"""

# Rows of the robot's members placed by a change: (id, created_at, added_at, last access,
# from_recall) as Redis stored them.
_UPSERT_MEMBERS = """
    INSERT INTO working_memory_item AS w (namespace_id, robot_id, memory_id, memory_created_at,
        in_working_memory, seq, added_at, last_access_at, from_recall, stale_at)
    SELECT :ns, :robot, t.id, t.c, true, :seq, t.added_at, t.last_access, t.from_recall, NULL
    FROM unnest(CAST(:ids AS bigint[]), CAST(:cs AS timestamptz[]),
                CAST(:added AS timestamptz[]), CAST(:access AS timestamptz[]),
                CAST(:recall AS boolean[])) AS t(id, c, added_at, last_access, from_recall)
    ON CONFLICT (namespace_id, robot_id, memory_id) DO UPDATE SET
        memory_created_at = excluded.memory_created_at, in_working_memory = true,
        seq = excluded.seq, added_at = excluded.added_at,
        last_access_at = excluded.last_access_at, from_recall = excluded.from_recall,
        stale_at = NULL"""

# The change recorded: the robot's (generation, sequence) in its working_memory_change row.
_RECORD_ROBOT = """UPDATE working_memory_change SET gen = :gen, seq = :seq
    WHERE namespace_id = :ns AND robot_id = :robot"""


@dataclass(frozen=True)
class LockedRobot:
    """A robot's row as its working-memory lock read it."""

    budget: int
    stale: bool  # Redis may differ from this mirror in unknown ways: rebuild first
    gen: int | None  # the last recorded change; None: never recorded
    seq: int | None
    live: frozenset[int]  # of the memories asked for: those current at the version named

    @property
    def change(self) -> Change | None:
        return None if self.gen is None or self.seq is None else Change(self.gen, self.seq)


@dataclass(frozen=True)
class Placed:
    """A member as a change left it in Redis."""

    memory_id: int
    created_at: datetime
    added_at: datetime
    last_access_at: datetime
    from_recall: bool


class MembershipRepository:
    """One namespace's working-memory mirror (`needing_repair`, a function of its own below,
    looks across all)."""

    def __init__(self, session: DbSession, namespace_id: int) -> None:
        self.session = session
        self.namespace_id = namespace_id

    # --- the robot's lock ----------------------------------------------------------------

    async def lock(
        self,
        namespace_id: int,
        robot_id: int,
        default_budget: int,
        memories: Sequence[tuple[int, datetime, int]] = (),
        *,
        relaxed: bool = True,
        skip_locked: bool = False,
    ) -> LockedRobot | None:
        """Lock the robot's working_memory_change row for one working-memory change (made at
        its first: `_first_change`) and read its last recorded change, with the robot's
        budget and stale flag (the robot's own row too, locked, when that flag is set: see
        record_load). `memories` are (id, created_at, version) about to be placed:
        each current one (that version, neither deleted nor superseded) is locked FOR KEY
        SHARE, which a replace, supersede or forget (FOR UPDATE) waits for, and returned in
        `live` (a supersede need not change what a reader saw: a recall that read "valid now"
        at its start still finds a memory whose validity ended since, at its new version). The
        robot is locked first (the memories' scan waits on it), the order every change takes.
        The change row and the memories' scan name the robot's namespace (`namespace_id`): on
        Citus (migrations 0031, 0034) that makes the statement one task on the namespace's
        shard, with no write to the robot, a reference table.

        relaxed: the transaction writes only mirror rows and log rows, so its commit need not
        wait for the WAL flush (app.db.sql.RELAXED_FLUSH_CTE). skip_locked: None if another
        change holds the robot (the repair worker passes by)."""
        flush = f"{RELAXED_FLUSH_CTE}," if relaxed else ""
        statement = sql(f"""
            WITH {flush} c AS MATERIALIZED (
                SELECT robot_id, gen, seq FROM working_memory_change
                WHERE namespace_id = :ns AND robot_id = :robot
                FOR NO KEY UPDATE {"SKIP LOCKED" if skip_locked else ""}
            ), r AS (
                SELECT id, coalesce(working_memory_budget, :default_budget) AS budget,
                       working_memory_stale AS stale
                FROM robot WHERE id = :robot
            )
            SELECT r.budget, r.stale, c.gen, c.seq,
                   ARRAY(SELECT m.id FROM memory m
                         JOIN unnest(CAST(:ids AS bigint[]), CAST(:cs AS timestamptz[]),
                                     CAST(:versions AS int[])) AS t(id, c, version)
                           ON m.id = t.id AND m.created_at = t.c
                         WHERE m.namespace_id = :ns AND m.version = t.version
                           AND m.deleted_at IS NULL
                           AND m.superseded_by IS NULL AND c.robot_id IS NOT NULL
                         FOR KEY SHARE OF m) AS live
            FROM c JOIN r ON r.id = c.robot_id{", flush" if relaxed else ""}""")
        params = {
            "ns": namespace_id,
            "robot": robot_id,
            "default_budget": default_budget,
            "ids": [m[0] for m in memories],
            "cs": [m[1] for m in memories],
            "versions": [m[2] for m in memories],
        }
        row = (await self.session.execute(statement, params)).one_or_none()
        if row is None:  # no row yet (its first change), locked (skip_locked), or robot gone
            await self._first_change(namespace_id, robot_id)
            row = (await self.session.execute(statement, params)).one_or_none()
        if row is None:
            return None
        stale = row.stale
        if stale:
            # A rebuild will clear the flag (record_load): hold the robot's row until then,
            # so that a concurrent mark_robot_stale lands after it, not under it.
            stale = (
                await self.session.execute(
                    sql("""SELECT working_memory_stale FROM robot WHERE id = :robot
                           FOR NO KEY UPDATE"""),
                    {"robot": robot_id},
                )
            ).scalar_one()
        return LockedRobot(row.budget, stale, row.gen, row.seq, frozenset(row.live))

    async def _first_change(self, namespace_id: int, robot_id: int) -> None:
        """The robot's working_memory_change row, made at its first change if it has none
        (migration 0034 made one for every robot of its time; concurrent first changes: one
        makes it, the others wait for its commit, then lock it in turn)."""
        await self.session.execute(
            sql("""
            INSERT INTO working_memory_change (namespace_id, robot_id)
            SELECT namespace_id, id FROM robot WHERE id = :robot AND namespace_id = :ns
            ON CONFLICT (namespace_id, robot_id) DO NOTHING"""),
            {"ns": namespace_id, "robot": robot_id},
        )

    # --- recording changes (under the lock) ------------------------------------------------

    async def record_place(
        self,
        namespace_id: int,
        robot_id: int,
        change: Change,
        *,
        placed: Sequence[Placed],
        departed: Sequence[int],
        evicted: Sequence[int],
        at: datetime | None,
    ) -> None:
        """A place: the placed are in (their stale marks cleared: Redis holds the current
        version now), the departed out, the evictions logged, and the change recorded."""
        await self.session.execute(
            sql(f"""
            WITH placed AS ({_UPSERT_MEMBERS}
            ), departed AS (
                UPDATE working_memory_item SET in_working_memory = false, seq = :seq,
                       stale_at = NULL
                WHERE namespace_id = :ns AND robot_id = :robot
                  AND memory_id = ANY(CAST(:departed AS bigint[]))
            ), robot AS ({_RECORD_ROBOT})
            {_EVICT_EVENTS}"""),
            {
                **_placed_params(placed),
                "ns": namespace_id,
                "robot": robot_id,
                "gen": change.gen,
                "seq": change.seq,
                "departed": list(departed),
                "evicted": list(evicted),
                "at": at,
            },
        )

    async def record_load(
        self,
        namespace_id: int,
        robot_id: int,
        change: Change,
        *,
        placed: Sequence[Placed],
        evicted: Sequence[int],
        at: datetime | None,
        was_stale: bool = False,
    ) -> None:
        """A rebuild: the membership becomes exactly the loaded set, every stale mark of the
        robot is cleared (the load wrote current content), rows of hard-deleted memories go,
        and the robot is no longer stale (`was_stale`: its flag was set, and `lock` holds its
        row: cleared in a statement of its own, as Citus will not write the robot, a
        reference table, in a statement that writes the namespace's shard)."""
        await self.session.execute(
            sql(f"""
            WITH placed AS ({_UPSERT_MEMBERS}
            ), gone AS (
                UPDATE working_memory_item w SET in_working_memory = false, seq = :seq,
                       stale_at = NULL
                WHERE w.namespace_id = :ns AND w.robot_id = :robot
                  AND (w.in_working_memory OR w.stale_at IS NOT NULL)
                  AND NOT (w.memory_id = ANY(CAST(:ids AS bigint[])))
                  AND EXISTS (SELECT 1 FROM memory_key k
                              WHERE k.namespace_id = :ns AND k.memory_id = w.memory_id)
            ), orphans AS (
                DELETE FROM working_memory_item w
                WHERE w.namespace_id = :ns AND w.robot_id = :robot
                  AND NOT EXISTS (SELECT 1 FROM memory_key k
                                  WHERE k.namespace_id = :ns AND k.memory_id = w.memory_id)
            ), robot AS ({_RECORD_ROBOT}
            )
            {_EVICT_EVENTS}"""),
            {
                **_placed_params(placed),
                "ns": namespace_id,
                "robot": robot_id,
                "gen": change.gen,
                "seq": change.seq,
                "evicted": list(evicted),
                "at": at,
            },
        )
        if was_stale:
            await self.session.execute(
                sql("UPDATE robot SET working_memory_stale = false WHERE id = :robot"),
                {"robot": robot_id},
            )

    async def record_removal(self, robot_id: int, change: Change, memory_ids: list[int]) -> None:
        """A withdrawal: the memories are out of the robot's working memory (rows of
        hard-deleted memories are dropped), then the change recorded in the robot's
        working_memory_change row, by a second statement (written when that row was the
        robot's, a reference table on Citus; one statement would now do)."""
        await self.session.execute(
            sql("""
            WITH out AS (
                UPDATE working_memory_item w SET in_working_memory = false, seq = :seq,
                       stale_at = NULL
                WHERE w.namespace_id = :ns AND w.robot_id = :robot
                  AND w.memory_id = ANY(CAST(:ids AS bigint[]))
                  AND EXISTS (SELECT 1 FROM memory_key k
                              WHERE k.namespace_id = :ns AND k.memory_id = w.memory_id)
                RETURNING 1
            ), orphans AS (
                DELETE FROM working_memory_item w
                WHERE w.namespace_id = :ns AND w.robot_id = :robot
                  AND w.memory_id = ANY(CAST(:ids AS bigint[]))
                  AND NOT EXISTS (SELECT 1 FROM memory_key k
                                  WHERE k.namespace_id = :ns AND k.memory_id = w.memory_id)
            )
            SELECT count(*) FROM out"""),
            {"ns": self.namespace_id, "robot": robot_id, "seq": change.seq, "ids": memory_ids},
        )
        await self.session.execute(
            sql(_RECORD_ROBOT),
            {"ns": self.namespace_id, "robot": robot_id, "gen": change.gen, "seq": change.seq},
        )

    async def record_clear(self, robot_id: int, change: Change | None) -> int:
        """A clear: every member is out. change None: Redis was not reached (the caller marks
        the robot stale). Returns how many members there were."""
        return int(
            (
                await self.session.execute(
                    sql("""
                    WITH out AS (
                        UPDATE working_memory_item w SET in_working_memory = false,
                               stale_at = NULL, seq = coalesce(CAST(:seq AS bigint), w.seq)
                        WHERE w.namespace_id = :ns AND w.robot_id = :robot
                          AND (w.in_working_memory OR w.stale_at IS NOT NULL)
                        RETURNING w.in_working_memory AS was_in
                    ), robot AS (
                        UPDATE working_memory_change
                        SET gen = coalesce(CAST(:gen AS bigint), gen),
                            seq = coalesce(CAST(:seq AS bigint), seq)
                        WHERE namespace_id = :ns AND robot_id = :robot
                    )
                    SELECT count(*) FROM out"""),
                    {
                        "ns": self.namespace_id,
                        "robot": robot_id,
                        "gen": change.gen if change else None,
                        "seq": change.seq if change else None,
                    },
                )
            ).scalar_one()
        )

    async def mark_robot_stale(self, robot_id: int) -> None:
        """Redis may differ from the mirror in ways nobody recorded: rebuild before next use."""
        await self.session.execute(
            sql("UPDATE robot SET working_memory_stale = true WHERE id = :robot"),
            {"robot": robot_id},
        )

    async def is_stale_member(self, robot_id: int, memory_id: int) -> bool:
        """Whether the robot still owes the memory's withdrawal; locks the row, so a replace
        marking it again waits for this change."""
        row = (
            await self.session.execute(
                sql("""
                SELECT 1 FROM working_memory_item
                WHERE namespace_id = :ns AND robot_id = :robot AND memory_id = :id
                  AND stale_at IS NOT NULL
                FOR UPDATE"""),
                {"ns": self.namespace_id, "robot": robot_id, "id": memory_id},
            )
        ).one_or_none()
        return row is not None

    async def members(
        self, robot_id: int, reader: Reader, *, for_rebuild: bool = False
    ) -> list[Any]:
        """The robot's working set with what Redis needs (current content), oldest first:
        what its owner (`reader`, the robot or its group) may still read, neither forgotten
        nor superseded (a supersede withdraws its memory from every working memory).

        for_rebuild first locks the membership rows, then reads them in a statement of its
        own: a replace or forget that marked a row stale first has committed by then, and the
        read sees its memory as it committed it (one statement locking the rows while it
        reads them would recheck a row it waited for against the memory as its snapshot saw
        it, before that commit: a forgotten or superseded memory placed again, its mark
        cleared); one that marks a row after the lock waits for the rebuild's commit, so the
        rebuild cannot clear a mark it did not see. The join to memory names the reader's
        namespace: on Citus (migration 0031) the read is then one task on its shard."""
        if for_rebuild:
            await self.session.execute(
                sql("""
                SELECT 1 FROM working_memory_item w
                WHERE w.namespace_id = :ns AND w.robot_id = :robot AND w.in_working_memory
                FOR UPDATE OF w"""),
                {"ns": reader.namespace_id, "robot": robot_id},
            )
        readable, params = reader.where()
        return list(
            await self.session.execute(
                sql(f"""
                SELECT m.id, m.created_at, m.key, m.content, m.token_count, m.importance,
                       m.version, w.added_at, w.last_access_at, w.from_recall
                FROM working_memory_item w
                JOIN memory m ON m.namespace_id = :ns AND m.id = w.memory_id
                                 AND m.created_at = w.memory_created_at
                WHERE w.namespace_id = :ns AND w.robot_id = :robot AND w.in_working_memory
                  AND m.deleted_at IS NULL AND m.superseded_by IS NULL AND {readable}
                ORDER BY w.added_at, m.key"""),
                {"ns": reader.namespace_id, "robot": robot_id, **params},
            )
        )

    # --- outside the robot's lock ----------------------------------------------------------

    async def mark_holders_stale(self, memory_id: int) -> list[Any]:
        """In a replace's or forget's durable transaction, after the memory's row lock: every
        robot holding it owes a withdrawal. Returns (id, name) of those robots. Robot rows
        are read, not locked (a placement holds its robot's lock while it waits on this
        memory's, so locking robots here could deadlock)."""
        return list(
            await self.session.execute(
                sql("""
                UPDATE working_memory_item w SET stale_at = now()
                FROM robot r
                WHERE w.namespace_id = :ns AND w.memory_id = :id AND w.in_working_memory
                  AND r.id = w.robot_id
                RETURNING r.id, r.name"""),
                {"ns": self.namespace_id, "id": memory_id},
            )
        )

    async def mark_stale(self, robot_ids: Sequence[int], memory_ids: Sequence[int]) -> None:
        """Like `mark_holders_stale`, for these (robot, memory) pairs only: robots that may
        no longer read a memory they hold (a pool's grant revoked)."""
        await self.session.execute(
            sql("""
            UPDATE working_memory_item w SET stale_at = now()
            FROM unnest(CAST(:robots AS bigint[]), CAST(:ids AS bigint[])) AS t(robot, id)
            WHERE w.namespace_id = :ns AND w.robot_id = t.robot AND w.memory_id = t.id
              AND w.in_working_memory"""),
            {"ns": self.namespace_id, "robots": list(robot_ids), "ids": list(memory_ids)},
        )

    async def move(self, memory_id: int, created_at: datetime) -> None:
        """A replace moved the memory in time: the mirror's rows follow it."""
        await self.session.execute(
            sql(
                "UPDATE working_memory_item SET memory_created_at = :c "
                "WHERE namespace_id = :ns AND memory_id = :id"
            ),
            {"ns": self.namespace_id, "id": memory_id, "c": created_at},
        )

    async def touch(self, robot_id: int, memory_id: int, at: datetime) -> None:
        """An access. Needs no lock: last access only moves forward, in either order."""
        await self.session.execute(
            sql("""
            UPDATE working_memory_item SET last_access_at = greatest(last_access_at, :at)
            WHERE namespace_id = :ns AND robot_id = :robot AND memory_id = :id
              AND in_working_memory"""),
            {"ns": self.namespace_id, "robot": robot_id, "id": memory_id, "at": at},
        )

    async def touch_held(self, robot_id: int, memory_ids: Sequence[int], at: datetime) -> set[int]:
        """A recall's hits that Redis held already (store.refresh): move their last access
        forward, without the robot's lock, and return those the mirror holds too (in working
        memory, placed by a recall, owing no withdrawal, the robot not stale); the caller
        places the others through the protocol. Rows another change has locked are skipped,
        not waited for: this transaction then holds rows only while it never waits, so it
        cannot deadlock with a change that holds the robot's lock and wants them."""
        rows = await self.session.execute(
            sql(f"""
            WITH {RELAXED_FLUSH_CTE}, held AS (
                SELECT w.memory_id FROM working_memory_item w
                WHERE w.namespace_id = :ns AND w.robot_id = :robot
                  AND w.memory_id = ANY(CAST(:ids AS bigint[]))
                  AND w.in_working_memory AND w.stale_at IS NULL AND w.from_recall
                  AND NOT EXISTS (SELECT 1 FROM robot r
                                  WHERE r.id = :robot AND r.working_memory_stale)
                FOR NO KEY UPDATE OF w SKIP LOCKED
            )
            UPDATE working_memory_item w
            SET last_access_at = greatest(w.last_access_at, :at)
            FROM held, flush
            WHERE w.namespace_id = :ns AND w.robot_id = :robot AND w.memory_id = held.memory_id
            RETURNING w.memory_id"""),
            {"ns": self.namespace_id, "robot": robot_id, "ids": list(memory_ids), "at": at},
        )
        return {r.memory_id for r in rows}


def _placed_params(placed: Sequence[Placed]) -> dict[str, Any]:
    return {
        "ids": [p.memory_id for p in placed],
        "cs": [p.created_at for p in placed],
        "added": [p.added_at for p in placed],
        "access": [p.last_access_at for p in placed],
        "recall": [p.from_recall for p in placed],
    }


async def needing_repair(session: DbSession, older_than_s: float, limit: int) -> list[Any]:
    """Robots whose Redis may be out of line with the mirror: marked stale, or owing a
    withdrawal for longer than a change normally takes. (id, name, namespace name)."""
    return list(
        await session.execute(
            sql("""
            SELECT r.id, r.name, n.name AS namespace, r.namespace_id
            FROM robot r JOIN namespace n ON n.id = r.namespace_id
            WHERE r.working_memory_stale
               OR r.id IN (SELECT w.robot_id FROM working_memory_item w
                           WHERE w.stale_at < now() - make_interval(secs => :age))
            ORDER BY r.id
            LIMIT :limit"""),
            {"age": older_than_s, "limit": limit},
        )
    )
