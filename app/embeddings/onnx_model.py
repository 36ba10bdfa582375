"""The local model through ONNX Runtime: exported once from the local weights, then run
without torch.

A sentence-transformers folder (the packaged all-MiniLM-L6-v2, all-mpnet-base-v2, or a
folder by path) whose pipeline is a transformer, mean pooling and normalisation is exported
on first use into `<models_dir>/onnx/<name>-<fingerprint>/` (the transformer and the pooling
in one graph), with its `tokenizer.json` beside it: a BERT (the packaged MiniLM) written from
its weights by app/embeddings/onnx_bert.py, without torch (the same graph and vectors as
torch's export, ~2 s); any other model by `torch.onnx.export` (the `torch` extra).
Later starts, and every other process, load that folder: no torch, no transformers, only
onnxruntime and the tokenizers library. The fingerprint is taken from the source folder's
configuration and file sizes, so other weights get another folder. Processes starting
together export once: the first takes a lock on the `onnx` folder, the others wait for it and
load its export; an export is written to a temporary folder and renamed into place, so none
ever reads half of one.

`quantized=True` runs an int8 copy (`_quantize`: onnxruntime's dynamic quantization, weights
per channel, of every MatMul but each layer's two output projections; the default runtime,
app/embeddings/factory.py): a lone question in ~0.66x the float model's time, the eval's
exact-search recall@10 within 0.005 of the float model's on every set
(evals/results/2026-12-07-int8.md). Its vectors differ from the float model's (cosine ~0.996,
and activations quantized per batch move a text's vector with its batch companions), so it
records them under another model name (`<model>@int8v2`), and a database embedded with the
float model needs `htm reembed` to move to it.

Inference runs on one dedicated thread, with `threads` intra-op threads and no spinning
(idle ORT threads would otherwise busy-wait for work, taking CPU from PostgreSQL and the
event loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import app.embeddings.packaged as packaged
from app.embeddings.base import EmbeddingError
from app.embeddings.in_process import InProcessModel, dimension_mismatch

log = logging.getLogger(__name__)

# The int8 model records its vectors as `<model>@int8v2` (the first recipe's were `@int8`:
# other vectors, so `htm reembed` tells them apart).
INT8_SUFFIX = "@int8v2"
MODEL_FILE = "model.onnx"
# The int8 copy's file: named anew when its recipe (`_quantize`) changes, so that an older
# copy is not taken for it (model-int8.onnx: every MatMul and the embeddings, until 2026-12).
INT8_FILE = "model-int8-2.onnx"
MANIFEST = "htm-onnx.json"
# Bump when the exported graph changes: older folders are then exported again.
EXPORT_VERSION = 1
MEAN_POOLING = "sentence_transformers.models.Pooling"
# Texts per forward pass: a batch is run in chunks of similar length.
CHUNK = 32
_EXPORTING = threading.Lock()


def available() -> bool:
    """Whether onnxruntime and the tokenizers library can be imported (the `local` extra)."""
    try:
        import onnxruntime  # noqa: F401
        import tokenizers  # noqa: F401
    except ImportError:
        return False
    return True


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _pipeline(source: Path) -> tuple[int, bool]:
    """(max_seq_length, normalize) of a sentence-transformers folder this module can export:
    a transformer, mean pooling, optionally normalisation. EmbeddingError otherwise."""
    modules = _read_json(source / "modules.json") if (source / "modules.json").exists() else None
    if not modules:
        raise EmbeddingError(f"{source} is not a sentence-transformers model folder")
    kinds = [m.get("type", "") for m in modules]
    normalize = kinds[-1].endswith(".Normalize")
    body = kinds[:-1] if normalize else kinds
    if len(body) != 2 or not body[0].endswith(".Transformer") or body[1] != MEAN_POOLING:
        raise EmbeddingError(f"{source}: only transformer + pooling models export to ONNX")
    pooling = _read_json(source / modules[1]["path"] / "config.json")
    modes = {k for k, v in pooling.items() if k.startswith("pooling_mode_") and v}
    if modes != {"pooling_mode_mean_tokens"}:
        raise EmbeddingError(f"{source}: only mean pooling exports to ONNX")
    config = source / "sentence_bert_config.json"
    max_len = _read_json(config).get("max_seq_length", 512) if config.exists() else 512
    return int(max_len), normalize


def fingerprint(source: Path) -> str:
    """A digest of the folder's configuration files and the sizes of all its files."""
    h = hashlib.sha256(f"export-{EXPORT_VERSION}".encode())
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        rel = path.relative_to(source).as_posix()
        h.update(f"{rel}:{path.stat().st_size}\n".encode())
        if path.suffix == ".json" or path.name == "vocab.txt":
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _export(source: Path, into: Path, max_len: int, normalize: bool) -> None:
    """Export the transformer with mean pooling (and normalisation) into `into` (blocking).
    A BERT with its tokenizer.json (the packaged all-MiniLM-L6-v2) is written from its
    weights without torch (app/embeddings/onnx_bert.py: the same graph and vectors); any
    other model is exported by torch."""
    import app.embeddings.onnx_bert as onnx_bert

    if onnx_bert.supported(source) and (source / "tokenizer.json").exists():
        names = onnx_bert.build(source, into, normalize)
        shutil.copy(source / "tokenizer.json", into / "tokenizer.json")
        _manifest(into, names, max_len)
    else:
        _export_with_torch(source, into, max_len, normalize)


def _manifest(into: Path, names: list[str], max_len: int) -> None:
    (into / MANIFEST).write_text(
        json.dumps({"inputs": names, "max_seq_length": max_len, "version": EXPORT_VERSION}),
        encoding="utf-8",
    )


def _export_with_torch(source: Path, into: Path, max_len: int, normalize: bool) -> None:
    """torch.onnx.export of the model (needs torch and transformers: the `torch` extra)."""
    try:
        import torch
    except ImportError as exc:
        raise EmbeddingError(
            f"{source}: exporting this model to ONNX needs torch (pip install "
            "'htm-service[torch]'); only BERT models with a tokenizer.json export without it"
        ) from exc
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(str(source))
    model = AutoModel.from_pretrained(str(source)).eval()
    if not (source / "tokenizer.json").exists():
        tokenizer.save_pretrained(str(into))  # a fast tokenizer writes tokenizer.json
    else:
        shutil.copy(source / "tokenizer.json", into / "tokenizer.json")
    uses_types = "token_type_ids" in tokenizer.model_input_names

    class Pooled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *inputs: Any) -> Any:
            ids, mask = inputs[0], inputs[1]
            kwargs = {"input_ids": ids, "attention_mask": mask}
            if uses_types:
                kwargs["token_type_ids"] = inputs[2]
            out = self.model(**kwargs).last_hidden_state
            weights = mask.unsqueeze(-1).to(out.dtype)
            pooled = (out * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1) if normalize else pooled

    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if uses_types else [])
    sample = tokenizer(["an example", "another, longer example"], padding=True, return_tensors="pt")
    axes = {n: {0: "batch", 1: "sequence"} for n in names} | {"embedding": {0: "batch"}}
    # The exporter warns about every traced branch of the model's Python; none is ours to fix.
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Pooled(),
            tuple(sample[n] for n in names),
            str(into / MODEL_FILE),
            input_names=names,
            output_names=["embedding"],
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )
    _manifest(into, names, max_len)


def _kept_float(name: str) -> bool:
    """The MatMuls whose int8 error reaches the vectors most: each layer's projections back
    to the hidden size (attention output and FFN output dense)."""
    return "/output/dense/" in name


def float_matmuls(model: Any) -> list[str]:
    """The MatMuls the int8 copy keeps in float (FLOAT_MATMULS' rule), by node name."""
    weights = {i.name for i in model.graph.initializer}
    return [
        n.name
        for n in model.graph.node
        if n.op_type == "MatMul" and n.input[1] in weights and _kept_float(n.name)
    ]


def _quantize(folder: Path) -> None:
    """The int8 copy: onnxruntime's dynamic quantization, weights per output channel, of the
    MatMuls with a weight but those `float_matmuls` names; the embedding tables stay float
    (a lookup: nothing to gain). How it was chosen: evals/results/2026-12-07-int8.md."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    tmp = folder / f".{INT8_FILE}.{os.getpid()}"
    with _quiet_root():
        quantize_dynamic(
            str(folder / MODEL_FILE),
            str(tmp),
            weight_type=QuantType.QInt8,
            per_channel=True,
            op_types_to_quantize=["MatMul"],
            nodes_to_exclude=float_matmuls(onnx.load(str(folder / MODEL_FILE))),
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
    os.replace(tmp, folder / INT8_FILE)


class _ErrorsOnly(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR


@contextlib.contextmanager
def _quiet_root() -> Iterator[None]:
    """onnxruntime's quantizer logs through the root logger itself (`logging.info`), a line
    per tensor it skips or scales (25 for MiniLM) and a warning to pre-process the model
    (for its static quantization, not this dynamic one): kept to its errors while it runs.
    Only records logged on the root logger are filtered, not those of named loggers."""
    root, quiet = logging.getLogger(), _ErrorsOnly()
    root.addFilter(quiet)
    try:
        yield
    finally:
        root.removeFilter(quiet)


def _source(model: str, models_dir: Path) -> tuple[Path, Path]:
    """(the model's sentence-transformers folder, the folder its export goes to)."""
    source = Path(packaged.resolve(model, models_dir))
    if not source.is_dir():
        raise EmbeddingError(f"local embedding model {model!r}: no model folder at {source}")
    name = packaged.canonical(model) or source.name
    return source, models_dir / "onnx" / f"{name}-{fingerprint(source)}"


def session_options(threads: int) -> Any:
    """ONNX Runtime's options as the service runs the model: `threads` intra-op threads,
    sequential, no spinning between runs, quiet."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3
    return options


def exported(model: str, models_dir: Path, *, quantized: bool = False) -> bool:
    """Whether `model`'s export (and its int8 copy when `quantized`) is already made
    (EmbeddingError: a model this module cannot export)."""
    source, folder = _source(model, models_dir)
    _pipeline(source)
    return (folder / MANIFEST).exists() and (not quantized or (folder / INT8_FILE).exists())


def ensure_exported(model: str, models_dir: Path, *, quantized: bool = False) -> Path:
    """The folder holding `model`'s ONNX export (and its int8 copy when `quantized`),
    exporting it first if needed. Blocking: run it in a thread."""
    source, folder = _source(model, models_dir)
    max_len, normalize = _pipeline(source)
    name = packaged.canonical(model) or source.name
    root = folder.parent
    root.mkdir(parents=True, exist_ok=True)
    # One export at a time: in this process (torch's exporter keeps global state) and across
    # processes starting together (several `htm serve`), which would otherwise each spend a
    # whole export's CPU at once; the ones that waited find it made.
    with _EXPORTING, _locked(root):
        if not (folder / MANIFEST).exists():
            _export_into(root, folder, source, name=name, max_len=max_len, normalize=normalize)
        if quantized and not (folder / INT8_FILE).exists():
            _quantize(folder)
    return folder


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """An exclusive flock on `directory`, across processes."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _export_into(
    root: Path, folder: Path, source: Path, *, name: str, max_len: int, normalize: bool
) -> None:
    """Export into a temporary folder, then rename it into place: a process that dies in
    the middle leaves no half of an export where a later one would take it as whole."""
    work = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
    try:
        log.info("exporting the embedding model %s to ONNX in %s", name, folder)
        _export(source, work, max_len, normalize)
        try:
            work.rename(folder)
        except OSError:
            if not (folder / MANIFEST).exists():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


class OnnxEmbedder(InProcessModel):
    """A sentence-transformers model exported to ONNX, run on CPU in this process.

    Build it with `await OnnxEmbedder.create(...)`.
    """

    def __init__(
        self, model: str, dimension: int, session: Any, *, tokenizer: Any, inputs: list[str]
    ) -> None:
        super().__init__(model, dimension)
        self.runtime = "onnx-int8" if model.endswith(INT8_SUFFIX) else "onnx"
        self._session = session
        self._tokenizer = tokenizer
        self._inputs = inputs

    @property
    def threads(self) -> int:
        return int(self._session.get_session_options().intra_op_num_threads)

    @classmethod
    async def create(
        cls,
        model: str,
        dimension: int,
        *,
        models_dir: Path,
        threads: int = 1,
        quantized: bool = False,
    ) -> OnnxEmbedder:
        try:
            embedder = await asyncio.to_thread(
                cls._load, model, dimension, models_dir, threads=threads, quantized=quantized
            )
        except EmbeddingError:
            raise
        except Exception as exc:  # a failed export, an unreadable graph
            raise EmbeddingError(
                f"local embedding model {model!r} could not be loaded with ONNX Runtime: {exc}"
            ) from exc
        return embedder

    @classmethod
    def _load(
        cls, model: str, dimension: int, models_dir: Path, *, threads: int, quantized: bool
    ) -> OnnxEmbedder:
        import numpy as np
        import onnxruntime as ort
        from tokenizers import Tokenizer

        folder = ensure_exported(model, models_dir, quantized=quantized)
        manifest = _read_json(folder / MANIFEST)
        session = ort.InferenceSession(
            str(folder / (INT8_FILE if quantized else MODEL_FILE)),
            session_options(threads),
            providers=["CPUExecutionProvider"],
        )
        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        tokenizer.enable_truncation(int(manifest["max_seq_length"]))
        tokenizer.enable_padding()
        name = packaged.canonical(model) or model
        embedder = cls(
            f"{name}{INT8_SUFFIX}" if quantized else name,
            dimension,
            session,
            tokenizer=tokenizer,
            inputs=[str(n) for n in manifest["inputs"]],
        )
        actual = int(np.asarray(embedder._encode(["dimension check"])).shape[1])
        if actual != dimension:
            raise dimension_mismatch(model, actual, dimension)
        return embedder

    def _encode(self, texts: list[str]) -> Any:
        """Vectors for texts, in order. Texts are run by length, CHUNK at a time, so a long
        text pads only its neighbours in length (as sentence-transformers does)."""
        import numpy as np

        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        for start in range(0, len(order), CHUNK):
            chunk = order[start : start + CHUNK]
            encodings = self._tokenizer.encode_batch([texts[i] for i in chunk])
            feed = {
                "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
                "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
            }
            if "token_type_ids" in self._inputs:
                feed["token_type_ids"] = np.array([e.type_ids for e in encodings], dtype=np.int64)
            vectors = self._session.run(None, feed)[0]
            if vectors.shape[1] != self.dimension:
                return vectors  # the caller reports the dimension
            out[chunk] = vectors
        return out
