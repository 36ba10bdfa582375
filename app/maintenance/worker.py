"""The maintenance worker (app/workers.periodic, every CHECK_S): each namespace whose cron
schedule named a minute since its last run (or since the schedule was set), or whose last
run was cut off, gets a run, as its admin, through a unit of work (app/unit.py). A run never
holds a request up: it works in its own transactions, one step at a time."""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from app.auth.caller import Caller
from app.clock import Clock
from app.db.session import Sessionmaker
from app.maintenance.cron import CronError, parse
from app.maintenance.repository import MaintenanceRepository
from app.maintenance.service import MaintenanceService

log = logging.getLogger(__name__)

CHECK_S = 60.0


class MaintenanceUnit(Protocol):
    @property
    def maintenance(self) -> MaintenanceService: ...


MaintenanceUnits = Callable[[Caller], AbstractAsyncContextManager[MaintenanceUnit]]


class MaintenanceWorker:
    def __init__(self, *, sessionmaker: Sessionmaker, units: MaintenanceUnits, clock: Clock):
        self.sessionmaker = sessionmaker
        self.units = units
        self.clock = clock
        self.runs = 0  # counted for /metrics: runs finished, and those that failed
        self.failed = 0

    async def run_once(self) -> int:
        """The runs due now; returns how many ran."""
        now = self.clock()
        async with self.sessionmaker() as session:
            scheduled = await MaintenanceRepository(session).scheduled()
        ran = 0
        for ns in scheduled:
            try:
                due = ns.running or parse(ns.cron).due(ns.since, now)
            except CronError:  # set before a rule changed: skipped, said once a pass
                log.warning("namespace %s: maintenance schedule %r is not valid", ns.name, ns.cron)
                continue
            if not due:
                continue
            async with self.units(Caller(ns.id, ns.name, "admin")) as unit:
                run = await unit.maintenance.run(trigger="schedule")
            ran += 1
            self.runs += 1
            if run.status == "failed":
                self.failed += 1
                log.warning("maintenance of namespace %s failed: %s", ns.name, run.error)
        return ran
