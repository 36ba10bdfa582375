"""A namespace's retention policies and their runs. A run archives, never deletes: each
memory a policy names goes through `MemoryService.archive` (a soft delete by the write
protocol: holders let it go, restorable, exported)."""

from __future__ import annotations

from app.auth.caller import Caller
from app.clock import Clock
from app.db.session import DbSession
from app.memories.service import MemoryService
from app.pools.service import PoolService
from app.retention.repository import RetentionRepository
from app.retention.schemas import PolicyOutcome, RetentionPolicies, RetentionRun

PER_POLICY = 1000  # memories a policy archives in one run; the next run takes the rest


class RetentionService:
    def __init__(
        self,
        *,
        session: DbSession,
        caller: Caller,
        memories: MemoryService,
        pools: PoolService,
        clock: Clock,
    ) -> None:
        self.pools = pools
        self.session = session
        self.caller = caller
        self.memories = memories
        self.clock = clock
        self.repo = RetentionRepository(session)

    async def policies(self) -> RetentionPolicies:
        return RetentionPolicies.model_construct(
            policies=await self.repo.policies(self.caller.namespace_id)
        )

    async def set_policies(self, body: RetentionPolicies) -> RetentionPolicies:
        """The namespace's policies, all of them (an empty list: none)."""
        await self.repo.replace(self.caller.namespace_id, body.policies)
        await self.session.commit()
        return body

    async def run(self, dry_run: bool, limit: int = PER_POLICY) -> RetentionRun:
        """Each policy in order, as of the service clock's now: what it archives (or would,
        `dry_run`). A memory is archived by the first policy that names it."""
        # Task pools past their expiry are archived first (nobody reads them since).
        expired = [] if dry_run else await self.pools.expire()
        now = self.clock()
        ns = self.caller.namespace_id
        outcomes: list[PolicyOutcome] = []
        taken: set[str] = set()
        for policy in await self.repo.policies(ns):
            found = await self.repo.candidates(ns, policy, now, limit + len(taken))
            keys: list[str] = []
            for row in found:
                if row.key in taken or len(keys) == limit:
                    continue
                if dry_run or await self.memories.archive(row.key, row.version, policy.rule):
                    keys.append(row.key)
                    taken.add(row.key)
            outcomes.append(PolicyOutcome(policy=policy, keys=keys))
        archived = 0 if dry_run else len(taken)
        return RetentionRun(
            dry_run=dry_run, archived=archived, policies=outcomes, pools_expired=expired
        )
