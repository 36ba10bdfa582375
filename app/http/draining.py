"""Whether this process is shutting down: from the first SIGTERM or SIGINT (app/http/serving.py)
or the lifespan's shutdown on, /readyz answers 503 so a load balancer stops sending it
traffic."""

from __future__ import annotations

from fastapi import FastAPI


def start_draining(app: FastAPI) -> None:
    """From now on /readyz answers 503. Called from a signal handler: it only sets a flag."""
    app.state.draining = True


def is_draining(app: FastAPI) -> bool:
    return bool(getattr(app.state, "draining", False))
