"""A request's `timeframe` (a query parameter, a recall field): text in, range out, 422 on
nonsense."""

from __future__ import annotations

from datetime import datetime

from app.errors import Unprocessable
from app.timeframes.parse import TimeframeError, TimeRange, parse_timeframe


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
