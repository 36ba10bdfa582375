"""Restoring an earlier version of a memory: a replace like any PUT (the write protocol
withdraws the old content from every holder and re-embeds), whose fields are the version's."""

from __future__ import annotations

from app.auth.caller import Caller
from app.db.session import DbSession
from app.errors import NotFound
from app.memories.repository import MemoryRepository
from app.memories.schemas import MemoryAdded, MemoryFields
from app.memories.service import MemoryService
from app.memories.version_repository import VersionRepository
from app.visibility import Reader


class VersionService:
    def __init__(self, *, session: DbSession, caller: Caller, memories: MemoryService) -> None:
        self.caller = caller
        self.memories = memories
        self.repo = MemoryRepository(session)
        self.versions = VersionRepository(session)

    async def restore(self, robot_name: str, key: str, version: int) -> MemoryAdded:
        """Version `version` becomes current again, as a new version (restoring the current
        one changes nothing). The memory keeps its created_at; a soft-deleted memory is
        revived, as a PUT would."""
        ns = self.caller.namespace_id
        row = await self.repo.get(ns, key, reader=Reader(ns, robot_name))
        found = row and await self.versions.get(row.id, row.created_at, version)
        if not found:
            raise NotFound(f"memory {key!r} has no version {version}")
        # The version's fields were valid when written: stored as they are, unvalidated.
        fields = MemoryFields.model_construct(
            content=found.content,
            type=found.type,
            importance=found.importance,
            confidence=found.confidence,
            source=found.source,
            tags=list(found.tags),
            metadata=found.metadata,
            created_at=None,
            embedding=None,
            valid_from=found.valid_from,
            valid_to=found.valid_to,
        )
        return await self.memories.upsert(robot_name, key, fields, create=False)
