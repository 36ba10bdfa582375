"""All SQL of maintenance: the schedule, the runs' record, and what the summaries and
supersede steps read."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from app.db.session import DbSession
from app.db.sql import sql
from app.maintenance.schemas import MaintenanceSchedule

_RUN = "id, trigger, status, started_at, finished_at, steps, error"


class MaintenanceRepository:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    async def schedule(self, namespace_id: int) -> MaintenanceSchedule | None:
        row = (
            await self.session.execute(
                sql("""
                SELECT cron, steps, dedupe FROM maintenance_schedule
                WHERE namespace_id = :ns"""),
                {"ns": namespace_id},
            )
        ).one_or_none()
        if row is None:
            return None
        return MaintenanceSchedule.model_construct(
            schedule=row.cron, steps=list(row.steps), dedupe=row.dedupe
        )

    async def set_schedule(self, namespace_id: int, s: MaintenanceSchedule, at: datetime) -> None:
        await self.session.execute(
            sql("""
            INSERT INTO maintenance_schedule (namespace_id, cron, steps, dedupe, set_at)
            VALUES (:ns, :cron, CAST(:steps AS text[]), :dedupe, :at)
            ON CONFLICT (namespace_id) DO UPDATE
            SET cron = EXCLUDED.cron, steps = EXCLUDED.steps, dedupe = EXCLUDED.dedupe,
                set_at = EXCLUDED.set_at"""),
            {"ns": namespace_id, "cron": s.schedule, "steps": s.steps, "dedupe": s.dedupe,
             "at": at},
        )  # fmt: skip

    async def scheduled(self) -> list[Any]:
        """Namespaces with a cron schedule: (id, name, cron, since: the last run's start or
        the schedule's setting, running: an unfinished run)."""
        rows = await self.session.execute(
            sql("""
            SELECT n.id, n.name, s.cron,
                   greatest(s.set_at, (SELECT max(started_at) FROM maintenance_run r
                                       WHERE r.namespace_id = n.id)) AS since,
                   EXISTS (SELECT 1 FROM maintenance_run r
                           WHERE r.namespace_id = n.id AND r.status = 'running') AS running
            FROM maintenance_schedule s JOIN namespace n ON n.id = s.namespace_id
            WHERE s.cron IS NOT NULL
            ORDER BY n.id""")
        )
        return list(rows)

    async def unfinished(self, namespace_id: int) -> Any | None:
        return (
            await self.session.execute(
                sql(f"""
                SELECT {_RUN} FROM maintenance_run
                WHERE namespace_id = :ns AND status = 'running'
                ORDER BY id LIMIT 1"""),
                {"ns": namespace_id},
            )
        ).one_or_none()

    async def start(self, namespace_id: int, trigger: str, at: datetime) -> Any:
        return (
            await self.session.execute(
                sql(f"""
                INSERT INTO maintenance_run (namespace_id, started_at, status, trigger)
                VALUES (:ns, :at, 'running', :trigger)
                RETURNING {_RUN}"""),
                {"ns": namespace_id, "at": at, "trigger": trigger},
            )
        ).one()

    async def record(self, run_id: int, step: str, outcome: dict[str, Any]) -> None:
        await self.session.execute(
            sql("""
            UPDATE maintenance_run SET steps = steps || jsonb_build_object(
                CAST(:step AS text), CAST(:outcome AS jsonb))
            WHERE id = :id"""),
            {"id": run_id, "step": step, "outcome": json.dumps(outcome)},
        )

    async def finish(self, run_id: int, at: datetime, error: str | None) -> Any:
        return (
            await self.session.execute(
                sql(f"""
                UPDATE maintenance_run
                SET finished_at = :at, status = CASE WHEN CAST(:error AS text) IS NULL THEN 'done'
                                                     ELSE 'failed' END,
                    error = CAST(:error AS text)
                WHERE id = :id
                RETURNING {_RUN}"""),
                {"id": run_id, "at": at, "error": error},
            )
        ).one()

    async def runs(self, namespace_id: int, limit: int) -> list[Any]:
        rows = await self.session.execute(
            sql(f"""
            SELECT {_RUN} FROM maintenance_run WHERE namespace_id = :ns
            ORDER BY id DESC LIMIT :limit"""),
            {"ns": namespace_id, "limit": limit},
        )
        return list(rows)

    # --- what the steps read --------------------------------------------------------------

    async def period(
        self, namespace_id: int, start: datetime, end: datetime, *, least: int, most: int
    ) -> list[Any]:
        """The live memories each robot added in [start, end), for the robots that added at
        least `least` (summaries and propositions left out), at most `most` each, by robot,
        oldest first: (robot, key, content, importance)."""
        rows = await self.session.execute(
            sql("""
            WITH added AS (
                SELECT r.name AS robot, m.key, m.content, m.importance, m.created_at, m.id,
                       count(*) OVER (PARTITION BY m.author_robot_id) AS n,
                       row_number() OVER (PARTITION BY m.author_robot_id
                                          ORDER BY m.created_at, m.id) AS k
                FROM memory m JOIN robot r ON r.id = m.author_robot_id
                WHERE m.namespace_id = :ns AND m.deleted_at IS NULL
                  AND m.created_at >= :start AND m.created_at < :end
                  AND m.type NOT IN ('summary', 'proposition')
                  AND m.visibility = 'namespace'  -- a summary tells every robot
            )
            SELECT robot, key, content, importance FROM added
            WHERE n >= :least AND k <= :most
            ORDER BY robot, created_at, id"""),
            {"ns": namespace_id, "start": start, "end": end, "least": least, "most": most},
        )
        return list(rows)

    async def long_sessions(self, namespace_id: int, least: int, most: int) -> list[Any]:
        """The live sessions with at least `least` messages, and their first `most`
        messages: (session_id, robot, session, last_seq, seq, role, content)."""
        rows = await self.session.execute(
            sql("""
            SELECT s.id AS session_id, r.name AS robot, s.name AS session, s.last_seq,
                   msg.seq, msg.role, msg.content
            FROM session s JOIN robot r ON r.id = s.robot_id
            JOIN session_message msg ON msg.session_id = s.id AND msg.seq <= :most
            WHERE s.namespace_id = :ns AND s.ended_at IS NULL AND s.last_seq >= :least
            ORDER BY s.id, msg.seq"""),
            {"ns": namespace_id, "least": least, "most": most},
        )
        return list(rows)

    async def labelled(self, namespace_id: int, start: datetime, end: datetime) -> list[Any]:
        """The live memories added in [start, end) the supersede detector's deterministic
        rules can read (metadata subject and attribute, or a key with an `@`)."""
        rows = await self.session.execute(
            sql("""
            SELECT m.key, m.type, m.metadata FROM memory m
            WHERE m.namespace_id = :ns AND m.deleted_at IS NULL AND m.valid_to IS NULL
              AND m.visibility = 'namespace'
              AND m.created_at >= :start AND m.created_at < :end
              AND ((m.metadata ? 'subject' AND m.metadata ? 'attribute')
                   OR strpos(m.key, '@') > 0)
            ORDER BY m.created_at, m.id"""),
            {"ns": namespace_id, "start": start, "end": end},
        )
        return list(rows)
