"""A prompt reads working memory twice: an outline (keys and counts) to fit by, then the
contents of the items it takes. Under concurrent replaces and forgets of the same keys, every
prompt must still be one consistent state: each included item's content is a version that key
had, its manifest count is that content's count, the system message is exactly the included
contents in order, and the count is exact and within the budget."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import httpx
import tiktoken

ENC = tiktoken.get_encoding("cl100k_base")
KEYS = [f"m{i:02d}" for i in range(24)]


def toks(s: str) -> int:
    return len(ENC.encode(s))


def count_chat(messages: list[dict[str, str]]) -> int:
    return 3 + sum(3 + toks(m["role"]) + toks(m["content"]) for m in messages)


def version(key: str, v: int) -> str:
    """Each version of a key has another length, so another token count."""
    return f"Note {key} version {v}: " + " ".join(f"w{key}{v}x{j}" for j in range(1 + v % 5))


async def test_prompts_during_replaces_and_forgets_read_one_consistent_state(
    client: httpx.AsyncClient,
) -> None:
    r = await client.put("/v1/robots/c", json={"working_memory_budget": 1_000_000})
    assert r.status_code in (200, 201), r.text
    had: dict[str, set[str]] = {k: {version(k, 0)} for k in KEYS}
    for k in KEYS:
        r = await client.put(f"/v1/robots/c/memories/{k}", json={"content": version(k, 0)})
        assert r.status_code in (200, 201), r.text
    rng = random.Random(7)
    results: list[dict[str, Any]] = []
    budget_window = 420  # room for part of working memory only: the fit decides

    async def churn(n: int) -> None:
        for i in range(n):
            k = rng.choice(KEYS)
            if i % 4 == 3:
                r = await client.delete(f"/v1/robots/c/memories/{k}")
                assert r.status_code in (200, 404), r.text
            else:
                content = version(k, i + 1)
                had[k].add(content)  # before the write: a prompt may see it as soon as it lands
                r = await client.put(f"/v1/robots/c/memories/{k}", json={"content": content})
                assert r.status_code in (200, 201), r.text

    async def prompts(n: int) -> None:
        for _ in range(n):
            r = await client.post(
                "/v1/robots/c/prompt",
                json={
                    "input": "What do my notes say?",
                    "context_window": budget_window,
                    "recall": None,  # working memory alone: its section is the system message
                },
            )
            assert r.status_code == 200, r.text
            results.append(r.json())

    await asyncio.gather(churn(120), churn(120), prompts(60), prompts(60))

    assert len(results) == 120
    taken_any = 0
    for res in results:
        assert res["degraded"] is False
        included = [e for e in res["manifest"] if e["source"] == "working_memory" and e["included"]]
        system = res["messages"][0]["content"] if res["messages"][0]["role"] == "system" else ""
        header, *parts = system.split("\n\n") if system else [""]
        assert header == ("Working memory:" if included else "")
        assert len(parts) == len(included)
        for e, content in zip(included, parts, strict=True):
            assert content in had[e["key"]], (e["key"], content)
            assert e["tokens"] == toks(content)
        assert res["tokens"] == count_chat(res["messages"]) <= res["budget"] == budget_window
        taken_any += len(included)
    assert taken_any > 0
