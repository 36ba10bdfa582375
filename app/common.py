"""Small shared vocabulary: name patterns, input types every request schema shares, the paged
response, cursors.

The input types keep out what PostgreSQL or pgvector cannot store and would otherwise turn
into a 500 after the request was accepted: NUL characters (text and jsonb reject U+0000),
vector elements outside float32, instants Python cannot move to UTC, JSON nested without bound.
"""

from __future__ import annotations

import base64
import json
import math
import re
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Generic, TypeVar

import numpy as np
import pydantic_core
from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    StringConstraints,
    WithJsonSchema,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from app.errors import BadRequest

# No "/" in keys: a key is a single path segment of /v1/robots/{robot}/memories/{key}.
NAME_PATTERN = r"^[A-Za-z0-9._-]{1,64}$"
KEY_PATTERN = r"^[A-Za-z0-9._:@-]{1,128}$"
# Hierarchical: `a:b:c`, at most 8 non-empty segments, 64 characters in all (MAX_TAG_LENGTH).
TAG_SEGMENT = r"[A-Za-z0-9._/-]+"
MAX_TAG_DEPTH = 8
MAX_TAG_LENGTH = 64
TAG_PATTERN = rf"^{TAG_SEGMENT}(:{TAG_SEGMENT}){{0,{MAX_TAG_DEPTH - 1}}}$"
TYPE_PATTERN = r"^[a-z][a-z0-9_-]{0,31}$"
NO_NUL_PATTERN = r"^[^\x00]*$"
# A memory's `source` ("user", "tool:web", "inference", "import", "htm load"): 1-100
# characters, a letter or digit first (migration 0027 copies metadata values matching it).
SOURCE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9 ._:/@+-]{0,99}$"

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
# A vector's elements lie within ±1e17 and one at least is 1e-18 or more in magnitude: then
# pgvector's float32 sum of squares is never 0 and never overflows, up to 16,000 dimensions
# (16,000 x (1e17)² = 1.6e38 < float32's 3.4e38; (1e-18)² = 1e-36 > its smallest, 1.2e-38).
# Both are JSON Schema bounds (items' minimum/maximum, `contains`), so the spec says it all.
VECTOR_ELEMENT_MAX = 1e17
VECTOR_ELEMENT_MIN = 1e-18
MAX_JSON_DEPTH = 64
TOO_DEEP = f"is nested deeper than {MAX_JSON_DEPTH} levels"
MIN_INSTANT = datetime(1900, 1, 1)
MAX_INSTANT = datetime(9999, 1, 1)
INSTANT_RANGE = (
    f"{MIN_INSTANT:%Y-%m-%dT%H:%M:%S} (inclusive) to {MAX_INSTANT:%Y-%m-%dT%H:%M:%S} "
    "(exclusive), as written in its own offset"
)
# The same range as a JSON Schema pattern on the written year: 1900 to 9998.
INSTANT_PATTERN = r"^(19[0-9]{2}|[2-8][0-9]{3}|9[0-8][0-9]{2}|99[0-8][0-9]|999[0-8])-"


# --- text --------------------------------------------------------------------------------


def _reject_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL (U+0000): PostgreSQL cannot store it")
    return value


class _NoNul:
    """Rejects U+0000, and says so in the JSON schema (a pattern) so generated clients and
    schemathesis know it. A plain `in` check: cheaper than a regex over 256 KB of content."""

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(_reject_nul, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        json_schema.setdefault("pattern", NO_NUL_PATTERN)
        return json_schema


NO_NUL = _NoNul()
Text = Annotated[str, NO_NUL]
"""Free text: anything but NUL. Text with bounds puts them before the check,
`Annotated[str, StringConstraints(max_length=200), NO_NUL]`: a Field's bounds on an optional
`Text` are checked after it, as a sequence's ("at most 200 items")."""
PHRASE_LENGTH = 200
Phrase = Annotated[str, StringConstraints(max_length=PHRASE_LENGTH), NO_NUL]
"""A timeframe or an instant as a client writes it: at most 200 characters."""

Tag = Annotated[str, StringConstraints(max_length=MAX_TAG_LENGTH, pattern=TAG_PATTERN)]
MemoryType = Annotated[str, StringConstraints(pattern=TYPE_PATTERN)]
Source = Annotated[str, StringConstraints(max_length=100, pattern=SOURCE_PATTERN)]


# --- numbers -----------------------------------------------------------------------------


def integral(value: Any) -> Any:
    # JSON has one number type, and JSON Schema's "integer" is any number without a fraction:
    # 5.0 is the integer 5. Anything else (true, "5", 5.5) is left to strict int to reject.
    if type(value) is float and value.is_integer():
        return int(value)
    return value


Integer = Annotated[int, BeforeValidator(integral)]
"""A request body's integer: 5 or 5.0, never true or "5". Bounds of an optional one go before
the validator, `Annotated[int, Field(ge=1), BeforeValidator(integral)] | None`: after it, they
reach the spec as raw "ge"/"le" keys instead of minimum/maximum."""


# --- JSON objects ------------------------------------------------------------------------

_WHERE = re.compile(r" at line (\d+) column (\d+)$")


# What pydantic-core's parser (jiter) says when nesting passes its own limit (about 200).
_TOO_DEEP = "recursion limit exceeded"


class JsonTooDeep(json.JSONDecodeError):
    """Well-formed JSON nested past the parser's limit, far deeper than MAX_JSON_DEPTH: what
    the schemas would refuse with a 422 had it been parsed, so it is one (app/http/problems.py)."""


def parse_json(raw: bytes) -> Any:
    """A request body's (or an import line's) JSON, with integers of any size kept exactly
    for the schemas to judge (pydantic-core's parser; app/http/routing.py says why not orjson).
    Malformed JSON raises json.JSONDecodeError, which FastAPI turns into its `json_invalid`
    error (400 problem+json, app/errors.py); nesting past the parser's limit JsonTooDeep."""
    try:
        return pydantic_core.from_json(raw, allow_inf_nan=False)
    except ValueError as exc:
        doc = raw.decode(errors="replace")
        message, pos = str(exc), 0
        if where := _WHERE.search(message):
            line, column = int(where[1]), int(where[2])
            pos = sum(len(x) for x in doc.splitlines(keepends=True)[: line - 1]) + column - 1
            message = message[: where.start()]
        if message == _TOO_DEEP:
            raise JsonTooDeep(TOO_DEEP, doc, pos) from None
        raise json.JSONDecodeError(message, doc, pos) from None


def _check_json(value: Any) -> Any:
    """Depth (containers count, the object itself is 1), NUL, and numbers: integers within
    int64 and finite floats, what every way a memory travels keeps as it was (the JSON
    parsers, jsonb, orjson's answers, other languages' clients). An integer past int64 was
    stored as a float before (changed data); NaN and Infinity are not JSON at all. Walked
    without recursion, so a hostile nesting cannot exhaust the stack before any limit is
    checked; each item keeps its parent's entry, and a path is spelled only for an error."""
    stack: list[tuple[Any, int, Any, Any]] = [(value, 1, None, None)]
    while stack:
        entry = stack.pop()
        item, depth = entry[0], entry[1]
        if isinstance(item, dict | list):
            if depth > MAX_JSON_DEPTH:
                raise ValueError(TOO_DEEP)
            if isinstance(item, dict):
                if any(isinstance(key, str) and "\x00" in key for key in item):
                    raise ValueError("has a key with NUL (U+0000): PostgreSQL cannot store it")
                stack.extend((child, depth + 1, key, entry) for key, child in item.items())
            else:
                stack.extend((child, depth + 1, i, entry) for i, child in enumerate(item))
        elif isinstance(item, str):
            if "\x00" in item:
                raise ValueError("has a string with NUL (U+0000): PostgreSQL cannot store it")
        elif type(item) is int and not INT64_MIN <= item <= INT64_MAX:
            raise ValueError(
                f"has an integer outside the signed 64-bit range at {_path(entry)}: it would "
                "not come back as sent; send it as a string"
            )
        elif type(item) is float and not math.isfinite(item):
            raise ValueError(f"has {item} at {_path(entry)}: only finite numbers are JSON")
    return value


def _path(entry: tuple[Any, int, Any, Any]) -> str:
    """Where an item is in the object: `a.b[2]`."""
    parts: list[str] = []
    while entry[3] is not None:
        key = entry[2]
        parts.append(f"[{key}]" if isinstance(key, int) else f".{key}")
        entry = entry[3]
    return "".join(reversed(parts)).lstrip(".") or "the top"


JsonObject = Annotated[dict[str, Any], BeforeValidator(_check_json)]
"""Any JSON object without NUL, nested at most MAX_JSON_DEPTH deep (checked before anything
else looks at it; the deployment's max_metadata_depth, checked later, is usually lower), its
integers within int64 and its numbers finite."""


# --- vectors -----------------------------------------------------------------------------


def _check_vector(vector: list[float]) -> list[float]:
    # pgvector sums the squares in float32 for cosine distance: a vector whose squared length
    # is 0 has no direction, and every distance is NaN (VECTOR_ELEMENT_MIN says when it is not).
    if float(np.max(np.abs(np.asarray(vector)))) < VECTOR_ELEMENT_MIN:
        raise ValueError(
            f"has no element of magnitude {VECTOR_ELEMENT_MIN:g} or more: it has no direction"
        )
    return vector


# An element, checked by pydantic-core itself (a Python validator per element cost 16 ms of
# CPU per 500 vectors of 384: bench/README.md, "Figures behind the code"). NaN fails both
# bounds; the bounds are also the JSON schema's minimum and maximum.
VectorElement = Annotated[float, Field(ge=-VECTOR_ELEMENT_MAX, le=VECTOR_ELEMENT_MAX)]
Vector = Annotated[
    list[VectorElement],
    Field(
        min_length=1,
        json_schema_extra={
            "contains": {
                "anyOf": [{"minimum": VECTOR_ELEMENT_MIN}, {"maximum": -VECTOR_ELEMENT_MIN}]
            }
        },
    ),
    AfterValidator(_check_vector),
]
"""A client-supplied embedding: float32 elements within ±1e17, one at least 1e-18 or more in
magnitude: a length cosine can use."""


# --- instants ----------------------------------------------------------------------------


def _parse_instant(value: Any) -> Any:
    # The request models are strict (no "5" for 5), and strict pydantic only takes datetime
    # objects: ISO-8601 strings are parsed here, numbers (unix times) are not instants.
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str):
        raise ValueError("must be an ISO-8601 date-time string")
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise ValueError("is not an ISO-8601 date-time") from None


def in_instant_range(value: datetime) -> bool:
    """The range is the instant as written (its own offset's wall clock), as INSTANT_PATTERN
    says it. Year 1 at +05:00 or 9999-12-31 at -05:00 cannot be moved to UTC by Python; from
    1900 to 9998 in any offset can, and a day away from either end stays within Python's."""
    return MIN_INSTANT <= value.replace(tzinfo=None) < MAX_INSTANT


def _check_instant(value: datetime) -> datetime:
    if not in_instant_range(value):
        raise ValueError(f"must be from {INSTANT_RANGE}")
    return value


Instant = Annotated[
    AwareDatetime,
    BeforeValidator(_parse_instant),
    AfterValidator(_check_instant),
    WithJsonSchema({"type": "string", "format": "date-time", "pattern": INSTANT_PATTERN}),
]
"""An ISO-8601 date-time with an offset, written with a year from 1900 to 9998."""


class StrictModel(BaseModel):
    """Request models reject unknown fields (a typo must not be silently ignored) and loose
    types: no true for 1, no "5" for 5, no 5 for "5". An int is still a float (importance 5).

    `schema_rules`: the rules between fields that JSON Schema can state (`if`/`then`), written
    into the model's schema as `allOf`, so the spec refuses what the model's validators do."""

    model_config = ConfigDict(extra="forbid", strict=True)
    schema_rules: ClassVar[tuple[dict[str, Any], ...]] = ()

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        if cls.schema_rules:
            handler.resolve_ref_schema(json_schema)["allOf"] = list(cls.schema_rules)
        return json_schema


def given(field: str, schema: dict[str, Any]) -> dict[str, Any]:
    """JSON Schema: `field` is present and matches `schema`."""
    return {"required": [field], "properties": {field: schema}}


def unset(field: str) -> dict[str, Any]:
    """JSON Schema: `field` is absent or null."""
    return {"properties": {field: {"type": "null"}}}


T = TypeVar("T")


class Page(BaseModel, Generic[T]):
    items: list[T]
    next_cursor: str | None = Field(
        description="Pass as `cursor` to get the next page; null on the last page"
    )


def encode_cursor(created_at: datetime, id_: int) -> str:
    raw = json.dumps([created_at.isoformat(), id_]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, int]:
    """What encode_cursor made, or 400: a forged cursor must not reach the database with an
    id past bigint, a naive time or one that cannot be moved to UTC."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        ts, id_ = json.loads(raw)
        at = datetime.fromisoformat(ts)
        if at.tzinfo is None or at.utcoffset() is None:
            raise ValueError("naive time")
        at = at.astimezone(UTC)  # OverflowError at the ends of year 1 and 9999
        if type(id_) is not int or not 1 <= id_ <= INT64_MAX:
            raise ValueError("id out of range")
    except Exception as exc:
        raise BadRequest("cursor is not one this service issued", field="cursor") from exc
    return at, id_
