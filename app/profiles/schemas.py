from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from app.common import NO_NUL, StrictModel

# A slot's name is part of its memories' keys (`profile:<subject>:<slot>@<n>`, 128 at most).
SLOT_PATTERN = r"^[a-z][a-z0-9_]{0,39}$"
MAX_SLOTS = 50

SlotName = Annotated[str, StringConstraints(pattern=SLOT_PATTERN)]
SlotValue = Annotated[str, StringConstraints(min_length=1, max_length=1000), NO_NUL]


class ProfilePatch(StrictModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"slots": {"city": "Lisbon", "employer": None}}]},
    )

    slots: dict[SlotName, SlotValue | None] = Field(
        min_length=1,
        max_length=MAX_SLOTS,
        json_schema_extra={"propertyNames": {"pattern": SLOT_PATTERN}},
        description=f"Slot name ({SLOT_PATTERN}) → its new value; null removes the slot",
    )


class ProfileSlot(BaseModel):
    value: str
    key: str = Field(description="The memory that holds it")
    since: datetime = Field(description="Its valid_from (its created_at unless set)")


class ProfileRead(BaseModel):
    subject: str
    slots: dict[str, ProfileSlot] = Field(description="By slot name, in name order")
    tokens: int = Field(
        description="Σ tokens of the slots' `slot: value` lines, as a prompt's profile section "
        "counts each (without its header)"
    )
