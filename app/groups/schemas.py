from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from app.common import NAME_PATTERN, StrictModel, integral

MAX_MEMBERS = 1000


class GroupUpdate(StrictModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"members": ["agent-a", "agent-b"], "working_memory_budget": 64000}]
        },
    )

    members: list[Annotated[str, Field(pattern=NAME_PATTERN)]] = Field(
        max_length=MAX_MEMBERS,
        json_schema_extra={"uniqueItems": True},
        description="The robots sharing the group's working memory (registered if new); a "
        "robot left out leaves the group and has its own working memory again. A robot is in "
        "at most one group",
    )
    working_memory_budget: (
        Annotated[int, Field(ge=1, le=10_000_000), BeforeValidator(integral)] | None
    ) = Field(default=None, description="The shared working memory's token budget; null = default")

    @field_validator("members")
    @classmethod
    def _once_each(cls, members: list[str]) -> list[str]:
        repeated = sorted({m for m in members if members.count(m) > 1})
        if repeated:
            raise ValueError(f"members repeated: {', '.join(repeated)}")
        return members


class GroupRead(BaseModel):
    name: str
    members: list[str] = Field(description="By name")
    working_memory_budget: int = Field(description="Effective budget in tokens")
    working_memory_budget_is_default: bool
