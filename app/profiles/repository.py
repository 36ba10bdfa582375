"""All SQL of profiles: a subject's current slots and the next key of a slot."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from app.db.session import DbSession
from app.db.sql import sql
from app.timeframes.validity import Validity
from app.visibility import Reader


class ProfileRepository:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    async def current(
        self, namespace_id: int, subject: str, at: datetime, reader: Reader
    ) -> list[Any]:
        """Each attribute's current memory about `subject` (metadata `subject` and a string
        `attribute`, the profile's or not) that `reader` may read, by attribute: the latest to
        become valid when several are (the GIN index memory_metadata serves the containment)."""
        valid, params = Validity.now(at).where()
        readable, bound = reader.where()
        params.update(bound)
        return list(
            await self.session.execute(
                sql(f"""
                SELECT DISTINCT ON (m.metadata->>'attribute')
                       m.metadata->>'attribute' AS slot, m.key, m.content, m.metadata,
                       coalesce(m.valid_from, m.created_at) AS since
                FROM memory m
                WHERE m.namespace_id = :ns AND m.metadata @> CAST(:md AS jsonb)
                  AND jsonb_typeof(m.metadata->'attribute') = 'string'
                  AND m.metadata->>'attribute' <> ''
                  AND m.deleted_at IS NULL AND {" AND ".join(valid)} AND {readable}
                ORDER BY m.metadata->>'attribute', coalesce(m.valid_from, m.created_at) DESC,
                         m.id DESC"""),
                {"ns": namespace_id, "md": json.dumps({"subject": subject}), **params},
            )
        )

    async def next_number(self, namespace_id: int, family: str) -> int:
        """1 + the highest n of the keys `<family>@<n>` the namespace has had (deleted
        memories keep their keys)."""
        return int(
            (
                await self.session.execute(
                    sql("""
                    SELECT coalesce(max(CAST(substr(key, length(:prefix) + 1) AS bigint)), 0) + 1
                    FROM memory_key
                    WHERE namespace_id = :ns AND left(key, length(:prefix)) = :prefix
                      AND substr(key, length(:prefix) + 1) ~ '^[0-9]{1,18}$'"""),
                    {"ns": namespace_id, "prefix": family + "@"},
                )
            ).scalar_one()
        )
