from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from app.common import StrictModel, integral


class RobotUpdate(StrictModel):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"working_memory_budget": 64000}]}
    )

    working_memory_budget: (
        Annotated[int, Field(ge=1, le=10_000_000), BeforeValidator(integral)] | None
    ) = Field(
        default=None,
        description="Token budget of this robot's working memory; null = the deployment default",
        examples=[64000],
    )


class RobotRead(BaseModel):
    name: str
    working_memory_budget: int = Field(description="Effective budget in tokens")
    working_memory_budget_is_default: bool
    created_at: datetime
    last_seen_at: datetime
