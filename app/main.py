"""create_app(): lifespan, routers, error handlers — nothing else."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from fastapi import FastAPI

from app.auth.router import router as keys_router
from app.config import Settings, get_settings
from app.errors import install_error_handlers
from app.health.router import router as health_router
from app.health.service import start_draining
from app.memories.embedding_worker import embedding_worker
from app.memories.router import router as memories_router
from app.middleware import BodyLimitMiddleware
from app.openapi import install_openapi
from app.recall.router import router as recall_router
from app.resources import open_resources
from app.robots.router import router as robots_router
from app.stats.router import router as stats_router
from app.working_memory.repair import repair_worker
from app.working_memory.router import router as working_memory_router

log = logging.getLogger(__name__)

DESCRIPTION = """\
Robots (LLM agents) add memories, recall them by meaning, words or both, and assemble
prompt-ready context from a token-budgeted working memory. Every error is
`application/problem+json` (RFC 9457). With auth on, send `Authorization: Bearer <key>`;
the key decides the namespace. With auth off, `X-Namespace` picks it (default `default`).
"""


def create_app(settings: Settings | None = None, *, background: bool = True) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with open_resources(settings) as resources:
            app.state.resources = resources
            app.state.draining = False  # a lifespan that starts serves (again)
            async with AsyncExitStack() as workers:
                if background:
                    interval = settings.working_memory_repair_interval_s
                    await workers.enter_async_context(repair_worker(resources, interval))
                    if resources.embedder is not None:
                        await workers.enter_async_context(embedding_worker(resources))
                yield
                # Shutdown, in this order. 1. The server has stopped taking requests and let
                # those in flight finish or cancelled them (htm serve: DrainingServer, within
                # HTM_SHUTDOWN_TIMEOUT_S); /readyz says so from here on too.
                start_draining(app)
                log.info("stopping background workers")
            # 2. The workers have stopped: the embedding worker is cancelled (rows it leased
            # come back when the lease ends) and so is the working-memory repair worker.
            # 3. Leaving open_resources closes the embedder (it waits for a batch still in
            # flight, at most HTM_EMBEDDING_TIMEOUT_S), Redis and the database pool.
        log.info("stopped")

    app = FastAPI(
        title="HTM memory service",
        version="1.0.0",
        summary="Two-tier memory for LLM agents: Redis working memory, PostgreSQL long-term memory",
        description=DESCRIPTION,
        lifespan=lifespan,
    )
    install_error_handlers(app)
    install_openapi(app)
    app.add_middleware(BodyLimitMiddleware, limit=settings.max_body_bytes)
    for router in (
        health_router,
        robots_router,
        memories_router,
        recall_router,
        working_memory_router,
        stats_router,
        keys_router,
    ):
        app.include_router(router)
    return app
