"""Profiles (issue 35, item 4): slots backed by memories, set through supersede so history
and versions keep the old values; read back, removed, refused; and a prompt's profile
section within the exact budget — real PostgreSQL and Redis."""

from __future__ import annotations

from typing import Any

import httpx
import tiktoken

PROBLEM = "application/problem+json"
ENC = tiktoken.get_encoding("cl100k_base")


def toks(s: str) -> int:
    return len(ENC.encode(s))


async def patch(client: httpx.AsyncClient, slots: dict[str, Any], subject: str = "maria"):
    r = await client.patch(f"/v1/robots/ann/profiles/{subject}", json={"slots": slots})
    assert r.status_code == 200, r.text
    return r.json()


def slots_of(profile: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {s: (v["value"], v["key"]) for s, v in profile["slots"].items()}


async def all_memories(client: httpx.AsyncClient) -> list[tuple]:
    params = {"include_deleted": True, "include": "superseded", "limit": 200}
    r = await client.get("/v1/robots/ann/memories", params=params)
    assert r.status_code == 200, r.text
    return sorted(
        (m["key"], m["content"], m["version"], m["deleted_at"] is not None, m["superseded_by"])
        for m in r.json()["items"]
    )


async def test_a_slot_set_again_supersedes_its_memory(client) -> None:
    p = await patch(client, {"city": "Lisbon", "employer": "Acme"})
    assert slots_of(p) == {
        "city": ("Lisbon", "profile:maria:city@1"),
        "employer": ("Acme", "profile:maria:employer@1"),
    }
    assert p["tokens"] == toks("city: Lisbon") + toks("employer: Acme")
    m = (await client.get("/v1/robots/ann/memories/profile:maria:city@1")).json()
    assert (m["type"], m["content"], m["metadata"]) == (
        "fact",
        "maria city: Lisbon",
        {"subject": "maria", "attribute": "city", "profile": True, "value": "Lisbon"},
    )
    p = await patch(client, {"city": "Porto", "employer": "Acme"})  # employer unchanged
    assert slots_of(p) == {
        "city": ("Porto", "profile:maria:city@2"),
        "employer": ("Acme", "profile:maria:employer@1"),
    }
    assert (await client.get("/v1/robots/ann/profiles/maria")).json() == p
    old = (await client.get("/v1/robots/ann/memories/profile:maria:city@1")).json()
    assert (old["superseded_by"], old["version"]) == ("profile:maria:city@2", 2)
    assert old["valid_to"] == p["slots"]["city"]["since"]
    chain = (await client.get("/v1/robots/ann/memories/profile:maria:city@2/history")).json()
    assert [c["key"] for c in chain["chain"]] == ["profile:maria:city@1", "profile:maria:city@2"]
    r = await client.post(
        "/v1/robots/ann/recall",
        json={"query": "maria city", "strategy": "fulltext", "load_into_working_memory": False},
    )
    hits = sorted(h["key"] for h in r.json()["hits"])
    assert hits == ["profile:maria:city@2", "profile:maria:employer@1"]  # not city@1
    # Profile memories are not placed in working memory.
    assert (await client.get("/v1/robots/ann/working-memory")).json()["items"] == []


async def test_a_slot_removed_is_forgotten_and_set_again_under_a_new_key(client) -> None:
    await patch(client, {"city": "Lisbon", "employer": "Acme"})
    p = await patch(client, {"employer": None, "pet": None})  # pet: none to remove
    assert slots_of(p) == {"city": ("Lisbon", "profile:maria:city@1")}
    gone = await client.get("/v1/robots/ann/memories/profile:maria:employer@1")
    assert gone.status_code == 404
    p = await patch(client, {"employer": "Initech"})
    assert slots_of(p)["employer"] == ("Initech", "profile:maria:employer@2")
    assert [k for k, *_ in await all_memories(client)] == [
        "profile:maria:city@1", "profile:maria:employer@1", "profile:maria:employer@2",
    ]  # fmt: skip


async def test_a_memory_naming_subject_and_attribute_is_a_slot(client) -> None:
    r = await client.post(
        "/v1/robots/bob/memories",
        json={"key": "tea", "content": "Maria drinks green tea.",
              "metadata": {"subject": "maria", "attribute": "drink"}},
    )  # fmt: skip
    assert r.status_code == 201
    p = (await client.get("/v1/robots/bob/profiles/maria")).json()
    assert slots_of(p) == {"drink": ("Maria drinks green tea.", "tea")}
    p = await patch(client, {"drink": "coffee"})
    assert slots_of(p) == {"drink": ("coffee", "profile:maria:drink@1")}
    old = (await client.get("/v1/robots/ann/memories/tea")).json()
    assert old["superseded_by"] == "profile:maria:drink@1"
    assert (await client.get("/v1/robots/ann/profiles/nobody")).json() == {
        "subject": "nobody", "slots": {}, "tokens": 0,
    }  # fmt: skip


async def test_bad_input_is_refused_and_writes_nothing(client) -> None:
    await patch(client, {"city": "Lisbon"})
    before = await all_memories(client)
    for subject, body in [
        ("maria", {"slots": {}}),
        ("maria", {"slots": {"City": "Porto"}}),
        ("maria", {"slots": {"city": "Porto", "bad slot": "x"}}),
        ("maria", {"slots": {"city": ""}}),
        ("maria", {"slots": {"city": 3}}),
        ("maria", {"slots": {"x" * 41: "y"}}),
        ("maria", {"city": "Porto"}),
        ("ma ria", {"slots": {"city": "Porto"}}),
    ]:
        r = await client.patch(f"/v1/robots/ann/profiles/{subject}", json=body)
        assert (r.status_code, r.headers["content-type"]) == (422, PROBLEM), (body, r.text)
    assert await all_memories(client) == before
    r = await client.get("/v1/robots/nobody/profiles/maria")
    assert (r.status_code, r.headers["content-type"]) == (404, PROBLEM)


async def prompt(client: httpx.AsyncClient, window: int, **extra: Any) -> dict[str, Any]:
    body = {"input": "Where do I live?", "context_window": window, "recall": None,
            "profile": {"subject": "maria"}, **extra}  # fmt: skip
    r = await client.post("/v1/robots/ann/prompt", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def chat_tokens(messages: list[dict[str, str]]) -> int:
    return 3 + sum(3 + toks(m["role"]) + toks(m["content"]) for m in messages)


def entry(key: str | None, tokens: int, included: bool = True, reason: str | None = None,
          source: str = "profile") -> dict[str, Any]:  # fmt: skip
    return {"source": source, "key": key, "seq": None, "tokens": tokens, "included": included,
            "reason": reason}  # fmt: skip


async def test_a_prompt_takes_the_profile_within_its_exact_budget(client) -> None:
    await patch(client, {"employer": "Acme", "city": "Porto"})
    city, employer = "profile:maria:city@1", "profile:maria:employer@1"
    user = {"role": "user", "content": "Where do I live?"}
    full = {"role": "system", "content": "Profile of maria:\n\ncity: Porto\n\nemployer: Acme"}
    c, e = toks("city: Porto"), toks("employer: Acme")
    # What allocation charges (budget.py): the input's message and the reply's primer, the
    # system message's framing, the header and each line, each with its separator.
    needed = (
        chat_tokens([user]) + 3 + toks("system") + toks("Profile of maria:") + 1 + c + 1 + e + 1
    )
    exact = chat_tokens([full, user])
    assert exact <= needed

    p = await prompt(client, needed)
    assert (p["messages"], p["tokens"], p["budget"]) == ([full, user], exact, needed)
    assert p["manifest"] == [
        entry(None, toks("Where do I live?"), source="input"), entry(city, c), entry(employer, e),
    ]  # fmt: skip

    # One token short: the last slot in name order goes.
    p = await prompt(client, needed - 1)
    short = {"role": "system", "content": "Profile of maria:\n\ncity: Porto"}
    assert (p["messages"], p["tokens"]) == ([short, user], chat_tokens([short, user]))
    assert p["manifest"][1:] == [entry(city, c), entry(employer, e, False, "budget")]

    # Room for the input alone: no profile section at all.
    alone = chat_tokens([user])
    p = await prompt(client, alone)
    assert (p["messages"], p["tokens"]) == ([user], alone)
    assert p["manifest"][1:] == [
        entry(city, c, False, "budget"),
        entry(employer, e, False, "budget"),
    ]

    # A quota: slots are taken while their content fits it.
    p = await prompt(client, needed, quotas={"profile": c})
    assert p["messages"] == [short, user]
    assert p["manifest"][1:] == [entry(city, c), entry(employer, e, False, "section_quota")]

    # After the system text, before working memory; an unknown subject adds nothing.
    await client.post("/v1/robots/ann/memories", json={"key": "wm", "content": "Note one."})
    p = await prompt(client, 4000, system="Be brief.")
    assert p["messages"][0]["content"] == (
        "Be brief.\n\nProfile of maria:\n\ncity: Porto\n\nemployer: Acme\n\n"
        "Working memory:\n\nNote one."
    )
    assert p["tokens"] == chat_tokens(p["messages"])
    p = await prompt(client, 4000, profile={"subject": "nobody"})
    assert [m["source"] for m in p["manifest"]] == ["input", "working_memory"]
