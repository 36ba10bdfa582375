from __future__ import annotations

from app import names
from app.cache import TtlCache
from app.db.session import Sessionmaker
from app.db.sql import sql


class NamespaceRepository:
    @staticmethod
    async def resolve(sessionmaker: Sessionmaker, cache: TtlCache[str, int], name: str) -> int:
        """Namespace id by name, created on first use.

        Namespaces are never renamed or deleted through the API, so the app's cache saves a
        query per request.
        """
        cached = cache.get(name)
        if cached is not None:
            return cached
        names.check("namespace", name)
        # Read first: the upsert's DO UPDATE locks and rewrites an existing row, which would
        # make a read-only request a write. The upsert (not DO NOTHING, which returns no row)
        # then settles a race with another request creating the same namespace.
        async with sessionmaker() as session, session.begin():
            ns_id = (
                await session.execute(
                    sql("SELECT id FROM namespace WHERE name = :name"), {"name": name}
                )
            ).scalar()
            if ns_id is None:
                ns_id = (
                    await session.execute(
                        sql("""
                        INSERT INTO namespace (name) VALUES (:name)
                        ON CONFLICT (name) DO UPDATE SET name = excluded.name
                        RETURNING id"""),
                        {"name": name},
                    )
                ).scalar_one()
        cache.put(name, int(ns_id))
        return int(ns_id)
