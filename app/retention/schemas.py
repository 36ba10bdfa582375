from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.common import Integer, MemoryType, StrictModel, unset

Rule = Literal["idle", "stale", "superseded"]
DEFAULT_STALENESS = 0.9
MAX_POLICIES = 20


class RetentionPolicy(StrictModel):
    type: MemoryType | None = Field(
        default=None, description="The memory type it applies to; none: every type"
    )
    rule: Rule = Field(
        description="idle: no access (retrieve, recall hit) for `days` since the last one, or "
        "since it was added; stale: staleness at least `threshold` (docs/api.md, retention); "
        "superseded: superseded, or its validity ended, `days` ago"
    )
    days: Integer = Field(ge=1, le=36_500)
    threshold: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description=f"stale only: the staleness that archives (default {DEFAULT_STALENESS})",
    )

    schema_rules = (
        {"if": {"properties": {"rule": {"const": "stale"}}}, "else": unset("threshold")},
    )

    @model_validator(mode="after")
    def _threshold_for_stale(self) -> RetentionPolicy:
        if self.rule != "stale" and self.threshold is not None:
            raise ValueError("`threshold` is for the stale rule only")
        if self.rule == "stale" and self.threshold is None:
            self.threshold = DEFAULT_STALENESS
        return self


class RetentionPolicies(StrictModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "policies": [
                        {"rule": "superseded", "days": 30},
                        {"type": "note", "rule": "idle", "days": 180},
                        {"rule": "stale", "days": 90, "threshold": 0.9},
                    ]
                }
            ]
        },
    )

    policies: list[RetentionPolicy] = Field(max_length=MAX_POLICIES)

    @model_validator(mode="after")
    def _distinct(self) -> RetentionPolicies:
        seen = [(p.type, p.rule) for p in self.policies]
        if len(set(seen)) < len(seen):
            raise ValueError("one policy per rule and type")
        return self


class RetentionRunRequest(StrictModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"dry_run": True}]})

    dry_run: bool = Field(default=False, description="List what would be archived, archive none")


class PolicyOutcome(BaseModel):
    policy: RetentionPolicy
    keys: list[str] = Field(
        description="What the policy archived (a dry run: would archive), at most "
        "`limit` a run; the next run takes the rest"
    )


class RetentionRun(BaseModel):
    dry_run: bool
    archived: int = Field(description="Memories archived by this run (0 for a dry run)")
    policies: list[PolicyOutcome]
    pools_expired: list[str] = Field(
        default_factory=list,
        description="Task pools this run archived, past their expiry (their memories are "
        "kept, read by nobody)",
    )
