"""The `htm` command: serve, migrate, mcp (stdio), keys, stats, openapi, export, import, load,
reembed, reindex, dedupe, retention, maintenance.

Without URLs every command runs on the data directory's embedded servers, shared with the
other `htm` processes on it (app/embedded). Every command that reads or writes the database
migrates it to head first, as `htm serve` does (idempotent), so each works on a fresh data
directory. A failure is one line on stderr and a non-zero status, never a traceback
(-vv logs it). A command's log (the embedded servers, the migrations) shows only with -v
(`log_level`)."""

from __future__ import annotations

import argparse
import gc
import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from app import VERSION, names
from app.transfer.commands import add_commands

if TYPE_CHECKING:
    from app.components import Components
    from app.config import Settings
    from app.transfer.commands import Run

# The parser is built, and --help and --version answered, before anything heavy is imported:
# each command imports what it uses (pydantic, SQLAlchemy, the app) when it runs
# (tests/test_cli_start.py holds it).

log = logging.getLogger("htm")
NAMESPACE, ROBOT = names.argument("namespace"), names.argument("robot")


class CommandFailed(Exception):
    """A failure the command explains itself: its message is the line printed."""


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def shown(database_url: str) -> str:
    """The URL without its password, for messages."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(database_url).render_as_string(hide_password=True)
    except Exception:
        return "HTM_DATABASE_URL"


def migrate_first(database_url: str, revision: str = "head", *, down: bool = False) -> None:
    """The schema at head before a command uses it, as `htm serve` does (Alembic's upgrade
    to head changes nothing on a database already there)."""
    from app.db.migrate import downgrade, upgrade

    try:
        (downgrade if down else upgrade)(database_url, revision)
    except Exception as exc:
        raise CommandFailed(
            f"the database {shown(database_url)} could not be reached or migrated "
            f"({one_line(exc)}); check HTM_DATABASE_URL, or unset it to use the embedded "
            "server under HTM_DATA_DIR"
        ) from exc


def _workers(value: str) -> int:
    """--workers: a whole number of processes, 1 to 64."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if not 1 <= n <= 64:
        raise argparse.ArgumentTypeError(f"{n} is not between 1 and 64")
    return n


def _serve(settings: Settings, args: argparse.Namespace) -> int:
    from app.embedded import embedded_services
    from app.http.multiprocess import run_workers
    from app.http.serving import refuse_unauthenticated, run
    from app.main import create_app

    host = args.host or settings.host
    refusal = refuse_unauthenticated(settings, host)
    if refusal:  # checked before anything starts: no embedded server, no migration
        print(f"htm serve: {refusal}", file=sys.stderr)
        return 2
    with embedded_services(
        settings.data_dir, database_url=settings.database_url, redis_url=settings.redis_url
    ) as (database_url, redis_url):
        settings = settings.model_copy(
            update={"database_url": database_url, "redis_url": redis_url}
        )
        if not args.no_migrate:
            migrate_first(database_url)
        port = args.port if args.port is not None else settings.port
        if args.workers > 1:  # processes sharing the socket, each building its own app
            run_workers(settings, host, port, args.workers, access_log=args.access_log)
        else:
            run(create_app(settings), settings, host, port, access_log=args.access_log)
    return 0


def _migrate(settings: Settings, args: argparse.Namespace) -> int:
    from app.embedded import embedded_services

    with embedded_services(
        settings.data_dir, database_url=settings.database_url, redis_url=None, redis=False
    ) as (database_url, _):
        if args.downgrade:
            migrate_first(database_url, args.revision or "base", down=True)
        else:
            migrate_first(database_url, args.revision or "head")
    return 0


async def _keys_run(c: Components, args: argparse.Namespace) -> int:
    from app.auth.schemas import ApiKeyCreate
    from app.unit import operator, unit_of_work

    # The request model first, as a route checks its body: bad input writes nothing.
    body = (
        ApiKeyCreate(name=args.name, role=args.role, robot=args.robot)
        if args.action == "create"
        else None
    )
    lines: list[str] = []
    async with unit_of_work(c, await operator(c, args.namespace)) as u:
        if body is not None:
            created = await u.keys.create(args.namespace, body)
            lines += [
                f"created key {created.id} ({created.role}) in namespace {args.namespace}"
                + (f", acting only as robot {created.robot}" if created.robot else ""),
                "the secret is shown only now:",
                created.key,
            ]
        elif args.action == "list":
            for k in await u.keys.list():
                state = f"revoked {k.revoked_at:%Y-%m-%d}" if k.revoked_at else "active"
                bound = k.robot or "-"
                lines.append(f"{k.id}\t{k.prefix}…\t{k.role}\t{k.name}\t{bound}\t{state}")
        else:
            k = await u.keys.revoke(args.id)
            lines.append(f"revoked key {k.id} ({k.name})")
    # Printed once committed: a key is reported created (or revoked) only when it is.
    for line in lines:
        print(line)
    return 0


async def _mcp_async(settings: Settings, args: argparse.Namespace) -> int:
    from app.auth.caller import identify
    from app.errors import DomainError
    from app.lifespan import open_components
    from app.mcp.stdio import serve_stdio

    async with open_components(settings, lazy_model=True) as c:
        try:
            caller = await identify(
                f"Bearer {args.key}" if args.key else "",
                args.namespace,
                auth_enabled=settings.auth_enabled,
                sessionmaker=c.sessionmaker,
                namespace_ids=c.namespace_ids,
                key_cache=c.key_cache,
            )
        except DomainError as exc:
            print(f"htm mcp: {exc.detail} (auth is on: pass --key)", file=sys.stderr)
            return 2
        await serve_stdio(c, caller, args.robot)
    return 0


def _mcp(settings: Settings, args: argparse.Namespace) -> int:
    """The MCP tools over stdio (the HTTP transport is /mcp of `htm serve`)."""
    import asyncio

    from app.embedded import embedded_services

    with embedded_services(
        settings.data_dir, database_url=settings.database_url, redis_url=settings.redis_url
    ) as (database_url, redis_url):
        migrate_first(database_url)
        settings = settings.model_copy(
            update={"database_url": database_url, "redis_url": redis_url}
        )
        return asyncio.run(_mcp_async(settings, args))


def _with_components(
    run: Run, *, embeds: bool = True
) -> Callable[[Settings, argparse.Namespace], int]:
    """A command that runs on the app's components (no HTTP server), like `htm mcp`. One
    that never embeds (`embeds=False`: keys) does not load the embedding model."""

    def command(settings: Settings, args: argparse.Namespace) -> int:
        import asyncio

        from app.embedded import embedded_services
        from app.lifespan import open_components

        if not embeds:
            settings = settings.model_copy(update={"embedding_provider": "none"})

        async def main(settings: Settings) -> int:
            async with open_components(settings, lazy_model=True) as c:
                return await run(c, args)

        with embedded_services(
            settings.data_dir, database_url=settings.database_url, redis_url=settings.redis_url
        ) as (database_url, redis_url):
            migrate_first(database_url)
            return asyncio.run(
                main(
                    settings.model_copy(
                        update={"database_url": database_url, "redis_url": redis_url}
                    )
                )
            )

    return command


def _openapi(settings: Settings, args: argparse.Namespace) -> int:
    """Write the OpenAPI spec the app serves to openapi.json (or, with --check, compare)."""
    from app.http.openapi import SPEC_PATH, render
    from app.main import create_app

    text = render(create_app(settings))
    if args.check:
        if SPEC_PATH.read_text() != text:
            print(f"{SPEC_PATH} is out of date: run `make openapi`", file=sys.stderr)
            return 1
        return 0
    SPEC_PATH.write_text(text)
    print(f"wrote {SPEC_PATH}")
    return 0


class Parser(argparse.ArgumentParser):
    """argparse, with its refusal of bad arguments in one line (and exit status 2), as every
    other failure of a command is; its subcommands' parsers are of this class too."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="htm", description="HTM memory service")
    parser.add_argument(
        "--version",
        action="version",
        version=f"htm {VERSION}",
        help="print the version (the API's)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _serving_commands(sub)
    _keys_command(sub)
    mcp = sub.add_parser("mcp", help="serve the MCP tools over stdio (for a client to start)")
    mcp.add_argument(
        "--namespace", default="default", type=NAMESPACE, help="with auth off: the namespace"
    )
    mcp.add_argument("--key", help="with auth on: the API key (its namespace and role)")
    mcp.add_argument(
        "--robot", type=ROBOT, help="the robot a tool acts as when its call names none"
    )
    mcp.set_defaults(func=_mcp)
    add_commands(sub, _with_components)
    spec = sub.add_parser("openapi", help="write (or --check) the OpenAPI spec, openapi.json")
    spec.add_argument("--check", action="store_true")
    spec.set_defaults(func=_openapi)
    _verbose(parser)
    return parser


def _verbose(parser: argparse.ArgumentParser, top: bool = True) -> None:
    """-v / --verbose on `htm` and on every subcommand (`htm -v keys list` and `htm keys list
    -v` alike): a subcommand's default is SUPPRESS, so it never undoes the top level's."""
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0 if top else argparse.SUPPRESS,
        help="log what the command does on stderr (-vv: debug)",
    )
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in set(action.choices.values()):
                _verbose(child, top=False)


def log_level(settings: Settings, args: argparse.Namespace) -> str:
    """`htm serve` logs at HTM_LOG_LEVEL: its log is its output. Any other command prints
    its answer, and logs only warnings and errors before it (no lines about the embedded
    servers starting or the migrations), unless asked: -v (info), -vv (debug), or
    HTM_LOG_LEVEL set."""
    if args.verbose:
        return "debug" if args.verbose > 1 else "info"
    if args.command == "serve" or "log_level" in settings.model_fields_set:
        return settings.log_level
    return "warning"


def _serving_commands(sub: Any) -> None:
    serve = sub.add_parser("serve", help="migrate, then serve HTTP (embedded servers if no URLs)")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--no-migrate", action="store_true")
    serve.add_argument("--access-log", action="store_true")
    serve.add_argument(
        "--workers",
        type=_workers,
        default=1,
        help="service processes sharing the port (default 1; see docs/SCALING.md)",
    )
    serve.set_defaults(func=_serve)

    migrate = sub.add_parser("migrate", help="apply (or roll back) database migrations")
    migrate.add_argument("revision", nargs="?", help="target revision (default: head/base)")
    migrate.add_argument("--downgrade", action="store_true")
    migrate.set_defaults(func=_migrate)


def _keys_command(sub: Any) -> None:
    keys = sub.add_parser("keys", help="manage API keys")
    keys_sub = keys.add_subparsers(dest="action", required=True)
    create = keys_sub.add_parser("create", help="create a key (the secret is printed once)")
    create.add_argument("--namespace", default="default", type=NAMESPACE)
    create.add_argument("--role", choices=["admin", "writer", "reader"], required=True)
    create.add_argument("--name", required=True)
    create.add_argument("--robot", help="bind the key to this robot: it acts only as it")
    listing = keys_sub.add_parser("list", help="list a namespace's keys")
    listing.add_argument("--namespace", default="default", type=NAMESPACE)
    revoke = keys_sub.add_parser("revoke", help="revoke a key by id")
    revoke.add_argument("id", type=int)
    revoke.add_argument("--namespace", default="default", type=NAMESPACE)
    keys.set_defaults(func=_with_components(_keys_run, embeds=False))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # bad arguments: one line and exit 2 (Parser)
    # What the commands need, imported once the arguments are known to be good.
    from pydantic import ValidationError

    from app.config import get_settings
    from app.embedded import DataDirectoryError, RedisDirectoryError
    from app.errors import DomainError
    from app.observability.logs import configure as configure_logging

    try:
        settings = get_settings()
        configure_logging(settings.log_format, log_level(settings, args))
        return int(args.func(settings, args))
    except KeyboardInterrupt:
        print(f"htm {args.command}: interrupted", file=sys.stderr)
        return 130
    except ValidationError as exc:  # a request model refused an argument, as a route would
        why = "; ".join(f"--{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        print(f"htm {args.command}: {why}", file=sys.stderr)
        return 2
    except (DataDirectoryError, RedisDirectoryError) as exc:  # an embedded server's data
        print(f"htm {args.command}: {one_line(exc)}", file=sys.stderr)  # directory: what to do
        return 2
    except Exception as exc:  # one line, never a traceback; the trace at debug level
        log.debug("htm %s failed", args.command, exc_info=True)
        if isinstance(exc, CommandFailed):
            why = one_line(exc)
        elif isinstance(exc, DomainError):
            why = " ".join(exc.detail.split())
        else:
            why = f"{type(exc).__name__}: {one_line(exc)}"
        print(f"htm {args.command}: {why}", file=sys.stderr)
        return 1
    finally:
        # The process ends next: without this, the interpreter's exit walks the whole heap
        # (every module the command imported) through the garbage collector once more, a
        # quarter of a second of CPU for a command like `htm keys create`.
        gc.freeze()


if __name__ == "__main__":
    sys.exit(main())
