"""The LLM enrichment worker (issue 18, item 5; run by app/workers.periodic only when an LLM
is configured). For each memory added while one was (memory.enrichment_status 'pending'):

1. the model proposes tags, given the namespace's most used tag paths and told to prefer them;
   the valid ones join the memory's tags (a new version, by the robot `htm-enrich`; working
   memory is not touched: tags are not in it);
2. a memory of at least HTM_ENRICH_PROPOSITIONS_MIN_TOKENS tokens also gets its propositions,
   each a child memory through the add path (type `proposition`, key `prop-<id>-<n>`,
   metadata `source_key` / `source_id`, the source's author, importance and tags; not placed
   in working memory), which is never enriched itself;
3. the memory is marked done.

An add never waits for this. Each step is idempotent (a tag union; a proposition key already
taken was added by an earlier try), so a retry after a crash or a failure repeats nothing.
Failures follow the embedding worker's discipline: a provider that cannot answer (transient)
is retried with exponential backoff for as long as it takes, so an outage loses nothing; a
reply that is unusable (not JSON, not the shape asked for) is retried too and, after
MAX_ATTEMPTS, the memory is marked 'failed' with the error kept.
"""

from __future__ import annotations

import logging
from typing import Any

from app.auth.caller import Caller
from app.db.session import Sessionmaker
from app.enrichment import prompts
from app.enrichment.repository import EnrichmentRepository
from app.errors import Conflict
from app.llm.base import ChatModel, LlmError, reply_json
from app.memories.dedupe import union
from app.memories.schemas import MemoryCreate
from app.memories.units import MemoryUnits
from app.memories.writes import fields_of

log = logging.getLogger(__name__)

ROBOT = "htm-enrich"
BATCH = 8
MAX_ATTEMPTS = 5
BASE_BACKOFF_S = 5.0
MAX_BACKOFF_S = 300.0


def backoff_s(attempts: int) -> float:
    """The wait after the `attempts`-th failure (1, 2, ...): 5 s doubling, at most 5 min."""
    return min(MAX_BACKOFF_S, BASE_BACKOFF_S * 2 ** (attempts - 1))


class EnrichmentWorker:
    def __init__(
        self,
        *,
        sessionmaker: Sessionmaker,
        units: MemoryUnits,
        llm: ChatModel,
        min_tokens: int,
        max_tags: int,
        llm_timeout_s: float,
    ) -> None:
        self.sessionmaker = sessionmaker
        self.units = units
        self.llm = llm
        self.min_tokens = min_tokens
        self.max_tags = max_tags
        self.llm_timeout_s = llm_timeout_s

    async def run_once(self) -> int:
        """Enrich one leased batch; returns how many memories were enriched."""
        lease_s = self.llm_timeout_s * 3 * BATCH + 30
        async with self.sessionmaker() as session, session.begin():
            rows = await EnrichmentRepository(session).lease_pending(BATCH, lease_s)
        done = 0
        for row in rows:
            try:
                await self._enrich(row)
                done += 1
            except LlmError as exc:
                attempts = row.enrichment_attempts + 1
                give_up = not exc.transient and attempts >= MAX_ATTEMPTS
                async with self.sessionmaker() as session, session.begin():
                    await EnrichmentRepository(session).failed(
                        row.id, str(exc), None if give_up else backoff_s(attempts)
                    )
                log.warning(
                    "enriching memory %s failed (attempt %d%s): %s",
                    row.key,
                    attempts,
                    ", given up" if give_up else "",
                    exc,
                )
        return done

    async def _enrich(self, row: Any) -> None:
        async with self.sessionmaker() as session:
            ontology = await EnrichmentRepository(session).ontology(row.namespace_id)
        tags = prompts.proposed_tags(
            reply_json(
                await self.llm.complete(prompts.tags_prompt(row.content, ontology), json=True)
            ),
            self.max_tags,
        )
        found: list[str] = []
        # Propositions are namespace-wide memories: a private, group or pool one has none.
        if row.token_count >= self.min_tokens and row.visibility == "namespace":
            found = prompts.propositions(
                reply_json(
                    await self.llm.complete(prompts.propositions_prompt(row.content), json=True)
                )
            )
        caller = Caller(row.namespace_id, row.namespace, "admin")
        async with self.units(caller) as unit:
            service = unit.memories
            current = await service.repo.get(row.namespace_id, row.key, for_update=True)
            if current is None or current.id != row.id:
                return  # hard-deleted meanwhile (its key may name another memory now)
            merged = union(list(current.tags), tags)[: self.max_tags]
            if merged != list(current.tags):
                robot = await service.robots.ensure(ROBOT)
                fields = fields_of(current, importance=current.importance, tags=merged)
                rewrite = await service.writes.rewrite(
                    robot,
                    current,
                    fields,
                    tokens=current.token_count,
                    vector=None,
                    model=None,
                    detail={"enriched": True},
                )
                await service.two_tier.commit_durable()
                await service.writes.place(robot, [], place=False, rewrites=[rewrite])
            else:
                await unit.session.rollback()
            for n, text in enumerate(found, 1):
                body = MemoryCreate(
                    key=f"prop-{row.id}-{n}",
                    content=text,
                    type="proposition",
                    importance=current.importance,
                    tags=merged,
                    metadata={"source_key": row.key, "source_id": row.id},
                )
                try:
                    await service.add_many(row.author, [body], place=False)
                except Conflict:
                    pass  # added by an earlier try
        async with self.sessionmaker() as session, session.begin():
            await EnrichmentRepository(session).done(row.id)
