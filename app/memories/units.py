"""What a worker that writes memories outside a request is given: a way to open a unit of
work (app/unit.py, the one place services are built) for the namespace it works in. Declared
here, below the unit of work, so that the workers name what they use of it and no more."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from app.auth.caller import Caller
from app.db.session import DbSession
from app.memories.service import MemoryService


class MemoryUnit(Protocol):
    session: DbSession

    @property
    def memories(self) -> MemoryService: ...


MemoryUnits = Callable[[Caller], AbstractAsyncContextManager[MemoryUnit]]
