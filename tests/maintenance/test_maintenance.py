"""Scheduled reflection (issue 33): the schedule, a run's steps with exact outcomes, a second
run that writes nothing twice, a run cut off half way (the LLM down in the summaries step)
finished by the next, and the worker starting runs when the schedule says."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from sqlalchemy import text

PROBLEM = "application/problem+json"
NOW = datetime(2027, 3, 10, 4, 0, tzinfo=UTC)
DAY = "2027-03-09"


async def add(client, robot: str = "a", **body) -> dict:
    r = await client.post(f"/v1/robots/{robot}/memories", json=body)
    assert r.status_code == 201, r.text
    return r.json()


async def period(client, robot: str, n: int) -> None:
    memories = [
        {"key": f"{robot}-{i:02d}", "content": f"Step {i} of the Orion rollout by {robot} is done.",
         "created_at": f"{DAY}T{1 + i // 6:02d}:{(i * 7) % 60:02d}:00Z"}
        for i in range(n)
    ]  # fmt: skip
    r = await client.post(f"/v1/robots/{robot}/memories/batch", json={"memories": memories})
    assert r.status_code == 201, r.text


async def summaries(client, ns: str) -> dict[str, tuple[str, dict]]:
    async with client.app.state.components.sessionmaker() as s:
        rows = await s.execute(
            text(
                "SELECT m.key, m.content, m.metadata FROM memory m "
                "JOIN namespace n ON n.id = m.namespace_id "
                "WHERE n.name = :ns AND m.type = 'summary' ORDER BY m.key"
            ),
            {"ns": ns},
        )
        return {r.key: (r.content, r.metadata) for r in rows}


async def test_the_schedule_round_trips_and_bad_ones_are_422(client) -> None:
    default = {"schedule": None, "steps": ["dedupe", "retention", "summaries", "supersede"],
               "dedupe": "exact"}  # fmt: skip
    assert (await client.get("/v1/maintenance")).json() == default
    body = {"schedule": "30 3 * * *", "steps": ["supersede", "dedupe"], "dedupe": "semantic"}
    r = await client.put("/v1/maintenance", json=body)
    assert r.status_code == 200, r.text
    want = {**body, "steps": ["dedupe", "supersede"]}  # always run in their order
    assert r.json() == want
    assert (await client.get("/v1/maintenance")).json() == want
    for bad in (
        {"schedule": "61 * * * *"},
        {"schedule": "every night"},
        {"steps": ["dedupe", "dedupe"]},
        {"steps": ["vacuum"]},
        {"dedupe": "fuzzy"},
    ):
        r = await client.put("/v1/maintenance", json=bad)
        assert (r.status_code, r.headers["content-type"]) == (422, PROBLEM), (bad, r.text)
    assert (await client.get("/v1/maintenance")).json() == want


@pytest.mark.parametrize(
    ("schedule", "says"),
    [
        ("0 0 31 2 *", "never fires: day 31 of month 2 does not exist"),
        ("0 0 30,31 2 *", "never fires: day 30,31 of month 2 does not exist"),
        ("15 4 31 4,6,9,11 *", "never fires: day 31 of month 4,6,9,11 does not exist"),
    ],
)
async def test_a_schedule_that_never_fires_is_422_naming_it(client, schedule, says) -> None:
    r = await client.put("/v1/maintenance", json={"schedule": schedule})
    assert (r.status_code, r.headers["content-type"]) == (422, PROBLEM), r.text
    assert [(e["field"], e["message"]) for e in r.json()["errors"]] == [
        ("body.schedule", f"Value error, {says}")
    ]
    assert (await client.get("/v1/maintenance")).json()["schedule"] is None


async def test_a_schedule_of_a_day_some_years_have_is_taken(client) -> None:
    for schedule in ("0 0 29 2 *", "0 0 31 2 1", "0 0 31 2,3 *"):  # leap years; or Mondays
        r = await client.put("/v1/maintenance", json={"schedule": schedule})
        assert (r.status_code, r.json()["schedule"]) == (200, schedule)


@pytest.fixture
async def seeded(client):
    await add(
        client,
        key="dup-1",
        content="The build server is in rack 4",
        created_at="2027-01-01T00:00:00Z",
    )
    await add(client, key="dup-2", content="The build server is in rack 4", importance=3,
              created_at="2027-01-02T00:00:00Z")  # fmt: skip
    await add(client, key="old-note", content="Buy milk", type="note",
              created_at="2026-12-01T00:00:00Z")  # fmt: skip
    await period(client, "r1", 25)
    await period(client, "r2", 6)
    await period(client, "r3", 3)  # under 5: no summary
    city = {"subject": "ana", "attribute": "city"}
    await add(client, key="city-old", content="Ana lives in Lisbon", metadata=city,
              created_at="2027-03-01T00:00:00Z")  # fmt: skip
    await add(client, key="city-new", content="Ana lives in Berlin", metadata=city,
              created_at=f"{DAY}T12:00:00Z", supersede="off")  # fmt: skip
    messages = [{"role": "user" if i % 2 else "assistant", "content": f"Message {i} is here."}
                for i in range(45)]  # fmt: skip
    r = await client.post("/v1/robots/r4/sessions/s1/messages", json={"messages": messages})
    assert r.status_code == 201, r.text
    r = await client.put(
        "/v1/retention", json={"policies": [{"type": "note", "rule": "idle", "days": 30}]}
    )
    assert r.status_code == 200
    client.app.state.components.clock.set(lambda: NOW)
    return client


async def session_id(client, ns: str) -> int:
    async with client.app.state.components.sessionmaker() as s:
        return (
            await s.execute(
                text(
                    "SELECT s.id FROM session s JOIN namespace n ON n.id = s.namespace_id "
                    "WHERE n.name = :ns AND s.name = 's1'"
                ),
                {"ns": ns},
            )
        ).scalar_one()


async def test_a_run_does_each_step_and_a_second_writes_nothing_twice(seeded, ns) -> None:
    sid = await session_id(seeded, ns)
    keys = [f"reflection:r1:{DAY}", f"reflection:r2:{DAY}", f"reflection:session:{sid}:45"]
    r = await seeded.post("/v1/maintenance/run")
    assert r.status_code == 200, r.text
    run = r.json()
    assert (run["status"], run["trigger"], run["error"]) == ("done", "request", None)
    proposals = [{"key": "city-new", "supersedes": "city-old", "rule": "subject_attribute"}]
    assert run["steps"] == {
        "dedupe": {"clusters": 1, "merged": ["dup-1"]},
        "retention": {"archived": 1, "policies": [{"rule": "idle", "keys": ["old-note"]}]},
        "summaries": {"written": keys, "already": []},
        "supersede": {"proposals": proposals},
    }
    written = await summaries(seeded, ns)
    assert sorted(written) == sorted(keys)
    r1, meta = written[keys[0]]
    assert r1.startswith("Summary of 25 memories in 2 parts: ")
    assert (meta["summarised"], meta["chunks"], meta["reflection"]) == (25, 2, "period")
    assert seeded.app.state.components.tokenizer.count(r1) <= 200
    assert written[keys[1]][0].startswith("Summary of 6 memories: ")
    assert written[keys[2]][0].startswith("Summary of 45 messages in 3 parts: ")

    again = (await seeded.post("/v1/maintenance/run")).json()
    assert again["id"] == run["id"] + 1
    assert again["steps"] == {
        "dedupe": {"clusters": 0, "merged": []},
        "retention": {"archived": 0, "policies": [{"rule": "idle", "keys": []}]},
        "summaries": {"written": [], "already": keys},
        "supersede": {"proposals": proposals},
    }
    assert sorted(await summaries(seeded, ns)) == sorted(keys)
    listed = (await seeded.get("/v1/maintenance/runs")).json()["runs"]
    assert [(x["id"], x["status"]) for x in listed] == [(again["id"], "done"), (run["id"], "done")]


def chat(content: str) -> tuple[int, dict]:
    return 200, {"choices": [{"message": {"role": "assistant", "content": content}}]}


@pytest.fixture
async def llm_client(app_factory, ns, stub):
    async with app_factory(llm_provider="openai", llm_url=stub.url, enrich_interval_s=3600) as c:
        c.headers["X-Namespace"] = ns
        yield c
        async with c.app.state.components.sessionmaker() as s, s.begin():
            await s.execute(
                text(
                    "UPDATE memory SET enrichment_status = 'done' FROM namespace n "
                    "WHERE n.id = memory.namespace_id AND n.name = :ns"
                ),
                {"ns": ns},
            )


async def test_a_run_cut_off_half_way_is_finished_by_the_next(llm_client, stub, ns) -> None:
    c = llm_client
    await period(c, "r1", 25)
    await period(c, "r2", 6)
    assert (await c.put("/v1/maintenance", json={"steps": ["summaries"]})).status_code == 200
    c.app.state.components.clock.set(lambda: NOW)

    def model(req) -> tuple[int, dict]:
        if "by r2" in json.dumps(req.body):
            return 503, {"error": "overloaded"}
        return chat("The Orion rollout moved on.")

    stub.reply = model
    r = await c.post("/v1/maintenance/run")
    assert (r.status_code, r.json()["dependency"]) == (503, "llm"), r.text
    [cut] = (await c.get("/v1/maintenance/runs")).json()["runs"]
    assert (cut["status"], cut["steps"], cut["finished_at"]) == ("running", {}, None)
    assert list(await summaries(c, ns)) == [f"reflection:r1:{DAY}"]  # r1's was written

    stub.reply = lambda req: chat("The Orion rollout moved on.")
    done = (await c.post("/v1/maintenance/run")).json()
    assert (done["id"], done["status"]) == (cut["id"], "done")  # the same run, finished
    assert done["steps"] == {
        "summaries": {"written": [f"reflection:r2:{DAY}"], "already": [f"reflection:r1:{DAY}"]}
    }
    written = await summaries(c, ns)
    assert sorted(written) == [f"reflection:r1:{DAY}", f"reflection:r2:{DAY}"]
    assert written[f"reflection:r1:{DAY}"][0] == (
        "Summary of 25 memories in 2 parts: The Orion rollout moved on."
    )


async def test_the_worker_runs_what_the_schedule_names(app_factory, ns) -> None:
    async with app_factory() as c:
        c.headers["X-Namespace"] = ns
        clock = c.app.state.components.clock
        worker = c.app.state.components.maintenance_worker
        clock.set(lambda: datetime(2027, 3, 10, 3, 0, tzinfo=UTC))
        body = {"schedule": "30 3 * * *", "steps": ["supersede"]}
        assert (await c.put("/v1/maintenance", json=body)).status_code == 200

        async def runs() -> list[str]:
            listed = (await c.get("/v1/maintenance/runs")).json()["runs"]
            return [x["trigger"] for x in listed]

        clock.set(lambda: datetime(2027, 3, 10, 3, 29, tzinfo=UTC))
        await worker.run_once()
        assert await runs() == []
        clock.set(lambda: datetime(2027, 3, 10, 3, 31, tzinfo=UTC))
        await worker.run_once()
        assert await runs() == ["schedule"]
        await worker.run_once()  # the same minute: not again
        assert await runs() == ["schedule"]
        clock.set(lambda: datetime(2027, 3, 11, 3, 30, tzinfo=UTC))
        await worker.run_once()
        assert await runs() == ["schedule", "schedule"]
        metrics = (await c.get("/metrics")).text
        assert "htm_maintenance_runs_total" in metrics
