"""The tag ontology: the namespace's tags as a tree, and renaming or merging a subtree."""

from __future__ import annotations

from app.clock import Clock
from app.common import MAX_TAG_DEPTH, MAX_TAG_LENGTH
from app.errors import Unprocessable
from app.robots.service import RobotService
from app.tags.repository import TagRepository
from app.tags.schemas import TagNode, TagRenamed, TagTree
from app.timeframes.resolve import resolve_timeframe
from app.visibility import Reader


class TagService:
    def __init__(
        self, *, repo: TagRepository, namespace_id: int, robots: RobotService, clock: Clock
    ) -> None:
        self.repo = repo
        self.namespace_id = namespace_id
        self.robots = robots
        self.clock = clock

    async def tree(self, robot_name: str | None, timeframe: str | None) -> TagTree:
        """Counts over the memories not deleted; optionally one robot's, in a timeframe.
        Without a robot, over what every robot may read (namespace-wide memories, public
        pools); with one, over what it added and may read."""
        tr = resolve_timeframe(timeframe, self.clock())
        author = (await self.robots.require(robot_name)).id if robot_name else None
        rows = await self.repo.tree(
            self.namespace_id,
            author,
            tr.start if tr else None,
            end=tr.end if tr else None,
            reader=Reader(self.namespace_id, robot_name or ""),
        )
        return TagTree(tags=build_tree([(r.path, r.count, r.total) for r in rows]))

    async def rename(self, src: str, dst: str) -> TagRenamed:
        """One transaction: every tag at or under `src` moves under `dst`; when `dst` is in
        use the subtrees merge. Rejected whole (422, nothing written) when a renamed tag
        would break the tag limits."""
        if src == dst:
            raise Unprocessable(
                "`from` and `to` are the same tag",
                errors=[{"field": "body.to", "message": "must differ from `from`"}],
            )
        extent = await self.repo.subtree_extent(self.namespace_id, src)
        if extent.memories and (
            len(dst) + extent.extra_chars > MAX_TAG_LENGTH
            or dst.count(":") + 1 + extent.extra_depth > MAX_TAG_DEPTH
        ):
            message = (
                f"renaming would make tags longer than {MAX_TAG_LENGTH} characters "
                f"or deeper than {MAX_TAG_DEPTH} segments"
            )
            raise Unprocessable(message, errors=[{"field": "body.to", "message": message}])
        merged = (await self.repo.subtree_extent(self.namespace_id, dst)).memories > 0
        changed = await self.repo.rename(self.namespace_id, src, dst) if extent.memories else 0
        return TagRenamed.model_validate(
            {"from": src, "to": dst, "memories": changed, "merged": merged}
        )


def build_tree(rows: list[tuple[str, int, int]]) -> list[TagNode]:
    """Nodes from (path, count, total) rows, in which every ancestor has a row of its own.
    Sorted by segments (code point order, whatever the database's collation): a parent
    before its children, siblings by name."""
    roots: list[TagNode] = []
    nodes: dict[str, TagNode] = {}
    for path, count, total in sorted(rows, key=lambda r: r[0].split(":")):
        parent, _, name = path.rpartition(":")
        node = TagNode(name=name, path=path, count=count, total=total, children=[])
        nodes[path] = node
        (nodes[parent].children if parent else roots).append(node)
    return roots
