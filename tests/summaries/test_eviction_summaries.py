"""Eviction summaries end to end: a robot with `summarize_evictions` gets a `summary` memory of
what its working memory dropped, written by the worker, placed if it fits, exactly once."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import text

from app.summaries.extract import HEADER


@pytest.fixture
async def client(app_factory, ns: str):  # type: ignore[no-untyped-def]
    # The worker runs when the test says so (run_once), not on its own timer.
    async with app_factory(summary_interval_s=3600, summary_target_tokens=40) as c:
        c.headers["X-Namespace"] = ns
        yield c


async def add(client: httpx.AsyncClient, robot: str, key: str, content: str, imp: float) -> list:
    r = await client.post(
        f"/v1/robots/{robot}/memories", json={"key": key, "content": content, "importance": imp}
    )
    assert r.status_code == 201, r.text
    return r.json()["working_memory"]["evicted"]  # type: ignore[no-any-return]


async def run_worker(client: httpx.AsyncClient) -> int:
    return await client.app.state.components.summary_worker.run_once()  # type: ignore[attr-defined]


async def summaries(client: httpx.AsyncClient, robot: str) -> list[dict]:
    r = await client.get(f"/v1/robots/{robot}/memories", params={"type": "summary"})
    assert r.status_code == 200, r.text
    return r.json()["items"]  # type: ignore[no-any-return]


async def evict_lunch_and_db(client: httpx.AsyncClient) -> None:
    r = await client.put(
        "/v1/robots/a", json={"working_memory_budget": 60, "summarize_evictions": True}
    )
    assert (r.status_code, r.json()["summarize_evictions"]) == (200, True)
    await add(client, "a", "db", "Staging runs PostgreSQL 18. It was upgraded in May.", 6)
    await add(client, "a", "lunch", "Lunch is at noon.", 1)
    # 13 + 6 + 51 tokens > 60: lunch (importance 1) goes, then still 64: db (6)
    assert await add(client, "a", "big", "word " * 50, 9) == ["lunch", "db"]


SUMMARY = "Lunch is at noon. Staging runs PostgreSQL 18. It was upgraded in May."


async def test_what_working_memory_drops_becomes_one_summary_placed_where_it_fits(
    client,
) -> None:
    await evict_lunch_and_db(client)
    assert (await client.delete("/v1/robots/a/memories/big")).status_code == 200  # room now

    assert await run_worker(client) == 1
    [s] = await summaries(client, "a")
    assert s["content"] == HEADER.format(n=2) + SUMMARY
    assert (s["type"], s["importance"], s["author"]) == ("summary", 6.0, "a")
    assert s["metadata"]["summary_of"] == ["lunch", "db"]
    assert s["metadata"]["summarised"] == 2
    assert s["key"] == f"summary:{s['key'].split(':')[1]}:{s['metadata']['through_event']}"
    # The trace is what working memory holds now, and there is nothing new to summarise.
    wm = (await client.get("/v1/robots/a/working-memory")).json()
    assert [i["key"] for i in wm["items"]] == [s["key"]]
    assert await run_worker(client) == 0
    assert len(await summaries(client, "a")) == 1


async def test_a_summary_that_does_not_fit_is_stored_and_evicts_nothing(client) -> None:
    await evict_lunch_and_db(client)  # "big" (51 tokens) stays: a 29-token summary cannot fit

    assert await run_worker(client) == 1
    [s] = await summaries(client, "a")
    assert s["content"] == HEADER.format(n=2) + SUMMARY
    wm = (await client.get("/v1/robots/a/working-memory")).json()
    assert [i["key"] for i in wm["items"]] == ["big"]


async def test_robots_without_summaries_and_evictions_before_turning_on_are_left_alone(
    client,
) -> None:
    await client.put("/v1/robots/off", json={"working_memory_budget": 20})
    await add(client, "off", "x", "one two three four five six seven eight nine ten", 1)
    y = "one two three four five six seven eight nine ten eleven"
    assert await add(client, "off", "y", y, 2) == ["x"]
    await client.put("/v1/robots/late", json={"working_memory_budget": 20})
    await add(client, "late", "lx", "one two three four five six seven eight nine ten", 1)
    assert await add(client, "late", "ly", "eleven twelve thirteen fourteen fifteen sixteen "
                     "seventeen eighteen nineteen twenty more", 2) == ["lx"]  # fmt: skip
    r = await client.put(
        "/v1/robots/late", json={"working_memory_budget": 20, "summarize_evictions": True}
    )
    assert r.json()["summarize_evictions"] is True
    assert await run_worker(client) == 0
    assert await summaries(client, "off") == [] and await summaries(client, "late") == []


async def test_a_pass_that_stopped_before_moving_its_watermark_writes_no_second_summary(
    client,
) -> None:
    await client.put(
        "/v1/robots/b", json={"working_memory_budget": 30, "summarize_evictions": True}
    )
    await add(client, "b", "old", "The old note. It mattered once.", 2)
    await add(client, "b", "new", "word " * 25, 5)
    assert await run_worker(client) == 1
    # As if the pass had crashed after its add: the watermark goes back.
    async with client.app.state.components.sessionmaker() as s:  # type: ignore[attr-defined]
        await s.execute(
            text(
                "UPDATE robot SET summarized_through = 0 WHERE name = 'b' AND namespace_id = "
                "(SELECT id FROM namespace WHERE name = :ns)"
            ),
            {"ns": client.headers["X-Namespace"]},
        )
        await s.commit()
    assert await run_worker(client) == 0  # the key is taken: only the watermark moves
    assert len(await summaries(client, "b")) == 1
    assert await run_worker(client) == 0


async def test_summarize_evictions_must_be_a_boolean(client) -> None:
    r = await client.put("/v1/robots/c", json={"summarize_evictions": "sometimes"})
    assert (r.status_code, r.headers["content-type"]) == (422, "application/problem+json")
    assert (await client.get("/v1/robots/c")).status_code == 404


async def test_with_an_llm_the_summary_is_the_model_s_and_an_outage_loses_nothing(
    app_factory, ns, stub
) -> None:
    reply = "Staging runs PostgreSQL 18, upgraded in May. Lunch is at noon. " + "More. " * 40
    stub.reply = lambda _r: (503, {"error": "down"})
    async with app_factory(
        summary_interval_s=3600,
        summary_target_tokens=40,
        llm_provider="openai",
        llm_url=stub.url,
        enrich_interval_s=3600,
    ) as c:
        c.headers["X-Namespace"] = ns
        await evict_lunch_and_db(c)
        assert await run_worker(c) == 0  # the LLM is down: nothing written, nothing lost
        assert await summaries(c, "a") == []
        stub.reply = lambda _r: (
            200,
            {"choices": [{"message": {"role": "assistant", "content": reply}}]},
        )
        assert await run_worker(c) == 1
        [s] = await summaries(c, "a")
    # Cut at whole sentences to the target (40 tokens with the header).
    assert s["content"] == HEADER.format(n=2) + (
        "Staging runs PostgreSQL 18, upgraded in May. Lunch is at noon. " + " ".join(["More."] * 7)
    )
    assert s["metadata"]["summary_of"] == ["lunch", "db"]
    asked = stub.requests[-1].body["messages"]
    assert asked[1]["content"] == (
        "- (6) Staging runs PostgreSQL 18. It was upgraded in May.\n- (1) Lunch is at noon."
    )
