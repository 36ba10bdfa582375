"""Annotated dependency aliases. Each hands out something created in the lifespan.

Every dependency in the app is an `async def`: FastAPI runs a plain `def` (or a class) in a
worker thread, and that hand-off cost ~10% of a simple request's CPU in py-spy."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any, cast

from fastapi import Depends, Request
from sqlalchemy.ext.asyncio import AsyncSession

from app.resources import Resources


async def get_resources(request: Request) -> Resources:
    return request.app.state.resources  # type: ignore[no-any-return]


ResourcesDep = Annotated[Resources, Depends(get_resources)]


class _SessionOnFirstUse:
    """Stands in for the request's AsyncSession and makes it when a repository first uses it:
    a request served from caches and Redis alone (a context read of a cached robot) then
    costs no session at all (making, committing and closing an unused one: ~0.15 ms)."""

    def __init__(self, res: Resources) -> None:
        self._res = res
        self.opened: AsyncSession | None = None

    def __getattr__(self, name: str) -> Any:
        if self.opened is None:
            self.opened = self._res.sessionmaker()
        return getattr(self.opened, name)


async def get_session(res: ResourcesDep) -> AsyncIterator[AsyncSession]:
    """One session per request, made on first use: commit on success, roll back on any error."""
    lazy = _SessionOnFirstUse(res)
    try:
        yield cast(AsyncSession, lazy)
        if lazy.opened is not None:
            await lazy.opened.commit()
    except BaseException:
        if lazy.opened is not None:
            await lazy.opened.rollback()
        raise
    finally:
        if lazy.opened is not None:
            await lazy.opened.close()


# scope="function": the commit happens before the response is sent, so a client never gets
# a 2xx for a change that then fails to commit (FastAPI's default runs it afterwards).
SessionDep = Annotated[AsyncSession, Depends(get_session, scope="function")]
