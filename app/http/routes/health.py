from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from app.embedded.supervisor import embedded_health
from app.errors import ServiceUnavailable
from app.health import service
from app.http.deps import ComponentsDep
from app.http.draining import is_draining
from app.http.routing import ApiRoute

router = APIRouter(tags=["health"], route_class=ApiRoute)


@router.get("/healthz", operation_id="health-live", summary="Liveness")
async def healthz() -> dict[str, str]:
    """Answers while the process lives; checks nothing else."""
    return {"status": "ok"}


@router.get("/readyz", operation_id="health-ready", summary="Readiness and versions")
async def readyz(request: Request, c: ComponentsDep) -> dict[str, Any]:
    """Checks PostgreSQL and Redis; reports their versions, the embedder and the tokenizer,
    and (`embedded`) whether embedded servers are running, being restarted or given up on.
    503 with `draining: true` once the process is shutting down."""
    if is_draining(request.app):
        raise ServiceUnavailable("not ready: the service is shutting down", draining=True)
    embedded = embedded_health(postgres=c.settings.database_url, redis=c.settings.redis_url)
    return {
        "status": "ready",
        **await service.readiness(
            c.sessionmaker, c.redis, c.embedder, tokenizer=c.tokenizer, embedded=embedded
        ),
    }
