"""A subject's profile: slots, each the current memory about the subject with that attribute.

Reads take every current memory whose metadata names the subject and a string `attribute`
(those a PATCH wrote, marked `profile: true`, and ordinary ones: the supersede detector's
`subject_attribute` rule treats them as the same fact); a slot's value is the memory's
metadata `value` when a string, else its content. A PATCH writes through MemoryService: a
slot set adds a memory `profile:<subject>:<slot>@<n>` (type `fact`, not placed in working
memory) superseding the slot's current memory in the same add, so the supersede chain,
history and versions hold its past values; a slot set to the value it has is left alone; a
slot removed (null) has its memory forgotten (a soft delete: restorable, kept in history).
The sets are one add (all or nothing); each removal is its own forget, after them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.auth.caller import Caller
from app.clock import Clock
from app.db.session import DbSession
from app.memories.schemas import MemoryCreate
from app.memories.service import MemoryService
from app.names import check
from app.profiles.repository import ProfileRepository
from app.profiles.schemas import ProfilePatch, ProfileRead, ProfileSlot
from app.robots.service import RobotService
from app.tokens import Tokenizer
from app.visibility import Reader


def value_of(row: Any) -> str:
    value = row.metadata.get("value")
    return value if isinstance(value, str) else str(row.content)


def metadata(subject: str, slot: str, value: str) -> dict[str, Any]:
    return {"subject": subject, "attribute": slot, "profile": True, "value": value}


def line(slot: str, value: str) -> str:
    """A slot as a prompt's profile section shows it."""
    return f"{slot}: {value}"


class ProfileService:
    def __init__(
        self,
        *,
        session: DbSession,
        caller: Caller,
        robots: RobotService,
        memories: MemoryService,
        tokenizer: Tokenizer,
        clock: Clock,
    ) -> None:
        self.caller = caller
        self.robots = robots
        self.memories = memories
        self.tokenizer = tokenizer
        self.clock = clock
        self.repo = ProfileRepository(session)

    async def slots(self, robot_name: str, subject: str) -> list[Any]:
        """The subject's current slot memories that `robot_name` may read, in slot name order
        (`slot`, `key`, `since`, `content`, `metadata`)."""
        check("subject", subject)
        ns = self.caller.namespace_id
        return await self.repo.current(ns, subject, self.clock(), Reader(ns, robot_name))

    async def get(self, robot_name: str, subject: str) -> ProfileRead:
        await self.robots.require(robot_name)
        return await self._read(subject, await self.slots(robot_name, subject))

    async def _read(self, subject: str, rows: Sequence[Any]) -> ProfileRead:
        values = [value_of(r) for r in rows]
        counts = await self.tokenizer.count_many_async(
            [line(r.slot, v) for r, v in zip(rows, values, strict=True)]
        )
        return ProfileRead(
            subject=subject,
            slots={
                r.slot: ProfileSlot(value=v, key=r.key, since=r.since)
                for r, v in zip(rows, values, strict=True)
            },
            tokens=sum(counts),
        )

    async def patch(self, robot_name: str, subject: str, body: ProfilePatch) -> ProfileRead:
        current = {r.slot: r for r in await self.slots(robot_name, subject)}
        ns = self.caller.namespace_id
        adds = []
        for slot, value in sorted(body.slots.items()):
            old = current.get(slot)
            if value is None or (old is not None and value_of(old) == value):
                continue
            family = f"profile:{subject}:{slot}"
            adds.append(
                MemoryCreate(
                    key=f"{family}@{await self.repo.next_number(ns, family)}",
                    content=f"{subject} {line(slot, value)}",
                    type="fact",
                    metadata={
                        "subject": subject,
                        "attribute": slot,
                        "profile": True,
                        "value": value,
                    },
                    supersedes=[old.key] if old is not None else [],
                    supersede="off",
                    dedupe="off",
                )
            )
        if adds:
            await self.memories.add_many(robot_name, adds, place=False)
        for slot, value in sorted(body.slots.items()):
            if value is None and slot in current:
                await self.memories.forget(robot_name, current[slot].key, False, None)
        return await self._read(subject, await self.slots(robot_name, subject))
