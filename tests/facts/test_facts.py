"""Facts from conversations (app/facts): an LLM, here a real local server speaking the
OpenAI chat API with deterministic answers, reads a conversation's turns; its facts and
preferences become memories linked `derived_from` to their turns. A model that fails, times
out or answers something unusable writes nothing; without an LLM the route is a 409."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx2
import pytest

from tests.mcp.test_mcp_tools import mcp_session

PROBLEM = "application/problem+json"
TURNS = [
    ("t1", "Ana", "Hi! Guess what, I started at the harbour office on Monday.", "2026-03-02"),
    ("t2", "Ben", "Congrats! Still not eating meat, by the way? I'm booking dinner.", "2026-03-02"),
    ("t3", "Ana", "Yes, still vegetarian. Somewhere with good risotto please.", "2026-03-03"),
    ("t4", "Ben", "Ha, ok. See you Friday.", "2026-03-03"),
]
FACTS = {
    "facts": [
        {"text": "Ana works at the harbour office.", "kind": "fact", "turns": [1]},
        {"text": "Ana is vegetarian.", "kind": "preference", "turns": [2, 3]},
        {"text": "Ana likes risotto.", "kind": "preference", "turns": [3, 99]},
        {"text": "  ", "kind": "fact", "turns": [1]},  # dropped: no text
        {"text": "Ben said ok.", "kind": "mood", "turns": [4]},  # dropped: unknown kind
        {"text": "Nothing.", "kind": "fact", "turns": [0, 7]},  # dropped: no valid turn
        {"text": "Ana  is vegetarian.", "kind": "preference", "turns": [3]},  # the same, once
    ]
}


def chat(content: Any) -> tuple[int, dict]:
    body = content if isinstance(content, str) else json.dumps(content)
    return 200, {"choices": [{"message": {"role": "assistant", "content": body}}]}


@pytest.fixture
async def client(app_factory, ns, stub):
    async with app_factory(llm_provider="openai", llm_url=stub.url, llm_timeout_s=1.0) as c:
        c.headers["X-Namespace"] = ns
        yield c


async def add_turns(client, visibility: dict[str, str] | None = None) -> None:
    for key, speaker, content, day in TURNS:
        body = {
            "key": key,
            "content": content,
            "type": "conversation",
            "metadata": {"speaker": speaker, "session": "s1"},
            "created_at": f"{day}T10:00:00Z",
        }
        if visibility and key in visibility:
            body["visibility"] = visibility[key]
        r = await client.post("/v1/robots/ana/memories", json=body)
        assert r.status_code == 201, r.text


async def derived(client, robot: str = "ana") -> list[tuple[str, str, list[str]]]:
    """The facts and preferences the robot can read: (type, content, derived_from)."""
    out = []
    for type_ in ("fact", "preference"):
        r = await client.get(f"/v1/robots/{robot}/memories", params={"type": type_})
        assert r.status_code == 200, r.text
        out += [(m["type"], m["content"], m["metadata"]["derived_from"]) for m in r.json()["items"]]
    return sorted(out)


async def test_a_conversation_becomes_facts_linked_to_their_turns(client, stub) -> None:
    await add_turns(client)
    stub.reply = lambda _req: chat(FACTS)
    r = await client.post("/v1/robots/ana/facts", json={"session": "s1"})
    assert r.status_code == 201, r.text
    body = r.json()
    assert (body["turns"], body["model"]) == (["t1", "t2", "t3", "t4"], "openai/gpt-4o-mini")
    assert [
        (f["type"], f["content"], f["metadata"], f["created_at"], f["created"])
        for f in body["facts"]
    ] == [
        ("fact", "Ana works at the harbour office.",
         {"derived_from": ["t1"], "extracted_by": "openai/gpt-4o-mini"},
         "2026-03-02T10:00:00Z", True),
        ("preference", "Ana is vegetarian.",
         {"derived_from": ["t2", "t3"], "extracted_by": "openai/gpt-4o-mini"},
         "2026-03-03T10:00:00Z", True),
        ("preference", "Ana likes risotto.",
         {"derived_from": ["t3"], "extracted_by": "openai/gpt-4o-mini"},
         "2026-03-03T10:00:00Z", True),
    ]  # fmt: skip
    # The model was shown the turns, numbered, with their speakers, oldest first.
    (sent,) = stub.requests
    assert sent.body["messages"][1]["content"] == "\n".join(
        f"{i}. {s}: {c}" for i, (_, s, c, _) in enumerate(TURNS, 1)
    )
    assert sent.body["response_format"] == {"type": "json_object"}
    # Each fact is linked derived_from to its turns.
    vegetarian = body["facts"][1]["key"]
    r = await client.get(f"/v1/robots/ana/memories/{vegetarian}/related")
    assert r.status_code == 200, r.text
    assert sorted(
        (m["key"], m["edge"], m["direction"]) for m in r.json()["memories"] if m["depth"] == 1
    ) == [("t2", "derived_from", "out"), ("t3", "derived_from", "out")]
    # Not placed in working memory: the robot's focus stays on its turns.
    wm = (await client.get("/v1/robots/ana/working-memory")).json()
    assert sorted(i["key"] for i in wm["items"]) == ["t1", "t2", "t3", "t4"]

    # Read again: nothing new, each fact reinforced (the same type and text).
    again = await client.post("/v1/robots/ana/facts", json={"keys": ["t3", "t1", "t2"]})
    assert again.status_code == 201, again.text
    assert again.json()["turns"] == ["t3", "t1", "t2"]
    assert [(f["created"], f["duplicate_of"]) for f in again.json()["facts"]] == [
        (False, f["key"]) for f in body["facts"]
    ]
    assert len(await derived(client)) == 3


@pytest.mark.parametrize(
    ("reply", "delay_s", "status", "kind", "says"),
    [
        (lambda _r: (500, {"error": "overloaded"}), 0, 503, "unavailable", "HTTP 500"),
        (lambda _r: chat(FACTS), 2.0, 503, "unavailable", "timed out after 1s"),
        (lambda _r: chat("Sure! Ana works at the harbour."), 0, 502, "bad-gateway", "not JSON"),
        (lambda _r: chat({"facts": "Ana works"}), 0, 502, "bad-gateway", "no 'facts' list"),
        (lambda _r: chat({"facts": [FACTS["facts"][0], "Ana is vegetarian"]}), 0, 502,
         "bad-gateway", "not an object"),
        (lambda _r: (400, {"error": "context too long"}), 0, 502, "bad-gateway", "HTTP 400"),
    ],
    ids=["down", "timeout", "not-json", "no-list", "not-an-object", "refused"],
)  # fmt: skip
async def test_a_model_that_fails_writes_nothing(
    client, stub, reply, delay_s, status, kind, says
) -> None:
    await add_turns(client)
    stub.reply, stub.delay_s = reply, delay_s
    r = await client.post("/v1/robots/ana/facts", json={"session": "s1"})
    assert (r.status_code, r.headers["content-type"]) == (status, PROBLEM), r.text
    assert (r.json()["type"].rsplit("/", 1)[-1], r.json()["dependency"]) == (kind, "llm")
    assert says in r.json()["detail"]
    assert await derived(client) == []
    # The same request once the model answers: the facts, whole.
    stub.reply, stub.delay_s = (lambda _r: chat(FACTS)), 0
    r = await client.post("/v1/robots/ana/facts", json={"session": "s1"})
    assert r.status_code == 201, r.text
    assert len(await derived(client)) == 3


async def test_a_reply_with_no_facts_writes_nothing(client, stub) -> None:
    await add_turns(client)
    stub.reply = lambda _req: chat({"facts": []})
    r = await client.post("/v1/robots/ana/facts", json={"keys": ["t4"]})
    assert (r.status_code, r.json()["facts"], r.json()["turns"]) == (201, [], ["t4"])
    assert await derived(client) == []


async def test_facts_of_a_private_turn_are_private(client, stub) -> None:
    await add_turns(client, visibility={"t3": "private"})
    stub.reply = lambda _req: chat(FACTS)
    r = await client.post("/v1/robots/ana/facts", json={"session": "s1"})
    assert r.status_code == 201, r.text
    assert [(f["content"], f["visibility"]) for f in r.json()["facts"]] == [
        ("Ana works at the harbour office.", "namespace"),
        ("Ana is vegetarian.", "private"),
        ("Ana likes risotto.", "private"),
    ]
    # Ben cannot read t3: the model is shown only what he may read, and he reads only the
    # facts of turns he may read.
    stub.requests.clear()
    stub.reply = lambda _req: chat({"facts": []})
    r = await client.post("/v1/robots/ben/facts", json={"session": "s1"})
    assert r.json()["turns"] == ["t1", "t2", "t4"]
    assert await derived(client, "ben") == [("fact", "Ana works at the harbour office.", ["t1"])]
    r = await client.post("/v1/robots/ben/facts", json={"keys": ["t1", "t3"]})
    assert (r.status_code, r.json()["detail"]) == (404, "memory 't3' does not exist")


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({}, 422, "body"),
        ({"keys": ["t1"], "session": "s1"}, 422, "body"),
        ({"keys": []}, 422, "body.keys"),
        ({"keys": ["t1", "t1"]}, 422, "body"),
        ({"keys": ["bad key"]}, 422, "body.keys.0"),
        ({"session": ""}, 422, "body.session"),
        ({"session": "s1", "supersede": "always"}, 422, "body.supersede"),
        ({"session": "s1", "extra": 1}, 422, "body.extra"),
    ],
)
async def test_bad_requests_are_422_and_ask_nothing(client, stub, body, status, field) -> None:
    await add_turns(client)
    r = await client.post("/v1/robots/ana/facts", json=body)
    assert (r.status_code, r.headers["content-type"]) == (status, PROBLEM), r.text
    assert field in {e["field"] for e in r.json()["errors"]}
    assert stub.requests == []
    assert await derived(client) == []


async def test_unknown_turns_are_404_and_ask_nothing(client, stub) -> None:
    await add_turns(client)
    r = await client.post("/v1/robots/ana/facts", json={"keys": ["t1", "nope"]})
    assert (r.status_code, r.json()["detail"]) == (404, "memory 'nope' does not exist")
    r = await client.post("/v1/robots/ana/facts", json={"session": "s2"})
    assert (r.status_code, r.json()["detail"]) == (404, "conversation 's2' has no memories")
    assert stub.requests == []


async def test_without_an_llm_it_is_a_409(app_factory, ns) -> None:
    async with app_factory() as c:
        c.headers["X-Namespace"] = ns
        await add_turns(c)
        r = await c.post("/v1/robots/ana/facts", json={"session": "s1"})
    assert (r.status_code, r.headers["content-type"]) == (409, PROBLEM)
    assert r.json()["detail"] == (
        "no LLM is configured (HTM_LLM_PROVIDER=none): facts are extracted by one"
    )


async def test_extract_facts_through_mcp(live_server_factory, stub) -> None:
    # The server lives to the end of the test session: its workers that call the model
    # (enrichment, eviction summaries; they span every namespace) must not call the stub
    # other tests share.
    base = live_server_factory(
        llm_provider="openai",
        llm_url=stub.url,
        enrich_interval_s=3600,
        summary_interval_s=3600,
        mcp_tools="default,extract_facts",
    )
    ns = f"t-{uuid.uuid4().hex[:10]}"
    async with mcp_session(base, **{"X-Namespace": ns, "X-Robot": "ana"}) as s:
        listed = {t.name for t in (await s.list_tools()).tools}
        assert {"extract_facts", "remember"} <= listed
        for key, speaker, content, _ in TURNS:
            r = await s.call_tool(
                "remember",
                {"key": key, "content": content, "metadata": {"speaker": speaker, "session": "s1"}},
            )
            assert not r.is_error, r.content
        stub.reply = lambda _req: chat(FACTS)
        r = await s.call_tool("extract_facts", {"session": "s1"})
        assert not r.is_error, r.content
        facts = r.structured_content["facts"]
        assert [(f["type"], f["content"], f["created"], f["derived_from"]) for f in facts] == [
            ("fact", "Ana works at the harbour office.", True, ["t1"]),
            ("preference", "Ana is vegetarian.", True, ["t2", "t3"]),
            ("preference", "Ana likes risotto.", True, ["t3"]),
        ]
        async with httpx2.AsyncClient(base_url=base, headers={"X-Namespace": ns}) as http:
            made = (await http.get(f"/v1/robots/ana/memories/{facts[1]['key']}")).json()
        # a made-up key is written as its alias (app/mcp/aliases.py)
        assert (
            r.content[0].text.splitlines()[1] == f"#{made['id']} (preference): Ana is vegetarian."
        )
        bad = await s.call_tool("extract_facts", {"keys": ["t1"], "session": "s1"})
        assert bad.is_error and bad.structured_content["status"] == 422


async def test_without_an_llm_mcp_does_not_list_the_tool(live_server_factory) -> None:
    ns = f"t-{uuid.uuid4().hex[:10]}"
    base = live_server_factory(mcp_tools="all")
    async with mcp_session(base, **{"X-Namespace": ns, "X-Robot": "ana"}) as s:
        listed = {t.name for t in (await s.list_tools()).tools}
        assert ("extract_facts" in listed, "remember" in listed) == (False, True)
        turn = {"key": "t1", "content": "Hi", "metadata": {"speaker": "Ana", "session": "s1"}}
        assert not (await s.call_tool("remember", turn)).is_error
        r = await s.call_tool("extract_facts", {"session": "s1"})
        assert r.is_error and r.structured_content["status"] == 409
