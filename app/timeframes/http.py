"""The `timeframe` parameter as the HTTP layer sees it: text in, range out, 422 on nonsense."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import Query

from app.common import Text
from app.errors import Unprocessable
from app.timeframes.parse import TimeframeError, TimeRange, parse_timeframe

TIMEFRAME_DESCRIPTION = (
    "ISO-8601 instant or interval, or a phrase: today, yesterday, last week, this month, "
    "last 3 days, 2 weeks ago, recently, since 2025-01-01, between 2025-01-01 and yesterday"
)

TimeframeQuery = Annotated[
    Text | None, Query(max_length=200, description=TIMEFRAME_DESCRIPTION, examples=["last week"])
]


def resolve_timeframe(text: str | None, now: datetime) -> TimeRange | None:
    if text is None or not text.strip():
        return None
    try:
        return parse_timeframe(text, now)
    except TimeframeError as exc:
        raise Unprocessable(
            exc.message,
            errors=[{"field": "timeframe", "message": exc.message}],
            accepted=exc.accepted,
        ) from exc
