from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from app.common import StrictModel, integral


class RobotUpdate(StrictModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"working_memory_budget": 64000, "session_ttl_s": 1800}]},
    )

    working_memory_budget: (
        Annotated[int, Field(ge=1, le=10_000_000), BeforeValidator(integral)] | None
    ) = Field(
        default=None,
        description="Token budget of this robot's working memory; null = the deployment default",
        examples=[64000],
    )
    session_ttl_s: Annotated[int, Field(ge=1, le=31_536_000), BeforeValidator(integral)] | None = (
        Field(
            default=None,
            description="Seconds a session of this robot lives after its last access, for sessions "
            "started from now on; null = the deployment default (HTM_SESSION_TTL_S)",
            examples=[1800],
        )
    )
    summarize_evictions: bool = Field(
        default=False,
        description="When working memory evicts, write a summary memory (type `summary`) of "
        "what it dropped, asynchronously, and place it in working memory if it fits",
    )


class RobotRead(BaseModel):
    name: str
    working_memory_budget: int = Field(description="Effective budget in tokens")
    working_memory_budget_is_default: bool
    session_ttl_s: int | None = Field(description="null: the deployment default")
    summarize_evictions: bool
    created_at: datetime
    last_seen_at: datetime
    group: str | None = Field(
        default=None,
        description="The group whose working memory this robot shares (PUT /v1/groups/{group})",
    )
