from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from app.common import NO_NUL, NO_NUL_PATTERN, StrictModel
from app.entities.extract import KINDS, MAX_ENTITY_CHARS, Kind, normalise

MAX_ALIASES = 1000
EntityName = Annotated[str, StringConstraints(min_length=1, max_length=MAX_ENTITY_CHARS), NO_NUL]
# A map's key: the same rule, the NUL rule as a pattern (pydantic writes a key's pattern as
# patternProperties; `propertyNames` below states it for the keys themselves).
AliasName = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_ENTITY_CHARS, pattern=NO_NUL_PATTERN)
]
# An entity as a request names it, before normalisation (a possessive, spaces).
EntityAsked = Annotated[str, StringConstraints(min_length=1, max_length=200), NO_NUL]
ENTITY_DESCRIPTION = (
    "An entity: a person, a name or a code the memories name, in any case, a possessive "
    "allowed (`Ana`, `ana`, `Ana's` are one); an alias stands for its entity"
)


class EntityRead(BaseModel):
    entity: str = Field(description="Its key: case folded, possessive taken off, aliases applied")
    kinds: list[Kind] = Field(
        description=f"How the memories name it ({', '.join(KINDS)}: the speaker, a "
        "capitalised name in the text, a code such as a ticket number)"
    )
    memories: int = Field(description="The memories naming it that the robot may read")
    latest_at: datetime = Field(description="When the newest of them was added")


class EntityAliases(StrictModel):
    """A namespace's aliases: each alias (a nickname, another spelling) stands for its entity
    in every read: lists, counts, filters and recall."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={"examples": [{"aliases": {"Annie": "Ana", "Bobby": "Bob"}}]},
    )

    aliases: dict[AliasName, EntityName] = Field(
        max_length=MAX_ALIASES,
        json_schema_extra={
            "propertyNames": {
                "minLength": 1,
                "maxLength": MAX_ENTITY_CHARS,
                "pattern": NO_NUL_PATTERN,
            }
        },
        description="alias → entity, normalised as entities are; an entity is no alias "
        f"itself (no chains); at most {MAX_ALIASES}",
    )

    @model_validator(mode="after")
    def _normalised(self) -> EntityAliases:
        out: dict[str, str] = {}
        for alias, entity in self.aliases.items():
            a, e = normalise(alias), normalise(entity)
            if not a or not e:
                raise ValueError(f"{alias!r} → {entity!r}: nothing left once normalised")
            if a == e:
                raise ValueError(f"{alias!r} → {entity!r}: an alias of itself")
            if out.get(a, e) != e:
                raise ValueError(f"{alias!r} is given two entities, {out[a]!r} and {e!r}")
            out[a] = e
        chained = sorted(set(out) & set(out.values()))
        if chained:
            raise ValueError(f"{chained[0]!r} is both an alias and an entity (no chains)")
        self.aliases = dict(sorted(out.items()))
        return self
