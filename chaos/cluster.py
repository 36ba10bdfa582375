"""`make chaos`'s Redis Cluster row: the same load against a service on a Redis Cluster of 3
masters with 1 replica each (HTM_REDIS_CLUSTER=true), while one master fails over.

    redis_cluster_failover  the master holding the most robots SIGKILLed; its replica is
                            promoted by the cluster (cluster-node-timeout 1 s); the old master
                            is started again half the fault later and rejoins as a replica

The service uses its own database on the harness's PostgreSQL and the cluster built by
tests/cluster.py from the embedded redis-server binary (appendonly, fsync every second).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from redis import Redis as SyncRedis
from redis.cluster import RedisCluster as SyncCluster

from app.embedded import EmbeddedRedis
from app.working_memory.store import robot_keys
from bench.infra import ServiceProcess
from chaos.load import NAMESPACE, ROBOTS, Provider, Sample
from chaos.world import back_after
from tests.cluster import start_cluster

CLUSTER_FAULTS = ("redis_cluster_failover",)
# After a failover, adds are placed in working memory again.
CLUSTER_BACK: dict[str, Callable[[Sample], bool]] = {
    "redis_cluster_failover": lambda s: s.status == 201 and s.placed is True,
}
NODE_TIMEOUT_MS = 1000


def start_nodes(where: Path) -> list[EmbeddedRedis]:
    """3 masters, 1 replica each, settled. Blocking."""
    nodes: list[EmbeddedRedis] = []
    try:
        start_cluster(where, nodes, replicas=1, node_timeout_ms=NODE_TIMEOUT_MS, persistent=True)
    except BaseException:
        for node in nodes:
            node.stop()
        raise
    return nodes


@dataclass
class ClusterWorld:
    nodes: list[EmbeddedRedis]
    provider: Provider
    service: ServiceProcess
    victim: EmbeddedRedis
    pg_down: list[tuple[float, float]] = field(default_factory=list)  # never: PG stays up
    struck: dict[str, float] = field(default_factory=dict)
    promoted_after_s: float | None = None  # from the kill until a replica served its slots
    rejoined_after_s: float | None = None  # from the kill until it was a replica again
    cluster = True

    @classmethod
    def choose_victim(cls, nodes: list[EmbeddedRedis]) -> EmbeddedRedis:
        """The master that holds the working memories of the most robots."""
        client = SyncCluster(host="127.0.0.1", port=nodes[0].port)
        try:
            owners = [client.get_node_from_key(robot_keys(NAMESPACE, r).meta).port for r in ROBOTS]
        finally:
            client.close()
        port = max(set(owners), key=owners.count)
        return next(n for n in nodes if n.port == port)

    @property
    def redis_url(self) -> str:
        """Where the service and the audit start discovering the cluster: a node that stays
        up (a cluster client learns every node and slot from it)."""
        return next(n for n in self.nodes if n is not self.victim).url

    @property
    def survivor(self) -> EmbeddedRedis:
        return next(n for n in self.nodes if n is not self.victim)

    def _promoted(self, victim_id: str) -> bool:
        """Masters other than the victim, none failing, serve all 16384 slots (so one of them
        is its promoted replica), and the cluster says ok."""
        with SyncRedis(port=self.survivor.port, decode_responses=True) as client:
            if client.cluster("INFO")["cluster_state"] != "ok":
                return False
            seen = client.cluster("NODES").values()
        served = sum(
            int(r[-1]) - int(r[0]) + 1
            for n in seen
            if n["node_id"] != victim_id and "master" in n["flags"] and "fail" not in n["flags"]
            for r in n["slots"]
        )
        return served == 16384

    async def inject(self, fault: str, seconds: float) -> None:
        if fault != "redis_cluster_failover":
            raise ValueError(fault)
        with SyncRedis(port=self.victim.port, decode_responses=True) as client:
            victim_id = client.cluster("MYID")
        struck = self.struck[fault] = time.monotonic()
        assert self.victim.process is not None
        self.victim.process.kill()  # SIGKILL: the cluster promotes its replica
        self.victim.process.wait()
        deadline = struck + 30
        while not await asyncio.to_thread(self._promoted, victim_id):
            if time.monotonic() > deadline:
                raise TimeoutError("no replica of the killed master was promoted in 30 s")
            await asyncio.sleep(0.05)
        self.promoted_after_s = round(time.monotonic() - struck, 2)
        await asyncio.sleep(max(0.0, struck + seconds / 2 - time.monotonic()))
        # Back on its port and directory: it learns the newer epoch and follows the new master.
        await asyncio.to_thread(self.victim.start)
        while time.monotonic() < struck + max(seconds, 15.0):
            if await asyncio.to_thread(self._role, self.victim) == "slave":
                self.rejoined_after_s = round(time.monotonic() - struck, 2)
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(max(0.0, struck + seconds - time.monotonic()))

    @staticmethod
    def _role(node: EmbeddedRedis) -> str:
        with SyncRedis(port=node.port, decode_responses=True) as client:
            return str(client.role()[0])

    def recovery(self, fault: str, samples: list[Sample]) -> float | None:
        return back_after(samples, self.struck[fault], CLUSTER_BACK[fault])
