"""`/ui`: the dashboard's page, script and style. The page holds no data: its script reads
everything from the REST API with the browser's API key, so the API's auth (and its roles)
guard the data as for any client. No CDN, no inline script or style: the Content Security
Policy allows this origin only, so even content that escaped escaping could not run."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import Response

from app.http.routing import ApiRoute

STATIC = Path(__file__).parents[1] / "static"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
TYPES = {"app.js": "text/javascript", "memories.js": "text/javascript", "style.css": "text/css"}
# The tag tree's route is another package's; the page shows it only where it exists.
TAGS_ROUTE = "/v1/tags"

router = APIRouter(include_in_schema=False, route_class=ApiRoute)


@cache
def _file(name: str) -> str:
    return (STATIC / name).read_text()


def _headers(media_type: str) -> dict[str, str]:
    return {
        "Content-Security-Policy": CSP,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-cache",
        "Content-Type": f"{media_type}; charset=utf-8",
    }


@router.get("/ui")
async def page(request: Request) -> Response:
    """The dashboard's page."""
    # The spec lists every route, including those of included routers (app.routes may hold
    # the routers themselves).
    tags = TAGS_ROUTE in request.app.openapi().get("paths", {})
    body = _file("index.html").replace("{{tags_route}}", TAGS_ROUTE if tags else "")
    return Response(body, headers=_headers("text/html"))


@router.get("/ui/{name}")
async def asset(name: str) -> Response:
    """The page's script and style."""
    if name not in TYPES:
        return Response("not found", status_code=404, media_type="text/plain")
    return Response(_file(name), headers=_headers(TYPES[name]))
