"""A namespace's maintenance runs ("sleep time"): the schedule, and a run's steps in order,
each recorded as it finishes (so a run cut off is finished by the next, which resumes at the
first step not done), each idempotent (so a step cut off half way and run again writes
nothing twice): dedupe merges (a merged memory is gone from the next clustering), retention
archives (what is archived is no candidate), summaries are keyed by what they cover (an add
of a key already written is a 409, skipped), supersede proposals only read.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, time, timedelta
from typing import Any

from app.auth.caller import Caller
from app.clock import Clock
from app.config import Settings
from app.db.session import DbSession
from app.errors import Conflict, ServiceUnavailable
from app.llm.base import ChatModel, LlmError
from app.maintenance.repository import MaintenanceRepository
from app.maintenance.schemas import (
    STEPS,
    MaintenanceRunRead,
    MaintenanceRuns,
    MaintenanceSchedule,
)
from app.memories.merge import Merger
from app.memories.model import MemoryDraft
from app.memories.repository import MemoryRepository
from app.memories.schemas import MemoryCreate
from app.memories.service import MemoryService
from app.memories.supersede import Detector
from app.retention.service import RetentionService
from app.summaries.extract import Evicted, Summary, fitted, llm_prompt, summarize
from app.tokens import Tokenizer

ACTOR = "htm-maintenance"  # the robot merges are made by
PERIOD = timedelta(days=1)  # a robot's period: the UTC day before the run started
PERIOD_LEAST = 5  # a robot's period is summarised from this many memories on
PERIOD_MOST = 500
SESSION_LEAST = 40  # a session is long from this many messages on
SESSION_MOST = 2000
CHUNK = 20  # memories (messages) per first-level summary


def _read(row: Any) -> MaintenanceRunRead:
    return MaintenanceRunRead(
        id=row.id,
        trigger=row.trigger,
        status=row.status,
        started_at=row.started_at,
        finished_at=row.finished_at,
        steps={s: row.steps[s] for s in STEPS if s in row.steps},
        error=row.error,
    )


class MaintenanceService:
    def __init__(
        self,
        *,
        session: DbSession,
        caller: Caller,
        memories: MemoryService,
        merger: Merger,
        retention: RetentionService,
        detector: Callable[[datetime], Detector],
        tokenizer: Tokenizer,
        settings: Settings,
        clock: Clock,
        llm: ChatModel | None,
    ) -> None:
        self.session = session
        self.caller = caller
        self.memories = memories
        self.merger = merger
        self.retention = retention
        self.detector = detector
        self.tokenizer = tokenizer
        self.settings = settings
        self.clock = clock
        self.llm = llm
        self.repo = MaintenanceRepository(session)

    async def schedule(self) -> MaintenanceSchedule:
        found = await self.repo.schedule(self.caller.namespace_id)
        return found if found is not None else MaintenanceSchedule()

    async def set_schedule(self, body: MaintenanceSchedule) -> MaintenanceSchedule:
        await self.repo.set_schedule(self.caller.namespace_id, body, self.clock())
        await self.session.commit()
        return body

    async def runs(self, limit: int) -> MaintenanceRuns:
        rows = await self.repo.runs(self.caller.namespace_id, limit)
        return MaintenanceRuns(runs=[_read(r) for r in rows])

    async def run(self, trigger: str = "request") -> MaintenanceRunRead:
        """Finish the namespace's unfinished run, or start one; then each step of the
        schedule not done yet. A step that fails for good ends the run `failed`; an outage
        (or a cut) leaves it `running`, for the next run to finish."""
        schedule = await self.schedule()
        row = await self.repo.unfinished(self.caller.namespace_id)
        if row is None:
            row = await self.repo.start(self.caller.namespace_id, trigger, self.clock())
            await self.session.commit()
        steps: dict[str, Callable[[datetime], Awaitable[dict[str, Any]]]] = {
            "dedupe": lambda _: self._dedupe(schedule.dedupe),
            "retention": lambda _: self._retention(),
            "summaries": self._summaries,
            "supersede": self._supersede,
        }
        error = None
        for step in schedule.steps:
            if step in row.steps:
                continue
            try:
                outcome = await steps[step](row.started_at)
            except LlmError as exc:  # the model is down: the run stays running, to resume
                raise ServiceUnavailable(
                    f"maintenance step {step} waits for the LLM: {exc}", dependency="llm"
                ) from exc
            except (ServiceUnavailable, Conflict):
                raise  # transient: the run stays running
            except Exception as exc:  # a bug or a refusal: recorded, the run ends failed
                error = f"{step}: {type(exc).__name__}: {exc}"[:1000]
                await self.session.rollback()
                break
            await self.repo.record(row.id, step, outcome)
            await self.session.commit()
        done = await self.repo.finish(row.id, self.clock(), error)
        await self.session.commit()
        return _read(done)

    # --- the steps ------------------------------------------------------------------------

    async def _dedupe(self, mode: str) -> dict[str, Any]:
        clusters = await self.merger.clusters(mode, self.settings.dedupe_threshold)
        for cluster in clusters:
            await self.merger.merge(ACTOR, cluster)
        merged = sorted(k for c in clusters for k in c.merged)
        return {"clusters": len(clusters), "merged": merged}

    async def _retention(self) -> dict[str, Any]:
        run = await self.retention.run(dry_run=False)
        return {
            "archived": run.archived,
            "policies": [{"rule": o.policy.rule, "keys": o.keys} for o in run.policies],
        }

    async def _summaries(self, started: datetime) -> dict[str, Any]:
        """Each robot's previous UTC day, and each long live session, summarised in two
        levels (chunks of CHUNK, then the chunks' summaries), into one `summary` memory keyed
        by what it covers."""
        ns = self.caller.namespace_id
        end = datetime.combine(started.date(), time(), tzinfo=started.tzinfo)
        start = end - PERIOD
        by_robot: dict[str, list[Evicted]] = defaultdict(list)
        for r in await self.repo.period(ns, start, end, least=PERIOD_LEAST, most=PERIOD_MOST):
            by_robot[r.robot].append(Evicted(r.key, r.content, r.importance))
        sessions: dict[int, tuple[str, str, int, list[Evicted]]] = {}
        for r in await self.repo.long_sessions(ns, SESSION_LEAST, SESSION_MOST):
            _, name, _, items = sessions.setdefault(
                r.session_id, (r.robot, r.session, r.last_seq, [])
            )
            items.append(Evicted(f"{name}#{r.seq}", f"{r.role}: {r.content}", 1.0))
        written: list[str] = []
        skipped: list[str] = []
        todo = [
            (robot, f"reflection:{robot}:{start.date().isoformat()}", items, "memories",
             {"reflection": "period", "period": [start.isoformat(), end.isoformat()]})
            for robot, items in sorted(by_robot.items())
        ] + [
            (robot, f"reflection:session:{sid}:{last}", items, "messages",
             {"reflection": "session", "session": name, "through_seq": last})
            for sid, (robot, name, last, items) in sorted(sessions.items())
        ]  # fmt: skip
        for robot, key, items, unit, metadata in todo:
            summary = await self._hierarchical(items, unit)
            if summary is None:
                continue
            body = MemoryCreate(
                key=key,
                content=summary.content,
                type="summary",
                importance=summary.importance,
                metadata={**metadata, "summarised": len(items), "chunks": -(-len(items) // CHUNK)},
                dedupe="off",
                supersede="off",
            )
            try:
                await self.memories.add_many(robot, [body], place=False)
                written.append(key)
            except Conflict:  # written by a run cut off after it: nothing twice
                await self.session.rollback()
                skipped.append(key)
        return {"written": written, "already": skipped}

    async def _hierarchical(self, items: Sequence[Evicted], unit: str) -> Summary | None:
        parts = [
            s
            for i in range(0, len(items), CHUNK)
            if (s := await self._summary(items[i : i + CHUNK], f"Summary of {{n}} {unit}: "))
            is not None
        ]
        if len(parts) <= 1:
            return parts[0] if parts else None
        chunks = [Evicted(f"part-{i}", p.content, p.importance) for i, p in enumerate(parts)]
        top = await self._summary(chunks, f"Summary of {len(items)} {unit} in {{n}} parts: ")
        if top is None:
            return None
        return Summary(top.content, [k for p in parts for k in p.sources], top.importance)

    async def _summary(self, items: Sequence[Evicted], header: str) -> Summary | None:
        target, count = self.settings.summary_target_tokens, self.tokenizer.count
        if self.llm is None:
            return summarize(items, target, count, header)
        what = "An AI agent's memories below are to be kept as one summary"
        reply = await self.llm.complete(llm_prompt(items, target, what))
        return fitted(items, reply, target, count=count, header=header)

    async def _supersede(self, started: datetime) -> dict[str, Any]:
        """The detector's deterministic rules on the previous day's labelled memories: what
        each may supersede among the older current ones. Recorded, not applied: an agent
        confirms by adding with `supersedes`."""
        ns = self.caller.namespace_id
        end = datetime.combine(started.date(), time(), tzinfo=started.tzinfo)
        detector = self.detector(self.clock())
        detector.threshold = None  # the deterministic rules only
        memories = MemoryRepository(self.session)
        proposals = []
        for r in await self.repo.labelled(ns, end - PERIOD, end):
            draft = MemoryDraft(r.key, None, "", r.type, 0.0, [], r.metadata, 0, None, None)
            me = await memories.get(ns, r.key)
            for p, _ in await detector.find(draft):
                older = await memories.get(ns, p.key)
                if me is not None and older is not None and older.created_at < me.created_at:
                    proposals.append({"key": r.key, "supersedes": p.key, "rule": p.rule})
        return {"proposals": proposals}
