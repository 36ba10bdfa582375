"""The OpenAPI contract: problem+json error responses on every route, stable ordering.

`python -m app.http.openapi` writes openapi/openapi.json (also `make openapi`); a test fails when
the committed file differs from what the app generates.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from app.config import PROJECT_ROOT
from app.errors import PROBLEM_JSON

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
    "413": "Body, content, batch or query over its limit",
    "422": "Well-formed but invalid input",
    "503": "A dependency (PostgreSQL, Redis, the embedder) is unavailable",
}
ROUTE_ERRORS = {
    "get": ["401", "403", "404", "422", "503"],
    "post": ["400", "401", "403", "404", "408", "409", "413", "422", "503"],
    "put": ["400", "401", "403", "404", "408", "409", "413", "422", "503"],
    "patch": ["400", "401", "403", "404", "408", "409", "413", "422", "503"],
    "delete": ["400", "401", "403", "404", "409", "422", "503"],
}


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
            codes = ["503"] if path.startswith("/readyz") else []
            if path.startswith("/v1/"):
                codes = ROUTE_ERRORS[method]
            responses = op.setdefault("responses", {})
            responses.pop("422", None)
            for code in codes:
                responses[code] = _problem_response(ERRORS[code])
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


def render(app: FastAPI) -> str:
    return json.dumps(app.openapi(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
