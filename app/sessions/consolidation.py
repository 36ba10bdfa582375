"""The end of a session: promote the messages worth keeping into long-term memory, then
delete the session. Run by DELETE (at once) and by the expiry worker (for sessions that
expired, and for consolidations a crash left unfinished).

Promotion goes through MemoryService.add_many, the add path of POST …/memories (group
commit, then working memory through the write protocol), so working memory and statistics
stay right. It is idempotent and crash-safe: each message becomes the memory keyed
`session:<session row id>:<seq>` (the row id is never reused, so a session started again
under the same name cannot collide with its predecessor), a key already taken counts as
promoted (a previous attempt committed it), and the session is deleted only after every
promotion committed. Keys of the form `session:<n>:<m>` are the sessions': a memory added
by hand under such a key stands in for the message.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from app.auth.caller import Caller
from app.clock import Clock
from app.config import Settings
from app.db.session import DbSession, Sessionmaker
from app.errors import Conflict, DomainError, ServiceUnavailable
from app.memories.schemas import MemoryCreate
from app.memories.service import MemoryService
from app.sessions.hot import SessionHotStore, session_key
from app.sessions.repository import SessionRepository
from app.working_memory.model import UNAVAILABLE

log = logging.getLogger(__name__)

PROMOTED_TYPE = "conversation"
# A claimed consolidation not finished after this long is taken over by another pass.
LEASE_S = 60.0
BATCH = 100


def promoted_metadata(
    metadata: dict[str, Any], session: str, role: str, seq: int
) -> dict[str, Any]:
    return {**metadata, "session": session, "role": role, "seq": seq}


class Consolidator:
    def __init__(
        self,
        *,
        session: DbSession,
        memories: MemoryService,
        hot: SessionHotStore,
        settings: Settings,
    ) -> None:
        self.session = session
        self.memories = memories
        self.hot = hot
        self.settings = settings
        self.repo = SessionRepository(session)

    async def run(
        self, namespace: str, robot: str, session_id: int, name: str
    ) -> tuple[list[str], int]:
        """Promote, then delete an ended session: (the promoted keys, the discarded count)."""
        rows = await self.repo.messages(session_id)
        threshold = self.settings.session_promote_accesses
        bodies = [
            MemoryCreate(
                key=f"session:{session_id}:{r.seq}",
                content=r.content,
                type=PROMOTED_TYPE,
                metadata=promoted_metadata(r.metadata, name, r.role, r.seq),
                created_at=r.created_at,
            )
            for r in rows
            if r.remember or r.access_count >= threshold
        ]
        await self.session.rollback()  # no transaction held while promoting
        size = self.settings.max_batch_size
        for i in range(0, len(bodies), size):
            await self._promote(robot, bodies[i : i + size])
        await self.repo.delete(session_id)
        await self.session.commit()
        try:
            await self.hot.delete(session_key(namespace, robot, session_id))
        except UNAVAILABLE as exc:  # the copy expires on its own
            log.warning("session %s's hot window not deleted: %s", session_id, exc)
        return [b.key or "" for b in bodies], len(rows) - len(bodies)

    async def _promote(self, robot: str, bodies: list[MemoryCreate]) -> None:
        """Store the memories whose keys are free; a taken key is a promotion done before."""
        todo = bodies
        while todo:
            try:
                await self.memories.add_many(robot, todo)
                return
            except Conflict as exc:
                taken = set(exc.extra.get("keys", []))
                if not taken & {b.key for b in todo}:
                    raise
                todo = [b for b in todo if b.key not in taken]
            except ServiceUnavailable:
                raise
            except DomainError as exc:
                # A limit lowered since the messages were appended: keep what still passes.
                if len(todo) == 1:
                    log.warning("session message %s not promoted: %s", todo[0].key, exc.detail)
                    return
                for body in todo:
                    await self._promote(robot, [body])
                return


class ConsolidationUnit(Protocol):
    """What the expiry worker uses of a unit of work (app/unit.py)."""

    @property
    def consolidator(self) -> Consolidator: ...


class SessionExpiryWorker:
    """Consolidates expired sessions, and ended ones left unfinished (app/workers.periodic)."""

    def __init__(
        self,
        *,
        sessionmaker: Sessionmaker,
        units: Callable[[Caller], AbstractAsyncContextManager[ConsolidationUnit]],
        clock: Clock,
    ) -> None:
        self.sessionmaker = sessionmaker
        self.units = units
        self.clock = clock

    async def run_once(self) -> int:
        """Consolidate the sessions due now (by the app's clock); returns how many."""
        async with self.sessionmaker() as session:
            due = await SessionRepository(session).claim_due(self.clock(), LEASE_S, BATCH)
            await session.commit()
        done = 0
        for row in due:
            caller = Caller(row.namespace_id, row.namespace, "admin")
            try:
                async with self.units(caller) as unit:
                    await unit.consolidator.run(row.namespace, row.robot, row.id, row.name)
                done += 1
            except ServiceUnavailable:
                raise  # the lease brings the rest back on a later pass
            except Exception:
                log.exception("consolidating session %s failed; retried later", row.id)
        return done
