"""The deployment's limits on what a memory may hold (Settings), checked before anything is
written; the schemas check shapes and ranges that do not depend on the deployment."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from app.config import Settings, VectorStorage
from app.db.vectors import check_storable
from app.errors import Conflict, PayloadTooLarge, Unprocessable
from app.memories.schemas import MemoryCreate, MemoryFields


def json_depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((json_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((json_depth(v) for v in value), default=0)
    return 0


def check_batch_size(s: Settings, n: int, items: str = "memories") -> None:
    """413 for a request of more than HTM_MAX_BATCH_SIZE `items` (the body's field: memories,
    or a session's messages, promoted as memories in batches)."""
    if n > s.max_batch_size:
        raise PayloadTooLarge(
            f"a request holds at most {s.max_batch_size} {items}; got {n}",
            field=items,
            limit=s.max_batch_size,
        )


def check_fields(s: Settings, body: MemoryFields, index: int | None = None) -> None:
    """413 for content over the size limit; 422 naming every other limit the body breaks.
    `index` places the fields in a batch (memories[i].content)."""
    where = "" if index is None else f"memories[{index}]."
    size = len(body.content.encode())
    if size > s.max_content_bytes:
        raise PayloadTooLarge(
            f"{where}content is {size} bytes; the limit is {s.max_content_bytes}",
            field=f"{where}content",
            limit=s.max_content_bytes,
        )
    errors: list[dict[str, str]] = []
    if len(body.tags) > s.max_tags:
        errors.append({"field": f"{where}tags", "message": f"at most {s.max_tags} tags"})
    if len(json.dumps(body.metadata)) > s.max_metadata_bytes:
        errors.append(
            {"field": f"{where}metadata", "message": f"over {s.max_metadata_bytes} bytes"}
        )
    if json_depth(body.metadata) > s.max_metadata_depth:
        errors.append(
            {"field": f"{where}metadata", "message": f"nested deeper than {s.max_metadata_depth}"}
        )
    if body.embedding is not None and len(body.embedding) != s.embedding_dimension:
        errors.append(
            {
                "field": f"{where}embedding",
                "message": f"has {len(body.embedding)} dimensions; this deployment uses "
                f"{s.embedding_dimension}",
            }
        )
    if errors:
        raise Unprocessable(
            "; ".join(f"{e['field']}: {e['message']}" for e in errors), errors=errors
        )


def check_validity(body: MemoryFields, created: datetime, index: int | None = None) -> None:
    """422 when `valid_to` is not after the memory's start: its `valid_from`, else its
    `created_at` (the schema checks these when given; `created`: the one it will have)."""
    start = body.valid_from or body.created_at or created
    if body.valid_to is not None and body.valid_to <= start:
        where = "" if index is None else f"memories[{index}]."
        message = f"must be after the memory's start, {start.isoformat()}"
        raise Unprocessable(
            f"{where}valid_to: {message}",
            errors=[{"field": f"{where}valid_to", "message": message}],
        )


def check_adds(
    s: Settings,
    bodies: Sequence[MemoryCreate],
    now: datetime,
    storage: VectorStorage | None,
    *,
    batch: bool,
) -> None:
    """An add's checks, in order: the batch's size, each body's fields and validity (an
    error names `memories[i]`'s field, or with `batch` false the body's own), the client
    vectors against `storage` (None: there are none) and keys repeated within the batch."""
    check_batch_size(s, len(bodies))
    for i, body in enumerate(bodies):
        check_fields(s, body, i if batch else None)
        check_validity(body, now, i if batch else None)
    if storage is not None:
        check_storable([b.embedding for b in bodies], storage)
    keys = Counter(b.key for b in bodies if b.key)
    dupes = sorted(k for k, n in keys.items() if n > 1)
    if dupes:
        raise Conflict(f"keys repeated within the batch: {', '.join(dupes)}", keys=dupes)
