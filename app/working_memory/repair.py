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

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from app.errors import ServiceUnavailable
from app.resources import Resources
from app.robots.cache import Robot
from app.working_memory.protocol import RedisUnavailable
from app.working_memory.repository import MembershipRepository

log = logging.getLogger(__name__)

# A withdrawal normally completes within milliseconds of its commit; marks older than this
# were left by a failure.
STALE_AFTER_S = 2.0
BATCH = 100


async def repair_once(res: Resources) -> int:
    """Rebuild the robots that need it; returns how many were rebuilt."""
    if res.redis_breaker.open:
        return 0
    queued = res.wm_repairs.take()
    async with res.sessionmaker() as session:
        rows = await MembershipRepository(session).needing_repair(STALE_AFTER_S, BATCH)
        await session.commit()
    todo = {r.id: (r.namespace_id, r.namespace, r.name) for r in rows}
    for robot_id, namespace_id, namespace, name in queued:
        todo.setdefault(robot_id, (namespace_id, namespace, name))
    only_queued = {q[0] for q in queued} - {r.id for r in rows}
    repaired = 0
    for robot_id, (namespace_id, namespace, name) in sorted(todo.items()):
        async with res.sessionmaker() as session:
            protocol = res.write_protocol(session, namespace_id, namespace)
            try:
                robot = Robot(robot_id, name, res.settings.working_memory_budget)
                if await protocol.resync(robot, force=True, skip_locked=True):
                    repaired += 1
                    log.info("repaired the working memory of %s/%s", namespace, name)
                elif robot_id in only_queued:  # busy, and nothing else remembers it
                    res.wm_repairs.add(namespace_id, namespace, robot_id, name)
            except (RedisUnavailable, ServiceUnavailable):  # try again next pass
                res.wm_repairs.add(namespace_id, namespace, robot_id, name)
                break
            except Exception:
                log.exception("repairing the working memory of %s/%s failed", namespace, name)
                res.wm_repairs.add(namespace_id, namespace, robot_id, name)
    return repaired


async def run_repair_worker(res: Resources, interval_s: float) -> None:
    while True:
        await asyncio.sleep(interval_s)
        try:
            await repair_once(res)
        except asyncio.CancelledError:
            raise
        except ServiceUnavailable as exc:  # the database is down: try again next interval
            log.warning("working-memory repair paused: %s", exc.detail)
        except Exception:
            log.exception("working-memory repair pass failed")


@contextlib.asynccontextmanager
async def repair_worker(res: Resources, interval_s: float = 1.0) -> AsyncIterator[asyncio.Task]:
    task = asyncio.create_task(run_repair_worker(res, interval_s), name="working-memory-repair")
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
