"""create_app(): lifespan, routers, error handlers — nothing else."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from app.config import Settings, get_settings
from app.errors import install_error_handlers
from app.health.router import router as health_router
from app.memories.embedding_worker import embedding_worker
from app.memories.router import router as memories_router
from app.recall.router import router as recall_router
from app.resources import open_resources
from app.robots.router import router as robots_router
from app.stats.router import router as stats_router
from app.working_memory.router import router as working_memory_router


def create_app(settings: Settings | None = None, *, background: bool = True) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with open_resources(settings) as resources:
            app.state.resources = resources
            if background and resources.embedder is not None:
                async with embedding_worker(resources):
                    yield
            else:
                yield

    app = FastAPI(
        title="HTM memory service",
        version="1.0.0",
        summary="Two-tier memory for LLM agents: Redis working memory, PostgreSQL long-term memory",
        lifespan=lifespan,
    )
    install_error_handlers(app)
    for router in (
        health_router,
        robots_router,
        memories_router,
        recall_router,
        working_memory_router,
        stats_router,
    ):
        app.include_router(router)
    return app
