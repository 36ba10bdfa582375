"""All SQL of relationships (migration 0023): a link written or removed, the memories a
request names, and the two reads that walk edges: `related` (a recursive CTE) and
`expansion` (one hop from recall's hits).

Which memories a walk reaches is decided in one place, `_neighbours`: the edges of a node,
either way, to the namespace's memories that are not deleted and the reader may read (alias
`m`; `READABLE` marks where its predicate goes). A `tags` edge's weight is the Jaccard
similarity of the two memories' tags as they are now (the stored one is as of when its
source was written), and it leads only to a memory that is not superseded: so an edge
another memory made to a node counts only while the two still share tags.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from app.db.session import DbSession
from app.db.sql import sql
from app.visibility import Reader

# What every memory read here is also filtered by: " AND " the reader's predicate on `m`
# (app/visibility.py), put in by `_readable` when a statement runs.
READABLE = " AND {readable}"


def _neighbours(node: str, tags: str, columns: str) -> str:
    """The memories one edge from the memory `node` (an id expression) whose tags are `tags`
    (NULL for a superseded one: it has no tag edge), once per edge type, by its strongest
    edge: `columns` of `m`, then type, direction ('out': the node is the edge's source) and
    weight. `:types` (text[], NULL: every type) restricts the edges walked; `:current`
    leaves out the superseded memories."""
    return f"""
    SELECT DISTINCT ON (m.id, l.type) {columns}, CAST(l.type AS text) AS type,
           l.direction,
           CASE WHEN l.origin = 'tags' THEN tag_jaccard({tags}, m.tags)
                ELSE l.weight END AS weight
    FROM (
        SELECT target_id AS other, type, 'out' AS direction, origin, weight
        FROM memory_link WHERE source_id = {node}
        UNION ALL
        SELECT source_id, type, 'in', origin, weight
        FROM memory_link WHERE target_id = {node}
    ) l
    JOIN memory_key k ON k.memory_id = l.other
    JOIN memory m ON m.id = k.memory_id AND m.created_at = k.memory_created_at
    WHERE m.namespace_id = :ns AND m.deleted_at IS NULL{READABLE}
      AND (CAST(:types AS text[]) IS NULL OR l.type = ANY(CAST(:types AS text[])))
      AND (NOT CAST(:current AS boolean) OR m.superseded_by IS NULL)
      AND (l.origin <> 'tags'
           OR (m.superseded_by IS NULL AND tag_jaccard({tags}, m.tags) > 0))
    ORDER BY m.id, l.type, weight DESC, l.direction DESC"""


# The edges a walk follows: from the memory asked about, its strongest FIRST_HOP; from each
# memory reached, its strongest NEXT_HOPS (ties: the newer memory). So a depth-3 walk reads
# at most 50 + 50·10 memories' edges, wherever the graph is dense (every memory of a common
# tag is linked to 50 others): following every edge, one took more than the 5 s statement
# timeout at 300 memories.
FIRST_HOP = 50
NEXT_HOPS = 10


def _related() -> str:
    """From one memory, up to :depth edges away along the edges walked (above): each memory
    reached once, by its best path (the highest product of the weights along it, then the
    fewest edges), with the edge type it was last reached by and the memory before it; a
    path never revisits a memory. Ordered by weight (descending), depth, key."""
    step = _neighbours(
        "w.id",
        "w.tags",
        "m.id, m.created_at, CAST(m.key AS text) AS key, "
        "CASE WHEN m.superseded_by IS NULL THEN m.tags END AS tags",
    )
    # The last join only reads the columns shown of memories _neighbours admitted.
    return f"""
    WITH RECURSIVE walk(id, created_at, key, tags, depth, weight, type, direction, via,
                        path) AS (
        SELECT CAST(:start AS bigint), CAST(:start_at AS timestamptz), CAST(:key AS text),
               CAST(:tags AS text[]), 0, CAST(1 AS float8), CAST(NULL AS text),
               CAST(NULL AS text), CAST(NULL AS text), ARRAY[CAST(:start AS bigint)]
        UNION ALL
        SELECT n.id, n.created_at, n.key, n.tags, w.depth + 1, w.weight * n.weight, n.type,
               n.direction, w.key, w.path || n.id
        FROM walk w CROSS JOIN LATERAL (
            SELECT * FROM ({step}) s
            ORDER BY s.weight DESC, s.id DESC
            LIMIT CASE WHEN w.depth = 0 THEN {FIRST_HOP} ELSE {NEXT_HOPS} END
        ) n
        WHERE w.depth < CAST(:depth AS int) AND n.id <> ALL(w.path)
    )
    SELECT b.key, b.depth, b.weight, b.type, b.direction, b.via, m.content,
           m.type AS memory_type, m.tags, m.created_at
    FROM (
        SELECT DISTINCT ON (id) * FROM walk WHERE depth > 0
        ORDER BY id, weight DESC, depth, type, direction DESC
    ) b
    JOIN memory m ON m.id = b.id AND m.created_at = b.created_at
    ORDER BY b.weight DESC, b.depth, b.key
    LIMIT CAST(:limit AS int)"""


_RELATED = _related()

_HIT_COLUMNS = (
    "m.id, m.created_at, m.version, CAST(m.key AS text) AS key, m.content, "
    "m.type AS memory_type, m.importance, m.confidence, m.source, m.tags, m.metadata, "
    "m.token_count, "
    "m.author_robot_id"
)


def _expansion() -> str:
    """One edge from each of recall's hits (:hits, JSON [{ord, id, key, tags}]): each memory
    reached that is not a hit, once, by its strongest edge (then the higher hit, then the
    edge type), in the order weight (descending), hit, key."""
    step = _neighbours("h.id", "h.tags", _HIT_COLUMNS)
    return f"""
    SELECT z.*, r.name AS author FROM (
        SELECT DISTINCT ON (n.id) n.*, h.ord, h.key AS via
        FROM jsonb_to_recordset(CAST(:hits AS jsonb)) AS h(ord int, id bigint, key text,
                                                            tags text[])
        CROSS JOIN LATERAL ({step}) n
        WHERE n.id <> ALL(CAST(:exclude AS bigint[]))
        ORDER BY n.id, n.weight DESC, h.ord, n.type
    ) z
    JOIN robot r ON r.id = z.author_robot_id
    ORDER BY z.weight DESC, z.ord, z.key
    LIMIT CAST(:limit AS int)"""


_EXPANSION = _expansion()

# The memories of a namespace these keys name, not deleted.
_NAMED = f"""
    SELECT m.id, m.created_at, CAST(m.key AS text) AS key,
           CASE WHEN m.superseded_by IS NULL THEN m.tags END AS tags
    FROM memory_key k
    JOIN memory m ON m.id = k.memory_id AND m.created_at = k.memory_created_at
    WHERE k.namespace_id = :ns AND k.key = ANY(CAST(:keys AS text[]))
      AND m.deleted_at IS NULL{READABLE}"""

# An explicit link; a repeat sets its weight (and makes a derived edge of that type
# explicit). `created`: it was not there.
_LINK = sql("""
    INSERT INTO memory_link (namespace_id, source_id, target_id, type, weight, origin)
    VALUES (:ns, :source, :target, :type, :weight, 'explicit')
    ON CONFLICT (source_id, target_id, type)
    DO UPDATE SET weight = EXCLUDED.weight, origin = 'explicit'
    RETURNING type, weight, origin, created_at, xmax = 0 AS created""")

# Explicit `supersedes` links are written one at a time per namespace (a transaction lock):
# two links closing one cycle from either end cannot both miss it.
_SUPERSEDES_LOCK = sql("""
    SELECT pg_advisory_xact_lock(
        hashtextextended('htm-supersedes:' || CAST(CAST(:ns AS bigint) AS text), 0))""")

# Every `supersedes` edge reachable from :start along the edges' direction (what it
# supersedes, what that supersedes, ...), explicit and derived, whoever may read them: each
# edge once, so the walk ends even where earlier data holds a cycle.
_SUPERSEDED_FROM = sql("""
    WITH RECURSIVE reach(source_id, target_id) AS (
        SELECT source_id, target_id FROM memory_link
        WHERE source_id = :start AND type = 'supersedes' AND namespace_id = :ns
        UNION
        SELECT l.source_id, l.target_id FROM reach r
        JOIN memory_link l ON l.source_id = r.target_id
        WHERE l.type = 'supersedes' AND l.namespace_id = :ns
    )
    SELECT source_id, target_id FROM reach""")

# The keys of these memories, and whether `reader` may read each.
_KEYS = """
    SELECT m.id, CAST(m.key AS text) AS key, ({readable}) AS readable
    FROM memory_key k
    JOIN memory m ON m.id = k.memory_id AND m.created_at = k.memory_created_at
    WHERE k.namespace_id = :ns AND k.memory_id = ANY(CAST(:ids AS bigint[]))"""

_UNLINK = sql("""
    DELETE FROM memory_link
    WHERE namespace_id = :ns AND source_id = :source AND target_id = :target
      AND origin = 'explicit'
      AND (CAST(:type AS text) IS NULL OR type = CAST(:type AS text))
    RETURNING type""")


def _readable(statement: str, reader: Reader) -> tuple[Any, dict[str, Any]]:
    """The statement with `reader`'s predicate where READABLE marks it, and its values."""
    predicate, params = reader.where()
    return sql(statement.replace("{readable}", predicate)), params


class LinkRepository:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    async def named(self, namespace_id: int, keys: Sequence[str], reader: Reader) -> dict[str, Any]:
        """key → (id, created_at, key, tags: NULL when superseded) of the live memories
        `reader` may read."""
        statement, bound = _readable(_NAMED, reader)
        rows = await self.session.execute(
            statement, {"ns": namespace_id, "keys": list(keys), **bound}
        )
        return {r.key: r for r in rows}

    async def link(
        self, namespace_id: int, source: int, target: int, *, type_: str, weight: float
    ) -> Any:
        params = {
            "ns": namespace_id,
            "source": source,
            "target": target,
            "type": type_,
            "weight": weight,
        }
        return (await self.session.execute(_LINK, params)).one()

    async def ids(self, namespace_id: int, keys: Sequence[str]) -> dict[str, int]:
        """key → memory id of the namespace's memories of `keys`, deleted ones too."""
        rows = await self.session.execute(
            sql("""
            SELECT CAST(key AS text) AS key, memory_id FROM memory_key
            WHERE namespace_id = :ns AND key = ANY(CAST(:keys AS text[]))"""),
            {"ns": namespace_id, "keys": list(keys)},
        )
        return {r.key: r.memory_id for r in rows}

    async def explicit_weight(self, source: int, target: int, type_: str) -> float | None:
        """The weight of the explicit link of that type between them; None: there is none."""
        return (
            await self.session.execute(
                sql("""
                SELECT weight FROM memory_link
                WHERE source_id = :source AND target_id = :target AND type = :type
                  AND origin = 'explicit'"""),
                {"source": source, "target": target, "type": type_},
            )
        ).scalar()

    async def supersede_path(self, namespace_id: int, source: int, target: int) -> list[int]:
        """The shortest chain of `supersedes` edges from `target` to `source` (their ids,
        both included), or [] when there is none: a link `source` supersedes `target` would
        close it into a cycle. Taken under the namespace's lock for these links, held until
        the transaction ends."""
        params = {"ns": namespace_id, "start": target}
        await self.session.execute(_SUPERSEDES_LOCK, {"ns": namespace_id})
        edges = list(await self.session.execute(_SUPERSEDED_FROM, params))
        after: dict[int, list[int]] = {}
        for e in edges:
            after.setdefault(e.source_id, []).append(e.target_id)
        came_from: dict[int, int] = {target: target}
        todo = [target]
        for node in todo:  # breadth first: the first time `source` is reached is the shortest
            for nxt in sorted(after.get(node, ())):
                if nxt not in came_from:
                    came_from[nxt] = node
                    todo.append(nxt)
        if source not in came_from:
            return []
        path = [source]
        while path[-1] != target:
            path.append(came_from[path[-1]])
        return path[::-1]

    async def keys(
        self, namespace_id: int, ids: Sequence[int], reader: Reader
    ) -> dict[int, tuple[str, bool]]:
        """id → (key, whether `reader` may read it)."""
        statement, bound = _readable(_KEYS, reader)
        rows = await self.session.execute(
            statement, {"ns": namespace_id, "ids": list(ids), **bound}
        )
        return {r.id: (r.key, r.readable) for r in rows}

    async def unlink(
        self, namespace_id: int, source: int, target: int, type_: str | None
    ) -> list[Any]:
        """The types of the explicit links removed."""
        params = {"ns": namespace_id, "source": source, "target": target, "type": type_}
        return [r.type for r in await self.session.execute(_UNLINK, params)]

    async def related(
        self,
        namespace_id: int,
        start: Any,
        depth: int,
        *,
        limit: int,
        types: Sequence[str] | None,
        reader: Reader,
    ) -> list[Any]:
        """The memories `reader` may read, up to `depth` edges from `start`: a walk passes
        only through them."""
        statement, bound = _readable(_RELATED, reader)
        params = {
            **bound,
            "ns": namespace_id,
            "start": start.id,
            "start_at": start.created_at,
            "key": start.key,
            "tags": None if start.tags is None else list(start.tags),
            "depth": depth,
            "limit": limit,
            "types": None if types is None else list(types),
            "current": False,
        }
        return list(await self.session.execute(statement, params))

    async def expansion(
        self,
        namespace_id: int,
        hits: Sequence[tuple[int, str, list[str]]],
        exclude: Sequence[int],
        *,
        limit: int,
        reader: Reader,
        types: Sequence[str] | None = None,
    ) -> list[Any]:
        """The current memories `reader` may read one edge from `hits` ((id, key, tags), best
        first), none of `exclude`, at most `limit`."""
        statement, bound = _readable(_EXPANSION, reader)
        found = [{"ord": i, "id": h[0], "key": h[1], "tags": h[2]} for i, h in enumerate(hits)]
        params = {
            "ns": namespace_id,
            "hits": json.dumps(found),
            "exclude": list(exclude),
            "limit": limit,
            "types": None if types is None else list(types),
            "current": True,
            **bound,
        }
        return list(await self.session.execute(statement, params))
