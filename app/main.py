"""create_app(): lifespan, routers, error handlers — nothing else."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from app.config import Settings, get_settings
from app.errors import install_error_handlers
from app.health.router import router as health_router
from app.resources import open_resources


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with open_resources(settings) as resources:
            app.state.resources = resources
            yield

    app = FastAPI(
        title="HTM memory service",
        version="1.0.0",
        summary="Two-tier memory for LLM agents: Redis working memory, PostgreSQL long-term memory",
        lifespan=lifespan,
    )
    install_error_handlers(app)
    app.include_router(health_router)
    return app
