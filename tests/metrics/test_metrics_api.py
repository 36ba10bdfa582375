"""GET /metrics: exact counter deltas for known traffic, route templates as labels, one
registry per app, and who may scrape."""

from __future__ import annotations

import asyncio
import uuid

from prometheus_client.parser import text_string_to_metric_families

from app.embedded import free_port
from tests.auth.test_auth import bearer, make_key

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

MEMORIES = "/v1/robots/{robot}/memories"
MEMORY = "/v1/robots/{robot}/memories/{key}"
RECALL = "/v1/robots/{robot}/recall"


async def scrape(client) -> Samples:
    r = await client.get("/metrics")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=")
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def requests(samples: Samples, method: str, route: str, status: int) -> float:
    return value(samples, "htm_http_requests_total", method=method, route=route, status=str(status))


async def test_known_traffic_moves_each_counter_by_exactly_its_amount(client) -> None:
    robot = f"r-{uuid.uuid4().hex[:8]}"
    before = await scrape(client)
    for i in range(3):
        r = await client.post(f"/v1/robots/{robot}/memories", json={"content": f"note {i} on tea"})
        assert r.status_code == 201
    for strategy in ("fulltext", "hybrid"):
        r = await client.post(
            f"/v1/robots/{robot}/recall", json={"query": "tea", "strategy": strategy}
        )
        assert r.status_code == 200
    assert (await client.get(f"/v1/robots/{robot}/memories/absent")).status_code == 404
    assert (await client.get("/no/such/route")).status_code == 404
    after = await scrape(client)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("htm_memories_added_total") == 3
    assert delta("htm_add_requests_total") == 3
    assert delta("htm_recalls_total", strategy="fulltext") == 1
    assert delta("htm_recalls_total", strategy="hybrid") == 1
    assert delta("htm_recalls_total", strategy="vector") == 0
    # No embedder: the three memories wait for one.
    assert delta("htm_embedding_queue_depth") == 3
    assert requests(after, "POST", MEMORIES, 201) - requests(before, "POST", MEMORIES, 201) == 3
    assert requests(after, "POST", RECALL, 200) - requests(before, "POST", RECALL, 200) == 2
    assert requests(after, "GET", MEMORY, 404) - requests(before, "GET", MEMORY, 404) == 1
    assert requests(after, "GET", "unmatched", 404) - requests(before, "GET", "unmatched", 404) == 1
    # The first scrape is counted by the second.
    assert requests(after, "GET", "/metrics", 200) - requests(before, "GET", "/metrics", 200) == 1
    routes = {dict(labels).get("route") for _, labels in after} - {None}
    assert not any(robot in r or "absent" in r or "/no/such" in r for r in routes)
    assert value(after, "htm_db_pool_connections_in_use") == 0  # none held between requests
    assert value(after, "htm_db_pool_size") == 5


# Per add: the caller's namespace once, the robot once (its registration).
HITS = {"namespace_ids": 4, "robots": 4}


async def test_evictions_and_cache_hits_are_counted(client) -> None:
    robot = f"r-{uuid.uuid4().hex[:8]}"
    r = await client.put(f"/v1/robots/{robot}", json={"working_memory_budget": 12})
    assert r.status_code in (200, 201)
    before = await scrape(client)
    evicted = 0
    for i in range(4):
        r = await client.post(
            f"/v1/robots/{robot}/memories", json={"content": f"the fourth fact number {i}"}
        )
        evicted += len(r.json()["working_memory"]["evicted"])
    after = await scrape(client)
    # Five tokens each, a budget of 12: two fit, each later add evicts the oldest.
    assert evicted == 2
    assert (
        value(after, "htm_working_memory_evictions_total")
        - value(before, "htm_working_memory_evictions_total")
        == evicted
    )
    # Each add looks its namespace and robot up in the process caches: all hits by now.
    for cache in ("namespace_ids", "robots"):
        hits = value(after, "htm_cache_hits_total", cache=cache)
        assert hits - value(before, "htm_cache_hits_total", cache=cache) == HITS[cache], cache
    assert value(after, "htm_cache_entries", cache="namespace_ids") == 1


async def test_two_apps_in_one_process_count_apart(app_factory) -> None:
    async with app_factory() as a, app_factory() as b:
        ns = {"X-Namespace": f"t-{uuid.uuid4().hex[:10]}"}
        before = await scrape(b)
        r = await a.post("/v1/robots/x/memories", json={"content": "only in a"}, headers=ns)
        assert r.status_code == 201
        assert value(await scrape(a), "htm_memories_added_total") == 1
        after = await scrape(b)
        assert (
            value(after, "htm_memories_added_total")
            == value(before, "htm_memories_added_total")
            == 0
        )


async def test_with_auth_on_metrics_need_an_admin_key_unless_public(app_factory) -> None:
    ns = f"t-{uuid.uuid4().hex[:10]}"
    async with app_factory(auth_enabled=True) as client:
        admin = await make_key(client, ns, "admin")
        writer = await make_key(client, ns, "writer")
        assert (await client.get("/metrics")).status_code == 401
        r = await client.get("/metrics", headers=bearer(writer))
        assert r.status_code == 403
        assert r.headers["content-type"] == "application/problem+json"
        assert (await client.get("/metrics", headers=bearer(admin))).status_code == 200
    async with app_factory(auth_enabled=True, metrics_public=True) as client:
        assert (await client.get("/metrics")).status_code == 200


async def test_outages_are_counted_and_the_scrape_still_answers(app_factory) -> None:
    dead_pg = f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/htm"
    async with app_factory(database_url=dead_pg) as client:
        before = await scrape(client)
        for _ in range(2):
            r = await client.post("/v1/robots/a/memories", json={"content": "x"})
            assert r.status_code == 503
        samples = await scrape(client)

    def delta(name: str, **labels: str) -> float:
        return value(samples, name, **labels) - value(before, name, **labels)

    # Every failure a session met: the two adds, and the second scrape's own backlog read.
    assert delta("htm_postgres_errors_total", kind="unavailable") == 3
    assert delta("htm_postgres_errors_total", kind="timeout") == 0
    # The backlog needs the database: left out, the rest is served.
    assert ("htm_embedding_queue_depth", frozenset()) not in samples
    assert requests(samples, "POST", MEMORIES, 503) == 2

    dead_redis = f"redis://127.0.0.1:{free_port()}/0"
    async with app_factory(redis_url=dead_redis) as client:
        ns = {"X-Namespace": f"t-{uuid.uuid4().hex[:10]}"}
        r = await client.post("/v1/robots/a/memories", json={"content": "x"}, headers=ns)
        assert r.status_code == 201
        assert r.json()["working_memory"]["reason"] == "unavailable"
        samples = await scrape(client)
    assert value(samples, "htm_redis_errors_total") == 1
    assert value(samples, "htm_postgres_errors_total", kind="unavailable") == 0


async def test_mcp_requests_are_counted_under_their_own_route(live_server_factory) -> None:
    import httpx

    from tests.mcp.test_mcp_tools import mcp_session

    base = live_server_factory()
    ns = f"t-{uuid.uuid4().hex[:10]}"
    async with mcp_session(base, **{"X-Namespace": ns, "X-Robot": "ann"}) as s:
        added = await s.call_tool("remember", {"key": "tea", "content": "Ann drinks tea"})
        assert not added.is_error, added.content
    # The SDK's client sends the initialized notification without waiting for its answer:
    # its count may land a moment after the call's.
    async with httpx.AsyncClient(base_url=base) as http:
        for _ in range(50):
            samples = await scrape(http)
            mcp = {
                (dict(labels)["method"], dict(labels)["status"]): n
                for (name, labels), n in samples.items()
                if name == "htm_http_requests_total" and dict(labels)["route"] == "/mcp"
            }
            if sum(mcp.values()) >= 4:
                break
            await asyncio.sleep(0.05)
    # Each a POST (stateless): initialize, the tool call, the tool list the client reads the
    # output schema from (200 each), and the initialized notification (202).
    assert mcp == {("POST", "200"): 3, ("POST", "202"): 1}
    assert requests(samples, "POST", "unmatched", 200) == 0


async def test_docs_pages_and_assets_are_counted_under_their_own_routes(app_factory) -> None:
    # Plain Starlette routes and a mount (app/http/routing.label_plain_routes): the spec, the
    # docs pages and their static files each under their path, none under "unmatched".
    async with app_factory() as client:
        before = await scrape(client)
        for path in ("/docs", "/redoc", "/docs/oauth2-redirect", "/openapi.json"):
            assert (await client.get(path)).status_code == 200, path
        for asset in ("swagger-ui.css", "swagger-ui-bundle.js", "redoc.standalone.js"):
            assert (await client.get(f"/docs-assets/{asset}")).status_code == 200, asset
        assert (await client.get("/docs-assets/no-such-file.js")).status_code == 404
        after = await scrape(client)

    def delta(method: str, route: str, status: int) -> float:
        return requests(after, method, route, status) - requests(before, method, route, status)

    counted = {
        (dict(labels)["route"], dict(labels)["status"]): n - before.get((name, labels), 0.0)
        for (name, labels), n in after.items()
        if name == "htm_http_requests_total"
        and n != before.get((name, labels), 0.0)
        and dict(labels)["route"] != "/metrics"
    }
    assert counted == {
        ("/docs", "200"): 1,
        ("/redoc", "200"): 1,
        ("/docs/oauth2-redirect", "200"): 1,
        ("/openapi.json", "200"): 1,
        ("/docs-assets/{path}", "200"): 3,
        ("/docs-assets/{path}", "404"): 1,
    }
    assert delta("GET", "unmatched", 200) == delta("GET", "unmatched", 404) == 0
