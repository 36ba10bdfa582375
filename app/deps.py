"""Annotated dependency aliases. Each hands out something created in the lifespan.

Every dependency in the app is an `async def`: FastAPI runs a plain `def` (or a class) in a
worker thread, and that hand-off cost ~10% of a simple request's CPU in py-spy."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request

from app.db.session import DbSession
from app.resources import Resources


async def get_resources(request: Request) -> Resources:
    return request.app.state.resources  # type: ignore[no-any-return]


ResourcesDep = Annotated[Resources, Depends(get_resources)]


async def get_session(res: ResourcesDep) -> AsyncIterator[DbSession]:
    """One session per request (it checks a connection out on first use): commit on success,
    roll back on any error."""
    session = res.sessionmaker()
    try:
        yield session
        await session.commit()
    except BaseException:
        await session.rollback()
        raise
    finally:
        await session.close()


# scope="function": the commit happens before the response is sent, so a client never gets
# a 2xx for a change that then fails to commit (FastAPI's default runs it afterwards).
SessionDep = Annotated[DbSession, Depends(get_session, scope="function")]
