import re

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from app.embedded import free_port


async def _server_versions(database_url: str) -> tuple[str, str]:
    u = make_url(database_url)
    conn = await asyncpg.connect(user=u.username, password=u.password,
                                 host=u.query.get("host") or u.host, port=u.port,
                                 database=u.database)  # fmt: skip
    try:
        pg = await conn.fetchval("SHOW server_version")
        vec = await conn.fetchval("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
    finally:
        await conn.close()
    return pg, vec


async def test_healthz_answers(app_factory) -> None:
    async with app_factory() as client:
        r = await client.get("/healthz")
    assert (r.status_code, r.json()) == (200, {"status": "ok"})


async def test_readyz_reports_versions(app_factory, database_url, redis) -> None:
    pg, vec = await _server_versions(database_url)
    redis_version = (await redis.info("server"))["redis_version"]
    async with app_factory() as client:
        r = await client.get("/readyz")
    assert r.status_code == 200
    body = r.json()
    assert body == {
        "status": "ready",
        "postgres": pg,
        "pgvector": vec,
        "timescaledb": body["timescaledb"],
        "redis": redis_version,
        "embedding": {"provider": "none", "loaded": False},
        "tokenizer": {"encoding": "cl100k_base", "loaded": True},
    }
    assert re.fullmatch(r"\d+\.\d+\.\d+", vec)
    assert body["timescaledb"] is None or re.fullmatch(r"\d+\.\d+\.\d+", body["timescaledb"])


async def test_readyz_is_503_naming_redis_when_redis_is_down(app_factory) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    async with app_factory(redis_url=dead) as client:
        r = await client.get("/readyz")
        assert (await client.get("/healthz")).status_code == 200
    assert r.status_code == 503
    assert r.headers["content-type"] == "application/problem+json"
    body = r.json()
    assert body["status"] == 503
    assert body["title"] == "Service unavailable"
    assert body["detail"] == "not ready: redis unavailable"
    assert set(body["unavailable"]) == {"redis"}
    assert body["redis"] is None and body["postgres"] is not None


async def test_readyz_is_503_naming_postgres_when_postgres_is_down(app_factory) -> None:
    dead = f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/htm"
    async with app_factory(database_url=dead) as client:
        r = await client.get("/readyz")
    assert r.status_code == 503
    assert set(r.json()["unavailable"]) == {"postgres"}


async def test_unloadable_tokenizer_is_reported_at_start_and_in_readyz(app_factory, caplog) -> None:
    with caplog.at_level("ERROR"):
        async with app_factory(tiktoken_encoding="no_such_encoding") as client:
            r = await client.get("/readyz")
    assert "tiktoken encoding 'no_such_encoding' could not be loaded" in caplog.text
    assert r.status_code == 503
    body = r.json()
    assert set(body["unavailable"]) == {"tokenizer"}
    assert body["tokenizer"] == {"encoding": "no_such_encoding", "loaded": False}


@pytest.mark.parametrize("path", ["/nope", "/v1/nothing-here"])
async def test_unknown_route_is_problem_json(app_factory, path: str) -> None:
    async with app_factory() as client:
        r = await client.get(path)
    assert r.status_code == 404
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["title"] == "Not found"


@pytest.mark.parametrize("info_nodes", ["default-node", "all"])
async def test_readyz_reports_the_redis_version_on_a_redis_cluster(
    app_factory, redis_cluster, info_nodes: str
) -> None:
    # Which nodes INFO goes to depends on redis-py's version and command policies: one node
    # answers a plain dict, several answer {"host:port": {...}} (older redis-py sends INFO to
    # every node). Both shapes are pinned here by routing the app's client either way.
    node = redis_cluster.get_default_node()
    version = (await redis_cluster.info("server", target_nodes=node))["redis_version"]
    url = f"redis://{node.host}:{node.port}/0"
    async with app_factory(redis_url=url, redis_cluster=True) as client:
        cluster = client.app.state.components.redis
        cluster.command_flags["INFO"] = info_nodes
        if info_nodes == "all":
            assert len(await cluster.info("server")) == 3  # the per-node shape
        r = await client.get("/readyz")
        stats = await client.get("/v1/stats")
    assert r.status_code == 200, r.text
    assert (r.json()["status"], r.json()["redis"]) == ("ready", version)
    assert stats.status_code == 200 and stats.json()["versions"]["redis"] == version
