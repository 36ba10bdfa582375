"""An add as a pipeline (MemoryService.add_many): **prepare** the batch without writing
anything (`AddPreparation`: the deployment's limits, search texts, vectors, tokens, dedupe
rules), register the robot (its own committed transaction), draft (audiences, the supersede
detector's proposals), **write** by the one strategy that fits the batch's transaction shape
(`PlainAdds` here; `DuplicateAdds`, app/memories/dedupe.py; `SupersedingAdds`,
app/memories/supersede.py), each owning its transaction up to the durable commit, then
**acknowledge** (MemoryWrites.acknowledge: working memory, the answers)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from app.clock import Clock
from app.config import Settings
from app.db.session import DbSession
from app.db.vectors import StoredVectors
from app.embeddings.timed import TimedEmbedder
from app.memories.adds import GroupCommit
from app.memories.importance import importance_of
from app.memories.limits import check_adds
from app.memories.model import MemoryDraft
from app.memories.schemas import MemoryCreate
from app.memories.search_text import Searched, Written, search_texts, vector_input
from app.memories.turn_repository import TurnRepository
from app.memories.writes import Committed, MemoryWrites, key_taken, stored
from app.robots.service import Robot
from app.tokens import Tokenizer
from app.visibility import Audience


@dataclass
class Prepared:
    """A batch ready to draft: per body, what recall searches for it (its search text and
    tags), its vector (and the model that made it), tokens and importance."""

    bodies: list[MemoryCreate]
    searched: list[Searched]
    embeddings: list[list[float] | None]
    models: list[str | None]
    tokens: list[int]
    importances: list[float]

    def drafts(self, audiences: list[Audience]) -> list[MemoryDraft]:
        return [
            MemoryDraft(
                key=b.key or f"m-{uuid.uuid4().hex}",
                created_at=b.created_at,
                content=b.content,
                type=b.type,
                importance=self.importances[i],
                tags=self.searched[i].tags,
                metadata=b.metadata,
                token_count=self.tokens[i],
                embedding=self.embeddings[i],
                embedding_model=self.models[i],
                search_text=self.searched[i].text,
                valid_from=b.valid_from,
                valid_to=b.valid_to,
                audience=audiences[i],
                confidence=b.confidence,
                source=b.source,
            )
            for i, b in enumerate(self.bodies)
        ]


@dataclass
class AddPreparation:
    """Everything an add works out before it writes: no row is written here."""

    session: DbSession
    namespace_id: int
    settings: Settings
    clock: Clock
    vectors: StoredVectors
    embedder: TimedEmbedder
    tokenizer: Tokenizer

    async def prepare(self, bodies: list[MemoryCreate], *, batch: bool) -> Prepared:
        """4xx before anything is written (an error names `memories[i]`'s field, or with
        `batch` false the body's own); then each body's search text and tags, its vector
        (the client's, else the embedder's for its searched text; None: pending, for the
        embedding worker), tokens and importance."""
        vectors = [b.embedding for b in bodies]
        client_vectors = any(v is not None for v in vectors)  # no connection otherwise
        storage = await self.vectors.storage(self.session) if client_vectors else None
        check_adds(self.settings, bodies, self.clock(), storage, batch=batch)
        said = await search_texts(
            TurnRepository(self.session),
            self.settings.search_text,
            self.namespace_id,
            now=self.clock(),
            items=[Written(b.content, b.created_at, b.metadata, b.tags) for b in bodies],
        )
        if self.embedder.available and any(s.conversation for s in said):
            await self.session.rollback()  # the turns read: no transaction across the provider
        todo = [i for i, v in enumerate(vectors) if v is None]
        embedded, model = await self.embedder.embed_or_defer(
            [
                vector_input(
                    bodies[i].content, bodies[i].metadata, said[i].text, self.settings.embed_text
                )
                for i in todo
            ]
        )
        models: list[str | None] = ["client" if v else None for v in vectors]
        for i, v in zip(todo, embedded, strict=True):
            vectors[i], models[i] = v, model if v is not None else None
        return Prepared(
            bodies,
            said,
            vectors,
            models,
            await self.tokenizer.count_many_async([b.content for b in bodies]),
            [importance_of(b, self.settings) for b in bodies],
        )


@dataclass
class PlainAdds:
    """New memories, group-committed with concurrent adds (app/memories/adds.py): the
    group's transaction, not the request's, stores and commits them."""

    session: DbSession
    writes: MemoryWrites
    adds: GroupCommit

    async def write(self, robot: Robot, drafts: list[MemoryDraft]) -> Committed:
        await self._end_request_transaction()
        new, taken = stored(robot, drafts, await self.adds.store(self.writes.group(robot, drafts)))
        if taken:
            raise key_taken(taken)
        return self.writes.written(robot, new)

    async def _end_request_transaction(self) -> None:
        """The request's transaction has only read since the robot's registration committed:
        it ends here, and its connection goes back to the pool while the group's transaction
        (which needs one from the same pool) runs."""
        await self.session.commit()
        await self.session.release()


@dataclass
class Registration:
    """The robot a write is for, and the version of its row when this request registered
    it (else None): committed before the write, undone (`RobotService.discard`) if the
    write is refused."""

    robot: Robot
    version: int | None

    def renew(self, again: Registration) -> None:
        """Registered again (the robot was removed meanwhile)."""
        self.robot, self.version = again.robot, again.version
