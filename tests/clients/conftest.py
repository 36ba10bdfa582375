from __future__ import annotations

import asyncio
import uuid

import pytest


@pytest.fixture(scope="module")
def client_server(live_server_factory, database_url, redis_url) -> tuple[str, str]:
    """A live server with auth on, and a writer key in a fresh namespace."""
    from app.auth.schemas import ApiKeyCreate
    from app.auth.service import ApiKeyService
    from app.cache import TtlCache
    from app.db.engine import create_engine
    from app.db.session import create_sessionmaker
    from app.namespaces.repository import NamespaceRepository
    from tests.conftest import make_settings

    async def key() -> str:
        engine = create_engine(make_settings(database_url, redis_url))
        sm = create_sessionmaker(engine)
        ns = f"client-{uuid.uuid4().hex[:8]}"
        ns_id = await NamespaceRepository.resolve(sm, TtlCache(0, 1), ns)
        async with sm() as session, session.begin():
            created = await ApiKeyService(session=session, namespace_id=ns_id, cache=None).create(  # type: ignore[arg-type]
                ns, ApiKeyCreate(name="client-test", role="writer")
            )
        await engine.dispose()
        return created.key

    url = live_server_factory(auth_enabled=True)
    # A fresh loop in a thread: the session loop is not running in sync fixtures.
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        secret = pool.submit(asyncio.run, key()).result()
    return url, secret
