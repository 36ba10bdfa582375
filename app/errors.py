"""Domain errors that carry their HTTP status, and which database failures mean "unavailable"
rather than "bug". Services raise these; every way in renders them: HTTP as RFC 9457
problem+json (app/http/problems.py), MCP as a tool error carrying the same body, the CLI as
one line."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import sqlalchemy.exc
from sqlalchemy.exc import DBAPIError

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


class PreconditionFailed(DomainError):
    """A conditional write's precondition (If-Match, If-None-Match) does not hold: nothing
    was written; the body names the current version, if any."""

    status, type, title = 412, "precondition-failed", "Precondition failed"


class PayloadTooLarge(DomainError):
    status, type, title = 413, "payload-too-large", "Payload too large"


class Unprocessable(DomainError):
    status, type, title = 422, "validation-error", "Validation failed"


class BadGateway(DomainError):
    """A dependency answered, but with something unusable (a model's reply of the wrong
    shape): the same request may fail again."""

    status, type, title = 502, "bad-gateway", "Unusable answer from a dependency"


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
# Citus: the coordinator could not reach a worker this statement needs (its connection to the
# node failed, or one it had opened died): XX000 with these words, or class 08 below.
_NODE_UNREACHABLE = (
    "failure on connection marked as essential",
    "connection to the remote node",
    # a worker stopped while the coordinator waited on it (bench/citus.py, under load)
    "server closed the connection unexpectedly",
)


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


def is_node_unreachable(exc: BaseException) -> bool:
    """On Citus: a worker node the statement needs is down (its namespace's shard, or any
    node for a write to a reference table); the coordinator and its connection are fine.
    Citus says so in XX000 ("failure on connection marked as essential") or in 08006
    ("connection to the remote node ... failed", ERRCODE_CONNECTION_FAILURE): the class of a
    lost connection, but sent by the coordinator over ours, which the caller checks is open
    (app/db/session.py) before taking it for the server gone."""
    for e in _causes(exc):
        state = getattr(e, "sqlstate", None)
        if (state == "XX000" or (isinstance(state, str) and state.startswith("08"))) and any(
            words in str(e) for words in _NODE_UNREACHABLE
        ):
            return True
    return False


def database_failure(exc: BaseException) -> ServiceUnavailable | None:
    """The 503 a database error amounts to, or None when it is not about availability (a
    constraint violation, a syntax error: those are bugs or 4xx, handled elsewhere)."""
    if is_statement_timeout(exc) or any(isinstance(e, TimeoutError) for e in _causes(exc)):
        return DependencyTimeout(DB_TIMEOUT, dependency="postgres")
    if (
        is_database_gone(exc)
        or is_node_unreachable(exc)
        or isinstance(exc, sqlalchemy.exc.TimeoutError)
    ):
        # sqlalchemy.exc.TimeoutError: no pooled connection came free in time.
        return ServiceUnavailable(DB_UNAVAILABLE, dependency="postgres")
    if any(getattr(e, "sqlstate", None) in _CONFLICT_SQLSTATES for e in _causes(exc)):
        return ServiceUnavailable(DB_CONFLICT, dependency="postgres", retry=True)
    return None
