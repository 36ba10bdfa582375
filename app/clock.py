"""The service's clock: one per app, shared by everything that stamps or compares instants
(events, working-memory times, timeframes, stats' days). Tests freeze it with `set`."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime


def utc_now() -> datetime:
    return datetime.now(UTC)


class Clock:
    def __init__(self, source: Callable[[], datetime] = utc_now) -> None:
        self.source = source

    def __call__(self) -> datetime:
        return self.source()

    def set(self, source: Callable[[], datetime]) -> None:
        self.source = source
