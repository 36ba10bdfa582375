"""The process's log format (HTM_LOG_FORMAT, HTM_LOG_LEVEL) and the one line per request.

auto (the default): text when stderr is a terminal (a person running `make run`), json when
it is not (a container, a file, a pipe to a collector).

json: one JSON object a line, with the request id of the request that wrote it (a contextvar
the middleware sets). The request line names the route's template, never the raw path, and
nothing from bodies: no memory content, no API key (the Authorization header is never read
here)."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from app.observability import request_id

REQUEST_LOGGER = "htm.request"
# LogRecord's own attributes: anything else on a record came from `extra`.
_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        rid = request_id.current.get()
        if rid is not None:
            out["request_id"] = rid
        out.update({k: v for k, v in record.__dict__.items() if k not in _STANDARD})
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        rid = request_id.current.get()
        return f"{line} [{rid}]" if rid is not None else line


def formatter(log_format: str, *, terminal: bool = False) -> logging.Formatter:
    """`terminal`: whether the stream is one (what `auto` picks by)."""
    if log_format == "auto":
        log_format = "text" if terminal else "json"
    return JsonFormatter() if log_format == "json" else TextFormatter()


def configure(log_format: str, level: str) -> None:
    """The root logger writes to stderr in the chosen format (uvicorn's loggers included:
    `htm serve` runs it without a logging config of its own)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(log_format, terminal=sys.stderr.isatty()))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


class QuietAtStart(logging.Filter):
    """A logger's INFO records that begin with one of `prefixes`, made DEBUG records: the lines
    uvicorn and the MCP SDK write while the service starts ("Started server process",
    "Waiting for application startup.", ...) say less than `htm serve`'s ready line, and a
    person running `make run` reads them before it. Shown with HTM_LOG_LEVEL=debug. Add one
    instance per logger, once (a module's constant: addFilter skips an instance it holds)."""

    def __init__(self, *prefixes: str) -> None:
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.INFO and record.getMessage().startswith(self.prefixes):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


def log_request(
    method: str,
    route: str,
    status: int,
    *,
    duration_s: float,
    rid: str,
    namespace: str | None,
    robot: str | None,
) -> None:
    logger = logging.getLogger(REQUEST_LOGGER)
    if not logger.isEnabledFor(logging.INFO):  # HTM_LOG_LEVEL=warning: nothing to build
        return
    logger.info(
        "%s %s %d",
        method,
        route,
        status,
        extra={
            "method": method,
            "route": route,
            "status": status,
            "duration_ms": round(duration_s * 1000, 3),
            "request_id": rid,
            "namespace": namespace,
            "robot": robot,
        },
    )
