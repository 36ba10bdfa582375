"""`/ui`: the dashboard's page, script and style. The page holds no data: its script reads
everything from the REST API with the browser's API key, so the API's auth (and its roles)
guard the data as for any client. No CDN, no inline script or style: the Content Security
Policy allows this origin only, so even content that escaped escaping could not run."""

from __future__ import annotations

import struct
import zlib
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
TYPES = {
    "app.js": "text/javascript",
    "memories.js": "text/javascript",
    "style.css": "text/css",
    "favicon.svg": "image/svg+xml",
}
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


# The icon: a white "H" on the page's header colour. An SVG for the page's <link rel=icon>,
# and the same drawn as a 32 px PNG inside an ICO for /favicon.ico, which browsers ask for
# on their own (a 404 in every log otherwise). Made here: no binary file in the tree.
ICON = 32
_BARS = ((7, 12, 6, 26), (20, 25, 6, 26), (12, 20, 14, 18))  # (x0, x1, y0, y1): |, |, -


def _pixel(x: int, y: int) -> bytes:
    if any(x0 <= x < x1 and y0 <= y < y1 for x0, x1, y0, y1 in _BARS):
        return b"\xff\xff\xff\xff"
    corner = min(x, ICON - 1 - x) + min(y, ICON - 1 - y) < 3  # cut corners, transparent
    return b"\x00\x00\x00\x00" if corner else b"\x1d\x24\x30\xff"


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


@cache
def favicon_ico() -> bytes:
    """A 32 x 32 RGBA PNG in an ICO container (Vista's PNG-in-ICO, read by every browser)."""
    rows = b"".join(
        b"\x00" + b"".join(_pixel(x, y) for x in range(ICON)) for y in range(ICON)
    )  # each row: filter type 0, then its pixels
    png = (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", struct.pack(">IIBBBBB", ICON, ICON, 8, 6, 0, 0, 0))
        + _chunk(b"IDAT", zlib.compress(rows, 9))
        + _chunk(b"IEND", b"")
    )
    directory = struct.pack("<HHH", 0, 1, 1)
    entry = struct.pack("<BBBBHHII", ICON, ICON, 0, 0, 1, 32, len(png), 6 + 16)
    return directory + entry + png


@router.get("/favicon.ico")
async def favicon() -> Response:
    """The service's icon, for browsers that ask for it."""
    return Response(
        favicon_ico(),
        media_type="image/x-icon",
        headers={"Cache-Control": "public, max-age=86400"},
    )
