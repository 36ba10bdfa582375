# ruff: noqa: F811  (the fixtures imported from test_search are parameters here)
"""Hybrid's fusion and relevance signals, pinned exactly on hand-made lists.

The `fusion` set (tests/recall/test_search.py) fixes each memory's vector rank and
similarity and its full-text rank by construction; the full-text raw scores (ts_rank) come
back on every hit, so the expected fused scores are computed here from the raw scores with
the documented formulas (app/recall/planner.py Fusion, Signals) and compared exactly.
"""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from app.db.session import DbSession
from app.recall.fusion import Fusion, Signals
from app.recall.hits import SearchHit
from app.recall.query import SearchQuery
from app.recall.search import Search
from tests.recall.test_search import (  # noqa: F401  (fixtures)
    FUSION_QUESTION,
    FUSION_SIMS,
    RANKS,
    Seed,
    at,
    dim,
    e0,
    fusion,
    keys,
    seed,
    session,
    shared_engine,
    toward_as_stored,
)

# Each vector hit's similarity to the question, as the database computes it (halfvec: the
# vectors rounded to float16).
SIMS = {k: toward_as_stored(s) for k, s in FUSION_SIMS.items()}


async def hybrid(session: DbSession, ns: int, dim: int, **kw) -> list[SearchHit]:  # type: ignore[no-untyped-def]
    return await Search(session).hybrid(
        SearchQuery(ns, 10, text=FUSION_QUESTION, vector=e0(dim), **kw)
    )


def text_scores(hits: list[SearchHit]) -> dict[str, float]:
    return {h.key: h.fulltext_score for h in hits if h.fulltext_score is not None}


def union(xs: dict[str, float]) -> dict[str, float]:
    """A list's raw scores over every candidate of either list (RANKS): a memory the list did
    not reach scores what the list would have given it, here 0 (a and z share no word with
    the question; e has no embedding)."""
    return {k: xs.get(k, 0.0) for k in RANKS}


def minmax(xs: dict[str, float]) -> dict[str, float]:
    lo, hi = min(xs.values()), max(xs.values())
    return {k: (v - lo) / (hi - lo) for k, v in xs.items()}


def zscore(xs: dict[str, float]) -> dict[str, float]:
    """Population z-scores."""
    values = np.array(list(xs.values()), dtype=np.float64)
    mu, sd = values.mean(), values.std()
    return {k: (v - mu) / sd for k, v in xs.items()}


def ordered(scores: dict[str, float], created: dict[str, int]) -> list[str]:
    """Best first; ties newest first (the statement's tie order)."""
    return sorted(scores, key=lambda k: (-scores[k], -created[k]))


CREATED = {"a": 1, "x": 2, "b": 3, "z": 4, "y": 5, "e": 6}


async def test_weighted_rrf_is_exact(session: DbSession, fusion: int, dim: int) -> None:
    hits = await hybrid(session, fusion, dim, fusion=Fusion(k=1, vector_weight=2.0))

    expected = {
        key: (2.0 / (1 + v) if v else 0.0) + (1.0 / (1 + t) if t else 0.0)
        for key, (v, t) in RANKS.items()
    }
    # x 2/3+1/3 = 1.0, a 1.0 (older than x), b .667+.2, y .333+.25, e .5, z .4
    assert keys(hits) == ["x", "a", "b", "y", "e", "z"]
    assert [h.score for h in hits] == pytest.approx([expected[h.key] for h in hits], rel=1e-12)
    shares = {h.key: (h.shares.vector, h.shares.fulltext) for h in hits if h.shares}
    assert shares["x"] == pytest.approx((2 / 3, 1 / 3), rel=1e-12)
    assert shares["e"] == pytest.approx((0.0, 0.5), rel=1e-12)


async def test_score_fusion_minmax_is_a_convex_combination_of_normalised_scores(
    session: DbSession, fusion: int, dim: int
) -> None:
    hits = await hybrid(
        session, fusion, dim, fusion=Fusion(method="score", vector_weight=3, fulltext_weight=1)
    )

    nv, nt = minmax(union(SIMS)), minmax(union(text_scores(hits)))
    # vector: a .9, x .8, b .7, z .6, y .5 and e 0 (no embedding) scale to a 1 … e 0
    # (halfvec's rounding moves them by < 1e-3); weights 3:1 scale to .75 and .25
    assert nv == pytest.approx(
        {"a": 1.0, "x": 0.8 / 0.9, "b": 0.7 / 0.9, "z": 0.6 / 0.9, "y": 0.5 / 0.9, "e": 0.0},
        abs=1e-3,
    )
    assert nt["a"] == nt["z"] == 0.0
    expected = {k: 0.75 * nv[k] + 0.25 * nt[k] for k in RANKS}
    assert keys(hits) == ordered(expected, CREATED)
    assert {h.key: h.score for h in hits} == pytest.approx(expected, abs=1e-6)
    assert {h.key: h.shares.vector for h in hits if h.shares} == pytest.approx(
        {k: 0.75 * nv[k] for k in RANKS}, abs=1e-6
    )
    # each list's raw score as fused: a and z off the text list at 0, e (no embedding) at 0
    raw = {h.key: (h.shares.vector_raw, h.shares.fulltext_raw) for h in hits if h.shares}
    assert (raw["a"][1], raw["z"][1], raw["e"][0]) == (0.0, 0.0, 0.0)


async def test_score_fusion_zscore_scores_a_memory_off_a_list_as_that_list_would(
    session: DbSession, fusion: int, dim: int
) -> None:
    """a and z share no word (ts_rank 0), e has no embedding (similarity 0): each is scored
    by both lists, normalised over every candidate."""
    hits = await hybrid(session, fusion, dim, fusion=Fusion(method="score", normalization="zscore"))

    zv, zt = zscore(union(SIMS)), zscore(union(text_scores(hits)))
    expected = {k: 0.5 * zv[k] + 0.5 * zt[k] for k in RANKS}
    assert keys(hits) == ordered(expected, CREATED)
    assert {h.key: h.score for h in hits} == pytest.approx(expected, abs=1e-5)


async def test_the_one_memory_sharing_a_word_is_lifted_above_those_sharing_none(
    session: DbSession, fusion: int, dim: int
) -> None:
    """ "quiet" is in z alone (vector rank 4): over the candidates its ts_rank stands out from
    the others' 0, so full text lifts it (it counted for nothing when a memory off a list
    took that list's lowest score: make eval, evals/results/2026-11-28-union-fusion.md)."""
    hits = await Search(session).hybrid(
        SearchQuery(
            fusion,
            10,
            text="quiet",
            vector=e0(dim),
            fusion=Fusion(
                method="score", normalization="zscore", vector_weight=0.3, fulltext_weight=0.7
            ),
        ),
    )
    zv = zscore(SIMS)
    (quiet,) = [h.fulltext_score for h in hits if h.fulltext_score is not None]
    zt = zscore({k: quiet if k == "z" else 0.0 for k in SIMS})
    expected = {k: 0.3 * zv[k] + 0.7 * zt[k] for k in SIMS}
    assert keys(hits) == ["z", "a", "x", "b", "y"] == ordered(expected, CREATED)
    assert {h.key: h.score for h in hits} == pytest.approx(expected, abs=1e-5)
    assert [h.fulltext_rank for h in hits] == [1, None, None, None, None]


async def test_equal_ts_ranks_order_nothing_among_themselves(
    session: DbSession, seed: Seed, dim: int
) -> None:
    """Three memories matching "deploy" once each have equal ts_ranks: full text says
    nothing about their order, only that they beat "Lunch" (ts_rank 0) by as much."""
    ns = await seed.namespace()
    bot = await seed.robot(ns, "bot")
    for i, text in enumerate(["We deploy on Fridays", "The deploy waits", "deploy notes", "Lunch"]):
        await seed.memory(ns, bot, f"m{i}", text, created_at=at(i),
                          embedding=seed.toward(0.9 - 0.1 * i, i + 1))  # fmt: skip
    hits = await Search(session).hybrid(
        SearchQuery(
            ns,
            10,
            text="deploy",
            vector=e0(dim),
            fusion=Fusion(
                method="score", normalization="zscore", vector_weight=0.3, fulltext_weight=0.7
            ),
        ),
    )
    assert len({h.fulltext_score for h in hits if h.fulltext_score is not None}) == 1
    # over the four: three at z = 1/√3, "Lunch" at -√3, times the weight 0.7
    assert {h.key: h.shares.fulltext for h in hits if h.shares} == pytest.approx(
        {"m0": 0.7 / 3**0.5, "m1": 0.7 / 3**0.5, "m2": 0.7 / 3**0.5, "m3": -0.7 * 3**0.5}
    )
    assert keys(hits) == ["m0", "m1", "m2", "m3"]  # the vector order among equals


async def test_candidates_cut_each_list(session: DbSession, fusion: int, dim: int) -> None:
    """Three candidates per list: vector a, x, b; text e, x, y. b's and y's second list
    ranks (4th, 5th) no longer count, so a and e (1/61) beat them (2/63 before)."""
    repo = Search(session)
    deep = await repo.hybrid(
        SearchQuery(fusion, 3, text=FUSION_QUESTION, vector=e0(dim), fusion=Fusion(k=60))
    )
    cut = await repo.hybrid(
        SearchQuery(
            fusion, 3, text=FUSION_QUESTION, vector=e0(dim), fusion=Fusion(k=60, candidates=3)
        )
    )
    assert keys(deep) == ["x", "b", "y"]
    assert keys(cut) == ["x", "e", "a"]  # x on both; e and a tie at 1/61, e newer
    assert [(h.vector_rank, h.fulltext_rank) for h in cut] == [(2, 2), (None, 1), (1, None)]


@pytest.fixture
async def signalled(seed: Seed, dim: int) -> int:
    """Three memories equally similar to e0 and sharing no word with the question, so the
    fused score (vector RRF) orders them by id alone; signals must reorder them."""
    ns = await seed.namespace()
    bot = await seed.robot(ns, "bot")
    await seed.memory(ns, bot, "old_important", "alpha", created_at=at(0), importance=10,
                      tags=["db:postgres:tuning"], embedding=seed.toward(0.9, 1))  # fmt: skip
    await seed.memory(ns, bot, "new_plain", "beta", created_at=at(24 * 14), importance=0,
                      tags=["databases"], embedding=seed.toward(0.8, 2))  # fmt: skip
    await seed.memory(ns, bot, "mid", "gamma", created_at=at(24 * 7), importance=5,
                      tags=["db", "ops"], embedding=seed.toward(0.7, 3))  # fmt: skip
    return ns


async def test_signals_blend_recency_importance_and_tag_overlap_exactly(
    session: DbSession, signalled: int, dim: int
) -> None:
    now = at(24 * 14)  # new_plain is brand new; mid one half-life (7 days) old; old two
    signals = Signals(
        recency=0.3, half_life_days=7, importance=0.2, tags=0.4, query_tags=("db", "ops")
    )
    hits = await Search(session).hybrid(
        SearchQuery(
            signalled, 10, text="zzz", vector=e0(dim), fusion=Fusion(k=60), signals=signals, now=now
        )
    )

    fused = {"old_important": 1 / 61, "new_plain": 1 / 62, "mid": 1 / 63}
    recency = {"old_important": 0.25, "new_plain": 1.0, "mid": 0.5}
    importance = {"old_important": 1.0, "new_plain": 0.0, "mid": 0.5}
    # db matches db:postgres:tuning (a descendant) but not "databases"; mid has db and ops
    tags = {"old_important": 0.5, "new_plain": 0.0, "mid": 1.0}
    expected = {
        k: 0.1 * fused[k] / (1 / 61) + 0.3 * recency[k] + 0.2 * importance[k] + 0.4 * tags[k]
        for k in fused
    }
    # mid .1·(61/63)+.15+.1+.4 = .7468, old .1+.075+.2+.2 = .575, new .1·(61/62)+.3 = .3984
    assert keys(hits) == ["mid", "old_important", "new_plain"]
    assert {h.key: h.score for h in hits} == pytest.approx(expected, rel=1e-9)
    for h in hits:
        assert h.shares is not None
        assert h.shares.signals == pytest.approx(
            {"recency": recency[h.key], "importance": importance[h.key], "tags": tags[h.key]},
            rel=1e-9,
        )
    assert {h.key: h.shares.scaled for h in hits if h.shares} == pytest.approx(
        {k: fused[k] / (1 / 61) for k in fused}, rel=1e-12
    )


async def test_without_signal_weights_the_score_is_the_fused_score(
    session: DbSession, signalled: int, dim: int
) -> None:
    hits = await Search(session).hybrid(
        SearchQuery(
            signalled,
            10,
            text="zzz",
            vector=e0(dim),
            fusion=Fusion(k=60),
            signals=Signals(tags=0.5),
            now=at(0),
        )
    )  # a tag weight without query tags weighs nothing
    assert keys(hits) == ["old_important", "new_plain", "mid"]
    assert [h.score for h in hits] == pytest.approx([1 / 61, 1 / 62, 1 / 63], rel=1e-12)
    assert {h.shares.scaled for h in hits if h.shares} == {None}


async def test_recency_of_a_memory_from_the_future_is_one(
    session: DbSession, signalled: int, dim: int
) -> None:
    hits = await Search(session).hybrid(
        SearchQuery(
            signalled,
            10,
            text="zzz",
            vector=e0(dim),
            fusion=Fusion(k=60),
            signals=Signals(recency=1.0),
            now=at(0) - timedelta(days=1),
        ),
    )
    assert {h.key: h.score for h in hits} == pytest.approx(
        {"old_important": 1.0, "new_plain": 1.0, "mid": 1.0}, rel=1e-12
    )
    assert keys(hits) == ["new_plain", "mid", "old_important"]  # ties: newest first
