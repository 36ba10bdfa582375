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
    (SELECT p.name FROM pool p WHERE p.id = m.pool_id) AS pool"""
_SUCCESSOR = "(SELECT s.key FROM memory_key s WHERE s.memory_id = m.superseded_by)"
_READABLE_SUCCESSOR = """(
        SELECT s.key FROM memory_key s
        JOIN memory sm ON sm.id = s.memory_id AND sm.created_at = s.memory_created_at
        WHERE s.memory_id = m.superseded_by AND {readable})"""


def read_columns(viewer: Reader | None) -> tuple[str, dict[str, Any]]:
    """A memory's columns (alias `m`, its author `r`) as `viewer` is shown them, and their
    bind values: `superseded_by` names the successor only when the viewer may read it, as
    every field naming another memory does (app/visibility.py). None: the operator, who reads
    every memory. A statement that also filters by a reader gets the same `v_*` values."""
    if viewer is None:
        return _READ.replace("{successor}", _SUCCESSOR), {}
    readable, params = dataclasses.replace(viewer, pools=None).where("sm")
    successor = _READABLE_SUCCESSOR.replace("{readable}", readable)
    return _READ.replace("{successor}", successor), params
