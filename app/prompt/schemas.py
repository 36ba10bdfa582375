from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from typing_extensions import TypedDict  # pydantic needs this one before Python 3.12

from app.common import NAME_PATTERN, Integer, Phrase, StrictModel, Text, integral
from app.recall.schemas import RecallFilters, Strategy
from app.sessions.schemas import Role
from app.working_memory.store import Strategy as ContextStrategy

_EXAMPLE: dict[str, Any] = {
    "input": "When does my flight to Lisbon leave?",
    "session": "chat-1",
    "context_window": 8192,
    "reserve": {"system": 0, "tools": 500, "output": 1000},
    "system": "You are a concise travel assistant.",
    "recall": {"limit": 5, "strategy": "hybrid"},
    "quotas": {"recall": 1000},
}

Overflow = Literal["drop", "summarize"]
Tokens = Annotated[int, Field(ge=0, le=10_000_000), BeforeValidator(integral)]
Quota = Annotated[int, Field(ge=0, le=10_000_000), BeforeValidator(integral)] | None


class Reserve(StrictModel):
    system: Tokens = Field(default=0, description="Tokens kept for a system prompt you add")
    tools: Tokens = Field(default=0, description="Tokens kept for tool definitions")
    output: Tokens = Field(default=0, description="Tokens kept for the model's reply")


class PromptRecall(StrictModel):
    strategy: Strategy = "hybrid"
    limit: Integer = Field(default=5, ge=1, le=1000, description="At most max_recall_limit")
    timeframe: Phrase | None = Field(default=None, description="As in recall")
    scope: Literal["self", "all"] = "all"
    filters: RecallFilters = Field(default_factory=RecallFilters)
    min_score: float | None = Field(
        default=None, ge=0, le=1, description="As in recall (default HTM_RECALL_MIN_SCORE)"
    )


class PromptProfile(StrictModel):
    subject: str = Field(
        pattern=NAME_PATTERN, description="Whose profile (GET …/profiles/{subject})"
    )


class Quotas(StrictModel):
    profile: Quota = Field(default=None, description="At most this many content tokens")
    session: Quota = Field(default=None, description="At most this many content tokens")
    working_memory: Quota = Field(default=None, description="At most this many content tokens")
    recall: Quota = Field(default=None, description="At most this many content tokens")


class PromptRequest(StrictModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [_EXAMPLE]})

    input: Text = Field(min_length=1, description="The user's current message (always included)")
    session: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9._-]{1,64}$",
        description="A session of the robot: its latest messages that fit (none if absent)",
    )
    context_window: Integer = Field(ge=1, le=10_000_000, description="The model's tokens")
    reserve: Reserve = Field(default_factory=Reserve)
    system: Text | None = Field(
        default=None, description="Your system text, first in the system message"
    )
    recall: PromptRecall | None = Field(
        default_factory=PromptRecall,
        description="Long-term memories recalled for the input (null: none); not loaded into "
        "working memory",
    )
    profile: PromptProfile | None = Field(
        default=None,
        description="A profile section: the subject's slots as `slot: value` lines, taken "
        "after the input and the system text, before the session; dropped last",
    )
    strategy: ContextStrategy = Field(
        default="balanced", description="Working memory's order (as context's strategy)"
    )
    quotas: Quotas = Field(default_factory=Quotas, description="Per-section token caps")
    overflow: Overflow = Field(
        default="drop",
        description="What did not fit (session, working memory, recall): `drop` it, or "
        "`summarize` it into the room left, last in the system message (the LLM's summary "
        "where one is configured, else extractive)",
    )


class ChatMessage(BaseModel):
    role: Role
    content: str


class Covered(TypedDict):
    source: Literal["session", "working_memory", "recall"]
    key: str | None
    seq: int | None


# A TypedDict, not a model: a manifest lists every candidate (a thousand working-memory
# items), and validating dicts is about 4x cheaper than making a model of each.
class ManifestEntry(TypedDict):
    source: Literal["input", "pinned", "profile", "session", "working_memory", "recall", "summary"]
    key: Annotated[
        str | None,
        Field(
            description="The memory's key (profile, working_memory, recall), the state key (pinned)"
        ),
    ]
    seq: Annotated[int | None, Field(description="The message's seq (session)")]
    tokens: Annotated[int, Field(description="The content's token count")]
    included: bool
    reason: Annotated[
        Literal["budget", "duplicate", "section_quota"] | None,
        Field(description="Why it was left out (null when included)"),
    ]
    covers: NotRequired[
        Annotated[
            list[Covered],
            Field(description="The summary's only: the left-out candidates it summarises"),
        ]
    ]
    summarizer: NotRequired[
        Annotated[
            Literal["llm", "extractive"] | None,
            Field(description="The summary's only: who wrote it (null when it did not fit)"),
        ]
    ]
    fallback: NotRequired[
        Annotated[
            str | None,
            Field(description="The summary's only: why not the configured LLM's, if not"),
        ]
    ]


class PromptResult(BaseModel):
    messages: list[ChatMessage] = Field(
        description="system (your text + pinned notes + profile + working memory + recalled "
        "+ a summary of what did not fit), the session, the input"
    )
    tokens: int = Field(
        description="3 + Σ (3 + tokens(role) + tokens(content)): OpenAI's chat counting rule"
    )
    budget: int = Field(description="context_window minus the reserves; tokens never exceed it")
    manifest: list[ManifestEntry] = Field(
        description="Every candidate in allocation order: the input, the pinned notes (always "
        "included), the profile's slots, the session newest first, working memory, recall, "
        "then (overflow summarize, when something was left out) the summary"
    )
    degraded: bool = Field(description="Working memory or the session read from PostgreSQL")
