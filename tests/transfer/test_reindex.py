"""`htm reindex`: after a change of HTM_SEARCH_TEXT, a namespace's conversation memories get
the search text the deployment's template builds now (each turn before as stored now, a
forgotten turn left out), those whose text changed are embedded again by the embedding
worker (a client's vector is kept: only its text and full-text entry change), speaker tags
are left as they are, and a second run rebuilds nothing. Pages of --batch memories never end
between two turns of one instant."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import pytest
from sqlalchemy import text

from tests.transfer.conftest import Htm
from tests.vectors import as_stored

DIM = 384
MODEL = "all-MiniLM-L6-v2@int8v2"  # the local model's default runtime (int8)
HEY = "Hey, how's the new place?"
PUPPY = "We finally brought home a beagle puppy!"
GIVEN = [1.0] + [0.0] * (DIM - 1)


def turn(key: str, speaker: str, session: str, at: str, content: str, **kw: Any) -> dict:
    return {
        "key": key,
        "content": content,
        "created_at": f"2026-03-14T{at}Z",
        "metadata": {"speaker": speaker, "session": session},
        **kw,
    }


DIALOGUE = [
    turn("t1", "Mia", "s1", "10:00:00", HEY),
    turn("c1", "Ann", "s2", "10:00:30", "A line with its own vector.", embedding=GIVEN),
    turn("t2", "Leo", "s1", "10:01:00", PUPPY),
    turn("gone", "Leo", "s1", "10:01:30", "Forgotten before the reindex."),
    turn("t3", "Mia", "s1", "10:02:00", "Cute!"),
    turn("t4", "Leo", "s1", "10:03:00", "Guess its name."),  # t4 and t5: one instant
    turn("t5", "Mia", "s1", "10:03:00", "Biscuit?"),
    turn("t6", "Leo", "s1", "10:04:00", "Biscuit it is."),
    {"key": "note", "content": "The beagle exhibition opens in May."},
]
DAY = "[March 14, 2026]"
CONTEXTUAL = {
    "t1": f"{DAY} Mia: {HEY}",
    "c1": f"{DAY} Ann: A line with its own vector.",
    "t2": f"{DAY} Mia: {HEY}\nLeo: {PUPPY}",
    "t3": f"{DAY} Leo: {PUPPY}\nMia: Cute!",  # `gone` is forgotten: t2 is its turn before
    "t4": f"{DAY} Mia: Cute!\nLeo: Guess its name.",
    "t5": f"{DAY} Leo: Guess its name.\nMia: Biscuit?",  # same instant as t4, on its page
    "t6": f"{DAY} Mia: Biscuit?\nLeo: Biscuit it is.",  # the next page: t5 read as stored
    "note": None,  # not a conversation
}
PLAIN = dict.fromkeys(CONTEXTUAL)
# Each is checked (c1, t1...t6), each is rebuilt, each but c1 (a client's vector) embedded.
SUMMARY = (
    "reindexed namespace {ns} with the {template} search text: 7 checked, {n} rebuilt, "
    "{e} embedded, 0 failed\n"
)


async def rows(client: httpx.AsyncClient, ns: str) -> dict[str, tuple[Any, ...]]:
    """Each live memory's (search text, embedding state, model, tags, vector)."""
    async with client.app.state.components.sessionmaker() as s:  # type: ignore[attr-defined]
        found = await s.execute(
            text("""
            SELECT m.key, m.search_text, m.embedding_status, m.embedding_model, m.tags,
                   m.embedding::text AS e
            FROM memory m JOIN namespace n ON n.id = m.namespace_id
            WHERE n.name = :ns AND m.deleted_at IS NULL"""),
            {"ns": ns},
        )
        return {
            r.key: (r.search_text, r.embedding_status, r.embedding_model, list(r.tags), r.e)
            for r in found
        }


def parsed(e: str) -> np.ndarray:
    return np.array([float(x) for x in e.strip("[]").split(",")])


async def embedded_as(client: httpx.AsyncClient, texts: dict[str, str]) -> dict[str, np.ndarray]:
    """The vectors the app's model makes of these texts, as stored."""
    embedder = client.app.state.components.embedder  # type: ignore[attr-defined]
    vectors = await embedder.embed(list(texts.values()))
    return {k: as_stored(v) for k, v in zip(texts, vectors, strict=True)}


async def fulltext(client: httpx.AsyncClient, query: str) -> set[str]:
    r = await client.post(
        "/v1/robots/scribe/recall",
        json={"query": query, "strategy": "fulltext", "load_into_working_memory": False},
    )
    assert r.status_code == 200, r.text
    return {h["key"] for h in r.json()["hits"]}


def check_vectors(
    stored: dict[str, tuple[Any, ...]], expected: dict[str, np.ndarray], searched: dict[str, str]
) -> None:
    # The int8 model's vector of a text moves with the texts batched beside it (its
    # activations are quantized per batch, padding included: cosine 0.977 seen here), so the
    # test compares directions; a vector of another search text is far further (~0.8).
    for key in searched:
        got, want = parsed(stored[key][4]), expected[key]
        cosine = float(got @ want / (np.linalg.norm(got) * np.linalg.norm(want)))
        assert cosine > 0.96, (key, cosine)


async def test_reindex_rebuilds_search_texts_and_vectors_then_back_to_plain(
    app_factory, htm: Htm, ns: str
) -> None:
    # Vectors of the search texts (HTM_EMBED_TEXT=search_text), as this test compares.
    async with app_factory(
        search_text="plain", embedding_provider="local", embed_text="search_text"
    ) as client:
        client.headers["X-Namespace"] = ns
        r = await client.post("/v1/robots/scribe/memories/batch", json={"memories": DIALOGUE})
        assert r.status_code == 201, r.text
        assert (await client.delete("/v1/robots/scribe/memories/gone")).status_code == 200
        before = await rows(client, ns)
        assert {k: v[:4] for k, v in before.items()} == {
            **{k: (None, "ready", MODEL, []) for k in PLAIN},
            "c1": (None, "ready", "client", []),
        }
        assert await fulltext(client, "puppy") == {"t2"}
        contents = {m["key"]: m["content"] for m in DIALOGUE}
        searched = {k: t or contents[k] for k, t in CONTEXTUAL.items() if k != "c1"}

        run = htm("reindex", "--namespace", ns, "--batch", "5", "-q",
                  HTM_SEARCH_TEXT="contextual", HTM_EMBEDDING_PROVIDER="local",
                  HTM_EMBED_TEXT="search_text")  # fmt: skip
        assert run.returncode == 0, run.stderr
        assert run.stdout == SUMMARY.format(ns=ns, template="contextual", n=7, e=6)
        after = await rows(client, ns)
        assert {k: v[:4] for k, v in after.items()} == {
            **{k: (t, "ready", MODEL, []) for k, t in CONTEXTUAL.items()},  # no speaker tags
            "c1": (CONTEXTUAL["c1"], "ready", "client", []),
        }
        check_vectors(after, await embedded_as(client, searched), searched)
        assert after["note"][4] == before["note"][4]  # not rebuilt: not embedded again
        assert parsed(after["c1"][4]) == pytest.approx(as_stored(GIVEN))  # the client's
        assert await fulltext(client, "puppy") == {"t2", "t3"}  # t3's text has t2's words
        assert await fulltext(client, "Ann") == {"c1"}  # a client's vector: its text changed

        again = htm("reindex", "--namespace", ns, "-q",
                    HTM_SEARCH_TEXT="contextual", HTM_EMBEDDING_PROVIDER="local",
                  HTM_EMBED_TEXT="search_text")  # fmt: skip
        assert again.returncode == 0, again.stderr
        assert again.stdout == SUMMARY.format(ns=ns, template="contextual", n=0, e=0)
        assert await rows(client, ns) == after

        back = htm("reindex", "--namespace", ns, "--batch", "2", "-q",
                   HTM_SEARCH_TEXT="plain", HTM_EMBEDDING_PROVIDER="local",
                   HTM_EMBED_TEXT="search_text")  # fmt: skip
        assert back.returncode == 0, back.stderr
        assert back.stdout == SUMMARY.format(ns=ns, template="plain", n=7, e=6)
        plain = await rows(client, ns)
        assert {k: v[:4] for k, v in plain.items()} == {k: v[:4] for k, v in before.items()}
        check_vectors(plain, {k: parsed(v[4]) for k, v in before.items()}, PLAIN)
        assert parsed(plain["c1"][4]) == pytest.approx(as_stored(GIVEN))
        assert await fulltext(client, "puppy") == {"t2"}


async def test_reindex_vectors_embeds_every_turn_again_as_speaker_and_content(
    app_factory, htm: Htm, ns: str
) -> None:
    """After a change of HTM_EMBED_TEXT (here to `speaker`), `--vectors` embeds every
    conversation memory again (its search text unchanged), a client's vector kept."""
    async with app_factory(
        embedding_provider="local", embed_text="search_text", search_text="contextual"
    ) as client:
        client.headers["X-Namespace"] = ns
        r = await client.post("/v1/robots/scribe/memories/batch", json={"memories": DIALOGUE})
        assert r.status_code == 201, r.text
        assert (await client.delete("/v1/robots/scribe/memories/gone")).status_code == 200
        before = await rows(client, ns)
        run = htm("reindex", "--namespace", ns, "--vectors", "--batch", "5", "-q",
                  HTM_EMBEDDING_PROVIDER="local", HTM_EMBED_TEXT="speaker",
                  HTM_SEARCH_TEXT="contextual")  # fmt: skip
        assert run.returncode == 0, run.stderr
        assert run.stdout == SUMMARY.format(ns=ns, template="contextual", n=7, e=6)
        after = await rows(client, ns)
        # The texts are the template's (t3's turn before is t2 now: `gone` was forgotten).
        assert {k: v[:4] for k, v in after.items()} == {
            **{k: (t, "ready", MODEL, before[k][3]) for k, t in CONTEXTUAL.items()},
            "c1": (CONTEXTUAL["c1"], "ready", "client", before["c1"][3]),
        }
        spoken = {
            m["key"]: f"{m['metadata']['speaker']}: {m['content']}"
            for m in DIALOGUE
            if m["key"] not in ("gone", "c1", "note")
        }
        check_vectors(after, await embedded_as(client, spoken), spoken)
        assert after["note"][4] == before["note"][4]  # not a conversation: not embedded again
        assert parsed(after["c1"][4]) == pytest.approx(as_stored(GIVEN))


def test_reindex_needs_an_embedding_model(htm: Htm, ns: str) -> None:
    run = htm("reindex", "--namespace", ns)
    assert run.returncode == 2
    assert run.stderr == (
        "htm reindex: no embedding model to embed the new search texts with: "
        "HTM_EMBEDDING_PROVIDER is none\n"
    )


def test_reindex_of_a_namespace_that_does_not_exist_says_so(htm: Htm, ns: str) -> None:
    run = htm("reindex", "--namespace", ns, HTM_EMBEDDING_PROVIDER="local")
    assert run.returncode == 1
    # (the local model's loading may print its progress first)
    assert run.stderr.splitlines()[-1] == f"htm reindex: namespace {ns!r} does not exist"
