"""What every read of a memory selects (alias `m`, its author `r`): its columns, with its
successor named only to a viewer who may read it."""

from __future__ import annotations

import dataclasses
from typing import Any

from app.db.sql import ACCESS_COUNT, FEEDBACK, LAST_ACCESSED_AT
from app.visibility import Reader

# Selected with the author's name so a memory is read in one round trip.
_READ = f"""
    m.id, m.key, m.content, m.type, m.importance, m.confidence, m.source, m.tags, m.metadata,
    r.name AS author, m.author_robot_id, m.token_count, m.embedding_status, m.embedding_model,
    m.created_at, m.updated_at, m.deleted_at, m.version,
    {ACCESS_COUNT} AS access_count, {LAST_ACCESSED_AT} AS last_accessed_at,
    {FEEDBACK} AS feedback,
    m.search_text, m.archived, coalesce(m.valid_from, m.created_at) AS valid_from, m.valid_to,
    {{successor}} AS superseded_by,
    m.visibility, m.readers, m.group_id, m.pool_id,
    (SELECT p.name FROM pool p WHERE p.namespace_id = :read_ns AND p.id = m.pool_id) AS pool"""
_SUCCESSOR = """(SELECT s.key FROM memory_key s
        WHERE s.namespace_id = :read_ns AND s.memory_id = m.superseded_by)"""
_READABLE_SUCCESSOR = """(
        SELECT s.key FROM memory_key s
        JOIN memory sm ON sm.namespace_id = :read_ns AND sm.id = s.memory_id
                       AND sm.created_at = s.memory_created_at
        WHERE s.namespace_id = :read_ns AND s.memory_id = m.superseded_by AND {readable})"""


def read_columns(namespace_id: int, viewer: Reader | None) -> tuple[str, dict[str, Any]]:
    """The columns of a memory of namespace `namespace_id` (alias `m`, its author `r`) as
    `viewer` is shown them, and their bind values: `superseded_by` names the successor only
    when the viewer may read it, as every field naming another memory does
    (app/visibility.py). None: the operator, who reads every memory. A statement that also
    filters by a reader gets the same `v_*` values.

    The subqueries name the namespace as a value (`:read_ns`), not by correlation with `m`:
    on Citus (migration 0031) that is what keeps the whole read one task on the namespace's
    shard (Citus prunes shards by values, not by a correlation); on plain PostgreSQL it is
    one more condition on a row found by its key."""
    if viewer is None:
        return _READ.replace("{successor}", _SUCCESSOR), {"read_ns": namespace_id}
    readable, params = dataclasses.replace(viewer, pools=None).where("sm")
    successor = _READABLE_SUCCESSOR.replace("{readable}", readable)
    return _READ.replace("{successor}", successor), {**params, "read_ns": namespace_id}
