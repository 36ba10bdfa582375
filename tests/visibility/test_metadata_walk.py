"""Nothing a robot may not read reaches it, not even as metadata (issue 43): every route of the
committed spec, every MCP tool and resource and the change stream, called through keys bound
to four robots, answer no key, no content and no count of a memory (or a pool) that robot may
not read. A key or a name the request itself sends may come back (a 404 says what was asked).

The world holds each way a memory can be named by another: a superseded namespace-wide fact
whose successor is private (written before supersedes had to cover its audience: put in by
SQL), a link, a conversation's turns around a hit, a profile's slots, a snapshot of a memory
narrowed since, a group's memory and a pool's.

ann and bob are the group `team`; the pool `vault7` grants cat write and dan read."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, unquote

import httpx
import pytest
from sqlalchemy import text

from app.http.openapi import SPEC_PATH
from tests.auth.test_auth import bearer
from tests.mcp.test_mcp_tools import _key, mcp_session

POOL = "vault7"
TURN = {"session": "chat1", "speaker": "ann"}
# (author, key, extra body): each content says its key in capitals, so a content is told
# apart from a key the request names.
MEMORIES: list[tuple[str, str, dict[str, Any]]] = [
    ("ann", "fact-open", {}),
    ("ann", "fact-old", {}),
    ("ann", "succ-annpriv", {"visibility": "private"}),
    ("ann", "priv-ann", {"visibility": "private", "readers": ["bob"]}),
    ("ann", "note-team", {"visibility": "group"}),
    ("ann", "fact-narrow", {}),  # made private to ann after dan's snapshot held it
    ("ann", "zed-salary", {"visibility": "private", "metadata": {
        "subject": "zed", "attribute": "salary", "value": "ZED-SALARY-VALUE"}}),
    ("ann", "turn-one", {"metadata": TURN}),
    ("ann", "turn-secret", {"visibility": "private", "metadata": TURN}),
    ("ann", "turn-three", {"metadata": TURN}),
    ("cat", "priv-cat", {"visibility": "private"}),
    ("cat", "pool-note", {"pool": POOL}),
]  # fmt: skip
KEYS = [k for _, k, _ in MEMORIES]
EVERYONE = {"fact-open", "fact-old", "turn-one", "turn-three", "profile:zed:city@1"}
READABLE = {
    "ann": EVERYONE | {"succ-annpriv", "priv-ann", "note-team", "fact-narrow", "zed-salary",
                       "turn-secret"},
    "bob": EVERYONE | {"priv-ann", "note-team"},
    "cat": EVERYONE | {"priv-cat", "pool-note"},
    "dan": EVERYONE | {"pool-note"},
}  # fmt: skip
POOLS = {"ann": set(), "bob": set(), "cat": {POOL}, "dan": {POOL}}
ROBOTS = sorted(READABLE)
SKIP = {"keys-revoke", "robots-delete"}  # only an admin's, and they would end the world


def content_of(key: str) -> str:
    return f"zebra {key.upper()} zebra"


def markers(robot: str) -> set[str]:
    """What must not reach `robot`: the keys and contents (and a private profile slot's
    value) of the memories it may not read, and the pools it is not granted."""
    hidden = [k for k in KEYS if k not in READABLE[robot]]
    found = {*hidden, *(content_of(k) for k in hidden), *({POOL} - POOLS[robot])}
    if "zed-salary" in hidden:
        found.add("ZED-SALARY-VALUE")
    return found


class Walk:
    """The leaks found: (robot, what was called, marker); a marker the request sent itself
    is an echo, not a leak."""

    def __init__(self, http: httpx.AsyncClient, admin: dict[str, str]) -> None:
        self.leaks: list[tuple[str, str, str]] = []
        self.calls = 0
        self.http = http
        self.admin = admin

    def check(self, robot: str, call: str, sent: str, answer: str) -> None:
        self.calls += 1
        for marker in markers(robot):
            if marker in answer and marker not in sent:
                self.leaks.append((robot, call, marker))

    def count(self, robot: str, call: str, what: str, got: Any, expected: Any) -> None:
        if got != expected:
            self.leaks.append((robot, call, f"{what}: {got!r}, may see {expected!r}"))

    async def stats(self, robot: str, call: str, body: dict[str, Any]) -> None:
        """A namespace's statistics as `robot` sees them: what it may read (the world's and
        what the walk added since, every one namespace-wide) and its own working memory."""
        everything = (await self.http.get("/v1/stats", headers=self.admin)).json()["memories"]
        added = everything - len(MEMORIES) - 1  # the world's and its profile slot
        self.count(robot, call, "memories", body["memories"], len(READABLE[robot]) + added)
        self.count(robot, call, "deleted", body["deleted_memories"], 0)
        self.count(robot, call, "robots", [r["robot"] for r in body["robots"]], [robot])


@pytest.fixture(scope="module")
def base(live_server_factory) -> str:
    return live_server_factory(auth_enabled=True, mcp_tools="all")


async def _build(http: httpx.AsyncClient, admin: dict[str, str], database_url: str, ns: str):
    async def call(method: str, url: str, body: Any = None) -> httpx.Response:
        r = await http.request(method, url, headers=admin, json=body)
        assert r.status_code < 300, (url, r.text)
        return r

    await call("PUT", "/v1/groups/team", {"members": ["ann", "bob"]})
    await call("PUT", f"/v1/pools/{POOL}", {"type": "team", "writers": ["cat"], "readers": ["dan"]})
    for author, key, extra in MEMORIES:
        body = {"key": key, "content": content_of(key), "tags": [f"t:{key}"], **extra}
        await call("POST", f"/v1/robots/{author}/memories", body)
    await call("PUT", "/v1/robots/dan", {})
    await call("PATCH", "/v1/robots/ann/profiles/zed", {"slots": {"city": "Oslo"}})
    await call("POST", "/v1/robots/ann/memories/fact-open/links", {"target": "priv-ann"})
    before = quote(datetime.now(UTC).isoformat())
    await asyncio.sleep(0.05)
    # Data from before successors had to cover what they supersede: a namespace-wide fact
    # superseded by a private one (now refused with a 409).
    from app.db.engine import create_engine
    from tests.conftest import make_settings

    engine = create_engine(make_settings(database_url, "redis://unused"))
    try:
        async with engine.begin() as c:
            await c.execute(
                text("""
                UPDATE memory o SET valid_to = clock_timestamp(), version = o.version + 1,
                       superseded_by = (SELECT k.memory_id FROM memory_key k
                                        WHERE k.namespace_id = o.namespace_id
                                          AND k.key = 'succ-annpriv')
                WHERE o.namespace_id = (SELECT id FROM namespace WHERE name = :ns)
                  AND o.key = 'fact-old'"""),
                {"ns": ns},
            )
    finally:
        await engine.dispose()
    # dan holds fact-narrow in a snapshot, then it becomes ann's alone.
    await call("POST", "/v1/robots/dan/recall", {"query": "zebra", "strategy": "fulltext"})
    snapshot = (await call("POST", "/v1/robots/dan/snapshots", {"name": "before"})).json()["id"]
    await call(
        "PUT",
        "/v1/robots/ann/memories/fact-narrow",
        {"content": content_of("fact-narrow"), "visibility": "private"},
    )
    for robot in ROBOTS:  # each working memory holds what its robot read
        await call("POST", f"/v1/robots/{robot}/recall", {"query": "zebra", "strategy": "fulltext"})
    return before, snapshot


def _variants(op: str, path: str, robot: str, before: str, snapshot: int) -> list[tuple[str, Any]]:
    """(url, body) for one operation as `robot`: a read with each memory's key, a change with
    each key the robot may not read (a refusal) and on what is its own."""
    url = path.replace("{robot}", robot).replace("{group}", "team").replace("{pool}", POOL)
    url = url.replace("{session}", "s1").replace("{subject}", "zed").replace("{key_id}", "1")
    url = url.replace("{snapshot_id}", str(snapshot)).replace("{version}", "1")
    url = url.replace("{target}", "fact-open").replace("{entity}", "ann")
    hidden = [k for k in KEYS if k not in READABLE[robot]]
    now = datetime.now(UTC)
    recall = {"query": "zebra", "strategy": "fulltext", "limit": 50}
    bodies: dict[str, list[Any]] = {
        "memories-add": [
            {"content": f"{robot} own zebra", "key": f"own-{robot}"},
            *({"content": "again", "supersedes": [k]} for k in hidden),
        ],
        "memories-add-batch": [{"memories": [{"content": "batch zebra", "key": f"b-{robot}"}]}],
        "memories-put": [{"content": "changed"}],
        "memories-importance": [{"boost": 1}],
        "memories-link": [{"target": "fact-open"}],
        "recall-search": [
            recall,
            {**recall, "expand": "related", "neighbours": 2, "explain": True},
            {**recall, "include": ["superseded"], "load_into_working_memory": False},
            {**recall, "valid_at": unquote(before), "load_into_working_memory": False},
            {**recall, "pools": [POOL]},
        ],
        "prompt-assemble": [
            {
                "input": "zebra",
                "context_window": 8000,
                "session": "s1",
                "profile": {"subject": "zed"},
                "recall": {"strategy": "fulltext"},
            }
        ],
        "sessions-append": [{"messages": [{"role": "user", "content": "zebra?"}]}],
        "profiles-patch": [{"slots": {"mood": "fine"}}],
        "snapshots-create": [{"name": "walk"}],
        "robots-put": [{"working_memory_budget": 100000}],
        "groups-put": [{"members": ["ann", "bob", "cat"]}],
        "pools-put": [{"type": "shared", "readers": [robot]}],
        "pools-grant": [{"level": "read"}],
        "keys-create": [{"name": "x", "role": "reader"}],
        "tags-rename": [{"from": "t", "to": "u"}],
        "retention-put": [{"policies": [{"rule": "idle", "days": 1}]}],
        "retention-run": [{"dry_run": True}],
        "maintenance-put": [{"schedule": None, "steps": ["supersede"]}],
        "entities-aliases-put": [{"aliases": {"annie": "ann"}}],
    }
    queries: dict[str, list[str]] = {
        "memories-get": ["", "?include_deleted=true", f"?as_of={quote(now.isoformat())}"],
        "memories-list": [
            "?limit=200",
            "?limit=200&include=superseded",
            f"?limit=200&valid_at={before}",
            "?limit=200&include_deleted=true&scope=all",
            f"?limit=200&pool={POOL}",
        ],
        "memories-related": ["?depth=3"],
        "tags-tree": ["", f"?robot={robot}"],
        "entities-list": ["?limit=200", "?kind=person"],
        "entities-memories": ["?limit=200"],
    }
    if op == "profiles-patch":
        url = url.replace("/zed", f"/own-{robot}")  # the world's subject stays as it is
    if "{key}" in url:
        is_read = op in {"memories-get", "memories-versions", "memories-history",
                         "memories-related"}  # fmt: skip
        keys = KEYS if is_read else [*hidden, f"own-{robot}"]
        urls = [url.replace("{key}", k) for k in keys]
    else:
        urls = [url]
    urls = [u + q for u in urls for q in queries.get(op, [""])]
    return [(u, b) for u in urls for b in bodies.get(op, [None])]


async def _stream_snapshot(http: httpx.AsyncClient, url: str, headers: dict[str, str]) -> str:
    """The change stream's first event (its snapshot), or the refusal."""
    async with http.stream("GET", url, headers=headers) as response:
        if response.status_code != 200:
            return (await response.aread()).decode()
        got: list[str] = []
        async with asyncio.timeout(10):
            async for line in response.aiter_lines():
                got.append(line)
                if not line and any(x.startswith("data:") for x in got):
                    break
        return "\n".join(got)


async def _rest(walk: Walk, http: httpx.AsyncClient, robot: str, key: str, before: str,
                snapshot: int, *, reads: bool) -> None:  # fmt: skip
    headers = bearer(key)
    spec = json.loads(SPEC_PATH.read_text())
    ops = sorted(
        ((method, path, op["operationId"]) for path, item in spec["paths"].items()
         for method, op in item.items() if path.startswith("/v1/")),
        key=lambda o: o[0] == "delete",  # the deletes last: the snapshot is restored first
    )  # fmt: skip
    for method, path, op_id in ops:
        if op_id in SKIP or (method == "get") != reads:
            continue
        for url, body in _variants(op_id, path, robot, before, snapshot):
            call = f"{method.upper()} {url}"
            sent = call + json.dumps(body)
            if op_id == "working-memory-events":
                walk.check(robot, call, sent, await _stream_snapshot(http, url, headers))
                continue
            r = await http.request(method.upper(), url, headers=headers, json=body)
            assert r.status_code < 500, (call, r.text)
            walk.check(robot, call, sent, r.text)
            if op_id == "stats-namespace":
                await walk.stats(robot, call, r.json())
            if op_id == "pools-list":
                names = {p["name"] for p in r.json()}
                walk.count(robot, call, "pools", names, POOLS[robot])
            if op_id == "pools-get":
                expected = 200 if POOLS[robot] else 404
                walk.count(robot, call, "status", r.status_code, expected)
            if op_id == "entities-list":
                # ann's turns name her (the speaker): count only those the robot reads.
                turns = {"turn-one", "turn-secret", "turn-three"} & READABLE[robot]
                counts = {e["entity"]: e["memories"] for e in r.json()["items"]}
                walk.count(robot, call, "entity ann", counts.get("ann"), len(turns))
            if op_id == "snapshots-get" and r.status_code == 200:
                _snapshot(walk, robot, call, r.json())


def _snapshot(walk: Walk, robot: str, call: str, body: dict[str, Any]) -> None:
    """dan's snapshot counts what it shows: its items, and of the memories readable then
    (every current one: fact-old had ended) those dan may still read."""
    items = (len(body["items"]), sum(i["tokens"] for i in body["items"]))
    walk.count(robot, call, "items", (body["item_count"], body["tokens"]), items)
    walk.count(robot, call, "readable", body["readable"], len(READABLE[robot] - {"fact-old"}))


MCP_KEYED = {"memory_versions", "memory_history", "memory_related", "memory_restore"}


async def _mcp(walk: Walk, base: str, robot: str, key: str) -> None:
    hidden = [k for k in KEYS if k not in READABLE[robot]]
    calls: list[tuple[str, dict[str, Any]]] = [
        ("remember", {"content": "mcp own zebra", "key": f"mcp-{robot}"}),
        *(("remember", {"content": "x", "supersedes": [k]}) for k in hidden),
        ("recall", {"query": "zebra", "strategy": "fulltext", "limit": 50}),
        ("context", {"max_tokens": 100000}),
        *(("forget", {"key": k}) for k in hidden),
        ("stats", {}),
        ("list_tags", {}),
        ("entities", {"limit": 200}),
        ("entity_memories", {"entity": "ann", "limit": 200}),
        *((name, {"key": k}) for name in sorted(MCP_KEYED) for k in KEYS),
        *(("memory_link", {"key": f"mcp-{robot}", "target": k}) for k in hidden),
        *(("memory_importance", {"key": k, "boost": 1}) for k in hidden),
        *(("memory_feedback", {"key": k, "used": False}) for k in hidden),
        *(("memory_update", {"key": k, "content": "zebra"}) for k in hidden),
        ("memory_list", {"limit": 200}),
        ("state_set", {"key": "note", "value": "zebra"}),
        ("state_get", {"key": "note"}),
        ("session_append", {"session": "s2", "messages": [{"role": "user", "content": "z"}]}),
        ("session_window", {"session": "s2"}),
        ("prompt", {"input": "zebra", "context_window": 8000}),
        ("profile_get", {"subject": "zed"}),
        ("profile_set", {"subject": f"mcp-{robot}", "slots": {"mood": "ok"}}),
        ("snapshot_create", {"name": "mcp"}),
        ("snapshot_list", {}),
        ("group_status", {"group": "team"}),
        ("group_recall", {"group": "team", "query": "zebra"}),
        ("group_create", {"group": "spies", "members": ["ann", "cat"]}),
        ("group_join", {"group": "team"}),
        ("group_leave", {"group": "team"}),
        ("group_failover", {"group": "team", "failed": "ann", "to": robot}),
        ("pools", {}),
        ("pools", {"pool": POOL}),
        ("pool_put", {"pool": POOL, "type": "shared", "readers": [robot]}),
        ("pool_grant", {"pool": POOL, "robot": robot, "level": "read"}),
    ]
    async with mcp_session(base, **bearer(key)) as s:
        listed = {t.name for t in (await s.list_tools()).tools}
        assert listed == {name for name, _ in calls} | {"snapshot_restore"}
        snapshots = await s.call_tool("snapshot_list", {})
        ids = [x["id"] for x in snapshots.structured_content["snapshots"]]
        calls += [("snapshot_restore", {"id": i}) for i in ids]
        for name, args in calls:
            r = await s.call_tool(name, args)
            shown = "".join(getattr(c, "text", "") for c in r.content)
            shown += json.dumps(r.structured_content)
            walk.check(robot, f"mcp {name}", json.dumps(args), shown)
            if name == "pools":
                got = (
                    r.structured_content["status"]
                    if r.is_error
                    else {p["pool"] for p in r.structured_content["pools"]}
                )
                expected = 404 if args and not POOLS[robot] else POOLS[robot]
                walk.count(robot, f"mcp pools {args}", "pools", got, expected)
        uris = [str(x.uri) for x in (await s.list_resources()).resources]
        for uri in uris:
            body = (await s.read_resource(uri)).contents[0]
            shown = getattr(body, "text", "")
            walk.check(robot, f"mcp {uri}", uri, shown)
            if uri == "htm://stats":
                await walk.stats(robot, uri, json.loads(shown))


async def test_no_key_content_or_count_of_an_unreadable_memory_reaches_a_bound_key(
    base, database_url
) -> None:
    ns = f"t-{uuid.uuid4().hex[:10]}"
    admin = bearer(await _key(database_url, ns, "admin"))
    keys = {robot: await _key(database_url, ns, "writer", robot=robot) for robot in ROBOTS}
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        walk = Walk(http, admin)
        before, snapshot = await _build(http, admin, database_url, ns)
        # Every read first (the world as built), then MCP's, then every change of REST.
        for robot in ROBOTS:
            await _rest(walk, http, robot, keys[robot], before, snapshot, reads=True)
        for robot in ROBOTS:
            await _mcp(walk, base, robot, keys[robot])
        for robot in ROBOTS:
            await _rest(walk, http, robot, keys[robot], before, snapshot, reads=False)
    assert walk.calls > 900
    assert walk.leaks == [], f"{len(walk.leaks)} leaks:\n" + "\n".join(map(str, walk.leaks))
