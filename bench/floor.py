"""The floor: the service's own SQL sent directly with asyncpg, its own Lua with redis-py.

`RawSession` runs the service's repositories (app/*/repository.py: the SQL builders the
service itself uses, SQLAlchemy `text()` clauses) over a raw asyncpg connection, compiled by
the service's own `app.db.session.compiled` into the same `$n` SQL its sessions send.
`Floor` then replays, per operation, the statement sequence of one service request, in the
same transactions, with the same Lua scripts (read from app/working_memory/scripts) —
everything but HTTP, FastAPI, pydantic, the service's pool checkout (SQLAlchemy's) and the
service's Python between the calls. Token counting is not part of the floor (it uses
counts computed beforehand), nor would be a pool pre-ping (BEGIN; ";"; ROLLBACK per checkout)
if the service's engine turned one on.

The sequences mirror app/memories/service.py (add_many, retrieve), app/recall/service.py,
app/working_memory/protocol.py (place, touch), app/working_memory/service.py (context),
app/stats/service.py; keep them in step.

`core_*` are the bare minimum for an operation: the search statements alone, one raw INSERT,
one snapshot or context script.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
from sqlalchemy.sql.elements import TextClause

from app.config import Settings
from app.db.rows import Result
from app.db.sql import bound
from app.events.repository import EventRepository
from app.memories.adds import GroupCommit
from app.memories.duplicate_repository import DuplicateRepository
from app.memories.model import AddGroup, MemoryDraft, NewMemory
from app.memories.repository import MemoryRepository
from app.recall.caches import SearchCaches
from app.recall.conversation_repository import ConversationRepository
from app.recall.fusion import Fusion, deployment_fusion
from app.recall.planner import EF_SEARCH_DEFAULT
from app.recall.query import SearchFilters, SearchQuery
from app.recall.search import Search
from app.robots.repository import RobotRepository
from app.sessions.hot import SessionHotStore, session_key
from app.sessions.repository import SessionRepository
from app.stats.repository import StatsRepository
from app.working_memory.repository import MembershipRepository, Placed
from app.working_memory.store import Change, register_scripts, robot_keys

try:  # the service caches robots per process (app/robots/cache.py); so does the floor
    from app.working_memory.robots import TTL_S as ROBOT_TTL_S
except ImportError:  # pragma: no cover - a service without the cache
    ROBOT_TTL_S = 0.0

# The repositories change as the service does; call them the way the checked-out code expects.
_EVENTS_TAKE_CLOCK = "clock" in inspect.signature(EventRepository.__init__).parameters
_ACTIVITY_TAKES_UNTIL = "until" in inspect.signature(StatsRepository.activity).parameters


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _events(s: RawSession) -> EventRepository:
    """EventRepository as the services build it (stamped by the clock, when it takes one)."""
    if _EVENTS_TAKE_CLOCK:
        return EventRepository(s, _utc_now)  # type: ignore[arg-type, call-arg]
    return EventRepository(s)  # type: ignore[arg-type]


class RawSession:
    """Stands in for the DbSession the repositories are given: the same SQL and arguments
    (app.db.session.bound), on a connection the floor holds in its own transaction."""

    def __init__(self, conn: asyncpg.Connection, capture: list[Any] | None = None) -> None:
        self.conn = conn
        self.capture = capture

    async def execute(self, clause: TextClause, params: Any = None) -> Result:
        sql, args, many = bound(clause, params)
        if self.capture is not None:
            self.capture.append((sql, args, many))
        if many:
            await self.conn.executemany(sql, args)
            return Result([])
        return Result(await self.conn.fetch(sql, *args))


class PooledSession:
    """What GroupCommit's sessionmaker hands out (DbSession's shape): a pooled connection,
    its transaction, and the RawSession's statements."""

    def __init__(self, pool: asyncpg.Pool, capture: list[Any] | None) -> None:
        self.pool = pool
        self.capture = capture
        self._acquired: Any = None
        self._raw: RawSession | None = None

    async def __aenter__(self) -> PooledSession:
        self._acquired = self.pool.acquire()
        self._raw = RawSession(await self._acquired.__aenter__(), self.capture)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._acquired.__aexit__(*exc)

    @contextlib.asynccontextmanager
    async def begin(self) -> AsyncIterator[PooledSession]:
        assert self._raw is not None
        async with self._raw.conn.transaction():
            yield self

    async def execute(self, clause: TextClause, params: Any = None) -> Result:
        assert self._raw is not None
        return await self._raw.execute(clause, params)


@dataclass(frozen=True)
class AddItem:
    content: str
    tokens: int
    vector: list[float]
    type: str = "fact"
    importance: float = 1.0
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class RecallSpec:
    strategy: str
    query: str
    vector: list[float] | None  # None: hybrid is full text alone (a service without a model)
    self_scope: bool
    start: datetime | None
    end: datetime | None
    limit: int
    load: bool


def _us(t: datetime) -> int:
    return int(t.timestamp() * 1_000_000)


def _from_us(us: int) -> datetime:
    return datetime.fromtimestamp(us / 1_000_000, UTC)


class Floor:
    def __init__(
        self,
        pool: asyncpg.Pool,
        redis: Any,
        namespace: str,
        namespace_id: int,
        default_budget: int,
        fusion: Fusion | None = None,
        dedupe: str | None = None,
    ) -> None:
        self.pool = pool
        self.redis = redis
        self.ns = namespace
        self.ns_id = namespace_id
        self.default_budget = default_budget
        # The service's default fusion, as a request naming none gets it.
        defaults = Settings(_env_file=None)  # type: ignore[call-arg]
        self.fusion = fusion or deployment_fusion(defaults)
        # The deployment's dedupe rule for adds that ask for none (HTM_DEDUPE): under `exact`
        # an add of new content costs one more statement (MemoryService._may_duplicate).
        self.exact_dedupe = (dedupe or defaults.dedupe) == "exact"
        self.vector_query = defaults.recall_vector_query
        self.capture: list[Any] | None = None
        self._robots: dict[str, tuple[float, Any]] = {}
        self._caches = SearchCaches()  # as the service keeps one per app
        self.scripts = register_scripts(redis)  # the store's own scripts
        # Adds commit as the service's do: concurrent ones share a transaction.
        self._adds = GroupCommit(
            lambda: PooledSession(self.pool, self.capture),  # type: ignore[arg-type, return-value]
            self._caches.vectors,
        )

    async def aclose(self) -> None:
        """Let the adds already queued commit before the pool closes."""
        await self._adds.aclose()

    def _session(self, conn: asyncpg.Connection) -> RawSession:
        return RawSession(conn, self.capture)

    async def _robot(self, s: RawSession, name: str, register: bool = True) -> Any:
        """RobotService.ensure / require: from the per-process cache while it is fresh."""
        hit = self._robots.get(name)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        repo = RobotRepository(s)  # type: ignore[arg-type]
        if register:
            res = await repo.ensure(self.ns_id, name)
            row = res[0] if isinstance(res, tuple) else res  # (row, created) in newer code
        else:
            row = await repo.get(self.ns_id, name)
        if row is None:
            raise RuntimeError(f"floor: no robot {name!r}")
        self._robots[name] = (time.monotonic() + ROBOT_TTL_S, row)
        return row

    def _budget(self, robot: Any) -> int:
        return int(robot.working_memory_budget or self.default_budget)

    # --- Redis: the store's scripts, rebuilt once when the robot is not initialized ----------

    async def _script(self, name: str, robot: str, args: list[str], budget: int) -> list[Any]:
        keys = robot_keys(self.ns, robot)
        reply = await self.scripts[name](keys=keys, args=args)
        if reply[0] == "NOINIT":  # a robot the floor has not used yet: empty rebuild, retry
            await self.scripts["load"](keys=keys, args=[str(budget), "0"])
            reply = await self.scripts[name](keys=keys, args=args)
        return list(reply[1:])

    async def _place(
        self,
        s: RawSession,
        robot: Any,
        # id, created_at, version, key, content, tokens, importance
        placements: Sequence[tuple[int, datetime, int, str, str, int, float]],
        from_recall: bool,
    ) -> None:
        """WriteProtocol.place: the robot's lock (with the placed memories at their version),
        one place script, then one statement recording membership, the change and evictions.
        (The floor skips the protocol's Python: the (gen, seq) check and its rebuilds.)"""
        members = MembershipRepository(s, self.ns_id)  # type: ignore[arg-type]
        state = await members.lock(
            self.ns_id, robot.id, self.default_budget, [(p[0], p[1], p[2]) for p in placements]
        )
        assert state is not None
        live = [p for p in placements if p[0] in state.live]
        now = datetime.now(UTC)
        now_us = _us(now)
        args = [str(state.budget), str(len(live))]
        for i, (mid, _, _, key, content, tokens, imp) in enumerate(live):
            args += [key, content, str(tokens), repr(float(imp)), str(now_us + i)]
            args += [str(now_us // 1000), "1" if from_recall else "0", str(mid)]
        gen, seq, _tokens, admitted, _rej, _ev, evicted_ids, other_ids, times = await self._script(
            "place", robot.name, args, state.budget
        )
        by_key = {p[3]: p for p in live}
        placed = [
            Placed(
                by_key[k][0],
                by_key[k][1],
                _from_us(int(times[2 * i])),
                _from_us(int(times[2 * i + 1]) * 1000),
                from_recall,
            )
            for i, k in enumerate(admitted)
        ]
        present = {p.memory_id for p in placed}
        await members.record_place(
            self.ns_id,
            robot.id,
            Change(int(gen), int(seq)),
            placed=placed,
            departed=[int(i) for i in (*evicted_ids, *other_ids) if int(i) not in present],
            evicted=[int(i) for i in evicted_ids if int(i) not in present],
            at=now,
        )

    # --- operations, one service request each ---------------------------------------------

    async def add(self, robot_name: str, items: Sequence[AddItem]) -> None:
        """MemoryService.add_many with client vectors: commit, then working memory."""
        async with self.pool.acquire() as conn, conn.transaction():
            s = self._session(conn)
            robot = await self._robot(s, robot_name)
            if self.exact_dedupe and await DuplicateRepository(s).any_exact(  # type: ignore[arg-type]
                self.ns_id, [(it.type, it.content) for it in items]
            ):
                raise RuntimeError("floor add: a duplicate (the bench's adds are all new)")
        # No connection is held while the group commits (it needs one from the same pool).
        keys = [f"m-{uuid.uuid4().hex}" for _ in items]
        drafts = [
            MemoryDraft(
                key=keys[i],
                created_at=None,
                content=it.content,
                type=it.type,
                importance=it.importance,
                tags=list(it.tags),
                metadata={},
                token_count=it.tokens,
                embedding=it.vector,
                embedding_model="client",
            )
            for i, it in enumerate(items)
        ]
        # One statement claims the keys, logs the events and stores the rows, in a
        # transaction shared with the adds queued meanwhile (app/memories/adds.py).
        stored = await self._adds.store(AddGroup(self.ns_id, robot.id, drafts, _utc_now()))
        new = [
            NewMemory.from_draft(d, *stored.claimed[d.key], author_robot_id=robot.id)
            for d in drafts
        ]
        async with self.pool.acquire() as conn:
            s = self._session(conn)
            async with conn.transaction():  # the answer is built from what was written
                await self._place(
                    s,
                    robot,
                    [
                        (m.id, m.created_at, 1, m.key, m.content, m.token_count, m.importance)
                        for m in new
                    ],
                    from_recall=False,
                )

    async def _recall_in(
        self, s: RawSession, robot_name: str, spec: RecallSpec
    ) -> tuple[Any, list[Any]]:
        """RecallService.recall up to its hits, in the caller's transaction: robot, the
        namespace's speakers (when the service reads them), search, recall events."""
        robot = await self._robot(s, robot_name)
        if spec.strategy == "hybrid" or (
            spec.strategy == "vector" and self.vector_query == "without_speakers"
        ):  # RecallService._speakers: the namespace's speakers a question may name
            await ConversationRepository(s).speakers(self.ns_id)  # type: ignore[arg-type]
        hits = await self._search(s, spec, robot.id if spec.self_scope else None)
        await _events(s).record(
            self.ns_id,
            "recall",
            robot.id,
            memory_ids=[h.id for h in hits],
            detail={"strategy": spec.strategy},
            wait_for_flush=False,
        )
        return robot, hits

    async def recall(self, robot_name: str, spec: RecallSpec) -> int:
        """RecallService.recall: robot, search, recall events, optionally working memory."""
        async with self.pool.acquire() as conn, conn.transaction():
            s = self._session(conn)
            robot, hits = await self._recall_in(s, robot_name, spec)
            if spec.load and hits:
                await self._place(
                    s,
                    robot,
                    [
                        (
                            h.id,
                            h.created_at,
                            h.version,
                            h.key,
                            h.content,
                            h.token_count,
                            h.importance,
                        )
                        for h in hits
                    ],
                    from_recall=True,
                )
            return len(hits)

    async def _search(self, s: RawSession, spec: RecallSpec, author_id: int | None) -> list[Any]:
        search = Search(s, EF_SEARCH_DEFAULT, self._caches)  # type: ignore[arg-type]
        query = SearchQuery(
            self.ns_id,
            spec.limit,
            SearchFilters(author_robot_id=author_id, start=spec.start, end=spec.end),
            text=spec.query,
            vector=spec.vector if spec.strategy != "fulltext" else None,
            fusion=self.fusion,
        )
        if spec.strategy == "vector":
            return await search.vector(query)
        if spec.strategy == "fulltext":
            return await search.fulltext(query)
        return await search.hybrid(query)

    async def prompt(self, robot_name: str, spec: RecallSpec, session: str, max_tokens: int) -> int:
        """PromptService.prompt: the recall (as recall(), without loading) and the session's
        touch in one transaction, working memory's outline from Redis beside them (as the
        service reads it), the session's hot copy, then the contents of the items whose
        counts fit what the session left of `max_tokens`. Returns the items read."""
        outlining = asyncio.ensure_future(
            self._script("outline", robot_name, [], self.default_budget)
        )
        async with self.pool.acquire() as conn, conn.transaction():
            s = self._session(conn)
            robot, _hits = await self._recall_in(s, robot_name, spec)
            live = await SessionRepository(s).touch(  # type: ignore[arg-type]
                robot.id, session, datetime.now(UTC), refresh=True
            )
        assert live is not None, f"floor prompt: no session {session!r}"
        held = await SessionHotStore(self.redis).read(
            session_key(self.ns, robot_name, live.id), live.ttl_s * 1000
        )
        left = max_tokens - sum(m.tokens for m in held.values())
        _total, keys, tokens, *_ = await outlining
        taken: list[str] = []
        for key, n in zip(keys, json.loads(tokens), strict=True):
            if n + 1 <= left:
                taken.append(key)
                left -= n + 1
        await self._script("contents", robot_name, taken, self.default_budget)
        return len(taken)

    async def context(
        self, robot_name: str, strategy: str = "balanced", max_tokens: int | None = None
    ) -> int:
        """get_context: the robot (from the cache, so usually no SQL at all), one context
        script (the order and the cut happen in Redis). The defaults are the service's.
        Returns the context's token count."""
        hit = self._robots.get(robot_name)
        if hit is not None and hit[0] > time.monotonic():
            robot = hit[1]
        else:
            async with self.pool.acquire() as conn, conn.transaction():
                robot = await self._robot(self._session(conn), robot_name, register=False)
        budget = self._budget(robot)
        args = [str(max_tokens or budget), str(int(time.time() * 1000))]
        tokens, *_arrays = await self._script(f"context_{strategy}", robot_name, args, budget)
        return int(tokens)

    async def retrieve(self, robot_name: str, key: str) -> None:
        """MemoryService.retrieve: read, robot, access event, touch script (+ membership)."""
        async with self.pool.acquire() as conn, conn.transaction():
            s = self._session(conn)
            row = await MemoryRepository(s).get(self.ns_id, key)
            if row is None:
                raise RuntimeError(f"floor retrieve: no memory {key!r}")
            robot = await self._robot(s, robot_name)
            await _events(s).record(
                self.ns_id, "access", robot.id, memory_ids=[row.id], wait_for_flush=False
            )
            now = datetime.now(UTC)
            (found, _memory_id) = await self._script(
                "touch", robot_name, [key, str(_us(now) // 1000)], self._budget(robot)
            )
            if int(found):
                await MembershipRepository(s, self.ns_id).touch(  # type: ignore[arg-type]
                    robot.id, row.id, now
                )

    async def robot_stats(self, robot_name: str, days: int = 30) -> None:
        """StatsService.robot."""
        async with self.pool.acquire() as conn, conn.transaction():
            s = self._session(conn)
            robot = await self._robot(s, robot_name, register=False)
            repo = StatsRepository(s)  # type: ignore[arg-type]
            await repo.long_term(self.ns_id, robot.id)
            timescale = "memory_event" in await repo.hypertables()
            today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
            since = today - timedelta(days=days - 1)
            if _ACTIVITY_TAKES_UNTIL:
                await repo.activity(robot.id, since, today + timedelta(days=1), timescale)
            else:
                await repo.activity(robot.id, since, timescale)  # type: ignore[call-arg]
            await self._usage(s, robot)

    async def _usage(self, s: RawSession, robot: Any) -> None:
        reply = await self.scripts["usage"](keys=robot_keys(self.ns, robot.name), args=[])
        if reply[0] == "NOINIT":
            await StatsRepository(s).membership_usage(self.ns_id, robot.id)  # type: ignore[arg-type]

    async def namespace_stats(self) -> None:
        """StatsService.namespace. The servers' versions and the hypertables are left out:
        the service reads them once a minute (stats.service.ServerFacts), not per request."""
        async with self.pool.acquire() as conn, conn.transaction():
            s = self._session(conn)
            repo = StatsRepository(s)  # type: ignore[arg-type]
            await repo.namespace(self.ns_id)
            rows = await RobotRepository(s).list(self.ns_id)
            # Every robot's usage script in one pipeline, as WorkingMemoryStore.usage_many.
            pipe = self.redis.pipeline(transaction=False)
            for row in rows:
                keys = robot_keys(self.ns, row.name)
                await self.scripts["usage"](keys=keys, args=[], client=pipe)
            for row, reply in zip(rows, await pipe.execute(), strict=True):
                if reply[0] == "NOINIT":
                    await repo.membership_usage(self.ns_id, row.id)

    # --- core: the one essential statement or script --------------------------------------

    async def core_search(self, spec: RecallSpec, author_id: int | None) -> int:
        """The search statements alone (in a transaction: SET LOCAL needs one)."""
        async with self.pool.acquire() as conn, conn.transaction():
            return len(await self._search(self._session(conn), spec, author_id))

    async def core_insert(self, author_id: int, items: Sequence[AddItem]) -> None:
        """A raw INSERT into memory (one row, or one executemany for a batch)."""
        rows = [
            (
                self.ns_id,
                f"m-{uuid.uuid4().hex}",
                it.content,
                it.type,
                it.importance,
                list(it.tags),
                author_id,
                it.tokens,
                it.vector,
            )
            for it in items
        ]
        async with self.pool.acquire() as conn:
            await conn.executemany(
                """
                INSERT INTO memory (namespace_id, key, content, type, importance, tags,
                                    author_robot_id, token_count, embedding, embedding_model,
                                    embedding_status, metadata)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'client', 'ready', '{}')""",
                rows,
            )

    async def core_context(self, robot_name: str, strategy: str, max_tokens: int) -> int:
        args = [str(max_tokens), str(int(time.time() * 1000))]
        script = self.scripts[f"context_{strategy}"]
        reply = await script(keys=robot_keys(self.ns, robot_name), args=args)
        return int(reply[1])

    async def core_get(self, key: str) -> None:
        async with self.pool.acquire() as conn:
            if await MemoryRepository(self._session(conn)).get(self.ns_id, key) is None:
                raise RuntimeError(f"floor get: no memory {key!r}")


# --- EXPLAIN ANALYZE of the statements an operation issues ------------------------------------


def _plan_nodes(node: dict[str, Any], out: list[str]) -> None:
    label = node.get("Node Type", "?")
    if node.get("Index Name"):
        label += f" using {node['Index Name']}"
    elif node.get("Relation Name"):
        label += f" on {node['Relation Name']}"
    if node.get("CTE Name"):
        label += f" ({node['CTE Name']})"
    out.append(label)
    for child in node.get("Plans", []):
        _plan_nodes(child, out)


async def explain(floor: Floor, run: Any) -> list[dict[str, Any]]:
    """Run `run()` once capturing its SQL, then replay it under EXPLAIN ANALYZE in a
    transaction that is rolled back. Returns one entry per statement."""
    floor.capture = captured = []
    try:
        await run()
    finally:
        floor.capture = None
    out: list[dict[str, Any]] = []
    async with floor.pool.acquire() as conn:
        tr = conn.transaction()
        await tr.start()
        try:
            for sql, args, many in captured:
                head = " ".join(sql.split())[:90]
                if many:  # executemany: run it, no plan
                    await conn.executemany(sql, args)
                    out.append({"sql": head, "ms": None, "plan": "executemany"})
                    continue
                if head.startswith("SELECT set_config"):
                    await conn.fetch(sql, *args)
                    out.append({"sql": head, "ms": None, "plan": None})
                    continue
                if head.startswith("EXPLAIN"):  # the planner's estimate: planned, never run
                    t0 = time.perf_counter()
                    await conn.fetch(sql, *args)
                    ms = (time.perf_counter() - t0) * 1000
                    out.append({"sql": head, "ms": ms, "plan": "EXPLAIN (estimate only)"})
                    continue
                raw = await conn.fetchval(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", *args)
                doc = json.loads(raw) if isinstance(raw, str) else raw
                nodes: list[str] = []
                _plan_nodes(doc[0]["Plan"], nodes)
                out.append(
                    {"sql": head, "ms": doc[0].get("Execution Time"), "plan": " > ".join(nodes)}
                )
        finally:
            await tr.rollback()
    return out
