"""An agent loop over MCP, with state and a pinned note: `python clients/mcp_agent_loop.py
BASE_URL ROBOT [--key htm_...] [--namespace NS]`, against a running service (`make run`).

The agent pins its goal (a state key marked `pinned`: a note in every prompt), remembers two
facts, recalls one, builds the prompt for its model (the `prompt` tool: the system message
carries the pinned note), then records its progress in state by compare-and-set: it reads
the key's version, writes at that version, and a second write at the old version is refused
(412), as a concurrent agent's would be. Last it reads the state back. No model is called:
the point is what the service hands one. It uses only the default tool set, through the
official MCP SDK (`pip install mcp`) over streamable HTTP; docs/mcp.md shows a run, and
tests/mcp/test_mcp_agent_loop.py runs it against a live server and checks every line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

import httpx2
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

GOAL = "Ship release 2.0 on Friday; never deploy without a backup."
FACTS = {
    "staging-db": "Staging runs PostgreSQL 18; every migration goes there first.",
    "deploy-day": "Deploys happen on Fridays, after the nightly backup.",
}
QUESTION = "When do deploys happen?"


async def call(mcp: ClientSession, tool: str, **arguments: Any) -> Any:
    """A tool's structured answer; a tool error (the problem+json the REST route would give)
    raises with its text."""
    result = await mcp.call_tool(tool, arguments)
    if result.is_error:
        raise ToolError(result.content[0].text)  # type: ignore[union-attr]
    return result.structured_content


class ToolError(Exception):
    pass


async def loop(mcp: ClientSession) -> None:
    # 1. The goal, pinned: every prompt of this robot carries it, within its exact budget.
    note = await call(mcp, "state_set", key="goal", value=GOAL, pinned=True)
    print(f"pinned goal v{note['version']}")

    # 2. Remember what it learns (its own keys; made-up ones are written #<id>).
    for key, content in FACTS.items():
        await call(mcp, "remember", key=key, content=content, importance=7)
        print(f"remembered {key}")

    # 3. Recall (the hits are loaded into working memory too).
    found = await call(mcp, "recall", query=QUESTION, limit=1, strategy="fulltext")
    hit = found["hits"][0]
    print(f"recall {QUESTION!r} -> {hit['key']}: {hit['content']}")

    # 4. The prompt for the model: the pinned note, working memory and recall in the system
    # message, the input last.
    prompt = await call(mcp, "prompt", input="What should I do before the deploy?",
                        context_window=400, system="You are a release agent.")  # fmt: skip
    system = prompt["messages"][0]["content"]
    print(f"prompt: {len(prompt['messages'])} messages, {prompt['tokens']} tokens")
    print("system message:")
    print("\n".join(f"  | {line}".rstrip() for line in system.splitlines()))

    # 5. Progress in state by compare-and-set: read the version, write at it.
    await call(mcp, "state_set", key="progress", value={"step": "recalled", "done": 1})
    seen = await call(mcp, "state_get", key="progress")
    done = seen["value"]["done"] + 1
    moved = await call(mcp, "state_set", key="progress", value={"step": "prompted", "done": done},
                       version=seen["version"])  # fmt: skip
    print(f"progress v{seen['version']} -> v{moved['version']}")
    try:  # another agent still holding the old version loses
        await call(mcp, "state_set", key="progress", value={"step": "stale", "done": 0},
                   version=seen["version"])  # fmt: skip
    except ToolError as refused:
        problem = json.loads(str(refused))
        print(f"a write at v{seen['version']} again: {problem['status']} {problem['title']}")

    # 6. Read it back.
    now = await call(mcp, "state_get", key="progress")
    print(f"progress v{now['version']}: {json.dumps(now['value'], sort_keys=True)}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base_url", help="the service, e.g. http://127.0.0.1:8000")
    parser.add_argument("robot", help="the agent's robot name (a fresh one for a clean run)")
    parser.add_argument("--key", help="an API key (htm keys create), when auth is on")
    parser.add_argument("--namespace", help="the namespace, when auth is off (default: default)")
    args = parser.parse_args()
    headers = {"X-Robot": args.robot}
    if args.key:
        headers["Authorization"] = f"Bearer {args.key}"
    if args.namespace:
        headers["X-Namespace"] = args.namespace
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(f"{args.base_url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as mcp,
    ):
        await mcp.initialize()
        await loop(mcp)


if __name__ == "__main__":
    asyncio.run(main())
