"""The request id: the client's `X-Request-ID` when it is safe to echo and log, else one made
here. It is in the response's `X-Request-ID` header, in every problem+json body and in every
log line written while the request runs."""

from __future__ import annotations

import re
import uuid
from contextvars import ContextVar

from starlette.types import Scope

HEADER = "X-Request-ID"
# Safe in a header, a log line and a URL; long enough for a UUID or a trace id with a prefix.
_ACCEPTED = re.compile(r"[A-Za-z0-9._:-]{1,128}")

current: ContextVar[str | None] = ContextVar("request_id", default=None)


def accepted(value: str | None) -> str | None:
    return value if value is not None and _ACCEPTED.fullmatch(value) else None


def new() -> str:
    return uuid.uuid4().hex


def of(scope: Scope) -> str | None:
    """The id the middleware gave this request (None outside one, e.g. a test calling in)."""
    state = scope.get("state")
    return state.get("request_id") if isinstance(state, dict) else None
