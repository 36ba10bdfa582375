from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from app.common import StrictModel


class RobotUpdate(StrictModel):
    working_memory_budget: int | None = Field(
        default=None,
        ge=1,
        le=10_000_000,
        description="Token budget of this robot's working memory; null = the deployment default",
        examples=[64000],
    )


class RobotRead(BaseModel):
    name: str
    working_memory_budget: int = Field(description="Effective budget in tokens")
    working_memory_budget_is_default: bool
    created_at: datetime
    last_seen_at: datetime
