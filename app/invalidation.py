"""Cache invalidation across service processes: one Redis pub/sub channel.

Each process caches what it reads on every request (RobotCache: a robot with its group and
budget, 5 s; KeyCache: API keys, 1 s). A change committed in one process evicts its own
entries at once; `announce` tells every other process to evict the same entries, through a
message on CHANNEL that each serving process's listener applies as it arrives (milliseconds).

The TTLs stay the bound when a message cannot arrive: while a process is not subscribed
(Redis down, a connection lost) it may miss messages, so each (re)subscription clears every
cache registered here before it applies anything, and until then the entries expire on
their own. A process that cannot publish (Redis down) leaves the others to their TTLs too.

PUBLISH on any node of a Redis Cluster reaches the subscribers of every node (the cluster bus
forwards it), so the channel uses one plain connection to the configured URL's node, cluster
or not (redis-py's async RedisCluster has no pub/sub).

Messages are JSON: {"o": origin, "t": topic, "p": payload}; a process ignores its own.
Publishing never blocks the request that announces: messages queue for a task that sends
them, and `aclose` sends what is left (a CLI command's revocation, say) before it returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

log = logging.getLogger(__name__)

CHANNEL = "htm:invalidate"
# Between attempts to subscribe again after the connection was lost.
RESUBSCRIBE_S = 0.5
# How long a quiet subscription waits between reads; with the health check, the longest a
# dead connection goes unnoticed is about this plus HEALTH_CHECK_S.
POLL_S = 1.0
HEALTH_CHECK_S = 2.0
QUEUE_MAX = 10_000


def _being_cancelled() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class Invalidations:
    """The channel: `register` what a topic's message evicts (and what a missed message
    clears), `announce` a local change, `listen` (a serving process's task) to apply
    everyone else's."""

    def __init__(self, redis_url: str | None, timeout_s: float = 1.0) -> None:
        self.redis_url = redis_url
        self.timeout_s = timeout_s
        self.origin = uuid.uuid4().hex
        self._handlers: dict[str, Callable[[Any], None]] = {}
        self._resets: list[Callable[[], None]] = []
        self._queue: asyncio.Queue[str] = asyncio.Queue(QUEUE_MAX)
        self._sender: asyncio.Task[None] | None = None
        self._publisher: Any = None
        # Seen by tests and /metrics: messages sent, applied, and subscriptions made.
        self.sent = 0
        self.applied = 0
        self.subscriptions = 0
        self.subscribed = asyncio.Event()

    def register(
        self, topic: str, handler: Callable[[Any], None], reset: Callable[[], None]
    ) -> None:
        """`handler(payload)` evicts what a message of `topic` names; `reset()` clears the
        whole cache (after a subscription that may have missed messages)."""
        self._handlers[topic] = handler
        self._resets.append(reset)

    def announce(self, topic: str, payload: Any = None) -> None:
        """Tell the other processes (this one has evicted already). Never blocks or fails:
        a message that cannot be queued or sent leaves them to their TTLs."""
        if self.redis_url is None:
            return
        message = json.dumps({"o": self.origin, "t": topic, "p": payload})
        try:
            self._queue.put_nowait(message)
        except asyncio.QueueFull:
            log.warning("invalidation queue full: other processes rely on their TTLs")
            return
        if self._sender is None or self._sender.done():
            try:
                self._sender = asyncio.get_running_loop().create_task(
                    self._send(), name="invalidation sender"
                )
            except RuntimeError:  # no running loop (a synchronous caller): TTLs apply
                pass

    def _client(self) -> Any:
        assert self.redis_url is not None
        return aioredis.from_url(
            self.redis_url,
            decode_responses=True,
            socket_connect_timeout=self.timeout_s,
            socket_timeout=self.timeout_s,
        )

    async def _send(self) -> None:
        while not self._queue.empty():
            message = self._queue.get_nowait()
            try:
                if self._publisher is None:
                    self._publisher = self._client()
                await self._publisher.publish(CHANNEL, message)
                self.sent += 1
            except Exception as exc:  # Redis down: the others' TTLs bound what they miss
                log.warning("invalidation not published (%s): other processes rely on TTLs", exc)

    def _apply(self, raw: str) -> None:
        try:
            message = json.loads(raw)
            if message["o"] == self.origin:
                return
            handler = self._handlers.get(message["t"])
        except (ValueError, KeyError, TypeError):
            log.warning("invalidation message not understood: %.200s", raw)
            return
        if handler is not None:
            handler(message["p"])
            self.applied += 1

    def _reset(self) -> None:
        for reset in self._resets:
            reset()

    async def listen(self) -> None:
        """Apply the other processes' messages until cancelled, subscribing again after a
        lost connection (each subscription first clears every registered cache)."""
        url = self.redis_url
        if url is None:  # nothing to listen to; never returns all the same
            await asyncio.Event().wait()
            return
        while True:
            client = aioredis.from_url(
                url,
                decode_responses=True,
                socket_connect_timeout=self.timeout_s,
                health_check_interval=HEALTH_CHECK_S,
            )
            try:
                async with client.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.subscribe(CHANNEL)
                    self._reset()  # whatever was missed while not subscribed
                    self.subscriptions += 1
                    self.subscribed.set()
                    while True:
                        message = await pubsub.get_message(timeout=POLL_S)
                        if _being_cancelled():  # a cancel redis-py's read swallowed
                            raise asyncio.CancelledError
                        if message is not None and message["type"] == "message":
                            self._apply(message["data"])
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # A cancel that met redis-py's own read timeout can come out as a timeout
                # (asyncio.timeout on 3.11): the task is still being cancelled, so stop.
                if _being_cancelled():
                    raise asyncio.CancelledError from exc
                if self.subscribed.is_set():
                    log.warning("invalidation channel lost (%s): caches fall back to TTLs", exc)
                self.subscribed.clear()
                await asyncio.sleep(RESUBSCRIBE_S)
            finally:
                self.subscribed.clear()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(client.aclose(), self.timeout_s)

    async def aclose(self, timeout_s: float = 2.0) -> None:
        """Send what is queued (within `timeout_s`), then close."""
        if self._sender is not None and not self._sender.done():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._sender), timeout_s)
            self._sender.cancel()
        if self._publisher is not None:
            with contextlib.suppress(Exception):
                await self._publisher.aclose()
