"""The runner against the real app (no embedder: full text only, so no model in tests)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from evals.runner import Config, Loaded, load, load_configs, run_config
from evals.sets import Doc, EvalQuestion, EvalSet


def _set() -> EvalSet:
    def doc(key: str, text: str, at: str) -> Doc:
        return Doc(key, text, at, {"dialogue": key[:3]})

    return EvalSet(
        "conv",
        {
            "d01": [
                doc("d01-s00-t000", "Mia: we brought home a beagle called Biscuit",
                    "2025-03-01T10:00:00Z"),
                doc("d01-s00-t001", "Leo: work was long today", "2025-03-01T10:01:00Z"),
                doc("d01-s01-t000", "Mia: Biscuit chewed my shoes", "2025-04-02T10:00:00Z"),
            ],
            "d02": [doc("d02-s00-t000", "Ana: Biscuit is my neighbour's cat",
                        "2025-05-01T09:00:00Z")],
        },
        [
            EvalQuestion("q1", "d01", "dev", "names", "Biscuit",
                         ("d01-s00-t000", "d01-s01-t000")),
            EvalQuestion("q2", "d02", "test", "names", "Biscuit", ("d02-s00-t000",)),
            EvalQuestion("q3", "d01", "dev", "single", "Who has a beagle", ("d01-s01-t000",)),
        ],
    )  # fmt: skip


async def test_a_set_loads_one_namespace_per_group_and_each_question_searches_its_own(
    app_factory,  # type: ignore[no-untyped-def]
) -> None:
    prefix = f"t-{uuid.uuid4().hex[:8]}-"
    evalset = _set()
    async with app_factory() as client:
        assert await load(client, evalset, prefix, embedded=False) == Loaded(4, 0)
        r = await client.get(
            "/v1/robots/evals/memories/d01-s01-t000",
            headers={"x-namespace": f"{prefix}conv-docs-d01"},
        )
        assert r.status_code == 200
        m = r.json()
        assert (m["content"], m["created_at"], m["metadata"]) == (
            "Mia: Biscuit chewed my shoes", "2025-04-02T10:00:00Z", {"dialogue": "d01"},
        )  # fmt: skip
        result = await run_config(client, evalset, Config("fulltext", {"strategy": "fulltext"}),
                                  prefix)  # fmt: skip
    assert result["status"] == "ok"
    # q1 finds both Biscuit turns of d01 and none of d02's; q2 its one; q3 ("beagle") the
    # adoption turn at rank 1, which is not its evidence: recall 0.
    assert result["kind"]["names"]["recall_at_10"] == 1.0
    assert result["kind"]["names"]["mrr"] == 1.0
    assert result["kind"]["single"]["recall_at_10"] == 0.0
    assert result["all"]["questions"] == 3
    assert result["split"]["dev"]["recall_at_10"] == pytest.approx(0.5)
    assert result["split"]["test"]["recall_at_10"] == 1.0
    assert (result["all"]["recall_at_20"], result["all"]["same_top_10"]) == (2 / 3, 1.0)


async def test_a_config_the_api_refuses_is_reported_failed_with_the_problem(
    app_factory,  # type: ignore[no-untyped-def]
) -> None:
    prefix = f"t-{uuid.uuid4().hex[:8]}-"
    evalset = _set()
    # Fusion on a vector recall is refused (fusion shapes hybrid only).
    fusion = Config("vector-rrf", {"strategy": "vector", "fusion": {"method": "rrf", "k": 10}})
    async with app_factory() as client:
        await load(client, evalset, prefix, embedded=False)
        result = await run_config(client, evalset, fusion, prefix)
        after = await run_config(client, evalset, Config("ft", {"strategy": "fulltext"}), prefix)
    assert result["status"] == "failed"
    assert result["http_status"] == 422
    assert result["request"] == fusion.fields
    assert "fusion" in json.dumps(result["problem"])
    assert after["status"] == "ok"


def test_configs_load_from_a_list_or_an_object_and_may_not_set_the_evals_fields(
    tmp_path: Path,
) -> None:
    p = tmp_path / "c.json"
    p.write_text(json.dumps([{"name": "rrf", "request": {"fusion": {"k": 10}}}]))
    assert load_configs(p) == [Config("rrf", {"fusion": {"k": 10}})]
    p.write_text(json.dumps({"ft": {"strategy": "fulltext"}, "v": {"strategy": "vector"}}))
    assert [c.name for c in load_configs(p)] == ["ft", "v"]
    p.write_text(json.dumps({"bad": {"limit": 5}}))
    with pytest.raises(ValueError, match="bad"):
        load_configs(p)
