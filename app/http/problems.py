"""Every error as RFC 9457 problem+json: one set of handlers (installed by create_app)
renders domain errors (app/errors.py), validation, routing and unexpected errors alike, never
leaking a stack trace or SQL."""

from __future__ import annotations

import logging
import re
from typing import Any

import asyncpg
import sqlalchemy.exc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import compile_path

from app.common import TOO_DEEP, JsonTooDeep
from app.errors import DomainError, database_failure
from app.observability import request_id as request_ids
from app.problem import problem

log = logging.getLogger(__name__)


_STATUS_TYPES = {
    400: ("bad-request", "Bad request"),
    401: ("unauthorized", "Authentication required"),
    403: ("forbidden", "Not allowed"),
    404: ("not-found", "Not found"),
    405: ("method-not-allowed", "Method not allowed"),
    409: ("conflict", "Conflict"),
    412: ("precondition-failed", "Precondition failed"),
    413: ("payload-too-large", "Payload too large"),
    415: ("unsupported-media-type", "Unsupported media type"),
    422: ("validation-error", "Validation failed"),
    503: ("unavailable", "Service unavailable"),
}


def _field_errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    out = []
    for err in exc.errors():
        loc = [str(p) for p in err.get("loc", ())]
        out.append({"field": ".".join(loc), "message": err.get("msg", ""), "type": err.get("type")})
    return out


_METHODS = ("delete", "get", "head", "options", "patch", "post", "put")


def _allowed_methods(request: Request) -> str:
    """The methods the API documents for this path. Starlette's own 405 names only the first
    matching route's methods, and here each method of a path is a route of its own. As in
    OpenAPI's path matching, a concrete path wins over a templated one: /memories/batch is
    that path's, not /memories/{key}'s."""
    matches: list[tuple[int, list[str]]] = []
    for template, item in request.app.openapi()["paths"].items():
        if compile_path(template)[0].match(request.scope["path"]):
            matches.append((template.count("{"), [m for m in item if m in _METHODS]))
    if not matches:
        return ""
    fewest = min(n for n, _ in matches)
    methods = {m.upper() for n, ms in matches if n == fewest for m in ms}
    return ", ".join(sorted(methods))


def located(request: Request, errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A service's field errors named as the request's validation errors are: where the
    field was (`path.`, `query.`, `body.`) and a `type` (`value_error` unless said)."""
    out = []
    for e in errors:
        field = re.sub(r"\[(\d+)\]", r".\1", str(e.get("field", "")))  # a[0].b: a.0.b
        if field and field.split(".")[0] not in ("path", "query", "body", "header"):
            name = field.split(".")[0].split("[")[0]
            if name in request.path_params:
                where = "path"
            elif request.method in ("GET", "HEAD", "DELETE"):
                where = "query"
            else:
                where = "body"
            field = f"{where}.{field}"
        out.append({**e, "field": field, "type": e.get("type", "value_error")})
    return out


def install_error_handlers(app: FastAPI) -> None:
    app.exception_handler(DomainError)(_domain)
    app.exception_handler(RequestValidationError)(_validation)
    app.exception_handler(StarletteHTTPException)(_http)
    # Errors from code that talks to the database without a DbSession (which converts them
    # itself).
    for database_error in (
        OSError,
        DBAPIError,
        asyncpg.PostgresError,
        asyncpg.InterfaceError,
        sqlalchemy.exc.TimeoutError,
    ):
        app.exception_handler(database_error)(_database)
    app.exception_handler(Exception)(_unexpected)


def _answer(
    request: Request, status: int, type_: str, *, title: str, detail: str, **extra: Any
) -> JSONResponse:
    """A problem about this request: its path is the instance, its id in the body."""
    return problem(
        status,
        type_,
        title,
        detail=detail,
        instance=request.url.path,
        request_id=request_ids.of(request.scope),
        **extra,
    )


async def _domain(request: Request, exc: DomainError) -> JSONResponse:
    extra = dict(exc.extra)
    if isinstance(extra.get("errors"), list):
        extra["errors"] = located(request, extra["errors"])
    return _answer(request, exc.status, exc.type, title=exc.title, detail=exc.detail, **extra)


async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
    if isinstance(exc.__cause__, JsonTooDeep):  # JSON, only deeper than any schema allows
        too_deep = {"field": "body", "message": TOO_DEEP, "type": "json_too_deep"}
        return _answer(
            request,
            422,
            "validation-error",
            title="Validation failed",
            detail=f"body: {TOO_DEEP}",
            errors=[too_deep],
        )
    errors = _field_errors(exc)
    # A body that is not JSON at all is a 400, a JSON body of the wrong shape a 422.
    if any(e["type"] == "json_invalid" for e in errors):
        return _answer(
            request,
            400,
            "bad-request",
            title="Malformed JSON",
            detail="The body is not valid JSON",
            errors=errors,
        )
    detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors[:5])
    return _answer(
        request, 422, "validation-error", title="Validation failed", detail=detail, errors=errors
    )


async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    type_, title = _STATUS_TYPES.get(exc.status_code, ("http-error", "HTTP error"))
    headers = dict(exc.headers or {})
    if exc.status_code == 405:  # RFC 9110: a 405 lists the allowed methods
        headers["Allow"] = _allowed_methods(request)
    return _answer(
        request, exc.status_code, type_, title=title, detail=str(exc.detail), headers=headers
    )


async def _database(request: Request, exc: Exception) -> JSONResponse:
    """A restart, a refused connection, a statement timeout, an exhausted pool are 503. Any
    other database error is a bug: a 500."""
    failure = database_failure(exc)
    if failure is None:
        return await _unexpected(request, exc)
    log.warning(
        "database unavailable on %s %s: %s",
        request.method,
        request.url.path,
        type(exc).__name__,
    )
    return await _domain(request, failure)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return _answer(
        request,
        500,
        "internal",
        title="Internal error",
        detail="The server failed to handle this request",
    )
