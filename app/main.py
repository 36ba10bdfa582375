"""create_app(): lifespan, routers, error handlers — nothing else."""

from __future__ import annotations

import logging

from fastapi import FastAPI
from starlette.routing import Route

from app.auth.router import router as keys_router
from app.config import Settings, get_settings
from app.dashboard.router import router as dashboard_router
from app.errors import install_error_handlers
from app.groups.router import router as groups_router
from app.health.router import router as health_router
from app.lifespan import lifespan_for
from app.mcp.http import McpEndpoint
from app.memories.router import router as memories_router
from app.metrics.router import router as metrics_router
from app.middleware import BodyGate
from app.observability.middleware import RequestObserver
from app.openapi import install_openapi
from app.prompt.router import router as prompt_router
from app.recall.router import router as recall_router
from app.robots.router import router as robots_router
from app.sessions.router import router as sessions_router
from app.stats.router import router as stats_router
from app.tags.router import router as tags_router
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
    mcp = McpEndpoint(settings)

    app = FastAPI(
        title="HTM memory service",
        version="1.0.0",
        summary="Two-tier memory for LLM agents: Redis working memory, PostgreSQL long-term memory",
        description=DESCRIPTION,
        lifespan=lifespan_for(settings, background=background, mcp=mcp),
    )
    install_error_handlers(app)
    install_openapi(app)
    app.add_middleware(BodyGate, limit=settings.max_body_bytes, timeout_s=settings.body_timeout_s)
    # Outermost (added last): it sees the body gate's 413s and 408s too.
    app.add_middleware(RequestObserver)
    for router in (
        health_router,
        robots_router,
        groups_router,
        memories_router,
        recall_router,
        working_memory_router,
        sessions_router,
        prompt_router,
        stats_router,
        keys_router,
        metrics_router,
        tags_router,
        dashboard_router,
    ):
        app.include_router(router)
    # The MCP transport (an ASGI app of its own, every method): not a REST route.
    app.router.routes.append(Route("/mcp", mcp, include_in_schema=False))
    return app
