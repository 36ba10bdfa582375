"""Every request dependency is a coroutine: FastAPI runs a plain `def` (or a class) in a worker
thread, a hand-off that cost ~10% of a simple request's CPU."""

import inspect

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from app.main import create_app


def _calls(dependant: Dependant) -> list[object]:
    out = []
    for sub in dependant.dependencies:
        out.append(sub.call)
        out.extend(_calls(sub))
    return out


def _api_routes(routes: list[object]) -> list[APIRoute]:
    out = []
    for r in routes:
        if isinstance(r, APIRoute):
            out.append(r)
        inner = getattr(r, "original_router", None) or getattr(r, "routes", None)
        if inner is not None:
            out.extend(_api_routes(getattr(inner, "routes", inner)))
    return out


def test_every_dependency_of_every_route_is_async() -> None:
    app = create_app()
    sync = set()
    routes = _api_routes(app.routes)
    assert len(routes) > 15
    for route in routes:
        for call in _calls(route.dependant):
            if not (inspect.iscoroutinefunction(call) or inspect.isasyncgenfunction(call)):
                sync.add(getattr(call, "__qualname__", repr(call)))
    assert sync == set()


def test_every_route_parses_json_bodies_with_orjson() -> None:
    routes = _api_routes(create_app().routes)
    assert {type(r).__name__ for r in routes} == {"ApiRoute"}
