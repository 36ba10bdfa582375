"""create_app(): the FastAPI app, its lifespan, routes, middleware and error handlers."""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager

from fastapi import FastAPI

from app import VERSION
from app.config import Settings, get_settings
from app.http.consistency import ConsistencyTokens
from app.http.draining import start_draining
from app.http.middleware import BodyGate
from app.http.openapi import install_docs, install_openapi
from app.http.problems import install_error_handlers
from app.http.routes import ROUTERS
from app.http.routing import AsgiRoute, label_plain_routes, skip_unmatched_routers
from app.lifespan import background, open_components
from app.mcp.http import McpEndpoint
from app.observability.middleware import RequestObserver

log = logging.getLogger(__name__)

DESCRIPTION = """\
Robots (LLM agents) add memories, recall them by meaning, words or both, and assemble
prompt-ready context from a token-budgeted working memory. Every error is
`application/problem+json` (RFC 9457). With auth on, send `Authorization: Bearer <key>`;
the key decides the namespace. With auth off, `X-Namespace` picks it (default `default`).
"""


def create_app(settings: Settings | None = None, *, background: bool = True) -> FastAPI:
    settings = settings or get_settings()
    mcp = McpEndpoint(settings)

    app = FastAPI(
        title="HTM memory service",
        version=VERSION,
        summary="Two-tier memory for LLM agents: Redis working memory, PostgreSQL long-term memory",
        description=DESCRIPTION,
        lifespan=lifespan_for(settings, background_workers=background, mcp=mcp),
        docs_url=None,  # install_docs: the same pages, their assets served from here
        redoc_url=None,
    )
    install_error_handlers(app)
    install_openapi(app)
    install_docs(app)
    label_plain_routes(app)
    app.add_middleware(BodyGate, limit=settings.max_body_bytes, timeout_s=settings.body_timeout_s)
    if settings.database_replica_urls:  # writes' consistency tokens (app/http/consistency.py)
        app.add_middleware(ConsistencyTokens)
    # Outermost (added last): it sees the body gate's 413s and 408s too.
    app.add_middleware(RequestObserver)
    for router in ROUTERS:
        app.include_router(router)
    skip_unmatched_routers(app)
    # The MCP transport (an ASGI app of its own, every method): not a REST route.
    app.router.routes.append(AsgiRoute("/mcp", mcp, include_in_schema=False))
    return app


def worker_app() -> FastAPI:
    """The app of one `htm serve --workers N` process (uvicorn's factory, called in the
    spawned process): its settings from the environment, where the parent put the database
    and Redis it resolved (app/http/multiprocess.run_workers)."""
    from app.http.serving import serving_app
    from app.observability.logs import configure as configure_logging

    settings = get_settings()
    configure_logging(settings.log_format, settings.log_level)
    return serving_app(create_app(settings), settings)


def lifespan_for(
    settings: Settings, *, background_workers: bool = True, mcp: McpEndpoint | None = None
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with open_components(settings) as components:
            app.state.components = components
            app.state.draining = False  # a lifespan that starts serves (again)
            async with AsyncExitStack() as running:
                if mcp is not None:  # the MCP transport's session manager, for /mcp
                    await running.enter_async_context(mcp.running(components))
                if background_workers:
                    await running.enter_async_context(background(components))
                    # The serving process: what start-up made (modules, the model, caches)
                    # lives as long as it does, so it is kept out of the collector's full
                    # passes, which otherwise landed in requests (a prompt's mean service CPU
                    # 13.1 → 8.7 ms: bench/README.md). Not in the tests' many short apps.
                    gc.collect()
                    gc.freeze()
                yield
                # Shutdown, in this order. 1. The server has stopped taking requests and let
                # those in flight finish or cancelled them (htm serve: DrainingServer, within
                # HTM_SHUTDOWN_TIMEOUT_S); /readyz says so from here on too.
                start_draining(app)
                log.info("stopping background workers")
            # 2. The workers have stopped: the embedding worker is cancelled (rows it leased
            # come back when the lease ends) and so is the working-memory repair worker.
            # 3. Leaving open_components closes the embedder (it waits for a batch still in
            # flight, at most HTM_EMBEDDING_TIMEOUT_S), Redis and the database pool.
        log.info("stopped")

    return lifespan
