"""`python -m tests.connections.serving`: the app under uvicorn as `htm serve` runs it (its
protocol options included, app/http_protocol.py), on databases the suite started; every
setting from HTM_* variables. The connection tests need a real server: socket behaviour,
a separate process's memory and log lines."""

from __future__ import annotations

import uvicorn

from app.config import Settings
from app.http_protocol import uvicorn_options
from app.main import create_app
from app.observability.logs import configure


def main() -> None:
    settings = Settings(_env_file=None)
    configure(settings.log_format, settings.log_level)
    config = uvicorn.Config(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_config=None,
        **uvicorn_options(settings),
    )
    uvicorn.Server(config).run()


if __name__ == "__main__":
    main()
