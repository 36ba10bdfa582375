"""/docs (Swagger UI) and /redoc load every script and stylesheet from the service itself, so
both pages work on a machine with no internet (issue 34: they were blank offline)."""

from __future__ import annotations

import re

import httpx

from app.main import create_app
from tests.conftest import make_settings

ASSET = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+\.(?:js|css))["']""")
KINDS = {".js": "text/javascript", ".css": "text/css"}


async def test_docs_and_redoc_load_their_assets_from_the_service_not_a_cdn() -> None:
    app = create_app(make_settings("postgresql+asyncpg://x@h/db", "redis://h"))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://htm") as c:
        loaded: dict[str, list[str]] = {}
        for page in ("/docs", "/redoc"):
            r = await c.get(page)
            assert (r.status_code, r.headers["content-type"]) == (
                200,
                "text/html; charset=utf-8",
            )
            loaded[page] = sorted(ASSET.findall(r.text))
            assert "openapi.json" in r.text
        assert loaded == {
            "/docs": [
                "/docs-assets/swagger-ui-bundle.js",
                "/docs-assets/swagger-ui.css",
            ],
            "/redoc": ["/docs-assets/redoc.standalone.js"],
        }
        for path in {p for paths in loaded.values() for p in paths}:
            r = await c.get(path)
            assert r.status_code == 200, path
            assert r.headers["content-type"].startswith(KINDS[path[path.rindex(".") :]]), path
            assert len(r.content) > 100_000, path  # the asset itself, not an error page
