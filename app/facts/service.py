"""Facts from conversations (issue 47, item 3): an LLM reads a conversation's turns and
writes down its atomic facts and preferences, each added as a memory through the add path
(the one write protocol: group commit, the duplicate rule, the supersede detector), linked
`derived_from` to the turns it came from. Off without an LLM.

Nothing half-written: the turns are read first, the model is asked while no transaction is
open, and its reply is read whole (app/facts/prompts.py) before anything is written; the
facts are then one batch add, all or nothing. A model that fails, times out or answers
something unusable writes nothing (503 or 502, problem+json).

Each fact: type `fact` or `preference`; metadata `derived_from` (its turns' keys, at most
MAX_SOURCES) and `extracted_by` (provider/model); `created_at` its newest turn's (when it was
said, so timeframes, recency and the supersede order read the conversation's time); visible
to the namespace when every turn it was read from is, else private to the robot; `dedupe:
exact` (a fact already known, same type and text, is reinforced, not stored again); not
placed in working memory (a backfill: the robot's focus stays)."""

from __future__ import annotations

from typing import Any

from app.auth.caller import Caller
from app.conversation import speaker_of
from app.db.session import DbSession
from app.errors import BadGateway, Conflict, NotFound, ServiceUnavailable
from app.facts.prompts import Turn, extracted_facts, facts_prompt
from app.facts.repository import TurnReads
from app.facts.schemas import MAX_TURNS, FactsExtract, FactsExtracted
from app.llm.base import ChatModel, LlmError, reply_json
from app.memories.schemas import MemoryCreate
from app.memories.service import MemoryService
from app.visibility import Reader

MAX_SOURCES = 20


class FactService:
    def __init__(
        self,
        *,
        session: DbSession,
        caller: Caller,
        memories: MemoryService,
        llm: ChatModel | None,
    ) -> None:
        self.session = session
        self.caller = caller
        self.memories = memories
        self.llm = llm

    async def extract(self, robot: str, req: FactsExtract) -> FactsExtracted:
        rows = await self._turns(robot, req)  # first: turns it may not read are a 404
        if self.llm is None:
            raise Conflict(
                "no LLM is configured (HTM_LLM_PROVIDER=none): facts are extracted by one"
            )
        # The turns are read: no transaction stays open while the model thinks.
        await self.session.rollback()
        turns = [Turn(r.key, speaker_of(r.metadata), r.content) for r in rows]
        model = f"{self.llm.provider}/{self.llm.model}"
        try:
            reply = await self.llm.complete(facts_prompt(turns), json=True)
            found = extracted_facts(reply_json(reply), len(turns))
        except LlmError as exc:
            if exc.transient:
                raise ServiceUnavailable(
                    f"the LLM could not answer: {exc}", dependency="llm"
                ) from exc
            raise BadGateway(f"the LLM's answer was unusable: {exc}", dependency="llm") from exc
        keys = [t.key for t in turns]
        if not found:
            return FactsExtracted(turns=keys, model=model, facts=[])
        bodies = []
        for f in found:
            sources = [rows[i] for i in f.turns]
            private = any(r.visibility != "namespace" for r in sources)
            bodies.append(
                MemoryCreate(
                    content=f.text,
                    type=f.kind,
                    metadata={
                        "derived_from": [r.key for r in sources][:MAX_SOURCES],
                        "extracted_by": model,
                    },
                    created_at=max(r.created_at for r in sources),
                    visibility="private" if private else "namespace",
                    dedupe="exact",
                    supersede=req.supersede,
                )
            )
        added = await self.memories.add_many(robot, bodies, place=False)
        return FactsExtracted(turns=keys, model=model, facts=added)

    async def _turns(self, robot: str, req: FactsExtract) -> list[Any]:
        ns = self.caller.namespace_id
        reader, reads = Reader(ns, robot), TurnReads(self.session)
        if req.keys is not None:
            found = {r.key: r for r in await reads.by_keys(ns, req.keys, reader)}
            missing = [k for k in req.keys if k not in found]
            if missing:
                raise NotFound(f"memory {missing[0]!r} does not exist")
            return [found[k] for k in req.keys]
        assert req.session is not None
        rows = await reads.of_session(ns, req.session, reader, MAX_TURNS)
        if not rows:
            raise NotFound(f"conversation {req.session!r} has no memories")
        return rows
