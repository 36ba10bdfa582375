"""Pools (issue 35): grants taking effect at once (reads, working memory, an open change
stream), writes needing the write grant, statistics, and a task pool that expires: archived,
its memories kept and read by nobody."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from tests.working_memory.test_change_stream import Events

PROBLEM = "application/problem+json"


async def held(client, robot: str) -> set[str]:
    r = await client.get(f"/v1/robots/{robot}/working-memory")
    assert r.status_code == 200, r.text
    return {i["key"] for i in r.json()["items"]}


async def recalled(client, robot: str, pools: list[str]) -> list[str]:
    body = {"query": "deploy", "strategy": "fulltext", "pools": pools}
    r = await client.post(f"/v1/robots/{robot}/recall", json=body)
    assert r.status_code == 200, r.text
    return [h["key"] for h in r.json()["hits"]]


async def pool_world(client) -> None:
    body = {"type": "team", "writers": ["wes"], "readers": ["rae", "ray"]}
    r = await client.put("/v1/pools/ops", json=body)
    assert r.status_code == 200, r.text
    assert r.json() | {"created_at": None, "updated_at": None} == {
        "name": "ops", "type": "team", "readers": ["rae", "ray"], "writers": ["wes"],
        "public_read": False, "expires_at": None, "archived_at": None, "created_at": None,
        "updated_at": None, "stats": None,
    }  # fmt: skip
    for key in ("deploy-1", "deploy-2"):
        r = await client.post(
            "/v1/robots/wes/memories",
            json={"key": key, "content": f"deploy rule {key}", "pool": "ops"},
        )
        assert r.status_code == 201, r.text
        assert r.json()["pool"] == "ops"


async def test_grants_decide_reads_and_writes_and_stats_count_the_pool(client) -> None:
    await pool_world(client)
    assert sorted(await recalled(client, "rae", ["ops"])) == ["deploy-1", "deploy-2"]
    r = await client.post("/v1/robots/zed/recall", json={"query": "deploy", "pools": ["ops"]})
    assert r.status_code == 403 and r.headers["content-type"] == PROBLEM
    assert await recalled(client, "zed", []) == []
    # Writing needs the write grant; a reader is refused and nothing is stored.
    r = await client.post("/v1/robots/rae/memories", json={"content": "x", "pool": "ops"})
    assert r.status_code == 403
    r = await client.put("/v1/pools/ops/grants/rae", json={"level": "write"})
    assert (r.json()["readers"], r.json()["writers"]) == (["ray"], ["wes", "rae"])
    r = await client.post(
        "/v1/robots/rae/memories",
        json={"key": "deploy-3", "content": "deploy rule 3", "pool": "ops"},
    )
    assert r.status_code == 201, r.text
    stats = (await client.get("/v1/pools/ops")).json()["stats"]
    assert stats == {"memories": 3, "tokens": stats["tokens"], "by_author": {"rae": 1, "wes": 2}}
    tokens = [
        (await client.get(f"/v1/robots/wes/memories/{k}")).json()["token_count"]
        for k in ("deploy-1", "deploy-2", "deploy-3")
    ]
    assert stats["tokens"] == sum(tokens) == 14
    # public_read: every robot reads it.
    r = await client.put(
        "/v1/pools/ops", json={"type": "team", "writers": ["wes"], "public_read": True}
    )
    assert r.status_code == 200
    assert len(await recalled(client, "zed", ["ops"])) == 3


async def test_a_revoke_withdraws_the_pool_from_working_memory_at_once(client) -> None:
    await pool_world(client)
    await recalled(client, "rae", ["ops"])
    await recalled(client, "ray", ["ops"])
    assert await held(client, "rae") == await held(client, "ray") == {"deploy-1", "deploy-2"}
    r = await client.delete("/v1/pools/ops/grants/rae")
    assert r.status_code == 200 and r.json()["readers"] == ["ray"]
    # In the revoke's own response time: rae holds none of them, ray (still granted) both.
    assert await held(client, "rae") == set()
    assert await held(client, "ray") == {"deploy-1", "deploy-2"}
    assert (await client.get("/v1/robots/rae/memories/deploy-1")).status_code == 404
    r = await client.get("/v1/robots/rae/context", params={"max_tokens": 1000})
    assert "deploy rule" not in r.json()["text"]
    # Deleting the pool archives it: nobody reads it, its memories are kept.
    r = await client.delete("/v1/pools/ops")
    assert r.status_code == 200 and r.json()["archived_at"] is not None
    assert await held(client, "ray") == set()
    assert (await client.get("/v1/robots/wes/memories/deploy-1")).status_code == 404
    r = await client.put("/v1/pools/ops", json={"type": "team", "readers": ["ray"]})
    assert r.json()["archived_at"] is None
    assert (await client.get("/v1/robots/ray/memories/deploy-1")).status_code == 200


async def test_a_revoke_reaches_an_open_change_stream(live_server_factory) -> None:
    url = live_server_factory()
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        http.headers["X-Namespace"] = f"t-{uuid.uuid4().hex[:12]}"
        await pool_world(http)
        await recalled(http, "rae", ["ops"])
        async with Events(http, "rae") as stream:
            kind, snap = await stream.next()
            assert kind == "snapshot"
            assert sorted(i["key"] for i in snap["items"]) == ["deploy-1", "deploy-2"]
            assert (await http.delete("/v1/pools/ops/grants/rae")).status_code == 200
            assert sorted(await stream.take(2)) == [
                ("removed", "deploy-1"),
                ("removed", "deploy-2"),
            ]


async def test_an_expired_task_pool_is_archived_never_lost(client) -> None:
    soon = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    r = await client.put(
        "/v1/pools/sprint", json={"type": "task", "writers": ["wes"], "expires_at": soon}
    )
    assert r.status_code == 200, r.text
    r = await client.post(
        "/v1/robots/wes/memories",
        json={"key": "s1", "content": "sprint deploy note", "pool": "sprint"},
    )
    assert r.status_code == 201
    await recalled(client, "wes", ["sprint"])
    assert await held(client, "wes") == {"s1"}
    past = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
    r = await client.put(
        "/v1/pools/sprint", json={"type": "task", "writers": ["wes"], "expires_at": past}
    )
    assert r.status_code == 200
    # Expired: read by nobody at once, and written by nobody.
    assert (await client.get("/v1/robots/wes/memories/s1")).status_code == 404
    assert await held(client, "wes") == set()
    r = await client.post("/v1/robots/wes/memories", json={"content": "late", "pool": "sprint"})
    assert r.status_code == 409
    # The retention run archives it; the memory is still there for the operator (export).
    run = (await client.post("/v1/retention/run", json={})).json()
    assert run["pools_expired"] == ["sprint"]
    assert (await client.get("/v1/pools/sprint")).json()["archived_at"] is not None
    assert (await client.post("/v1/retention/run", json={})).json()["pools_expired"] == []
    async with client.app.state.components.sessionmaker() as s:
        from sqlalchemy import text

        row = (
            await s.execute(text("SELECT deleted_at, visibility FROM memory WHERE key = 's1'"))
        ).one()
    assert tuple(row) == (None, "pool")


async def test_a_pool_created_or_revived_already_expired_is_422(client) -> None:
    past = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
    expired = {"type": "task", "writers": ["wes"], "expires_at": past}
    r = await client.put("/v1/pools/late", json=expired)
    assert (r.status_code, r.headers["content-type"]) == (422, PROBLEM), r.text
    [error] = r.json()["errors"]
    assert error["field"] == "body.expires_at"
    assert error["message"].endswith("already past: the pool would never open")
    assert (await client.get("/v1/pools")).json() == []
    # Archived, then revived already expired: refused too, and it stays archived.
    soon = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    r = await client.put("/v1/pools/late", json={**expired, "expires_at": soon})
    assert r.status_code == 200
    assert (await client.delete("/v1/pools/late")).status_code == 200
    r = await client.put("/v1/pools/late", json=expired)
    assert r.status_code == 422
    assert (await client.get("/v1/pools/late")).json()["archived_at"] is not None


@pytest.mark.parametrize(
    "body",
    [
        {"type": "task"},  # a task pool needs its expiry
        {"type": "team", "expires_at": "2030-01-01T00:00:00Z"},
        {"type": "club"},
        {"type": "team", "readers": ["not a name"]},
        {"type": "team", "extra": 1},
    ],
)
async def test_bad_pool_input_is_422_and_writes_nothing(client, body) -> None:
    r = await client.put("/v1/pools/p1", json=body)
    assert r.status_code == 422 and r.headers["content-type"] == PROBLEM
    assert (await client.get("/v1/pools")).json() == []
    r = await client.put("/v1/pools/p1/grants/rae", json={"level": "admin"})
    assert r.status_code == 422
    r = await client.put("/v1/pools/p1/grants/rae", json={"level": "read"})
    assert r.status_code == 404


async def test_a_revoke_racing_recalls_never_leaves_the_pool_in_working_memory(client) -> None:
    """A recall that read the pool before a revoke and places after it: the placement checks
    the grant under the pool row's share lock (`not_readable`), or the revoke waits for it and
    withdraws what it placed. Either way, once both answered, nothing of the pool is held."""
    import asyncio

    await pool_world(client)
    body = {"query": "deploy", "strategy": "fulltext", "pools": ["ops"]}
    assert (await client.put("/v1/robots/rae", json={})).status_code == 200
    outcomes: set[int] = set()
    for _ in range(12):
        r = await client.put("/v1/pools/ops/grants/rae", json={"level": "read"})
        assert r.status_code == 200
        assert (await client.delete("/v1/robots/rae/working-memory")).status_code == 200
        recalls = [client.post("/v1/robots/rae/recall", json=body) for _ in range(3)]
        revoke = client.delete("/v1/pools/ops/grants/rae")
        *answers, revoked = await asyncio.gather(*recalls, revoke)
        assert revoked.status_code == 200
        outcomes |= {a.status_code for a in answers}
        assert {a.status_code for a in answers} <= {200, 403}
        assert await held(client, "rae") == set()
    assert 200 in outcomes  # some recall did read the pool before its revoke
