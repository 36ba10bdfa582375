"""Small shared vocabulary: name patterns, the paged response, cursors."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Annotated, Generic, TypeVar

from fastapi import Path
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from app.errors import BadRequest

NAME_PATTERN = r"^[A-Za-z0-9._-]{1,64}$"
KEY_PATTERN = r"^[A-Za-z0-9._:/@-]{1,128}$"
TAG_PATTERN = r"^[A-Za-z0-9._:/-]{1,64}$"

INT64_MAX = 2**63 - 1

Tag = Annotated[str, StringConstraints(pattern=TAG_PATTERN)]

RobotName = Annotated[
    str,
    Path(pattern=NAME_PATTERN, description="Robot name, chosen by the client", examples=["alice"]),
]
MemoryKeyPath = Annotated[
    str, Path(pattern=KEY_PATTERN, description="Memory key, unique in the namespace")
]


class StrictModel(BaseModel):
    """Request models reject unknown fields: a typo must not be silently ignored."""

    model_config = ConfigDict(extra="forbid")


T = TypeVar("T")


class Page(BaseModel, Generic[T]):
    items: list[T]
    next_cursor: str | None = Field(
        description="Pass as `cursor` to get the next page; null on the last page"
    )


def encode_cursor(created_at: datetime, id_: int) -> str:
    raw = json.dumps([created_at.isoformat(), id_]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, int]:
    """What encode_cursor made, or 400: a forged cursor must not reach the database with an
    id past bigint, a naive time or one that cannot be moved to UTC."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        ts, id_ = json.loads(raw)
        at = datetime.fromisoformat(ts)
        if at.tzinfo is None or at.utcoffset() is None:
            raise ValueError("naive time")
        at = at.astimezone(UTC)  # OverflowError at the ends of year 1 and 9999
        if type(id_) is not int or not 1 <= id_ <= INT64_MAX:
            raise ValueError("id out of range")
    except Exception as exc:
        raise BadRequest("cursor is not one this service issued", field="cursor") from exc
    return at, id_
