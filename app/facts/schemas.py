from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.common import KEY_PATTERN, StrictModel, given
from app.conversation import MAX_SESSION_CHARS
from app.memories.schemas import MemoryAdded

MAX_TURNS = 200

_EXAMPLE: dict[str, Any] = {"session": "support-2026-03-02"}


class FactsExtract(StrictModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [_EXAMPLE]})

    keys: list[Annotated[str, Field(pattern=KEY_PATTERN)]] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_TURNS,
        json_schema_extra={"uniqueItems": True},
        description="The turns to read: memories by key, in this order (each one the robot "
        "may read)",
    )
    session: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_SESSION_CHARS,
        description="The turns to read: the memories of this conversation (metadata "
        f"`session`), oldest first, at most the last {MAX_TURNS} the robot may read "
        "(a live session's messages once promoted)",
    )
    supersede: Literal["off", "propose", "apply"] | None = Field(
        default=None,
        description="What the supersession detector's findings do for each fact, as for an "
        "add (default: HTM_SUPERSEDE)",
    )

    schema_rules = (
        {"oneOf": [given("keys", {"type": "array"}), given("session", {"type": "string"})]},
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> FactsExtract:
        if (self.keys is None) == (self.session is None):
            raise ValueError("give exactly one of `keys` and `session`")
        if self.keys is not None and len(set(self.keys)) != len(self.keys):
            raise ValueError("keys repeated")
        return self


class FactsExtracted(BaseModel):
    turns: list[str] = Field(description="The keys of the turns the model was shown, in order")
    model: str = Field(description="The model that read them (provider/model)")
    facts: list[MemoryAdded] = Field(
        description="Each fact or preference as added (type `fact` or `preference`, metadata "
        "`derived_from`: its turns' keys, linked `derived_from` to them); a fact already "
        "known (the same type and text) is not stored again: `duplicate_of` names it"
    )
