from __future__ import annotations

from fastapi import APIRouter, Request, Response

from app.auth.caller import identify, require_role
from app.http.deps import ComponentsDep
from app.http.routing import ApiRoute
from app.metrics.service import CONTENT_TYPE, scrape

router = APIRouter(tags=["metrics"], route_class=ApiRoute)

EXAMPLE = """\
# HELP htm_recalls_total Recalls answered, by strategy
# TYPE htm_recalls_total counter
htm_recalls_total{strategy="hybrid"} 2.0
"""


@router.get(
    "/metrics",
    operation_id="metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={
        200: {
            "description": "The Prometheus text format",
            "content": {CONTENT_TYPE: {"example": EXAMPLE}},
        },
        401: {"description": "Auth on: no admin key (unless HTM_METRICS_PUBLIC)"},
        403: {"description": "Auth on: the key is not an admin key"},
    },
)
async def metrics(request: Request, c: ComponentsDep) -> Response:
    """This process's metrics (each process counts its own). With auth on, needs an admin key
    of any namespace unless HTM_METRICS_PUBLIC is set."""
    s = c.settings
    if s.auth_enabled and not s.metrics_public:
        caller = await identify(
            request.headers.get("authorization", ""),
            None,
            auth_enabled=True,
            sessionmaker=c.sessionmaker,
            namespace_ids=c.namespace_ids,
            key_cache=c.key_cache,
        )
        require_role(caller, "admin")
    body = await scrape(c.sessionmaker, c.metrics)
    return Response(body, media_type=CONTENT_TYPE)
