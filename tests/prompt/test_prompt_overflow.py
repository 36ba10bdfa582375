"""POST /v1/robots/{robot}/prompt with `overflow` (issue 48, item 3): what did not fit (the
session, working memory, recall) summarised last in the system message, in the room left,
counted exactly (tiktoken here, OpenAI's chat rule) — real PostgreSQL and Redis, and a real
local HTTP server speaking the OpenAI chat API for the LLM's summary."""

from __future__ import annotations

import asyncio
import collections
import itertools
import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from tests.mcp.test_mcp_tools import mcp_session
from tests.prompt.test_prompt_api import (
    A1,
    A2,
    CONTENT,
    INPUT,
    PROBLEM,
    SYSTEM,
    TURNS,
    body,
    count_chat,
    manifest,
    toks,
    world,
)

__all__ = ["world"]  # the fixture, shared with test_prompt_api

HEADER = "Summary of what did not fit:"
QUOTAS = {"session": toks(TURNS[2][1]) + toks(TURNS[1][1]), "working_memory": toks(A1), "recall": 0}
QUOTA = (False, "section_quota")


def summary_entry(
    tokens: int,
    covers: list[tuple[str, str | None, int | None]],
    *,
    summarizer: str | None = "extractive",
    fallback: str | None = None,
) -> dict[str, Any]:
    included = summarizer is not None
    return {
        "source": "summary", "key": None, "seq": None, "tokens": tokens, "included": included,
        "reason": None if included else "budget",
        "covers": [{"source": s, "key": k, "seq": q} for s, k, q in covers],
        "summarizer": summarizer, "fallback": fallback,
    }  # fmt: skip


def quota_manifest(order: list[str]) -> list[dict[str, Any]]:
    """The manifest of body(quotas=QUOTAS): session 1, a2 and the hits b1, b2 left out."""
    return manifest(order, session_1=QUOTA, working_a2=QUOTA, recall_b1=QUOTA, recall_b2=QUOTA)


def covered(order: list[str]) -> list[tuple[str, str | None, int | None]]:
    hits = [k for k in order if k in ("b1", "b2")]
    return [
        ("session", None, 1),
        ("working_memory", "a2", None),
        *(("recall", k, None) for k in hits),
    ]


def system_with(summary: str) -> str:
    return "\n\n".join([SYSTEM, "Working memory:", A1, HEADER, summary])


def quota_messages(system: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": system},
        {"role": "assistant", "content": TURNS[1][1]},
        {"role": "user", "content": TURNS[2][1]},
        {"role": "user", "content": INPUT},
    ]


async def prompt(client: httpx.AsyncClient, **extra: Any) -> dict[str, Any]:
    r = await client.post("/v1/robots/alice/prompt", json=body(**extra))
    assert r.status_code == 200, r.text
    return r.json()


async def test_what_the_quotas_left_out_is_summarised_extractively_and_counted_exactly(
    client: httpx.AsyncClient, world: list[str]
) -> None:
    result = await prompt(client, quotas=QUOTAS, overflow="summarize")
    hits = [CONTENT[k] for k in world if k in ("b1", "b2")]
    # Every left-out candidate's sentences, in manifest order: the session's with its role.
    digest = " ".join([f"user: {TURNS[0][1]}", A2, *hits])
    assert result["messages"] == quota_messages(system_with(digest))
    assert result["tokens"] == count_chat(result["messages"])
    assert result["manifest"] == [
        *quota_manifest(world),
        summary_entry(toks(digest), covered(world)),
    ]


@pytest.mark.parametrize(
    ("budget", "digest", "covers"),
    [
        # The summary's section costs 7 here (its header; both blank lines merge), the prompt
        # without it 52: below 66 no sentence fits, and the entry says so.
        (65, None, []),
        (66, A2, [("working_memory", "a2", None)]),
        (68, f"user: {TURNS[0][1]}", [("session", None, 1)]),
        # The first sentences in manifest order while they fit: A2 (+7) does not after the
        # session's (9) in 15, B2 (+6) does.
        (74, f"user: {TURNS[0][1]} {CONTENT['b2']}",
         [("session", None, 1), ("recall", "b2", None)]),
        (85, f"user: {TURNS[0][1]} {A2} {CONTENT['b1']}",
         [("session", None, 1), ("working_memory", "a2", None), ("recall", "b1", None)]),
        (91, f"user: {TURNS[0][1]} {A2} {CONTENT['b1']} {CONTENT['b2']}",
         [("session", None, 1), ("working_memory", "a2", None), ("recall", "b1", None),
          ("recall", "b2", None)]),
    ],
)  # fmt: skip
async def test_on_a_tight_budget_the_summary_takes_the_sentences_that_fit(
    client: httpx.AsyncClient,
    world: list[str],
    budget: int,
    digest: str | None,
    covers: list[tuple[str, str | None, int | None]],
) -> None:
    assert world == ["b1", "b2", "a2", "a1"]  # the fulltext ranking the table assumes
    window = budget + 800
    dropped = await prompt(client, quotas=QUOTAS, context_window=window)
    result = await prompt(client, quotas=QUOTAS, overflow="summarize", context_window=window)
    assert dropped["tokens"] == 52
    if digest is None:
        assert (result["messages"], result["tokens"]) == (dropped["messages"], 52)
        assert result["manifest"] == [*dropped["manifest"], summary_entry(0, [], summarizer=None)]
        return
    assert result["messages"] == quota_messages(system_with(digest))
    assert result["tokens"] == count_chat(result["messages"]) == budget
    assert result["manifest"] == [*dropped["manifest"], summary_entry(toks(digest), covers)]


async def test_the_count_is_exact_and_within_the_budget_at_every_budget_and_takes_nothing_away(
    client: httpx.AsyncClient, world: list[str]
) -> None:
    # Without quotas: what is left out, it is for the budget. Summarising never changes what
    # is taken: the messages and manifest are drop's plus the summary.
    seen = []
    for budget, quotas in itertools.product(range(40, 130, 3), [{}, {"quotas": QUOTAS}]):
        window = budget + 800
        dropped = await prompt(client, context_window=window, **quotas)
        result = await prompt(client, overflow="summarize", context_window=window, **quotas)
        assert result["tokens"] == count_chat(result["messages"]) <= budget
        *taken, summary = result["manifest"]
        left = [
            {"source": e["source"], "key": e["key"], "seq": e["seq"]}
            for e in taken
            if e["reason"] in ("budget", "section_quota")
        ]
        if not left:
            assert result == dropped
            seen.append("all fit")
            continue
        assert taken == dropped["manifest"]
        assert summary["source"] == "summary"
        assert all(c in left for c in summary["covers"])
        if not summary["included"]:
            assert (summary["covers"], result["messages"]) == ([], dropped["messages"])
            seen.append("no room")
            continue
        seen.append(len(summary["covers"]))
        system = result["messages"][0]["content"]
        before, text = system.split(f"\n\n{HEADER}\n\n") if "\n\n" + HEADER in system else (
            None, system.removeprefix(f"{HEADER}\n\n"))  # fmt: skip
        assert toks(text) == summary["tokens"]
        if before is not None:
            assert dropped["messages"][0]["content"] == before
        assert result["messages"][-len(dropped["messages"]) + 1 :] == dropped["messages"][1:]
    # Every outcome occurred: no room for a sentence, a summary of 1 to 4 candidates, all fit.
    assert sorted(collections.Counter(map(str, seen)).items()) == [
        ("1", 4),
        ("2", 2),
        ("3", 3),
        ("4", 13),
        ("all fit", 10),
        ("no room", 28),
    ]


async def test_drop_is_the_default_and_unchanged(
    client: httpx.AsyncClient, world: list[str]
) -> None:
    default = await prompt(client, quotas=QUOTAS)
    assert await prompt(client, quotas=QUOTAS, overflow="drop") == default
    assert default["manifest"] == quota_manifest(world)
    assert default["messages"] == quota_messages("\n\n".join([SYSTEM, "Working memory:", A1]))


async def test_with_nothing_left_out_there_is_no_summary(
    client: httpx.AsyncClient, world: list[str]
) -> None:
    assert await prompt(client, overflow="summarize") == await prompt(client)


@pytest.mark.parametrize("overflow", ["squash", None, 1, "Summarize"])
async def test_a_bad_overflow_is_422_and_writes_nothing(
    client: httpx.AsyncClient, overflow: Any
) -> None:
    payload = {"input": "hi", "context_window": 100, "overflow": overflow}
    r = await client.post("/v1/robots/dave/prompt", json=payload)
    assert (r.status_code, r.headers["content-type"]) == (422, PROBLEM), r.text
    assert [e["field"] for e in r.json()["errors"]] == ["body.overflow"]
    assert (await client.get("/v1/robots")).json() == []


# --- the LLM's summary (HTM_LLM_PROVIDER=openai against a real local server) ---------------

ASK = (
    "The items below did not fit an AI agent's prompt (its conversation, working memory and "
    "recalled memories). Write one summary of them that keeps what the agent will most "
    "likely need, in at most {target} tokens. Answer with the summary only."
)
REPLY = "Alice flies to Lisbon on Friday. The Lisbon office opens at nine. Trams are yellow."


def chat(content: str) -> tuple[int, dict[str, Any]]:
    return 200, {"choices": [{"message": {"role": "assistant", "content": content}}]}


@pytest.fixture
async def llm_client(app_factory, ns, stub):  # type: ignore[no-untyped-def]
    async with app_factory(llm_provider="openai", llm_url=stub.url, llm_timeout_s=1.0) as c:
        c.headers["X-Namespace"] = ns
        yield c


def room(budget: int) -> int:
    """What the summary's text may have: the budget less the prompt with an empty summary."""
    return budget - count_chat(quota_messages(system_with("")))


async def test_with_an_llm_its_summary_is_placed_and_it_was_shown_what_did_not_fit(
    llm_client: httpx.AsyncClient, world: list[str], stub: Any
) -> None:
    stub.reply = lambda _req: chat(REPLY)
    result = await prompt(llm_client, quotas=QUOTAS, overflow="summarize")
    assert result["messages"] == quota_messages(system_with(REPLY))
    assert result["tokens"] == count_chat(result["messages"])
    assert result["manifest"] == [
        *quota_manifest(world),
        summary_entry(toks(REPLY), covered(world), summarizer="llm"),
    ]
    hits = [CONTENT[k] for k in world if k in ("b1", "b2")]
    (sent,) = stub.requests
    assert (sent.path, sent.body["messages"]) == (
        "/v1/chat/completions",
        [
            {"role": "system", "content": ASK.format(target=room(3200))},
            {"role": "user", "content": "\n".join(
                f"- {t}" for t in [f"user: {TURNS[0][1]}", A2, *hits])},
        ],
    )  # fmt: skip


async def test_the_llms_summary_is_cut_to_whole_sentences_in_the_room_left(
    llm_client: httpx.AsyncClient, world: list[str], stub: Any
) -> None:
    stub.reply = lambda _req: chat(REPLY)
    budget = 75  # room for 16 tokens: the reply's first two sentences (7 + 7), not the third
    result = await prompt(
        llm_client, quotas=QUOTAS, overflow="summarize", context_window=budget + 800
    )
    cut = "Alice flies to Lisbon on Friday. The Lisbon office opens at nine."
    assert result["messages"] == quota_messages(system_with(cut))
    assert result["tokens"] == count_chat(result["messages"]) == budget - 2
    assert result["manifest"][-1] == summary_entry(toks(cut), covered(world), summarizer="llm")
    (sent,) = stub.requests
    assert sent.body["messages"][0]["content"] == ASK.format(target=room(budget))


async def test_no_transaction_stays_open_while_the_llm_writes_the_summary(
    llm_client: httpx.AsyncClient, world: list[str], stub: Any
) -> None:
    """The request's reads (and its recall's log rows) are committed before the LLM is asked:
    no connection of this database is idle in a transaction while the LLM takes its time."""
    stub.reply, stub.delay_s = (lambda _req: chat(REPLY)), 0.7
    asking = asyncio.create_task(prompt(llm_client, quotas=QUOTAS, overflow="summarize"))
    while not stub.requests:
        assert not asking.done()
        await asyncio.sleep(0.005)
    await asyncio.sleep(0.2)  # the LLM is still answering
    async with llm_client.app.state.components.sessionmaker() as s:
        held = (
            await s.execute(
                text("""SELECT count(*) FROM pg_stat_activity
                        WHERE datname = current_database() AND state = 'idle in transaction'
                          AND xact_start < now() - interval '150 milliseconds'""")
            )
        ).scalar()
    assert (held, asking.done()) == (0, False)
    result = await asking
    assert result["manifest"][-1] == summary_entry(toks(REPLY), covered(world), summarizer="llm")


EXTRACTIVE = f"user: {TURNS[0][1]} {A2} {CONTENT['b1']} {CONTENT['b2']}"


@pytest.mark.parametrize(
    ("reply", "delay_s", "fallback"),
    [
        (lambda _r: (500, {"error": "overloaded"}), 0, "the LLM failed: "),
        (lambda _r: chat(REPLY), 2.0, "the LLM failed: "),
        (lambda _r: (200, {"choices": []}), 0, "the LLM failed: "),
        (lambda _r: chat("One sentence that is far too long to fit in the little room " * 9),
         0, "the LLM's summary has no sentence within 32 tokens"),
    ],
    ids=["down", "timeout", "bad-body", "too-long"],
)  # fmt: skip
async def test_an_llm_that_fails_falls_back_to_extractive_and_says_why(
    llm_client: httpx.AsyncClient, world: list[str], stub: Any, reply: Any, delay_s: float,
    fallback: str,
) -> None:  # fmt: skip
    assert world == ["b1", "b2", "a2", "a1"]
    stub.reply, stub.delay_s = reply, delay_s
    budget = 91  # room for the extractive summary of all four, exactly
    result = await prompt(
        llm_client, quotas=QUOTAS, overflow="summarize", context_window=budget + 800
    )
    assert result["messages"] == quota_messages(system_with(EXTRACTIVE))
    assert result["tokens"] == count_chat(result["messages"]) == budget
    *_, summary = result["manifest"]
    assert summary["fallback"].startswith(fallback), summary["fallback"]
    assert summary == summary_entry(toks(EXTRACTIVE), covered(world), fallback=summary["fallback"])
    assert len(stub.requests) == 1


async def test_the_llm_is_not_asked_when_nothing_is_left_out_there_is_no_room_or_drop(
    llm_client: httpx.AsyncClient, world: list[str], stub: Any
) -> None:
    stub.reply = lambda _req: chat(REPLY)
    assert "manifest" in await prompt(llm_client, overflow="summarize")  # everything fits
    no_room = await prompt(llm_client, quotas=QUOTAS, overflow="summarize", context_window=58 + 800)
    assert no_room["manifest"][-1] == summary_entry(0, [], summarizer=None)
    await prompt(llm_client, quotas=QUOTAS)  # drop
    assert stub.requests == []


async def test_the_mcp_prompt_tool_summarises_as_rest_does(live_server_factory) -> None:
    import httpx2

    base = live_server_factory()
    ns = f"t-{uuid.uuid4().hex[:10]}"
    args = {"input": "hi", "context_window": 60, "overflow": "summarize"}
    long = "Ann flies on Friday. " + "She packs light and early, as ever. " * 12
    async with httpx2.AsyncClient(base_url=base, headers={"X-Namespace": ns}) as http:
        for key, content in (("a", A1), ("b", A2), ("c", long)):
            body = {"key": key, "content": content, "importance": 3}
            assert (await http.post("/v1/robots/ann/memories", json=body)).status_code == 201
        rest = (await http.post("/v1/robots/ann/prompt", json=args)).json()
    async with mcp_session(base, **{"X-Namespace": ns, "X-Robot": "ann"}) as s:
        r = await s.call_tool("prompt", args)
    assert not r.is_error, r.content
    assert r.structured_content == {"messages": rest["messages"], "tokens": rest["tokens"]}
    entries = [e for e in rest["manifest"] if e["source"] != "recall"]
    assert [e["source"] for e in entries] == ["input", *["working_memory"] * 3, "summary"]
    assert sorted((e["key"], e["included"]) for e in entries[1:4]) == [
        ("a", True), ("b", True), ("c", False)
    ]  # fmt: skip
    assert (entries[-1]["included"], entries[-1]["covers"]) == (
        True, [{"source": "working_memory", "key": "c", "seq": None}]
    )  # fmt: skip
    # c's first sentences while they fit: room for the first and two of its twelve others.
    digest = "Ann flies on Friday." + " She packs light and early, as ever." * 2
    assert rest["messages"][0]["content"].endswith(f"\n\n{HEADER}\n\n{digest}")
    assert rest["tokens"] == count_chat(rest["messages"]) <= 60
