"""Readiness: which dependencies answer, and which versions are in use."""

from __future__ import annotations

import asyncio
from typing import Any

from app.db.session import Sessionmaker
from app.embedded.supervisor import Health
from app.embeddings.timed import TimedEmbedder
from app.errors import ServiceUnavailable
from app.health.repository import VersionRepository
from app.tokens import Tokenizer

CHECK_TIMEOUT_S = 2.0


async def redis_version(redis: Any) -> str:
    """The Redis server version. On a cluster, INFO answers per node ({node: {...}}): the
    first node's version is reported (a cluster runs one version, save during upgrades)."""
    info = await redis.info("server")
    if "redis_version" not in info:
        info = next(iter(info.values()))
    return str(info["redis_version"])


async def postgres_versions(sessionmaker: Sessionmaker) -> dict[str, Any]:
    async with sessionmaker() as session:
        return await VersionRepository(session).postgres()


def local_faults(embedder: TimedEmbedder, tokenizer: Tokenizer) -> dict[str, str]:
    """What this process knows is down without asking a server: the tokenizer (its BPE file)
    and the embedding model. /readyz reports them; `htm serve`'s ready line names them."""
    down: dict[str, str] = {}
    if not tokenizer.ready:
        down["tokenizer"] = tokenizer.error or "not loaded"
    if embedder.load_error:
        down["embedding"] = embedder.load_error
    return down


async def readiness(
    sessionmaker: Sessionmaker,
    redis: Any,
    embedder: TimedEmbedder,
    *,
    tokenizer: Tokenizer,
    embedded: dict[str, Health] | None = None,
) -> dict[str, Any]:
    """Check every dependency; raise 503 naming the ones that are down. `embedded`: what
    this process's supervisor knows of the embedded servers the app uses (running, being
    restarted, given up on), reported as `embedded` and added to what is unavailable."""
    report: dict[str, Any] = {
        "postgres": None,
        "pgvector": None,
        "timescaledb": None,
        "redis": None,
        "embedding": embedder.describe(),
        "tokenizer": {"encoding": tokenizer.encoding_name, "loaded": tokenizer.ready},
    }
    down: dict[str, str] = {}

    async def pg() -> None:
        try:
            report.update(await asyncio.wait_for(postgres_versions(sessionmaker), CHECK_TIMEOUT_S))
        except Exception as exc:
            down["postgres"] = type(exc).__name__

    async def rd() -> None:
        try:
            report["redis"] = await asyncio.wait_for(redis_version(redis), CHECK_TIMEOUT_S)
        except Exception as exc:
            down["redis"] = type(exc).__name__

    await asyncio.gather(pg(), rd())
    if embedded:
        report["embedded"] = {name: h.report() for name, h in embedded.items()}
        for name, h in embedded.items():
            why = h.why()
            if name in down and why:
                down[name] = f"{down[name]}: {why}"
    down.update(local_faults(embedder, tokenizer))
    if down:
        names = ", ".join(sorted(down))
        raise ServiceUnavailable(f"not ready: {names} unavailable", unavailable=down, **report)
    return report
