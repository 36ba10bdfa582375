"""Resource subscriptions: a client names the resources it follows,
`htm://robots/{robot}/working-memory` and `htm://robots/{robot}/state`, and gets
`notifications/resources/updated` for each as it changes, then reads it again. On MCP
2026-07-28 with `subscriptions/listen` (`Listen`: the response is the stream; over HTTP and
stdio); on a handshake-era connection that lasts (stdio) with `resources/subscribe`
(`Subscribe`).

The changes are the working-memory change stream's (app/working_memory/events.py, the one
the REST route `…/working-memory/events` serves): a working-set change (`added`, `evicted`,
`removed`, `cleared`) updates the working memory of the robot, in the stream of its group's
working memory when it is in one; a `state` entry updates its state, in its own stream
(robot-scoped keys) or its group's (group-scoped). The stream's position is taken before the
acknowledgement, so nothing that changes after it is missed. The caller is checked as a read
of the resource is (`reader`, a key bound to a robot follows only that robot), and again, as
the REST stream does, while it waits: a revoked key's subscription ends. Redis down ends it
too; as MCP says, a client listens again and reads again (there is no replay)."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import (
    SUBSCRIPTION_ID_META_KEY,
    ResourceUpdated,
    event_to_notification,
)
from mcp_types import INVALID_REQUEST

from app.auth.caller import Caller, acts_as, require_role
from app.components import Components
from app.errors import DomainError, NotFound, ServiceUnavailable
from app.unit import unit_of_work
from app.working_memory.model import UNAVAILABLE

log = logging.getLogger(__name__)

_FOLLOWED = re.compile(r"htm://robots/([A-Za-z0-9][A-Za-z0-9._-]{0,63})/(working-memory|state)")
Allowed = Callable[[], Awaitable[bool]]
FOLLOWED = "followed: htm://robots/{robot}/working-memory, htm://robots/{robot}/state"


@dataclass
class _Stream:
    """One Redis change stream followed, and which URIs each kind of its entries updates."""

    owner: str
    cursor: str
    working_set: set[str] = field(default_factory=set)  # added, evicted, removed, cleared
    state: set[str] = field(default_factory=set)

    def updated(self, kind: str) -> set[str]:
        return self.state if kind == "state" else self.working_set


class Listen:
    """`subscriptions/listen`'s handler: one call is one subscription stream."""

    def __init__(
        self,
        components: Callable[[], Components],
        caller_of: Callable[[ServerRequestContext[Any]], Caller],
        allowed_of: Callable[[ServerRequestContext[Any]], Allowed],
        problem: Callable[..., MCPError],
    ) -> None:
        self.components = components
        self.caller_of = caller_of
        self.allowed_of = allowed_of
        self.problem = problem

    async def __call__(
        self, ctx: ServerRequestContext[Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        sid = ctx.request_id
        if sid is None:
            raise MCPError(INVALID_REQUEST, "subscriptions/listen requires a request id")
        asked = list(params.notifications.resource_subscriptions or [])
        c = self.components()
        ns, streams = await self._streams(c, self.caller_of(ctx), asked)
        honored = [u for s in streams.values() for u in sorted(s.working_set | s.state)]
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: sid}
        await ctx.session.send_notification(
            types.SubscriptionsAcknowledgedNotification(
                params=types.SubscriptionsAcknowledgedNotificationParams(
                    notifications=types.SubscriptionFilter(
                        resource_subscriptions=sorted(set(honored)) or None
                    ),
                    _meta=meta,
                )
            ),
            related_request_id=sid,
        )
        if streams:

            async def push(uri: str) -> None:
                notification = event_to_notification(ResourceUpdated(uri=uri), meta)
                await ctx.session.send_notification(notification, related_request_id=sid)

            await self.follow(c, ns, list(streams.values()), self.allowed_of(ctx), push)
        return types.SubscriptionsListenResult(_meta=meta)

    async def _streams(
        self, c: Components, caller: Caller, asked: list[str]
    ) -> tuple[str, dict[str, _Stream]]:
        """The streams to follow for the URIs asked (others are not honored), each from its
        last entry now; a refusal (role, a bound key's other robot, no such robot, Redis
        down) is a JSON-RPC error before the acknowledgement."""
        streams: dict[str, _Stream] = {}
        uri = ""
        try:
            require_role(caller, "reader")
            async with unit_of_work(c, caller) as u:
                ns = u.working_memory.namespace
                for uri in asked:
                    found = _FOLLOWED.fullmatch(uri)
                    if found is None:
                        continue
                    name, what = found.groups()
                    acts_as(caller, name)
                    robot = await u.robots.require(name)
                    owners = (
                        [robot.working_memory.name]
                        if what == "working-memory"
                        else [robot.name, *([robot.group.name] if robot.group else [])]
                    )
                    for owner in owners:
                        if owner not in streams:
                            streams[owner] = _Stream(
                                owner, await c.working_memory.last_event(ns, owner)
                            )
                        s = streams[owner]
                        (s.working_set if what == "working-memory" else s.state).add(uri)
        except UNAVAILABLE as exc:
            down = ServiceUnavailable(
                "subscriptions need Redis, which is unavailable", dependency="redis"
            )
            raise self.problem(down, uri=uri) from exc
        except DomainError as exc:
            raise self.problem(exc, uri=uri) from None
        return ns, streams

    async def follow(
        self,
        c: Components,
        ns: str,
        streams: list[_Stream],
        allowed: Allowed,
        push: Callable[[str], Awaitable[None]],
    ) -> None:
        """Until the client leaves (the caller's task is cancelled), the key is revoked or
        Redis fails: `push` each URI a batch of entries updated, once a batch."""
        store = c.working_memory
        # Idle, each follower wakes at least every 0.5 s: to check its key, as the REST stream.
        block_ms = max(1, min(500, int(c.settings.redis_timeout_s * 500)))
        send, receive = anyio.create_memory_object_stream[str](1000)

        async def follow(s: _Stream) -> None:
            while True:
                try:
                    entries = await store.events_after(ns, s.owner, s.cursor, block_ms=block_ms)
                except UNAVAILABLE as exc:
                    log.warning("MCP subscription to %s/%s ended: %s", ns, s.owner, exc)
                    break
                if not await allowed():
                    log.info("MCP subscription to %s/%s ended: key revoked", ns, s.owner)
                    break
                updated: set[str] = set()
                for entry_id, fields in entries:
                    s.cursor = entry_id
                    updated |= s.updated(fields.get("kind", ""))
                for uri in sorted(updated):
                    await send.send(uri)
            scope.cancel_scope.cancel()

        async with anyio.create_task_group() as scope:
            for s in streams:
                scope.start_soon(follow, s)
            async for uri in receive:
                await push(uri)


class Subscribe:
    """The handshake-era `resources/subscribe` / `resources/unsubscribe` (MCP 2025-11-25 and
    before), on a connection that lasts (stdio: `htm mcp`): each subscription is a task
    following the same streams as a listen, sending `notifications/resources/updated` on the
    connection. `/mcp` over HTTP is stateless and does not offer them (no session to push on):
    a client there listens (MCP 2026-07-28)."""

    def __init__(self, listen: Listen) -> None:
        self.listen = listen
        self.tasks: dict[str, asyncio.Task[None]] = {}

    async def subscribe(
        self, ctx: ServerRequestContext[Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        uri = str(params.uri)
        c = self.listen.components()
        ns, streams = await self.listen._streams(c, self.listen.caller_of(ctx), [uri])
        if not streams:
            missing = NotFound(f"no resource to follow at {uri}; {FOLLOWED}")
            raise self.listen.problem(missing, uri=uri)
        if uri not in self.tasks:
            session = ctx.session

            async def push(updated: str) -> None:
                await session.send_resource_updated(updated)

            follow = self.listen.follow(
                c, ns, list(streams.values()), self.listen.allowed_of(ctx), push
            )
            task = asyncio.create_task(follow, name=f"mcp subscription {uri}")

            def ended(t: asyncio.Task[None]) -> None:  # revoked, Redis down: subscribe again
                if self.tasks.get(uri) is t:
                    del self.tasks[uri]

            task.add_done_callback(ended)
            self.tasks[uri] = task
        return types.EmptyResult()

    async def unsubscribe(
        self, ctx: ServerRequestContext[Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        task = self.tasks.pop(str(params.uri), None)
        if task is not None:
            task.cancel()
        return types.EmptyResult()
