"""Requests and answers of relationships: a link between two memories, and the memories
related to one."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.common import KEY_PATTERN, StrictModel

LinkType = Literal["related_to", "supports", "contradicts", "derived_from", "supersedes"]
Origin = Literal["tags", "explicit", "supersede", "derived"]
Direction = Literal["out", "in"]
Key = Annotated[str, Field(pattern=KEY_PATTERN)]


class LinkCreate(StrictModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [{"target": "db-version", "type": "supports", "weight": 0.8}]
        },
    )

    target: Key = Field(description="The key of the memory the link points to")
    type: LinkType = Field(
        default="related_to", description="What the memory is to the target: it supports it, ..."
    )
    weight: float = Field(default=1.0, gt=0, le=1, description="How strong, in (0, 1]")


class LinkRead(BaseModel):
    source: str
    target: str
    type: LinkType
    weight: float
    origin: Origin
    created_at: datetime
    created: bool = Field(description="false: the link was there; its weight is now this one")


class Unlinked(BaseModel):
    source: str
    target: str
    types: list[LinkType] = Field(description="The explicit links removed")


class RelatedMemory(BaseModel):
    key: str
    content: str
    type: str = Field(description="The memory's type")
    tags: list[str]
    created_at: datetime
    depth: int = Field(description="Edges from the memory asked about, on the best path")
    weight: float = Field(description="The path's weight: the product of its edges' weights")
    edge: LinkType = Field(description="The type of the edge it was reached by")
    direction: Direction = Field(
        description="out: that edge goes from `via` to this memory; in: from this one to `via`"
    )
    via: str = Field(description="The memory it was reached from")


class Related(BaseModel):
    key: str
    depth: int
    memories: list[RelatedMemory]
