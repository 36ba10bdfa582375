"""The MCP part of the first-hour walk (bench/first_hour.sh): what a model is handed over
HTTP and what a recall with made-up keys costs, with the official SDK and tiktoken cl100k,
as tests/mcp/test_mcp_budget.py counts them. `python bench/first_hour_mcp.py BASE_URL`."""

from __future__ import annotations

import asyncio
import sys
import time
import uuid

import httpx2
import tiktoken
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.mcp.test_mcp_budget import MEMORIES

enc = tiktoken.get_encoding("cl100k_base")


def tokens(text: str) -> int:
    return len(enc.encode(text))


async def main(base: str) -> None:
    ns = f"first-hour-{uuid.uuid4().hex[:6]}"
    async with httpx2.AsyncClient(base_url=base, headers={"X-Namespace": ns}) as http:
        body = {"memories": [{"content": c} for _, c in MEMORIES]}
        r = await http.post("/v1/robots/ann/memories/batch", json=body)
        assert r.status_code == 201, r.text
        keys = [m["key"] for m in r.json()["memories"]]
    print(f"- made-up keys: {len(keys)}, {sum(tokens(k) for k in keys)} tokens")
    started = time.perf_counter()
    async with (
        httpx2.AsyncClient(headers={"X-Namespace": ns, "X-Robot": "ann"}, timeout=30) as http,
        streamable_http_client(f"{base}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as s,
    ):
        await s.initialize()
        print(f"- MCP initialize over HTTP: {(time.perf_counter() - started) * 1000:.0f} ms")
        listed = (await s.list_tools()).tools
        wire = [t.model_dump_json(by_alias=True, exclude_none=True) for t in listed]
        print(f"- tools listed: {len(listed)} ({', '.join(t.name for t in listed)})")
        print(f"- their definitions: {sum(tokens(w) for w in wire)} tokens")
        for strategy in ("hybrid", "fulltext"):
            t = time.perf_counter()
            r = await s.call_tool("recall", {"query": "database", "strategy": strategy})
            ms = (time.perf_counter() - t) * 1000
            hits = r.structured_content["hits"]
            text = r.content[0].text
            carried = sum(tokens(h["content"]) for h in hits)
            print(
                f"- recall ({strategy}) of {len(hits)} facts with made-up keys: text "
                f"{tokens(text)} tokens for {carried} of memory = "
                f"{tokens(text) / carried:.2f}x ({ms:.0f} ms)"
            )
        prompts = [p.name for p in (await s.list_prompts()).prompts]
        print(f"- prompts: {', '.join(prompts)}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
