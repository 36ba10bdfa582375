"""Before a vector search: how many memories pass its filters, as far as it is worth knowing,
and so whether exact search or the HNSW index answers it.

A small set is answered exactly, by construction: a count capped just past exact_max_rows
says whether it is small. In an analyzed table of ESTIMATE_MIN_ROWS or more the planner's
estimate (EXPLAIN, statistics only) comes first, and only a small estimate is counted; a
larger one chooses by itself, by what each way is expected to cost (planner.exact_is_cheaper):
an iterative index scan under a selective filter visits about wanted / selectivity tuples,
exact search reads every eligible row. Estimates can be wrong, and a wrong one costs time:
exact search is exact, and the index path falls back to it when it comes back short. An
unfiltered search in a namespace recently found large skips all of it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from app.db.session import DbSession
from app.db.sql import sql
from app.recall import statements as q
from app.recall.caches import LargeNamespaces, TableRows
from app.recall.planner import (
    COUNT_BELOW_ESTIMATE,
    ESTIMATE_MIN_ROWS,
    PgvectorVersion,
    SearchFilters,
    exact_is_cheaper,
    exact_search_suffices,
)


@dataclass(frozen=True)
class Route:
    """count: count the eligible rows (capped) first, and search exactly when they are at
    most exact_max_rows; exact: otherwise, exact search (True) or the index (False)."""

    count: bool
    exact: bool


COUNT_THEN_INDEX = Route(count=True, exact=False)
INDEX = Route(count=False, exact=False)


class Eligibility:
    def __init__(
        self,
        session: DbSession,
        large: LargeNamespaces,
        table_rows: TableRows,
        exact_max_rows: int,
    ) -> None:
        self.session = session
        self.large = large
        self.table_rows = table_rows
        self.exact_max_rows = exact_max_rows
        self.estimate_min_rows = ESTIMATE_MIN_ROWS

    def known_large(self, namespace_id: int, filters: SearchFilters) -> bool:
        """An unfiltered search in a namespace recently found too large for exact search."""
        return filters.unfiltered and namespace_id in self.large

    def small(self, namespace_id: int, filters: SearchFilters, counted: int) -> bool:
        """Whether a capped count means exact search; remembers a large namespace."""
        if exact_search_suffices(counted, self.exact_max_rows):
            return True
        if filters.unfiltered:
            self.large.add(namespace_id)
        return False

    async def count_is_small(self, namespace_id: int, filters: SearchFilters) -> bool:
        """Count the eligible embedded memories, up to the cap: few enough for exact search?"""
        params: dict[str, Any] = {"cap": self.exact_max_rows + 1}
        eligible = q.eligible_where(namespace_id, filters, params)
        n = (
            await self.session.execute(sql(f"SELECT {q.ready_count(eligible)}"), params)
        ).scalar_one()
        return self.small(namespace_id, filters, n)

    async def route(
        self,
        namespace_id: int,
        filters: SearchFilters,
        wanted: int,
        version: PgvectorVersion,
        ef_search: int,
    ) -> Route:
        """How a search for the `wanted` nearest eligible memories runs."""
        if self.known_large(namespace_id, filters):
            return INDEX
        estimated = await self.estimate(namespace_id, filters)
        if estimated is None:  # a small or never analyzed table: counting is cheap
            return COUNT_THEN_INDEX
        eligible, rows = estimated
        exact = exact_is_cheaper(eligible, rows, wanted, version, ef_search)
        if eligible <= COUNT_BELOW_ESTIMATE:
            return Route(count=True, exact=exact)
        if filters.unfiltered and not exact:
            self.large.add(namespace_id)
        return Route(count=False, exact=exact)

    async def estimate(
        self, namespace_id: int, filters: SearchFilters
    ) -> tuple[float, float] | None:
        """(eligible rows as the planner estimates them, the table's rows), or None when the
        table holds fewer than estimate_min_rows by its statistics (or has none yet)."""
        rows = self.table_rows.current()
        if rows is None:
            rows = float((await self.session.execute(sql(q.TABLE_ROWS))).scalar_one())
            self.table_rows.remember(rows)
        if rows < self.estimate_min_rows:
            return None
        params: dict[str, Any] = {}
        eligible = q.eligible_where(namespace_id, filters, params)
        plan = (await self.session.execute(sql(q.estimate(eligible)), params)).scalar_one()
        if isinstance(plan, str):  # a connection without the json codec
            plan = json.loads(plan)
        return float(plan[0]["Plan"]["Plan Rows"]), rows
