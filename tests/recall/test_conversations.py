"""Conversation memories (metadata `speaker` / `session`): the search text built from a turn's
context, the speakers a question names, a hit's neighbouring turns, and the relevance floor
(issue 31). The app has no embedder: vectors are the client's, so similarities are exact."""

from __future__ import annotations

import math
from typing import Any

import httpx
import numpy as np
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from app.config import Settings
from tests.stubs import Recorded, StubServer
from tests.vectors import similarity

DIM = 384


def unit(i: int) -> np.ndarray:
    v = np.zeros(DIM)
    v[i] = 1.0
    return v


def at_cosine(c: float) -> list[float]:
    """A vector whose cosine similarity to unit(0) is c."""
    return [float(x) for x in c * unit(0) + math.sqrt(1 - c * c) * unit(1)]


def turn(key: str, speaker: str, session: str, at: str, content: str, **kw: Any) -> dict:
    return {
        "key": key,
        "content": content,
        "created_at": at,
        "metadata": {"speaker": speaker, "session": session},
        **kw,
    }


async def search_texts(database_url: str, ns: str) -> dict[str, str | None]:
    engine = create_async_engine(database_url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(
                text("""
                SELECT m.key, m.search_text FROM memory m JOIN namespace n ON n.id = m.namespace_id
                WHERE n.name = :ns"""),
                {"ns": ns},
            )
            return {r.key: r.search_text for r in rows}
    finally:
        await engine.dispose()


async def speakers(database_url: str, ns: str) -> set[str]:
    engine = create_async_engine(database_url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(
                text("""
                SELECT s.name FROM speaker s JOIN namespace n ON n.id = s.namespace_id
                WHERE n.name = :ns"""),
                {"ns": ns},
            )
            return {r.name for r in rows}
    finally:
        await engine.dispose()


HEY = "Hey, how's the new place?"
PUPPY = "We finally brought home a beagle puppy!"


async def add_dialogue(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/v1/robots/scribe/memories/batch",
        json={
            "memories": [
                turn("t1", "Mia", "s1", "2026-03-14T10:00:00Z", HEY),
                turn("t2", "Leo", "s1", "2026-03-14T10:01:00Z", PUPPY),
                {"key": "note", "content": "The beagle exhibition opens in May."},
            ]
        },
    )
    assert r.status_code == 201, r.text
    assert [m["tags"] for m in r.json()["memories"]] == [["speaker:mia"], ["speaker:leo"], []]
    assert [m["content"] for m in r.json()["memories"]] == [
        HEY,
        PUPPY,
        "The beagle exhibition opens in May.",
    ]
    # Stored later, alone: its turn before is read from the database.
    r = await client.post(
        "/v1/robots/scribe/memories", json=turn("t3", "Mia", "s1", "2026-03-14T10:02:00Z", "Cute!")
    )
    assert r.status_code == 201, r.text


@pytest.fixture
async def contextual(app_factory, ns: str):  # type: ignore[no-untyped-def]
    """A client of an app whose search text has the turn before (HTM_SEARCH_TEXT=contextual)."""
    async with app_factory(search_text="contextual") as c:
        c.headers["X-Namespace"] = ns
        yield c


async def test_a_turn_is_searched_with_its_date_and_its_speaker(
    client: httpx.AsyncClient, database_url: str, ns: str
) -> None:
    await add_dialogue(client)
    assert await search_texts(database_url, ns) == {
        "t1": f"[March 14, 2026] Mia: {HEY}",
        "t2": f"[March 14, 2026] Leo: {PUPPY}",
        "t3": "[March 14, 2026] Mia: Cute!",
        "note": None,  # not a conversation: its content is what is searched
    }
    assert await speakers(database_url, ns) == {"Mia", "Leo"}
    # Full text reads the search text; recall returns the content as stored.
    r = await client.post(
        "/v1/robots/scribe/recall",
        json={"query": "puppy march", "strategy": "fulltext", "load_into_working_memory": False},
    )
    assert r.status_code == 200, r.text
    # Its date in words is searched: "march" is in every turn's; "puppy" in t2's alone.
    hits = r.json()["hits"]
    assert [(h["key"], h["content"]) for h in hits] == [
        ("t2", PUPPY),
        ("t3", "Cute!"),  # equal ranks: the newer first
        ("t1", HEY),
    ]


async def test_contextual_puts_the_turn_before_between_the_date_and_the_turn(
    contextual: httpx.AsyncClient, database_url: str, ns: str
) -> None:
    await add_dialogue(contextual)
    assert await search_texts(database_url, ns) == {
        "t1": f"[March 14, 2026] Mia: {HEY}",
        "t2": f"[March 14, 2026] Mia: {HEY}\nLeo: {PUPPY}",
        "t3": f"[March 14, 2026] Leo: {PUPPY}\nMia: Cute!",
        "note": None,
    }
    r = await contextual.post(
        "/v1/robots/scribe/recall",
        json={"query": "puppy", "strategy": "fulltext", "load_into_working_memory": False},
    )
    assert r.status_code == 200, r.text
    assert {(h["key"], h["content"]) for h in r.json()["hits"]} == {("t2", PUPPY), ("t3", "Cute!")}


async def test_a_put_builds_the_search_text_again(
    contextual: httpx.AsyncClient, database_url: str, ns: str
) -> None:
    await add_dialogue(contextual)
    # Moved before t2: its turn before is now t1 (and never itself).
    r = await contextual.put(
        "/v1/robots/scribe/memories/t3",
        json={
            "content": "So cute!",
            "created_at": "2026-03-14T10:00:30Z",
            "metadata": {"speaker": "Mia", "session": "s1"},
        },
    )
    assert r.status_code == 200, r.text
    assert r.json()["tags"] == ["speaker:mia"]
    texts = await search_texts(database_url, ns)
    assert texts["t3"] == f"[March 14, 2026] Mia: {HEY}\nMia: So cute!"


async def test_plain_search_text_keeps_the_content(app_factory, database_url: str, ns: str) -> None:
    async with app_factory(search_text="plain") as client:
        client.headers["X-Namespace"] = ns
        r = await client.post(
            "/v1/robots/scribe/memories/batch",
            json={"memories": [turn("t1", "Mia", "s1", "2026-03-14T10:00:00Z", HEY)]},
        )
        assert r.status_code == 201, r.text
        assert r.json()["memories"][0]["tags"] == []
    assert await search_texts(database_url, ns) == {"t1": None}


async def test_a_question_naming_a_speaker_boosts_their_turns_and_leaves_the_vector(
    contextual: httpx.AsyncClient,
) -> None:
    # Contextual: t3 names Leo through its turn before, so a turn not Leo's is a hit too.
    await add_dialogue(contextual)
    r = await contextual.post(
        "/v1/robots/scribe/recall",
        json={
            "query": "What did Leo's family get?",
            "explain": True,
            "load_into_working_memory": False,
        },
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["speakers"] == ["Leo"]
    assert body["embedding"] == "unavailable"  # no embedder here: nothing to take names from
    assert body["vector_query"] is None
    tags = {h["key"]: h["explain"]["signals"]["tags"] for h in body["hits"]}
    assert {k: (s["value"], s["weight"]) for k, s in tags.items()} == {
        "t2": (1.0, 0.3),
        "t3": (0.0, 0.3),
    }


async def test_neighbours_are_the_turns_around_a_hit_in_its_session(
    contextual: httpx.AsyncClient,
) -> None:
    await add_dialogue(contextual)
    r = await contextual.post(
        "/v1/robots/scribe/recall",
        json={
            "query": "beagle",
            "strategy": "fulltext",
            "neighbours": 2,
            "load_into_working_memory": False,
        },
    )
    assert r.status_code == 200, r.text
    around = {
        h["key"]: [(n["position"], n["key"], n["speaker"]) for n in h["neighbours"]]
        if h["neighbours"] is not None
        else None
        for h in r.json()["hits"]
    }
    assert around == {
        "t2": [(-1, "t1", "Mia"), (1, "t3", "Mia")],
        "t3": [(-2, "t1", "Mia"), (-1, "t2", "Leo")],
        "note": None,  # not of a session
    }


async def add_scored(client: httpx.AsyncClient, robot: str, cosines: dict[str, float]) -> None:
    r = await client.post(
        f"/v1/robots/{robot}/memories/batch",
        json={
            "memories": [
                {"key": k, "content": f"memory {k}", "embedding": at_cosine(c)}
                for k, c in cosines.items()
            ]
        },
    )
    assert r.status_code == 201, r.text


async def test_min_score_leaves_out_hits_below_it(client: httpx.AsyncClient) -> None:
    await add_scored(client, "a", {"same": 1.0, "close": 0.8, "far": 0.3, "other": 0.0})
    for strategy in ("vector", "hybrid"):
        r = await client.post(
            "/v1/robots/a/recall",
            json={
                "query": "anything",
                "strategy": strategy,
                "embedding": [float(x) for x in unit(0)],
                "min_score": 0.5,
                "load_into_working_memory": False,
            },
        )
        assert r.status_code == 200, r.text
        hits = r.json()["hits"]
        assert {h["key"] for h in hits} == {"same", "close"}, strategy
        relevance = {h["key"]: h["relevance"] for h in hits}
        assert math.isclose(relevance["close"], similarity(at_cosine(0.8), unit(0)), abs_tol=1e-6)
        assert r.json()["min_score"] == 0.5
    r = await client.post("/v1/robots/a/recall", json={"query": "x", "min_score": 1.5, "limit": 3})
    assert r.status_code == 422
    assert r.json()["errors"][0]["field"] == "body.min_score"


async def test_a_default_recall_in_a_shared_namespace_loads_nothing_below_the_floor(
    client: httpx.AsyncClient,
) -> None:
    floor = Settings(_env_file=None).recall_min_score  # type: ignore[call-arg]
    assert 0 < floor < 0.9
    # Two robots' memories, on both sides of the floor.
    await add_scored(client, "ops", {"deploy": 1.0, "above": floor + 0.05})
    await add_scored(client, "support", {"below": floor - 0.05, "coffee": 0.0})
    r = await client.post(
        "/v1/robots/planner/recall",
        json={"query": "When can we deploy?", "embedding": [float(x) for x in unit(0)]},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert [h["key"] for h in body["hits"]] == ["deploy", "above"]
    assert sorted(body["working_memory"]["loaded"]) == ["above", "deploy"]
    wm = (await client.get("/v1/robots/planner/working-memory")).json()
    assert sorted(i["key"] for i in wm["items"]) == ["above", "deploy"]


# --- with an embedder: a real local HTTP server speaking OpenAI's embeddings API ------------


def embed_reply(vectors: dict[str, list[float]]):  # type: ignore[no-untyped-def]
    """Each text's vector from `vectors`, unit(2) for any other."""

    def reply(req: Recorded) -> tuple[int, Any]:
        data = [
            {"index": i, "embedding": vectors.get(t, [float(x) for x in unit(2)])}
            for i, t in enumerate(req.body["input"])
        ]
        return 200, {"data": data}

    return reply


async def test_the_embedder_gets_search_texts_and_the_question_without_names(
    app_factory, stub: StubServer, ns: str
) -> None:
    stub.reply = embed_reply({})
    async with app_factory(
        embedding_provider="openai",
        embedding_model="stub-embed",
        embedding_url=stub.url,
        embed_text="search_text",
        search_text="contextual",
    ) as client:
        client.headers["X-Namespace"] = ns
        await add_dialogue(client)
        assert [r.body["input"] for r in stub.requests] == [
            [
                f"[March 14, 2026] Mia: {HEY}",
                f"[March 14, 2026] Mia: {HEY}\nLeo: {PUPPY}",
                "The beagle exhibition opens in May.",
            ],
            [f"[March 14, 2026] Leo: {PUPPY}\nMia: Cute!"],
        ]
        stub.requests.clear()
        r = await client.post(
            "/v1/robots/scribe/recall",
            json={"query": "What did Leo's family get?", "load_into_working_memory": False},
        )
        assert r.status_code == 200, r.text
        assert (r.json()["speakers"], r.json()["vector_query"]) == (["Leo"], "What did family get?")
        r = await client.post(
            "/v1/robots/scribe/recall",
            json={
                "query": "What did Leo get?",
                "vector_query": "a new pet",
                "load_into_working_memory": False,
            },
        )
        assert r.json()["vector_query"] == "a new pet"
        assert [q.body["input"] for q in stub.requests] == [["What did family get?"], ["a new pet"]]


async def test_with_embed_text_speaker_a_turn_is_embedded_as_speaker_and_content(
    app_factory, stub: StubServer, ns: str
) -> None:
    """HTM_EMBED_TEXT=speaker: a turn's vector is made of `speaker: content` (full text keeps
    the search text), on add, on a PUT, and by the embedding worker; a PUT that changes only
    the search text (the turn before) keeps the vector."""
    stub.reply = embed_reply({})
    async with app_factory(
        embedding_provider="openai",
        embedding_model="stub-embed",
        embedding_url=stub.url,
        embed_text="speaker",
    ) as client:
        client.headers["X-Namespace"] = ns
        await add_dialogue(client)
        assert [r.body["input"] for r in stub.requests] == [
            [f"Mia: {HEY}", f"Leo: {PUPPY}", "The beagle exhibition opens in May."],
            ["Mia: Cute!"],
        ]
        # Full text still searches the search text: the date in words finds the turn.
        r = await client.post(
            "/v1/robots/scribe/recall",
            json={"query": "March 14", "strategy": "fulltext", "load_into_working_memory": False},
        )
        assert "t1" in [h["key"] for h in r.json()["hits"]]
        stub.requests.clear()
        # The same content and speaker: the vector stays (nothing embedded).
        same = turn("t2", "Leo", "s1", "2026-03-14T10:01:00Z", PUPPY)
        body = {k: v for k, v in same.items() if k != "key"}
        r = await client.put("/v1/robots/scribe/memories/t2", json=body)
        assert r.status_code == 200, r.text
        assert stub.requests == []
        # Another speaker: embedded again, as that speaker's.
        body["metadata"] = {**body["metadata"], "speaker": "Ana"}
        r = await client.put("/v1/robots/scribe/memories/t2", json=body)
        assert r.status_code == 200, r.text
        assert [q.body["input"] for q in stub.requests] == [[f"Ana: {PUPPY}"]]
        # The embedding worker embeds a pending turn the same way.
        stub.requests.clear()
        stub.reply = lambda _r: (503, {"error": "down"})
        r = await client.post(
            "/v1/robots/scribe/memories",
            json=turn("t9", "Mia", "s1", "2026-03-14T10:09:00Z", "Later!"),
        )
        assert r.json()["embedding_status"] == "pending"
        stub.reply = embed_reply({})
        stub.requests.clear()
        # (The queue spans every namespace: other tests' pending memories may come along.)
        while (await client.get("/v1/robots/scribe/memories/t9")).json()[
            "embedding_status"
        ] == "pending":
            assert await client.app.state.components.embedding_worker.run_once() >= 1
        sent = [t for q in stub.requests for t in q.body["input"]]
        assert ("Mia: Later!" in sent, any("Later!" in t and t != "Mia: Later!" for t in sent)) == (
            True,
            False,
        )


async def test_the_prompt_leaves_out_recall_hits_below_the_floor(
    app_factory, stub: StubServer, ns: str
) -> None:
    stub.reply = embed_reply({"When can we deploy?": [float(x) for x in unit(0)]})
    async with app_factory(
        embedding_provider="openai", embedding_model="stub-embed", embedding_url=stub.url
    ) as client:
        client.headers["X-Namespace"] = ns
        await add_scored(client, "ops", {"deploy": 1.0, "window": 0.6})
        await add_scored(client, "support", {"coffee": 0.05})
        r = await client.post(
            "/v1/robots/planner/prompt",
            json={"input": "When can we deploy?", "context_window": 4000},
        )
        assert r.status_code == 200, r.text
        recalled = [
            (e["key"], e["included"]) for e in r.json()["manifest"] if e["source"] == "recall"
        ]
        assert recalled == [("deploy", True), ("window", True)]


ASK = "Where did you park the van when it rained?"
REPLY = "Under the van bridge, level 3."


async def test_a_reply_gains_a_share_of_the_turn_that_asked(client: httpx.AsyncClient) -> None:
    # The question's words are in Mia's turn; Leo's reply shares one of them, as does a turn
    # of another session, newer: alike on full text (no embedder here: full text alone), and
    # the speaker signal is off.
    r = await client.post(
        "/v1/robots/scribe/memories/batch",
        json={
            "memories": [
                turn("ask", "Mia", "s1", "2026-03-14T10:00:00Z", ASK),
                turn("reply", "Leo", "s1", "2026-03-14T10:01:00Z", REPLY),
                turn("hi", "Leo", "s2", "2026-03-20T09:00:00Z", "Morning!"),
                turn("other", "Mia", "s2", "2026-03-20T09:01:00Z", "Van again, then a train."),
            ]
        },
    )
    assert r.status_code == 201, r.text

    async def ranked(fusion: dict[str, Any]) -> list[tuple[str, float]]:
        r = await client.post(
            "/v1/robots/scribe/recall",
            json={
                "query": "Where was the van parked when it rained?",
                "explain": True,
                "fusion": fusion,
                "signals": {"tag_overlap": 0},
                "load_into_working_memory": False,
            },
        )
        assert r.status_code == 200, r.text
        assert r.json()["fusion"]["turn_spread"] == fusion.get("turn_spread", 0)
        return [(h["key"], h["explain"]["score"]) for h in r.json()["hits"]]

    off = await ranked({"turn_spread": 0})
    assert [k for k, _ in off] == ["ask", "other", "reply"]  # a tie: newest first
    assert off[1][1] == pytest.approx(off[2][1], abs=1e-12)
    assert await ranked({}) == off  # off by default
    on = dict(await ranked({"turn_spread": 0.15}))
    assert list(on) == ["ask", "reply", "other"]
    # the reply gains 0.15 × the asking turn's fused score / the best candidate's (the asking
    # turn's own): 0.15; the asking turn gains nothing from a reply scored below 0, nor
    # "other" from "hi", no candidate
    assert on["reply"] - dict(off)["reply"] == pytest.approx(0.15, abs=1e-9)
    assert on["ask"] == pytest.approx(off[0][1], abs=1e-12)
    assert on["other"] == pytest.approx(dict(off)["other"], abs=1e-12)
