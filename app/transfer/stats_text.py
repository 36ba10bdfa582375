"""`htm stats` for a person: the figures of GET /v1/stats and GET /v1/robots/{robot}/stats as
a few lines (`--json` prints the API's body instead)."""

from __future__ import annotations

from datetime import UTC, datetime

from app.stats.schemas import NamespaceStats, RobotStats, WorkingMemoryUsage


def size(n: int) -> str:
    """Bytes in the largest unit (of 1000) that leaves at least 1."""
    if n < 1000:
        return f"{n} B"
    value, unit = n / 1000, "kB"
    for larger in ("MB", "GB"):
        if value < 1000:
            break
        value, unit = value / 1000, larger
    return f"{value:.1f} {unit}"


def when(t: datetime) -> str:
    return f"{t.astimezone(UTC):%Y-%m-%d %H:%M}"


def usage(wm: WorkingMemoryUsage) -> str:
    line = f"{wm.tokens} / {wm.max_tokens} tokens ({wm.utilization:g} %), {wm.items} items"
    if wm.group is not None:
        line += f", shared with group {wm.group}"
    if wm.degraded:
        line += " (read from PostgreSQL: Redis is unreachable)"
    return line


def namespace_lines(s: NamespaceStats) -> list[str]:
    lines = [
        f"namespace {s.namespace}: {s.memories} memories, {s.deleted_memories} deleted, "
        f"{size(s.memory_bytes)} stored",
        f"embeddings: {s.pending_embeddings} pending, {s.failed_embeddings} failed",
        f"robots: {len(s.robots)}" + (" (working memory use)" if s.robots else ""),
    ]
    width = max((len(r.robot) for r in s.robots), default=0)
    lines += [f"  {r.robot:<{width}}  {usage(r.working_memory)}" for r in s.robots]
    v = s.versions
    found = [
        f"{name} {version}"
        for name, version in (
            ("PostgreSQL", v.postgres),
            ("pgvector", v.pgvector),
            ("TimescaleDB", v.timescaledb),
            ("Redis", v.redis),
        )
        if version is not None
    ]
    lines.append("servers: " + (", ".join(found) or "unknown"))
    return lines


def robot_lines(s: RobotStats, days: int) -> list[str]:
    lt = s.long_term
    kinds = ", ".join(f"{n} {t}" for t, n in sorted(lt.by_type.items()))
    lines = [
        f"robot {s.robot}",
        f"working memory: {usage(s.working_memory)}",
        f"long-term: {lt.memories} memories" + (f" ({kinds})" if kinds else ""),
    ]
    if lt.oldest is not None and lt.newest is not None:
        lines.append(f"  oldest {when(lt.oldest)}, newest {when(lt.newest)} UTC")
    lines.append(f"embeddings: {lt.pending_embeddings} pending, {lt.failed_embeddings} failed")
    if not s.activity:
        lines.append(f"activity: none in the last {days} days")
    else:
        lines.append(f"activity in the last {days} days (UTC day: adds, recalls, evictions):")
        lines += [f"  {d.day}: {d.adds}, {d.recalls}, {d.evictions}" for d in s.activity]
    return lines
