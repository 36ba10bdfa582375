"""Does a robot's Redis working memory agree with its Postgres mirror and with what is stored?

Used by the tests (after concurrent and failing changes have quiesced) and by `make chaos`.
Read-only: it reports, it repairs nothing.
"""

from __future__ import annotations

from typing import Any

from app.db.session import DbSession
from app.working_memory.audit_repository import AuditRepository
from app.working_memory.store import WorkingMemoryStore


async def audit(
    session: DbSession,
    store: WorkingMemoryStore,
    namespace: str,
    *,
    robot: str,
    default_budget: int,
) -> list[str]:
    """Every way the robot's two tiers disagree (empty: they agree):

    - Redis holds exactly the items the mirror lists as in working memory (by memory id),
    - each with the memory's current content, token count and importance (never a replaced
      version, never a forgotten or superseded memory),
    - within the robot's budget,
    - and nothing is left marked for repair (robot stale, or a withdrawal still owed).

    A robot Redis holds nothing for (never used, or its data lost) agrees: its working memory
    is rebuilt from the mirror by the next request that needs it.
    """
    repository = AuditRepository(session)
    row = await repository.robot(namespace, robot, default_budget)
    if row is None:
        return [f"robot {namespace}/{robot} does not exist"]
    members = await repository.listed(row.namespace_id, row.id)
    problems: list[str] = []
    if row.stale:
        problems.append("robot is marked stale")
    state = await store.state(namespace, robot)
    items = [] if state is None else (await store.snapshot(namespace, robot))[0]
    held = {i.memory_id: i for i in items}
    problems += _listed_but_not_held(members, held, redis_answered=state is not None)
    problems += _held_but_not_listed(members, held)
    tokens = sum(i.tokens for i in items)
    if state is not None and tokens != state[0]:
        problems.append(f"Redis's token total {state[0]} is not the sum of its items ({tokens})")
    if tokens > row.budget:
        problems.append(f"{tokens} tokens held over a budget of {row.budget}")
    return problems


def _listed_but_not_held(
    members: dict[int, Any], held: dict[int, Any], *, redis_answered: bool
) -> list[str]:
    """The mirror's members Redis does not hold as such (or that are gone or owe a
    withdrawal)."""
    problems = []
    for memory_id, m in sorted(members.items()):
        if m.stale_at is not None:
            problems.append(f"memory {memory_id} still owes a withdrawal")
        if m.key is None:
            problems.append(f"memory {memory_id} is listed but no longer stored")
        elif m.deleted_at is not None:
            problems.append(f"memory {m.key} is listed but forgotten")
        elif m.superseded_by is not None:
            problems.append(f"memory {m.key} is listed but superseded")
        if redis_answered and memory_id not in held:
            problems.append(f"memory {m.key or memory_id} is listed but not in Redis")
    return problems


def _held_but_not_listed(members: dict[int, Any], held: dict[int, Any]) -> list[str]:
    """Redis's items the mirror does not list, or holds in another version."""
    problems = []
    for memory_id, item in sorted(held.items()):
        m = members.get(memory_id)
        if m is None:
            problems.append(f"Redis holds {item.key} (memory {memory_id}), the mirror does not")
        elif m.key is not None and (item.key, item.content, item.tokens, item.importance) != (
            m.key,
            m.content,
            m.token_count,
            m.importance,
        ):
            problems.append(f"Redis holds another version of {m.key} than is stored")
    return problems
