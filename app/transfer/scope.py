"""A unit of work for the commands, as one REST request runs it: a session that commits on
success and rolls back on error, and the services built by the routers' own factories."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from app.auth.caller import Caller
from app.deps import Components, RequestScope, get_scope
from app.namespaces.repository import NamespaceRepository


async def operator(c: Components, namespace: str) -> Caller:
    """The CLI acts as the namespace's admin: it runs where the database's credentials are."""
    ns_id = await NamespaceRepository.resolve(c.sessionmaker, c.namespace_ids, namespace)
    return Caller(namespace_id=ns_id, namespace=namespace, role="admin")


@asynccontextmanager
async def request(c: Components, caller: Caller) -> AsyncIterator[RequestScope]:
    session = c.sessionmaker()
    try:
        yield await get_scope(session, caller, c)
        await session.commit()
    except BaseException:
        await session.rollback()
        raise
    finally:
        await session.close()
