"""One call for a prompt: the input, a session's latest messages, working memory and the
long-term hits recalled for the input, fitted into the model's budget (app/prompt/budget.py
says how) with a manifest of every candidate; with overflow "summarize", a summary of what
did not fit in the room left (the LLM's where one is configured, else extractive)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.config import Settings
from app.db.session import DbSession
from app.errors import Unprocessable
from app.llm.base import ChatModel, LlmError
from app.profiles.service import ProfileService, line, value_of
from app.prompt import budget
from app.prompt.schemas import PromptRequest, PromptResult
from app.recall.schemas import RecallHit, RecallRequest
from app.recall.service import RecallService
from app.robots.service import RobotService
from app.sessions.service import SessionService, Turn
from app.state.service import StateService
from app.summaries.extract import Evicted, digest, fitted
from app.tokens import Tokenizer
from app.working_memory.context import order
from app.working_memory.items import Outline, WMItem
from app.working_memory.model import to_us
from app.working_memory.robots import Robot
from app.working_memory.service import WorkingMemoryService
from app.working_memory.store import Strategy


@contextlib.contextmanager
def _recall_fields() -> Iterator[None]:
    """A recall's refusal names its fields as the prompt request has them (recall.<field>)."""
    try:
        yield
    except Unprocessable as exc:
        for e in exc.extra.get("errors", []):
            e["field"] = f"recall.{e['field']}"
        raise


def _working(
    items: Sequence[Outline | WMItem], strategy: Strategy, now_ms: int
) -> list[budget.Item]:
    """Working memory's candidates in the strategy's order; an outline's contents are read
    later, for the items taken (PromptService._fill)."""
    return [
        budget.Item("working_memory", getattr(i, "content", ""), i.tokens, key=i.key)
        for _, i in order(items, strategy, now_ms)
    ]


class PromptService:
    def __init__(
        self,
        *,
        robots: RobotService,
        working_memory: WorkingMemoryService,
        recall: RecallService,
        sessions: SessionService,
        profiles: ProfileService,
        state: StateService,
        tokenizer: Tokenizer,
        settings: Settings,
        session: DbSession,
        llm: ChatModel | None = None,
    ) -> None:
        self.llm = llm  # when set, an overflow's summary is the LLM's; else extractive
        # The request's transaction: ended before the LLM is asked (_summarize).
        self.session = session
        self.state = state
        self.robots = robots
        self.working_memory = working_memory
        self.recall_service = recall
        self.sessions = sessions
        self.profiles = profiles
        self.tokenizer = tokenizer
        self.settings = settings

    def _recall_request(self, req: PromptRequest) -> RecallRequest | None:
        r = req.recall
        if r is None:
            return None
        return RecallRequest(
            query=req.input[: self.settings.max_query_chars],
            strategy=r.strategy,
            limit=r.limit,
            timeframe=r.timeframe,
            scope=r.scope,
            filters=r.filters,
            min_score=r.min_score,
            load_into_working_memory=False,
        )

    async def _fill(self, robot: Robot, working: list[budget.Item]) -> bool:
        """The taken working-memory items' contents, from Redis; False when one no longer
        holds what its outline said (removed or replaced between the reads)."""
        taken = [i for i in working if i.included]
        found = await self.working_memory.contents(robot, [i.key or "" for i in taken])
        for item, got in zip(taken, found, strict=True):
            if got is None or got[1] != item.tokens:
                return False
            item.content = got[0]
        return True

    def _budget(self, req: PromptRequest) -> int:
        r = req.reserve
        left = req.context_window - r.system - r.tools - r.output
        if left < 1:
            raise Unprocessable(
                f"context_window {req.context_window} minus the reserves leaves {left} tokens",
                errors=[{"field": "reserve", "message": "reserves fill the context window"}],
            )
        return left

    async def prompt(self, robot_name: str, req: PromptRequest) -> PromptResult:
        """Check what can be refused, read the candidates, fit them, summarise what did not
        fit (overflow "summarize"), count the session's messages taken as accessed, answer."""
        # The input, the system text, roles and headers are encoded once per request; the
        # candidates' counts are the stored ones (budget.py).
        count = functools.cache(self.tokenizer.count)
        limit = self._budget(req)
        base = self._input_tokens(count, req, limit)
        recall = self._recall_request(req)
        if recall is not None:
            # Its own checks (limit, timeframe, options) refuse bad options before anything
            # is registered or read.
            with _recall_fields():
                self.recall_service.check(recall)
        robot = await self.robots.ensure(robot_name)
        got = await self._candidates(
            robot_name, robot, req, recall=recall, count=count, room=limit - base
        )
        try:
            fitting, wm_degraded = await self._fit(robot, req, got, count=count, limit=limit)
            done = budget.finish(fitting)
            summarized = None
            if req.overflow == "summarize":
                done, summarized = await self._summarize(robot, fitting, done)
        except budget.InputTooLarge as exc:
            raise Unprocessable(
                f"the input with the pinned notes needs {exc.needed} tokens; the budget is "
                f"{exc.budget}",
                errors=[{"field": "context_window", "message": "pinned notes do not fit"}],
                needed=exc.needed,
                budget=exc.budget,
            ) from None
        if got.session_id is not None:
            self.sessions.count_accesses(
                got.session_id,
                [i.seq for i in fitting.session if i.included and i.seq is not None],
            )
        return _result(
            done, limit, degraded=wm_degraded or got.session_degraded, summarized=summarized
        )

    def _input_tokens(self, count: budget.Count, req: PromptRequest, limit: int) -> int:
        """The input's and the system text's tokens; refused before anything is read or
        written when they alone cannot fit."""
        base = budget.REPLY_PRIMER + budget.message_tokens(count, "user", req.input)
        if req.system:
            base += budget.message_tokens(count, "system", req.system)
        if base > limit:
            raise Unprocessable(
                f"the input (with the system text) needs {base} tokens; the budget is {limit}",
                errors=[{"field": "input", "message": f"needs {base} tokens of {limit}"}],
                needed=base,
                budget=limit,
            )
        return base

    async def _candidates(
        self,
        robot_name: str,
        robot: Robot,
        req: PromptRequest,
        *,
        recall: RecallRequest | None,
        count: budget.Count,
        room: int,
    ) -> _Candidates:
        """The recall's hits, the session's latest messages (within `room` tokens), the
        profile's lines, the pinned notes and working memory's outline."""
        # Working memory's outline comes from Redis while PostgreSQL answers the recall and
        # the session (one database session: its statements go one after another).
        outlining = asyncio.ensure_future(self.working_memory.outline_from_redis(robot))
        try:
            got = _Candidates()
            if recall is not None:
                with _recall_fields():
                    got.hits = (await self.recall_service.recall(robot_name, recall)).hits
            if req.session is not None:
                got.session_id, got.messages, got.session_degraded = await self.sessions.latest(
                    robot_name, req.session, room
                )
            if req.profile is not None:
                for r in await self.profiles.slots(robot_name, req.profile.subject):
                    text = line(r.slot, value_of(r))
                    got.profile.append(budget.Item("profile", text, count(text), key=r.key))
            for key, text, tokens in await self.state.pinned_notes(robot):
                got.pinned.append(budget.Item("pinned", text, tokens, key=key))
            got.outlined = await outlining
        finally:
            if not outlining.done():
                outlining.cancel()
        return got

    async def _fit(
        self, robot: Robot, req: PromptRequest, got: _Candidates, *, count: budget.Count, limit: int
    ) -> tuple[budget.Fitting, bool]:
        """The candidates fitted into the budget, and whether working memory was read
        degraded."""
        q = req.quotas
        quotas = budget.Quotas(q.profile, q.session, q.working_memory, q.recall)
        header = budget.PROFILE_HEADER.format(subject=req.profile.subject if req.profile else "")
        now_ms = to_us(self.working_memory.protocol.clock()) // 1000

        def fit(items: list[Outline] | list[WMItem]) -> budget.Fitting:
            """Each call on fresh items (allocate marks them); the pinned notes' and the
            profile's, taken first, are marked the same way each time."""
            return budget.allocate(
                count,
                limit,
                req.input,
                system=req.system,
                session=[
                    budget.Item("session", m.content, m.tokens, seq=m.seq, role=m.role)
                    for m in reversed(got.messages)
                ],
                working_memory=_working(items, req.strategy, now_ms),
                recall=[
                    budget.Item("recall", h.content, h.token_count, key=h.key) for h in got.hits
                ],
                quotas=quotas,
                count_joined=self.tokenizer.count_joined,
                profile=got.profile,
                profile_header=header,
                pinned=got.pinned,
            )

        # Fitted by the outline's counts, then the contents of the items taken are read; an
        # item that left between the two reads (rare) means reading it all again, then whole.
        outlined, wm_degraded = got.outlined, False
        for _ in range(2):
            if outlined is None:
                outlined, wm_degraded = await self.working_memory.outline(robot)
            fitting = fit(outlined)
            if wm_degraded or await self._fill(robot, fitting.working_memory):
                return fitting, wm_degraded
            outlined = None
        items, _, wm_degraded = await self.working_memory.snapshot(robot)
        return fit(items), wm_degraded

    async def _summarize(
        self, robot: Robot, fitting: budget.Fitting, done: budget.Assembly
    ) -> tuple[budget.Assembly, _Summarized | None]:
        """What did not fit, summarised in the room left (budget.place_summary): the LLM's
        summary when one is configured, else (or when it fails) the extractive digest."""
        room = budget.summary_room(fitting)
        left = budget.left_out(fitting.manifest)
        if not left:  # everything fitted: nothing to summarise, no summary entry
            return done, None
        # A summary of `room` tokens holds at most about `room` sentences: no more candidates
        # are read (none when there is no room: the summary's entry says it was left out).
        left = await self._contents(robot, left[: max(room, 0)])
        texts = [f"{i.role}: {i.content}" if i.source == "session" else i.content for i in left]
        reply, shown, failed = None, left, None
        if self.llm is not None and room > 0 and left:
            shown = _within(left, LLM_INPUT_TOKENS)
            # Everything is read and nothing after writes to PostgreSQL: the request's
            # transaction (its reads, the recall's log rows) ends here, so no connection
            # stays idle in a transaction for as long as the LLM takes.
            await self.session.commit()
            try:
                reply = await self.llm.complete(_llm_messages(texts[: len(shown)], room))
            except LlmError as exc:
                failed = f"the LLM failed: {exc}"
        count = self.tokenizer.count  # the trials are many and seen once: not cached
        # Who wrote each text written (place_summary may write several and keep one).
        how: dict[str, _Summarized] = {}

        def write(target: int) -> tuple[str, int, list[budget.Item]] | None:
            fallback = failed
            if reply is not None:
                items = [Evicted(str(n), t, 0.0) for n, t in enumerate(texts[: len(shown)])]
                cut = fitted(items, reply, target, count=count, header="")
                if cut is not None:
                    how.setdefault(cut.content, _Summarized("llm"))
                    return cut.content, count(cut.content), shown
                fallback = f"the LLM's summary has no sentence within {target} tokens"
            got = digest(texts, target, count)
            if got is None:
                return None
            text, covered = got
            how.setdefault(text, _Summarized("extractive", fallback))
            return text, count(text), [left[n] for n in covered]

        placed = budget.place_summary(fitting, done, write, room)
        summary = placed.manifest[-1]
        if not summary.included:
            return placed, _Summarized(None, failed)
        return placed, how[summary.content]

    async def _contents(self, robot: Robot, items: list[budget.Item]) -> list[budget.Item]:
        """The left-out working-memory items' contents (an outline has none), from Redis; one
        that no longer holds what its outline said is not summarised."""
        unread = [i for i in items if i.source == "working_memory" and not i.content]
        found = await self.working_memory.contents(robot, [i.key or "" for i in unread])
        gone = set()
        for item, got in zip(unread, found, strict=True):
            if got is None or got[1] != item.tokens:
                gone.add(id(item))
            else:
                item.content = got[0]
        return [i for i in items if id(i) not in gone]


# The most candidate tokens an LLM is shown for a summary: the first left-out candidates up
# to this many (at least one).
LLM_INPUT_TOKENS = 8000
_ASK = (
    "The items below did not fit an AI agent's prompt (its conversation, working memory and "
    "recalled memories). Write one summary of them that keeps what the agent will most "
    "likely need, in at most {target} tokens. Answer with the summary only."
)


def _within(items: list[budget.Item], tokens: int) -> list[budget.Item]:
    taken: list[budget.Item] = []
    total = 0
    for i in items:
        total += i.tokens
        if taken and total > tokens:
            break
        taken.append(i)
    return taken


def _llm_messages(texts: list[str], target: int) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": _ASK.format(target=target)},
        {"role": "user", "content": "\n".join(f"- {t}" for t in texts)},
    ]


@dataclass
class _Summarized:
    """How an overflow's summary was written: "llm" or "extractive" (None when none fits), and
    why not by the LLM when one is configured and its summary was not used."""

    summarizer: str | None = None
    fallback: str | None = None


@dataclass
class _Candidates:
    """What a prompt is fitted from, read before any fitting."""

    hits: list[RecallHit] = field(default_factory=list)
    session_id: int | None = None
    messages: list[Turn] = field(default_factory=list)
    session_degraded: bool = False
    profile: list[budget.Item] = field(default_factory=list)
    pinned: list[budget.Item] = field(default_factory=list)
    outlined: list[Outline] | list[WMItem] | None = None


def _result(
    done: budget.Assembly, limit: int, *, degraded: bool, summarized: _Summarized | None = None
) -> PromptResult:
    # Validated in one call (pydantic-core) rather than a model per candidate: the
    # manifest lists every working-memory item.
    manifest: list[dict[str, Any]] = [
        {
            "source": i.source,
            "key": i.key,
            "seq": i.seq,
            "tokens": i.tokens,
            "included": i.included,
            "reason": i.reason,
        }
        for i in done.manifest
    ]
    if summarized is not None:  # the summary's entry, last
        manifest[-1]["covers"] = [
            {"source": c.source, "key": c.key, "seq": c.seq} for c in done.manifest[-1].covers
        ]
        manifest[-1]["summarizer"] = summarized.summarizer
        manifest[-1]["fallback"] = summarized.fallback
    return PromptResult.model_validate(
        {
            "messages": done.messages,
            "tokens": done.tokens,
            "budget": limit,
            "manifest": manifest,
            "degraded": degraded,
        }
    )
