"""`make bench` / `make bench-quick`: latency, throughput and recall quality of the HTM service
against the floor of raw PostgreSQL and Redis.

The bench starts its own PostgreSQL + Redis (embedded, under .htm/bench/, unless
HTM_BENCH_DATABASE_URL / HTM_BENCH_REDIS_URL are set), creates and migrates a fresh database per
N, runs the real service (`htm serve --no-migrate`, i.e. uvicorn) as a child process on a free
loopback port, and drives it over HTTP with K concurrent clients on one event loop. The same
SQL and Lua are then sent directly (bench/floor.py) and the ratio printed. Results go to
bench/results/ as JSON and markdown.

    scale.py    data loading, the operations, service vs floor at each N, ANN vs exact
    quality.py  the local-model run: recall@k on a labeled set, add throughput, model floor
    dataset.py  seeded sentences, questions and vectors
    floor.py    the service's repositories over raw asyncpg; its Lua over redis-py
    driver.py   bounded closed-loop load and percentiles
    infra.py    servers, databases, the service process, CPU accounting
    report.py   JSON, markdown, targets, --compare
"""
