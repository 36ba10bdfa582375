"""The arguments and the runs of `htm export / import / load / reembed / reindex`. app/cli.py opens
the components (app/lifespan.py) and hands them to a run; progress goes to stderr, data to
stdout or the files named, a summary line at the end."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app import names

if TYPE_CHECKING:  # the parser is built without importing the app (app/cli.py): each run
    from app.components import Components  # imports what it uses

Run = Callable[["Components", argparse.Namespace], Awaitable[int]]
ROBOT, NAMESPACE = names.argument("robot"), names.argument("namespace")


def _fail(args: argparse.Namespace, why: str, code: int = 1) -> int:
    print(f"htm {args.command}: {why}", file=sys.stderr)
    return code


def _positive(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, not {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {n}")
    return n


def _days(value: str) -> int:
    """--days: 1 to 366, as the route's `days` query parameter."""
    n = _positive(value)
    if n > 366:
        raise argparse.ArgumentTypeError(f"must be at most 366, not {n}")
    return n


def _output(path: str | None) -> Any:
    return nullcontext(sys.stdout.buffer) if path in (None, "-") else open(path, "wb")


async def _export(c: Components, args: argparse.Namespace) -> int:
    from app.errors import DomainError
    from app.transfer.export import export
    from app.transfer.progress import progress

    try:
        out = _output(args.out)
        with progress(args.quiet) as bar, out as f:
            n = await export(
                c, f, args.namespace, robot=args.robot, embeddings=args.embeddings, progress=bar
            )
    except DomainError as exc:
        return _fail(args, exc.detail)
    except OSError as exc:
        return _fail(args, str(exc))
    where = "" if args.out in (None, "-") else f" to {args.out}"
    print(f"exported {n} memories of namespace {args.namespace}{where}", file=sys.stderr)
    return 0


async def _import(c: Components, args: argparse.Namespace) -> int:
    from app.errors import DomainError
    from app.transfer.importer import import_file
    from app.transfer.progress import progress
    from app.transfer.reading import BadFile

    try:
        with progress(args.quiet) as bar:
            ns, n, written = await import_file(
                c, Path(args.file), args.namespace, progress=bar, batch_size=args.batch
            )
    except BadFile as exc:
        return _fail(args, f"{exc} (nothing imported)", 2)
    except (DomainError, OSError) as exc:
        return _fail(args, getattr(exc, "detail", None) or str(exc))
    print(
        f"imported into namespace {ns}: {n.added} added, {n.updated} updated, "
        f"{n.forgotten} forgotten, {n.unchanged} unchanged{written.summary()}"
    )
    return 0


async def _load(c: Components, args: argparse.Namespace) -> int:
    from app.errors import DomainError
    from app.transfer.load import load
    from app.transfer.progress import progress

    try:
        with progress(args.quiet) as bar:
            n = await load(c, Path(args.path), args.namespace, robot=args.robot, progress=bar)
    except (DomainError, OSError, ValueError) as exc:
        return _fail(args, getattr(exc, "detail", None) or str(exc))
    print(
        f"loaded {args.path} into namespace {args.namespace}: {n.added} added, "
        f"{n.updated} updated, {n.forgotten} forgotten, {n.unchanged} unchanged"
    )
    return 0


async def _reembed(c: Components, args: argparse.Namespace) -> int:
    from app.errors import DomainError
    from app.transfer.progress import progress
    from app.transfer.reembed import Stalled, reembed

    if not c.embedder.available:
        why = c.embedder.load_error or "HTM_EMBEDDING_PROVIDER is none"
        return _fail(args, f"no embedding model to re-embed with: {why}", 2)
    try:
        with progress(args.quiet) as bar:
            done = await reembed(c, args.namespace, args.batch, bar)
    except Stalled as exc:
        return _fail(args, str(exc))
    except DomainError as exc:
        return _fail(args, exc.detail)
    print(
        f"re-embedded {done.embedded} memories of namespace {args.namespace} with "
        f"{c.embedder.model}; {done.failed} failed"
    )
    return 0


async def _reindex(c: Components, args: argparse.Namespace) -> int:
    from app.errors import DomainError
    from app.transfer.progress import progress
    from app.transfer.reembed import Stalled
    from app.transfer.reindex import reindex

    if not c.embedder.available:
        why = c.embedder.load_error or "HTM_EMBEDDING_PROVIDER is none"
        return _fail(args, f"no embedding model to embed the new search texts with: {why}", 2)
    try:
        with progress(args.quiet) as bar:
            done = await reindex(c, args.namespace, args.batch, bar, vectors=args.vectors)
    except Stalled as exc:
        return _fail(args, str(exc))
    except DomainError as exc:
        return _fail(args, exc.detail)
    print(
        f"reindexed namespace {args.namespace} with the {c.settings.search_text} search text: "
        f"{done.checked} checked, {done.rebuilt} rebuilt, {done.embedded} embedded, "
        f"{done.failed} failed"
    )
    return 0


async def _dedupe(c: Components, args: argparse.Namespace) -> int:
    from app.errors import DomainError
    from app.unit import operator, unit_of_work

    threshold = c.settings.dedupe_threshold if args.threshold is None else args.threshold
    if not 0 < threshold <= 1:
        return _fail(args, f"--threshold must be in (0, 1], not {threshold}", 2)
    try:
        caller = await operator(c, args.namespace)
        async with unit_of_work(c, caller) as u:
            clusters = await u.merger.clusters(args.mode, threshold, args.type)
        for cluster in clusters:
            print(f"{cluster.survivor} <- {', '.join(cluster.merged)} ({cluster.type})")
        duplicates = sum(len(cl.merged) for cl in clusters)
        if args.apply:
            for cluster in clusters:
                async with unit_of_work(c, caller) as u:
                    await u.merger.merge(args.robot, cluster)
    except DomainError as exc:
        return _fail(args, exc.detail)
    done = "merged" if args.apply else "found (dry run: nothing changed; --apply merges them)"
    print(
        f"{len(clusters)} clusters, {duplicates} duplicates in namespace {args.namespace} {done}",
        file=sys.stderr,
    )
    return 0


SHOWN_KEYS = 20


async def _retention(c: Components, args: argparse.Namespace) -> int:
    from app.errors import DomainError
    from app.unit import operator, unit_of_work

    try:
        caller = await operator(c, args.namespace)
        async with unit_of_work(c, caller) as u:
            run = await u.retention.run(args.dry_run)
    except DomainError as exc:
        return _fail(args, exc.detail)
    for outcome in run.policies:
        p = outcome.policy
        about = " ".join(
            [p.rule, f"{p.days}d"]
            + ([f"threshold={p.threshold}"] if p.threshold is not None else [])
            + ([f"type={p.type}"] if p.type is not None else [])
        )
        keys = outcome.keys[:SHOWN_KEYS]
        more = f", +{len(outcome.keys) - len(keys)} more" if len(outcome.keys) > len(keys) else ""
        print(f"{about}: {len(outcome.keys)}{': ' if keys else ''}{', '.join(keys)}{more}")
    total = sum(len(o.keys) for o in run.policies)
    done = "would be archived (dry run: nothing changed)" if args.dry_run else "archived"
    if not run.policies:
        done += "; the namespace has no retention policy (PUT /v1/retention)"
    print(f"{total} memories of namespace {args.namespace} {done}", file=sys.stderr)
    return 0


async def _maintenance(c: Components, args: argparse.Namespace) -> int:
    import json

    from app.errors import DomainError
    from app.unit import operator, unit_of_work

    try:
        caller = await operator(c, args.namespace)
        async with unit_of_work(c, caller) as u:
            done = await u.maintenance.run()
    except DomainError as exc:
        return _fail(args, exc.detail)
    for step, outcome in done.steps.items():
        print(f"{step}: {json.dumps(outcome)}")
    print(f"maintenance run {done.id} of namespace {args.namespace}: {done.status}"
          + (f" ({done.error})" if done.error else ""), file=sys.stderr)  # fmt: skip
    return 0 if done.status == "done" else 1


async def _stats(c: Components, args: argparse.Namespace) -> int:
    from app.errors import DomainError
    from app.unit import operator, unit_of_work

    try:  # as GET /v1/stats and GET /v1/robots/{robot}/stats answer, through the same service
        async with unit_of_work(c, await operator(c, args.namespace)) as u:
            if args.robot is None:
                found: Any = await u.stats.namespace()
            else:
                found = await u.stats.robot(args.robot, args.days)
    except DomainError as exc:
        return _fail(args, exc.detail)
    if args.json:
        print(found.model_dump_json(indent=2))
    else:
        from app.transfer.stats_text import namespace_lines, robot_lines

        shown = namespace_lines(found) if args.robot is None else robot_lines(found, args.days)
        print("\n".join(shown))
    return 0


def add_commands(sub: Any, run: Callable[..., Callable[..., int]]) -> None:
    """The subcommands; `run(f)` makes the parser's func: components opened, f run."""
    _file_commands(sub, run)
    _namespace_commands(sub, run)


def _quiet(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")


def _file_commands(sub: Any, run: Callable[[Run], Callable[..., int]]) -> None:
    """export, import and load: a namespace's memories to and from files."""
    p = sub.add_parser("export", help="write a namespace's memories as JSON Lines")
    p.add_argument("--namespace", default="default", type=NAMESPACE)
    p.add_argument("--robot", type=ROBOT, help="only the memories this robot authored")
    p.add_argument("--embeddings", action="store_true", help="include vectors and their model")
    p.add_argument("--out", help="the file to write (default: stdout)")
    _quiet(p)
    p.set_defaults(func=run(_export))

    p = sub.add_parser("import", help="import a file of `htm export` (idempotent by key)")
    p.add_argument("file")
    p.add_argument(
        "--namespace", type=NAMESPACE, help="default: the namespace the file was exported from"
    )
    p.add_argument(
        "--batch",
        type=_positive,
        default=None,
        help="memories per batch (default 500, at most HTM_MAX_BATCH_SIZE); two run at once",
    )
    _quiet(p)
    p.set_defaults(func=run(_import))

    p = sub.add_parser("load", help="sync markdown and text files into memories by heading")
    p.add_argument("path", help="a file, or a folder (its .md, .markdown and .txt files)")
    p.add_argument("--namespace", default="default", type=NAMESPACE)
    p.add_argument(
        "--robot", default="files", type=ROBOT, help="the robot the memories are added by"
    )
    _quiet(p)
    p.set_defaults(func=run(_load))


def _namespace_commands(sub: Any, run: Callable[..., Callable[..., int]]) -> None:
    """What is done over a namespace's memories: embed or index them again, merge
    duplicates, apply retention, run maintenance."""
    p = sub.add_parser("reembed", help="embed a namespace again with the configured model")
    p.add_argument("--namespace", default="default", type=NAMESPACE)
    p.add_argument("--batch", type=_positive, default=256, help="memories taken out at a time")
    _quiet(p)
    p.set_defaults(func=run(_reembed))

    p = sub.add_parser(
        "reindex", help="rebuild a namespace's search texts (HTM_SEARCH_TEXT) and their vectors"
    )
    p.add_argument("--namespace", default="default", type=NAMESPACE)
    p.add_argument("--batch", type=_positive, default=256, help="memories taken out at a time")
    p.add_argument(
        "--vectors",
        action="store_true",
        help="embed every conversation memory again, its text changed or not (after a change "
        "of HTM_EMBED_TEXT)",
    )
    _quiet(p)
    p.set_defaults(func=run(_reindex))

    p = sub.add_parser("dedupe", help="find near-duplicate memories and (--apply) merge them")
    p.add_argument("--namespace", default="default", type=NAMESPACE)
    p.add_argument("--mode", choices=["exact", "semantic"], default="semantic")
    p.add_argument(
        "--threshold", type=float, help="cosine similarity (default: HTM_DEDUPE_THRESHOLD)"
    )
    p.add_argument("--type", help="only memories of this type")
    p.add_argument("--apply", action="store_true", help="merge (default: report only)")
    p.add_argument(
        "--robot", default="htm-dedupe", type=ROBOT, help="the robot the merges are made by"
    )
    p.set_defaults(func=run(_dedupe))

    p = sub.add_parser(
        "retention", help="apply a namespace's retention policies (archive), or --dry-run"
    )
    p.add_argument("--namespace", default="default", type=NAMESPACE)
    p.add_argument("--dry-run", action="store_true", help="list what each policy would archive")
    p.set_defaults(func=run(_retention))

    p = sub.add_parser(
        "maintenance", help="run a namespace's maintenance now (or finish its unfinished run)"
    )
    p.add_argument("--namespace", default="default", type=NAMESPACE)
    p.set_defaults(func=run(_maintenance))

    p = sub.add_parser(
        "stats", help="a namespace's statistics, or (--robot) a robot's, as GET .../stats answers"
    )
    p.add_argument("--namespace", default="default", type=NAMESPACE)
    p.add_argument("--robot", type=ROBOT, help="this robot's statistics instead")
    p.add_argument("--days", type=_days, default=30, help="with --robot: days of activity")
    p.add_argument("--json", action="store_true", help="the API's JSON body, as it answers")
    p.set_defaults(func=run(_stats, embeds=False))
