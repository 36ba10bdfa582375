"""Path and query parameters shared by the routes: the names they take and the constraints
the OpenAPI spec shows (the services check the same rules themselves: app/names.py)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

from app.common import KEY_PATTERN, NAME_PATTERN, Phrase

RobotName = Annotated[
    str,
    Path(pattern=NAME_PATTERN, description="Robot name, chosen by the client", examples=["alice"]),
]
MemoryKeyPath = Annotated[
    str, Path(pattern=KEY_PATTERN, description="Memory key, unique in the namespace")
]
SessionName = Annotated[
    str,
    Path(
        pattern=NAME_PATTERN,
        description="Session id, chosen by the client (unique among the robot's live sessions)",
        examples=["chat-42"],
    ),
]
TIMEFRAME_DESCRIPTION = (
    "ISO-8601 instant or interval, or a phrase: today, yesterday, last week, this month, "
    "last 3 days, 2 weeks ago, recently, since 2025-01-01, between 2025-01-01 and yesterday"
)
TimeframeQuery = Annotated[
    Phrase | None, Query(description=TIMEFRAME_DESCRIPTION, examples=["last week"])
]
