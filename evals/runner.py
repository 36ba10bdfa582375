"""Loads a set and asks its questions, through the HTTP API only.

Each group (a dialogue, or the facts set) goes into a namespace of its own (`X-Namespace`),
so a recall only searches its own dialogue: one turn, one memory, keyed by the turn's id,
dated by its session, with {dialogue, session, turn, speaker} as metadata. A configuration is
a name and the extra fields it adds to every recall request; a configuration whose requests
are refused (say a field this API does not know yet: 422) is reported as failed, with the
problem the service returned, and the run goes on.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from evals.metrics import Outcome, breakdown
from evals.sets import EvalQuestion, EvalSet

ROBOT = "evals"
BATCH = 100
LIMIT = 10


@dataclass(frozen=True)
class Config:
    name: str
    fields: dict[str, Any]


BASELINE = [
    Config("vector", {"strategy": "vector"}),
    Config("fulltext", {"strategy": "fulltext"}),
    Config("hybrid", {"strategy": "hybrid"}),
]


def load_configs(path: Path) -> list[Config]:
    """A JSON file: a list of {"name": ..., "request": {...fields...}}, or an object
    {name: {...fields...}}."""
    raw = json.loads(path.read_text())
    items = raw.items() if isinstance(raw, dict) else ((c["name"], c["request"]) for c in raw)
    configs = [Config(str(name), dict(fields)) for name, fields in items]
    for c in configs:
        if {"query", "limit", "load_into_working_memory"} & c.fields.keys():
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
    return f"{prefix}{evalset.name}-{group}"


async def _post(client: Client, ns: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    headers = {"content-type": "application/json", "x-namespace": ns}
    r = await client.post(path, content=json.dumps(body).encode(), headers=headers)
    try:
        payload = r.json()
    except ValueError:
        payload = getattr(r, "text", "")
    return r.status_code, payload


async def load(client: Client, evalset: EvalSet, prefix: str, embedded: bool = True) -> int:
    """Every memory of the set, 100 per batch; with `embedded`, each must come back
    embedded (a pending one means the embedder failed and vector results would be wrong)."""
    loaded = 0
    for group, docs in evalset.groups.items():
        ns = namespace(prefix, evalset, group)
        for i in range(0, len(docs), BATCH):
            memories = []
            for d in docs[i : i + BATCH]:
                m: dict[str, Any] = {"key": d.key, "content": d.content, "metadata": d.metadata}
                if d.created_at is not None:
                    m["created_at"] = d.created_at
                memories.append(m)
            path = f"/v1/robots/{ROBOT}/memories/batch"
            status, body = await _post(client, ns, path, {"memories": memories})
            if status != 201:
                raise RuntimeError(f"loading {evalset.name}/{group}: {status} {body}")
            pending = [m["key"] for m in body["memories"] if m["embedding_status"] != "ready"]
            if embedded and pending:
                raise RuntimeError(f"{len(pending)} memories left pending: the embedder failed")
            loaded += len(memories)
    return loaded


async def _ask(client: Client, ns: str, q: EvalQuestion, config: Config) -> Outcome:
    body = {**config.fields, "query": q.text, "limit": LIMIT, "load_into_working_memory": False}
    t0 = time.perf_counter()
    status, payload = await _post(client, ns, f"/v1/robots/{ROBOT}/recall", body)
    latency = time.perf_counter() - t0
    if status != 200:
        raise Refused(status, payload)
    ranked = tuple(h["key"] for h in payload["hits"])
    return Outcome(q.kind, q.split, q.evidence, ranked, latency)


async def run_config(
    client: Client, evalset: EvalSet, config: Config, prefix: str, concurrency: int = 4
) -> dict[str, Any]:
    """Every question with this configuration: its metrics, or `failed` with the first
    refusal's status and problem (the first question is asked alone, so a configuration
    the API refuses costs one request)."""
    sem = asyncio.Semaphore(concurrency)

    async def one(q: EvalQuestion) -> Outcome:
        async with sem:
            return await _ask(client, namespace(prefix, evalset, q.group), q, config)

    t0 = time.perf_counter()
    questions = evalset.questions
    try:
        first = await one(questions[0])
        rest = await asyncio.gather(*(one(q) for q in questions[1:]))
    except Refused as e:
        return {"request": config.fields, "status": "failed", "http_status": e.status,
                "problem": e.problem}  # fmt: skip
    return {
        "request": config.fields,
        "status": "ok",
        "seconds": time.perf_counter() - t0,
        **breakdown([first, *rest]),
    }
