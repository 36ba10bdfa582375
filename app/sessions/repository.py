"""Sessions and their messages in PostgreSQL (migration 0007): the durable copy of every
message, each session's expiry, and the messages' access counts. Times come from the app's
clock (passed in), so a test that freezes it controls expiry."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from app.db.session import DbSession
from app.db.sql import sql

_SESSION = "id, name, ttl_s, last_seq, created_at, last_access_at, expires_at"
_MESSAGE = "seq, role, content, metadata, remember, token_count, access_count, created_at"
_EXPIRY = "CAST(:now AS timestamptz) + ttl_s * interval '1 second'"

# The window as SQL: the newest messages first, each with the running sum of token counts
# (newest first), cut at `n` and at the first that does not fit `max_tokens`.
_WINDOW = """
    SELECT seq FROM (
        SELECT seq, sum(token_count) OVER (ORDER BY seq DESC) AS running
        FROM session_message WHERE session_id = :sid ORDER BY seq DESC LIMIT :n) w
    WHERE running <= :max_tokens"""


class SessionRepository:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    async def live(self, robot_id: int, name: str) -> Any | None:
        """The robot's session of that name not yet ended (it may have expired)."""
        return (
            await self.session.execute(
                sql(f"""
                SELECT {_SESSION} FROM session
                WHERE robot_id = :robot AND name = :name AND ended_at IS NULL"""),
                {"robot": robot_id, "name": name},
            )
        ).one_or_none()

    async def create(
        self, namespace_id: int, robot_id: int, name: str, *, default_ttl_s: int, now: datetime
    ) -> Any | None:
        """A new live session (the robot's session_ttl_s, else the default), or None when
        one of that name exists (a concurrent create)."""
        return (
            await self.session.execute(
                sql(f"""
                INSERT INTO session (namespace_id, robot_id, name, ttl_s, created_at,
                                     last_access_at, expires_at)
                SELECT :ns, r.id, :name, t.ttl, :now, :now,
                       CAST(:now AS timestamptz) + t.ttl * interval '1 second'
                FROM robot r, LATERAL (SELECT coalesce(r.session_ttl_s, :ttl) AS ttl) t
                WHERE r.id = :robot
                ON CONFLICT (robot_id, name) WHERE ended_at IS NULL DO NOTHING
                RETURNING {_SESSION}"""),
                {"ns": namespace_id, "robot": robot_id, "name": name, "ttl": default_ttl_s,
                 "now": now},
            )
        ).one_or_none()  # fmt: skip

    async def end(self, session_id: int, now: datetime, *, claim: bool) -> bool:
        """Mark the session ended (nothing is appended to it from here on); `claim`: by the
        consolidation that starts now (else the expiry worker's next pass takes it)."""
        row = (
            await self.session.execute(
                sql("""
                UPDATE session SET ended_at = CAST(:now AS timestamptz),
                                   claimed_at = CASE WHEN CAST(:claim AS boolean)
                                                     THEN CAST(:now AS timestamptz) END
                WHERE id = :sid AND ended_at IS NULL RETURNING id"""),
                {"sid": session_id, "now": now, "claim": claim},
            )
        ).one_or_none()
        return row is not None

    async def reserve(self, session_id: int, count: int, now: datetime) -> Any | None:
        """Give out `count` sequence numbers (the row's lock orders concurrent appends) and
        refresh the expiry; None when the session ended or expired meanwhile."""
        return (
            await self.session.execute(
                sql(f"""
                UPDATE session SET last_seq = last_seq + :n, last_access_at = :now,
                                   expires_at = {_EXPIRY}
                WHERE id = :sid AND ended_at IS NULL AND expires_at > :now
                RETURNING last_seq, expires_at"""),
                {"sid": session_id, "n": count, "now": now},
            )
        ).one_or_none()

    async def insert(self, session_id: int, first_seq: int, rows: list[Any], now: datetime) -> None:
        """rows: (role, content, metadata, remember, token_count), numbered from first_seq."""
        await self.session.execute(
            sql("""
            INSERT INTO session_message (session_id, seq, role, content, metadata, remember,
                                         token_count, created_at)
            SELECT :sid, :first + u.ord - 1, u.role, u.content, CAST(u.metadata AS jsonb),
                   u.remember, u.tokens, :now
            FROM unnest(CAST(:roles AS text[]), CAST(:contents AS text[]),
                        CAST(:metadata AS text[]), CAST(:remember AS boolean[]),
                        CAST(:tokens AS int[]))
                 WITH ORDINALITY AS u(role, content, metadata, remember, tokens, ord)"""),
            {
                "sid": session_id,
                "first": first_seq,
                "now": now,
                "roles": [r[0] for r in rows],
                "contents": [r[1] for r in rows],
                "metadata": [json.dumps(r[2]) for r in rows],
                "remember": [r[3] for r in rows],
                "tokens": [r[4] for r in rows],
            },
        )

    async def touch(self, robot_id: int, name: str, now: datetime, *, refresh: bool) -> Any | None:
        """The live, unexpired session, its expiry pushed out when `refresh`."""
        if not refresh:
            return (
                await self.session.execute(
                    sql(f"""
                    SELECT {_SESSION} FROM session
                    WHERE robot_id = :robot AND name = :name AND ended_at IS NULL
                      AND expires_at > :now"""),
                    {"robot": robot_id, "name": name, "now": now},
                )
            ).one_or_none()
        return (
            await self.session.execute(
                sql(f"""
                UPDATE session SET last_access_at = :now, expires_at = {_EXPIRY}
                WHERE robot_id = :robot AND name = :name AND ended_at IS NULL
                  AND expires_at > :now
                RETURNING {_SESSION}"""),
                {"robot": robot_id, "name": name, "now": now},
            )
        ).one_or_none()

    async def count_accesses(
        self, session_id: int, seqs: list[int], *, count: bool
    ) -> dict[int, int]:
        """{seq: access_count}, after one more access each when `count`."""
        if count:
            statement = """
                UPDATE session_message SET access_count = access_count + 1
                WHERE session_id = :sid AND seq = ANY(CAST(:seqs AS bigint[]))
                RETURNING seq, access_count"""
        else:
            statement = """
                SELECT seq, access_count FROM session_message
                WHERE session_id = :sid AND seq = ANY(CAST(:seqs AS bigint[]))"""
        rows = await self.session.execute(sql(statement), {"sid": session_id, "seqs": seqs})
        return {r.seq: r.access_count for r in rows}

    async def window(self, session_id: int, n: int, max_tokens: int, *, count: bool) -> list[Any]:
        """The window (oldest first), with one more access each when `count`."""
        if count:
            statement = f"""
                WITH w AS ({_WINDOW})
                UPDATE session_message m SET access_count = m.access_count + 1
                FROM w WHERE m.session_id = :sid AND m.seq = w.seq
                RETURNING {", ".join("m." + c for c in _MESSAGE.split(", "))}"""
        else:
            statement = f"""
                SELECT {_MESSAGE} FROM session_message
                WHERE session_id = :sid AND seq IN ({_WINDOW})"""
        rows = await self.session.execute(
            sql(statement), {"sid": session_id, "n": n, "max_tokens": max_tokens}
        )
        return sorted(rows, key=lambda r: r.seq)

    async def tail(self, session_id: int, limit: int) -> list[Any]:
        """The last `limit` messages, oldest first."""
        rows = await self.session.execute(
            sql(f"""
            SELECT {_MESSAGE} FROM session_message WHERE session_id = :sid
            ORDER BY seq DESC LIMIT :limit"""),
            {"sid": session_id, "limit": limit},
        )
        return sorted(rows, key=lambda r: r.seq)

    async def messages(self, session_id: int) -> list[Any]:
        rows = await self.session.execute(
            sql(f"SELECT {_MESSAGE} FROM session_message WHERE session_id = :sid ORDER BY seq"),
            {"sid": session_id},
        )
        return list(rows)

    async def delete(self, session_id: int) -> None:
        await self.session.execute(sql("DELETE FROM session WHERE id = :sid"), {"sid": session_id})

    async def claim_due(self, now: datetime, lease_s: float, limit: int) -> list[Any]:
        """Sessions to consolidate: expired ones, ended ones nobody consolidates, and those
        whose consolidation did not finish within the lease (a crash). Claimed by setting
        claimed_at (the lease's start); SKIP LOCKED: several workers share the work."""
        return list(
            await self.session.execute(
                sql(f"""
                UPDATE session s SET ended_at = coalesce(s.ended_at, :now), claimed_at = :now
                FROM robot r, namespace n
                WHERE s.id IN (
                        SELECT id FROM session
                        WHERE (ended_at IS NULL AND expires_at <= :now)
                           OR (ended_at IS NOT NULL AND (claimed_at IS NULL
                               OR claimed_at <= CAST(:now AS timestamptz)
                                                - :lease * interval '1 second'))
                        ORDER BY id LIMIT :limit FOR UPDATE SKIP LOCKED)
                  AND r.id = s.robot_id AND n.id = s.namespace_id
                RETURNING {", ".join("s." + c for c in _SESSION.split(", "))},
                          s.namespace_id, n.name AS namespace, r.name AS robot, s.robot_id"""),
                {"now": now, "lease": lease_s, "limit": limit},
            )
        )
