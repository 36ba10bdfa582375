"""All SQL for entities: a namespace's aliases, an entity's names (itself and its aliases)
and the entities a robot may read with their counts. The entities themselves are memory
columns (`memory.entities`, migration 0026), written by app/memories/repository.py."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.db.session import DbSession
from app.db.sql import sql
from app.timeframes.validity import Validity
from app.visibility import Reader

# Each key as the map resolves it (an alias → its entity), then that entity and every alias
# of it: what `memory.entities && names` must match.
_NAMES = sql("""
    WITH asked AS (
        SELECT coalesce(a.entity, k.key) AS entity
        FROM unnest(CAST(:keys AS text[])) AS k(key)
        LEFT JOIN entity_alias a ON a.namespace_id = :ns AND a.alias = k.key
    )
    SELECT entity AS name FROM asked
    UNION
    SELECT a.alias FROM entity_alias a
    WHERE a.namespace_id = :ns AND a.entity IN (SELECT entity FROM asked)
    ORDER BY 1""")

# The entities of the memories `where` admits, aliases applied, a memory counted once per
# entity. Keyset order: most memories first, then by key (code point order).
_LISTING = """
    WITH named AS (
        SELECT coalesce(a.entity, e.key) AS entity, e.kind, m.id, m.created_at
        FROM memory m
        CROSS JOIN LATERAL unnest(m.entities, m.entity_kinds) AS e(key, kind)
        LEFT JOIN entity_alias a ON a.namespace_id = m.namespace_id AND a.alias = e.key
        WHERE {where}
    ), counted AS (
        SELECT entity, array_agg(DISTINCT kind ORDER BY kind) AS kinds,
               count(DISTINCT id) AS memories, max(created_at) AS latest_at
        FROM named GROUP BY entity
    )
    SELECT entity, kinds, memories, latest_at FROM counted
    WHERE {after}
    ORDER BY memories DESC, entity COLLATE "C"
    LIMIT :limit"""


# Each memory's entities, aliases applied, in the order of :ids, then of the memory's own.
_NAMED_BY = sql("""
    SELECT t.id, coalesce(a.entity, e.key) AS entity
    FROM unnest(CAST(:ids AS bigint[])) WITH ORDINALITY AS t(id, ord)
    JOIN memory m ON m.id = t.id AND m.namespace_id = :ns
    CROSS JOIN LATERAL unnest(m.entities) WITH ORDINALITY AS e(key, pos)
    LEFT JOIN entity_alias a ON a.namespace_id = :ns AND a.alias = e.key
    ORDER BY t.ord, e.pos""")


class EntityRepository:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    async def names(self, namespace_id: int, keys: Sequence[str]) -> list[str]:
        """The names standing for these keys: each key's entity and its aliases, sorted."""
        rows = await self.session.execute(_NAMES, {"ns": namespace_id, "keys": list(keys)})
        return [r.name for r in rows]

    async def named_by(self, namespace_id: int, ids: Sequence[int]) -> list[tuple[int, str]]:
        """(memory id, entity) of these memories, aliases applied, in the order of `ids`."""
        rows = await self.session.execute(_NAMED_BY, {"ns": namespace_id, "ids": list(ids)})
        return [(r.id, r.entity) for r in rows]

    async def canonical(self, namespace_id: int, keys: Sequence[str]) -> list[str]:
        """Each key as the map resolves it (an alias → its entity), in order."""
        rows = await self.session.execute(
            sql("""
            SELECT coalesce(a.entity, k.key) AS entity
            FROM unnest(CAST(:keys AS text[])) WITH ORDINALITY AS k(key, ord)
            LEFT JOIN entity_alias a ON a.namespace_id = :ns AND a.alias = k.key
            ORDER BY k.ord"""),
            {"ns": namespace_id, "keys": list(keys)},
        )
        return [r.entity for r in rows]

    async def aliases(self, namespace_id: int) -> dict[str, str]:
        rows = await self.session.execute(
            sql("""
            SELECT alias, entity FROM entity_alias WHERE namespace_id = :ns
            ORDER BY alias COLLATE "C" """),
            {"ns": namespace_id},
        )
        return {r.alias: r.entity for r in rows}

    async def set_aliases(self, namespace_id: int, aliases: Mapping[str, str]) -> None:
        """Replace the namespace's map with `aliases`."""
        await self.session.execute(
            sql("DELETE FROM entity_alias WHERE namespace_id = :ns"), {"ns": namespace_id}
        )
        if aliases:
            await self.session.execute(
                sql("""
                INSERT INTO entity_alias (namespace_id, alias, entity)
                SELECT :ns, a, e
                FROM unnest(CAST(:aliases AS text[]), CAST(:entities AS text[])) AS t(a, e)"""),
                {"ns": namespace_id, "aliases": list(aliases), "entities": list(aliases.values())},
            )

    async def listing(
        self,
        namespace_id: int,
        *,
        reader: Reader,
        valid: Validity,
        kind: str | None,
        limit: int,
        after: tuple[int, str] | None,
    ) -> list[Any]:
        """(entity, kinds, memories, latest_at) over the memories not deleted, valid as
        `valid` says, that `reader` may read; `kind`: only entities named so at least once."""
        readable, params = reader.where()
        clauses, bound = valid.where()
        where = ["m.namespace_id = :ns", "m.deleted_at IS NULL", "m.entities <> '{}'", readable]
        where.extend(clauses)
        params.update(bound)
        params.update({"ns": namespace_id, "limit": limit})
        keyset = ["true"]
        if after is not None:
            keyset = [
                '(memories < :after_n OR (memories = :after_n AND entity COLLATE "C" > :after_e))'
            ]
            params["after_n"], params["after_e"] = after
        if kind is not None:
            keyset.append("CAST(:kind AS text) = ANY(kinds)")
            params["kind"] = kind
        statement = _LISTING.format(where=" AND ".join(where), after=" AND ".join(keyset))
        return list((await self.session.execute(sql(statement), params)).all())
