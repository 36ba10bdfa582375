"""`make chaos`'s load: clients adding, PUTting, recalling, reading context and retrieving
for a handful of robots, the ledger of what the service acknowledged, and the embedding
provider (an OpenAI-compatible stub, healthy, down or slow)."""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bench.http import Http
from tests.stubs import Recorded, StubServer

NAMESPACE = "default"  # auth is off: requests without X-Namespace land here
ROBOTS = [f"r{i}" for i in range(6)]
WORDS = "walrus tulip harbor orbit cedar lantern quartz meadow violet falcon ember".split()
DIM = 384


def vector(text: str) -> list[float]:
    """A deterministic unit vector per text (similar texts are not similar: recall quality
    is not what this measures)."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")
    v = np.random.default_rng(seed).standard_normal(DIM)
    return (v / np.linalg.norm(v)).tolist()


class Provider:
    """The OpenAI-compatible provider, healthy, down (503) or slow."""

    def __init__(self) -> None:
        self.stub = StubServer()
        self.healthy()

    def healthy(self) -> None:
        self.stub.delay_s = 0.0

        def reply(req: Recorded) -> tuple[int, Any]:
            data = [{"index": i, "embedding": vector(t)} for i, t in enumerate(req.body["input"])]
            return 200, {"data": data, "model": "chaos-embed"}

        self.stub.reply = reply

    def down(self) -> None:
        self.stub.reply = lambda _req: (503, {"error": "provider down"})

    def slow(self, delay_s: float) -> None:
        self.stub.delay_s = delay_s


@dataclass
class Sample:
    started: float
    seconds: float
    op: str
    status: int  # 0: no response (connection error, client timeout)
    placed: bool | None = None  # an add's: did it enter working memory

    @property
    def ended(self) -> float:
        return self.started + self.seconds


@dataclass
class Ledger:
    """What the service acknowledged: each must be there afterwards."""

    added: dict[str, tuple[str, float]] = field(default_factory=dict)  # key -> (content, at)
    put: dict[str, list[tuple[str, float]]] = field(default_factory=dict)  # key -> [(content, at)]
    attempted_puts: dict[str, set[str]] = field(default_factory=dict)


class Load:
    def __init__(self, http: Http, ledger: Ledger, seed: int) -> None:
        self.http = http
        self.ledger = ledger
        self.rng = random.Random(seed)
        self.samples: list[Sample] = []
        self.counter = 0

    def _text(self, robot: str) -> str:
        self.counter += 1
        words = " ".join(self.rng.sample(WORDS, 3))
        return f"{robot} note {self.counter} about {words}"

    async def _one(self) -> None:
        robot = self.rng.choice(ROBOTS)
        base = f"/v1/robots/{robot}"
        roll = self.rng.random()
        body: dict[str, Any] | None = None
        key = None
        if roll < 0.25:
            op, method, path = "add", "POST", f"{base}/memories"
            key = f"a-{robot}-{self.counter}-{self.rng.randrange(10**9)}"
            body = {
                "key": key,
                "content": self._text(robot),
                "importance": self.rng.choice([1, 3, 5]),
            }
        elif roll < 0.40:
            op, method = "put", "PUT"
            key = f"p-{self.rng.randrange(12)}"
            path = f"{base}/memories/{key}"
            body = {"content": self._text(robot), "importance": self.rng.choice([1, 3, 5])}
            self.ledger.attempted_puts.setdefault(key, set()).add(body["content"])
        elif roll < 0.60:
            op, method, path = "recall", "POST", f"{base}/recall"
            strategy = self.rng.choice(["hybrid", "fulltext"])
            body = {"query": " ".join(self.rng.sample(WORDS, 2)), "strategy": strategy, "limit": 5}
        elif roll < 0.85:
            op, method = "context", "GET"
            path = f"{base}/context?strategy={self.rng.choice(['recent', 'important', 'balanced'])}"
        else:
            op, method = "retrieve", "GET"
            known = list(self.ledger.added)
            path = f"{base}/memories/{self.rng.choice(known) if known else 'p-0'}"
        started = time.monotonic()
        placed = None
        try:
            r = await self.http.request(method, path, json=body)
            status = r.status_code
            if op == "add" and status == 201:
                placed = r.json()["working_memory"]["admitted"] is True
        except Exception:
            status = 0
        self.samples.append(Sample(started, time.monotonic() - started, op, status, placed))
        if op == "add" and status == 201 and key and body:
            self.ledger.added[key] = (body["content"], started)
        elif op == "put" and status in (200, 201) and key and body:
            self.ledger.put.setdefault(key, []).append((body["content"], started))

    async def client(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self._one()
