"""Routers passed over by one regex (app/http/routing.skip_unmatched_routers) match exactly as
FastAPI's own matching does: for every route's path (its parameters filled in, and with a
segment more or less), every method, the same route is chosen, or the same PARTIAL (405) or
NONE (404)."""

from __future__ import annotations

import re

import fastapi.routing
import pytest
from fastapi import FastAPI
from starlette.routing import Match

from app.config import Settings
from app.main import create_app

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def app(*, shortcut: bool, monkeypatch: pytest.MonkeyPatch) -> FastAPI:
    if not shortcut:
        monkeypatch.setattr("app.main.skip_unmatched_routers", lambda _app: None)
    settings = Settings(_env_file=None, database_url="postgresql+asyncpg://h/db")
    return create_app(settings, background=False)


def matched(app: FastAPI, method: str, path: str) -> tuple[str, object]:
    scope = {"type": "http", "method": method, "path": path, "root_path": "", "headers": [],
             "query_string": b"", "state": {}}  # fmt: skip
    partial: object = None
    for route in app.router.routes:
        match, child = route.matches(scope)
        if match == Match.FULL:
            return "full", child.get("route", route)
        if match == Match.PARTIAL and partial is None:
            partial = child.get("route", route)
    return ("partial", partial) if partial is not None else ("none", None)


def paths(app: FastAPI) -> list[str]:
    """Each API route's path with its parameters filled (with a literal segment of another
    route, too, where one could be mistaken for the other), and one segment more or less."""
    templates = sorted({r.path for r in _api_routes(app)})
    words = sorted({s for t in templates for s in t.split("/") if s and "{" not in s})
    out: set[str] = set()
    for t in templates:
        for fill in ("x", *words[:40]):
            p = re.sub(r"\{[^}]+\}", fill, t)
            out |= {p, p + "/extra", p.rsplit("/", 1)[0] or "/", p + "/"}
    return sorted(out)


def _api_routes(app: FastAPI) -> list[fastapi.routing.APIRoute]:
    found = []
    for route in app.router.routes:
        contexts = getattr(route, "effective_route_contexts", None)
        if contexts is None:
            continue
        found += [c.original_route for c in contexts()]
    return [r for r in found if isinstance(r, fastapi.routing.APIRoute)]


def test_the_shortcut_chooses_the_route_fastapi_chooses(monkeypatch) -> None:
    with_shortcut = app(shortcut=True, monkeypatch=monkeypatch)
    shortcuts = [r for r in with_shortcut.router.routes if "prefiltered" in repr(r.matches)]
    assert len(shortcuts) >= 15  # every included router of REST routes
    monkeypatch.undo()
    without = app(shortcut=False, monkeypatch=monkeypatch)
    assert not [r for r in without.router.routes if "prefiltered" in repr(r.matches)]
    checked = {"full": 0, "partial": 0, "none": 0}
    for path in paths(without):
        for method in METHODS:
            got = matched(with_shortcut, method, path)
            want = matched(without, method, path)
            assert (got[0], getattr(got[1], "path", None), getattr(got[1], "methods", None)) == (
                want[0],
                getattr(want[1], "path", None),
                getattr(want[1], "methods", None),
            ), (method, path)
            checked[got[0]] += 1
    # Every outcome was exercised, many times over.
    assert min(checked.values()) > 100, checked
