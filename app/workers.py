"""The one shape of the service's background workers: a pass, repeated at an interval until
the lifespan ends, surviving outages (logged as one line) and bugs (logged with a trace)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from app.errors import ServiceUnavailable

log = logging.getLogger(__name__)


async def _repeat(
    name: str, one_pass: Callable[[], Awaitable[Any]], interval_s: float, delay_first: bool
) -> None:
    if delay_first:
        await asyncio.sleep(interval_s)
    while True:
        try:
            await one_pass()
        except asyncio.CancelledError:
            raise
        except ServiceUnavailable as exc:  # the database is down: try again next interval
            log.warning("%s paused: %s", name, exc.detail)
        except Exception:
            log.exception("%s pass failed", name)
        await asyncio.sleep(interval_s)


@contextlib.asynccontextmanager
async def periodic(
    name: str,
    one_pass: Callable[[], Awaitable[Any]],
    interval_s: float,
    *,
    delay_first: bool = False,
) -> AsyncIterator[asyncio.Task[None]]:
    """Run `one_pass` every `interval_s` in a task, cancelled (and awaited) on exit."""
    task = asyncio.create_task(_repeat(name, one_pass, interval_s, delay_first), name=name)
    try:
        yield task
    finally:
        # Cancelled until it ends: a library may turn one cancel into an error the pass
        # catches (a read timeout racing it), and one lost cancel must not hang shutdown.
        while not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=1.0)
        with contextlib.suppress(asyncio.CancelledError):
            await task
