"""Annotated dependency aliases. Each hands out something created in the lifespan.

Every dependency in the app is an `async def`: FastAPI runs a plain `def` (or a class) in a
worker thread, and that hand-off cost ~10% of a simple request's CPU in py-spy."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.ext.asyncio import AsyncSession

from app.resources import Resources


async def get_resources(request: Request) -> Resources:
    return request.app.state.resources  # type: ignore[no-any-return]


ResourcesDep = Annotated[Resources, Depends(get_resources)]


async def get_session(res: ResourcesDep) -> AsyncIterator[AsyncSession]:
    """One session per request: commit on success, roll back on any error."""
    async with res.sessionmaker() as session:
        try:
            yield session
            await session.commit()
        except BaseException:
            await session.rollback()
            raise


# scope="function": the commit happens before the response is sent, so a client never gets
# a 2xx for a change that then fails to commit (FastAPI's default runs it afterwards).
SessionDep = Annotated[AsyncSession, Depends(get_session, scope="function")]
