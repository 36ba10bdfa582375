"""problem+json (RFC 9457): the one body every error is answered with over HTTP, by the REST
API's handlers (app/http/problems.py) and by /mcp before its protocol starts
(app/mcp/http.py). Below both, so that neither way in stands on the other."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

from app.errors import PROBLEM_BASE, PROBLEM_JSON
from app.observability import request_id as request_ids


def problem(
    status: int,
    type_: str,
    title: str,
    *,
    detail: str,
    instance: str | None = None,
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
