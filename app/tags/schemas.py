from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from app.common import TAG_PATTERN, StrictModel, Tag


class TagNode(BaseModel):
    name: str = Field(description="The last segment of the path")
    path: str = Field(description="The full tag, segments joined by `:`")
    count: int = Field(description="Memories tagged with exactly this path")
    total: int = Field(description="Memories tagged with this path or any descendant")
    children: list[TagNode] = Field(description="Child segments, by name")


class TagTree(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "tags": [
                        {
                            "name": "database",
                            "path": "database",
                            "count": 1,
                            "total": 3,
                            "children": [
                                {
                                    "name": "postgresql",
                                    "path": "database:postgresql",
                                    "count": 2,
                                    "total": 2,
                                    "children": [],
                                }
                            ],
                        }
                    ]
                }
            ]
        }
    )

    tags: list[TagNode] = Field(description="The top-level tags, by name")


class TagRename(StrictModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        populate_by_name=True,
        json_schema_extra={"examples": [{"from": "db:postgres", "to": "database:postgresql"}]},
    )

    from_: Tag = Field(
        alias="from", description=f"The tag whose subtree moves (matching {TAG_PATTERN})"
    )
    to: Tag = Field(description="Where it goes; an existing tag there is merged with it")


class TagRenamed(BaseModel):
    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    from_: str = Field(alias="from")
    to: str
    memories: int = Field(description="Memories whose tags changed (soft-deleted ones included)")
    merged: bool = Field(description="`to` was already in use: the two subtrees are now one")
