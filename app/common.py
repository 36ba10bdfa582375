"""Small shared vocabulary: name patterns, the paged response, cursors."""

from __future__ import annotations

import base64
import json
from datetime import datetime
from typing import Annotated, Generic, TypeVar

from fastapi import Path
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from app.errors import BadRequest

NAME_PATTERN = r"^[A-Za-z0-9._-]{1,64}$"
KEY_PATTERN = r"^[A-Za-z0-9._:/@-]{1,128}$"
TAG_PATTERN = r"^[A-Za-z0-9._:/-]{1,64}$"

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
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        ts, id_ = json.loads(raw)
        return datetime.fromisoformat(ts), int(id_)
    except Exception as exc:
        raise BadRequest("cursor is not one this service issued", field="cursor") from exc
