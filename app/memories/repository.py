"""All SQL for memories: keys, rows, soft/hard delete, listing, and pending embeddings."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from types import SimpleNamespace
from typing import Any

from app.config import VectorStorage
from app.db.session import DbSession
from app.db.sql import sql, vector_text
from app.memories.model import AddGroup, GroupStored, ListFilters, NewMemory, VectorChange
from app.memories.read_repository import read_columns
from app.memories.version_repository import AS_OF
from app.visibility import Reader

# One round trip stores the memories of one or more adds (group commit: app/memories/adds.py).
# Each add is a group: its keys are claimed (numbering each memory), and only when every key
# of the group was claimed are its `add` events logged and its rows inserted; a group with a
# key taken (by an earlier row of the same statement too) stores nothing and is answered 409,
# and the keys it did claim are released by `release`. Per-row values travel as parallel
# arrays; tags and metadata as JSON text (tags vary in length, and PostgreSQL arrays are
# rectangular), embeddings as pgvector text (NULL: pending), cast to the column's type
# (app/db/vectors.py). Ids are drawn in the input CTE, which a volatile nextval()
# materializes once, so each claim maps back to its input row.
_ARRAYS = """CAST(:groups AS int[]), CAST(:nss AS bigint[]), CAST(:robots AS bigint[]),
                    CAST(:ats AS timestamptz[]), CAST(:keys AS text[]),
                    CAST(:cs AS timestamptz[]), CAST(:contents AS text[]),
                    CAST(:types AS text[]), CAST(:importances AS float8[]),
                    CAST(:tags AS text[]), CAST(:metadata AS text[]), CAST(:tokens AS int[]),
                    CAST(:embeddings AS text[]), CAST(:models AS text[]),
                    CAST(:search_texts AS text[]), CAST(:valid_froms AS timestamptz[]),
                    CAST(:valid_tos AS timestamptz[]), CAST(:visibilities AS text[]),
                    CAST(:readers AS text[]), CAST(:group_ids AS bigint[]),
                    CAST(:pool_ids AS bigint[]), CAST(:confidences AS float8[]),
                    CAST(:sources AS text[]), CAST(:entities AS text[]),
                    CAST(:entity_kinds AS text[])"""
_COLUMNS = """g, ns, robot, at, k, c, content, type, importance, tags,
                                  metadata, tokens, embedding, model, search_text, valid_from,
                                  valid_to, visibility, readers, group_id, pool_id,
                                  confidence, source, entities, entity_kinds"""
# What a stored group writes beside its key, each from `{rows}` (its rows, as `i`) where
# `{complete}`: the `add` events, the speakers named, the memories.
_EVENTS = """
        INSERT INTO memory_event (namespace_id, robot_id, memory_id, kind, at)
        SELECT i.ns, i.robot, i.id, 'add', coalesce(i.at, now())
        FROM {rows} WHERE {complete}"""
_SPEAKERS = """
        INSERT INTO speaker (namespace_id, name)
        SELECT DISTINCT i.ns, CAST(i.metadata AS jsonb) ->> 'speaker' FROM {rows}
        WHERE {complete} AND {speaker}
        ORDER BY 1, 2
        ON CONFLICT DO NOTHING"""
_MEMORIES = """
        INSERT INTO memory (id, created_at, updated_at, namespace_id, key, content, type,
                            importance, tags, metadata, author_robot_id, token_count,
                            embedding, embedding_model, embedding_status, enrichment_status,
                            search_text, valid_from, valid_to, visibility, readers, group_id,
                            pool_id, confidence, source, entities, entity_kinds)
        SELECT i.id, i.created, now(), i.ns, i.k, i.content, i.type,
               i.importance, ARRAY(SELECT jsonb_array_elements_text(CAST(i.tags AS jsonb))),
               CAST(i.metadata AS jsonb), i.robot, i.tokens, CAST(i.embedding AS {storage}),
               i.model, CASE WHEN i.embedding IS NULL THEN 'pending' ELSE 'ready' END,
               CASE WHEN CAST(:enrich AS boolean) AND i.type NOT IN ('proposition', 'summary')
                    THEN 'pending' END,
               i.search_text, i.valid_from, i.valid_to, i.visibility,
               ARRAY(SELECT jsonb_array_elements_text(CAST(i.readers AS jsonb))), i.group_id,
               i.pool_id, i.confidence, i.source,
               ARRAY(SELECT jsonb_array_elements_text(CAST(i.entities AS jsonb))),
               ARRAY(SELECT jsonb_array_elements_text(CAST(i.entity_kinds AS jsonb)))
        FROM {rows} WHERE {complete}
        ORDER BY i.ord"""
_ADD_TEMPLATE = f"""
    WITH input AS (
        SELECT t.*, nextval('memory_id_seq') AS id, coalesce(t.c, now()) AS created
        FROM unnest({_ARRAYS})
             WITH ORDINALITY AS t({_COLUMNS}, ord)
    ), claimed AS (
        INSERT INTO memory_key (namespace_id, key, memory_id, memory_created_at)
        SELECT ns, k, id, created FROM input ORDER BY ord
        ON CONFLICT (namespace_id, key) DO NOTHING
        RETURNING memory_id
    ), complete AS (
        SELECT i.g FROM input i LEFT JOIN claimed c ON c.memory_id = i.id
        GROUP BY i.g HAVING count(c.memory_id) = count(*)
    ), events AS ({_EVENTS}
    ), speakers AS ({_SPEAKERS}
    ), stored AS ({_MEMORIES}
    )
    SELECT i.g, i.k AS key, i.id AS memory_id, i.created AS memory_created_at,
           c.memory_id IS NOT NULL AS claimed, now() AS now
    FROM input i LEFT JOIN claimed c ON c.memory_id = i.id
    ORDER BY i.ord""".replace("{rows}", "input i").replace(
    "{complete}", "i.g IN (SELECT g FROM complete)"
)
# A speaker's name as app/memories/search_text.speaker_of takes it: a string of 1-100
# characters.
SPEAKER_NAMED = """(jsonb_typeof({md} -> 'speaker') = 'string'
        AND length({md} ->> 'speaker') BETWEEN 1 AND 100)"""


def _filled(template: str, storage: VectorStorage) -> str:
    return template.replace("{storage}", storage).replace(
        "{speaker}", SPEAKER_NAMED.format(md="CAST(i.metadata AS jsonb)")
    )


_ADD: dict[VectorStorage, Any] = {
    storage: sql(_filled(_ADD_TEMPLATE, storage)) for storage in ("vector", "halfvec")
}

# The same on Citus (migration 0031), where that one statement needs every worker: Citus runs
# each of its CTEs as a subplan and sends `input` and `complete`, which several of them read,
# to every worker, so one worker down failed the adds of every namespace (tests/citus). There
# the add is statements that each read only their parameters, so that each goes only to the
# shards of the namespaces it writes: ids drawn, keys claimed, then for the groups whose every
# key was claimed the events, the speakers and the memories (MemoryRepository.add_apart).
_IDS = sql("""
    SELECT nextval('memory_id_seq') AS id, now() AS now FROM generate_series(1, :n)""")
_CLAIM = sql("""
    INSERT INTO memory_key (namespace_id, key, memory_id, memory_created_at)
    SELECT ns, k, id, created
    FROM unnest(CAST(:nss AS bigint[]), CAST(:keys AS text[]), CAST(:ids AS bigint[]),
                CAST(:createds AS timestamptz[])) AS t(ns, k, id, created)
    ON CONFLICT (namespace_id, key) DO NOTHING
    RETURNING memory_id""")
_APART_ROWS = f"""unnest({_ARRAYS}, CAST(:ids AS bigint[]),
                  CAST(:createds AS timestamptz[]))
             WITH ORDINALITY AS i({_COLUMNS}, id, created, ord)"""
_APART: dict[VectorStorage, list[Any]] = {
    storage: [
        sql(_filled(part, storage).replace("{rows}", _APART_ROWS).replace("{complete}", "true"))
        for part in (_EVENTS, _SPEAKERS, _MEMORIES)
    ]
    for storage in ("vector", "halfvec")
}

# Keys a group claimed before another of its keys turned out taken.
# The namespaces named: on Citus the delete goes to their shards only.
_RELEASE = sql("""
    DELETE FROM memory_key
    WHERE namespace_id = ANY(CAST(:nss AS bigint[])) AND memory_id = ANY(CAST(:ids AS bigint[]))""")


# The embedding columns of a replaced row; `old` or `memory` supplies the stored vector.
_NEW_VECTOR = """
    CASE WHEN :keep THEN embedding ELSE CAST(CAST(:embedding AS text) AS {storage}) END,
    CASE WHEN :keep THEN embedding_model ELSE CAST(:model AS text) END,
    CASE WHEN :keep THEN embedding_status
         WHEN CAST(:embedding AS text) IS NOT NULL THEN 'ready' ELSE 'pending' END"""
_REPLACED = "updated_at, embedding_status, embedding_model"
_AUDIENCE_VALUES = """CAST(:visibility AS text), CAST(:readers AS text[]),
                           CAST(:group_id AS bigint), CAST(:pool_id AS bigint)"""


# A PUT's replace of a locked row (MemoryRepository.replace), given {new_vector}
# (_NEW_VECTOR), {audience} (_AUDIENCE_VALUES) and {replaced} (_REPLACED). A changed
# created_at moves the row: one statement deletes it and inserts it again with the same id.
_MOVE = """
    WITH old AS (
        DELETE FROM memory WHERE id = :id AND created_at = :c RETURNING *
    ), key AS (
        UPDATE memory_key SET memory_created_at = :new_c WHERE memory_id = :id
    )
    INSERT INTO memory (id, created_at, updated_at, namespace_id, key, content,
                        type, importance, tags, metadata, author_robot_id,
                        token_count, embedding, embedding_model,
                        embedding_status, version, changed_by_robot_id,
                        changed_at, search_text, valid_from, valid_to,
                        superseded_by, visibility, readers, group_id, pool_id,
                        confidence, source, entities, entity_kinds)
    SELECT id, :new_c, now(), namespace_id, key, :content, :type, :importance,
           :tags, CAST(:metadata AS jsonb), author_robot_id, :tokens,
           {new_vector}, :version, :by, now(), CAST(:search_text AS text),
           CAST(:valid_from AS timestamptz), CAST(:valid_to AS timestamptz),
           CASE WHEN CAST(:valid_to AS timestamptz) IS NOT NULL
                THEN superseded_by END,
           {audience}, CAST(:confidence AS float8), CAST(:source AS text),
           CAST(:entities AS text[]), CAST(:entity_kinds AS text[])
    FROM old
    RETURNING {replaced}"""
_UPDATE = """
    UPDATE memory SET
        content = :content, type = :type, importance = :importance, tags = :tags,
        confidence = CAST(:confidence AS float8), source = CAST(:source AS text),
        metadata = CAST(:metadata AS jsonb), token_count = :tokens,
        search_text = CAST(:search_text AS text), deleted_at = NULL,
        valid_from = CAST(:valid_from AS timestamptz),
        valid_to = CAST(:valid_to AS timestamptz),
        superseded_by = CASE WHEN CAST(:valid_to AS timestamptz) IS NOT NULL
                             THEN superseded_by END,
        (visibility, readers, group_id, pool_id) = ({audience}),
        entities = CAST(:entities AS text[]), entity_kinds = CAST(:entity_kinds AS text[]),
        updated_at = now(), version = :version,
        changed_by_robot_id = :by, changed_at = now(),
        (embedding, embedding_model, embedding_status) = ({new_vector}),
        embedding_attempts = CASE WHEN :keep THEN embedding_attempts ELSE 0 END,
        embedding_next_at = CASE WHEN :keep THEN embedding_next_at END,
        embedding_error = CASE WHEN :keep THEN embedding_error END
    WHERE id = :id AND created_at = :c
    RETURNING {replaced}"""


def _replace_params(
    row: Any, m: NewMemory, *, version: int, vector: VectorChange, by: int
) -> dict[str, Any]:
    entities = m.entities()
    return {
        "entities": [e.key for e in entities],
        "entity_kinds": [e.kind for e in entities],
        "id": row.id,
        "c": row.created_at,
        "new_c": m.created_at,
        "content": m.content,
        "type": m.type,
        "importance": m.importance,
        "tags": m.tags,
        "metadata": json.dumps(m.metadata),
        "tokens": m.token_count,
        "version": version,
        "by": by,
        "keep": vector.keep,
        "embedding": None if vector.embedding is None else vector_text(vector.embedding),
        "model": vector.model,
        "search_text": m.search_text,
        "valid_from": m.valid_from,
        "valid_to": m.valid_to,
        "visibility": m.audience.visibility,
        "readers": list(m.audience.readers),
        "group_id": m.audience.group_id,
        "pool_id": m.audience.pool_id,
        "confidence": m.confidence,
        "source": m.source,
    }


def _add_params(rows: list[tuple[int, AddGroup, Any]]) -> dict[str, Any]:
    """`add`'s per-row values as the parallel arrays its statements unnest."""
    entities = [d.entities() for _, _, d in rows]
    return {
        "groups": [gi for gi, _, _ in rows],
        "nss": [g.namespace_id for _, g, _ in rows],
        "robots": [g.robot_id for _, g, _ in rows],
        "ats": [g.event_at for _, g, _ in rows],
        "keys": [d.key for _, _, d in rows],
        "cs": [d.created_at for _, _, d in rows],
        "contents": [d.content for _, _, d in rows],
        "types": [d.type for _, _, d in rows],
        "importances": [float(d.importance) for _, _, d in rows],
        "tags": [json.dumps(d.tags) for _, _, d in rows],
        "metadata": [json.dumps(d.metadata) for _, _, d in rows],
        "tokens": [d.token_count for _, _, d in rows],
        "embeddings": [
            None if d.embedding is None else vector_text(d.embedding) for _, _, d in rows
        ],
        "models": [d.embedding_model for _, _, d in rows],
        "search_texts": [d.search_text for _, _, d in rows],
        "valid_froms": [d.valid_from for _, _, d in rows],
        "valid_tos": [d.valid_to for _, _, d in rows],
        "visibilities": [d.audience.visibility for _, _, d in rows],
        "readers": [json.dumps(d.audience.readers) for _, _, d in rows],
        "group_ids": [d.audience.group_id for _, _, d in rows],
        "pool_ids": [d.audience.pool_id for _, _, d in rows],
        "confidences": [d.confidence for _, _, d in rows],
        "sources": [d.source for _, _, d in rows],
        "entities": [json.dumps([e.key for e in es]) for es in entities],
        "entity_kinds": [json.dumps([e.kind for e in es]) for es in entities],
    }


class MemoryRepository:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    async def add(
        self,
        groups: Sequence[AddGroup],
        storage: VectorStorage,
        enrich: bool = False,
        *,
        apart: bool = False,
    ) -> list[GroupStored]:
        """Store each group's drafts (one add each) in one statement; a group with a key
        already taken stores nothing. In the order of `groups`. `storage`: the embedding
        column's type (app/db/vectors.py); `enrich`: queue them for app/enrichment; `apart`:
        in statements that each write only their namespaces' shards (Citus: _IDS, _APART)."""
        rows = [(gi, g, d) for gi, g in enumerate(groups) for d in g.drafts]
        params = _add_params(rows) | {"enrich": enrich}
        out = [GroupStored({}, [], None) for _ in groups]
        if apart:
            found = await self._add_apart(rows, params, storage)
        else:
            found = (await self.session.execute(_ADD[storage], params)).all()
        for r in found:
            stored = out[r.g]
            stored.now = r.now
            if r.claimed:
                stored.claimed[r.key] = (r.memory_id, r.memory_created_at)
            else:
                stored.taken.append(r.key)
        orphans = [
            (g.namespace_id, mid)
            for g, s in zip(groups, out, strict=True)
            if s.taken
            for mid, _ in s.claimed.values()
        ]
        if orphans:
            await self.session.execute(
                _RELEASE, {"nss": [n for n, _ in orphans], "ids": [m for _, m in orphans]}
            )
        for s in out:
            if s.taken:
                s.claimed.clear()
        return out

    async def _add_apart(
        self, rows: list[tuple[int, AddGroup, Any]], params: dict[str, Any], storage: VectorStorage
    ) -> list[Any]:
        """`add`'s statement as several (Citus): the rows `add` reads, in input order."""
        drawn = (await self.session.execute(_IDS, {"n": len(rows)})).all()
        now = drawn[0].now if drawn else None
        ids = [r.id for r in drawn]
        createds = [d.created_at or now for _, _, d in rows]
        claimed = {
            r.memory_id
            for r in await self.session.execute(
                _CLAIM,
                {"nss": params["nss"], "keys": params["keys"], "ids": ids, "createds": createds},
            )
        }
        whole = {gi for gi, _, _ in rows} - {
            gi for (gi, _, _), i in zip(rows, ids, strict=True) if i not in claimed
        }
        keep = [j for j, (gi, _, _) in enumerate(rows) if gi in whole]
        if keep:
            part = {
                k: [v[j] for j in keep] if isinstance(v, list) else v for k, v in params.items()
            }
            part |= {"ids": [ids[j] for j in keep], "createds": [createds[j] for j in keep]}
            for statement in _APART[storage]:
                await self.session.execute(statement, part)
        return [
            SimpleNamespace(
                g=gi, key=d.key, memory_id=i, memory_created_at=c, claimed=i in claimed, now=now
            )
            for (gi, _, d), i, c in zip(rows, ids, createds, strict=True)
        ]

    async def ids_of(self, namespace_id: int, keys: Sequence[str]) -> dict[str, int]:
        """Each key's memory id (MCP's short aliases of made-up keys, app/mcp/aliases.py)."""
        rows = await self.session.execute(
            sql("""
            SELECT k.key, k.memory_id FROM memory_key k
            WHERE k.namespace_id = :ns AND k.key = ANY(CAST(:keys AS text[]))"""),
            {"ns": namespace_id, "keys": list(keys)},
        )
        return {r.key: r.memory_id for r in rows.all()}

    async def keys_of(
        self, namespace_id: int, ids: Sequence[int], reader: Reader
    ) -> dict[int, str]:
        """The keys of the memories of these ids that `reader` may read (forgotten ones too)."""
        readable, params = reader.where()
        rows = await self.session.execute(
            sql(f"""
            SELECT k.memory_id, k.key
            FROM memory_key k
            JOIN memory m ON m.namespace_id = :ns AND m.id = k.memory_id
                             AND m.created_at = k.memory_created_at
            JOIN robot r ON r.id = m.author_robot_id
            WHERE k.namespace_id = :ns AND k.memory_id = ANY(CAST(:ids AS bigint[]))
              AND {readable}"""),
            {"ns": namespace_id, "ids": list(ids), **params},
        )
        return {r.memory_id: r.key for r in rows.all()}

    async def get(
        self,
        namespace_id: int,
        key: str,
        *,
        for_update: bool = False,
        reader: Reader | None = None,
        viewer: Reader | None = None,
    ) -> Any | None:
        """The memory of `key`; None when there is none or `reader` may not read it (None:
        the operator, who reads every memory). Shown to `viewer` (default: the reader): a
        lock taken as the operator for a robot's change is answered to that robot."""
        assert reader is None or viewer is None  # one robot's `v_*` values per statement
        lock = "FOR UPDATE OF m" if for_update else ""
        readable, params = reader.where() if reader is not None else ("true", {})
        columns, shown = read_columns(namespace_id, viewer or reader)
        return (
            await self.session.execute(
                sql(f"""
                SELECT {columns}
                FROM memory_key k
                JOIN memory m ON m.namespace_id = :ns AND m.id = k.memory_id
                                 AND m.created_at = k.memory_created_at
                JOIN robot r ON r.id = m.author_robot_id
                WHERE k.namespace_id = :ns AND k.key = :key AND {readable}
                {lock}"""),
                {"ns": namespace_id, "key": key, **params, **shown},
            )
        ).one_or_none()

    async def replace(
        self,
        row: Any,
        m: NewMemory,
        version: int,
        *,
        vector: VectorChange,
        storage: VectorStorage,
        by: int,
    ) -> Any:
        """Replace the fields of an existing, locked memory (a PUT of its key) and revive it
        if it was soft-deleted; robot `by` wrote the new version. Returns (updated_at,
        embedding_status, embedding_model).

        A changed created_at moves the row (the time column is part of the primary key and,
        on TimescaleDB, decides the chunk): one statement deletes it and inserts it again with
        the same id, carrying the vector over when the content did not change."""
        params = _replace_params(row, m, version=version, vector=vector, by=by)
        statement = (_MOVE if m.created_at != row.created_at else _UPDATE).format(
            new_vector=_NEW_VECTOR.format(storage=storage),
            audience=_AUDIENCE_VALUES,
            replaced=_REPLACED,
        )
        return (await self.session.execute(sql(statement), params)).one()

    async def set_deleted(
        self,
        namespace_id: int,
        id_: int,
        created_at: datetime,
        deleted: bool,
        archived: str | None = None,
    ) -> Any:
        """Soft delete (by a retention policy: `archived` names its rule) or restore;
        returns (deleted_at, updated_at). The statement names the namespace, and now() stays
        out of a CASE (Citus: one task on the namespace's shard, and no volatile function in a
        CASE of a distributed UPDATE)."""
        deleted_at = "now()" if deleted else "NULL"
        return (
            await self.session.execute(
                sql(f"""
                UPDATE memory SET deleted_at = {deleted_at},
                                  archived = CAST(:archived AS text), updated_at = now()
                WHERE namespace_id = :ns AND id = :id AND created_at = :c
                RETURNING deleted_at, updated_at"""),
                {"ns": namespace_id, "id": id_, "c": created_at, "archived": archived},
            )
        ).one()

    async def nearest_live(
        self, namespace_id: int, id_: int, created_at: datetime, reader: Reader, k: int,
        min_similarity: float,
    ) -> list[int]:  # fmt: skip
        """The ids of the (at most) k live, embedded memories `reader` may read nearest to
        memory id_'s vector, at a cosine similarity of at least `min_similarity`, nearest
        first; none when it has no vector. An exact search over the namespace (its btree
        filter, then the distances: 0.7 ms over 400 memories, linear in the namespace's
        size): a forget's cost, not a recall's."""
        readable, params = reader.where()
        rows = await self.session.execute(
            sql(f"""
            WITH f AS MATERIALIZED (SELECT embedding FROM memory
                                    WHERE id = :id AND created_at = :c AND embedding IS NOT NULL)
            SELECT n.id FROM (
                SELECT m.id, m.embedding <=> f.embedding AS distance
                FROM memory m, f
                WHERE m.namespace_id = :ns AND m.deleted_at IS NULL AND m.id <> :id
                  AND m.embedding_status = 'ready' AND m.embedding IS NOT NULL AND {readable}
                ORDER BY (m.embedding <=> f.embedding) + 0, m.id
                LIMIT :k) n
            WHERE 1 - n.distance >= :min_similarity
            ORDER BY n.distance, n.id"""),
            {
                "ns": namespace_id,
                "id": id_,
                "c": created_at,
                "k": k,
                "min_similarity": min_similarity,
                **params,
            },
        )
        return [r.id for r in rows.all()]

    async def hard_delete(self, namespace_id: int, id_: int, created_at: datetime) -> None:
        """The memory, its key, and the mirror rows of robots not holding it. Rows of robots
        holding it stay (marked stale) until their working memory has let it go. Each
        statement names the namespace (on Citus: one task on its shard)."""
        for statement in (
            "DELETE FROM working_memory_item WHERE namespace_id = :ns AND memory_id = :id "
            "AND NOT in_working_memory",
            "DELETE FROM memory_key WHERE namespace_id = :ns AND memory_id = :id",
            "DELETE FROM memory WHERE namespace_id = :ns AND id = :id AND created_at = :c",
        ):
            await self.session.execute(
                sql(statement), {"ns": namespace_id, "id": id_, "c": created_at}
            )

    async def list(
        self, namespace_id: int, f: ListFilters, limit: int, after: tuple[datetime, int] | None
    ) -> list[Any]:
        """Newest first; keyset pagination on (created_at, id). With `f.as_of` (transaction
        time), each memory as its version current then, filtered on that version's fields
        (its validity too): "what did we believe on March 1 about what was true in January"
        is one statement."""
        where, params = _list_where(namespace_id, f)
        params["limit"] = limit
        columns, shown = read_columns(namespace_id, f.reader)
        params.update(shown)
        if after is not None:
            where.append("(m.created_at, m.id) < (:after_c, :after_id)")
            params["after_c"], params["after_id"] = after
        source = "memory m JOIN robot r ON r.id = m.author_robot_id"
        if f.as_of is not None:
            source = AS_OF
            params["as_of"] = f.as_of
        return list(
            (
                await self.session.execute(
                    sql(f"""
                    SELECT {columns}
                    FROM {source}
                    WHERE {" AND ".join(where)}
                    ORDER BY m.created_at DESC, m.id DESC
                    LIMIT :limit"""),
                    params,
                )
            ).all()
        )


def _list_where(namespace_id: int, f: ListFilters) -> tuple[list[str], dict[str, Any]]:
    """A list's filters as WHERE clauses (ANDed) and their parameters."""
    where = ["m.namespace_id = :ns"]
    params: dict[str, Any] = {"ns": namespace_id}
    if not f.include_deleted:
        where.append("m.deleted_at IS NULL" if f.as_of is None else _DELETED_AFTER_AS_OF)
    if f.author_robot_id is not None:
        where.append("m.author_robot_id = :author")
        params["author"] = f.author_robot_id
    if f.type is not None:
        where.append("m.type = :type")
        params["type"] = f.type
    if f.tags_any:
        where.append("tag_paths(m.tags) && CAST(:tags AS text[])")  # and descendants
        params["tags"] = f.tags_any
    if f.min_importance is not None:
        where.append("m.importance >= :imp")
        params["imp"] = f.min_importance
    if f.min_confidence is not None:
        where.append("m.confidence >= :min_confidence")
        params["min_confidence"] = f.min_confidence
    if f.sources:
        where.append("m.source = ANY(CAST(:sources AS text[]))")
        params["sources"] = list(f.sources)
    if f.start is not None:
        where.append("m.created_at >= :start")
        params["start"] = f.start
    if f.end is not None:
        where.append("m.created_at < :end")
        params["end"] = f.end
    if f.valid is not None:
        clauses, bound = f.valid.where()
        where.extend(clauses)
        params.update(bound)
    if f.reader is not None:
        readable, bound = f.reader.where()
        where.append(readable)
        params.update(bound)
    if f.entity_names is not None:
        where.append("m.entities && CAST(:entity_names AS text[])")  # memory_entities (GIN)
        params["entity_names"] = list(f.entity_names)
    if f.pool is not None:
        where.append("m.pool_id = (SELECT id FROM pool WHERE namespace_id = :ns AND name = :p)")
        params["p"] = f.pool
    return where, params


# Forgotten after :as_of: it was still there then (a restore clears deleted_at).
_DELETED_AFTER_AS_OF = "(m.deleted_at IS NULL OR m.deleted_at > :as_of)"
