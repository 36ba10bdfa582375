"""The Redis working-memory store (hot tier): one small set of keys per robot, changed only by
Lua scripts.

Per robot, under the prefix ``htm:v2:{<ns>/<robot>}:`` (one hash tag, so one cluster slot),
one hash per item field, each memory_key -> value, and two sorted sets that order the items:

- ``content``, ``tokens``, ``importance``, ``added_at`` (epoch µs), ``memory_id`` (the
  memory's id in Postgres), ``from_recall`` ("1"/"0")  HASHes memory_key -> field
- ``evict``  ZSET score = importance, member = ``%020d(added_at):memory_key``. Equal scores sort
  by member, i.e. oldest first: the eviction order (``eviction_order``).
- ``access`` ZSET score = last access epoch ms, member = memory_key
- ``meta``   HASH {tokens, budget, seq, gen}
- ``events`` STREAM the change stream: one entry per change (added, evicted, removed,
  cleared), written by the script that made it (``events_after``; app/working_memory/events.py)
- ``pending`` ZSET the recall loads answered but not applied yet (app/working_memory/loads.py):
  the read scripts (snapshot, outline, context) reply PENDING while one is, and ``_run``
  waits and asks again, so a read after a recall's response sees its hits in any process
- ``state`` HASH the holder's state keys (app/state/), a copy of PostgreSQL's: written by
  ``write_state`` (scripts/state.lua: only a newer version replaces one), read by
  ``read_state``, wiped by ``load`` (a rebuild)

So a script reads the fields it needs by key (context reads tokens and importance for the
items it orders, and content only for those it takes), never by parsing a stored document.
``v2`` names this layout: keys of the earlier one (``htm:{<ns>/<robot>}:items``, an item as
one JSON document) are never read, so a robot found only under them is not initialized here
and is rebuilt from Postgres like one Redis lost.

Every change is one script (scripts/*.lua, each after scripts/common.lua), so the token
budget holds under any concurrency with no locks and no read-modify-write from Python. Reads
are scripts too: snapshot (every item), outline (every item without its content) and contents
(the contents of named items: what a prompt takes after fitting an outline), and one context
script per strategy (the items a context takes, ordered and cut in Redis). A missing
``meta`` means Redis lost the robot's data (or never had it): calls then raise
WorkingMemoryNotInitialized and the caller rebuilds with ``load`` (from Postgres) and retries.

Every change (place, remove, clear, load) replies with the robot's (gen, seq): the
generation started by its last load and a counter bumped once per change. The write
protocol (protocol.py) records them in Postgres and checks that each change follows the
recorded one. A touch (or a refresh: a recall's hits all in place already) only moves last
accesses forward and changes neither.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple, TypedDict

import orjson
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from app.tracing import database_call
from app.working_memory.items import (
    MAX_INT,
    Outline,
    WMItem,
    check_int,
    items_from_fields,
    place_args,
)

SCRIPTS_DIR = Path(__file__).parent / "scripts"
# How a read that found a recall's load pending waits: first, then at most (doubling).
PENDING_POLL_S, PENDING_POLL_MAX_S = 0.001, 0.02
NAME_RE = re.compile(r"[A-Za-z0-9._-]{1,64}")
# A robot, or a group's working memory (app/groups: `group:<name>`).
ROBOT_RE = re.compile(r"(?:group:)?[A-Za-z0-9._-]{1,64}")

Strategy = Literal["recent", "important", "balanced"]
STRATEGIES: tuple[Strategy, ...] = ("recent", "important", "balanced")

# The version segment of every key: a new layout gets a new one, so no script ever reads
# keys written in another layout.
KEY_PREFIX = "htm:v2"

# Each script is its parts joined (Redis has no includes): the shared prelude first, then,
# for the context scripts, the context prelude.
SCRIPT_PARTS: dict[str, tuple[str, ...]] = {
    **{
        name: ("common", name)
        for name in (
            "place",
            "refresh",
            "load",
            "touch",
            "remove",
            "clear",
            "snapshot",
            "outline",
            "contents",
            "usage",
            "pending",
            "state",
        )
    },
    **{f"context_{s}": ("common", "context_common", f"context_{s}") for s in STRATEGIES},
}


class ContextItem(TypedDict):
    """One item a context takes, shaped as the API returns it."""

    key: str
    tokens: int
    importance: float
    score: float  # the strategy's ranking value: last access ms, importance, or balanced score


@dataclass(frozen=True)
class PlaceResult:
    """What one place/load call did. A key is in at most one list: where it ended up.

    admitted: placed and still present when the call finished (in order of first admission).
    rejected: larger than the whole budget, so not present (removed if it was).
    evicted: present before or during the call, evicted to make room (in eviction order).
    seq, gen: the robot's sequence number after this call and its generation.
    evicted_ids: the memory ids of the evicted items, in the same order.
    departed_ids: memory ids no longer present that were not evicted: a rejected item that
        was present, or another memory that held a re-used key.
    placed: per admitted key, (added_at_us, last_access_ms) as stored (a re-placed item
        keeps its added_at and the later last access).
    """

    admitted: list[str]
    rejected: list[str]
    evicted: list[str]
    tokens: int
    seq: int
    gen: int = 0
    evicted_ids: list[int] = field(default_factory=list)
    departed_ids: list[int] = field(default_factory=list)
    placed: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def change(self) -> Change:
        return Change(self.gen, self.seq)


class Change(NamedTuple):
    """The (gen, seq) a change left the robot at."""

    gen: int
    seq: int


@dataclass(frozen=True)
class RemoveResult:
    keys: list[str]
    ids: list[int]
    change: Change


@dataclass(frozen=True)
class ClearResult:
    count: int
    change: Change


class WorkingMemoryNotInitialized(Exception):
    """The robot's working memory is not in Redis (new robot or data loss): rebuild via load."""

    def __init__(self, ns: str, robot: str) -> None:
        super().__init__(f"working memory of {ns}/{robot} is not initialized")
        self.ns = ns
        self.robot = robot


class RobotKeys(NamedTuple):
    """A robot's keys, in the scripts' KEYS order (scripts/common.lua)."""

    content: str
    tokens: str
    importance: str
    added_at: str
    memory_id: str
    from_recall: str
    evict: str
    access: str
    meta: str
    events: str
    pending: str
    state: str


def robot_keys(ns: str, robot: str) -> RobotKeys:
    """The robot's keys; all share the hash tag ``{ns/robot}``."""
    for name, value, pattern in (("namespace", ns, NAME_RE), ("robot", robot, ROBOT_RE)):
        if not isinstance(value, str) or not pattern.fullmatch(value):
            raise ValueError(f"invalid {name} {value!r}: must match {pattern.pattern}")
    prefix = f"{KEY_PREFIX}:{{{ns}/{robot}}}:"
    return RobotKeys(*(prefix + part for part in RobotKeys._fields))


def script_source(name: str) -> str:
    """The Lua source of one script (a key of SCRIPT_PARTS)."""
    return "\n".join((SCRIPTS_DIR / f"{part}.lua").read_text() for part in SCRIPT_PARTS[name])


def register_scripts(redis: aioredis.Redis | RedisCluster) -> dict[str, Any]:
    """Every script, registered on the client. register_script calls EVALSHA and on NOSCRIPT
    (server restarted, SCRIPT FLUSH, new cluster node) loads the script and retries, so each
    script is sent in full rarely."""
    return {name: redis.register_script(script_source(name)) for name in SCRIPT_PARTS}


def _server(redis: aioredis.Redis | RedisCluster) -> dict[str, Any]:
    """The span attributes naming the Redis server: its address and port (a cluster's first
    node: a script runs on its key's master, which a span does not learn) and, for a single
    server over TCP, the database index (db.namespace)."""
    attributes: dict[str, Any] = {"db.system.name": "redis"}
    host: Any
    port: Any
    db: Any
    if isinstance(redis, RedisCluster):
        node = redis.get_default_node()
        host, port, db = (node.host, node.port, None) if node is not None else (None, None, None)
    else:
        kwargs = redis.connection_pool.connection_kwargs
        host, port, db = kwargs.get("host"), kwargs.get("port"), kwargs.get("db")
    if host:
        attributes["server.address"] = host
        attributes["server.port"] = int(port or 6379)
    if db is not None:
        attributes["db.namespace"] = str(db)
    return attributes


class WorkingMemoryStore:
    """Per-robot working memory in Redis or Redis Cluster. Needs a decode_responses=True client.

    Budgets are passed per call (Postgres owns each robot's budget); after every script the
    robot's token total is at most the budget of the last place/load.
    """

    def __init__(self, redis: aioredis.Redis | RedisCluster) -> None:
        self._redis = redis
        self._scripts = register_scripts(redis)
        self._server = _server(redis)
        self.pending_waits = 0  # reads that found a recall's load pending (tests, /metrics)

    async def _run(self, name: str, ns: str, robot: str, args: list[str]) -> list[Any]:
        keys = robot_keys(ns, robot)
        wait_s = PENDING_POLL_S
        while True:
            with database_call("redis", lambda: self._script_span(name)):
                reply = await self._scripts[name](keys=keys, args=args)
            if reply[0] != "PENDING":
                break
            # A recall's load of this robot, answered before it was applied, runs in some
            # process (loads.py): wait for it (at most until its deadline, in the script).
            self.pending_waits += 1
            await asyncio.sleep(wait_s)
            wait_s = min(2 * wait_s, PENDING_POLL_MAX_S)
        if reply[0] == "NOINIT":
            raise WorkingMemoryNotInitialized(ns, robot)
        return list(reply[1:])

    def _script_span(self, name: str) -> tuple[str, dict[str, Any]]:
        """A script call's span by the OpenTelemetry database conventions: the command
        (EVALSHA; redis-py loads the script and retries on NOSCRIPT) and the script's name,
        "EVALSHA place"."""
        attributes = {
            **self._server,
            "db.operation.name": "EVALSHA",
            "db.stored_procedure.name": name,
        }
        return f"EVALSHA {name}", attributes

    @staticmethod
    def _place_result(reply: list[Any]) -> PlaceResult:
        gen, seq, tokens, admitted, rejected, evicted, evicted_ids, other_ids, times = reply
        admitted = list(admitted)
        return PlaceResult(
            admitted=admitted,
            rejected=list(rejected),
            evicted=list(evicted),
            tokens=int(tokens),
            seq=int(seq),
            gen=int(gen),
            evicted_ids=[int(i) for i in evicted_ids],
            departed_ids=[int(i) for i in other_ids],
            placed={
                key: (int(times[2 * i]), int(times[2 * i + 1])) for i, key in enumerate(admitted)
            },
        )

    async def place(self, ns: str, robot: str, items: list[WMItem], budget: int) -> PlaceResult:
        """Add or update items in order in one atomic step, evicting until each fits.

        Re-placing a present key of the same memory replaces content, tokens, importance and
        from_recall but keeps the original added_at (its age, hence its slot among equal
        importances); last access becomes the later of the two. A key held by another memory
        is replaced outright. An item with tokens > budget is rejected and removed if it was
        present. Items are admitted even when more important ones must be evicted.
        """
        reply = await self._run("place", ns, robot, place_args(items, budget))
        return self._place_result(reply)

    async def refresh(self, ns: str, robot: str, items: list[WMItem]) -> list[str]:
        """If every item is held exactly as place() would leave it (the same memory under its
        key, with the same content, tokens, importance and from_recall), move each one's last
        access forward to its last_access_ms and return []; otherwise change nothing and
        return the keys not held so. Not a change: no seq, no event (a recall repeated)."""
        (missing,) = await self._run("refresh", ns, robot, place_args(items, 0))
        return list(missing)

    async def touch(self, ns: str, robot: str, key: str, access_ms: int) -> int | None:
        """Record an access; the memory id found under the key, None if the key is not in
        working memory."""
        if not isinstance(key, str) or not key:
            raise ValueError(f"memory key must be a non-empty string: {key!r}")
        found, memory_id = await self._run(
            "touch", ns, robot, [key, str(check_int("access_ms", access_ms))]
        )
        return int(memory_id) if int(found) else None

    async def remove(self, ns: str, robot: str, entries: list[tuple[str, int]]) -> RemoveResult:
        """Remove each (key, memory id) whose item is that memory; returns what was removed
        (each once, in the order given) and the change."""
        args: list[str] = []
        for key, memory_id in entries:
            if not isinstance(key, str) or not key:
                raise ValueError(f"memory key must be a non-empty string: {key!r}")
            args += [key, str(check_int("memory_id", memory_id))]
        gen, seq, keys, ids = await self._run("remove", ns, robot, args)
        return RemoveResult(list(keys), [int(i) for i in ids], Change(int(gen), int(seq)))

    async def clear(self, ns: str, robot: str) -> ClearResult:
        """Remove every item; the robot stays initialized with 0 tokens."""
        gen, seq, count = await self._run("clear", ns, robot, [])
        return ClearResult(int(count), Change(int(gen), int(seq)))

    async def mark_pending(self, ns: str, robot: str, token: str, ttl_ms: int) -> None:
        """A recall's load of the robot is pending (token: the load's) for at most ttl_ms:
        until unmark_pending, or that deadline, the read scripts wait for it."""
        await self._run("pending", ns, robot, ["add", token, str(check_int("ttl_ms", ttl_ms))])

    async def unmark_pending(self, ns: str, robot: str, tokens: list[str]) -> None:
        """These loads of the robot are applied (or given up): reads no longer wait for them."""
        if tokens:
            await self._run("pending", ns, robot, ["done", *tokens])

    async def drop(self, ns: str, robot: str) -> None:
        """Delete every key of a robot whose row is gone (one command: one hash slot)."""
        await self._redis.unlink(*robot_keys(ns, robot))

    async def write_state(
        self, ns: str, robot: str, op: str, key: str, version: int, payload: str, keep_ms: int
    ) -> bool:
        """Write the copy of one state key (op: put, delete with payload '', or fill), kept
        `keep_ms` after the holder's last state write; False when Redis holds a version at
        least as new (nothing written)."""
        if op not in ("put", "delete", "fill") or not isinstance(key, str) or not key:
            raise ValueError(f"bad state write {op!r} of {key!r}")
        args = [op, key, str(check_int("version", version)), payload, str(keep_ms)]
        (written,) = await self._run("state", ns, robot, args)
        return int(written) == 1

    async def read_state(self, ns: str, robot: str, key: str) -> tuple[int, str] | None:
        """The copy of one state key: (version, payload; '' for a deleted key), or None
        when Redis holds none."""
        raw = await self._redis.hget(robot_keys(ns, robot).state, key)
        if raw is None:
            return None
        version, _, payload = str(raw).partition(":")
        return int(version), payload

    async def load(self, ns: str, robot: str, items: list[WMItem], budget: int) -> PlaceResult:
        """Atomic rebuild: wipe, start a new generation, then place items as place() would.

        The new seq (also the generation id) is above every seq this robot had before, even
        when Redis lost the old one: it is seeded from the Redis clock in microseconds.
        """
        reply = await self._run("load", ns, robot, place_args(items, budget))
        return self._place_result(reply)

    async def snapshot(self, ns: str, robot: str) -> tuple[list[WMItem], int]:
        """All items in eviction order (next victim first) and the token total, read atomically."""
        items, tokens, _ = await self.snapshot_at(ns, robot)
        return items, tokens

    async def snapshot_at(self, ns: str, robot: str) -> tuple[list[WMItem], int, str]:
        """snapshot(), and the id of the change stream's last entry at that moment ("0-0":
        none): following the stream after it, a client misses no change and sees none twice."""
        tokens, keys, *fields, last_id = await self._run("snapshot", ns, robot, [])
        return items_from_fields(keys, fields), int(tokens), str(last_id)

    async def outline(self, ns: str, robot: str) -> list[Outline]:
        """Every item without its content, in eviction order, read atomically: what an order
        and a budget need (a prompt), several times lighter than snapshot() for a large
        working memory. The contents of those taken: contents()."""
        _tokens, keys, *numbers = await self._run("outline", ns, robot, [])
        toks, imps, added, access = map(orjson.loads, numbers)
        return list(map(Outline, keys, toks, imps, added, access))

    async def contents(self, ns: str, robot: str, keys: list[str]) -> list[tuple[str, int] | None]:
        """(content, tokens) of each key, read atomically; None where the key holds no item."""
        contents, tokens = await self._run("contents", ns, robot, keys)
        return [
            None if c is None or t is None else (c, int(t))
            for c, t in zip(contents, tokens, strict=True)
        ]

    async def events_after(
        self, ns: str, robot: str, after: str, *, block_ms: int, count: int = 100
    ) -> list[tuple[str, dict[str, str]]]:
        """The change stream's entries after `after` (an entry id), waiting up to `block_ms`
        for one; [] when none came."""
        key = robot_keys(ns, robot).events
        reply: Any = await self._redis.xread({key: after}, count=count, block=block_ms)
        if not reply:
            return []
        entries = reply[key][0] if isinstance(reply, dict) else reply[0][1]  # RESP3 : RESP2
        return [(str(i), dict(fields)) for i, fields in entries]

    async def last_event(self, ns: str, robot: str) -> str:
        """The id of the change stream's last entry ("0-0": none): following the stream after
        it, a follower sees every change from now on (MCP's subscriptions, app/mcp/)."""
        key = robot_keys(ns, robot).events
        last: Any = await self._redis.xrevrange(key, count=1)
        return str(last[0][0]) if last else "0-0"

    async def has_event(self, ns: str, robot: str, event_id: str) -> bool:
        """Whether the change stream still holds this entry (it keeps about the last 1,000)."""
        key = robot_keys(ns, robot).events
        return bool(await self._redis.xrange(key, event_id, event_id, count=1))

    async def context(
        self, ns: str, robot: str, strategy: Strategy, *, max_tokens: int, now_ms: int
    ) -> tuple[list[str], list[ContextItem], int]:
        """What context.assemble() takes from the snapshot: the taken items' contents and
        items in the strategy's order, and their token sum. The order and the cut are
        computed inside Redis (scripts/context_<strategy>.lua), so that only the taken items
        are sent."""
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r}: expected one of {STRATEGIES}")
        # The script ages items in microseconds: now_ms * 1000 must stay an exact double.
        if check_int("now_ms", now_ms) > MAX_INT // 1000:
            raise ValueError(f"now_ms must be below 2**53 / 1000: {now_ms!r}")
        args = [str(check_int("max_tokens", max_tokens)), str(now_ms)]
        reply = await self._run(f"context_{strategy}", ns, robot, args)
        tokens, keys, contents, *numbers = reply
        toks, imps, scores = map(orjson.loads, numbers)
        items: list[ContextItem] = [
            {"key": key, "tokens": t, "importance": float(imp), "score": float(score)}
            for key, t, imp, score in zip(keys, toks, imps, scores, strict=True)
        ]
        return list(contents), items, int(tokens)

    async def usage(self, ns: str, robot: str) -> tuple[int, int] | None:
        """(tokens, items), or None if the robot's working memory is not initialized."""
        state = await self.state(ns, robot)
        return None if state is None else (state[0], state[1])

    async def usage_many(self, ns: str, robots: list[str]) -> list[tuple[int, int] | None]:
        """usage() of many robots in one round trip (a pipeline). A robot whose working memory
        is not initialized, or whose script failed on its own, is None: the caller asks again
        one by one. redis-py refuses EVALSHA in a cluster pipeline, so on a cluster the
        robots are asked concurrently instead."""
        if not robots:
            return []
        if isinstance(self._redis, RedisCluster):
            return await asyncio.gather(*(self.usage(ns, robot) for robot in robots))
        pipe = self._redis.pipeline(transaction=False)
        for robot in robots:
            await self._scripts["usage"](keys=robot_keys(ns, robot), args=[], client=pipe)
        replies = await pipe.execute(raise_on_error=False)
        return [
            (int(r[1]), int(r[2])) if isinstance(r, list) and r and r[0] == "OK" else None
            for r in replies
        ]

    async def state(self, ns: str, robot: str) -> tuple[int, int, Change] | None:
        """(tokens, items, (gen, seq)), or None if the robot's working memory is not
        initialized."""
        try:
            tokens, count, gen, seq = await self._run("usage", ns, robot, [])
        except WorkingMemoryNotInitialized:
            return None
        return int(tokens), int(count), Change(int(gen), int(seq))

    async def ping(self) -> str:
        """The Redis server version (of any node, on a cluster)."""
        info = await self._redis.info("server")
        if "redis_version" not in info:  # RedisCluster answers per node: {node: info}
            info = next(iter(info.values()))
        return str(info["redis_version"])
