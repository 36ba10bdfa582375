"""The REST routes, one module per resource. Each route reads its parameters, asks the
request's unit of work (app/unit.py) for the service it needs and returns the service's
answer: no rule and no SQL here."""

from fastapi import APIRouter

from app.http.routes import (
    dashboard,
    entities,
    facts,
    groups,
    health,
    keys,
    links,
    maintenance,
    memories,
    metrics,
    pools,
    profiles,
    prompt,
    recall,
    retention,
    robots,
    sessions,
    snapshots,
    state,
    stats,
    tags,
    working_memory,
)

# In the order the OpenAPI spec lists them.
ROUTERS: tuple[APIRouter, ...] = tuple(
    m.router
    for m in (
        health,
        robots,
        groups,
        pools,
        memories,
        links,
        facts,
        entities,
        recall,
        working_memory,
        state,
        snapshots,
        sessions,
        profiles,
        prompt,
        stats,
        keys,
        metrics,
        tags,
        retention,
        maintenance,
        dashboard,
    )
)
