"""Domain errors that carry their HTTP status, rendered as RFC 9457 problem+json.

Services raise these; one set of handlers (installed by create_app) renders every error —
domain, validation, routing and unexpected — as application/problem+json, never leaking a
stack trace or SQL.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import asyncpg
import sqlalchemy.exc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import compile_path

from app.observability import request_id as request_ids

log = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"
PROBLEM_BASE = "https://htm.dev/problems/"


class DomainError(Exception):
    """Base of every error a service raises on purpose."""

    status: int = 400
    type: str = "bad-request"
    title: str = "Bad request"

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra


class BadRequest(DomainError):
    status, type, title = 400, "bad-request", "Bad request"


class Unauthorized(DomainError):
    status, type, title = 401, "unauthorized", "Authentication required"


class Forbidden(DomainError):
    status, type, title = 403, "forbidden", "Not allowed"


class NotFound(DomainError):
    status, type, title = 404, "not-found", "Not found"


class Conflict(DomainError):
    status, type, title = 409, "conflict", "Conflict"


class RemovedMeanwhile(Conflict):
    """What the change refers to (a robot, a memory) was removed by a concurrent request,
    after this one had read it: a foreign key found nothing (SQLSTATE 23503) or a lock found
    no row. Nothing was written; a retry sees the removal."""

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail, retry=True, **extra)


class PayloadTooLarge(DomainError):
    status, type, title = 413, "payload-too-large", "Payload too large"


class Unprocessable(DomainError):
    status, type, title = 422, "validation-error", "Validation failed"


class ServiceUnavailable(DomainError):
    status, type, title = 503, "unavailable", "Service unavailable"


class DependencyTimeout(ServiceUnavailable):
    status, type, title = 503, "timeout", "Dependency timed out"


# --- database failures that mean "unavailable", not "bug" -----------------------------------

# Classified by SQLSTATE and exception type, never by message text (messages are localized
# by lc_messages and change between versions). Class 08 is a connection exception (asyncpg's
# "connection was closed in the middle of operation" is 08003); 57P01 admin shutdown (a fast
# stop or restart ends every session), 57P02 crash shutdown, 57P03 cannot connect now ("the
# database system is starting up / shutting down"), 53300 too many connections.
_GONE_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "53300"})
# 57014 query_canceled: statement_timeout fired (or someone ran pg_cancel_backend).
_CANCELED_SQLSTATE = "57014"
# 40P01 deadlock detected, 40001 serialization failure, 55P03 lock not available: this
# transaction lost to a concurrent one and was rolled back. The write protocol orders its
# locks so that these should not happen; if one does, the client is told to retry.
_CONFLICT_SQLSTATES = frozenset({"40P01", "40001", "55P03"})
DB_UNAVAILABLE = "the database is unavailable; nothing was written"
DB_TIMEOUT = "the database did not finish in time; nothing was written"
DB_CONFLICT = "a concurrent change conflicted with this one; nothing was written: retry"


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """The exception, then what it wraps: SQLAlchemy's DBAPIError keeps the driver-level error
    in .orig, whose __cause__ is asyncpg's own exception (and its sqlstate)."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo += [getattr(e, "orig", None), e.__cause__]


def is_statement_timeout(exc: BaseException) -> bool:
    return any(getattr(e, "sqlstate", None) == _CANCELED_SQLSTATE for e in _causes(exc))


def is_database_gone(exc: BaseException) -> bool:
    """The server went away or refuses connections (restart, crash, network), as opposed to
    a statement being wrong. A client-side TimeoutError is not "gone": it says nothing about
    the other connections."""
    for e in _causes(exc):
        state = getattr(e, "sqlstate", None)
        if isinstance(state, str) and (state.startswith("08") or state in _GONE_SQLSTATES):
            return True
        if isinstance(e, OSError) and not isinstance(e, TimeoutError):
            return True  # refused, reset, or the unix socket is gone while the server is down
        if isinstance(e, DBAPIError) and e.connection_invalidated:
            return True
    return False


def database_failure(exc: BaseException) -> ServiceUnavailable | None:
    """The 503 a database error amounts to, or None when it is not about availability (a
    constraint violation, a syntax error: those are bugs or 4xx, handled elsewhere)."""
    if is_statement_timeout(exc) or any(isinstance(e, TimeoutError) for e in _causes(exc)):
        return DependencyTimeout(DB_TIMEOUT, dependency="postgres")
    if is_database_gone(exc) or isinstance(exc, sqlalchemy.exc.TimeoutError):
        # sqlalchemy.exc.TimeoutError: no pooled connection came free in time.
        return ServiceUnavailable(DB_UNAVAILABLE, dependency="postgres")
    if any(getattr(e, "sqlstate", None) in _CONFLICT_SQLSTATES for e in _causes(exc)):
        return ServiceUnavailable(DB_CONFLICT, dependency="postgres", retry=True)
    return None


def problem(
    status: int,
    type_: str,
    title: str,
    detail: str,
    instance: str | None = None,
    *,
    headers: dict[str, str] | None = None,
    request_id: str | None = None,
    **extra: Any,
) -> JSONResponse:
    body: dict[str, Any] = {
        "type": PROBLEM_BASE + type_,
        "title": title,
        "status": status,
        "detail": detail,
    }
    if instance:
        body["instance"] = instance
    body.update(extra)
    if request_id is not None:
        body["request_id"] = request_id
        # Set here too: a 500 is rendered outside the middleware that sets it on the rest.
        headers = {**(headers or {}), request_ids.HEADER: request_id}
    if status == 401:
        headers = {**(headers or {}), "WWW-Authenticate": "Bearer"}
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


_STATUS_TYPES = {
    400: ("bad-request", "Bad request"),
    401: ("unauthorized", "Authentication required"),
    403: ("forbidden", "Not allowed"),
    404: ("not-found", "Not found"),
    405: ("method-not-allowed", "Method not allowed"),
    409: ("conflict", "Conflict"),
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


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(DomainError)
    async def _domain(request: Request, exc: DomainError) -> JSONResponse:
        return problem(
            exc.status,
            exc.type,
            exc.title,
            exc.detail,
            request.url.path,
            request_id=request_ids.of(request.scope),
            **exc.extra,
        )

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = _field_errors(exc)
        # A body that is not JSON at all is a 400, a JSON body of the wrong shape a 422.
        if any(e["type"] == "json_invalid" for e in errors):
            return problem(
                400,
                "bad-request",
                "Malformed JSON",
                "The body is not valid JSON",
                request.url.path,
                request_id=request_ids.of(request.scope),
                errors=errors,
            )
        detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors[:5])
        return problem(
            422,
            "validation-error",
            "Validation failed",
            detail,
            request.url.path,
            request_id=request_ids.of(request.scope),
            errors=errors,
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        type_, title = _STATUS_TYPES.get(exc.status_code, ("http-error", "HTTP error"))
        headers = dict(exc.headers or {})
        if exc.status_code == 405:  # RFC 9110: a 405 lists the allowed methods
            headers["Allow"] = _allowed_methods(request)
        return problem(
            exc.status_code,
            type_,
            title,
            str(exc.detail),
            request.url.path,
            headers=headers,
            request_id=request_ids.of(request.scope),
        )

    @app.exception_handler(OSError)
    @app.exception_handler(DBAPIError)
    @app.exception_handler(asyncpg.PostgresError)
    @app.exception_handler(asyncpg.InterfaceError)
    @app.exception_handler(sqlalchemy.exc.TimeoutError)
    async def _database(request: Request, exc: Exception) -> JSONResponse:
        # Errors from code that talks to the database without a DbSession (which converts
        # them itself): a restart, a refused connection, a statement timeout, an exhausted
        # pool are 503. Any other database error is a bug and falls through to 500 below.
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

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return problem(
            500,
            "internal",
            "Internal error",
            "The server failed to handle this request",
            request.url.path,
            request_id=request_ids.of(request.scope),
        )
