"""`python -m evals.model_check`: int8 quantisations of the local model against the float
model, on the eval's sets, without the service: a few minutes per candidate where the eval
takes ~15 minutes a set.

Each set and mode of the eval (conv docs / content-only, facts, realtalk docs / content-only)
is turned into what the service would embed for it: in `docs` mode a conversation turn's
vector input (app/memories/search_text.py `vector_input`, HTM_EMBED_TEXT's default: its speaker
and content), otherwise its content (`content-only` stores one memory for a
line said twice, as the service's `exact` dedupe does); each question as the vector list asks
it (the namespace's speakers' names taken out, app/conversation.py `without_names`). Every
text is embedded by the float export (`model.onnx`, as the service's `onnx` runtime) and by
each candidate; each question's top 10 within its dialogue by exact cosine gives recall@10 of
its evidence, and the candidate's vectors are compared with the float ones (cosine, top-10
agreement).

The figures are exact search: the service's HNSW scan and the eval's HTTP path are not in
them, so they compare models, and `make eval` confirms the one kept. Vectors are cached under
`.htm/model-check/` by candidate, so a rerun only embeds what changed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from evals.sets import SET_MODES, EvalSet, Unavailable, conv_set, facts_set, realtalk_set

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / ".htm" / "model-check"
MODELS_DIR = ROOT / ".htm" / "models"
MODEL, DIM = "all-MiniLM-L6-v2", 384
# What the service embeds of a conversation turn by default (HTM_EMBED_TEXT).
EMBED_TEXT = "speaker"
SETS: dict[str, Callable[..., EvalSet]] = {
    "conv": conv_set,
    "facts": facts_set,
    "realtalk": realtalk_set,
}


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --- what the service embeds ------------------------------------------------------------


def searched_texts(es: EvalSet) -> dict[str, tuple[list[str], list[str]]]:
    """Per group: (the stored memories' keys, the texts the service embeds for them)."""
    from app.conversation import session_of, speaker_of
    from app.memories.search_text import _build, vector_input
    from app.memories.turn_repository import Turn

    out: dict[str, tuple[list[str], list[str]]] = {}
    for group, docs in es.groups.items():
        keys: list[str] = []
        texts: list[str] = []
        seen: set[str] = set()
        last: dict[str, Turn] = {}  # session -> its latest turn (docs load in time order)
        order = sorted(range(len(docs)), key=lambda i: (docs[i].created_at or "", i))
        for i in order:
            d = docs[i]
            speaker, session = speaker_of(d.metadata), session_of(d.metadata)
            if speaker is None and session is None:
                if d.content in seen:  # the `exact` dedupe of a non-conversation memory
                    continue
                seen.add(d.content)
                keys.append(d.key)
                texts.append(d.content)
                continue
            at = datetime.fromisoformat(str(d.created_at).replace("Z", "+00:00"))
            previous = last.get(str(session)) if session is not None else None
            text = _build("contextual", d.content, at, speaker=speaker, previous=previous)
            if session is not None:
                last[str(session)] = Turn(speaker, d.content)
            keys.append(d.key)
            texts.append(vector_input(d.content, d.metadata, text, EMBED_TEXT))
        out[group] = (keys, texts)
    return out


def question_texts(es: EvalSet) -> list[str]:
    """Each question as the vector list asks it (recall_vector_query `without_speakers`)."""
    from app.conversation import named_in, speaker_of, without_names

    speakers: dict[str, list[str]] = {}
    for group, docs in es.groups.items():
        names = {s for d in docs if (s := speaker_of(d.metadata)) is not None}
        speakers[group] = sorted(names)
    return [without_names(q.text, named_in(q.text, speakers[q.group])) for q in es.questions]


# --- candidates ---------------------------------------------------------------------------


def _quantize_dynamic(src: Path, dst: Path, **options: Any) -> None:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    extra = {"DefaultTensorType": onnx.TensorProto.FLOAT} | options.pop("extra", {})
    quantize_dynamic(
        str(src),
        str(dst),
        weight_type=options.pop("weight_type", QuantType.QInt8),
        extra_options=extra,
        **options,
    )


def _names(src: Path, *parts: str) -> list[str]:
    """The MatMul nodes with a weight whose name holds any of `parts`."""
    import onnx

    graph = onnx.load(str(src)).graph
    weights = {i.name for i in graph.initializer}
    return [
        n.name
        for n in graph.node
        if n.op_type == "MatMul" and n.input[1] in weights and any(p in n.name for p in parts)
    ]


def _static(src: Path, dst: Path, *, per_channel: bool, fmt: str) -> None:
    """Static quantization calibrated on generic text (the bench's memories and questions,
    not the eval's sets)."""
    import numpy as np
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process
    from tokenizers import Tokenizer

    from bench.dataset import scale_memories, scale_questions

    texts = scale_memories(7, 192).contents + scale_questions(7, 64).texts
    tokenizer = Tokenizer.from_file(str(src.parent / "tokenizer.json"))
    tokenizer.enable_truncation(256)
    tokenizer.enable_padding()
    inputs = json.loads((src.parent / "htm-onnx.json").read_text())["inputs"]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            feeds = []
            for i in range(0, len(texts), 16):
                enc = tokenizer.encode_batch(texts[i : i + 16])
                feed = {
                    "input_ids": np.array([e.ids for e in enc], dtype=np.int64),
                    "attention_mask": np.array([e.attention_mask for e in enc], dtype=np.int64),
                }
                if "token_type_ids" in inputs:
                    feed["token_type_ids"] = np.array([e.type_ids for e in enc], dtype=np.int64)
                feeds.append(feed)
            self._it = iter(feeds)

        def get_next(self) -> dict[str, Any] | None:
            return next(self._it, None)

    pre = dst.with_suffix(".pre.onnx")
    quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
    quantize_static(
        str(pre),
        str(dst),
        Reader(),
        quant_format=QuantFormat.QDQ if fmt == "qdq" else QuantFormat.QOperator,
        per_channel=per_channel,
        op_types_to_quantize=["MatMul"],
        activation_type=QuantType.QUInt8 if fmt != "qdq" else QuantType.QInt8,
        weight_type=QuantType.QInt8,
        extra_options={
            "DefaultTensorType": onnx.TensorProto.FLOAT,
            "ActivationSymmetric": fmt == "qdq",
        },
    )
    pre.unlink(missing_ok=True)


def _smoothed(src: Path, dst: Path, *, parts: tuple[str, ...], alpha: float) -> None:
    """SmoothQuant (Xiao et al., 2023) on the MatMuls whose name holds any of `parts`: each
    input channel j of the activation is divided by s_j = max|X_j|^alpha / max|W_j|^(1-alpha)
    (a Mul inserted before the MatMul) and the weight's row j multiplied by it, so that the
    product is the same and the activation's outlier channels no longer set the scale of its
    per-tensor int8 quantization. max|X_j| is calibrated on generic text (the bench's
    memories and questions, not the eval's sets)."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper
    from tokenizers import Tokenizer

    from bench.dataset import scale_memories, scale_questions

    model = onnx.load(str(src))
    graph = model.graph
    weights = {i.name: i for i in graph.initializer}
    targets = [
        n
        for n in graph.node
        if n.op_type == "MatMul" and n.input[1] in weights and any(p in n.name for p in parts)
    ]
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    for n in targets:
        probe.graph.output.append(helper.make_tensor_value_info(n.input[0], 1, None))
    import onnxruntime as ort

    session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    folder = src.parent
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.enable_truncation(256)
    tokenizer.enable_padding()
    inputs = json.loads((folder / "htm-onnx.json").read_text())["inputs"]
    texts = scale_memories(7, 192).contents + scale_questions(7, 64).texts
    peak: dict[str, Any] = {}
    names = [n.input[0] for n in targets]
    for i in range(0, len(texts), 16):
        enc = tokenizer.encode_batch(texts[i : i + 16])
        mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
        feed = {"input_ids": np.array([e.ids for e in enc], dtype=np.int64), "attention_mask": mask}
        if "token_type_ids" in inputs:
            feed["token_type_ids"] = np.array([e.type_ids for e in enc], dtype=np.int64)
        outs = session.run(names, feed)
        for name, x in zip(names, outs, strict=True):
            m = np.abs(x[mask.astype(bool)]).max(axis=0)  # real tokens only
            peak[name] = m if name not in peak else np.maximum(peak[name], m)
    for k, n in enumerate(targets):
        w = numpy_helper.to_array(weights[n.input[1]])
        s = (peak[n.input[0]] ** alpha) / (np.abs(w).max(axis=1) ** (1 - alpha))
        s = np.clip(s, 1e-5, None).astype(np.float32)
        weights[n.input[1]].CopyFrom(numpy_helper.from_array(w * s[:, None], n.input[1]))
        inv = f"htm_smooth_{k}"
        graph.initializer.append(numpy_helper.from_array((1 / s).astype(np.float32), inv))
        scaled = f"{n.input[0]}_smoothed_{k}"
        mul = helper.make_node("Mul", [n.input[0], inv], [scaled], name=f"{n.name}_smooth")
        graph.node.insert(list(graph.node).index(n), mul)
        n.input[0] = scaled
    smooth = dst.with_suffix(".smooth.onnx")
    onnx.save(model, str(smooth))
    _quantize_dynamic(smooth, dst, per_channel=True, op_types_to_quantize=["MatMul"])
    smooth.unlink(missing_ok=True)


def candidates(src: Path) -> dict[str, Callable[[Path], None]]:
    """name -> build the candidate's int8 graph into a path."""
    from onnxruntime.quantization import QuantType

    mm = {"op_types_to_quantize": ["MatMul"]}
    return {
        # the service's onnx-int8 today: every MatMul with a weight and the embeddings' Gathers
        "dyn-pc": lambda d: _quantize_dynamic(src, d, per_channel=True),
        "dyn-pt": lambda d: _quantize_dynamic(src, d, per_channel=False),
        "dyn-pc-rr": lambda d: _quantize_dynamic(src, d, per_channel=True, reduce_range=True),
        # the MatMuls only: the embedding tables stay float (a lookup, no arithmetic to save)
        "dyn-pc-mm": lambda d: _quantize_dynamic(src, d, per_channel=True, **mm),
        "dyn-pt-mm": lambda d: _quantize_dynamic(src, d, per_channel=False, **mm),
        "dyn-pc-mm-rr": lambda d: _quantize_dynamic(
            src, d, per_channel=True, reduce_range=True, **mm
        ),
        "dyn-pc-mm-u8": lambda d: _quantize_dynamic(
            src, d, per_channel=True, weight_type=QuantType.QUInt8, **mm
        ),
        # ... and the last layer float
        "dyn-pc-mm-nolast": lambda d: _quantize_dynamic(
            src, d, per_channel=True, nodes_to_exclude=_names(src, "layer.5/"), **mm
        ),
        # ... and the FFN's down projection (the GELU's output, wide-ranged) float
        "dyn-pc-mm-noffnout": lambda d: _quantize_dynamic(
            src, d, per_channel=True, nodes_to_exclude=_names(src, "/output/dense/"), **mm
        ),
        # ... the FFN's down projection only
        "dyn-pc-mm-noffn2": lambda d: _quantize_dynamic(
            src,
            d,
            per_channel=True,
            nodes_to_exclude=[n for n in _names(src, "/output/dense/") if "attention" not in n],
            **mm,
        ),
        # ... the first layer's FFN
        "dyn-pc-mm-no0ffn": lambda d: _quantize_dynamic(
            src,
            d,
            per_channel=True,
            nodes_to_exclude=[n for n in _names(src, "/dense/") if "layer.0/" in n],
            **mm,
        ),
        # ... and the attention's projections float (the FFN only int8)
        "dyn-pc-mm-ffn": lambda d: _quantize_dynamic(
            src, d, per_channel=True, nodes_to_exclude=_names(src, "/attention/"), **mm
        ),
        # SmoothQuant on the FFN's MatMuls (where the error is: one FFN projection alone
        # quantized costs ~10x one attention projection's cosine), or on every MatMul
        "smooth-ffn": lambda d: _smoothed(
            src, d, parts=("/intermediate/dense/", "/output/dense/"), alpha=0.5
        ),
        "smooth-all": lambda d: _smoothed(src, d, parts=("/",), alpha=0.5),
        "static-qdq-pc": lambda d: _static(src, d, per_channel=True, fmt="qdq"),
        "static-qop-pc": lambda d: _static(src, d, per_channel=True, fmt="qop"),
    }


# --- embedding ----------------------------------------------------------------------------


def _session(path: Path, threads: int) -> Any:
    import onnxruntime as ort

    from app.embeddings.onnx_model import session_options

    return ort.InferenceSession(
        str(path), session_options(threads), providers=["CPUExecutionProvider"]
    )


def embed_all(path: Path, texts: list[str], threads: int) -> Any:
    """Vectors for `texts` (unit, float32) by the graph at `path`, as the service runs it."""
    import numpy as np
    from tokenizers import Tokenizer

    from app.embeddings.onnx_model import MANIFEST, OnnxEmbedder

    folder = path.parent if (path.parent / MANIFEST).exists() else _export_folder()
    manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.enable_truncation(int(manifest["max_seq_length"]))
    tokenizer.enable_padding()
    embedder = OnnxEmbedder(
        MODEL, DIM, _session(path, threads), tokenizer=tokenizer, inputs=manifest["inputs"]
    )
    out = np.empty((len(texts), DIM), dtype=np.float32)
    step = 512
    for i in range(0, len(texts), step):
        out[i : i + step] = embedder._encode(texts[i : i + step])
    return out


def _export_folder() -> Path:
    from app.embeddings.onnx_model import ensure_exported

    return ensure_exported(MODEL, MODELS_DIR)


def vectors_for(name: str, path: Path, texts: list[str], threads: int) -> Any:
    import numpy as np

    digest = hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:16]
    cache = WORK / f"{name}-{digest}.npy"
    if cache.exists():
        return np.load(cache)
    t0 = time.monotonic()
    v = embed_all(path, texts, threads)
    say(f"  {name}: {len(texts)} texts in {time.monotonic() - t0:.0f} s")
    np.save(cache, v)
    return v


# --- scoring ------------------------------------------------------------------------------


def score(
    es: EvalSet,
    groups: dict[str, tuple[list[str], list[str]]],
    index: dict[str, int],
    questions: list[str],
    base: Any,
    cand: Any,
) -> dict[str, Any]:
    """Recall@10 of the float model and the candidate, top-10 agreement, cosines."""
    import numpy as np

    rows: dict[str, list[int]] = {g: [index[t] for t in texts] for g, (_, texts) in groups.items()}
    recall = {"fp32": [], "int8": [], "mixed": []}
    agree = []
    for q, text in zip(es.questions, questions, strict=True):
        keys, _ = groups[q.group]
        ix = np.array(rows[q.group])
        qi = index[text]
        evidence = set(q.evidence)
        tops = {}
        for label, docs_v, q_v in (
            ("fp32", base, base),
            ("int8", cand, cand),
            ("mixed", base, cand),  # int8 questions against float vectors: an unreembedded db
        ):
            s = docs_v[ix] @ q_v[qi]
            top = np.argsort(-s, kind="stable")[:10]
            tops[label] = set(int(t) for t in top)
            recall[label].append(len({keys[t] for t in top} & evidence) / len(evidence))
        agree.append(len(tops["fp32"] & tops["int8"]) / 10)
    used = sorted({i for r in rows.values() for i in r} | {index[t] for t in questions})
    cos = (base[used] * cand[used]).sum(axis=1)
    r = {k: float(np.mean(v)) for k, v in recall.items()}
    diff = np.array(recall["int8"]) - np.array(recall["fp32"])
    se = float(diff.std(ddof=1) / np.sqrt(len(diff))) if len(diff) > 1 else 0.0
    return {
        "questions": len(es.questions),
        "memories": sum(len(k) for k, _ in groups.values()),
        "recall_fp32": r["fp32"],
        "recall_int8": r["int8"],
        "delta": r["int8"] - r["fp32"],
        "delta_se": se,  # the standard error of the per-question paired difference
        "recall_mixed": r["mixed"],
        "agreement": float(np.mean(agree)),
        "cosine_mean": float(cos.mean()),
        "cosine_min": float(cos.min()),
    }


def _embedder(path: Path, threads: int) -> Any:
    from tokenizers import Tokenizer

    from app.embeddings.onnx_model import MANIFEST, OnnxEmbedder

    folder = _export_folder()
    manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.enable_truncation(int(manifest["max_seq_length"]))
    tokenizer.enable_padding()
    return OnnxEmbedder(
        MODEL, DIM, _session(path, threads), tokenizer=tokenizer, inputs=manifest["inputs"]
    )


def speed(paths: dict[str, Path], threads: int, n: int = 300) -> dict[str, Any]:
    """One question at a time (a recall's fresh question), each graph in rotating order
    question by question, so that the machine's other load falls on all alike: p50 ms, and
    the p50 of each question's time over the float model's for the same question."""
    import statistics

    from bench.dataset import scale_questions

    questions = scale_questions(11, n).texts
    embedders = {name: _embedder(path, threads) for name, path in paths.items()}
    times: dict[str, list[float]] = {name: [] for name in paths}
    names = list(paths)
    for e in embedders.values():
        e._encode(questions[:5])  # warm-up
    for i, q in enumerate(questions):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            t0 = time.perf_counter()
            embedders[name]._encode([q])
            times[name].append((time.perf_counter() - t0) * 1000)
    base = times["fp32"]
    return {
        name: {
            "p50_ms": statistics.median(t),
            "ratio_to_fp32": statistics.median(a / b for a, b in zip(t, base, strict=True)),
        }
        for name, t in times.items()
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m evals.model_check", description=__doc__)
    p.add_argument("--candidates", default="dyn-pc,dyn-pc-mm", help="comma-separated")
    p.add_argument("--list", action="store_true", help="list the candidates and exit")
    p.add_argument("--sets", default="conv,facts,realtalk")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per session")
    p.add_argument("--out", type=Path, help="write the figures (JSON) here too")
    p.add_argument(
        "--speed", action="store_true", help="time one question at a time instead (no sets)"
    )
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    folder = _export_folder()
    src = folder / "model.onnx"
    builders = candidates(src)
    if args.list:
        print("\n".join(builders))
        return 0
    WORK.mkdir(parents=True, exist_ok=True)
    names = args.candidates.split(",")
    for name in names:
        path = WORK / f"{name}.onnx"
        if not path.exists():
            t0 = time.monotonic()
            builders[name](path)
            say(f"  built {name} in {time.monotonic() - t0:.0f} s ({path.stat().st_size >> 20} MB)")
    if args.speed:
        timed = speed({"fp32": src} | {n: WORK / f"{n}.onnx" for n in names}, args.threads)
        for name, t in timed.items():
            say(f"{name:20} one question p50 {t['p50_ms']:.2f} ms, {t['ratio_to_fp32']:.2f}x fp32")
        if args.out:
            args.out.write_text(json.dumps(timed, indent=1))
        return 0
    evalsets: list[tuple[str, EvalSet]] = []
    for name in args.sets.split(","):
        for mode in SET_MODES[name]:
            try:
                evalsets.append((f"{name}/{mode}", SETS[name](mode=mode)))
            except Unavailable as exc:
                say(f"{name}: skipped ({exc})")
    prepared = []
    unique: dict[str, int] = {}
    for label, es in evalsets:
        groups = searched_texts(es)
        questions = question_texts(es)
        for _, texts in groups.values():
            for t in texts:
                unique.setdefault(t, len(unique))
        for t in questions:
            unique.setdefault(t, len(unique))
        prepared.append((label, es, groups, questions))
    texts = list(unique)
    say(f"{len(texts)} distinct texts over {len(prepared)} set/modes")
    base = vectors_for("fp32", src, texts, args.threads)
    results: dict[str, Any] = {}
    for name in names:
        path = WORK / f"{name}.onnx"
        cand = vectors_for(name, path, texts, args.threads)
        rows = {
            label: score(es, groups, unique, questions, base, cand)
            for label, es, groups, questions in prepared
        }
        worst = min(r["delta"] for r in rows.values())
        results[name] = {"rows": rows, "worst_delta": worst, "mb": path.stat().st_size / 2**20}
        for label, r in rows.items():
            say(
                f"{name:20} {label:22} R@10 fp32 {r['recall_fp32']:.4f} int8 "
                f"{r['recall_int8']:.4f} ({r['delta']:+.4f} ±{r['delta_se']:.4f}) "
                f"mixed {r['recall_mixed']:.4f} "
                f"agree {r['agreement']:.3f} cos {r['cosine_mean']:.5f} min {r['cosine_min']:.4f}"
            )
        say(f"{name:20} worst delta {worst:+.4f}")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
