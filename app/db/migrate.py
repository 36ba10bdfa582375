"""Programmatic Alembic: used by every `htm` command that uses the database (each migrates
first), by `htm migrate` and by the tests."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from app.config import PROJECT_ROOT

if TYPE_CHECKING:
    from alembic.config import Config

# Every command migrates first, so what Alembic logs each time is kept to the migrations it
# runs: its plugins are announced when it is imported (below, in the functions, after this),
# its dialect at each run.
logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)


class _Routine(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(("Context impl", "Will assume"))


logging.getLogger("alembic.runtime.migration").addFilter(_Routine())


def alembic_config(database_url: str) -> Config:
    from alembic.config import Config

    cfg = Config(str(PROJECT_ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(PROJECT_ROOT / "alembic"))
    # ConfigParser interpolation: a literal % in a URL (escaped password) must be doubled.
    cfg.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    cfg.attributes["configure_logging"] = False
    return cfg


def upgrade(database_url: str, revision: str = "head") -> None:
    """Blocking: Alembic's async env runs its own event loop (call via asyncio.to_thread)."""
    from alembic import command

    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str = "base") -> None:
    from alembic import command

    command.downgrade(alembic_config(database_url), revision)
