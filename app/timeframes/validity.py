"""Valid time (migration 0017) as a read asks for it: the current memories by default,
`valid_at` (an instant or a timeframe, resolved like one), or every memory
(`include=superseded`), rendered as predicates on `memory m` for the statement that reads."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from app.errors import Unprocessable
from app.timeframes.parse import TimeframeError, parse_timeframe


@dataclass(frozen=True)
class Validity:
    """Which memories are true: `current()` is the default read, "valid now" (a memory is
    current unless its validity ended, `valid_to <= now`, or was set to start later,
    `valid_from > now`); `during(start, end)` is `valid_at`, the memories true at some instant
    of [start, end) (an instant is its second). Asked for a time, a memory without
    `valid_from` is true from its `created_at` on: what was added later was not yet true."""

    start: datetime | None
    end: datetime | None = None
    current: bool = False

    @classmethod
    def now(cls, now: datetime) -> Validity:
        return cls(now, None, True)

    def where(self) -> tuple[list[str], dict[str, Any]]:
        if self.current:
            return [
                "(m.valid_to IS NULL OR m.valid_to > :f_valid_start)",
                "(m.valid_from IS NULL OR m.valid_from <= :f_valid_start)",
            ], {"f_valid_start": self.start}
        clauses, params = [], {}
        if self.start is not None:
            clauses.append("(m.valid_to IS NULL OR m.valid_to > :f_valid_start)")
            params["f_valid_start"] = self.start
        if self.end is not None:
            clauses.append("coalesce(m.valid_from, m.created_at) < :f_valid_end")
            params["f_valid_end"] = self.end
        return clauses, params


# What a read's `include` may name.
Include = Literal["superseded"]
VALID_AT_DESCRIPTION = (
    "Read what was true then: an ISO-8601 instant or interval, or a timeframe phrase ('last "
    "January', 'since 2025-01-01'); a memory counts when its validity overlaps it. Default: "
    "the current memories (valid now)"
)
INCLUDE_DESCRIPTION = (
    "superseded: also the memories no longer (or not yet) valid: superseded or ended, "
    "whatever their validity"
)


def validity_for(valid_at: str | None, include: Sequence[str], now: datetime) -> Validity | None:
    """A read's validity filter: `valid_at` resolved like a timeframe, `include=superseded`
    (None: every memory), or the default, current at `now`."""
    if valid_at is not None and valid_at.strip():
        if "superseded" in include:
            raise Unprocessable(
                "give `valid_at` or `include: superseded`, not both",
                errors=[{"field": "valid_at", "message": "conflicts with include=superseded"}],
            )
        try:
            tr = parse_timeframe(valid_at, now)
        except TimeframeError as exc:
            raise Unprocessable(
                exc.message,
                errors=[{"field": "valid_at", "message": exc.message}],
                accepted=exc.accepted,
            ) from exc
        return Validity(tr.start, tr.end)
    if "superseded" in include:
        return None
    return Validity.now(now)
