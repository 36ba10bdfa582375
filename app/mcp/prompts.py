"""The MCP prompts (prompts/list, prompts/get): the common flows as messages a client hands
its model. Each runs the same service as its tool, through the call's unit of work, with the
tool's role: `recall_then_answer` recalls (as `recall`, loading the hits into working memory)
and asks to answer from what was found; `remember_this_session` reads a session's last
messages (as `session_window`) and asks to `remember` what is worth keeping."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from app.auth.schemas import Role
from app.mcp.schemas import RecallIn, WindowIn
from app.mcp.tools import hit_lines, hits_of, recall_request
from app.unit import UnitOfWork

Run = Callable[[UnitOfWork, dict[str, str], str], Awaitable[str]]


@dataclass(frozen=True)
class Argument:
    name: str
    description: str
    required: bool = False


@dataclass(frozen=True)
class Prompt:
    name: str
    title: str
    description: str
    arguments: tuple[Argument, ...]
    role: Role
    run: Run  # the user message's text


_ROBOT = Argument("robot", "default: the connection's")


async def _recall_then_answer(u: UnitOfWork, args: dict[str, str], robot: str) -> str:
    asked = RecallIn.model_validate({"query": args.get("question", "")})
    hits, _ = hits_of(await u.recall.recall(robot, recall_request(asked)))
    found = hit_lines(hits.hits) or "(no memories found)"
    return (
        "Answer the question from these memories (a date line, then `key: content`, best "
        "first). Say so if they do not answer it; if the answer changes a fact, remember the "
        f"new one with supersedes.\n\n{found}\n\nQuestion: {asked.query}"
    )


async def _remember_this_session(u: UnitOfWork, args: dict[str, str], robot: str) -> str:
    asked = WindowIn.model_validate({"session": args.get("session", "")})
    window = await u.sessions.window(robot, asked.session, asked.n, asked.max_tokens)
    lines = "\n".join(f"{m.role}: {m.content}" for m in window.messages) or "(no messages)"
    return (
        "Read this conversation and call remember once for each fact, preference or decision "
        "worth keeping beyond it: one sentence each, with its speaker; supersedes when it "
        "changes a fact you recall. Skip small talk and what is already known.\n\n"
        f"Conversation {asked.session}:\n{lines}"
    )


PROMPTS: dict[str, Prompt] = {
    p.name: p
    for p in (
        Prompt(
            "recall_then_answer",
            "Recall, then answer",
            "Recall what the memories say about a question, then answer from them.",
            (Argument("question", "what to answer", required=True), _ROBOT),
            "writer",
            _recall_then_answer,
        ),
        Prompt(
            "remember_this_session",
            "Remember this session",
            "Read a conversation session and remember what is worth keeping.",
            (Argument("session", "the session's name", required=True), _ROBOT),
            "writer",
            _remember_this_session,
        ),
    )
}
