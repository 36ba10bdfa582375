"""What MCP costs the model, measured with the official SDK client and tiktoken: the tool
definitions as they travel, and a recall's answer against the memory text it carries."""

from __future__ import annotations

import os
import sys
import uuid

import httpx2
import pytest
import tiktoken
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from app.mcp.aliases import MADE_UP
from tests.mcp.test_mcp_tools import TOOLS, mcp_session

DEFAULT = [  # HTM_MCP_TOOLS=default: an agent's loop
    "remember", "recall", "context", "forget", "memory_restore", "memory_update",
    "session_append", "prompt", "state_get", "state_set",
]  # fmt: skip
DEFINITIONS_MAX = 2500  # the default set: 2,165 tokens on 2026-12-07 (the walk; 2,134 at merge)
ALL_MAX = 6400  # HTM_MCP_TOOLS=all, without an LLM: 36 tools, 6,263 tokens on 2026-12-07
RECALL_MAX = 1.3
MEMORIES = [  # a sentence each, as an agent's facts are (16-25 tokens)
    (
        "db",
        "The staging database runs PostgreSQL 18 with pgvector 0.8; it was upgraded in "
        "May by the platform team.",
    ),
    (
        "deploys",
        "Deploys to staging happen every Tuesday after the nightly database backup, "
        "never on a Friday.",
    ),
    (
        "oncall",
        "Priya is on call for the payments database this week; Leo takes over on Monday morning.",
    ),
    (
        "cache",
        "Redis holds each robot's working memory, and the database keeps a mirror of "
        "it for repairs.",
    ),
    (
        "backup",
        "The database backup runs nightly at 02:00 UTC and is kept for thirty days "
        "in cold storage.",
    ),
    (
        "review",
        "Every change to the database schema needs two approvals and a migration "
        "test before it merges.",
    ),
    (
        "alerts",
        "Database alerts page the on-call engineer after five minutes of errors, and "
        "Slack after one.",
    ),
    (
        "replica",
        "A read replica of the database has served the reporting dashboards since "
        "June, with a minute of lag.",
    ),
    (
        "pool",
        "The database connection pool holds twenty connections per service process "
        "and ten more at peaks.",
    ),
    (
        "vacuum",
        "Autovacuum on the events table was tuned after the database slowed down in "
        "March during imports.",
    ),
]


@pytest.fixture(scope="module")
def base(live_server_factory) -> str:
    return live_server_factory()


def _tokens(listed) -> int:
    enc = tiktoken.get_encoding("cl100k_base")
    wire = [t.model_dump_json(by_alias=True, exclude_none=True) for t in listed]
    return sum(len(enc.encode(w)) for w in wire)


async def test_the_default_tool_definitions_fit_the_budget(base) -> None:
    async with mcp_session(base) as s:
        listed = (await s.list_tools()).tools
    assert [t.name for t in listed] == DEFAULT
    assert _tokens(listed) <= DEFINITIONS_MAX, _tokens(listed)


async def test_every_tool_input_is_described_and_all_of_them_cost_what_they_say(
    live_server_factory,
) -> None:
    async with mcp_session(live_server_factory(mcp_tools="all")) as s:
        listed = (await s.list_tools()).tools
    assert [t.name for t in listed] == TOOLS
    undescribed = [
        f"{t.name}.{name}"
        for t in listed
        for name, field in t.input_schema.get("properties", {}).items()
        if not field.get("description")
    ]
    assert undescribed == []
    assert _tokens(listed) <= ALL_MAX, _tokens(listed)


async def test_a_tool_not_offered_is_refused_saying_how_to_offer_it(live_server_factory) -> None:
    base = live_server_factory(mcp_tools="default,pools")
    ns = f"t-{uuid.uuid4().hex[:10]}"
    async with mcp_session(base, **{"X-Namespace": ns, "X-Robot": "ann"}) as s:
        listed = [t.name for t in (await s.list_tools()).tools]
        assert listed == [*DEFAULT, "pools", "pool_put", "pool_grant"]
        with pytest.raises(MCPError) as refused:
            await s.call_tool("memory_list", {})
        here = ", ".join(listed)
        assert (refused.value.code, refused.value.message) == (
            INVALID_PARAMS,
            "tool 'memory_list' is not offered here (HTM_MCP_TOOLS=default,pools): add "
            f"memory_list or its group memories to HTM_MCP_TOOLS; tools here: {here}",
        )
        assert (refused.value.data["status"], refused.value.data["tool"]) == (404, "memory_list")
        with pytest.raises(MCPError) as unknown:
            await s.call_tool("teleport", {})
        assert unknown.value.message == f"no tool 'teleport'; tools here: {here}"
    async with httpx2.AsyncClient(base_url=base, headers={"X-Namespace": ns}) as http:
        assert (await http.get("/v1/robots")).json() == []  # nothing was written


def test_an_unknown_tool_name_in_the_setting_stops_the_start(live_server_factory) -> None:
    with pytest.raises(ValueError, match="HTM_MCP_TOOLS: no tool or group 'teleport'"):
        live_server_factory(mcp_tools="default,teleport")


async def test_a_recall_of_ten_answers_little_more_than_the_memories(base) -> None:
    """With the keys the service makes up (`m-` and 32 hex digits, 20-26 tokens each): the
    text writes each as its alias, `#<id>`."""
    enc = tiktoken.get_encoding("cl100k_base")
    ns = f"t-{uuid.uuid4().hex[:10]}"
    async with httpx2.AsyncClient(base_url=base, headers={"X-Namespace": ns}) as http:
        body = {"memories": [{"content": c} for _, c in MEMORIES]}
        r = await http.post("/v1/robots/ann/memories/batch", json=body)
        assert r.status_code == 201
        ids = {m["key"]: m["id"] for m in r.json()["memories"]}
    assert all(MADE_UP.fullmatch(k) for k in ids)
    assert sum(len(enc.encode(k)) for k in ids) >= 180  # about 20 tokens a key
    async with mcp_session(base, **{"X-Namespace": ns, "X-Robot": "ann"}) as s:
        r = await s.call_tool("recall", {"query": "database", "strategy": "fulltext"})
    hits = r.structured_content["hits"]
    assert len(hits) == 10 and {h["key"] for h in hits} == set(ids)
    text = r.content[0].text
    date = hits[0]["date"]
    assert text == "\n".join([date, *(f"#{ids[h['key']]}: {h['content']}" for h in hits)])
    carried = sum(len(enc.encode(h["content"])) for h in hits)
    answered = len(enc.encode(text))
    assert answered <= RECALL_MAX * carried, (answered, carried)
    # the structured copy (for programs; the text is what a model reads) has no REST
    # fields around the memories either, and the keys themselves
    assert all(set(h) == {"key", "score", "date", "content"} for h in hits)


async def test_the_tools_take_the_aliases_their_answers_write(live_server_factory) -> None:
    ns = f"t-{uuid.uuid4().hex[:10]}"
    async with mcp_session(
        live_server_factory(mcp_tools="all"), **{"X-Namespace": ns, "X-Robot": "ann"}
    ) as s:
        first = await s.call_tool("remember", {"content": "Staging runs PostgreSQL 17"})
        key = first.structured_content["key"]
        assert MADE_UP.fullmatch(key)
        alias = first.content[0].text.removeprefix("remembered ")
        assert alias.startswith("#") and alias[1:].isdigit()
        second = await s.call_tool(
            "remember", {"content": "Staging runs PostgreSQL 18", "supersedes": [alias]}
        )
        assert second.structured_content["superseded"] == [key]
        new = second.content[0].text.split()[1].rstrip(";")
        assert second.content[0].text == f"remembered {new}; it supersedes {alias}"
        history = await s.call_tool("memory_history", {"key": new})
        assert [m["key"] for m in history.structured_content["chain"]] == [
            key, second.structured_content["key"]
        ]  # fmt: skip
        forgot = await s.call_tool("forget", {"key": new})
        assert (forgot.content[0].text, forgot.structured_content["key"]) == (
            f"forgot (restorable): {new}", second.structured_content["key"]
        )  # fmt: skip
        restored = await s.call_tool("memory_restore", {"key": new})
        assert restored.content[0].text == f"restored {new}"
        private = await s.call_tool(
            "remember", {"robot": "bob", "content": "Bob's diary", "visibility": "private"}
        )
        hidden = private.content[0].text.removeprefix("remembered ")
        refused = await s.call_tool("memory_versions", {"key": hidden})  # ann may not read it
        assert (refused.is_error, refused.structured_content["detail"]) == (
            True, f"memory {hidden!r} does not exist"
        )  # fmt: skip
        unknown = await s.call_tool("forget", {"key": "#999999999999"})
        assert unknown.structured_content["status"] == 404
        not_an_alias = await s.call_tool("forget", {"key": "#12a"})
        assert not_an_alias.structured_content["status"] == 422
        # a state key is not a memory's: no alias there
        state = await s.call_tool("state_get", {"key": alias})
        assert state.structured_content["status"] == 422


async def test_htm_mcp_loads_the_local_model_on_its_first_use(database_url, redis_url, tmp_path):
    """The default provider, the local model, loads on the first embed, not before
    `initialize` (how long `initialize` takes: bench/results/cli-startup.md)."""
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from app.config import PROJECT_ROOT

    env = {
        "HTM_DATABASE_URL": database_url,
        "HTM_REDIS_URL": redis_url,
        "HTM_DATA_DIR": str(tmp_path),
        # The first embed exports the model into the fresh data directory: on a busy machine
        # that takes longer than the default 10 s, and the subject here is when it loads.
        "HTM_EMBEDDING_TIMEOUT_S": "120",
        **{k: v for k, v in os.environ.items() if k in ("TIKTOKEN_CACHE_DIR", "HF_HUB_OFFLINE",
                                                         "TRANSFORMERS_OFFLINE", "PATH")},
    }  # fmt: skip
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "app.cli", "mcp", "--namespace", f"t-{uuid.uuid4().hex[:10]}"],
        env=env,
        cwd=str(PROJECT_ROOT),
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
        init = await s.initialize()
        assert init.server_info.name == "htm"
        # The model loads on the first embed, and then works.
        r = await s.call_tool("remember", {"robot": "ann", "content": "the model loads late"})
        assert not r.is_error, r.content
        hits = await s.call_tool("recall", {"robot": "ann", "query": "model", "strategy": "vector"})
        assert [h["content"] for h in hits.structured_content["hits"]] == ["the model loads late"]
