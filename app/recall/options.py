"""A recall request's search options: the deployment's defaults (Settings) overlaid with the
request's own (RecallRequest.fusion / .signals), checked, as planner values."""

from __future__ import annotations

from typing import TypeVar

from app.config import Settings
from app.errors import Unprocessable
from app.recall.planner import NO_SIGNALS, Fusion, Signals
from app.recall.schemas import FusionOptions, FusionRead, RecallRequest, SignalOptions

T = TypeVar("T")


def _pick(given: T | None, default: T) -> T:
    return default if given is None else given


def deployment_fusion(settings: Settings) -> Fusion:
    """The fusion a request that names none gets."""
    return fusion_for(RecallRequest(query="-"), settings)


def fusion_for(req: RecallRequest, settings: Settings) -> Fusion:
    o = req.fusion or FusionOptions()
    fusion = Fusion(
        method=_pick(o.method, settings.recall_fusion),
        k=_pick(o.k, settings.rrf_k),
        vector_weight=_pick(o.vector_weight, settings.recall_vector_weight),
        fulltext_weight=_pick(o.fulltext_weight, settings.recall_fulltext_weight),
        normalization=_pick(o.normalization, settings.recall_normalization),
        candidates=_pick(o.candidates, settings.recall_candidates),
    )
    if fusion.vector_weight + fusion.fulltext_weight <= 0:
        raise Unprocessable(
            "fusion weights are both 0: at least one list must count",
            errors=[{"field": "fusion.vector_weight", "message": "both weights are 0"}],
        )
    return fusion


def signals_for(req: RecallRequest, settings: Settings) -> Signals:
    if req.strategy != "hybrid":
        return NO_SIGNALS
    o = req.signals or SignalOptions()
    signals = Signals(
        recency=_pick(o.recency, settings.recall_recency_weight),
        half_life_days=_pick(o.half_life_days, settings.recall_half_life_days),
        importance=_pick(o.importance, settings.recall_importance_weight),
        tags=_pick(o.tag_overlap, settings.recall_tag_weight),
        query_tags=tuple(o.tags or ()),
    )
    if signals.total_weight > 1:
        raise Unprocessable(
            f"signal weights add up to {signals.total_weight:g}; at most 1",
            errors=[{"field": "signals", "message": "weights add up to more than 1"}],
        )
    return signals


def check_hybrid_only(req: RecallRequest) -> None:
    """Fusion and signals shape hybrid's score; asked of another strategy they are a mistake."""
    if req.strategy == "hybrid":
        return
    for field in ("fusion", "signals"):
        if getattr(req, field) is not None:
            raise Unprocessable(
                f"{field} applies to strategy hybrid only, not {req.strategy}",
                errors=[{"field": field, "message": "hybrid only"}],
            )


def fusion_read(fusion: Fusion, candidates: int) -> FusionRead:
    wv, wt = fusion.weights()
    return FusionRead(
        method=fusion.method,
        k=fusion.k if fusion.method == "rrf" else None,
        vector_weight=wv,
        fulltext_weight=wt,
        normalization=fusion.normalization if fusion.method == "score" else None,
        candidates=candidates,
    )
