"""Fixtures for the working-memory store: a store on the session Redis, unique robots, and a
real 3-master Redis Cluster built from the same redis-server binary."""

from __future__ import annotations

import asyncio
import random
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis import Redis as SyncRedis
from redis.asyncio.cluster import RedisCluster

from app.embedded import EmbeddedRedis, redis_server_binary
from app.working_memory.store import WorkingMemoryStore


@pytest.fixture
def robot() -> str:
    """A robot name no other test uses, so tests share one Redis without interfering."""
    return f"robot-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def store(redis: aioredis.Redis) -> WorkingMemoryStore:
    return WorkingMemoryStore(redis)


def _cluster_port(taken: set[int]) -> int:
    """A free port for a cluster node: Redis also listens on port + 10000 (the cluster bus),
    so the port must be <= 55535 and both it and its bus port must be free."""
    for _ in range(200):
        port = random.randint(20_000, 55_535)
        if port in taken or port + 10_000 in taken:
            continue
        try:
            for p in (port, port + 10_000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        taken.update((port, port + 10_000))
        return port
    raise RuntimeError("no free port pair for a cluster node")


def _start_cluster(tmp_path: Path, nodes: list[EmbeddedRedis]) -> None:
    """Starts three cluster-enabled masters (appending them to nodes, for cleanup), joins them
    with redis-cli --cluster create and waits for cluster_state:ok. Blocking: run in a thread."""
    # Every stock build since Redis 3 has cluster support; a build without it lacks the
    # config directive altogether.
    if b"cluster-enabled" not in Path(redis_server_binary()).read_bytes():
        pytest.skip("this redis-server binary has no cluster support")
    args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
    taken: set[int] = set()
    for i in range(3):
        node = EmbeddedRedis(
            tmp_path / f"node{i}", port=_cluster_port(taken), persistent=False, extra_args=args
        )
        nodes.append(node.start())
    cli = Path(redis_server_binary()).with_name("redis-cli")
    subprocess.run(
        [str(cli), "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in nodes),
         "--cluster-replicas", "0", "--cluster-yes"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    for node in nodes:
        with SyncRedis(port=node.port, decode_responses=True) as client:
            while client.cluster("INFO")["cluster_state"] != "ok":
                if time.monotonic() > deadline:
                    raise TimeoutError(f"node {node.port} never reached cluster_state:ok")
                time.sleep(0.1)


@pytest.fixture
async def redis_cluster(tmp_path: Path) -> AsyncIterator[RedisCluster]:
    """Three masters on loopback ports, no replicas; yields a RedisCluster client."""
    nodes: list[EmbeddedRedis] = []
    try:
        await asyncio.to_thread(_start_cluster, tmp_path, nodes)
        client = RedisCluster(host="127.0.0.1", port=nodes[0].port, decode_responses=True)
        await client.initialize()
        yield client
        await client.aclose()
    finally:
        for node in nodes:
            node.stop()
