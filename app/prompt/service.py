"""One call for a prompt: the input, a session's latest messages, working memory and the
long-term hits recalled for the input, fitted into the model's budget (app/prompt/budget.py
says how) with a manifest of every candidate."""

from __future__ import annotations

import functools

from app.config import Settings
from app.errors import Unprocessable
from app.prompt import budget
from app.prompt.schemas import PromptRequest, PromptResult
from app.recall.schemas import RecallRequest
from app.recall.service import RecallService
from app.robots.service import RobotService
from app.sessions.service import SessionService, Turn
from app.tokens import Tokenizer
from app.working_memory.context import order
from app.working_memory.model import to_us
from app.working_memory.service import WorkingMemoryService


class PromptService:
    def __init__(
        self,
        *,
        robots: RobotService,
        working_memory: WorkingMemoryService,
        recall: RecallService,
        sessions: SessionService,
        tokenizer: Tokenizer,
        settings: Settings,
    ) -> None:
        self.robots = robots
        self.working_memory = working_memory
        self.recall_service = recall
        self.sessions = sessions
        self.tokenizer = tokenizer
        self.settings = settings

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
        # The input, the system text, roles and headers are encoded once per request; the
        # candidates' counts are the stored ones (budget.py).
        count = functools.cache(self.tokenizer.count)
        limit = self._budget(req)
        # Refused before anything is read or written when the input alone cannot fit.
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
        # Recall first: its own checks (limit, timeframe, options) refuse bad options
        # before anything is registered or read.
        hits: list[budget.Item] = []
        if req.recall is not None:
            r = req.recall
            try:
                result = await self.recall_service.recall(
                    robot_name,
                    RecallRequest(
                        query=req.input[: self.settings.max_query_chars],
                        strategy=r.strategy,
                        limit=r.limit,
                        timeframe=r.timeframe,
                        scope=r.scope,
                        filters=r.filters,
                        min_score=r.min_score,
                        load_into_working_memory=False,
                    ),
                )
            except Unprocessable as exc:  # name the fields as this request has them
                for e in exc.extra.get("errors", []):
                    e["field"] = f"recall.{e['field']}"
                raise
            hits = [budget.Item("recall", h.content, h.token_count, key=h.key) for h in result.hits]

        robot = await self.robots.ensure(robot_name)

        session_id: int | None = None
        messages: list[Turn] = []
        session_degraded = False
        if req.session is not None:
            session_id, messages, session_degraded = await self.sessions.latest(
                robot_name, req.session, limit - base
            )
        session = [
            budget.Item("session", m.content, m.tokens, seq=m.seq, role=m.role)
            for m in reversed(messages)
        ]

        items, _, wm_degraded = await self.working_memory.snapshot(robot)
        now_ms = to_us(self.working_memory.protocol.clock()) // 1000
        working = [
            budget.Item("working_memory", i.content, i.tokens, key=i.key)
            for _, i in order(items, req.strategy, now_ms)
        ]

        q = req.quotas
        done = budget.assemble(
            count,
            limit,
            req.input,
            req.system,
            session,
            working,
            hits,
            budget.Quotas(q.session, q.working_memory, q.recall),
            self.tokenizer.count_joined,
        )
        if session_id is not None:
            await self.sessions.count_accesses(
                session_id, [i.seq for i in session if i.included and i.seq is not None]
            )
        # Validated in one call (pydantic-core) rather than a model per candidate: the
        # manifest lists every working-memory item.
        return PromptResult.model_validate(
            {
                "messages": done.messages,
                "tokens": done.tokens,
                "budget": limit,
                "manifest": [
                    {
                        "source": i.source,
                        "key": i.key,
                        "seq": i.seq,
                        "tokens": i.tokens,
                        "included": i.included,
                        "reason": i.reason,
                    }
                    for i in done.manifest
                ],
                "degraded": wm_degraded or session_degraded,
            }
        )
