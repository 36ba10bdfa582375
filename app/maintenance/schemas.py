from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.common import StrictModel
from app.maintenance.cron import PATTERN, CronError, parse

Step = Literal["dedupe", "retention", "summaries", "supersede"]
STEPS: tuple[Step, ...] = ("dedupe", "retention", "summaries", "supersede")


class MaintenanceSchedule(StrictModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"schedule": "30 3 * * *", "dedupe": "exact"}]},
    )

    schedule: str | None = Field(
        default=None,
        max_length=200,
        json_schema_extra={"pattern": PATTERN},
        description="When a run starts: a cron expression in UTC (minute hour day month "
        "weekday, e.g. `30 3 * * *`: every day at 03:30); none: only runs asked for "
        "(`POST /v1/maintenance/run`)",
    )
    steps: list[Step] = Field(
        default_factory=lambda: list(STEPS),
        json_schema_extra={"uniqueItems": True},
        description="What a run does, always in this order: dedupe (merge near-duplicates, "
        "`htm dedupe --apply`'s merge), retention (the namespace's policies), summaries "
        "(hierarchical summaries of each robot's previous day and of long sessions), "
        "supersede (the detector's proposals for the day's facts, recorded in the run)",
    )
    dedupe: Literal["exact", "semantic"] = Field(
        default="exact",
        description="The dedupe step's rule: exact content, or also cosine similarity at "
        "least HTM_DEDUPE_THRESHOLD",
    )

    @field_validator("schedule")
    @classmethod
    def _cron(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                cron = parse(v)
            except CronError as exc:
                raise ValueError(str(exc)) from exc
            if cron.never_fires():
                days = ",".join(str(d) for d in sorted(cron.days))
                months = ",".join(str(m) for m in sorted(cron.months))
                raise ValueError(f"never fires: day {days} of month {months} does not exist")
        return v

    @field_validator("steps")
    @classmethod
    def _ordered(cls, v: list[Step]) -> list[Step]:
        if len(set(v)) < len(v):
            raise ValueError("a step is named twice")
        return [s for s in STEPS if s in v]


class MaintenanceRunRead(BaseModel):
    id: int
    trigger: Literal["schedule", "request"]
    status: Literal["running", "done", "failed"] = Field(
        description="running: started and not finished (a run cut off stays so until the "
        "next run finishes it)"
    )
    started_at: datetime
    finished_at: datetime | None
    steps: dict[str, dict[str, Any]] = Field(
        description="Each finished step's outcome, by name, in the order they ran"
    )
    error: str | None = None


class MaintenanceRuns(BaseModel):
    runs: list[MaintenanceRunRead] = Field(description="Newest first")
