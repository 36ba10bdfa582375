"""The sessions' hot window on a real 3-master Redis Cluster: one key under the robot's hash
tag, so its scripts run on a cluster (invariant 6)."""

from __future__ import annotations

from typing import Any

from app.sessions.hot import HotMessage, SessionHotStore, session_key
from app.working_memory.store import robot_keys


async def test_the_hot_window_lives_in_its_robots_slot_on_a_cluster(redis_cluster: Any) -> None:
    store = SessionHotStore(redis_cluster)
    key = session_key("ns1", "alice", 7)
    assert key == "htm:v2:{ns1/alice}:session:7"
    slot = redis_cluster.keyslot(key)
    assert slot == redis_cluster.keyslot(robot_keys("ns1", "alice")[0])
    messages = [HotMessage(s, "user", f"m{s}", {"n": s}, s == 1, s, 1_000 + s) for s in (1, 2, 3)]
    await store.add(key, messages, keep_from=2, ttl_ms=60_000)
    assert await store.read(key, 60_000) == {2: messages[1], 3: messages[2]}
    assert 0 < await redis_cluster.pttl(key) <= 60_000
    await store.delete(key)
    assert await store.read(key, 60_000) == {}
