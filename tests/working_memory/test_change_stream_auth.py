"""A change stream lives no longer than the key that opened it: a revocation ends it (in the
process that revoked the key at once, in another within the key cache's 1 s) and no change
made after that reaches it."""

from __future__ import annotations

import asyncio
import json
import uuid

import httpx

from tests.auth.test_auth import bearer, make_key


async def _events(response: httpx.Response) -> list[tuple[str, dict]]:
    """Every event of the stream until the server ends it (10 s at most)."""
    got: list[tuple[str, dict]] = []
    event: dict[str, str] = {}
    async with asyncio.timeout(10):
        async for line in response.aiter_lines():
            if line.startswith(":"):
                continue
            if not line:
                if event:
                    got.append((event["event"], json.loads(event["data"])))
                    event = {}
                continue
            name, _, value = line.partition(": ")
            event[name] = value
    return got


async def _revoke(http: httpx.AsyncClient, admin: str, key: str) -> None:
    listed = (await http.get("/v1/keys", headers=bearer(admin))).json()
    (found,) = [k for k in listed if key.startswith(k["prefix"])]
    r = await http.delete(f"/v1/keys/{found['id']}", headers=bearer(admin))
    assert r.status_code == 200, r.text


async def _add(http: httpx.AsyncClient, writer: str, key: str) -> None:
    r = await http.post(
        "/v1/robots/desk/memories",
        json={"key": key, "content": f"the fact {key}"},
        headers=bearer(writer),
    )
    assert r.status_code == 201, r.text


async def test_a_revoked_key_s_stream_ends_and_gets_nothing_added_after_the_revocation(
    app_factory, live_server_factory
) -> None:
    ns = f"t-{uuid.uuid4().hex[:10]}"
    async with app_factory(auth_enabled=True) as bootstrap:
        admin, writer, reader = [
            await make_key(bootstrap, ns, role, role) for role in ("admin", "writer", "reader")
        ]
    one = live_server_factory(auth_enabled=True)
    two = live_server_factory(auth_enabled=True)  # another process: its own key cache
    async with (
        httpx.AsyncClient(base_url=one, timeout=10) as a,
        httpx.AsyncClient(base_url=two, timeout=10) as b,
    ):
        await _add(a, writer, "before")
        for server, same_process in ((a, True), (b, False)):
            key = reader if same_process else await _new_reader(a, admin)
            async with server.stream(
                "GET", "/v1/robots/desk/working-memory/events", headers=bearer(key)
            ) as response:
                assert response.status_code == 200
                reading = asyncio.create_task(_events(response))
                await asyncio.sleep(0.3)  # the snapshot is out; the stream follows
                await _revoke(a, admin, key)
                if not same_process:
                    # Every other route of the other process may still take the key for up
                    # to the cache's 1 s; after that, nothing of it.
                    await asyncio.sleep(1.1)
                after = f"after-{'same' if same_process else 'other'}"
                await _add(a, writer, after)
                got = await reading
            assert [kind for kind, _ in got] == ["snapshot", "closed"]
            assert got[-1][1] == {"reason": "unauthorized"}
            assert [i["key"] for i in got[0][1]["items"]] == (
                ["before"] if same_process else ["before", "after-same"]
            )
            r = await server.get("/v1/robots/desk/working-memory/events", headers=bearer(key))
            assert r.status_code == 401


async def _new_reader(http: httpx.AsyncClient, admin: str) -> str:
    r = await http.post("/v1/keys", json={"name": "other", "role": "reader"}, headers=bearer(admin))
    assert r.status_code == 201, r.text
    return str(r.json()["key"])
