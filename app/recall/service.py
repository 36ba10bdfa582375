"""Recall: search long-term memory, then load the hits into the robot's working memory."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from app.auth.caller import Caller
from app.clock import Clock
from app.config import Settings
from app.conversation import named_in, session_of, speaker_of, speaker_tag, without_names
from app.db.session import DbSession
from app.db.vectors import check_storable
from app.embeddings.timed import TimedEmbedder
from app.entities.extract import extract, normalise
from app.entities.repository import EntityRepository
from app.errors import PayloadTooLarge, ServiceUnavailable, Unprocessable
from app.events.repository import EventRepository
from app.pools.service import PoolService
from app.recall.caches import SearchCaches
from app.recall.changed import newer_first
from app.recall.conversation_repository import Around, ConversationRepository
from app.recall.expand import Via, entity_hits, related_hits
from app.recall.explain import explain
from app.recall.fusion import (
    Fusion,
    Signals,
    check_hybrid_only,
    fusion_for,
    fusion_read,
    signals_for,
)
from app.recall.hits import SearchHit
from app.recall.planner import Strategy
from app.recall.query import SearchFilters, SearchQuery
from app.recall.schemas import (
    EmbeddingState,
    Neighbour,
    RecallHit,
    RecallRequest,
    RecallResult,
    RecallWorkingMemory,
    RelatedVia,
    RerankExplanation,
    TimeframeRead,
)
from app.recall.search import Search
from app.relationships.repository import LinkRepository
from app.rerank import HttpReranker, RerankError
from app.robots.service import RobotService
from app.timeframes.extract import extract_timeframe
from app.timeframes.parse import TimeRange
from app.timeframes.resolve import resolve_timeframe
from app.timeframes.validity import validity_for
from app.visibility import Reader
from app.working_memory.loads import RecallLoader
from app.working_memory.model import Placement
from app.working_memory.protocol import WriteProtocol
from app.working_memory.robots import Robot

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Asked:
    """A recall's question as the search takes it (`query`), and what the answer says of it."""

    query: SearchQuery
    vector_query: str | None  # the vector list's question, shown when it differs
    speakers: list[str]
    timeframe: TimeframeRead | None
    embedding: EmbeddingState
    floor: float  # min_score
    rerank: bool


@dataclass(frozen=True)
class Page:
    """The hits answered: the search's, each with its reranker's explanation, then the
    related ones after them."""

    ranked: list[tuple[SearchHit, RerankExplanation | None]]
    related: list[tuple[SearchHit, Via]]
    reranked: bool
    newer: dict[int, str] = field(default_factory=dict)  # app/recall/changed.py, by memory id

    @property
    def hits(self) -> list[SearchHit]:
        return [h for h, _ in self.ranked] + [h for h, _ in self.related]


def embedding_state(strategy: Strategy, vector: list[float] | None) -> EmbeddingState:
    if strategy == "fulltext":
        return "not_needed"
    return "ready" if vector is not None else "unavailable"


class RecallService:
    def __init__(
        self,
        *,
        session: DbSession,
        reads: DbSession,
        caller: Caller,
        robots: RobotService,
        two_tier: WriteProtocol,
        embedder: TimedEmbedder,
        caches: SearchCaches,
        settings: Settings,
        clock: Clock,
        pools: PoolService,
        reranker: HttpReranker | None = None,
        recalled: Callable[[str], None] | None = None,
        accessed: Callable[[list[int], datetime], None] | None = None,
        loads: RecallLoader | None = None,
    ) -> None:
        self.pools = pools
        # Loads answered before they are applied (app/working_memory/loads.py); None: every
        # load is waited for.
        self.loads = loads
        # What a recall reports beyond its answer: to /metrics (its strategy), and the hits'
        # accesses (app/memories/access.py counts them off the request's path).
        self.recalled = recalled
        self.accessed = accessed
        self.reranker = reranker
        self.caller = caller
        self.robots = robots
        self.two_tier = two_tier
        self.embedder = embedder
        self.settings = settings
        self.clock = clock
        self.caches = caches
        # The search and what it reads around its hits run in `reads` (a replica's session,
        # app/db/replicas.py, or the primary's); its log rows and working memory in `session`.
        self.search = Search(reads, settings.hnsw_ef_search, caches)
        self.conversations = ConversationRepository(reads)
        self.entities = EntityRepository(reads)
        self.links = LinkRepository(reads)
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
        check_hybrid_only(req)
        if req.rerank and self.reranker is None:
            raise Unprocessable(
                "rerank was asked for, but no reranker is configured (HTM_RERANK_URL)",
                errors=[{"field": "rerank", "message": "no reranker configured"}],
            )

    def check(self, req: RecallRequest) -> None:
        """What recall() refuses before it reads or registers anything (limit, options,
        timeframe): a caller that does other work first (a prompt) asks this up front."""
        self._check(req)
        self._timeframe(req)
        validity_for(req.valid_at, req.include, req.now or self.clock())

    async def _query_vector(self, req: RecallRequest, text: str) -> list[float] | None:
        if req.embedding is not None:
            return req.embedding
        return await self.embedder.embed_query(text)

    def _timeframe(self, req: RecallRequest) -> tuple[TimeRange | None, str | None, str]:
        """(range, the auto phrase, the text to search)."""
        now = req.now or self.clock()
        if req.timeframe is not None and req.timeframe.strip().lower() == "auto":
            found = extract_timeframe(req.query, now)
            if found is None:
                return None, None, req.query
            return found.range, found.phrase, found.searched
        return resolve_timeframe(req.timeframe, now), None, req.query

    async def _namespace_speakers(self) -> tuple[str, ...]:
        ns = self.caller.namespace_id
        found = self.caches.speakers.current(ns)
        if found is None:
            names = await self.conversations.speakers(ns)
            self.caches.speakers.remember(ns, names)
            found = tuple(names)
        return found

    async def _speakers(self, req: RecallRequest, text: str) -> tuple[list[str], str]:
        """(the namespace's speakers the question names, the vector list's question)."""
        wanted = req.strategy == "hybrid" or (
            req.strategy == "vector"
            and req.vector_query is None
            and self.settings.recall_vector_query == "without_speakers"
        )
        speakers = list(await self._namespace_speakers()) if wanted else []
        named = named_in(text, speakers)
        if req.vector_query is not None:
            return named, req.vector_query
        if self.settings.recall_vector_query == "without_speakers":
            return named, without_names(text, named)
        return named, text

    async def recall(
        self, robot_name: str, req: RecallRequest, *, reader: str | None = None
    ) -> RecallResult:
        """Search as `reader` may read (default: the robot itself), and load the hits into
        the robot's working memory: refuse what cannot run (422, nothing touched), ask (the
        question as one SearchQuery), search (app/recall/search.py: gather, plan, run),
        make the page (rerank, floor, expand), acknowledge it (events, accesses, working
        memory: by default queued, applied after the answer; `_load`), answer."""
        reader = reader or robot_name
        self._check(req)
        fusion = fusion_for(req, self.settings)
        if req.embedding is not None:
            check_storable([req.embedding], await self.search.repository.storage())
        timeframe = self._timeframe(req)
        robot = await self.robots.ensure(robot_name)
        await self.pools.check_readable(reader, req.pools)
        asked = await self._ask(req, robot, reader=reader, fusion=fusion, timeframe=timeframe)
        hits = await self._search(req.strategy, asked.query)
        page = await self._page(req, asked, hits)
        wm = await self._acknowledge(robot, req, page.hits)
        return await self._answer(req, asked, page, wm=wm)

    async def _ask(
        self,
        req: RecallRequest,
        robot: Robot,
        *,
        reader: str,
        fusion: Fusion,
        timeframe: tuple[TimeRange | None, str | None, str],
    ) -> Asked:
        """The question as the search takes it: the speakers it names, its vector, the
        filters, how deep (a reranker reorders a deeper page than the one answered)."""
        tr, phrase, text = timeframe
        named, vector_text = await self._speakers(req, text)
        tags = tuple(t for t in map(speaker_tag, named) if t is not None)
        signals = signals_for(req, self.settings, tags)
        vector = None if req.strategy == "fulltext" else await self._query_vector(req, vector_text)
        rerank = self.reranker is not None and req.rerank is not False
        filters = self._filters(req, robot, reader=reader, timeframe=tr)
        if req.filters.entities:
            keys = [normalise(e) for e in req.filters.entities]
            names = await self.entities.names(self.caller.namespace_id, keys)
            filters = dataclasses.replace(filters, entity_names=tuple(names))
        query = SearchQuery(
            namespace_id=self.caller.namespace_id,
            limit=max(req.limit, self.settings.rerank_candidates) if rerank else req.limit,
            filters=filters,
            text=text,
            vector=vector,
            fusion=fusion,
            signals=signals,
            now=req.now or self.clock(),
        )
        shown = req.embedding is None and vector is not None and vector_text != text
        return Asked(
            query=query,
            vector_query=vector_text if shown else None,
            speakers=named,
            timeframe=TimeframeRead(start=tr.start, end=tr.end, phrase=phrase) if tr else None,
            embedding=embedding_state(req.strategy, vector),
            floor=req.min_score if req.min_score is not None else self.settings.recall_min_score,
            rerank=rerank,
        )

    def _filters(
        self, req: RecallRequest, robot: Robot, *, reader: str, timeframe: TimeRange | None
    ) -> SearchFilters:
        f = req.filters
        return SearchFilters(
            author_robot_id=robot.id if req.scope == "self" else None,
            types=f.types,
            tags_any=f.tags_any,
            tags_all=f.tags_all,
            min_importance=f.min_importance,
            min_confidence=f.min_confidence,
            sources=f.sources,
            metadata=f.metadata,
            start=timeframe.start if timeframe else None,
            end=timeframe.end if timeframe else None,
            valid=validity_for(req.valid_at, req.include, req.now or self.clock()),
            reader=Reader(self.caller.namespace_id, reader, tuple(req.pools)),
        )

    async def _search(self, strategy: Strategy, query: SearchQuery) -> list[SearchHit]:
        if strategy == "vector" and query.vector is None:
            raise ServiceUnavailable(
                "vector recall needs a query embedding and the embedder is unavailable; "
                "use strategy=fulltext or hybrid, or send `embedding`",
                dependency="embedding",
            )
        return await self.search.find(query, strategy)

    async def _page(self, req: RecallRequest, asked: Asked, hits: list[SearchHit]) -> Page:
        """The page answered: the reranker's order (or the search's), the newer statement
        of a fact first (app/recall/changed.py), the hits below the floor left out, then,
        with `expand: "related"`, the memories one link away."""
        ranked = await self._reranked(asked.query.text, hits, req.limit) if asked.rerank else None
        page: list[tuple[SearchHit, RerankExplanation | None]] = (
            list(ranked) if ranked is not None else [(h, None) for h in hits[: req.limit]]
        )
        page, newer = newer_first(page, lambda p: p[0])
        if asked.floor > 0:
            page = [(h, r) for h, r in page if h.relevance is None or h.relevance >= asked.floor]
        if req.expand is None:
            return Page(page, [], reranked=ranked is not None, newer=newer)
        reader = asked.query.filters.reader
        assert reader is not None  # a robot's recall: only what it reads
        if req.expand == "entities":
            # Not a second hop: what the question names, and the speakers (a conversation's
            # speaker names nearly every turn of it). Measured on the conv set: docs/api.md.
            named = [e.key for e in extract(asked.query.text, {})]
            named += [normalise(s) for s in await self._namespace_speakers()]

            async def hop(query: SearchQuery) -> list[SearchHit]:
                return await self._search(req.strategy, query)

            kept, related = await entity_hits(
                self.entities, hop, asked.query, [h for h, _ in page], req.limit, skip=named
            )
        else:
            kept, related = await related_hits(self.links, reader, [h for h, _ in page], req.limit)
        return Page(page[: len(kept)], related, reranked=ranked is not None, newer=newer)

    async def _acknowledge(
        self, robot: Robot, req: RecallRequest, hits: list[SearchHit]
    ) -> RecallWorkingMemory | None:
        """The recall's log rows, its hits' accesses, working memory, its metric."""
        # A recall changes nothing a client is told is stored: its log rows (and working
        # memory's mirror) commit without waiting for the WAL flush.
        await self.events.record(
            self.caller.namespace_id,
            "recall",
            robot.id,
            memory_ids=[h.id for h in hits],
            detail={"strategy": req.strategy},
            wait_for_flush=False,
        )
        if self.accessed is not None:
            self.accessed([h.id for h in hits], self.clock())
        wm = None
        if req.load_into_working_memory and hits:
            wm = await self._load(robot, hits, wait=self._waits(req))
        if self.recalled is not None:
            self.recalled(req.strategy)
        return wm

    async def _answer(
        self, req: RecallRequest, asked: Asked, page: Page, *, wm: RecallWorkingMemory | None
    ) -> RecallResult:
        query = asked.query
        signals = query.signals
        answered = [
            self._hit(h, r, explained=req.explain, signals=signals, newer=page.newer.get(h.id))
            for h, r in page.ranked
        ]
        for h, via in page.related:
            answered.append(self._hit(h, None, explained=False, signals=signals))
            answered[-1].via = RelatedVia(key=via.key, type=via.type, entity=via.entity)
        if req.neighbours and query.filters.reader is not None:
            await self._neighbours(
                page.hits, answered, n=req.neighbours, reader=query.filters.reader
            )
        return RecallResult(
            strategy=req.strategy,
            query=req.query,
            searched=query.text,
            vector_query=asked.vector_query,
            speakers=asked.speakers,
            min_score=asked.floor,
            timeframe=asked.timeframe,
            embedding=asked.embedding,
            fusion=fusion_read(query.fusion, query.candidates)
            if req.strategy == "hybrid"
            else None,
            reranked=page.reranked,
            hits=answered,
            working_memory=wm
            or RecallWorkingMemory(loaded=[], evicted=[], not_admitted=[], reason="skipped"),
        )

    async def _neighbours(
        self, hits: list[SearchHit], answered: list[RecallHit], *, n: int, reader: Reader
    ) -> None:
        """Each answered hit of a session gets the turns around it (that `reader` may read)."""
        of_session = [(i, session_of(h.metadata)) for i, h in enumerate(hits)]
        around = [(i, Around(s, hits[i].created_at, hits[i].id)) for i, s in of_session if s]
        found = await self.conversations.neighbours(
            self.caller.namespace_id, [a for _, a in around], n, reader
        )
        for (i, _), rows in zip(around, found, strict=True):
            answered[i].neighbours = [
                Neighbour(
                    position=r.position,
                    key=r.key,
                    content=r.content,
                    speaker=speaker_of(r.metadata),
                    created_at=r.created_at,
                )
                for r in rows
            ]

    async def _reranked(
        self, text: str, hits: list[SearchHit], limit: int
    ) -> list[tuple[SearchHit, RerankExplanation | None]] | None:
        """The top `limit` of `hits` in the reranker's order (ties: the fused order), or
        None when it fails: the fused order stands."""
        assert self.reranker is not None
        try:
            scores = await self.reranker.scores(text, [h.content for h in hits])
        except RerankError as exc:
            log.warning("rerank skipped: %s", exc)
            return None
        order = sorted(range(len(hits)), key=lambda i: (-scores[i], i))[:limit]
        return [
            (hits[i], RerankExplanation(score=scores[i], rank=n, fused_rank=i + 1))
            for n, i in enumerate(order, start=1)
        ]

    def _waits(self, req: RecallRequest) -> bool:
        if self.loads is None:
            return True
        if req.wait_for_working_memory is not None:
            return req.wait_for_working_memory
        return self.settings.recall_load == "wait"

    async def _load(
        self, robot: Robot, hits: list[SearchHit], *, wait: bool
    ) -> RecallWorkingMemory:
        """The hits into the robot's working memory, through the write protocol. Not waited
        for (`wait` false): the load is queued (app/working_memory/loads.py) and the answer
        says `pending`; a read of that working memory after this answer waits for it."""
        at = None if wait else self.clock()  # applied later: the access is the recall's
        placements = [
            Placement(
                h.id, h.created_at, h.version, h.key, h.content, h.token_count, h.importance,
                h.audience, at,
            )
            for h in hits
        ]  # fmt: skip
        if not wait:
            assert self.loads is not None
            await self.loads.submit(self.two_tier.scope, robot, placements)
            keys = list(dict.fromkeys(p.key for p in placements))
            return RecallWorkingMemory(
                loaded=[], evicted=[], not_admitted=[], pending=keys, reason="pending"
            )
        outcomes = await self.two_tier.place(robot, placements, from_recall=True)
        # Admitted hits all carry the call's evictions; a too-large hit carries none, so the
        # first hit alone may not tell.
        evicted: list[str] = next((o.evicted for o in outcomes.values() if o.evicted), [])
        unavailable = any(o.reason == "unavailable" for o in outcomes.values())
        return RecallWorkingMemory(
            loaded=[k for k, o in outcomes.items() if o.admitted],
            evicted=evicted,
            not_admitted=[k for k, o in outcomes.items() if not o.admitted],
            reason="unavailable" if unavailable else "loaded",
        )

    @staticmethod
    def _hit(
        h: SearchHit,
        rerank: RerankExplanation | None,
        *,
        explained: bool,
        signals: Signals,
        newer: str | None = None,
    ) -> RecallHit:
        return RecallHit(
            key=h.key,
            content=h.content,
            type=h.type,
            importance=h.importance,
            confidence=h.confidence,
            source=h.source,
            tags=h.tags,
            metadata=h.metadata,
            author=h.author,
            token_count=h.token_count,
            created_at=h.created_at,
            score=rerank.score if rerank else h.score,
            vector_rank=h.vector_rank,
            vector_similarity=h.vector_similarity,
            fulltext_rank=h.fulltext_rank,
            fulltext_score=h.fulltext_score,
            relevance=h.relevance,
            explain=explain(h, signals, rerank, h.score, newer=newer) if explained else None,
        )
