"""Programmatic Alembic: used by every `htm` command that uses the database (each migrates
first), by `htm migrate` and by the tests."""

from __future__ import annotations

import logging
import re
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
log = logging.getLogger(__name__)
_STEP = re.compile(r"Running upgrade (\S*) -> (\S+),")


class _Steps(logging.Filter):
    """Alembic's line per migration, held back while an upgrade runs: `upgrade` says them
    in one line (each at debug level)."""

    def __init__(self) -> None:
        super().__init__()
        self.held: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if _STEP.match(message):
            self.held.append(message)
            return False
        return True


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

    steps = _Steps()
    migration_log = logging.getLogger("alembic.runtime.migration")
    migration_log.addFilter(steps)
    try:
        command.upgrade(alembic_config(database_url), revision)
    finally:
        migration_log.removeFilter(steps)
    for step in steps.held:
        log.debug("%s", step)
    if steps.held:
        first, last = _STEP.match(steps.held[0]), _STEP.match(steps.held[-1])
        assert first is not None and last is not None
        n = len(steps.held)
        log.info(
            "migrated the database from %s to %s (%d migration%s)",
            first.group(1) or "empty",
            last.group(2),
            n,
            "" if n == 1 else "s",
        )


def downgrade(database_url: str, revision: str = "base") -> None:
    from alembic import command

    command.downgrade(alembic_config(database_url), revision)
