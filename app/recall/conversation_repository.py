"""The SQL recall reads about conversations (app/conversation.py): the speakers a namespace's
memories name, and the turns around a hit in its session (index memory_session_turns)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from app.db.session import DbSession
from app.db.sql import sql
from app.visibility import Reader

# A namespace with more speakers than this has its first ones (by name) taken out of
# questions; each is a regular expression run on the question.
MAX_SPEAKERS = 1000

_SPEAKERS = sql("SELECT name FROM speaker WHERE namespace_id = :ns ORDER BY name LIMIT :cap")

# For each hit (its session, instant and id): up to :n live turns of that session before it
# (newest first) and after it (oldest first).
_NEIGHBOURS = """
    SELECT h.i, t.position, t.key, t.content, t.metadata, t.created_at
    FROM unnest(CAST(:sessions AS text[]), CAST(:ats AS timestamptz[]), CAST(:ids AS bigint[]))
         WITH ORDINALITY AS h(s, at, id, i)
    CROSS JOIN LATERAL (
        SELECT -row_number() OVER (ORDER BY b.created_at DESC, b.id DESC) AS position, b.*
        FROM (SELECT m.id, m.key, m.content, m.metadata, m.created_at FROM memory m
              WHERE m.namespace_id = :ns AND m.metadata ? 'session'
                AND m.metadata ->> 'session' = h.s AND m.deleted_at IS NULL
                AND (m.created_at, m.id) < (h.at, h.id) AND {readable}
              ORDER BY m.created_at DESC, m.id DESC LIMIT :n) AS b
        UNION ALL
        SELECT row_number() OVER (ORDER BY a.created_at, a.id) AS position, a.*
        FROM (SELECT m.id, m.key, m.content, m.metadata, m.created_at FROM memory m
              WHERE m.namespace_id = :ns AND m.metadata ? 'session'
                AND m.metadata ->> 'session' = h.s AND m.deleted_at IS NULL
                AND (m.created_at, m.id) > (h.at, h.id) AND {readable}
              ORDER BY m.created_at, m.id LIMIT :n) AS a
    ) t
    ORDER BY h.i, t.position"""


class Around(NamedTuple):
    """A hit: its session, instant and id."""

    session: str
    created_at: datetime
    id: int


class ConversationRepository:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    async def speakers(self, namespace_id: int) -> list[str]:
        rows = await self.session.execute(_SPEAKERS, {"ns": namespace_id, "cap": MAX_SPEAKERS})
        return [r.name for r in rows]

    async def neighbours(
        self, namespace_id: int, hits: list[Around], n: int, reader: Reader
    ) -> list[list[Any]]:
        """For each hit, its session's turns around it that `reader` may read (rows:
        position, key, content, metadata, created_at), in order."""
        found: list[list[Any]] = [[] for _ in hits]
        if not hits or n <= 0:
            return found
        readable, params = reader.where()
        rows = await self.session.execute(
            sql(_NEIGHBOURS.replace("{readable}", readable)),
            {
                **params,
                "ns": namespace_id,
                "sessions": [h.session for h in hits],
                "ats": [h.created_at for h in hits],
                "ids": [h.id for h in hits],
                "n": n,
            },
        )
        for r in rows:
            found[r.i - 1].append(r)
        return found
