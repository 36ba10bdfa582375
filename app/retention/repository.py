"""All SQL of retention: the namespace's policies, and each rule's candidates."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from app.db.session import DbSession
from app.db.sql import ACCESS_COUNT, LAST_ACCESSED_AT, sql
from app.retention.schemas import RetentionPolicy

# Each rule's memories, live ones of the namespace (and of the policy's type, if any), as of
# :now. Staleness = min(1, idle days / days) × (1 − importance / 10) / (1 + accesses): 1 for a
# memory of importance 0 never read for `days`; idle days count from the last access, or
# from when it was added.
_IDLE = f"coalesce({LAST_ACCESSED_AT}, m.created_at)"
_RULES = {
    "idle": f"{_IDLE} < CAST(:now AS timestamptz) - make_interval(days => :days)",
    "stale": f"""least(1.0, extract(epoch FROM CAST(:now AS timestamptz) - {_IDLE})
                   / 86400.0 / :days) * (1 - m.importance / 10.0) / (1 + {ACCESS_COUNT})
              >= :threshold""",
    # memory_valid_to: the ended memories of the namespace by when they ended
    "superseded": """m.valid_to IS NOT NULL
        AND m.valid_to < CAST(:now AS timestamptz) - make_interval(days => :days)""",
}


class RetentionRepository:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    async def policies(self, namespace_id: int) -> list[RetentionPolicy]:
        rows = await self.session.execute(
            sql("""
            SELECT type, rule, days, threshold FROM retention_policy
            WHERE namespace_id = :ns ORDER BY position"""),
            {"ns": namespace_id},
        )
        return [
            RetentionPolicy.model_construct(
                type=r.type, rule=r.rule, days=r.days, threshold=r.threshold
            )
            for r in rows
        ]

    async def replace(self, namespace_id: int, policies: list[RetentionPolicy]) -> None:
        await self.session.execute(
            sql("DELETE FROM retention_policy WHERE namespace_id = :ns"), {"ns": namespace_id}
        )
        if policies:
            await self.session.execute(
                sql("""
                INSERT INTO retention_policy (namespace_id, position, type, rule, days, threshold)
                SELECT :ns, t.position - 1, t.type, t.rule, t.days, t.threshold
                FROM unnest(CAST(:types AS text[]), CAST(:rules AS text[]),
                            CAST(:days AS int[]), CAST(:thresholds AS float8[]))
                     WITH ORDINALITY AS t(type, rule, days, threshold, position)"""),
                {
                    "ns": namespace_id,
                    "types": [p.type for p in policies],
                    "rules": [p.rule for p in policies],
                    "days": [p.days for p in policies],
                    "thresholds": [p.threshold for p in policies],
                },
            )

    async def namespaces(self) -> list[Any]:
        """The namespaces with at least one policy or a task pool expired and not yet
        archived: (id, name)."""
        rows = await self.session.execute(
            sql("""
            SELECT n.id, n.name FROM namespace n
            WHERE EXISTS (SELECT 1 FROM retention_policy p WHERE p.namespace_id = n.id)
               OR EXISTS (SELECT 1 FROM pool p WHERE p.namespace_id = n.id
                          AND p.archived_at IS NULL AND p.expires_at <= now())
            ORDER BY n.id""")
        )
        return list(rows)

    async def candidates(
        self, namespace_id: int, policy: RetentionPolicy, now: datetime, limit: int
    ) -> list[Any]:
        """(key, version) of the live memories the policy archives, oldest first."""
        typed = "AND m.type = :type" if policy.type is not None else ""
        rows = await self.session.execute(
            sql(f"""
            SELECT m.key, m.version FROM memory m
            WHERE m.namespace_id = :ns AND m.deleted_at IS NULL {typed}
              AND {_RULES[policy.rule]}
            ORDER BY m.created_at, m.id
            LIMIT :limit"""),
            {
                "ns": namespace_id,
                "type": policy.type,
                "now": now,
                "days": policy.days,
                "threshold": policy.threshold,
                "limit": limit,
            },
        )
        return list(rows)
