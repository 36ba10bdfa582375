"""A robot's state keys: PUT, GET, DELETE, the listing, and the pinned notes a prompt places.

PostgreSQL's row is the truth; Redis holds a copy under the holder's hash tag (the robot's,
or its group's row for scope `group`). ARCHITECTURE.md ("State keys") describes the one
mechanism: a write commits first (compare-and-set in its statement), then writes the copy
and its `state` event (WriteProtocol.write_state: a copy is replaced only by a newer
version; when Redis cannot take it the holder is marked stale and no reader trusts the copy
until a rebuild wipes it); a read takes the copy, else the row (filling the copy). Expiry is
decided by the app's clock on every read, in either tier.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from app.auth.caller import Caller
from app.clock import Clock
from app.config import Settings
from app.db.session import DbSession
from app.errors import Conflict, NotFound, PayloadTooLarge, PreconditionFailed, Unprocessable
from app.robots.service import RobotService
from app.state.repository import StateRepository
from app.state.schemas import StateEntry, StateList, StatePut, StateRead, StateScope
from app.tokens import Tokenizer
from app.working_memory.protocol import WriteProtocol
from app.working_memory.robots import Robot

# A holder's Redis copy stays this long after its last state write or fill; a read after
# that finds no copy and reads PostgreSQL (expiry is decided on read, not by Redis).
COPY_KEEP_MS = 24 * 3600 * 1000
ETAG = re.compile(r'^(?:W/)?"?(\d{1,19})"?$')
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
US = timedelta(microseconds=1)


def to_us(t: datetime) -> int:
    return (t - EPOCH) // US  # exact: a float timestamp loses microseconds


def from_us(us: int) -> datetime:
    return EPOCH + us * US


def note_text(key: str, value: Any) -> str:
    """What a prompt places for a pinned key: `key: value`, a string as it is."""
    return f"{key}: {value if isinstance(value, str) else compact(value)}"


def compact(value: Any) -> str:
    # The stdlib: orjson refuses integers beyond 64 bits, which JSON (and parse_json) allow.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def etag(version: int) -> str:
    return f'"{version}"'


def parse_version(header: str, name: str) -> int | None:
    """An If-Match's version (`"12"` or `12`), None for `*`; 422 otherwise."""
    header = header.strip()
    if header == "*":
        return None
    m = ETAG.match(header)
    if m is None:
        raise Unprocessable(
            f'{name} must be a version ("12" or 12) or *',
            errors=[{"field": f"header.{name}", "message": "not a version"}],
        )
    return int(m.group(1))


class StateService:
    def __init__(
        self,
        *,
        session: DbSession,
        caller: Caller,
        robots: RobotService,
        two_tier: WriteProtocol,
        tokenizer: Tokenizer,
        settings: Settings,
        clock: Clock,
    ) -> None:
        self.session = session
        self.caller = caller
        self.robots = robots
        self.two_tier = two_tier
        self.tokenizer = tokenizer
        self.settings = settings
        self.clock = clock
        self.repo = StateRepository(session)

    # --- whose ------------------------------------------------------------------------------

    @staticmethod
    def _holder(robot: Robot, scope: StateScope) -> Robot:
        if scope == "robot":
            return robot
        if robot.group is None:
            raise NotFound(f"robot {robot.name!r} is in no group: there is no group state")
        return robot.group

    # --- writes -----------------------------------------------------------------------------

    def _check(self, body: StatePut) -> str:
        """The value as stored (compact JSON), or 413 / 422: nothing is written."""
        if body.value is None:
            raise Unprocessable(
                "value must not be null (DELETE removes a key)",
                errors=[{"field": "body.value", "message": "null"}],
            )
        text = compact(body.value)
        size = len(text.encode())
        if size > self.settings.state_max_bytes:
            raise PayloadTooLarge(
                f"value is {size} bytes as JSON; the limit is {self.settings.state_max_bytes}",
                field="value",
                limit=self.settings.state_max_bytes,
            )
        if body.ttl_s is not None and body.ttl_s > self.settings.state_max_ttl_s:
            raise Unprocessable(
                f"ttl_s must be at most {self.settings.state_max_ttl_s}",
                errors=[{"field": "body.ttl_s", "message": "over HTM_STATE_MAX_TTL_S"}],
            )
        return text

    async def put(
        self,
        robot_name: str,
        key: str,
        body: StatePut,
        *,
        scope: StateScope = "robot",
        if_match: str | None = None,
        if_none_match: str | None = None,
    ) -> StateRead:
        """Write a new version: durable first, then the Redis copy and its event."""
        text = self._check(body)
        expected = None if if_match is None else parse_version(if_match, "If-Match")
        if if_none_match is not None and if_none_match.strip() != "*":
            raise Unprocessable(
                "If-None-Match must be * (create only)",
                errors=[{"field": "header.If-None-Match", "message": "not *"}],
            )
        tokens = self.tokenizer.count(note_text(key, body.value))
        robot = await (self.robots.ensure if scope == "robot" else self.robots.require)(robot_name)
        holder = self._holder(robot, scope)
        now = self.clock()
        await self.repo.lock(holder.id)
        await self.repo.purge_expired(holder.id, now)
        held_keys, pinned_tokens, held = await self.repo.limits(holder.id, key)
        s = self.settings
        if not held and held_keys >= s.state_max_keys:
            raise Conflict(f"{holder.name!r} holds {held_keys} state keys, the limit")
        if body.pinned and pinned_tokens + tokens > s.state_pinned_max_tokens:
            raise Conflict(
                f"pinning {key!r} ({tokens} tokens) would take {holder.name!r}'s pinned notes "
                f"to {pinned_tokens + tokens} tokens; the limit is {s.state_pinned_max_tokens}",
                tokens=tokens,
                pinned_tokens=pinned_tokens,
                limit=s.state_pinned_max_tokens,
            )
        if if_none_match is not None:
            exists: bool | None = False
        elif if_match is not None:
            exists = True
        else:
            exists = None
        expires = None if body.ttl_s is None else now + timedelta(seconds=body.ttl_s)
        row = await self.repo.write(
            holder.id, key, value=text, pinned=body.pinned, tokens=tokens, expires_at=expires,
            now=now, by=robot.name, expected=expected, exists=exists,
        )  # fmt: skip
        if row is None:
            current = await self.repo.get(holder.id, key, now)
            raise PreconditionFailed(
                f"state key {key!r} is at version {current.version}"
                if current is not None
                else f"state key {key!r} does not exist",
                version=None if current is None else current.version,
            )
        await self.two_tier.commit_durable()
        await self.two_tier.write_state(
            holder, "put", key, row.version, _payload(holder, row), COPY_KEEP_MS
        )
        return _read(robot, scope, row)

    async def delete(
        self, robot_name: str, key: str, *, scope: StateScope = "robot", if_match: str | None
    ) -> None:
        """Delete the key (404 when absent or expired; 412 when not at If-Match's version)."""
        expected = None if if_match is None else parse_version(if_match, "If-Match")
        robot = await self.robots.require(robot_name)
        holder = self._holder(robot, scope)
        now = self.clock()
        await self.repo.lock(holder.id)
        await self.repo.purge_expired(holder.id, now)
        version = await self.repo.delete(holder.id, key, expected)
        if version is None:
            current = await self.repo.get(holder.id, key, now)
            if current is None:
                raise NotFound(f"state key {key!r} does not exist")
            raise PreconditionFailed(
                f"state key {key!r} is at version {current.version}", version=current.version
            )
        await self.two_tier.commit_durable()
        tombstone = json.dumps({"r": holder.id})
        await self.two_tier.write_state(holder, "delete", key, version, tombstone, COPY_KEEP_MS)

    # --- reads ------------------------------------------------------------------------------

    async def get(self, robot_name: str, key: str, *, scope: StateScope = "robot") -> StateRead:
        """The key's current value: Redis's copy, else PostgreSQL's row (copied to Redis)."""
        robot = await self.robots.require(robot_name)
        holder = self._holder(robot, scope)
        now = self.clock()
        copy = await self.two_tier.read_state(holder, key)
        if copy is not None:
            version, payload = copy
            p = json.loads(payload)
            if p.get("r") == holder.id:  # else left by a removed robot of the same name
                if "v" not in p:
                    raise NotFound(f"state key {key!r} does not exist")
                if p["x"] is not None and from_us(p["x"]) <= now:
                    raise NotFound(f"state key {key!r} does not exist (expired)")
                return _read_copy(robot, scope, key, version, p)
        row = await self.repo.get(holder.id, key, now)
        if row is None:
            raise NotFound(f"state key {key!r} does not exist")
        payload = _payload(holder, row)
        await self.two_tier.fill_state(holder, key, row.version, payload, COPY_KEEP_MS)
        return _read(robot, scope, row)

    async def page(
        self,
        robot_name: str,
        *,
        scope: StateScope = "robot",
        after: str | None = None,
        limit: int = 100,
        values: bool = False,
    ) -> StateList:
        """The holder's live keys in key order, a page at a time (from PostgreSQL)."""
        robot = await self.robots.require(robot_name)
        holder = self._holder(robot, scope)
        rows = await self.repo.page(holder.id, self.clock(), after=after, limit=limit + 1)
        more = len(rows) > limit
        rows = rows[:limit]
        return StateList(
            robot=robot.name,
            scope=scope,
            items=[_entry(r, values) for r in rows],
            next=rows[-1].key if more else None,
        )

    async def pinned_notes(self, robot: Robot) -> list[tuple[str, str, int]]:
        """(key, note text, tokens) of every live pinned key of the robot, then of its
        group: what a prompt places first (app/prompt)."""
        holders = [robot.id] + ([robot.group.id] if robot.group is not None else [])
        rows = await self.repo.pinned(holders, self.clock())
        return [(r.key, note_text(r.key, json.loads(r.value)), r.tokens) for r in rows]


def _payload(holder: Robot, row: Any) -> str:
    """The Redis copy of a row: compact, with the holder's id (a copy left by a removed
    robot of the same name is not its successor's)."""
    fields = {
        "r": holder.id,
        "p": row.pinned,
        "t": row.tokens,
        "x": None if row.expires_at is None else to_us(row.expires_at),
        "c": to_us(row.created_at),
        "u": to_us(row.updated_at),
        "b": row.updated_by,
    }
    return json.dumps(fields)[:-1] + ', "v": ' + row.value + "}"  # the value's text as stored


def _entry(r: Any, values: bool) -> StateEntry:
    return StateEntry(
        key=r.key, version=r.version, pinned=r.pinned, tokens=r.tokens, expires_at=r.expires_at,
        updated_at=r.updated_at, updated_by=r.updated_by,
        value=json.loads(r.value) if values else None,
    )  # fmt: skip


def _read(robot: Robot, scope: StateScope, row: Any) -> StateRead:
    return StateRead(
        robot=robot.name, scope=scope, key=row.key, value=json.loads(row.value),
        version=row.version, pinned=row.pinned, tokens=row.tokens, expires_at=row.expires_at,
        created_at=row.created_at, updated_at=row.updated_at, updated_by=row.updated_by,
    )  # fmt: skip


def _read_copy(robot: Robot, scope: StateScope, key: str, version: int, p: Any) -> StateRead:
    return StateRead(
        robot=robot.name, scope=scope, key=key, value=p["v"], version=version, pinned=p["p"],
        tokens=p["t"], expires_at=None if p["x"] is None else from_us(p["x"]),
        created_at=from_us(p["c"]), updated_at=from_us(p["u"]), updated_by=p["b"],
    )  # fmt: skip
