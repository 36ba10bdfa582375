"""The retention worker (app/workers.periodic, every HTM_RETENTION_INTERVAL_S): each
namespace with policies gets a run, as its admin, through a unit of work (app/unit.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from app.auth.caller import Caller
from app.db.session import Sessionmaker
from app.retention.repository import RetentionRepository
from app.retention.service import RetentionService

log = logging.getLogger(__name__)


class RetentionUnit(Protocol):
    @property
    def retention(self) -> RetentionService: ...


RetentionUnits = Callable[[Caller], AbstractAsyncContextManager[RetentionUnit]]


class RetentionWorker:
    def __init__(self, *, sessionmaker: Sessionmaker, units: RetentionUnits) -> None:
        self.sessionmaker = sessionmaker
        self.units = units

    async def run_once(self) -> int:
        """One run per namespace with policies; returns the memories archived."""
        async with self.sessionmaker() as session:
            namespaces = await RetentionRepository(session).namespaces()
        archived = 0
        for ns in namespaces:
            async with self.units(Caller(ns.id, ns.name, "admin")) as unit:
                run = await unit.retention.run(dry_run=False)
            if run.archived:
                log.info("retention archived %d memories of namespace %s", run.archived, ns.name)
            archived += run.archived
        return archived
