"""POST /v1/robots/{robot}/prompt (issue 19, item 3): chat messages across the tiers within
the budget, counted exactly (tiktoken in the test, OpenAI's rule: 3 per message + role +
content, 3 for the reply), with the exact manifest — real PostgreSQL and Redis."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import tiktoken

PROBLEM = "application/problem+json"
ENC = tiktoken.get_encoding("cl100k_base")
T0 = datetime(2202, 6, 1, 9, 0, tzinfo=UTC)
INPUT = "When does my flight to Lisbon leave?"
SYSTEM = "You are terse."
A1 = "Alice prefers window seats on flights."
A2 = "The Lisbon office opens at nine."
B1 = "Flights to Lisbon depart from terminal 2."
B2 = "Lisbon trams are yellow."
TURNS = [
    ("user", "I fly to Lisbon on Friday."),
    ("assistant", "Have a good trip!"),
    ("user", "Is it going to rain?"),
]


def toks(s: str) -> int:
    return len(ENC.encode(s))


def count_chat(messages: list[dict[str, str]]) -> int:
    """The rule, computed independently of the service."""
    return 3 + sum(3 + toks(m["role"]) + toks(m["content"]) for m in messages)


def entry(source: str, tokens: int, *, key: str | None = None, seq: int | None = None,
          included: bool = True, reason: str | None = None) -> dict[str, Any]:  # fmt: skip
    return {"source": source, "key": key, "seq": seq, "tokens": tokens, "included": included,
            "reason": reason}  # fmt: skip


@pytest.fixture
async def world(client: httpx.AsyncClient) -> list[str]:
    """alice holds a1, a2 in working memory; bob's b1, b2 are long-term only for alice; a
    session of three turns. Returns the fulltext recall order for INPUT (keys)."""
    client.app.state.components.clock.set(lambda: T0)  # type: ignore[attr-defined]
    for robot, key, content, importance in (
        ("alice", "a1", A1, 5),
        ("alice", "a2", A2, 1),
        ("bob", "b1", B1, 1),
        ("bob", "b2", B2, 1),
    ):
        r = await client.post(
            f"/v1/robots/{robot}/memories",
            json={"key": key, "content": content, "importance": importance},
        )
        assert r.status_code == 201
    r = await client.post(
        "/v1/robots/alice/sessions/s1/messages",
        json={"messages": [{"role": role, "content": c} for role, c in TURNS]},
    )
    assert r.status_code == 201
    r = await client.post(
        "/v1/robots/alice/recall",
        json={"query": INPUT, "strategy": "fulltext", "load_into_working_memory": False},
    )
    order = [h["key"] for h in r.json()["hits"]]
    assert sorted(order) == ["a1", "a2", "b1", "b2"]
    return order


CONTENT = {"a1": A1, "a2": A2, "b1": B1, "b2": B2}


def body(**extra: Any) -> dict[str, Any]:
    return {
        "input": INPUT,
        "session": "s1",
        "context_window": 4000,
        "reserve": {"system": 100, "tools": 200, "output": 500},
        "system": SYSTEM,
        "recall": {"strategy": "fulltext", "limit": 5},
        **extra,
    }


def expected_messages(hits: list[str], turns: list[tuple[str, str]]) -> list[dict[str, str]]:
    system = "\n\n".join(
        [SYSTEM, "Working memory:", A1, A2, "Relevant memories:", *(CONTENT[k] for k in hits)]
    )
    return [
        {"role": "system", "content": system},
        *({"role": role, "content": c} for role, c in turns),
        {"role": "user", "content": INPUT},
    ]


def manifest(order: list[str], **changes: tuple[bool, str | None]) -> list[dict[str, Any]]:
    rows = [entry("input", toks(INPUT))]
    rows += [entry("session", toks(TURNS[s - 1][1]), seq=s) for s in (3, 2, 1)]
    rows += [entry("working_memory", toks(CONTENT[k]), key=k) for k in ("a1", "a2")]
    for k in order:
        dup = k in ("a1", "a2")
        rows.append(
            entry("recall", toks(CONTENT[k]), key=k, included=not dup,
                  reason="duplicate" if dup else None)
        )  # fmt: skip
    for name, (included, reason) in changes.items():
        source, _, ident = name.partition("_")
        for row in rows:
            if row["source"].startswith(source) and ident in (row["key"], str(row["seq"])):
                row["included"], row["reason"] = included, reason
    return rows


async def window_accesses(client: httpx.AsyncClient) -> list[int]:
    """The window's access counts once the process's counts are written: a prompt counts
    the messages it takes off its path (app/memories/access.py), as recall counts hits."""
    await client.app.state.components.access.flush()  # type: ignore[attr-defined]
    r = await client.get("/v1/robots/alice/sessions/s1/messages")
    return [m["access_count"] for m in r.json()["messages"]]


async def test_everything_fits_exact_count_messages_and_manifest(
    client: httpx.AsyncClient, world: list[str]
) -> None:
    r = await client.post("/v1/robots/alice/prompt", json=body())
    assert r.status_code == 200, r.text
    result = r.json()
    hits = [k for k in world if k in ("b1", "b2")]
    assert result["messages"] == expected_messages(hits, TURNS)
    assert result["tokens"] == count_chat(result["messages"])
    assert result["budget"] == 4000 - 800
    assert result["manifest"] == manifest(world)
    assert result["degraded"] is False
    # The prompt read each session message once, and loaded nothing into working memory.
    assert await window_accesses(client) == [2, 2, 2]
    wm = (await client.get("/v1/robots/alice/working-memory")).json()
    assert sorted(i["key"] for i in wm["items"]) == ["a1", "a2"]


async def test_one_token_short_drops_the_last_recall_hit_for_budget(
    client: httpx.AsyncClient, world: list[str]
) -> None:
    full = (await client.post("/v1/robots/alice/prompt", json=body())).json()["tokens"]
    r = await client.post("/v1/robots/alice/prompt", json=body(context_window=full + 800 - 1))
    result = r.json()
    hits = [k for k in world if k in ("b1", "b2")]
    assert result["messages"] == expected_messages(hits[:1], TURNS)
    assert result["tokens"] == count_chat(result["messages"]) <= result["budget"] == full - 1
    assert result["manifest"] == manifest(world, **{f"recall_{hits[1]}": (False, "budget")})


async def test_section_quotas_drop_what_exceeds_them(
    client: httpx.AsyncClient, world: list[str]
) -> None:
    quotas = {
        "session": toks(TURNS[2][1]) + toks(TURNS[1][1]),
        "working_memory": toks(A1),
        "recall": 0,
    }
    result = (await client.post("/v1/robots/alice/prompt", json=body(quotas=quotas))).json()
    system = "\n\n".join([SYSTEM, "Working memory:", A1])
    assert result["messages"] == [
        {"role": "system", "content": system},
        {"role": "assistant", "content": TURNS[1][1]},
        {"role": "user", "content": TURNS[2][1]},
        {"role": "user", "content": INPUT},
    ]
    assert result["tokens"] == count_chat(result["messages"])
    quota = (False, "section_quota")
    assert result["manifest"] == manifest(
        world, session_1=quota, working_a2=quota, recall_b1=quota, recall_b2=quota
    )
    assert await window_accesses(client) == [1, 2, 2]  # the prompt took 2 and 3 only


async def test_the_counting_rule_on_the_input_alone(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/v1/robots/carol/prompt", json={"input": "hello", "context_window": 8, "recall": None}
    )
    assert r.status_code == 200, r.text
    # 3 (reply primer) + 3 (message) + 1 ("user") + 1 ("hello")
    assert r.json() == {
        "messages": [{"role": "user", "content": "hello"}],
        "tokens": 8,
        "budget": 8,
        "manifest": [entry("input", 1)],
        "degraded": False,
    }


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"input": "hello", "context_window": 7}, "body.input"),  # needs 8
        ({"input": "hello", "context_window": 100, "system": "x " * 200}, "body.input"),
        ({"input": "hello", "context_window": 100, "reserve": {"output": 100}}, "body.reserve"),
        ({"input": "", "context_window": 100}, "body.input"),
        ({"input": "hi", "context_window": 0}, "body.context_window"),
        ({"input": "hi", "context_window": 100, "session": "s" * 65}, "body.session"),
        ({"input": "hi", "context_window": 100, "quotas": {"memes": 1}}, "body.quotas.memes"),
        ({"input": "hi", "context_window": 100, "reserve": {"output": -1}},
         "body.reserve.output"),
        ({"input": "hi", "context_window": 100, "recall": {"limit": 101}}, "body.recall.limit"),
        ({"input": "hi", "context_window": 100, "recall": {"timeframe": "next full moon"}},
         "body.recall.timeframe"),
    ],
)  # fmt: skip
async def test_bad_input_or_an_input_that_cannot_fit_is_422_and_writes_nothing(
    client: httpx.AsyncClient, payload: dict[str, Any], field: str
) -> None:
    r = await client.post("/v1/robots/dave/prompt", json=payload)
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == PROBLEM
    assert [e["field"] for e in r.json()["errors"]] == [field]
    assert (await client.get("/v1/robots")).json() == []  # not even the robot registered


async def test_contents_that_merge_across_the_blank_lines_are_counted_exactly(
    client: httpx.AsyncClient,
) -> None:
    # Stored counts joined by count_joined: BPE merges ".\n\n", " \n\n", "\n\n\n" across
    # the separators, so the sum of the stored counts is not the count; the answer's is.
    contents = [
        "Ends in a full stop.",
        "ends in a space ",
        "ends in a newline\n",
        "\nstarts with a newline",
        "  starts with spaces",
        "/starts with a slash",
    ]
    for i, content in enumerate(contents):
        r = await client.post(
            "/v1/robots/erin/memories",
            json={"key": f"e{i}", "content": content, "importance": 9 - i},
        )
        assert r.status_code == 201, r.text
    r = await client.post(
        "/v1/robots/erin/prompt",
        json={"input": "hi ", "context_window": 500, "strategy": "important", "recall": None},
    )
    assert r.status_code == 200, r.text
    result = r.json()
    system = "\n\n".join(["Working memory:", *contents])
    assert result["messages"] == [
        {"role": "system", "content": system},
        {"role": "user", "content": "hi "},
    ]
    assert result["tokens"] == count_chat(result["messages"]) == 48
    assert toks(system) < sum(map(toks, ["Working memory:", *contents])) + len(contents)
    assert result["manifest"] == [
        entry("input", toks("hi ")),
        *(entry("working_memory", toks(c), key=f"e{i}") for i, c in enumerate(contents)),
    ]


async def test_a_session_lost_from_redis_is_taken_from_postgres_the_same(
    client: httpx.AsyncClient, world: list[str], redis: Any
) -> None:
    # SessionService.latest's PostgreSQL path (the hot copy misses its tail): the same
    # messages, counts and manifest, one access counted per message taken, the copy rebuilt.
    first = (await client.post("/v1/robots/alice/prompt", json=body())).json()
    [key] = [k async for k in redis.scan_iter(f"*{client.headers['X-Namespace']}/alice*session*")]
    await redis.delete(key)
    again = (await client.post("/v1/robots/alice/prompt", json=body())).json()
    assert again == first
    assert again["tokens"] == count_chat(again["messages"])
    assert await window_accesses(client) == [3, 3, 3]
    assert sorted(await redis.hkeys(key)) == ["1", "2", "3"]
