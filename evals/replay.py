"""A usage stream that is not the eval's own recalls (`python -m evals --replay`): what gives
memories access counts and feedback before the questions are asked, so that the recency,
importance and access signals can be weighed (issue 47, item 4).

The stream: every turn of every dialogue (both halves: the stream reads no question and no
evidence, so nothing of the answers leaks into it; the weights are still chosen on the dev
half and confirmed on the test half) is asked as a question in its own words — the turn's
content as the mode stored it — with the service's default request, `limit` 5, as an agent
looking for what was said would. The agent reads the hits down to the turn it was after
(a cascade click model, as web search logs are read): that turn was **used**, each hit ranked
above it was offered and **not used**; when the turn is not among the 5, none was of use.
Each is a `POST …/memories/{key}/feedback`; the recalls themselves count their hits'
accesses, as any recall does. So a turn that many others' words find before themselves (the
small talk that matches everything) loses learned importance and gains accesses; a turn found
by its own words first gains importance. A turn stored as a duplicate of an earlier one
(content-only mode's dedupe) is looked for as that memory.

The eval's questions must not add to these counts: the harness empties `memory_access`
before the stream (a database kept by `--keep-database` holds the counts of the last run's
questions), and asks the questions of a service restarted with an access flush interval no
run reaches (`HTM_ACCESS_FLUSH_INTERVAL_S`), so their accesses stay in its memory until it
stops.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from evals.runner import ROBOT, Client, _post, namespace
from evals.sets import EvalSet

REPLAY_LIMIT = 5
MAX_QUERY_CHARS = 1000
# The questions' service writes its accesses this rarely: never within a run.
NO_FLUSH_S = "1000000000"


@dataclass
class Replayed:
    queries: int = 0
    found: int = 0  # queries whose own turn was among the hits
    first: int = 0  # ... ranked first
    used: int = 0
    unused: int = 0

    def json(self) -> dict[str, Any]:
        return {
            "queries": self.queries,
            "own_turn_found": self.found,
            "own_turn_first": self.first,
            "feedback_used": self.used,
            "feedback_unused": self.unused,
            "limit": REPLAY_LIMIT,
        }


def feedback_of(own: str, ranked: list[str]) -> list[tuple[str, bool]]:
    """The cascade: the hits above the turn asked for, not used; the turn, used; below it,
    not read (nothing). Not among them: every hit read, none used."""
    if own in ranked:
        at = ranked.index(own)
        return [(k, False) for k in ranked[:at]] + [(own, True)]
    return [(k, False) for k in ranked]


def own_memory(key: str, content: str, hits: list[dict[str, Any]]) -> str:
    """The memory that holds the turn: its key, or, for a turn the service stored as a
    duplicate of an earlier one (content-only mode: "Mia: Hmm, yeah." said twice is one
    memory), the hit of the same content."""
    if any(h["key"] == key for h in hits):
        return key
    return next((h["key"] for h in hits if h.get("content") == content), key)


async def replay(client: Client, evalset: EvalSet, prefix: str, concurrency: int = 4) -> Replayed:
    """Each turn of the set asked in its own words, then the cascade's feedback."""
    out = Replayed()
    sem = asyncio.Semaphore(concurrency)

    async def one(ns: str, key: str, content: str) -> None:
        async with sem:
            body = {
                "query": content[:MAX_QUERY_CHARS],
                "limit": REPLAY_LIMIT,
                "load_into_working_memory": False,
            }
            status, payload = await _post(client, ns, f"/v1/robots/{ROBOT}/recall", body)
            if status != 200:
                raise RuntimeError(f"replay recall {ns}/{key}: {status} {json.dumps(payload)}")
            ranked = [h["key"] for h in payload["hits"]]
            own = own_memory(key, content, payload["hits"])
            out.queries += 1
            out.found += own in ranked
            out.first += bool(ranked) and ranked[0] == own
            for k, used in feedback_of(own, ranked):
                path = f"/v1/robots/{ROBOT}/memories/{quote(k, safe='')}/feedback"
                status, payload = await _post(client, ns, path, {"used": used})
                if status != 202:
                    raise RuntimeError(f"replay feedback {ns}/{k}: {status} {payload}")
                if used:
                    out.used += 1
                else:
                    out.unused += 1

    for group, docs in evalset.groups.items():
        ns = namespace(prefix, evalset, group)
        await asyncio.gather(*(one(ns, d.key, d.content) for d in docs if d.content.strip()))
    return out
