from __future__ import annotations

from typing import Any

from app.db.session import DbSession
from app.db.sql import sql


class VersionRepository:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    async def postgres(self) -> dict[str, Any]:
        """The server's version and those of the extensions the service uses (None if absent)."""
        row = (
            await self.session.execute(
                sql("""
                SELECT current_setting('server_version') AS postgres,
                       (SELECT extversion FROM pg_extension WHERE extname = 'vector') AS pgvector,
                       (SELECT extversion FROM pg_extension WHERE extname = 'timescaledb')
                           AS timescaledb""")
            )
        ).one()
        return dict(row._asdict())
