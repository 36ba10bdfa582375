"""The tool table: each tool's name, description, input model, the role it needs (as its
REST route's method does) and what it runs, built the way the routers build their services."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel

from app.auth.schemas import Role
from app.deps import RequestScope
from app.mcp.schemas import (
    ContextInput,
    ForgetInput,
    RecallInput,
    RememberInput,
    StatsInput,
)
from app.memories.router import memory_service
from app.memories.schemas import MemoryCreate
from app.recall.router import recall_service
from app.recall.schemas import RecallRequest
from app.stats.router import stats_service
from app.working_memory.router import working_memory_service

Run = Callable[[RequestScope, Any], Awaitable[Any]]
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
    fields = given.model_fields_set - {"robot"}
    values = {name: getattr(given, name) for name in model.model_fields}
    return model.model_construct(fields, **values)


async def _remember(r: RequestScope, i: RememberInput) -> Any:
    service = await memory_service(r)
    return await service.add(i.robot, _without_robot(MemoryCreate, i))


async def _recall(r: RequestScope, i: RecallInput) -> Any:
    service = await recall_service(r)
    return await service.recall(i.robot, _without_robot(RecallRequest, i))


async def _context(r: RequestScope, i: ContextInput) -> Any:
    service = await working_memory_service(r)
    return await service.context_body(i.robot, i.strategy, i.max_tokens)


async def _forget(r: RequestScope, i: ForgetInput) -> Any:
    service = await memory_service(r)
    return await service.forget(i.robot, i.key, i.hard, i.confirm)


async def _stats(r: RequestScope, i: StatsInput) -> Any:
    service = await stats_service(r)
    if i.robot is None:
        return await service.namespace()
    return await service.robot(i.robot, i.days)


TOOLS: dict[str, Tool] = {
    t.name: t
    for t in (
        Tool(
            "remember",
            "Store a memory for a robot (durably), then place it in the robot's working memory.",
            RememberInput,
            "writer",
            _remember,
        ),
        Tool(
            "recall",
            "Search long-term memory (vector, fulltext or hybrid; filters by type, tags, "
            "importance, metadata and timeframe) and load the hits into working memory.",
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
    )
}
