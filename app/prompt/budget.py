"""Prompt assembly within a token budget: the counting rule and the allocation. Pure, no I/O.

Counting rule (OpenAI's cookbook, "How to count tokens with tiktoken", for cl100k_base /
o200k_base chat models): every message costs 3 tokens of framing plus the tiktoken counts of
its role and its content, and the reply is primed with 3 more:

    tokens = 3 + Σ (3 + count(role) + count(content))

Allocation, in this order, each item taken only if it fits what is left of the budget and of
its section's quota:

1. the input (the last user message) and the caller's system text: always; if they alone do
   not fit, the request is refused (422);
   the pinned notes (state keys marked `pinned`, app/state/: the robot's, then its group's,
   each one line `key: value`): always, never dropped, counted exactly with the system text
   they join; if they do not fit with the input, the request is refused (422):
   HTM_STATE_PINNED_MAX_TOKENS bounds them;
2. the profile asked for (`profile`): its slots in name order, each one line `slot: value`
   (its own count); one that does not fit is dropped and the next may still be taken;
3. the session's messages, newest first; the first that does not fit ends the section (a
   conversation keeps no gaps): it and every older one are dropped;
4. working memory, in its context strategy's order; one that does not fit is dropped and the
   next, smaller ones may still be taken;
5. recall hits, in rank order, the same way; a hit whose key is in working memory (taken or
   not) is dropped as a duplicate: its content is offered once, by working memory.

The pinned notes, the profile, working memory and recall hits go into the one system message,
after the caller's system text, in that order, each section under a header (the profile's names its
subject: `Profile of <subject>:`), all parts joined by a blank line. An item's cost while
allocating is its token count plus one for the separator (plus its header, and the system
message's framing, for the first one taken); BPE may merge across a separator, so the
assembled messages are counted again exactly and, while over the budget, the last item taken
(recall's, then working memory's, then the oldest session message, then the profile's last
slot) is dropped: a profile goes last, slot by slot, and only once nothing else is left; a
pinned note never goes.

With overflow "summarize" (the default "drop" is all of the above), what the session, working
memory and recall left out for the budget or a quota is summarised after finish() in what is
left: last in the system message under its own header, its room the budget less the exact
count with an empty summary (summary_room), counted again exactly with its text and written
again shorter or longer as that count says (place_summary). Nothing taken is dropped for it,
and when not one sentence fits it is left out (its manifest entry says so).

Nothing counted before is encoded again: an item's `tokens` is its content's count (stored at
write time), roles, headers, the input and the system text are counted once per call, and the
exact count of the joined system message comes from the parts' counts (`count_joined`,
app/tokens.py `Tokenizer.count_joined`, which encodes only where a join can merge).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

TOKENS_PER_MESSAGE = 3
REPLY_PRIMER = 3
SEPARATOR = "\n\n"
WORKING_MEMORY_HEADER = "Working memory:"
RECALL_HEADER = "Relevant memories:"
PROFILE_HEADER = "Profile of {subject}:"
PINNED_HEADER = "Pinned notes:"
SUMMARY_HEADER = "Summary of what did not fit:"

Source = Literal["input", "pinned", "profile", "session", "working_memory", "recall", "summary"]
Reason = Literal["budget", "duplicate", "section_quota"]
Count = Callable[[str], int]
# count(SEPARATOR.join(parts)) given each part's count.
CountJoined = Callable[[Sequence[str], Sequence[int]], int]


@dataclass(slots=True)
class Item:
    """A candidate: its text, and its own token count (`tokens`, the content's)."""

    source: Source
    content: str
    tokens: int
    key: str | None = None
    seq: int | None = None
    role: str = "user"
    included: bool = False
    reason: Reason | None = None
    covers: tuple[Item, ...] = ()  # a summary's: the candidates it summarises


@dataclass(frozen=True)
class Quotas:
    profile: int | None = None
    session: int | None = None
    working_memory: int | None = None
    recall: int | None = None


class InputTooLarge(Exception):
    def __init__(self, needed: int, budget: int) -> None:
        super().__init__(f"needs {needed} tokens, the budget is {budget}")
        self.needed = needed
        self.budget = budget


@dataclass
class Assembly:
    messages: list[dict[str, str]]
    tokens: int
    manifest: list[Item] = field(default_factory=list)


def message_tokens(count: Count, role: str, content: str) -> int:
    return TOKENS_PER_MESSAGE + count(role) + count(content)


def chat_tokens(count: Count, messages: list[dict[str, str]]) -> int:
    """The counting rule over chat messages ({role, content})."""
    return REPLY_PRIMER + sum(message_tokens(count, m["role"], m["content"]) for m in messages)


def _messages(
    system: str | None, input_text: str, items: list[Item], profile_header: str
) -> list[dict[str, str]]:
    parts = [system] if system else []
    for header, section in _sections(items, profile_header):
        parts += [header, *(i.content for i in section)]
    messages = [{"role": "system", "content": SEPARATOR.join(parts)}] if parts else []
    session = [i for i in items if i.included and i.source == "session"]
    messages += [{"role": i.role, "content": i.content} for i in reversed(session)]
    messages.append({"role": "user", "content": input_text})
    return messages


def _sections(items: list[Item], profile_header: str) -> list[tuple[str, list[Item]]]:
    """The system message's sections after the system text: header and items taken."""
    headers = (
        ("pinned", PINNED_HEADER),
        ("profile", profile_header),
        ("working_memory", WORKING_MEMORY_HEADER),
        ("recall", RECALL_HEADER),
        ("summary", SUMMARY_HEADER),
    )
    sections = [(h, [i for i in items if i.included and i.source == src]) for src, h in headers]
    return [(h, s) for h, s in sections if s]


def _default_joined(count: Count) -> CountJoined:
    return lambda parts, _counts: count(SEPARATOR.join(parts))


@dataclass
class Fitting:
    """What allocate() decided, before the exact count: the included working-memory items'
    contents may still be missing (the caller reads them, then finish())."""

    count: Count
    joined: CountJoined
    budget: int
    input_text: str
    input_tokens: int
    system: str | None
    session: list[Item]
    working_memory: list[Item]
    recall: list[Item]
    manifest: list[Item]
    profile: list[Item] = field(default_factory=list)
    profile_header: str = ""
    pinned: list[Item] = field(default_factory=list)


def allocate(
    count: Count,
    budget: int,
    input_text: str,
    *,
    system: str | None,
    session: list[Item],
    working_memory: list[Item],
    recall: list[Item],
    quotas: Quotas,
    count_joined: CountJoined | None = None,
    profile: Sequence[Item] = (),
    profile_header: str = "",
    pinned: Sequence[Item] = (),
) -> Fitting:
    """profile: its slots in name order; session: newest first; working_memory and recall:
    in their own order; `profile_header`: the profile's, with its subject; `pinned`: the
    notes always placed (InputTooLarge when they do not fit with the input). `count` is
    called with the input, the system text, roles and headers (it may remember them);
    `count_joined` (default: encoding the joined text) counts the system message. Decides
    by token counts alone: no content is read."""
    input_tokens = count(input_text)
    joined = count_joined or _default_joined(count)
    used = REPLY_PRIMER + TOKENS_PER_MESSAGE + count("user") + input_tokens
    empty_system = TOKENS_PER_MESSAGE + count("system")
    parts, counts = ([system], [count(system)]) if system else ([], [])
    if pinned:  # always taken: counted exactly, with the system text they join
        parts += [PINNED_HEADER, *(i.content for i in pinned)]
        counts += [count(PINNED_HEADER), *(i.tokens for i in pinned)]
        for item in pinned:
            item.included = True
    if parts:
        used += empty_system + joined(parts, counts)
    if used > budget:
        raise InputTooLarge(used, budget)
    taking = _Taking(count, budget, quotas, used=used, has_system=bool(parts))
    taking.section("profile", profile_header, profile)
    taking.session(session)
    taking.section("working_memory", WORKING_MEMORY_HEADER, working_memory)
    duplicates = {i.key for i in working_memory}
    taking.section("recall", RECALL_HEADER, recall, duplicates=duplicates)
    user = Item("input", input_text, input_tokens, included=True)
    return Fitting(
        count=count,
        joined=joined,
        budget=budget,
        input_text=input_text,
        input_tokens=input_tokens,
        system=system,
        session=session,
        working_memory=working_memory,
        recall=recall,
        manifest=[user, *pinned, *profile, *session, *working_memory, *recall],
        profile=list(profile),
        profile_header=profile_header,
        pinned=list(pinned),
    )


class _Taking:
    """One allocation's running totals: the tokens used, each section's spending against
    its quota, and whether the system message (its framing paid once) has begun."""

    def __init__(
        self, count: Count, budget: int, quotas: Quotas, *, used: int, has_system: bool
    ) -> None:
        self.count = count
        self.budget = budget
        self.quotas = quotas
        self.used = used
        self.has_system = has_system
        self.empty_system = TOKENS_PER_MESSAGE + count("system")
        self.spent = {"profile": 0, "session": 0, "working_memory": 0, "recall": 0}

    def section(
        self,
        source: Source,
        header: str,
        items: Sequence[Item],
        *,
        duplicates: set[str | None] | None = None,
    ) -> None:
        """A section of the system message: an item that does not fit is dropped and the
        next may still be taken; one whose key is in `duplicates` is dropped as such."""
        started = False
        header_cost = self.count(header) + 1
        q = getattr(self.quotas, source)
        for item in items:
            if duplicates is not None and item.key in duplicates:
                item.reason = "duplicate"
                continue
            cost = item.tokens + 1
            if not started:
                cost += header_cost
            if not self.has_system:
                cost += self.empty_system
            if q is not None and item.tokens > q - self.spent[source]:
                item.reason = "section_quota"
            elif self.used + cost > self.budget:
                item.reason = "budget"
            else:
                item.included, started, self.has_system = True, True, True
                self.used += cost
                self.spent[source] += item.tokens

    def session(self, items: Sequence[Item]) -> None:
        """The session's messages, newest first: the first that does not fit ends the
        section (a conversation keeps no gaps)."""
        q = self.quotas.session
        cut: Reason | None = None
        for item in items:
            cost = TOKENS_PER_MESSAGE + self.count(item.role) + item.tokens
            if cut is None and q is not None and item.tokens > q - self.spent["session"]:
                cut = "section_quota"
            elif cut is None and self.used + cost > self.budget:
                cut = "budget"
            if cut is not None:
                item.reason = cut
                continue
            item.included = True
            self.used += cost
            self.spent["session"] += item.tokens


def _exact(f: Fitting) -> int:
    """The counting rule over the messages _messages() would build, from the counts."""
    count = f.count
    tokens = REPLY_PRIMER + TOKENS_PER_MESSAGE + count("user") + f.input_tokens
    for i in f.session:
        if i.included:
            tokens += TOKENS_PER_MESSAGE + count(i.role) + i.tokens
    parts, counts = ([f.system], [count(f.system)]) if f.system else ([], [])
    for header, section in _sections(f.manifest, f.profile_header):
        parts += [header, *(i.content for i in section)]
        counts += [count(header), *(i.tokens for i in section)]
    if parts:
        tokens += TOKENS_PER_MESSAGE + count("system") + f.joined(parts, counts)
    return tokens


def finish(f: Fitting) -> Assembly:
    """The exact count of the messages allocate()'s choice builds, dropping the last item
    taken while over the budget (BPE may merge across a separator), and the messages."""
    # Taken last first: recall's, working memory's, the oldest session message, the profile's.
    order = [
        *reversed(f.recall), *reversed(f.working_memory), *reversed(f.session),
        *reversed(f.profile),
    ]  # fmt: skip
    tokens = _exact(f)
    while tokens > f.budget:
        last = next((i for i in order if i.included), None)
        if last is None:  # the input and the pinned notes alone, merged otherwise than estimated
            raise InputTooLarge(tokens, f.budget)
        last.included, last.reason = False, "budget"
        tokens = _exact(f)
    messages = _messages(f.system, f.input_text, f.manifest, f.profile_header)
    return Assembly(messages, tokens, f.manifest)


# --- overflow "summarize": what did not fit, summarised in the room left ---------------------

# What a summary is made of, given at most `target` tokens for its text: the text, its count
# and the candidates it covers; None when nothing fits.
Write = Callable[[int], tuple[str, int, Sequence[Item]] | None]
PLACE_TRIES = 6


def left_out(manifest: Sequence[Item]) -> list[Item]:
    """What a summary may cover: the session's, working memory's and recall's candidates left
    out for the budget or a section's quota, in manifest order (a duplicate is offered by
    working memory, a profile slot is not summarised)."""
    return [
        i
        for i in manifest
        if i.source in ("session", "working_memory", "recall")
        and i.reason in ("budget", "section_quota")
    ]


def summary_room(f: Fitting) -> int:
    """The tokens a summary's text may have after finish(): what is left of the budget once
    its section (a blank line, the header, a blank line, and the system message's framing
    when there is none yet) is counted exactly with an empty text. An estimate still: the
    text may merge with the blank line before it (place_summary counts again)."""
    probe = Item("summary", "", 0, included=True)
    f.manifest.append(probe)
    try:
        return f.budget - _exact(f)
    finally:
        f.manifest.pop()


def place_summary(f: Fitting, done: Assembly, write: Write, room: int) -> Assembly:
    """The summary placed last in the system message, under its header, if it fits: its
    manifest entry (source "summary") is appended, included with what it covers, or left out
    for the budget when nothing written fits. `write(room)` first; a text that makes the exact
    count exceed the budget (BPE merging across the blank lines otherwise than estimated) is
    written again for its own count less the excess, and one that merged into fewer tokens than
    its count (leaving more than its target allows) is written again for its count plus what
    is left, keeping the longest that fits (at most PLACE_TRIES writes). Nothing taken before
    is ever dropped for the summary."""
    summary = Item("summary", "", 0, reason="budget")
    f.manifest.append(summary)
    best: tuple[str, int, tuple[Item, ...], int] | None = None
    target, tries = room, 0
    while target > 0 and tries < PLACE_TRIES:
        tries += 1
        written = write(target)
        if written is None or (best is not None and written[0] == best[0]):
            break
        summary.content, summary.tokens, summary.included = written[0], written[1], True
        tokens = _exact(f)
        if tokens <= f.budget:
            best = (written[0], written[1], tuple(written[2]), tokens)
            longer = written[1] + f.budget - tokens  # more than `target` only after a merge
            if tokens == f.budget or longer <= target:
                break
            target = longer
        elif best is not None:  # longer does not fit: the best stays
            break
        else:
            target = min(target - 1, written[1] - (tokens - f.budget))
    if best is None:
        summary.content, summary.tokens, summary.included = "", 0, False
        return Assembly(done.messages, done.tokens, f.manifest)
    summary.content, summary.tokens, summary.covers, tokens = best
    summary.included, summary.reason = True, None
    messages = _messages(f.system, f.input_text, f.manifest, f.profile_header)
    return Assembly(messages, tokens, f.manifest)
