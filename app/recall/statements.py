"""A plan as its statements: `render` turns a SearchPlan into the `Step`s that may run (the
text of each, with its bind values, and when its answer stands). Each takes the search's
WHERE clause as rendered once (query.SearchQuery.where, `eligible` here); the author's name
comes from a join on robot. Nothing here runs SQL, nor reads what the planner needs:
repository.py does both."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

from app.config import VectorStorage
from app.db.sql import FEEDBACK, LEARNED_IMPORTANCE
from app.recall.fusion import (
    fusion_params,
    fusion_parts,
    signal_columns,
    signal_params,
    turn_spread_sql,
)
from app.recall.planner import Ranker, SearchPlan, TextList, TextPlan, VectorList


def qvec(storage: VectorStorage) -> str:
    """The query vector, sent as text (app.db.sql.vector_text), cast to the column's type
    (app/db/vectors.py): the HNSW index serves only that type's operator."""
    return f"CAST(CAST(:qvec AS text) AS {storage})"


def same_memory(alias: str) -> str:
    """The join back to a candidate's memory row. The namespace is repeated though the
    candidate came from it: on Citus (migration 0031) it is what makes the whole statement,
    CTEs and joins, one task on the namespace's shard; on plain PostgreSQL it is one more
    condition on a row already found by its key."""
    return f"m.namespace_id = :ns AND m.id = {alias}.id AND m.created_at = {alias}.created_at"


# Only embedded memories take part in vector search.
READY = "m.embedding_status = 'ready' AND m.embedding IS NOT NULL"

HIT_COLUMNS = f"""
    m.id, m.created_at, m.version, m.key, m.content, m.type, m.importance, m.confidence,
    m.source, m.tags, m.metadata, r.name AS author, m.token_count, m.visibility, m.group_id,
    m.pool_id, {FEEDBACK} AS feedback, {LEARNED_IMPORTANCE} AS learned_importance"""

NO_VECTOR_HITS = """
    SELECT NULL::bigint AS id, NULL::timestamptz AS created_at, NULL::float8 AS distance,
           NULL::bigint AS vector_rank
    WHERE false"""

NO_TEXT_HITS = """
    SELECT NULL::bigint AS id, NULL::timestamptz AS created_at, NULL::float8 AS text_score,
           NULL::bigint AS text_rank
    WHERE false"""

# set_config(..., is_local => true) is SET LOCAL: it ends with the transaction, so a pooled
# connection never carries one request's scan settings into the next.
SET_LOCAL = (
    "set_config(name, value, true) "
    "FROM unnest(CAST(:set_names AS text[]), CAST(:set_values AS text[])) AS s(name, value)"
)

# A condition that sets the transaction-local settings in :set_names / :set_values and is
# true. It has no column in it, so PostgreSQL evaluates it once, before the scan below it
# returns a row (a "One-Time Filter"): pgvector reads its hnsw.* settings at the index
# scan's first row, so they are in effect, and cost no round trip of their own.
SETTINGS_FIRST = f"(SELECT count(*) FROM (SELECT {SET_LOCAL}) AS s) >= 0"


def settings_params(settings: dict[str, str]) -> dict[str, list[str]]:
    return {"set_names": list(settings), "set_values": list(settings.values())}


def nearest(eligible: str, exact: bool, storage: VectorStorage, *, configure: bool = False) -> str:
    """The `limit :vec_n` nearest ready embeddings: (id, created_at, distance).

    The HNSW index can only serve ORDER BY on the bare `embedding <=> q`; ordering by
    `(embedding <=> q) + 0` hides that expression from it, so the exact variant is planned on
    the btree filters (author, time range, namespace) and sorts the survivors by distance.
    With `configure`, the statement itself sets :set_names / :set_values first.
    """
    q = qvec(storage)
    order = f"(m.embedding <=> {q}) + 0, m.id" if exact else f"m.embedding <=> {q}"
    first = f" AND {SETTINGS_FIRST}" if configure else ""
    return f"""
        SELECT m.id, m.created_at, m.embedding <=> {q} AS distance
        FROM memory m
        WHERE {eligible} AND {READY}{first}
        ORDER BY {order}
        LIMIT :vec_n"""


def exact_search_with_count(eligible: str, storage: VectorStorage) -> str:
    """Exact search that also counts the eligible embedded memories (up to :cap) in the same
    pass; the hits come back only when the count is at most :max_rows. One row per hit, and
    one row with null hit columns when there is none; every row carries `eligible_n`."""
    return f"""
        WITH eligible AS MATERIALIZED (
            SELECT m.id, m.created_at, m.embedding <=> {qvec(storage)} AS distance
            FROM memory m
            WHERE {eligible} AND {READY}
            LIMIT :cap
        ), counted AS (
            SELECT count(*) AS n FROM eligible
        ), nearest AS (
            SELECT id, created_at, distance FROM eligible
            WHERE (SELECT n FROM counted) <= :max_rows
            ORDER BY distance, id
            LIMIT :vec_n
        ), hits AS (
            SELECT {HIT_COLUMNS}, n.distance,
                   row_number() OVER (ORDER BY n.distance, n.id) AS vector_rank
            FROM nearest n
            JOIN memory m ON {same_memory("n")}
            JOIN robot r ON r.id = m.author_robot_id
        )
        SELECT c.n AS eligible_n, h.*
        FROM counted c LEFT JOIN hits h ON true
        ORDER BY h.vector_rank"""


def vector_search(eligible: str, exact: bool, storage: VectorStorage, *, configure: bool) -> str:
    """The nearest :vec_n hits, ranked; `configure` sets the scan settings in the statement."""
    return f"""
        WITH nearest AS MATERIALIZED ({nearest(eligible, exact, storage, configure=configure)})
        SELECT {HIT_COLUMNS}, n.distance,
               row_number() OVER (ORDER BY n.distance, n.id) AS vector_rank
        FROM nearest n
        JOIN memory m ON {same_memory("n")}
        JOIN robot r ON r.id = m.author_robot_id
        ORDER BY vector_rank"""


def text_params(text: TextList) -> dict[str, Any]:
    params: dict[str, Any] = {"all_q": text.words.all_q, "text_n": text.depth}
    if text.words.rare_q is not None:
        params["rare_q"] = text.words.rare_q
    if text.words.common_q is not None:
        params["common_q"] = text.words.common_q
        params["fill_window"] = max(text.fill_window, text.depth)
    return params


def ts_rank(alias: str) -> str:
    """ts_rank, not ts_rank_cd: for an OR query every single occurrence is a cover, so cover
    density degenerates into counting occurrences, and a memory saying "group" five times
    would beat one matching "caroline", "support" and "group". ts_rank sums per lexeme with
    diminishing returns for repeats, so memories sharing more distinct words rank first."""
    return f"ts_rank({alias}.search_tsv, CAST(:all_q AS tsquery))"


# Each full-text ranker (planner.Ranker): the score of a memory row `alias` for the question.
RANKERS: dict[Ranker, Callable[[str], str]] = {"ts_rank": ts_rank}


def text_ctes(eligible: str, words: TextPlan, ranker: Ranker = "ts_rank") -> str:
    """CTEs ending in `text_hits(id, created_at, text_score, text_rank)`, the top :text_n."""
    if words.common_q is None:
        # Every lexeme is rare enough: rank all matches, at most the candidate budget.
        candidates = f"""
        text_candidates AS (
            SELECT m.id, m.created_at, {RANKERS[ranker]("m")} AS text_score
            FROM memory m
            WHERE {eligible} AND m.search_tsv @@ CAST(:all_q AS tsquery)
        )"""
    else:
        candidates = _rare_and_common(eligible, words, RANKERS[ranker])
    return f"""{candidates},
        text_hits AS (
            SELECT id, created_at, text_score,
                   row_number() OVER (ORDER BY text_score DESC, created_at DESC, id) AS text_rank
            FROM text_candidates
            ORDER BY text_rank
            LIMIT :text_n
        )"""


def _rare_and_common(eligible: str, words: TextPlan, rank: Callable[[str], str]) -> str:
    """`text_candidates`: the rare words' matches, and the common words' among the newest
    :fill_window eligible memories, read only when the rare ones leave the page short."""
    parts = []
    window_where = eligible
    fill_where = "w.search_tsv @@ CAST(:common_q AS tsquery)"
    if words.rare_q is not None:
        parts.append(f"""
        text_rare AS MATERIALIZED (
            SELECT m.id, m.created_at, {rank("m")} AS text_score
            FROM memory m
            WHERE {eligible} AND m.search_tsv @@ CAST(:rare_q AS tsquery)
        )""")
        # Only when the rare lexemes leave the page short: a one-time filter, so the
        # window is not even read otherwise.
        window_where += " AND (SELECT count(*) FROM text_rare) < :text_n"
        fill_where += " AND NOT (w.search_tsv @@ CAST(:rare_q AS tsquery))"
    # The newest :fill_window eligible memories (an index range read, whatever the
    # words), and among them those matching the common words.
    parts.append(f"""
        text_fill AS (
            SELECT w.id, w.created_at,
                   {rank("w")} AS text_score
            FROM (SELECT m.id, m.created_at, m.search_tsv
                  FROM memory m
                  WHERE {window_where}
                  ORDER BY m.created_at DESC
                  LIMIT :fill_window) AS w
            WHERE {fill_where}
        )""")
    union = "SELECT * FROM text_fill"
    if words.rare_q is not None:
        union = "SELECT * FROM text_rare UNION ALL " + union
    return (
        ",".join(parts)
        + f""",
        text_candidates AS ({union})"""
    )


def fulltext_search(eligible: str, words: TextPlan, ranker: Ranker = "ts_rank") -> str:
    return f"""
        WITH {text_ctes(eligible, words, ranker).lstrip()}
        SELECT {HIT_COLUMNS}, t.text_score, t.text_rank
        FROM text_hits t
        JOIN memory m ON {same_memory("t")}
        JOIN robot r ON r.id = m.author_robot_id
        ORDER BY t.text_rank"""


def vector_ctes(eligible: str, vector: VectorList | None, *, exact: bool) -> str:
    """`vec` (the nearest :vec_n, or none) and `vec_hits`, ranked; the index scan sets its
    own settings (:set_names / :set_values)."""
    if vector is None:
        return f"""
        vec AS ({NO_VECTOR_HITS}),
        vec_hits AS (SELECT * FROM vec)"""
    return f"""
        vec AS MATERIALIZED ({nearest(eligible, exact, vector.storage, configure=not exact)}),
        vec_hits AS (
            SELECT id, created_at, distance,
                   row_number() OVER (ORDER BY distance, id) AS vector_rank
            FROM vec
        )"""


def hybrid_search(plan: SearchPlan, *, exact: bool) -> str:
    """The fusion (`fusion_parts`) of the vector list (:vec_n nearest, or none) and the text
    list (the top :text_n, or none) in one statement, blended with the signals, the top
    :limit. Every row carries each list's rank, raw score and share, so a hit can explain
    its place."""
    eligible = plan.query.where.sql
    text = plan.text
    text_part = (
        text_ctes(eligible, text.words, text.ranker)
        if text is not None
        else f"text_hits AS ({NO_TEXT_HITS})"
    )
    return f"""
        WITH {vector_ctes(eligible, plan.vector, exact=exact).lstrip()},
        {text_part.lstrip()},
        {fused_ctes(plan)}
        {_fused_select(plan)}"""


def fused_ctes(plan: SearchPlan) -> str:
    """Both lists joined, each candidate scored on both (`scored_union`), each list's share of
    the fused score (`fusion_parts`) beside its rank and raw score. A zero-length stored
    vector has a NaN distance (hits.similarity): it counts as 0."""
    vec_part, text_part = fusion_parts(plan.query.fusion)
    return f"""listed AS (
            SELECT coalesce(v.id, t.id) AS id,
                   coalesce(v.created_at, t.created_at) AS created_at,
                   v.vector_rank, v.distance, t.text_rank, t.text_score,
                   CASE WHEN v.distance = 'NaN'::float8 THEN 0 ELSE 1 - v.distance END AS vec_sim
            FROM vec_hits v
            FULL OUTER JOIN text_hits t ON t.id = v.id AND t.created_at = v.created_at
        ),
        joined AS ({scored_union(plan)}),
        shares AS (
            SELECT j.*, {vec_part} AS vec_part, {text_part} AS text_part FROM joined j
        ),
        fused AS (SELECT s.*, s.vec_part + s.text_part AS fused FROM shares s)"""


def scored_union(plan: SearchPlan) -> str:
    """Every candidate of either list with its distance to the question's vector, on the
    vector list or not (`any_distance`: its relevance, what a recall's min_score compares,
    hits.hybrid_hit), and, for score fusion, both raw scores, `vec_all` and `text_all`: its
    own list's, or, for a memory the other list did not reach, what that list would have
    scored it (its similarity, 0 without a ready embedding; its text rank, 0 when it shares
    no word). Score fusion normalises these over all the candidates, so a memory off one list
    is not taken for that list's worst candidate (make eval: the worst set and mode's
    recall@10 0.505 → 0.562, evals/results/2026-11-28-union-fusion.md). RRF ranks by the
    lists' ranks alone: its candidates keep their own lists' scores."""
    union = plan.query.fusion.method == "score"
    any_distance = (
        f"coalesce(l.distance, CASE WHEN {READY} THEN m.embedding <=> "
        f"{qvec(plan.vector.storage)} END)"
        if plan.vector is not None
        else "NULL::float8"
    )
    text_all = (
        f"coalesce(l.text_score, {RANKERS[plan.text.ranker]('m')})"
        if union and plan.text is not None
        else "l.text_score"
    )
    vec_all = (
        "CASE WHEN u.any_distance IS NULL OR u.any_distance = 'NaN'::float8 THEN 0"
        " ELSE 1 - u.any_distance END"
        if union and plan.vector is not None
        else "u.vec_sim"
    )
    return f"""
            SELECT u.*, {vec_all} AS vec_all
            FROM (SELECT l.*, {any_distance} AS any_distance, {text_all} AS text_all
                  FROM listed l
                  JOIN memory m ON {same_memory("l")}) AS u"""


def _fused_select(plan: SearchPlan) -> str:
    """The fused rows blended with the signals (`signal_columns`) and their neighbouring
    turns' (`turn_spread_sql`), best first."""
    sig_columns, score = signal_columns(plan.query.signals)
    spread_joins, spread = turn_spread_sql(plan.query.fusion)
    # float8 arithmetic throughout: 1.0 alone is numeric, and the driver would return Decimals.
    return f"""SELECT {HIT_COLUMNS}, f.vector_rank, f.distance, f.text_rank, f.text_score,
               f.vec_part, f.text_part, f.fused, f.vec_all, f.text_all{sig_columns},
               {score}{spread} AS score,
               f.any_distance,
               (SELECT count(*) FROM vec) AS vector_found
        FROM fused f
        JOIN memory m ON {same_memory("f")}
        JOIN robot r ON r.id = m.author_robot_id{spread_joins}
        ORDER BY score DESC, m.created_at DESC, m.id
        LIMIT :limit"""


# --- a plan, rendered -----------------------------------------------------------------------

# When a step's answer stands (else the next step runs; SearchRepository.run reads it):
# always; "few": an exact search that counted the eligible memories found at most `bound` of
# them; "rows": an index scan returned `bound` rows; "vector_found": hybrid's index scan
# found `bound` vector candidates.
Stands = Literal["always", "few", "rows", "vector_found"]


@dataclass(frozen=True)
class Step:
    """One statement of a plan, with its bind values, and when its answer stands."""

    sql: str
    params: dict[str, Any]
    stands: Stands = "always"
    bound: int = 0


def render(plan: SearchPlan) -> tuple[Step, ...]:
    """A plan's statements, in the order they may run: SearchRepository.run stops at the
    first whose answer stands, and the last one always does."""
    if plan.strategy == "vector":
        return _vector_steps(plan)
    if plan.strategy == "fulltext":
        assert plan.text is not None
        sql = fulltext_search(plan.query.where.sql, plan.text.words, plan.text.ranker)
        return (Step(sql, {**plan.query.where.params, **text_params(plan.text)}),)
    return _hybrid_steps(plan)


def _hybrid_steps(plan: SearchPlan) -> tuple[Step, ...]:
    """One statement, exact; or the index's first, standing when its vector list is full."""
    vector = plan.vector
    ways = (True,) if vector is None or vector.route.exact else (False, True)
    steps = [Step(hybrid_search(plan, exact=e), _hybrid_params(plan, exact=e)) for e in ways]
    if vector is not None and len(steps) == 2:
        steps[0] = replace(steps[0], stands="vector_found", bound=vector.depth)
    return tuple(steps)


def _vector_steps(plan: SearchPlan) -> tuple[Step, ...]:
    """Count first (the exact answer when few are eligible), then the index (when it comes
    back full), then exact search, as the route says."""
    v = plan.vector
    assert v is not None and plan.query.vector is not None
    eligible = plan.query.where.sql
    params = {**_vector_params(plan), **plan.query.where.params}
    steps = []
    if v.route.count:
        counting = {**params, "cap": v.exact_max_rows + 1, "max_rows": v.exact_max_rows}
        sql = exact_search_with_count(eligible, v.storage)
        steps.append(Step(sql, counting, "few", v.exact_max_rows))
    if not v.route.exact:
        sql = vector_search(eligible, False, v.storage, configure=True)
        steps.append(Step(sql, {**params, **settings_params(v.index)}, "rows", v.depth))
    steps.append(Step(vector_search(eligible, True, v.storage, configure=False), params))
    return tuple(steps)


def _vector_params(plan: SearchPlan) -> dict[str, Any]:
    assert plan.vector is not None
    return {"qvec": plan.query.vector_text, "vec_n": plan.vector.depth}


def _hybrid_params(plan: SearchPlan, *, exact: bool) -> dict[str, Any]:
    query = plan.query
    params = {**query.where.params, "limit": query.limit}
    if plan.vector is not None:
        params.update(_vector_params(plan))
        if not exact:
            params.update(settings_params(plan.vector.index))
    if plan.text is not None:
        params.update(text_params(plan.text))
    params.update(fusion_params(query.fusion))
    params.update(signal_params(query.signals, query.now))
    return params
