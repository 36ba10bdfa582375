"""The `htm` command: serve, migrate (and key management)."""

from __future__ import annotations

import argparse
import logging
import sys

from app.config import Settings, get_settings
from app.embedded import embedded_services

log = logging.getLogger("htm")


def _serve(settings: Settings, args: argparse.Namespace) -> int:
    import uvicorn

    from app.db.migrate import upgrade
    from app.main import create_app

    with embedded_services(
        settings.data_dir, database_url=settings.database_url, redis_url=settings.redis_url
    ) as (database_url, redis_url):
        settings = settings.model_copy(
            update={"database_url": database_url, "redis_url": redis_url}
        )
        if not args.no_migrate:
            upgrade(database_url)
        host = args.host or settings.host
        port = args.port if args.port is not None else settings.port
        log.info("serving on http://%s:%s", host, port)
        uvicorn.run(
            create_app(settings),
            host=host,
            port=port,
            log_level=settings.log_level,
            access_log=args.access_log,
        )
    return 0


def _migrate(settings: Settings, args: argparse.Namespace) -> int:
    from app.db.migrate import downgrade, upgrade

    with embedded_services(
        settings.data_dir, database_url=settings.database_url, redis_url=None, redis=False
    ) as (database_url, _):
        if args.downgrade:
            downgrade(database_url, args.revision or "base")
        else:
            upgrade(database_url, args.revision or "head")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="htm", description="HTM memory service")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="migrate, then serve HTTP (embedded servers if no URLs)")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--no-migrate", action="store_true")
    serve.add_argument("--access-log", action="store_true")
    serve.set_defaults(func=_serve)

    migrate = sub.add_parser("migrate", help="apply (or roll back) database migrations")
    migrate.add_argument("revision", nargs="?", help="target revision (default: head/base)")
    migrate.add_argument("--downgrade", action="store_true")
    migrate.set_defaults(func=_migrate)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = get_settings()
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return int(args.func(settings, args))


if __name__ == "__main__":
    sys.exit(main())
