"""Background repair of working memories that may be out of line with their mirror.

A working-memory change that could not finish (Redis down or timing out, PostgreSQL failing
after the script, the process dying between a replace's commit and its withdrawals) leaves
its robot marked stale, a membership row marked stale, or, when PostgreSQL could not record
even that, the robot in this process's RepairQueue. Requests rebuild a stale robot they touch;
this worker rebuilds the rest once Redis answers, so a working memory does not keep an
out-of-date copy just because its robot went quiet. Rebuilds run under the robot's row lock
(SKIP LOCKED: a robot busy with a change is repaired by that change or on the next pass), so
any number of service instances can run the worker.
"""

from __future__ import annotations

import logging

from app.db.session import Sessionmaker
from app.errors import ServiceUnavailable
from app.working_memory.model import RedisUnavailable, Scope
from app.working_memory.protocol import TwoTier
from app.working_memory.repository import needing_repair
from app.working_memory.robots import Robot

log = logging.getLogger(__name__)

# A withdrawal normally completes within milliseconds of its commit; marks older than this
# were left by a failure.
STALE_AFTER_S = 2.0
BATCH = 100


class RepairWorker:
    """Rebuilds the working memories that need it (run by app/workers.periodic)."""

    def __init__(self, sessionmaker: Sessionmaker, two_tier: TwoTier) -> None:
        self.sessionmaker = sessionmaker
        self.two_tier = two_tier

    async def run_once(self) -> int:
        """Rebuild the robots that need it; returns how many were rebuilt."""
        if self.two_tier.breaker.open:
            return 0
        repairs = self.two_tier.repairs
        queued = repairs.take()
        async with self.sessionmaker() as session:
            rows = await needing_repair(session, STALE_AFTER_S, BATCH)
            await session.commit()
        todo = {r.id: (r.namespace_id, r.namespace, r.name) for r in rows}
        for robot_id, namespace_id, namespace, name in queued:
            todo.setdefault(robot_id, (namespace_id, namespace, name))
        only_queued = {q[0] for q in queued} - {r.id for r in rows}
        repaired = 0
        for robot_id, (namespace_id, namespace, name) in sorted(todo.items()):
            async with self.sessionmaker() as session:
                protocol = self.two_tier.protocol(session, Scope(namespace_id, namespace))
                try:
                    robot = Robot(robot_id, name, self.two_tier.default_budget)
                    if await protocol.resync(robot, force=True, skip_locked=True):
                        repaired += 1
                        log.info("repaired the working memory of %s/%s", namespace, name)
                    elif robot_id in only_queued:  # busy, and nothing else remembers it
                        repairs.add(namespace_id, namespace, robot_id, name)
                except (RedisUnavailable, ServiceUnavailable):  # try again next pass
                    repairs.add(namespace_id, namespace, robot_id, name)
                    break
                except Exception:
                    log.exception("repairing the working memory of %s/%s failed", namespace, name)
                    repairs.add(namespace_id, namespace, robot_id, name)
        return repaired
