"""The int8 model is the local model's default (`auto`) on a new database; a database the
float model embedded stays on the float model until its operator moves it
(app/embeddings/factory.py `stored_runtime`, app/lifespan.py `with_stored_runtime`)."""

from __future__ import annotations

import asyncio
from typing import Any

import onnx
import pytest

from app.config import Settings
from app.db.migrate import upgrade
from app.embeddings import build_embedder
from app.embeddings.factory import local_model_name, stored_runtime
from app.embeddings.onnx_model import INT8_FILE, ensure_exported, float_matmuls
from app.embeddings.packaged import MINILM

pytestmark = pytest.mark.slow

INT8 = f"{MINILM}@int8v2"
MODELS = Settings.model_fields["data_dir"].default / "models"


def settings(**kw: Any) -> Settings:
    return Settings(_env_file=None, embedding_provider="local", **kw)  # type: ignore[arg-type]


def test_auto_reads_the_database_it_serves():
    auto = settings()

    assert stored_runtime(auto, None).embedding_runtime == "auto"  # a new database: int8
    assert stored_runtime(auto, INT8).embedding_runtime == "auto"
    assert stored_runtime(auto, "nomic-embed-text").embedding_runtime == "auto"
    assert stored_runtime(auto, MINILM).embedding_runtime == "onnx"  # the float model's
    # a runtime set on purpose is kept, whatever the database holds
    chosen = settings(embedding_runtime="onnx-int8")
    assert stored_runtime(chosen, MINILM).embedding_runtime == "onnx-int8"


def test_the_name_recorded_with_the_vectors_follows_the_runtime():
    assert local_model_name(settings()) == INT8
    assert local_model_name(settings(embedding_runtime="onnx-int8")) == INT8
    assert local_model_name(settings(embedding_runtime="onnx")) == MINILM
    assert local_model_name(settings(embedding_runtime="torch")) == MINILM
    assert local_model_name(settings(embedding_model=f"sentence-transformers/{MINILM}")) == INT8


async def test_the_lazy_model_names_the_vectors_it_will_make_before_it_loads():
    lazy = await build_embedder(settings(), lazy=True)
    float_lazy = await build_embedder(settings(embedding_runtime="onnx"), lazy=True)

    assert lazy is not None and float_lazy is not None
    assert (lazy.model, float_lazy.model) == (INT8, MINILM)
    await lazy.aclose()
    await float_lazy.aclose()


def test_the_int8_copy_keeps_the_output_projections_and_the_embeddings_float():
    folder = ensure_exported(MINILM, MODELS, quantized=True)
    graph = onnx.load(str(folder / INT8_FILE)).graph
    source = onnx.load(str(folder / "model.onnx"))
    kept = float_matmuls(source)
    ops = [n.op_type for n in graph.node]

    assert len(kept) == 12  # 6 layers x (attention output, FFN output)
    assert all("/output/dense/" in name for name in kept)
    assert ops.count("MatMulInteger") == 24  # query, key, value, FFN input of 6 layers
    assert {n.name for n in graph.node if n.op_type == "MatMul"} >= set(kept)
    assert "DequantizeLinear" not in ops  # no int8 table behind the embeddings' Gathers


async def _add(client: Any, key: str) -> dict[str, Any]:
    r = await client.post(
        "/v1/robots/r1/memories",
        json={"key": key, "content": f"Ana rides a red bicycle to work ({key})"},
    )
    assert r.status_code == 201, r.text
    return dict(r.json())


async def test_a_new_database_gets_the_int8_model(app_factory, database_factory):
    url = await database_factory()
    await asyncio.to_thread(upgrade, url)

    async with app_factory(database_url=url, embedding_provider="local") as client:
        client.headers["X-Namespace"] = "int8-new"
        ready = (await client.get("/readyz")).json()
        added = await _add(client, "bike")

    assert (ready["embedding"]["model"], ready["embedding"]["runtime"]) == (INT8, "onnx-int8")
    assert (added["embedding_status"], added["embedding_model"]) == ("ready", INT8)


async def test_a_database_the_float_model_embedded_stays_on_it_until_moved(
    app_factory, database_factory
):
    url = await database_factory()
    await asyncio.to_thread(upgrade, url)
    local = {"database_url": url, "embedding_provider": "local"}

    async with app_factory(**local, embedding_runtime="onnx") as client:
        client.headers["X-Namespace"] = "float-db"
        first = await _add(client, "before")
    async with app_factory(**local) as client:  # auto
        client.headers["X-Namespace"] = "float-db"
        stayed = (await client.get("/readyz")).json()["embedding"]
        second = await _add(client, "after-upgrade")
    async with app_factory(**local, embedding_runtime="onnx-int8") as client:
        client.headers["X-Namespace"] = "float-db"
        moved = (await client.get("/readyz")).json()["embedding"]
        third = await _add(client, "opted-in")
    async with app_factory(**local) as client:  # auto again: the newest vector is int8
        client.headers["X-Namespace"] = "float-db"
        after = (await client.get("/readyz")).json()["embedding"]

    assert [m["embedding_model"] for m in (first, second, third)] == [MINILM, MINILM, INT8]
    assert (stayed["model"], stayed["runtime"]) == (MINILM, "onnx")
    assert (moved["model"], moved["runtime"]) == (INT8, "onnx-int8")
    assert (after["model"], after["runtime"]) == (INT8, "onnx-int8")
