"""State keys in PostgreSQL (migration 0030, `robot_state`): the truth the Redis copy is
made from. Times come from the app's clock (passed in), so a frozen clock decides expiry; an
expired row is never answered, and a holder's expired rows are deleted by its next write."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from app.db.session import DbSession
from app.db.sql import sql

_COLUMNS = """key, value::text AS value, version, pinned, tokens, expires_at, created_at,
    updated_at, updated_by, robot_id"""
_LIVE = "(expires_at IS NULL OR expires_at > CAST(:now AS timestamptz))"
_NEXT = "nextval('robot_state_version')"
# Advisory locks of state writes: (this class, the holder's id), so a holder's limits (its
# key count, its pinned tokens) are checked and kept by one writer at a time.
_LOCK_CLASS = 48


class StateRepository:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    async def lock(self, holder_id: int) -> None:
        """Until the transaction ends: one state write of this holder at a time."""
        await self.session.execute(
            sql("SELECT pg_advisory_xact_lock(:cls, CAST(:id % 2147483647 AS integer))"),
            {"cls": _LOCK_CLASS, "id": holder_id},
        )

    async def purge_expired(self, holder_id: int, now: datetime) -> None:
        await self.session.execute(
            sql("""DELETE FROM robot_state
                   WHERE robot_id = :h AND expires_at <= CAST(:now AS timestamptz)"""),
            {"h": holder_id, "now": now},
        )

    async def get(self, holder_id: int, key: str, now: datetime) -> Any | None:
        return (
            await self.session.execute(
                sql(f"SELECT {_COLUMNS} FROM robot_state WHERE robot_id = :h AND key = :k "
                    f"AND {_LIVE}"),
                {"h": holder_id, "k": key, "now": now},
            )
        ).one_or_none()  # fmt: skip

    async def limits(self, holder_id: int, key: str) -> tuple[int, int, bool]:
        """(keys held, tokens pinned by the other keys, whether `key` is held); expired rows
        were purged first."""
        row = (
            await self.session.execute(
                sql("""
                SELECT count(*) AS held_keys,
                       coalesce(sum(tokens) FILTER (WHERE pinned AND key <> :k), 0) AS pinned,
                       bool_or(key = :k) AS held
                FROM robot_state WHERE robot_id = :h"""),
                {"h": holder_id, "k": key},
            )
        ).one()
        return int(row.held_keys), int(row.pinned), bool(row.held)

    async def write(
        self,
        holder_id: int,
        key: str,
        *,
        value: str,
        pinned: bool,
        tokens: int,
        expires_at: datetime | None,
        now: datetime,
        by: str,
        expected: int | None,
        exists: bool | None,
    ) -> Any | None:
        """Write the key's new version: `exists` False creates only, True replaces only
        (`expected`: only that version), None either. None when the condition failed."""
        params = {
            "h": holder_id, "k": key, "v": value, "p": pinned, "t": tokens, "x": expires_at,
            "now": now, "by": by, "e": expected,
        }  # fmt: skip
        if exists:
            statement = f"""
                UPDATE robot_state SET value = CAST(:v AS json), version = {_NEXT},
                    pinned = :p, tokens = :t, expires_at = CAST(:x AS timestamptz),
                    updated_at = CAST(:now AS timestamptz), updated_by = :by
                WHERE robot_id = :h AND key = :k
                  AND (CAST(:e AS bigint) IS NULL OR version = CAST(:e AS bigint))
                RETURNING {_COLUMNS}"""
        else:
            conflict = (
                "DO NOTHING"
                if exists is False
                else f"""DO UPDATE SET value = excluded.value, version = {_NEXT},
                    pinned = excluded.pinned, tokens = excluded.tokens,
                    expires_at = excluded.expires_at, updated_at = excluded.updated_at,
                    updated_by = excluded.updated_by"""
            )
            statement = f"""
                INSERT INTO robot_state AS s (robot_id, key, value, version, pinned, tokens,
                    expires_at, created_at, updated_at, updated_by)
                VALUES (:h, :k, CAST(:v AS json), {_NEXT}, :p, :t, CAST(:x AS timestamptz),
                    CAST(:now AS timestamptz), CAST(:now AS timestamptz), :by)
                ON CONFLICT (robot_id, key) {conflict}
                RETURNING {_COLUMNS}"""
        return (await self.session.execute(sql(statement), params)).one_or_none()

    async def delete(self, holder_id: int, key: str, expected: int | None) -> int | None:
        """Delete the key (only at version `expected`, if given); the version deleted, or
        None. The delete's own version (its tombstone's in Redis) is a new one."""
        row = (
            await self.session.execute(
                sql(f"""
                WITH gone AS (
                    DELETE FROM robot_state WHERE robot_id = :h AND key = :k
                      AND (CAST(:e AS bigint) IS NULL OR version = CAST(:e AS bigint))
                    RETURNING version)
                SELECT {_NEXT} AS version FROM gone"""),
                {"h": holder_id, "k": key, "e": expected},
            )
        ).one_or_none()
        return None if row is None else int(row.version)

    async def page(
        self, holder_id: int, now: datetime, *, after: str | None, limit: int
    ) -> Sequence[Any]:
        return (
            await self.session.execute(
                sql(f"""
                SELECT {_COLUMNS} FROM robot_state
                WHERE robot_id = :h AND {_LIVE} AND (CAST(:after AS text) IS NULL OR key > :after)
                ORDER BY key LIMIT :n"""),
                {"h": holder_id, "now": now, "after": after, "n": limit},
            )
        ).all()

    async def pinned(self, holder_ids: Sequence[int], now: datetime) -> Sequence[Any]:
        """The pinned keys of these holders, in the order given, then by key."""
        return (
            await self.session.execute(
                sql(f"""
                SELECT {_COLUMNS} FROM robot_state
                JOIN unnest(CAST(:hs AS bigint[])) WITH ORDINALITY AS h(id, n) ON h.id = robot_id
                WHERE pinned AND {_LIVE}
                ORDER BY h.n, key"""),
                {"hs": list(holder_ids), "now": now},
            )
        ).all()
