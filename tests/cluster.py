"""A real Redis Cluster built from the embedded redis-server binary, and the suite's switch to
run on one (tests/conftest.py; `make chaos`'s cluster row starts one with replicas too).

HTM_TEST_REDIS_CLUSTER=1: the session's Redis (the `redis_url` fixture) is a 3-master cluster,
started once per session (per xdist worker), and the apps and clients the tests build on it
connect as cluster clients (`is_cluster`, `connect`). The tests marked `cluster` run so in CI.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from redis import Redis as SyncRedis
from redis.asyncio.cluster import RedisCluster

from app.embedded import EmbeddedRedis, redis_server_binary

CLUSTER = os.environ.get("HTM_TEST_REDIS_CLUSTER", "") not in ("", "0")

# The URLs (one node's each) of the clusters this process started or was given.
_cluster_urls: set[str] = set()


def register(url: str) -> str:
    _cluster_urls.add(url)
    return url


def is_cluster(url: str | None) -> bool:
    return url in _cluster_urls


def connect(url: str, **kw: Any) -> aioredis.Redis | RedisCluster:
    """A client of the server at `url`: a cluster client when it is one of the clusters'."""
    kw.setdefault("decode_responses", True)
    if is_cluster(url):
        return RedisCluster.from_url(url, **kw)
    return aioredis.from_url(url, **kw)


def has_cluster_support() -> bool:
    # Every stock build since Redis 3 has it; a build without lacks the config directive.
    return b"cluster-enabled" in Path(redis_server_binary()).read_bytes()


def cluster_port(taken: set[int]) -> int:
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


def start_cluster(
    where: Path,
    nodes: list[EmbeddedRedis],
    *,
    masters: int = 3,
    replicas: int = 0,
    node_timeout_ms: int = 15_000,
    persistent: bool = False,
    detached: bool = False,
) -> None:
    """Starts masters * (1 + replicas) cluster-enabled nodes (appending them to nodes, for
    cleanup), joins them with redis-cli --cluster create and waits until every node says
    cluster_state:ok and sees every master's replicas. Blocking: run in a thread."""
    args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
    args += ["--cluster-node-timeout", str(node_timeout_ms)]
    taken: set[int] = set()
    for i in range(masters * (1 + replicas)):
        node = EmbeddedRedis(
            where / f"node{i}",
            port=cluster_port(taken),
            persistent=persistent,
            extra_args=args,
            detached=detached,
        )
        nodes.append(node.start())
    cli = Path(redis_server_binary()).with_name("redis-cli")
    subprocess.run(
        [str(cli), "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in nodes),
         "--cluster-replicas", str(replicas), "--cluster-yes"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    for node in nodes:
        with SyncRedis(port=node.port, decode_responses=True) as client:
            while not _settled(client, masters, replicas):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"node {node.port} never reached cluster_state:ok")
                time.sleep(0.1)


def _settled(client: SyncRedis, masters: int, replicas: int) -> bool:
    if client.cluster("INFO")["cluster_state"] != "ok":
        return False
    flags = [n["flags"] for n in client.cluster("NODES").values()]
    return (
        sum("master" in f for f in flags) == masters
        and sum("slave" in f for f in flags) == masters * replicas
    )
