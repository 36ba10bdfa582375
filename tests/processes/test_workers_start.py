"""`htm serve --workers N` starts its workers once each (issue 43, item 5).

A worker cannot answer the supervisor's health check before its imports are done, which on a
loaded machine took longer than uvicorn's 5 s: it was killed as hung and replaced, again and
again. The local model's ONNX export is made once, by the supervisor before the workers
start, instead of by each of them at once. A worker that dies is replaced with the reason
logged, and every worker's /readyz reports the embedded servers as one process's does.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
import uuid
from collections import Counter
from pathlib import Path

import httpx

from tests.htm_process import Served, leave_nothing_running
from tests.processes.test_several_processes import children

LOAD_S = 8.0


def workers_of(served: Served) -> set[int]:
    assert served.proc is not None
    return {
        p for p in children(served.proc.pid)
        if b"spawn_main" in Path(f"/proc/{p}/cmdline").read_bytes()
    }  # fmt: skip


async def load(url: str, until: float) -> Counter[int]:
    """Eight clients adding memories, each on new connections (spread over the workers)."""
    statuses: Counter[int] = Counter()
    ns = {"X-Namespace": f"t-{uuid.uuid4().hex[:10]}"}

    async def client(i: int) -> None:
        n = 0
        while time.monotonic() < until:
            n += 1
            async with httpx.AsyncClient(base_url=url, headers=ns, timeout=60) as http:
                r = await http.post(f"/v1/robots/r{i}/memories", json={"content": f"note {i} {n}"})
            statuses[r.status_code] += 1

    await asyncio.gather(*(client(i) for i in range(8)))
    return statuses


async def test_three_workers_on_a_fresh_data_directory_start_once_and_export_the_model_once(
    tmp_path: Path,
) -> None:
    """No URLs (embedded PostgreSQL and Redis) and the local model, never exported there."""
    data_dir = tmp_path / "fresh"
    served = Served(data_dir, settings={"embedding_provider": "local"}, args=["--workers", "3"])
    try:
        await asyncio.to_thread(served.start, 240)
        statuses = await load(served.url, time.monotonic() + LOAD_S)
        workers = workers_of(served)
        readiness = []
        for _ in range(12):  # new connections: the kernel spreads them over the workers
            async with httpx.AsyncClient(timeout=10) as http:
                r = await http.get(f"{served.url}/readyz")
            readiness.append((r.status_code, r.json().get("embedded")))
        status = served.stop()
    finally:
        served.kill()
        leave_nothing_running(data_dir)
    log = served.log()
    assert status == 0, log
    assert set(statuses) == {201}, (statuses, log)
    started = re.findall(r"Started server process \[(\d+)\]", log)
    assert len(started) == 3 and {int(p) for p in started} == workers, log
    assert "starting another" not in log, log
    assert log.count("exporting the embedding model all-MiniLM-L6-v2 before the workers") == 1
    assert log.count("exporting the embedding model all-MiniLM-L6-v2 to ONNX in") == 1, log
    running = {"state": "running", "restarts": 0}
    assert readiness == [(200, {"postgres": running, "redis": running})] * 12


async def test_a_worker_that_dies_is_replaced_and_why_is_logged(
    tmp_path: Path, database_url: str, redis_url: str
) -> None:
    served = Served(
        tmp_path / "w",
        settings={"database_url": database_url, "redis_url": redis_url},
        args=["--workers", "2"],
    )
    try:
        await asyncio.to_thread(served.start)
        deadline = time.monotonic() + 60
        while len(workers_of(served)) < 2 or served.log().count("Started server process") < 2:
            assert time.monotonic() < deadline, served.log()
            await asyncio.sleep(0.2)
        victim, survivor = sorted(workers_of(served))
        # Stopped first, so that it dies while the supervisor waits for its health check's
        # answer (checked every 0.5 s): its exit status is still what the log gives.
        os.kill(victim, signal.SIGSTOP)
        await asyncio.sleep(1.5)
        os.kill(victim, signal.SIGKILL)
        line = f"worker process {victim} was killed by SIGKILL: starting another"
        while line not in served.log():
            assert time.monotonic() < deadline, served.log()
            await asyncio.sleep(0.1)
        while served.log().count("Started server process") < 3:
            assert time.monotonic() < deadline, served.log()
            await asyncio.sleep(0.2)
        replaced = workers_of(served)
        status = served.stop()
    finally:
        served.kill()
    assert status == 0, served.log()
    assert survivor in replaced and victim not in replaced and len(replaced) == 2


async def test_every_workers_readyz_reports_what_the_supervisor_knows_of_an_embedded_restart(
    tmp_path: Path,
) -> None:
    from app.embedded import servers_in
    from tests.test_embedded_supervision import until_placed

    served = Served(tmp_path / "data", args=["--workers", "2"])
    try:
        await asyncio.to_thread(served.start)
        [redis] = servers_in(served.data_dir / "redis")
        os.kill(redis, signal.SIGKILL)
        await asyncio.to_thread(until_placed, served, "a", "after")
        restarted = {"state": "running", "restarts": 1}
        deadline, seen = time.monotonic() + 30, []
        while seen[-12:] != [restarted] * 12:  # new connections: both workers answer
            assert time.monotonic() < deadline, (seen, served.log())
            async with httpx.AsyncClient(timeout=10) as http:
                seen.append((await http.get(f"{served.url}/readyz")).json()["embedded"]["redis"])
        status = served.stop()
    finally:
        served.kill()
        leave_nothing_running(served.data_dir)
    assert status == 0, served.log()
