"""The eviction summary worker (app/workers.periodic): for each robot with
`summarize_evictions`, the memories its working memory evicted since the last summary become
one `summary` memory, added through the add path (so it is stored durably, counted, and placed
in working memory if it fits: the trace of what was dropped). An add never waits for it.

Exactly once: the summary's key names the last eviction it covers, so a pass that crashed
after the add and before moving the watermark finds the key taken (409) and only moves it.
"""

from __future__ import annotations

import logging
from typing import Any

from app.auth.caller import Caller
from app.db.session import Sessionmaker
from app.errors import Conflict
from app.llm.base import ChatModel, LlmError
from app.memories.schemas import MemoryCreate
from app.memories.units import MemoryUnits
from app.summaries.extract import Evicted, Summary, fitted, llm_prompt, summarize
from app.summaries.repository import SummaryRepository
from app.tokens import Tokenizer

log = logging.getLogger(__name__)

ROBOTS_PER_PASS = 100
EVICTIONS_PER_SUMMARY = 200
SOURCES_IN_METADATA = 50


class EvictionSummaryWorker:
    def __init__(
        self,
        *,
        sessionmaker: Sessionmaker,
        units: MemoryUnits,
        tokenizer: Tokenizer,
        default_budget: int,
        target_tokens: int,
        llm: ChatModel | None = None,
    ) -> None:
        self.llm = llm  # when set, summaries are the LLM's; else extractive
        self.sessionmaker = sessionmaker
        self.units = units
        self.tokenizer = tokenizer
        self.default_budget = default_budget
        self.target_tokens = target_tokens

    async def run_once(self) -> int:
        """Summarise what each robot evicted since its last summary; returns summaries written."""
        async with self.sessionmaker() as session:
            due = await SummaryRepository(session).due(ROBOTS_PER_PASS, self.default_budget)
        written = 0
        for row in due:
            try:
                written += await self._robot(row)
            except LlmError as exc:  # the watermark stays: the same evictions next pass
                log.warning(
                    "summarising robot %s's evictions waits for the LLM: %s", row.robot, exc
                )
            except Exception:
                log.exception("summarising robot %s's evictions failed; retried later", row.robot)
        return written

    async def _robot(self, row: Any) -> int:
        async with self.sessionmaker() as session:
            events = await SummaryRepository(session).evicted_since(
                row.robot_id,
                row.watermark,
                EVICTIONS_PER_SUMMARY,
            )
        if not events:
            return 0
        through = events[-1].event_id
        evicted = [
            Evicted(e.key, e.content, e.importance)
            for e in events
            if e.key is not None and e.deleted_at is None and e.type != "summary"
        ]
        count = self.tokenizer.count
        if self.llm is not None and evicted:
            reply = await self.llm.complete(llm_prompt(evicted, self.target_tokens))
            summary = fitted(evicted, reply, self.target_tokens, count=count)
        else:
            summary = summarize(evicted, self.target_tokens, count)
        written = 0
        if summary is not None:
            written = await self._add(row, summary, through)
        async with self.sessionmaker() as session:
            await SummaryRepository(session).advance(row.robot_id, through)
            await session.commit()
        return written

    async def _add(self, row: Any, summary: Summary, through: int) -> int:
        caller = Caller(row.namespace_id, row.namespace, "admin")
        body = MemoryCreate(
            key=f"summary:{row.robot_id}:{through}",
            content=summary.content,
            type="summary",
            importance=summary.importance,
            metadata={
                "summary_of": summary.sources[:SOURCES_IN_METADATA],
                "summarised": len(summary.sources),
                "through_event": through,
            },
        )
        try:
            async with self.units(caller) as unit:
                held = await SummaryRepository(unit.session).working_memory_tokens(
                    row.namespace_id, row.robot_id
                )
                # Placed only if it fits beside what working memory holds: a summary must not
                # evict (a placement evicts even more important items to admit its memory).
                fits = held + self.tokenizer.count(summary.content) <= row.budget
                await unit.memories.add_many(row.robot, [body], place=fits)
        except Conflict:
            return 0  # written by a pass that stopped before moving the watermark
        return 1
