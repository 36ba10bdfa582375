"""Sessions: append (durable in PostgreSQL, then copied to the Redis hot window), the window
(from the hot copy when it holds it, else PostgreSQL), and the end (consolidation)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any, NamedTuple

from app.auth.caller import Caller
from app.clock import Clock
from app.config import Settings
from app.db.session import DbSession
from app.errors import Conflict, NotFound, PayloadTooLarge, Unprocessable
from app.memories.limits import check_batch_size, json_depth
from app.robots.service import RobotService
from app.sessions.consolidation import Consolidator, promoted_metadata
from app.sessions.hot import HotMessage, SessionHotStore, from_us, session_key, to_us
from app.sessions.repository import SessionRepository
from app.sessions.schemas import (
    MessageRead,
    MessagesAppend,
    MessagesAppended,
    SessionEnded,
    SessionWindow,
)
from app.tokens import Tokenizer
from app.working_memory.model import UNAVAILABLE, RedisBreaker
from app.working_memory.robots import Robot

log = logging.getLogger(__name__)

DEFAULT_WINDOW = 50
# An append retries when its session ends or expires under it (it then starts a new one).
APPEND_ATTEMPTS = 5
# The hot copy outlives its session's expiry by this much: the expiry worker deletes it.
HOT_GRACE_MS = 60_000
NO_LIMIT = 2**31 - 1


class Turn(NamedTuple):
    """A message as a prompt takes it: no access count, no metadata."""

    seq: int
    role: str
    content: str
    tokens: int


class SessionService:
    def __init__(
        self,
        *,
        session: DbSession,
        caller: Caller,
        robots: RobotService,
        hot: SessionHotStore,
        breaker: RedisBreaker,
        tokenizer: Tokenizer,
        settings: Settings,
        clock: Clock,
        consolidator: Consolidator,
        accessed: Callable[[int, list[int]], None],
    ) -> None:
        # Where the messages a prompt takes are counted: off the request's path
        # (app/memories/access.py AccessTracker.record_messages).
        self.accessed = accessed
        self.session = session
        self.caller = caller
        self.robots = robots
        self.hot = hot
        self.breaker = breaker
        self.tokenizer = tokenizer
        self.settings = settings
        self.clock = clock
        self.consolidator = consolidator
        self.repo = SessionRepository(session)

    # --- append ----------------------------------------------------------------------------

    def _check(self, name: str, body: MessagesAppend) -> None:
        """The deployment's limits, as the messages will be promoted (413 / 422)."""
        s = self.settings
        check_batch_size(s, len(body.messages), "messages")
        errors: list[dict[str, str]] = []
        for i, m in enumerate(body.messages):
            size = len(m.content.encode())
            if size > s.max_content_bytes:
                raise PayloadTooLarge(
                    f"messages[{i}].content is {size} bytes; the limit is {s.max_content_bytes}",
                    field=f"messages[{i}].content",
                    limit=s.max_content_bytes,
                )
            metadata = promoted_metadata(m.metadata, name, m.role, 2**53)
            field = f"messages[{i}].metadata"
            if len(json.dumps(metadata)) > s.max_metadata_bytes:
                errors.append({"field": field, "message": f"over {s.max_metadata_bytes} bytes"})
            if json_depth(metadata) > s.max_metadata_depth:
                errors.append(
                    {"field": field, "message": f"nested deeper than {s.max_metadata_depth}"}
                )
        if errors:
            raise Unprocessable(
                "; ".join(f"{e['field']}: {e['message']}" for e in errors), errors=errors
            )

    async def append(self, robot_name: str, name: str, body: MessagesAppend) -> MessagesAppended:
        """Durable first: the messages commit before the answer and before Redis sees them.
        The session starts on its first append, and again after it ended or expired."""
        self._check(name, body)
        tokens = await self.tokenizer.count_many_async([m.content for m in body.messages])
        robot = await self.robots.ensure(robot_name)
        now = self.clock()
        count = len(body.messages)
        row, reserved = await self._reserve(robot, name, count=count, now=now)
        first = reserved.last_seq - count + 1
        pairs = list(zip(body.messages, tokens, strict=True))
        rows = [(m.role, m.content, m.metadata, m.remember, t) for m, t in pairs]
        await self.repo.insert(row.id, first, rows, now)
        await self.session.commit()

        created_us = to_us(now)
        hot = [
            HotMessage(first + i, m.role, m.content, m.metadata, m.remember, t, created_us)
            for i, (m, t) in enumerate(zip(body.messages, tokens, strict=True))
        ]
        stored = await self._redis(
            lambda: self.hot.add(
                self._key(robot_name, row.id),
                hot,
                reserved.last_seq - self.settings.session_hot_messages + 1,
                self._ttl_ms(row.ttl_s),
            )
        )
        return MessagesAppended(
            robot=robot_name,
            session=name,
            messages=[_read(m, 0, now) for m in hot],
            expires_at=reserved.expires_at,
            degraded=stored is None,
        )

    async def _reserve(
        self, robot: Robot, name: str, *, count: int, now: datetime
    ) -> tuple[Any, Any]:
        """The live session (started on the first append, and again after it ended or
        expired) with `count` sequence numbers reserved in it."""
        for _ in range(APPEND_ATTEMPTS):
            row = await self.repo.live(robot.id, name)
            if row is not None and row.expires_at <= now:
                await self.repo.end(row.id, now, claim=False)  # the expiry worker consolidates it
                row = None
            if row is None:
                row = await self.repo.create(
                    self.caller.namespace_id,
                    robot.id,
                    name,
                    default_ttl_s=self.settings.session_ttl_s,
                    now=now,
                )
                if row is None:  # created concurrently: use that one
                    continue
            reserved = await self.repo.reserve(row.id, count, now)
            if reserved is not None:
                return row, reserved
        raise Conflict(f"session {name!r} kept ending under this append; retry")

    # --- window ----------------------------------------------------------------------------

    async def window(
        self, robot_name: str, name: str, n: int | None, max_tokens: int | None
    ) -> SessionWindow:
        """The last `n` messages, or as many as fit `max_tokens` (both: whichever stops
        first; neither: the last 50), oldest first. A writer's read refreshes the session's
        expiry and counts as an access of each message returned; a reader's changes nothing."""
        writer = self.caller.role != "reader"
        row, messages, degraded = await self._window(
            robot_name, name, n, max_tokens, refresh=writer, count=writer
        )
        return SessionWindow(
            robot=robot_name,
            session=name,
            messages=messages,
            tokens=sum(m.tokens for m in messages),
            total_messages=row.last_seq,
            expires_at=row.expires_at,
            degraded=degraded,
        )

    async def latest(
        self, robot_name: str, name: str, max_tokens: int
    ) -> tuple[int | None, list[Turn], bool]:
        """For a prompt: (the session's id, the last messages whose contents fit max_tokens,
        degraded), refreshing its expiry but counting no access (`count_accesses` does, for
        the messages the prompt takes) and reading none; no messages when the session does
        not exist."""
        try:
            row, taken, held = await self._hot(robot_name, name, NO_LIMIT, max_tokens, refresh=True)
        except NotFound:
            return None, [], False
        if taken is not None:
            turns = [Turn(m.seq, m.role, m.content, m.tokens) for m in taken]
        else:
            rows = await self._cold(
                robot_name, row, held, n=NO_LIMIT, max_tokens=max_tokens, count=False
            )
            turns = [Turn(r.seq, r.role, r.content, r.token_count) for r in rows]
        return row.id, turns, held is None

    def count_accesses(self, session_id: int, seqs: list[int]) -> None:
        """One more access of each of these messages (a prompt took them): counted off the
        request's path, written within about a second (HTM_ACCESS_FLUSH_INTERVAL_S)."""
        if seqs:
            self.accessed(session_id, seqs)

    async def _window(
        self,
        robot_name: str,
        name: str,
        n: int | None,
        max_tokens: int | None,
        *,
        refresh: bool,
        count: bool,
    ) -> tuple[Any, list[MessageRead], bool]:
        limit_n = n or (DEFAULT_WINDOW if max_tokens is None else NO_LIMIT)
        limit_tokens = NO_LIMIT if max_tokens is None else max_tokens
        row, taken, held = await self._hot(robot_name, name, limit_n, limit_tokens, refresh=refresh)
        if taken is not None:
            seqs = [m.seq for m in taken]
            accesses = await self.repo.count_accesses(row.id, seqs, count=count)
            messages = [_read(m, accesses[m.seq]) for m in taken]
        else:
            rows = await self._cold(
                robot_name, row, held, n=limit_n, max_tokens=limit_tokens, count=count
            )
            messages = [_row_read(r) for r in rows]
        return row, messages, held is None

    async def _hot(
        self, robot_name: str, name: str, n: int, max_tokens: int, *, refresh: bool
    ) -> tuple[Any, list[HotMessage] | None, dict[int, HotMessage] | None]:
        """(the live session's row, the window from the hot copy or None when PostgreSQL
        must answer, the hot copy or None while Redis is unreachable)."""
        robot = await self.robots.require(robot_name)
        row = await self.repo.touch(robot.id, name, self.clock(), refresh=refresh)
        if row is None:
            raise NotFound(f"session {name!r} of robot {robot_name!r} does not exist or ended")
        key = self._key(robot_name, row.id)
        held = await self._redis(lambda: self.hot.read(key, self._ttl_ms(row.ttl_s)))
        taken = None if held is None else self._cut(held, row.last_seq, n, max_tokens)
        return row, taken, held

    async def _cold(
        self,
        robot_name: str,
        row: Any,
        held: dict[int, HotMessage] | None,
        *,
        n: int,
        max_tokens: int,
        count: bool,
    ) -> list[Any]:
        """The window from PostgreSQL, rebuilding the hot copy when it misses its tail."""
        rows = await self.repo.window(row.id, n, max_tokens, count=count)
        if held is not None and not self._complete(held, row.last_seq):
            await self._rebuild(self._key(robot_name, row.id), row)
        return rows

    def _first_held(self, last_seq: int) -> int:
        return max(1, last_seq - self.settings.session_hot_messages + 1)

    def _complete(self, held: dict[int, HotMessage], last_seq: int) -> bool:
        return all(s in held for s in range(self._first_held(last_seq), last_seq + 1))

    def _cut(
        self, held: dict[int, HotMessage], last_seq: int, n: int, max_tokens: int
    ) -> list[HotMessage] | None:
        """The window from the hot copy, or None when the copy misses a message of the tail
        it should hold, or the window reaches past it (older messages are in PostgreSQL)."""
        if not self._complete(held, last_seq):
            return None
        first = self._first_held(last_seq)
        taken: list[HotMessage] = []
        total = 0
        for seq in range(last_seq, first - 1, -1):
            m = held[seq]
            if len(taken) == n or total + m.tokens > max_tokens:
                break
            taken.append(m)
            total += m.tokens
        else:
            if first > 1:
                return None
        return taken[::-1]

    async def _rebuild(self, key: str, row: Any) -> None:
        rows = await self.repo.tail(row.id, self.settings.session_hot_messages)
        hot = [
            HotMessage(r.seq, r.role, r.content, r.metadata, r.remember, r.token_count,
                       to_us(r.created_at))
            for r in rows
        ]  # fmt: skip
        first = self._first_held(row.last_seq)
        await self._redis(lambda: self.hot.add(key, hot, first, self._ttl_ms(row.ttl_s)))

    # --- end -------------------------------------------------------------------------------

    async def end(self, robot_name: str, name: str) -> SessionEnded:
        """Ends the session (expired or not) and consolidates it at once."""
        robot = await self.robots.require(robot_name)
        row = await self.repo.live(robot.id, name)
        if row is None or not await self.repo.end(row.id, self.clock(), claim=True):
            raise NotFound(f"session {name!r} of robot {robot_name!r} does not exist or ended")
        await self.session.commit()
        promoted, discarded = await self.consolidator.run(
            self.caller.namespace, robot_name, row.id, name
        )
        return SessionEnded(robot=robot_name, session=name, promoted=promoted, discarded=discarded)

    # --- Redis -----------------------------------------------------------------------------

    def _key(self, robot_name: str, session_id: int) -> str:
        return session_key(self.caller.namespace, robot_name, session_id)

    @staticmethod
    def _ttl_ms(ttl_s: int) -> int:
        return ttl_s * 1000 + HOT_GRACE_MS

    async def _redis(self, op: Any) -> Any:
        """op() against Redis, or None while it is unreachable (the caller then uses
        PostgreSQL: degraded, never failing)."""
        if self.breaker.open:
            return None
        try:
            result = await op()
        except UNAVAILABLE as exc:
            self.breaker.trip()
            log.warning("redis unavailable for sessions: %s", exc)
            return None
        self.breaker.reset()
        return True if result is None else result


def _read(m: HotMessage, access_count: int, created_at: datetime | None = None) -> MessageRead:
    return MessageRead(
        seq=m.seq,
        role=m.role,  # type: ignore[arg-type]
        content=m.content,
        metadata=m.metadata,
        remember=m.remember,
        tokens=m.tokens,
        access_count=access_count,
        created_at=created_at or from_us(m.created_at_us),
    )


def _row_read(r: Any) -> MessageRead:
    return MessageRead(
        seq=r.seq,
        role=r.role,
        content=r.content,
        metadata=r.metadata,
        remember=r.remember,
        tokens=r.token_count,
        access_count=r.access_count,
        created_at=r.created_at,
    )
