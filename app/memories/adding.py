"""An add as a pipeline (MemoryService.add_many): **prepare** the batch without writing
anything (`AddPreparation`: the deployment's limits, search texts, vectors, tokens, dedupe
rules), register the robot (its own committed transaction), draft (audiences, the supersede
detector's proposals), **write** by the one strategy that fits the batch's transaction shape
(`PlainAdds` here; `DuplicateAdds`, app/memories/dedupe_adds.py; `SupersedingAdds`,
app/memories/supersede.py), each owning its transaction up to the durable commit, then
**acknowledge** (MemoryWrites.acknowledge: working memory, the answers)."""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Protocol

from app.clock import Clock
from app.config import Settings
from app.conversation import is_conversation
from app.db.session import DbSession
from app.db.vectors import StoredVectors, check_storable
from app.embeddings.timed import TimedEmbedder
from app.errors import Conflict
from app.memories import importance as importance_scorer
from app.memories.adds import GroupCommit
from app.memories.contexts import Written as Said
from app.memories.contexts import search_texts
from app.memories.dedupe import DedupeRule, rule_for
from app.memories.limits import check_batch_size, check_fields, check_validity
from app.memories.model import MemoryDraft
from app.memories.schemas import MemoryCreate
from app.memories.search_text import searched, with_speaker_tag
from app.memories.turn_repository import TurnRepository
from app.memories.writes import MemoryWrites, Written, key_taken, stored
from app.robots.service import Robot
from app.tokens import Tokenizer
from app.visibility import NAMESPACE, Audience


class AddStrategy(Protocol):
    async def write(self, robot: Robot, drafts: list[MemoryDraft]) -> Written:
        """Store the drafts in the transaction this strategy owns, up to its durable
        commit; what it wrote, for the acknowledgement."""
        ...


@dataclass
class Prepared:
    """A batch ready to draft: per body, its search text, vector (and the model that made
    it), tokens, importance, tags and dedupe rule."""

    bodies: list[MemoryCreate]
    texts: list[str | None]
    embeddings: list[list[float] | None]
    models: list[str | None]
    tokens: list[int]
    importances: list[float]
    tags: list[list[str]]
    rules: list[DedupeRule]

    def drafts(self, audiences: list[Audience]) -> list[MemoryDraft]:
        return [
            MemoryDraft(
                key=b.key or f"m-{uuid.uuid4().hex}",
                created_at=b.created_at,
                content=b.content,
                type=b.type,
                importance=self.importances[i],
                tags=self.tags[i],
                metadata=b.metadata,
                token_count=self.tokens[i],
                embedding=self.embeddings[i],
                embedding_model=self.models[i],
                search_text=self.texts[i],
                valid_from=b.valid_from,
                valid_to=b.valid_to,
                audience=audiences[i],
            )
            for i, b in enumerate(self.bodies)
        ]

    def rules_for(self, drafts: list[MemoryDraft], settings: Settings) -> list[DedupeRule]:
        """Each draft's rule: a private, group or pool memory is nobody's duplicate."""
        off = rule_for("off", None, settings)
        pairs = zip(self.rules, drafts, strict=True)
        return [r if d.audience == NAMESPACE else off for r, d in pairs]


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
        `batch` false the body's own); then each body's search text, vector and tokens."""
        await self._check(bodies, batch)
        template = self.settings.search_text
        texts = await search_texts(
            TurnRepository(self.session),
            template,
            self.namespace_id,
            self.clock(),
            [Said(b.content, b.created_at, b.metadata) for b in bodies],
        )
        conversation = [is_conversation(b.metadata) for b in bodies]
        if self.embedder.available and any(conversation):
            await self.session.rollback()  # the turns read: no transaction across the provider
        embeddings, models = await self._embed(bodies, texts)
        return Prepared(
            bodies,
            texts,
            embeddings,
            models,
            await self.tokenizer.count_many_async([b.content for b in bodies]),
            [self._importance(b) for b in bodies],
            [with_speaker_tag(b.tags, b.metadata, template) for b in bodies],
            self._rules(bodies, conversation),
        )

    def _rules(self, bodies: list[MemoryCreate], conversation: list[bool]) -> list[DedupeRule]:
        """Each body's dedupe rule. A conversation's turns are events: the same words said
        twice are two turns, so the deployment's default rule leaves them alone (an add's
        own `dedupe` still applies)."""
        return [
            rule_for(
                "off" if b.dedupe is None and said else b.dedupe, b.dedupe_threshold, self.settings
            )
            for b, said in zip(bodies, conversation, strict=True)
        ]

    async def _check(self, bodies: list[MemoryCreate], batch: bool) -> None:
        """The deployment's limits, each body's validity, client vectors and repeated keys."""
        check_batch_size(self.settings, len(bodies))
        for i, body in enumerate(bodies):
            check_fields(self.settings, body, i if batch else None)
            check_validity(body, self.clock(), i if batch else None)
        if any(b.embedding is not None for b in bodies):  # no connection otherwise
            storage = await self.vectors.storage(self.session)
            check_storable([b.embedding for b in bodies], storage)
        keys = Counter(b.key for b in bodies if b.key)
        dupes = sorted(k for k, n in keys.items() if n > 1)
        if dupes:
            raise Conflict(f"keys repeated within the batch: {', '.join(dupes)}", keys=dupes)

    async def _embed(
        self, bodies: list[MemoryCreate], texts: list[str | None]
    ) -> tuple[list[list[float] | None], list[str | None]]:
        """Each body's vector and its model: the client's, else the embedder's for its
        searched text (None: pending, for the embedding worker)."""
        todo = [i for i, b in enumerate(bodies) if b.embedding is None]
        vectors, model = await self.embedder.embed_or_defer(
            [searched(bodies[i].content, texts[i]) for i in todo]
        )
        embeddings: list[list[float] | None] = [b.embedding for b in bodies]
        models: list[str | None] = ["client" if b.embedding else None for b in bodies]
        for i, v in zip(todo, vectors, strict=True):
            embeddings[i], models[i] = v, model if v is not None else None
        return embeddings, models

    def _importance(self, body: MemoryCreate) -> float:
        """The body's importance; when it has none and the deployment scores adds, the
        heuristic scorer's (app/memories/importance.py)."""
        if "importance" in body.model_fields_set or self.settings.importance_scorer == "off":
            return body.importance
        return importance_scorer.score(body.content, body.type, body.metadata)


@dataclass
class PlainAdds:
    """New memories, group-committed with concurrent adds (app/memories/adds.py): the
    group's transaction, not the request's, stores and commits them."""

    session: DbSession
    writes: MemoryWrites
    adds: GroupCommit

    async def write(self, robot: Robot, drafts: list[MemoryDraft]) -> Written:
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
