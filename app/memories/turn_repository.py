"""The SQL of a conversation's order: the turn before each new one in its session (for its
search text, app/memories/search_text.py), read through the index memory_session_turns."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from app.conversation import speaker_of
from app.db.session import DbSession
from app.db.sql import sql


@dataclass(frozen=True)
class Turn:
    """The turn before a memory in its session."""

    speaker: str | None
    content: str


_PREVIOUS = sql("""
    SELECT q.i, p.content, p.metadata
    FROM unnest(CAST(:sessions AS text[]), CAST(:ats AS timestamptz[]))
         WITH ORDINALITY AS q(s, at, i)
    CROSS JOIN LATERAL (
        SELECT m.content, m.metadata FROM memory m
        WHERE m.namespace_id = :ns AND m.metadata ? 'session' AND m.metadata ->> 'session' = q.s
          AND m.created_at < q.at AND m.deleted_at IS NULL
          AND m.visibility = 'namespace'  -- a search text tells no private turn's words
          AND m.id <> ALL(CAST(:skip AS bigint[]))
        ORDER BY m.created_at DESC, m.id DESC
        LIMIT 1) p""")


class TurnRepository:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    async def previous(
        self, namespace_id: int, wanted: list[tuple[str, datetime]], skip: list[int] | None = None
    ) -> list[Turn | None]:
        """For each (session, instant), the latest live turn of that session stored before
        it (none: None); `skip`: memories not to take (the one being replaced)."""
        if not wanted:
            return []
        rows = (
            await self.session.execute(
                _PREVIOUS,
                {
                    "ns": namespace_id,
                    "sessions": [s for s, _ in wanted],
                    "ats": [at for _, at in wanted],
                    "skip": skip or [],
                },
            )
        ).all()
        found: list[Turn | None] = [None] * len(wanted)
        for r in rows:
            found[r.i - 1] = Turn(speaker_of(r.metadata), r.content)
        return found
