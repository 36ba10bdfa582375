"""Running `htm` as a user does: a subprocess on the test database and Redis."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

import pytest

from app.config import PROJECT_ROOT

Htm = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="session")
def htm(database_url: str, redis_url: str) -> Htm:
    """`htm(*args)`: the command line, exit code and output (progress bars off: no terminal)."""

    def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "app.cli", *args],
            cwd=PROJECT_ROOT,
            env={
                **os.environ,
                "HTM_DATABASE_URL": database_url,
                "HTM_REDIS_URL": redis_url,
                "HTM_EMBEDDING_PROVIDER": "none",
                "HTM_LOG_LEVEL": "warning",
                **env,
            },
            capture_output=True,
            text=True,
            timeout=120,
        )

    return run
