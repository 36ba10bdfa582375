"""The OpenAPI contract: problem+json error responses on every route, stable ordering.

`python -m app.http.openapi` writes openapi/openapi.json (also `make openapi`); a test fails when
the committed file differs from what the app generates.
"""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.openapi.utils import get_openapi
from fastapi.staticfiles import StaticFiles
from starlette.requests import Request
from starlette.responses import HTMLResponse

from app.config import PROJECT_ROOT
from app.db.replicas import LSN_PATTERN
from app.errors import PROBLEM_JSON
from app.http.consistency import CONSISTENCY_TOKEN

SPEC_PATH = PROJECT_ROOT / "openapi" / "openapi.json"

PROBLEM_SCHEMA: dict[str, Any] = {
    "title": "Problem",
    "description": "RFC 9457 problem details; validation errors add `errors`; every problem "
    "carries the request's `request_id`.",
    "type": "object",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string", "format": "uri"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "instance": {"type": "string"},
        "request_id": {
            "type": "string",
            "description": "The request's id, as in its X-Request-ID response header",
        },
        "errors": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "field": {"type": "string"},
                    "message": {"type": "string"},
                    "type": {"type": "string"},
                },
            },
        },
    },
    "additionalProperties": True,
}

ERRORS = {
    "400": "Malformed request (bad JSON, bad cursor, a hard delete without confirmation)",
    "401": "Missing, unknown or revoked API key",
    "403": "The key's role does not allow this",
    "404": "No such robot, memory or key in the caller's namespace",
    "408": "The body did not arrive within HTM_BODY_TIMEOUT_S; the connection is closed",
    "409": "A conflict: the key is already taken in this namespace, a robot is already in "
    "another group or still holds memories, or what the change refers to was removed "
    "meanwhile (`retry: true`)",
    "412": "A conditional write's precondition failed (`If-Match`: the version is not the "
    "current one; `If-None-Match: *`: the key exists); nothing was written",
    "413": "Body, content, batch or query over its limit",
    "415": "A body sent without `Content-Type: application/json`",
    "422": "Well-formed but invalid input: `errors[]`, each with its `field` (`body.`, "
    "`query.` or `path.` and the name) and `type`",
    "503": "A dependency (PostgreSQL, Redis, the embedder) is unavailable",
}
ROUTE_ERRORS = {
    "get": ["401", "403", "404", "422", "503"],
    "post": ["400", "401", "403", "404", "408", "409", "413", "422", "503"],
    "put": ["400", "401", "403", "404", "408", "409", "413", "422", "503"],
    "patch": ["400", "401", "403", "404", "408", "409", "413", "422", "503"],
    "delete": ["400", "401", "403", "404", "409", "422", "503"],
}


# A write's consistency token (app/http/consistency.py), sent when replicas are configured.
TOKEN_HEADER = {
    CONSISTENCY_TOKEN: {
        "description": "With read replicas (HTM_DATABASE_REPLICA_URLS): this write's "
        "consistency token; a read (recall, list, retrieve, stats) that sends it back sees "
        "the write (docs/api.md, read replicas)",
        "schema": {"type": "string", "pattern": LSN_PATTERN},
    }
}


def _reads_replicas(op: dict[str, Any]) -> bool:
    """A route whose reads may run on a replica (recall): it takes a token, gives none."""
    return any(p.get("name") == CONSISTENCY_TOKEN for p in op.get("parameters", []))


def _without_null(parameter: dict[str, Any]) -> None:
    """A query or header parameter is a string or absent, never JSON's null: an optional
    one's `null` branch (pydantic's way to say optional) would let a client send "null"."""
    schema = parameter.get("schema", {})
    branches = schema.get("anyOf")
    if isinstance(branches, list):
        kept = [b for b in branches if b != {"type": "null"}]
        rest = {k: v for k, v in schema.items() if k != "anyOf"}
        parameter["schema"] = {**rest, **kept[0]} if len(kept) == 1 else {**rest, "anyOf": kept}


def _problem_response(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
    }


def build_spec(app: FastAPI) -> dict[str, Any]:
    spec = get_openapi(
        title=app.title,
        version=app.version,
        summary=app.summary,
        description=app.description,
        routes=app.routes,
    )
    schemas = spec.setdefault("components", {}).setdefault("schemas", {})
    schemas["Problem"] = PROBLEM_SCHEMA
    # FastAPI's own validation-error models are replaced by Problem.
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    for path, item in spec["paths"].items():
        for method, op in item.items():
            for parameter in op.get("parameters", []):
                _without_null(parameter)
            codes = ["503"] if path.startswith("/readyz") else []
            if path.startswith("/v1/"):
                codes = ROUTE_ERRORS[method]
            responses = op.setdefault("responses", {})
            responses.pop("422", None)
            if "requestBody" in op:
                codes = sorted({*codes, "415"})
            if path.endswith("/state/{key}") and method in ("put", "delete"):
                codes = sorted({*codes, "412"})  # conditional writes (app/state/)
            for code in codes:
                responses[code] = _problem_response(ERRORS[code])
            if path.startswith("/v1/") and method != "get" and not _reads_replicas(op):
                for code, response in responses.items():
                    if code.startswith("2"):
                        response.setdefault("headers", {}).update(TOKEN_HEADER)
    spec["components"]["securitySchemes"] = {
        "bearer": {"type": "http", "scheme": "bearer", "description": "API key (htm_…)"}
    }
    spec["security"] = [{"bearer": []}, {}]
    return spec


def install_openapi(app: FastAPI) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build_spec(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


# Swagger UI's and ReDoc's scripts and stylesheet, as the fastapi-offline package ships them
# (only its files are used): /docs and /redoc load nothing from a CDN, so they work offline.
DOCS_ASSETS = "/docs-assets"


def install_docs(app: FastAPI) -> None:
    """/docs (Swagger UI), its OAuth2 redirect and /redoc, FastAPI's own pages pointed at
    assets this service serves. Plain Starlette routes, as FastAPI adds its own: not API
    routes, not in the spec."""
    app.mount(
        DOCS_ASSETS,
        StaticFiles(directory=str(files("fastapi_offline") / "static")),
        name="docs-assets",
    )
    spec, redirect = app.openapi_url or "/openapi.json", app.swagger_ui_oauth2_redirect_url

    async def swagger(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=f"{root}{spec}",
            title=f"{app.title} - Swagger UI",
            oauth2_redirect_url=f"{root}{redirect}" if redirect else None,
            swagger_js_url=f"{root}{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{DOCS_ASSETS}/favicon.png",
        )

    async def swagger_redirect(_request: Request) -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(
            openapi_url=f"{root}{spec}",
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{DOCS_ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{DOCS_ASSETS}/favicon.png",
            with_google_fonts=False,
        )

    app.add_route("/docs", swagger, include_in_schema=False)
    if redirect:
        app.add_route(redirect, swagger_redirect, include_in_schema=False)
    app.add_route("/redoc", redoc, include_in_schema=False)


def render(app: FastAPI) -> str:
    return json.dumps(app.openapi(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
