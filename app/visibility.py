"""Who may read a memory (migration 0020), as the one SQL predicate every read path adds.

A memory is `namespace` (every robot of the namespace: the default), `private` (its author
and the robots its `readers` name), `group` (its author and the robots of the group it was
added in, `memory.group_id`) or `pool` (the robots the pool grants reading: its `readers`,
its `writers`, every robot when `public_read`; not once the pool is archived or expired).

`Reader(robot)` renders that rule for one robot as a predicate on `memory m`. It reads the
robot's row and the pool's grants in the statement itself, so a grant revoked or a group left
is seen by the next statement, never through a cache. A group's shared working memory reads
as the group (`group:<name>`): namespace-wide memories, its group's and public pools'.
The operator (the CLI's data commands, the workers) reads everything and passes no reader.

The predicate holds for metadata too: a field that names or counts a memory (a successor's
key, a snapshot's items, a count) shows a robot only what it may read. `covers` keeps a
supersede from ending a fact for a robot with a successor it may not read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field

from app.common import NAME_PATTERN

Visibility = Literal["namespace", "private", "group", "pool"]
# A robot or a pool, named as robots are (`[A-Za-z0-9._-]{1,64}`).
Name = Annotated[str, Field(pattern=NAME_PATTERN)]
MAX_READERS = 100
VISIBILITY_DESCRIPTION = (
    "Who may read it: namespace (every robot of the namespace, the default on add), private "
    "(the robot that added it and the robots in `readers`), group (the robots of the adding "
    "robot's group) or pool (the robots `pool` grants reading; implied by `pool`). On PUT, "
    "absent keeps the memory's; a change withdraws it from every working memory"
)

_ROBOT = "(SELECT {col} FROM robot r WHERE r.namespace_id = :v_ns AND r.name = :v_reader)"


def pool_grants(robot: str) -> str:
    """Whether the robot named by the SQL expression `robot` may read pool `p` now: neither
    archived nor expired, and public or granted (a writer reads too). The one statement of
    the rule: reads, placements and revokes all ask it."""
    return f"""(p.archived_at IS NULL AND (p.expires_at IS NULL OR p.expires_at > now())
               AND (p.public_read OR {robot} = ANY(p.readers) OR {robot} = ANY(p.writers)))"""


_READABLE_POOLS = f"""SELECT p.id FROM pool p
        WHERE p.namespace_id = :v_ns AND {pool_grants(":v_reader")}"""


@dataclass(frozen=True)
class Reader:
    """A robot reading a namespace's memories. `pools`: which pools' memories count — None,
    every pool the robot may read (retrieve, list, working memory); a tuple, only those
    (recall's `pools`, empty by default: a recall searches pools only when it names them)."""

    namespace_id: int
    robot: str
    pools: tuple[str, ...] | None = None

    def where(self, alias: str = "m") -> tuple[str, dict[str, Any]]:
        """The predicate on `memory <alias>` and its bind values (each named `v_*`)."""
        m = alias
        branches = [
            f"{m}.visibility = 'namespace'",
            f"({m}.visibility IN ('private', 'group') "
            f"AND {m}.author_robot_id = {_ROBOT.format(col='r.id')})",
            f"({m}.visibility = 'private' AND :v_reader = ANY({m}.readers))",
            f"({m}.visibility = 'group' AND {m}.group_id = "
            f"{_ROBOT.format(col='coalesce(r.group_id, CASE WHEN r.is_group THEN r.id END)')})",
        ]
        params: dict[str, Any] = {"v_ns": self.namespace_id, "v_reader": self.robot}
        if self.pools is None:
            branches.append(f"({m}.visibility = 'pool' AND {m}.pool_id IN ({_READABLE_POOLS}))")
        elif self.pools:
            branches.append(
                f"({m}.visibility = 'pool' AND {m}.pool_id IN ({_READABLE_POOLS} "
                "AND p.name = ANY(CAST(:v_pools AS text[]))))"
            )
            params["v_pools"] = list(self.pools)
        return "(" + " OR ".join(branches) + ")", params


def shared_with_group(visibility: str, group_id: int | None, holder_id: int) -> bool:
    """Whether a group's shared working memory (`holder_id`, the group's robot row) may hold a
    memory: what every member may read, the namespace's and the group's own memories. A
    member's private memories and pool memories stay out of it (`not_shared`)."""
    return visibility == "namespace" or (visibility == "group" and group_id == holder_id)


@dataclass(frozen=True)
class Audience:
    """Who a memory is written for: its visibility and what that names (the robots a private
    memory grants, the group's robot row, the pool's id)."""

    visibility: Visibility = "namespace"
    readers: tuple[str, ...] = ()
    group_id: int | None = None
    pool_id: int | None = None
    pool: str | None = None  # the pool's name, as answers show it

    @classmethod
    def of(cls, row: Any) -> Audience:
        """A memory row's (one read with app/memories' `read_columns`)."""
        return cls(row.visibility, tuple(row.readers), row.group_id, row.pool_id, row.pool)


NAMESPACE = Audience()


def covers(new: Audience, new_author: str, old: Audience, old_author: str) -> bool:
    """Whether every robot that may read a memory written for `old` by `old_author` may read
    one written for `new` by `new_author`: what a successor must be to what it supersedes
    (app/memories/supersede.py), so that no robot sees a fact end for a successor it cannot
    read. Namespace-wide covers every audience; otherwise the same group, the same pool, or
    private to robots (author and readers) among which are all of the old one's."""
    if new.visibility == "namespace":
        return True
    if new.visibility != old.visibility:
        return False
    if new.visibility == "group":
        return new.group_id == old.group_id
    if new.visibility == "pool":
        return new.pool_id == old.pool_id
    return {old_author, *old.readers} <= {new_author, *new.readers}
