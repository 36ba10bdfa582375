"""The extractive summary of evicted memories, a pure function (tests/summaries).

Each evicted memory is split into sentences; sentences are taken by their memory's
importance (highest first), then the memory's eviction order, then their order in it, while
the summary's token count stays within `target_tokens`; the chosen sentences are then written
in eviction order, each memory's sentences in their own order, so the summary reads like the
memories it replaces. A sentence that does not fit is skipped and shorter ones may follow.

`digest` is the same greedy for a prompt's overflow (app/prompt): every text's first sentence
before any text's second, so a summary of many texts covers as many of them as it can.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

HEADER = "Summary of {n} memories dropped from working memory: "
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")


@dataclass(frozen=True)
class Evicted:
    key: str
    content: str
    importance: float


@dataclass(frozen=True)
class Summary:
    content: str
    sources: list[str]  # the keys of the memories it summarises, in eviction order
    importance: float  # the highest of theirs: the trace outlives what it replaces


DROPPED = "An AI agent's working memory dropped the memories below"


def llm_prompt(
    evicted: Sequence[Evicted], target_tokens: int, what: str = DROPPED
) -> list[dict[str, str]]:
    """What the LLM is asked (HTM_LLM_PROVIDER): the evicted memories, most important first."""
    listed = "\n".join(
        f"- ({m.importance:g}) {m.content}" for m in sorted(evicted, key=lambda m: -m.importance)
    )
    return [
        {
            "role": "system",
            "content": f"{what} (importance in "
            "parentheses). Write one summary of them that keeps what the agent will most likely "
            f"need, most important first, in at most {target_tokens} tokens. Answer with the "
            "summary only.",
        },
        {"role": "user", "content": listed},
    ]


def fitted(
    evicted: Sequence[Evicted],
    text: str,
    target_tokens: int,
    *,
    count: Callable[[str], int],
    header: str = HEADER,
) -> Summary | None:
    """The LLM's summary under the header, cut to whole sentences within the target (None when
    not even one fits)."""
    header = header.format(n=len(evicted))
    kept: list[str] = []
    for s in sentences(text):
        if count(header + " ".join([*kept, s])) > target_tokens:
            break
        kept.append(s)
    if not kept:
        return None
    return Summary(
        content=header + " ".join(kept),
        sources=[m.key for m in evicted],
        importance=max(m.importance for m in evicted),
    )


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.findall(text) if s.strip()]


def summarize(
    evicted: Sequence[Evicted],
    target_tokens: int,
    count: Callable[[str], int],
    header: str = HEADER,
) -> Summary | None:
    """None when nothing was evicted or not even one sentence fits. `header`: what the summary
    starts with, `{n}` the number of memories."""
    if not evicted:
        return None
    header = header.format(n=len(evicted))
    candidates = [
        (-m.importance, i, j, s)
        for i, m in enumerate(evicted)
        for j, s in enumerate(sentences(m.content))
    ]
    chosen = _greedy([(i, j, s) for _, i, j, s in sorted(candidates)], target_tokens, count, header)
    if not chosen:
        return None
    return Summary(
        content=header + " ".join(s for _, _, s in chosen),
        sources=[m.key for m in evicted],
        importance=max(m.importance for m in evicted),
    )


def digest(
    texts: Sequence[str], target_tokens: int, count: Callable[[str], int]
) -> tuple[str, list[int]] | None:
    """A digest of `texts` (a prompt's overflow, app/prompt) within `target_tokens`: the first
    sentence of every text first, in the texts' order, then the second ones, and so on, each
    taken while the digest's count stays within the target; written in the texts' order, each
    text's sentences in their own order. Returns the digest and the indexes of the texts it
    draws on (ascending), or None when not even one sentence fits."""
    candidates = sorted(
        (j, i, s) for i, text in enumerate(texts) for j, s in enumerate(sentences(text))
    )
    chosen = _greedy([(i, j, s) for j, i, s in candidates], target_tokens, count, "")
    if not chosen:
        return None
    return " ".join(s for _, _, s in chosen), sorted({i for i, _, _ in chosen})


# A sentence whose own count (with the space before it) would take the summary this far past
# its target is not tried: a join merges a token or two at most, and counting each trial
# whole is what a long list of candidates would otherwise cost (1,000 texts: seconds).
_SLACK = 2


def _greedy(
    candidates: Sequence[tuple[int, int, str]],
    target_tokens: int,
    count: Callable[[str], int],
    header: str,
) -> list[tuple[int, int, str]]:
    """(text, sentence, sentence text) taken in the order given while the header and the
    chosen sentences, written in (text, sentence) order, count within the target."""
    chosen: list[tuple[int, int, str]] = []
    used = count(header) if header else 0
    for c in candidates:
        if used + count(" " + c[2]) > target_tokens + _SLACK:
            continue
        trial = sorted([*chosen, c])
        tokens = count(header + " ".join(t[2] for t in trial))
        if tokens <= target_tokens:
            chosen, used = trial, tokens
    return chosen
