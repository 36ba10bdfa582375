"""The local model through ONNX Runtime (app/embeddings/onnx_model.py): exported once from
the packaged weights, the same vectors as torch, its thread budget, and the fallbacks."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from app.config import Settings
from app.embeddings import LocalEmbedder, MicroBatcher, build_embedder, describe
from app.embeddings.base import DimensionMismatch, EmbeddingError
from app.embeddings.factory import default_threads
from app.embeddings.onnx_model import MANIFEST, OnnxEmbedder, ensure_exported
from app.embeddings.packaged import MINILM, resolve

pytestmark = pytest.mark.slow

# The export is shared with every other user of the default data directory (the suite's apps
# too), so the suite exports the model once per machine.
MODELS = Settings.model_fields["data_dir"].default / "models"

TEXTS = [
    "PostgreSQL index tuning",
    "",
    "Mia: I started at Thornbury Council last week, in the planning office.",
    "Zürich – café, naïve façade; 東京 and emoji 🚀",
    "a very long text " * 200,  # past the model's 256 tokens: truncated alike
    "x",
]


def settings(**kw: object) -> Settings:
    return Settings(_env_file=None, embedding_provider="local", **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
async def onnx() -> OnnxEmbedder:
    embedder = await OnnxEmbedder.create(MINILM, 384, models_dir=MODELS, threads=1)
    yield embedder
    await embedder.aclose()


async def test_onnx_vectors_are_the_torch_models_vectors(
    onnx: OnnxEmbedder, local_embedder: LocalEmbedder
):
    fast = np.array(await onnx.embed(TEXTS))
    slow = np.array(await local_embedder.embed(TEXTS))

    assert fast.shape == (6, 384)
    assert np.round(np.linalg.norm(fast, axis=1), 5).tolist() == [1.0] * 6
    # float32 through another kernel library: equal to the sixth decimal of the cosine
    assert np.round((fast * slow).sum(axis=1), 5).tolist() == [1.0] * 6
    assert (onnx.provider, onnx.model, onnx.runtime, onnx.threads) == ("local", MINILM, "onnx", 1)


async def test_a_batch_of_mixed_lengths_keeps_its_order(onnx: OnnxEmbedder):
    # 70 texts: three chunks, run shortest first; each vector must come back to its text.
    texts = [f"memory number {i} " + "word " * (i % 13) * 9 for i in range(70)]
    together = np.array(await onnx.embed(texts))
    alone = np.array([(await onnx.embed([t]))[0] for t in texts])

    assert np.abs(together - alone).max() < 1e-5
    assert len({tuple(np.round(v, 4)) for v in together}) == 70


async def test_the_export_is_made_once_and_reused(tmp_path: Path):
    first = await asyncio.to_thread(ensure_exported, MINILM, tmp_path)
    written = (first / MANIFEST).stat().st_mtime_ns
    again = await asyncio.to_thread(ensure_exported, MINILM, tmp_path)

    assert again == first
    assert (first / MANIFEST).stat().st_mtime_ns == written
    assert sorted(p.name for p in first.iterdir()) == [MANIFEST, "model.onnx", "tokenizer.json"]
    assert json.loads((first / MANIFEST).read_text())["max_seq_length"] == 256
    assert [p.name for p in (tmp_path / "onnx").iterdir()] == [first.name]


async def test_two_processes_exporting_at_once_export_once_and_both_get_it(tmp_path: Path):
    code = (
        "import logging, sys; from pathlib import Path; "
        "from app.embeddings.onnx_model import ensure_exported; "
        "logging.basicConfig(level=logging.INFO); "
        f"print(ensure_exported({MINILM!r}, Path(sys.argv[1])))"
    )

    async def export() -> tuple[str, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            code,
            str(tmp_path),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()
        return out.decode().strip(), err.decode()

    (a, a_log), (b, b_log) = await asyncio.gather(export(), export())

    assert a == b
    # one made it while the other waited for it, instead of both spending an export's CPU
    assert (a_log + b_log).count("exporting the embedding model") == 1, a_log + b_log
    # no half-written temporary folder is left beside the one export
    assert [p.name for p in (tmp_path / "onnx").iterdir()] == [Path(a).name]
    embedder = await OnnxEmbedder.create(MINILM, 384, models_dir=tmp_path)
    assert len((await embedder.embed(["ok"]))[0]) == 384
    await embedder.aclose()


async def test_threads_of_one_process_export_once(tmp_path: Path):
    a, b = await asyncio.gather(
        asyncio.to_thread(ensure_exported, MINILM, tmp_path),
        asyncio.to_thread(ensure_exported, MINILM, tmp_path),
    )

    assert a == b
    assert [p.name for p in (tmp_path / "onnx").iterdir()] == [a.name]


async def test_int8_is_another_model_name_and_other_vectors(onnx: OnnxEmbedder):
    int8 = await OnnxEmbedder.create(MINILM, 384, models_dir=MODELS, threads=1, quantized=True)
    fast = np.array(await onnx.embed(TEXTS))
    small = np.array(await int8.embed(TEXTS))
    cosines = (fast * small).sum(axis=1)

    assert (int8.model, int8.runtime) == (f"{MINILM}@int8v2", "onnx-int8")
    assert cosines.min() > 0.9  # close, but not the same vectors: a database needs reembed
    assert cosines.min() < 0.999
    await int8.aclose()


async def test_a_dimension_other_than_the_models_is_refused():
    with pytest.raises(DimensionMismatch, match="HTM_EMBEDDING_DIMENSION=384"):
        await OnnxEmbedder.create(MINILM, 768, models_dir=MODELS)


def test_the_thread_budget_leaves_cores_to_the_store():
    assert [default_threads(n) for n in (1, 2, 3, 4, 8, 16, 64)] == [1, 1, 1, 2, 4, 4, 4]


async def test_the_default_local_provider_runs_int8_onnx_with_the_budgeted_threads():
    embedder = await build_embedder(settings(embedding_threads=2))

    assert isinstance(embedder, MicroBatcher)
    assert isinstance(embedder.embedder, OnnxEmbedder)
    assert describe(embedder) == {
        "provider": "local",
        "model": f"{MINILM}@int8v2",
        "dimension": 384,
        "runtime": "onnx-int8",
        "threads": 2,
    }
    await embedder.aclose()


async def test_runtime_torch_is_sentence_transformers():
    embedder = await build_embedder(settings(embedding_runtime="torch", embedding_threads=1))

    assert isinstance(embedder, MicroBatcher)
    assert isinstance(embedder.embedder, LocalEmbedder)
    assert describe(embedder)["runtime"] == "torch"
    await embedder.aclose()


def _cls_pooled_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "cls-model"
    shutil.copytree(resolve(MINILM, tmp_path), folder)
    pooling = folder / "1_Pooling" / "config.json"
    config = json.loads(pooling.read_text())
    config.update(pooling_mode_mean_tokens=False, pooling_mode_cls_token=True)
    pooling.write_text(json.dumps(config))
    return folder


async def test_a_model_onnx_cannot_pool_runs_on_torch_under_auto(tmp_path: Path):
    folder = _cls_pooled_copy(tmp_path)

    with pytest.raises(EmbeddingError, match="only mean pooling"):
        await build_embedder(settings(embedding_model=str(folder), embedding_runtime="onnx"))
    embedder = await build_embedder(settings(embedding_model=str(folder)))
    assert describe(embedder)["runtime"] == "torch"
    await embedder.aclose()


async def test_readyz_names_the_runtime_and_its_threads(app_factory):
    async with app_factory(embedding_provider="local", embedding_threads=1) as client:
        r = await client.get("/readyz")

    assert r.status_code == 200
    assert r.json()["embedding"] == {
        "provider": "local",
        "model": f"{MINILM}@int8v2",
        "dimension": 384,
        "runtime": "onnx-int8",
        "threads": 1,
        "loaded": True,
    }
