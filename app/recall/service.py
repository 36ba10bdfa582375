"""Recall: search long-term memory, then load the hits into the robot's working memory."""

from __future__ import annotations

import logging

from app.auth.caller import Caller
from app.clock import Clock
from app.config import Settings
from app.db.session import DbSession
from app.db.vectors import check_storable
from app.embeddings.timed import TimedEmbedder
from app.errors import PayloadTooLarge, ServiceUnavailable, Unprocessable
from app.events.repository import EventRepository
from app.recall.caches import SearchCaches
from app.recall.repository import SearchFilters, SearchHit, SearchRepository
from app.recall.schemas import (
    EmbeddingState,
    RecallHit,
    RecallRequest,
    RecallResult,
    RecallWorkingMemory,
    TimeframeRead,
)
from app.robots.service import RobotService
from app.timeframes.http import resolve_timeframe
from app.working_memory.model import Placement
from app.working_memory.protocol import WriteProtocol

log = logging.getLogger(__name__)


class RecallService:
    def __init__(
        self,
        session: DbSession,
        caller: Caller,
        robots: RobotService,
        two_tier: WriteProtocol,
        embedder: TimedEmbedder,
        caches: SearchCaches,
        settings: Settings,
        clock: Clock,
    ) -> None:
        self.caller = caller
        self.robots = robots
        self.two_tier = two_tier
        self.embedder = embedder
        self.settings = settings
        self.clock = clock
        self.search = SearchRepository.with_caches(session, settings.hnsw_ef_search, caches)
        self.events = EventRepository(session, clock)

    def _check(self, req: RecallRequest) -> None:
        s = self.settings
        if len(req.query) > s.max_query_chars:
            raise PayloadTooLarge(
                f"query is {len(req.query)} characters; the limit is {s.max_query_chars}",
                field="query",
                limit=s.max_query_chars,
            )
        if req.limit > s.max_recall_limit:
            raise Unprocessable(
                f"limit must be at most {s.max_recall_limit}",
                errors=[{"field": "limit", "message": f"at most {s.max_recall_limit}"}],
            )
        if req.embedding is not None and len(req.embedding) != s.embedding_dimension:
            raise Unprocessable(
                f"embedding has {len(req.embedding)} dimensions; this deployment uses "
                f"{s.embedding_dimension}",
                errors=[{"field": "embedding", "message": "wrong dimension"}],
            )

    async def _query_vector(self, req: RecallRequest) -> list[float] | None:
        if req.embedding is not None:
            return req.embedding
        [vector], _ = await self.embedder.embed_or_defer([req.query], "query embedding failed")
        return vector

    async def recall(self, robot_name: str, req: RecallRequest) -> RecallResult:
        self._check(req)
        if req.embedding is not None:
            search = self.search
            check_storable([req.embedding], await search.vectors.storage(search.session))
        tr = resolve_timeframe(req.timeframe, req.now or self.clock())
        robot = await self.robots.ensure(robot_name)
        f = req.filters
        filters = SearchFilters(
            author_robot_id=robot.id if req.scope == "self" else None,
            types=f.types,
            tags_any=f.tags_any,
            tags_all=f.tags_all,
            min_importance=f.min_importance,
            metadata=f.metadata,
            start=tr.start if tr else None,
            end=tr.end if tr else None,
        )
        namespace_id = self.caller.namespace_id
        vector = None
        if req.strategy != "fulltext":
            vector = await self._query_vector(req)
        embedding_state: EmbeddingState = (
            "not_needed"
            if req.strategy == "fulltext"
            else ("ready" if vector is not None else "unavailable")
        )

        hits: list[SearchHit]
        if req.strategy == "vector":
            if vector is None:
                raise ServiceUnavailable(
                    "vector recall needs a query embedding and the embedder is unavailable; "
                    "use strategy=fulltext or hybrid, or send `embedding`",
                    dependency="embedding",
                )
            hits = await self.search.vector(namespace_id, vector, filters, req.limit)
        elif req.strategy == "fulltext":
            hits = await self.search.fulltext(namespace_id, req.query, filters, req.limit)
        else:
            hits = await self.search.hybrid(
                namespace_id, req.query, vector, filters, req.limit, self.settings.rrf_k
            )

        # A recall changes nothing a client is told is stored: its log rows (and working
        # memory's mirror) commit without waiting for the WAL flush.
        await self.events.record(
            namespace_id,
            "recall",
            robot.id,
            [h.id for h in hits],
            {"strategy": req.strategy},
            wait_for_flush=False,
        )
        wm = RecallWorkingMemory(loaded=[], evicted=[], not_admitted=[], reason="skipped")
        if req.load_into_working_memory and hits:
            outcomes = await self.two_tier.place(
                robot,
                [
                    Placement(
                        h.id,
                        h.created_at,
                        h.version,
                        h.key,
                        h.content,
                        h.token_count,
                        h.importance,
                    )
                    for h in hits
                ],
                from_recall=True,
            )
            # Admitted hits all carry the call's evictions; a too-large hit carries none, so
            # the first hit alone may not tell.
            evicted: list[str] = next((o.evicted for o in outcomes.values() if o.evicted), [])
            unavailable = any(o.reason == "unavailable" for o in outcomes.values())
            wm = RecallWorkingMemory(
                loaded=[k for k, o in outcomes.items() if o.admitted],
                evicted=evicted,
                not_admitted=[k for k, o in outcomes.items() if not o.admitted],
                reason="unavailable" if unavailable else "loaded",
            )
        return RecallResult(
            strategy=req.strategy,
            query=req.query,
            timeframe=TimeframeRead(start=tr.start, end=tr.end) if tr else None,
            embedding=embedding_state,
            hits=[
                RecallHit(
                    key=h.key,
                    content=h.content,
                    type=h.type,
                    importance=h.importance,
                    tags=h.tags,
                    metadata=h.metadata,
                    author=h.author,
                    token_count=h.token_count,
                    created_at=h.created_at,
                    score=h.score,
                    vector_rank=h.vector_rank,
                    vector_similarity=h.vector_similarity,
                    fulltext_rank=h.fulltext_rank,
                    fulltext_score=h.fulltext_score,
                )
                for h in hits
            ],
            working_memory=wm,
        )
