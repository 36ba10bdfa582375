"""Loads a set and asks its questions, through the HTTP API only.

Each group of a set in a mode (a dialogue, a chat, or the facts set) goes into a namespace of
its own (`X-Namespace`: `<prefix><set>-<mode>-<group>`), so a recall only searches its own
dialogue: one turn, one memory, keyed by the turn's id, its content and metadata those of its
mode (sets.py). A configuration is a name and the extra fields it adds to every recall
request; a configuration whose requests are refused (say a field this API does not know yet:
422) is reported as failed, with the problem the service returned, and the run goes on.

Each question is asked twice: with `limit` 10 (R@5, R@10, MRR) and 20 (R@20). Not one list cut
twice: hybrid reads k + 2·limit candidates from each list (app/recall/fusion.py), so the top 10
of a limit-20 answer may differ from a limit-10 answer's; how often it does is reported.

A hit's `score`, `relevance` and `vector_similarity` are kept (for the floor calibration;
`min_score` compares `relevance`), and the turns
returned with a hit as its neighbours (`hit["neighbours"]`, a list of memories with a `key`,
or of keys) when the service returns them.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from evals.metrics import Outcome, breakdown
from evals.sets import Doc, EvalQuestion, EvalSet

ROBOT = "evals"
BATCH = 100
LIMIT = 10
DEEP_LIMIT = 20


@dataclass(frozen=True)
class Config:
    name: str
    fields: dict[str, Any]


BASELINE = [
    Config("vector", {"strategy": "vector"}),
    Config("fulltext", {"strategy": "fulltext"}),
    Config("hybrid", {"strategy": "hybrid"}),
    Config("default", {}),  # whatever the service does with a bare request
    # the same without a relevance floor: the floor calibration's hits (a service without
    # min_score refuses it, and the calibration falls back to the headline configuration)
    Config("default-no-floor", {"min_score": 0}),
]
QUESTION = "{query}"
SPEAKER = "{speaker}"
EVAL_FIELDS = frozenset({"query", "limit", "load_into_working_memory"})


def load_configs(path: Path) -> list[Config]:
    """A JSON file: a list of {"name": ..., "request": {...fields...}}, or an object
    {name: {...fields...}}."""
    raw = json.loads(path.read_text())
    items = raw.items() if isinstance(raw, dict) else ((c["name"], c["request"]) for c in raw)
    configs = [Config(str(name), dict(fields)) for name, fields in items]
    for c in configs:
        if EVAL_FIELDS & c.fields.keys():
            raise ValueError(f"config {c.name}: query, limit and working memory are the eval's")
    return configs


class Response(Protocol):
    status_code: int

    def json(self) -> Any: ...


class Client(Protocol):
    """bench.http.Http, or an httpx.AsyncClient (the tests)."""

    async def post(self, path: str, *, content: bytes, headers: dict[str, str]) -> Any: ...


class Refused(Exception):
    def __init__(self, status: int, problem: Any) -> None:
        super().__init__(f"{status}: {problem}")
        self.status, self.problem = status, problem


def namespace(prefix: str, evalset: EvalSet, group: str) -> str:
    return f"{prefix}{evalset.name}-{evalset.mode}-{group}"


async def _post(client: Client, ns: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    headers = {"content-type": "application/json", "x-namespace": ns}
    r = await client.post(path, content=json.dumps(body).encode(), headers=headers)
    try:
        payload = r.json()
    except ValueError:
        payload = getattr(r, "text", "")
    return r.status_code, payload


@dataclass(frozen=True)
class Loaded:
    sent: int
    # adds the service's dedupe rule answered with `duplicate_of` (stored nothing): a turn
    # without metadata is no conversation turn to it, so "Mia: Hmm, yeah." said twice is one
    duplicates: int


def memory_body(d: Doc) -> dict[str, Any]:
    """A memory of a batch: key, content, and metadata and created_at when the doc has them
    (content-only sends no metadata field at all)."""
    m: dict[str, Any] = {"key": d.key, "content": d.content}
    if d.metadata:
        m["metadata"] = d.metadata
    if d.created_at is not None:
        m["created_at"] = d.created_at
    return m


async def load(client: Client, evalset: EvalSet, prefix: str, embedded: bool = True) -> Loaded:
    """Every memory of the set, in order, 100 per batch; a labelled fact (metadata
    `attribute`, sets.py `labels`) in a batch of its own, after what came before it, as an
    agent storing it when it learns it would (the supersession detector compares it with
    what is stored). With `embedded`, each must come back embedded (a pending one means the
    embedder failed and vector results would be wrong)."""
    loaded = duplicates = 0
    for group, docs in evalset.groups.items():
        ns = namespace(prefix, evalset, group)
        for batch in _batches(docs):
            memories = [memory_body(d) for d in batch]
            path = f"/v1/robots/{ROBOT}/memories/batch"
            status, body = await _post(client, ns, path, {"memories": memories})
            if status != 201:
                raise RuntimeError(f"loading {evalset.name}/{group}: {status} {body}")
            pending = [m["key"] for m in body["memories"] if m["embedding_status"] != "ready"]
            if embedded and pending:
                raise RuntimeError(f"{len(pending)} memories left pending: the embedder failed")
            loaded += len(memories)
            duplicates += sum(1 for m in body["memories"] if m.get("duplicate_of"))
    return Loaded(loaded, duplicates)


def _batches(docs: list[Doc]) -> list[list[Doc]]:
    out: list[list[Doc]] = [[]]
    for d in docs:
        if "attribute" in d.metadata:
            out += [[d], []]
        elif len(out[-1]) >= BATCH:
            out.append([d])
        else:
            out[-1].append(d)
    return [b for b in out if b]


def _neighbour_keys(hit: dict[str, Any]) -> list[str] | None:
    found = hit.get("neighbours", hit.get("neighbors"))
    if not isinstance(found, list):
        return None
    return [n["key"] if isinstance(n, dict) else str(n) for n in found]


def _expanded(hits: list[dict[str, Any]]) -> tuple[str, ...] | None:
    """Each hit's key then its neighbours', without repeats; None when no hit has any."""
    per_hit = [_neighbour_keys(h) for h in hits]
    if all(n is None for n in per_hit):
        return None
    out: dict[str, None] = {}
    for h, ns in zip(hits, per_hit, strict=True):
        out.setdefault(h["key"])
        for k in ns or ():
            out.setdefault(k)
    return tuple(out)


def request_body(
    config: Config,
    question: str,
    base: dict[str, Any] | None = None,
    speaker: str = "",
    limit: int = LIMIT,
) -> dict:
    """The recall request: the deployment's fields, the configuration's over them, and the
    eval's own (the question, the limit, no working memory) over both. A field whose value is
    "{query}" gets the question (`{"vector_query": "{query}"}`: the vector list searches the
    question as asked); a value "{speaker}", at any depth, the person the question is about
    (`{"filters": {"metadata": {"subject": "{speaker}"}}}`)."""
    own = {"query": question, "limit": limit, "load_into_working_memory": False}
    body = {**(base or {}), **config.fields, **own}
    return {k: question if v == QUESTION else _speaker(v, speaker) for k, v in body.items()}


def _speaker(value: Any, speaker: str) -> Any:
    if value == SPEAKER:
        return speaker
    if isinstance(value, dict):
        return {k: _speaker(v, speaker) for k, v in value.items()}
    return value


async def _recall(
    client: Client, ns: str, q: EvalQuestion, config: Config, base: dict[str, Any] | None,
    limit: int,
) -> tuple[list[dict[str, Any]], float]:  # fmt: skip
    body = request_body(config, q.text, base, q.speaker, limit)
    t0 = time.perf_counter()
    status, payload = await _post(client, ns, f"/v1/robots/{ROBOT}/recall", body)
    latency = time.perf_counter() - t0
    if status != 200:
        raise Refused(status, payload)
    return payload["hits"], latency


async def _ask(
    client: Client, ns: str, q: EvalQuestion, config: Config, base: dict[str, Any] | None
) -> Outcome:
    """The question at limit 10 (its hits, scores and latency), then at limit 20 (its keys)."""
    hits, latency = await _recall(client, ns, q, config, base, LIMIT)
    deep, _ = await _recall(client, ns, q, config, base, DEEP_LIMIT)
    ranked = tuple(h["key"] for h in hits)
    scores = tuple(float(h["score"]) for h in hits)
    sims, rels = (tuple(None if h.get(f) is None else float(h[f]) for h in hits)
                  for f in ("vector_similarity", "relevance"))  # fmt: skip
    expanded = _expanded(hits)
    return Outcome(
        q.kind,
        q.split,
        q.evidence,
        ranked,
        latency,
        scores,
        sims,
        expanded,
        rels,
        q.changed,
        q.stale,
        tuple(h["key"] for h in deep),
    )


async def run_config(
    client: Client,
    evalset: EvalSet,
    config: Config,
    prefix: str,
    concurrency: int = 4,
    base: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Every question with this configuration (over `base`, the deployment's request
    fields): its metrics, or `failed` with the first refusal's status and problem (the first
    question is asked alone, so a configuration the API refuses costs one request)."""
    sem = asyncio.Semaphore(concurrency)
    request = {**(base or {}), **config.fields}

    async def one(q: EvalQuestion) -> Outcome:
        async with sem:
            return await _ask(client, namespace(prefix, evalset, q.group), q, config, base)

    t0 = time.perf_counter()
    questions = evalset.questions
    try:
        first = await one(questions[0])
        rest = await asyncio.gather(*(one(q) for q in questions[1:]))
    except Refused as e:
        return {"request": request, "status": "failed", "http_status": e.status,
                "problem": e.problem}  # fmt: skip
    dump(evalset, config, questions, [first, *rest])
    return {
        "request": request,
        "status": "ok",
        "seconds": time.perf_counter() - t0,
        **breakdown([first, *rest]),
    }


def dump(
    evalset: EvalSet, config: Config, questions: list[EvalQuestion], outcomes: list[Outcome]
) -> None:
    """With HTM_EVAL_DUMP=DIR, each question's ranked keys, one JSON line a question, in
    DIR/<set>-<mode>-<config>.jsonl: to study misses. DIR must be outside the repository (the
    real chats' questions may not be copied into it)."""
    where = os.environ.get("HTM_EVAL_DUMP")
    if not where:
        return
    path = Path(where) / f"{evalset.name}-{evalset.mode}-{config.name}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for q, o in zip(questions, outcomes, strict=True):
            line = {"id": q.id, "group": q.group, "split": q.split, "kind": q.kind,
                    "question": q.text, "speaker": q.speaker, "evidence": list(q.evidence),
                    "ranked": list(o.ranked), "deep": list(o.deep or ())}  # fmt: skip
            f.write(json.dumps(line) + "\n")
