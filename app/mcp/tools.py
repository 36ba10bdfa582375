"""The tool table: each tool's name, title, description, input and output models, the role
it needs (as its REST route's method does), its hints, and what it runs: a service of the
call's unit of work (app/unit.py), as the REST route calls it. Each answers a compact text
(memory text with key and date, not the REST JSON) and its structured copy."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import orjson
from pydantic import BaseModel

from app.auth.schemas import Role
from app.errors import Conflict
from app.facts.schemas import FactsExtract
from app.groups.schemas import GroupRead, GroupUpdate
from app.mcp.entities import about_tool, entities_tool
from app.mcp.links import link_tool, related_tool
from app.mcp.pools import grant_pool, list_pools, put_pool
from app.mcp.schemas import (
    About,
    AppendIn,
    Body,
    Chain,
    Context,
    ContextIn,
    Entities,
    EntitiesIn,
    EntityIn,
    Fact,
    Facts,
    FactsIn,
    FailoverIn,
    Feedback,
    FeedbackIn,
    ForgetIn,
    Forgot,
    Group,
    GroupCreateIn,
    GroupIn,
    GroupMemberIn,
    GroupRecallIn,
    Hit,
    Hits,
    ImportanceIn,
    In,
    KeyIn,
    Linked,
    LinkIn,
    ListIn,
    Messages,
    Out,
    Pool,
    PoolGrantIn,
    PoolPutIn,
    Pools,
    PoolsIn,
    Profile,
    ProfileIn,
    ProfileSetIn,
    PromptIn,
    RecallIn,
    RelatedIn,
    RelatedOut,
    Remembered,
    RememberIn,
    Restored,
    Snapshot,
    SnapshotIdIn,
    SnapshotIn,
    Snapshots,
    State,
    StateIn,
    StateSetIn,
    StatsIn,
    TagsIn,
    UpdateIn,
    Versions,
    WindowIn,
    Written,
    when,
)
from app.memories.model import ListFilters
from app.memories.schemas import ImportanceChange, MemoryCreate, MemoryFeedback, MemoryUpsert
from app.profiles.schemas import ProfilePatch, ProfileRead
from app.prompt.schemas import PromptRequest
from app.recall.schemas import RecallFilters, RecallRequest
from app.sessions.schemas import MessagesAppend
from app.snapshots.schemas import SnapshotCreate
from app.state.schemas import StatePut
from app.state.service import compact
from app.unit import UnitOfWork
from app.working_memory.robots import group_row_name

Answer = tuple[Out, str]
Run = Callable[[UnitOfWork, Any, str], Awaitable[Answer]]


@dataclass(frozen=True)
class Tool:
    name: str
    title: str
    description: str
    input: type[BaseModel]
    output: type[Out]
    role: Role
    run: Run
    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False
    needs_robot: bool = True  # the group tools name their robots themselves
    needs_llm: bool = False  # listed only when an LLM is configured
    group: str = "memories"  # what HTM_MCP_TOOLS may name instead of each tool


def _json(x: Any) -> str:
    return orjson.dumps(x).decode()


async def _remember(u: UnitOfWork, i: RememberIn, robot: str) -> Answer:
    body = MemoryCreate.model_validate(i.model_dump(exclude={"robot"}, exclude_unset=True))
    a = await u.memories.add(robot, body)
    out = Remembered(
        key=a.duplicate_of or a.key,
        created=a.created,
        duplicate_of=a.duplicate_of,
        superseded=a.superseded,
        may_supersede=[p.key for p in a.supersede_proposals],
    )
    text = f"remembered {out.key}" if a.created else f"already known as {out.key}"
    if out.superseded:
        text += f"; it supersedes {', '.join(out.superseded)}"
    if out.may_supersede:
        text += f"; it may supersede {', '.join(out.may_supersede)} (send supersedes to confirm)"
    return out, text


async def _extract_facts(u: UnitOfWork, i: FactsIn, robot: str) -> Answer:
    body = FactsExtract.model_validate(i.model_dump(exclude={"robot"}, exclude_unset=True))
    got = await u.facts.extract(robot, body)
    facts = [
        Fact(
            key=f.duplicate_of or f.key,
            type=f.type,
            content=f.content,
            created=f.created,
            derived_from=list(f.metadata.get("derived_from", [])),
        )
        for f in got.facts
    ]
    lines = [f"{f.key} ({f.type}{'' if f.created else ', known'}): {f.content}" for f in facts]
    return Facts(facts=facts), "\n".join(lines) or "no facts found"


def recall_request(i: RecallIn) -> RecallRequest:
    return RecallRequest(
        query=i.query,
        limit=i.limit,
        strategy=i.strategy,
        timeframe=i.timeframe,
        valid_at=i.valid_at,
        filters=RecallFilters(tags_any=i.tags, min_confidence=i.min_confidence, sources=i.sources),
        pools=i.pools,
    )


def hits_of(result: Any) -> tuple[Hits, str]:
    hits = Hits(
        hits=[
            Hit(key=h.key, score=round(h.score, 2), date=when(h.created_at), content=h.content)
            for h in result.hits
        ]
    )
    return hits, hit_lines(hits.hits) or "no memories found"


def hit_lines(hits: list[Hit]) -> str:
    """A date line, then `key: content` per hit of that date, best first (a date shared by
    hits is said once): key and date cost a model a few tokens a hit, not a JSON record. The
    score is the structured copy's: the order says it, and its 2 tokens a hit are what a
    made-up key's alias needs to keep a recall within 1.3 x the text it carries."""
    lines: list[str] = []
    last = None
    for h in hits:
        if h.date != last:
            lines.append(h.date)
            last = h.date
        lines.append(f"{h.key}: {h.content}")
    return "\n".join(lines)


async def _recall(u: UnitOfWork, i: RecallIn, robot: str) -> Answer:
    return hits_of(await u.recall.recall(robot, recall_request(i)))


async def _context(u: UnitOfWork, i: ContextIn, robot: str) -> Answer:
    c = await u.working_memory.context_body(robot, i.strategy, i.max_tokens)
    out = Context(text=c["text"], tokens=c["tokens"], items=len(c["items"]))
    return out, out.text or "working memory is empty"


async def _forget(u: UnitOfWork, i: ForgetIn, robot: str) -> Answer:
    await u.memories.forget(robot, i.key, i.hard, i.confirm)
    how = "deleted for good" if i.hard else "forgot (restorable)"
    return Forgot(key=i.key, hard=i.hard), f"{how}: {i.key}"


async def _restore(u: UnitOfWork, i: KeyIn, robot: str) -> Answer:
    """As POST …/memories/{key}/restore."""
    m = await u.memories.restore(robot, i.key)
    out = Written(key=m.key, version=m.version, importance=m.importance)
    return out, f"restored {m.key}"


async def _update(u: UnitOfWork, i: UpdateIn, robot: str) -> Answer:
    """As PUT …/memories/{key}: creates the key or replaces its fields."""
    body = MemoryUpsert.model_validate(i.model_dump(exclude={"robot", "key"}, exclude_unset=True))
    m = await u.memories.upsert(robot, i.key, body)
    out = Written(key=m.key, version=m.version, importance=m.importance, created=m.created)
    return out, f"{'created' if m.created else 'updated'} {m.key} v{m.version}"


async def _importance(u: UnitOfWork, i: ImportanceIn, robot: str) -> Answer:
    """As PATCH …/memories/{key}: what is given changes (a change of nothing writes none)."""
    given = i.model_dump(exclude={"robot", "key"}, exclude_unset=True)
    m = await u.memories.adjust_importance(robot, i.key, ImportanceChange.model_validate(given))
    out = Written(key=m.key, version=m.version, importance=m.importance)
    return out, f"{m.key} v{m.version}: importance {m.importance:g}"


async def _feedback(u: UnitOfWork, i: FeedbackIn, robot: str) -> Answer:
    """As POST …/memories/{key}/feedback: its request model checks what was sent, its service
    records the step (app/memories/learning.py), written by the next access flush."""
    sent = i.model_dump(include={"used", "pinned"}, exclude_unset=True)
    f = await u.reader.feedback(robot, i.key, MemoryFeedback.model_validate(sent))
    out = Feedback(key=f.key, used=f.used, pinned=f.pinned, step=f.step)
    said, to = ("pinned", 10) if f.pinned else ("used", 10) if f.used else ("not used", 0)
    return out, f"{f.key}: {said}; learned importance {f.step:g} of the way to {to}"


async def _list(u: UnitOfWork, i: ListIn, robot: str) -> Answer:
    """As GET …/memories, its filters and pages (newest first)."""
    filters = ListFilters(
        pool=i.pool,
        type=i.type,
        tags_any=i.tags,
        min_importance=i.min_importance,
        min_confidence=i.min_confidence,
        sources=i.sources,
        include_deleted=i.include_deleted,
        as_of=i.as_of,
    )
    page = await u.reader.list(
        robot, i.scope, filters, timeframe=i.timeframe, limit=i.limit, cursor=i.cursor,
        valid_at=i.valid_at, include=i.include or [], entity=i.entity,
    )  # fmt: skip
    rows = [{"key": m.key, "date": when(m.created_at), "content": m.content} for m in page.items]
    text = "\n".join(f"{r['date']} {r['key']}: {r['content']}" for r in rows)
    if page.next_cursor:
        text += f"\nmore: cursor={page.next_cursor}"
    return About(memories=rows, next_cursor=page.next_cursor), text or "no memories"


async def _stats(u: UnitOfWork, i: StatsIn, robot: str) -> Answer:
    body = (await u.stats.robot(robot, i.days)).model_dump(mode="json")
    return Body(**body), _json(body)


async def _tags(u: UnitOfWork, i: TagsIn, robot: str) -> Answer:
    body = (await u.tags.tree(None, i.timeframe)).model_dump(mode="json")
    return Body(**body), _json(body)


async def _versions(u: UnitOfWork, i: KeyIn, robot: str) -> Answer:
    found = await u.reader.versions(robot, i.key, False, limit=50, before=None)
    rows = [
        {"version": v.version, "by": v.changed_by, "date": when(v.changed_at), "content": v.content}
        for v in found.versions
    ]
    text = "\n".join(f"v{r['version']} {r['date']} {r['by']}: {r['content']}" for r in rows)
    return Versions(versions=rows), text


async def _history(u: UnitOfWork, i: KeyIn, robot: str) -> Answer:
    found = await u.reader.chain(robot, i.key, 20)
    rows = [
        {
            "key": m.key,
            "depth": m.depth,
            "valid_from": when(m.valid_from) if m.valid_from else None,
            "valid_to": when(m.valid_to) if m.valid_to else None,
            "content": m.content,
        }
        for m in found.chain
    ]
    text = "\n".join(
        f"[{r['key']} {r['valid_from']}..{r['valid_to'] or ''}] {r['content']}" for r in rows
    )
    return Chain(chain=rows), text


async def _append(u: UnitOfWork, i: AppendIn, robot: str) -> Answer:
    body = MessagesAppend.model_validate({"messages": i.messages})
    done = await u.sessions.append(robot, i.session, body)
    rows = [{"seq": m.seq, "role": m.role, "content": m.content} for m in done.messages]
    return Messages(messages=rows, tokens=sum(m.tokens for m in done.messages)), (
        f"appended {len(rows)} to {i.session}"
    )


async def _window(u: UnitOfWork, i: WindowIn, robot: str) -> Answer:
    w = await u.sessions.window(robot, i.session, i.n, i.max_tokens)
    rows = [{"seq": m.seq, "role": m.role, "content": m.content} for m in w.messages]
    text = "\n".join(f"{r['role']}: {r['content']}" for r in rows)
    return Messages(messages=rows, tokens=w.tokens), text or "no messages"


async def _prompt(u: UnitOfWork, i: PromptIn, robot: str) -> Answer:
    body = PromptRequest.model_validate(i.model_dump(exclude={"robot"}, exclude_none=True))
    p = await u.prompt.prompt(robot, body)
    rows = [{"role": m.role, "content": m.content} for m in p.messages]
    return Messages(messages=rows, tokens=p.tokens), _json(rows)


def _profile(p: ProfileRead) -> Answer:
    slots = {s: v.value for s, v in p.slots.items()}
    text = "\n".join(f"{s}: {v}" for s, v in slots.items())
    return Profile(subject=p.subject, slots=slots, tokens=p.tokens), (
        text or f"no profile of {p.subject}"
    )


async def _profile_get(u: UnitOfWork, i: ProfileIn, robot: str) -> Answer:
    return _profile(await u.profiles.get(robot, i.subject))


async def _profile_set(u: UnitOfWork, i: ProfileSetIn, robot: str) -> Answer:
    body = ProfilePatch.model_validate({"slots": i.slots})
    return _profile(await u.profiles.patch(robot, i.subject, body))


async def _snapshot_create(u: UnitOfWork, i: SnapshotIn, robot: str) -> Answer:
    s = await u.snapshots.create(robot, SnapshotCreate(name=i.name))
    out = Snapshot(id=s.id, items=s.item_count, tokens=s.tokens)
    return out, f"snapshot {s.id}: {s.item_count} items, {s.tokens} tokens"


async def _snapshot_list(u: UnitOfWork, i: In, robot: str) -> Answer:
    rows = [
        {"id": s.id, "name": s.name, "date": when(s.created_at), "items": s.item_count}
        for s in await u.snapshots.list(robot)
    ]
    text = "\n".join(f"{r['id']} {r['date']} {r['name'] or ''}: {r['items']} items" for r in rows)
    return Snapshots(snapshots=rows), text or "no snapshots"


async def _snapshot_restore(u: UnitOfWork, i: SnapshotIdIn, robot: str) -> Answer:
    r = await u.snapshots.restore(robot, i.id)
    skipped = [f"{s.key} ({s.reason})" for s in r.skipped]
    out = Restored(restored=r.restored, skipped=skipped, evicted=r.evicted, tokens=r.tokens)
    text = f"restored {len(r.restored)} items, {r.tokens} tokens"
    if skipped:
        text += f"; skipped {', '.join(skipped)}"
    if r.evicted:
        text += f"; over budget: {', '.join(r.evicted)}"
    return out, text


async def _state_get(u: UnitOfWork, i: StateIn, robot: str) -> Answer:
    s = await u.state.get(robot, i.key, scope=i.scope)
    return State(key=s.key, value=s.value, version=s.version), (
        f"{s.key} v{s.version}: {compact(s.value)}"
    )


async def _state_set(u: UnitOfWork, i: StateSetIn, robot: str) -> Answer:
    """As PUT (or DELETE, for null) …/state/{key}; `version` is its If-Match."""
    match = None if i.version is None else str(i.version)
    if i.value is None:
        await u.state.delete(robot, i.key, scope=i.scope, if_match=match)
        return State(key=i.key, deleted=True), f"deleted {i.key}"
    body = StatePut.model_validate({"value": i.value, "ttl_s": i.ttl_s, "pinned": i.pinned})
    s = await u.state.put(robot, i.key, body, scope=i.scope, if_match=match)
    return State(key=s.key, value=s.value, version=s.version), f"{s.key} v{s.version}"


def _group(g: GroupRead) -> Answer:
    out = Group(group=g.name, members=g.members, budget=g.working_memory_budget)
    return out, f"group {g.name}: {', '.join(g.members) or 'no members'} ({out.budget} tokens)"


async def _group_create(u: UnitOfWork, i: GroupCreateIn, robot: str) -> Answer:
    body = GroupUpdate(members=i.members, working_memory_budget=i.budget)
    return _group(await u.groups.put(i.group, body))


async def _group_join(u: UnitOfWork, i: GroupMemberIn, robot: str) -> Answer:
    return _group(await u.groups.change(i.group, join=[i.robot or robot]))


async def _group_leave(u: UnitOfWork, i: GroupMemberIn, robot: str) -> Answer:
    return _group(await u.groups.change(i.group, leave=[i.robot or robot]))


async def _group_status(u: UnitOfWork, i: GroupIn, robot: str) -> Answer:
    return _group(await u.groups.get(i.group))


async def _group_failover(u: UnitOfWork, i: FailoverIn, robot: str) -> Answer:
    return _group(await u.groups.change(i.group, join=[i.to], leave=[i.failed]))


async def _group_recall(u: UnitOfWork, i: GroupRecallIn, robot: str) -> Answer:
    """As its first member (or the connection's robot, if a member): a member's recall
    loads the group's working memory."""
    g = await u.groups.get(i.group)
    if not g.members:
        raise Conflict(f"group {i.group!r} has no members")
    member = robot if robot in g.members else g.members[0]
    request = RecallRequest(query=i.query, limit=i.limit)
    # Read as the group: what every member may read, not the member's own private memories.
    return hits_of(await u.recall.recall(member, request, reader=group_row_name(i.group)))


_TOOLS = [
    Tool("remember", "Remember", "Store a memory (durable), then place it in working memory.",
         RememberIn, Remembered, "writer", _remember),
    Tool("recall", "Recall", "Search memories (current facts), load the hits into working "
         "memory. Answers a date line, then `key: content` a hit, best first.", RecallIn, Hits,
         "writer", _recall),
    Tool("context", "Working memory", "Working memory as prompt text, within a token budget.",
         ContextIn, Context, "reader", _context, read_only=True, idempotent=True),
    Tool("forget", "Forget", "Forget a memory (restorable; hard=true with confirm=key: for good).",
         ForgetIn, Forgot, "writer", _forget, destructive=True, idempotent=True),
    Tool("memory_restore", "Restore", "Undo a forget.", KeyIn, Written, "writer", _restore,
         idempotent=True),
    Tool("memory_update", "Update", "Create or replace a memory: every field (absent: "
         "default), as a new version.", UpdateIn, Written, "writer", _update, destructive=True,
         idempotent=True),
    Tool("memory_importance", "Importance", "Change a memory's importance (or boost it), "
         "confidence or source; the rest is kept.", ImportanceIn, Written, "writer",
         _importance, idempotent=True),
    Tool("memory_feedback", "Feedback", "Say whether a memory was of use (used) or kept at "
         "hand (pinned): its learned importance moves.", FeedbackIn, Feedback, "writer",
         _feedback),
    Tool("memory_list", "List", "Memories newest first, filtered, a page at a time.", ListIn,
         About, "reader", _list, read_only=True, idempotent=True),
    Tool("stats", "Statistics", "The robot's working memory, memories and activity.",
         StatsIn, Body, "reader", _stats, read_only=True, idempotent=True),
    Tool("list_tags", "Tags", "The namespace's tag tree with counts.",
         TagsIn, Body, "reader", _tags, read_only=True, idempotent=True),
    Tool("memory_versions", "Versions", "A memory's versions, newest first.",
         KeyIn, Versions, "reader", _versions, read_only=True, idempotent=True),
    Tool("memory_history", "History", "What a memory superseded and what superseded it.",
         KeyIn, Chain, "reader", _history, read_only=True, idempotent=True),
    Tool("entities", "Entities", "People, names and codes the memories name, most first.",
         EntitiesIn, Entities, "reader", entities_tool, read_only=True,
         idempotent=True, group="entities"),
    Tool("entity_memories", "About", "Everything about an entity, newest first.",
         EntityIn, About, "reader", about_tool, read_only=True, idempotent=True,
         group="entities"),
    Tool("memory_related", "Related", "Memories linked to one, up to depth links away.",
         RelatedIn, RelatedOut, "reader", related_tool, read_only=True, idempotent=True,
         group="links"),
    Tool("memory_link", "Link", "Link a memory to another.", LinkIn, Linked, "writer", link_tool,
         idempotent=True, group="links"),
    Tool("extract_facts", "Extract facts", "An LLM turns conversation turns (keys, or a "
         "session's) into fact and preference memories.", FactsIn, Facts, "writer",
         _extract_facts, needs_llm=True),
    Tool("session_append", "Append to session", "Append messages to a conversation session.",
         AppendIn, Messages, "writer", _append, group="sessions"),
    Tool("session_window", "Session window", "A session's last messages, oldest first.",
         WindowIn, Messages, "writer", _window, idempotent=True, group="sessions"),
    Tool("prompt", "Build prompt", "Chat messages for a model: memory, session and input, "
         "within context_window.", PromptIn, Messages, "writer", _prompt, idempotent=True,
         group="sessions"),
    Tool("state_get", "Get state", "A state key's JSON value and version.", StateIn, State,
         "reader", _state_get, read_only=True, idempotent=True, group="state"),
    Tool("state_set", "Set state", "Set a state key (null deletes; version: only if still "
         "at it).", StateSetIn, State, "writer", _state_set, destructive=True, group="state"),
    Tool("profile_get", "Profile", "A subject's profile: `slot: value` lines.", ProfileIn,
         Profile, "reader", _profile_get, read_only=True, idempotent=True, group="profiles"),
    Tool("profile_set", "Set profile", "Set profile slots (a new value supersedes the old; "
         "null removes).", ProfileSetIn, Profile, "writer", _profile_set, destructive=True,
         idempotent=True, group="profiles"),
    Tool("snapshot_create", "Snapshot", "Snapshot working memory.", SnapshotIn, Snapshot,
         "writer", _snapshot_create, group="snapshots"),
    Tool("snapshot_list", "Snapshots", "The robot's snapshots.", In, Snapshots, "reader",
         _snapshot_list, read_only=True, idempotent=True, group="snapshots"),
    Tool("snapshot_restore", "Restore snapshot", "Working memory becomes a snapshot's (what "
         "was forgotten since is skipped).", SnapshotIdIn, Restored, "writer",
         _snapshot_restore, destructive=True, idempotent=True, group="snapshots"),
    Tool("group_create", "Create group", "Create or reset a robot group sharing one working "
         "memory.", GroupCreateIn, Group, "writer", _group_create, idempotent=True,
         needs_robot=False, group="groups"),
    Tool("group_join", "Join group", "A robot joins a group.", GroupMemberIn, Group, "writer",
         _group_join, idempotent=True, group="groups"),
    Tool("group_leave", "Leave group", "A robot leaves a group.", GroupMemberIn, Group, "writer",
         _group_leave, destructive=True, idempotent=True, group="groups"),
    Tool("group_status", "Group status", "A group's members and budget.", GroupIn, Group,
         "reader", _group_status, read_only=True, idempotent=True, needs_robot=False,
         group="groups"),
    Tool("group_failover", "Group failover", "Replace a failed member by another; the shared "
         "working memory stays.", FailoverIn, Group, "writer", _group_failover,
         destructive=True, idempotent=True, needs_robot=False, group="groups"),
    Tool("group_recall", "Group recall", "recall, into a group's shared working memory.",
         GroupRecallIn, Hits, "writer", _group_recall, needs_robot=False, group="groups"),
    Tool("pools", "Pools", "The namespace's pools and their grants.", PoolsIn, Pools,
         "reader", list_pools, read_only=True, idempotent=True, needs_robot=False,
         group="pools"),
    Tool("pool_put", "Create pool", "Create or replace a pool (admin).", PoolPutIn, Pool,
         "admin", put_pool, idempotent=True, needs_robot=False, group="pools"),
    Tool("pool_grant", "Grant pool", "Set a robot's grant on a pool (admin); none revokes, "
         "at once.", PoolGrantIn, Pool, "admin", grant_pool, destructive=True,
         idempotent=True, needs_robot=False, group="pools"),
]  # fmt: skip
TOOLS: dict[str, Tool] = {t.name: t for t in _TOOLS}

# What HTM_MCP_TOOLS=default offers: an agent's loop (remember, recall, the prompt or working
# memory for its model with the conversation it appends to, forget and undo, a fact changed,
# its state and pinned notes), within
# 2,500 tokens of definitions (tests/mcp/test_mcp_budget.py). The others by name or group.
DEFAULT = (
    "remember", "recall", "context", "forget", "memory_restore", "memory_update",
    "session_append", "prompt", "state_get", "state_set",
)  # fmt: skip
GROUPS: dict[str, tuple[str, ...]] = {
    "default": DEFAULT,
    "all": tuple(TOOLS),
    **{
        g: tuple(t.name for t in _TOOLS if t.group == g)
        for g in dict.fromkeys(t.group for t in _TOOLS)
    },
}


@cache
def enabled(spec: str) -> frozenset[str]:
    """The tools HTM_MCP_TOOLS names: `default`, `all`, or a comma list of tool names and
    groups (`default,pools`). An unknown name is a ValueError saying what there is."""
    names: set[str] = set()
    for word in (w.strip() for w in spec.split(",")):
        if word in GROUPS:
            names.update(GROUPS[word])
        elif word in TOOLS:
            names.add(word)
        else:
            raise ValueError(
                f"HTM_MCP_TOOLS: no tool or group {word!r}; groups: {', '.join(GROUPS)}; "
                f"tools: {', '.join(TOOLS)}"
            )
    return frozenset(names)
