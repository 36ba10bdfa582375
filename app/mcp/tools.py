"""The tool table: each tool's name, description, input model, the role it needs (as its
REST route's method does) and what it runs: a service of the call's unit of work (app/unit.py),
as the REST route calls it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel

from app.auth.schemas import Role
from app.mcp.schemas import (
    ContextInput,
    ForgetInput,
    HistoryInput,
    PromptInput,
    RecallInput,
    RememberInput,
    SessionAppendInput,
    SessionWindowInput,
    StatsInput,
    TagsInput,
    VersionsInput,
)
from app.memories.schemas import MemoryCreate
from app.prompt.schemas import PromptRequest
from app.recall.schemas import RecallRequest
from app.sessions.schemas import MessagesAppend
from app.unit import UnitOfWork

Run = Callable[[UnitOfWork, Any], Awaitable[Any]]
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    input: type[BaseModel]
    role: Role
    run: Run


def _without_robot(model: type[M], given: BaseModel) -> M:
    """The REST request model inside a tool input (validated already, as that model)."""
    fields = given.model_fields_set & set(model.model_fields)  # without robot, session
    values = {name: getattr(given, name) for name in model.model_fields}
    return model.model_construct(fields, **values)


async def _remember(u: UnitOfWork, i: RememberInput) -> Any:
    return await u.memories.add(i.robot, _without_robot(MemoryCreate, i))


async def _recall(u: UnitOfWork, i: RecallInput) -> Any:
    return await u.recall.recall(i.robot, _without_robot(RecallRequest, i))


async def _context(u: UnitOfWork, i: ContextInput) -> Any:
    return await u.working_memory.context_body(i.robot, i.strategy, i.max_tokens)


async def _forget(u: UnitOfWork, i: ForgetInput) -> Any:
    return await u.memories.forget(i.robot, i.key, i.hard, i.confirm)


async def _stats(u: UnitOfWork, i: StatsInput) -> Any:
    if i.robot is None:
        return await u.stats.namespace()
    return await u.stats.robot(i.robot, i.days)


async def _list_tags(u: UnitOfWork, i: TagsInput) -> Any:
    return await u.tags.tree(i.robot, i.timeframe)


async def _versions(u: UnitOfWork, i: VersionsInput) -> Any:
    return await u.reader.versions(i.key, False, i.limit, None)


async def _history(u: UnitOfWork, i: HistoryInput) -> Any:
    return await u.reader.chain(i.key, i.limit)


async def _session_append(u: UnitOfWork, i: SessionAppendInput) -> Any:
    return await u.sessions.append(i.robot, i.session, _without_robot(MessagesAppend, i))


async def _session_window(u: UnitOfWork, i: SessionWindowInput) -> Any:
    return await u.sessions.window(i.robot, i.session, i.n, i.max_tokens)


async def _prompt(u: UnitOfWork, i: PromptInput) -> Any:
    return await u.prompt.prompt(i.robot, _without_robot(PromptRequest, i))


TOOLS: dict[str, Tool] = {
    t.name: t
    for t in (
        Tool(
            "remember",
            "Store a memory for a robot (durably), then place it in the robot's working memory; "
            "`supersedes` names the memories it replaces.",
            RememberInput,
            "writer",
            _remember,
        ),
        Tool(
            "recall",
            "Search long-term memory (vector, fulltext or hybrid; filters by type, tags, "
            "importance, metadata and timeframe; current facts unless valid_at or "
            "include=superseded) and load the hits into working memory.",
            RecallInput,
            "writer",
            _recall,
        ),
        Tool(
            "context",
            "Prompt-ready text from a robot's working memory, within a token budget.",
            ContextInput,
            "reader",
            _context,
        ),
        Tool(
            "forget",
            "Forget a memory: soft delete (restorable) by default; hard=true with confirm=<key> "
            "deletes permanently.",
            ForgetInput,
            "writer",
            _forget,
        ),
        Tool(
            "stats",
            "A robot's statistics (working memory, memories, activity per day), or the "
            "namespace's without a robot.",
            StatsInput,
            "reader",
            _stats,
        ),
        Tool(
            "list_tags",
            "The namespace's tags as a tree of ':' segments with memory counts (optionally "
            "one robot's, within a timeframe).",
            TagsInput,
            "reader",
            _list_tags,
        ),
        Tool(
            "memory_versions",
            "A memory's versions, newest first, each with who wrote it and when.",
            VersionsInput,
            "reader",
            _versions,
        ),
        Tool(
            "memory_history",
            "A memory's supersede chain, oldest first: what it replaced (`supersedes` on "
            "remember) and what replaced it, each with its validity.",
            HistoryInput,
            "reader",
            _history,
        ),
        Tool(
            "session_append",
            "Append messages to a conversation session (durable; the session starts if needed).",
            SessionAppendInput,
            "writer",
            _session_append,
        ),
        Tool(
            "session_window",
            "A session's last messages, oldest first (the last n, or as many as fit max_tokens).",
            SessionWindowInput,
            "writer",
            _session_window,
        ),
        Tool(
            "prompt",
            "Chat messages for a model: working memory, recalled memories, the session and the "
            "input, within the context window minus reserves, with a manifest.",
            PromptInput,
            "writer",
            _prompt,
        ),
    )
}
