"""The Redis hot window of each session: the last messages, so a window read needs no scan
of the message table. A copy: PostgreSQL has every message first (app/sessions/service.py),
and a read checks that the copy holds exactly the tail it should, rebuilding it otherwise.

One hash per session, ``htm:v2:{<ns>/<robot>}:session:<id>``: the robot's hash tag (one
Cluster slot with its working memory, app/working_memory/store.py), and the session row's
id, so a session started again under the same name never reads its predecessor's copy.
Fields are sequence numbers, values a message as JSON. Each script touches that one key and
sets its expiry, so a copy nobody deletes (a consolidation that lost Redis) goes away too.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from app.working_memory.store import KEY_PREFIX, NAME_RE

# Idempotent: a field is a sequence number, and a message never changes.
_ADD = """
for i = 3, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
local below = tonumber(ARGV[2])
if below > 1 then
  for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
    if tonumber(f) < below then redis.call('HDEL', KEYS[1], f) end
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
"""
_READ = """
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return redis.call('HGETALL', KEYS[1])
"""


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
US = timedelta(microseconds=1)


def to_us(t: datetime) -> int:
    """Exact (integer arithmetic): a float timestamp loses the microsecond in later years."""
    return (t - EPOCH) // US


def from_us(us: int) -> datetime:
    return EPOCH + us * US


def session_key(namespace: str, robot: str, session_id: int) -> str:
    for what, value in (("namespace", namespace), ("robot", robot)):
        if not NAME_RE.fullmatch(value):
            raise ValueError(f"invalid {what} {value!r}: must match {NAME_RE.pattern}")
    return f"{KEY_PREFIX}:{{{namespace}/{robot}}}:session:{session_id}"


@dataclass(frozen=True)
class HotMessage:
    seq: int
    role: str
    content: str
    metadata: dict[str, Any]
    remember: bool
    tokens: int
    created_at_us: int

    def dumps(self) -> bytes:
        return orjson.dumps(
            [self.role, self.content, self.metadata, self.remember, self.tokens,
             self.created_at_us]
        )  # fmt: skip

    @classmethod
    def loads(cls, seq: int, raw: str) -> HotMessage:
        role, content, metadata, remember, tokens, at = orjson.loads(raw)
        return cls(seq, role, content, metadata, remember, tokens, at)


class SessionHotStore:
    def __init__(self, redis: Any) -> None:
        self.redis = redis
        self._add = redis.register_script(_ADD)
        self._read = redis.register_script(_READ)

    async def add(self, key: str, messages: list[HotMessage], keep_from: int, ttl_ms: int) -> None:
        """Store the messages; drop those before seq `keep_from` (out of the hot window)."""
        args: list[Any] = [ttl_ms, keep_from]
        for m in messages:
            args += [m.seq, m.dumps()]
        await self._add(keys=[key], args=args)

    async def read(self, key: str, ttl_ms: int) -> dict[int, HotMessage]:
        """Every message held, by seq (refreshing the key's expiry)."""
        flat = await self._read(keys=[key], args=[ttl_ms])
        return {
            int(flat[i]): HotMessage.loads(int(flat[i]), flat[i + 1])
            for i in range(0, len(flat), 2)
        }

    async def delete(self, key: str) -> None:
        await self.redis.delete(key)
