"""The service's engine: session settings every connection carries."""

from sqlalchemy import text

from app.config import Settings
from app.db.engine import create_engine


async def test_connections_plan_every_statement_for_its_values(database_url: str) -> None:
    engine = create_engine(Settings(database_url=database_url))
    show = "SELECT current_setting('plan_cache_mode'), current_setting('jit')"
    try:
        async with engine.connect() as conn:
            assert tuple((await conn.execute(text(show))).one()) == ("force_custom_plan", "off")
            # A prepared statement run past PostgreSQL's five custom plans still gets its
            # own: the planner sees the value (an index scan for a rare one).
            explain = text("EXPLAIN SELECT * FROM pg_class WHERE oid = :oid")
            for _ in range(7):
                plan = "\n".join((await conn.execute(explain, {"oid": 1259})).scalars())
            assert "$1" not in plan and "1259" in plan
    finally:
        await engine.dispose()
