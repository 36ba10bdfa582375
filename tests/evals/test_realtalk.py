"""The realtalk set on two tiny chats of its shape written here (never the real files): the
loader, the two loading modes' exact request bodies, and exact recall figures through the
real app (full text: no model in tests)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from evals.__main__ import parse_args, plan
from evals.runner import Config, Loaded, load, run_config
from evals.sets import REALTALK_ENV, Unavailable, realtalk_evidence, realtalk_set


def message(dia_id: str, speaker: str, text: str, at: str) -> dict[str, Any]:
    return {"clean_text": text, "speaker": speaker, "date_time": at, "dia_id": dia_id,
            "img_file": [], "img_url": []}  # fmt: skip


def qa(question: str, evidence: list[str], category: int) -> dict[str, Any]:
    return {"question": question, "answer": "-", "evidence": evidence, "category": category}


# Chat 1 (dev). D1:3 was a photo: the authors' files leave it out. Bob says "ok" twice.
CHAT_1 = {
    "name": {"speaker_1": "Ann", "speaker_2": "Bob"},
    "session_1_date_time": "01.03.2024, 10:00:00",
    "session_1": [
        message("D1:1", "Ann", "Morning!", "01.03.2024, 10:00:00"),
        message("D1:2", "Bob", "ok", "01.03.2024, 10:05:00"),
        message("D1:4", "Ann", "We adopted a kitten called Pixel", "01.03.2024, 10:07:30"),
    ],
    "events_session_1": {},
    "session_2_date_time": "03.03.2024, 20:00:00",
    "session_2": [
        message("D2:1", "Bob", "ok", "03.03.2024, 20:00:00"),
        message("D2:2", "Ann", "Paddled the kayak across Tahoe", "04.03.2024, 00:15:00"),
    ],
    "qa": [
        qa("What is Pixel?", ["D1:4"], 3),
        qa("Kayak?", ["D2:2; D1:4"], 1),  # the kayak turn only: half the evidence
        qa("When was the photo sent?", ["D1:3"], 2),  # only the photo: left out
        qa("Nothing?", [], 2),  # no evidence: left out
        qa("When was the Tahoe outing?", ["D 2:2."], 2),
    ],
}
# Chat 6 (test): in docs mode D1:3's search text holds the turn before it (sourdough), and
# ranks first (a tie on the word, the newer first); content-only has no such context.
CHAT_6 = {
    "name": {"speaker_1": "Cy", "speaker_2": "Dee"},
    "session_1_date_time": "10.04.2024, 08:00:00",
    "session_1": [
        message("D1:1", "Cy", "Started learning the cello", "10.04.2024, 08:00:00"),
        message("D1:2", "Dee", "Nice, I am baking sourdough", "10.04.2024, 08:01:00"),
        message("D1:3", "Cy", "My teacher is strict", "10.04.2024, 08:02:00"),
    ],
    "qa": [
        qa("Which instrument?", ["D1:1-D1:2"], 1),  # no word of it anywhere: 0
        qa("Sourdough?", ["D1:2"], 2),
    ],
}


@pytest.fixture
def chats(tmp_path: Path) -> Path:
    (tmp_path / "Chat_1_Ann_Bob.json").write_text(json.dumps(CHAT_1))
    (tmp_path / "Chat_6_Cy_Dee.json").write_text(json.dumps(CHAT_6))
    (tmp_path / "README.md").write_text("not a chat")
    return tmp_path


def test_evidence_is_read_as_its_annotators_meant_it() -> None:
    ids = {"D1:1", "D1:2", "D1:4", "D2:18", "D12:3", "D12:4", "D12:5", "D17:39", "D20:6"}
    assert realtalk_evidence(["D1:1; D1:2", "D12:3-D12:5", "D17;39"], ids) == (
        "D1:1", "D1:2", "D12:3", "D12:4", "D12:5", "D17:39",
    )  # fmt: skip
    assert realtalk_evidence(["D 2:18", "D20:6.", "D1:4:D1:1", "", "D:56", "D58"], ids) == (
        "D2:18", "D20:6", "D1:4", "D1:1",
    )  # fmt: skip
    assert realtalk_evidence(["D1:3", "D1:1", "D1:1"], ids) == ("D1:1",)  # D1:3: a photo


def test_every_message_is_a_memory_in_its_chats_namespace_dated_by_its_session(
    chats: Path,
) -> None:
    s = realtalk_set(directory=chats)
    assert (s.name, s.mode, list(s.groups)) == ("realtalk", "docs", ["c01", "c06"])
    assert [(d.key, d.content, d.created_at, d.metadata) for d in s.groups["c01"]] == [
        ("D1:1", "Morning!", "2024-03-01T10:00:00Z", {"speaker": "Ann", "session": 1}),
        ("D1:2", "ok", "2024-03-01T10:00:01Z", {"speaker": "Bob", "session": 1}),
        ("D1:4", "We adopted a kitten called Pixel", "2024-03-01T10:00:02Z",
         {"speaker": "Ann", "session": 1}),
        ("D2:1", "ok", "2024-03-03T20:00:00Z", {"speaker": "Bob", "session": 2}),
        ("D2:2", "Paddled the kayak across Tahoe", "2024-03-03T20:00:01Z",
         {"speaker": "Ann", "session": 2}),
    ]  # fmt: skip
    assert [(q.id, q.group, q.split, q.kind, q.text, q.evidence) for q in s.questions] == [
        ("c01-q000", "c01", "dev", "open_domain", "What is Pixel?", ("D1:4",)),
        ("c01-q001", "c01", "dev", "multi_hop", "Kayak?", ("D2:2", "D1:4")),
        ("c01-q004", "c01", "dev", "temporal", "When was the Tahoe outing?", ("D2:2",)),
        ("c06-q000", "c06", "test", "multi_hop", "Which instrument?", ("D1:1", "D1:2")),
        ("c06-q001", "c06", "test", "temporal", "Sourdough?", ("D1:2",)),
    ]
    assert s.note.startswith(
        "5 of 7 questions asked: 1 without evidence and 1 whose evidence is only photos"
    )
    own = realtalk_set(directory=chats, created="message", mode="content-only")
    assert [(d.content, d.created_at, d.metadata) for d in own.groups["c01"][-2:]] == [
        ("Bob: ok", "2024-03-03T20:00:00Z", {}),
        ("Ann: Paddled the kayak across Tahoe", "2024-03-04T00:15:00Z", {}),
    ]
    assert own.questions == s.questions


def test_a_missing_folder_skips_the_set_with_a_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(Unavailable, match="no Chat_"):
        realtalk_set(directory=tmp_path)
    monkeypatch.setenv(REALTALK_ENV, str(tmp_path / "absent"))
    pairs, skipped = plan(parse_args(["--sets", "realtalk,conv,facts", "--modes", "docs"]))
    assert pairs == [("conv", "docs"), ("facts", "docs")]
    assert list(skipped) == ["realtalk"] and str(tmp_path / "absent") in skipped["realtalk"]
    pairs, _ = plan(parse_args(["--sets", "facts,conv", "--modes", "content-only"]))
    assert pairs == [("conv", "content-only")]


class Recording:
    """The app's client, keeping each request's namespace, path and body."""

    def __init__(self, client: Any) -> None:
        self.client, self.sent = client, []

    async def post(self, path: str, *, content: bytes, headers: dict[str, str]) -> Any:
        self.sent.append((headers["x-namespace"], path, json.loads(content)))
        return await self.client.post(path, content=content, headers=headers)


BATCH = "/v1/robots/evals/memories/batch"
RECALL = "/v1/robots/evals/recall"


async def test_each_mode_sends_its_bodies_and_recall_is_exact_through_the_api(
    app_factory,  # type: ignore[no-untyped-def]
    chats: Path,
) -> None:
    prefix = f"t-{uuid.uuid4().hex[:8]}-"
    fulltext = Config("fulltext", {"strategy": "fulltext"})
    results: dict[str, dict[str, Any]] = {}
    async with app_factory(dedupe="exact") as app:  # the service's default (the suite's: off)
        for mode in ("docs", "content-only"):
            client = Recording(app)
            s = realtalk_set(directory=chats, mode=mode)
            # content-only: "Bob: ok" said twice is one memory (the default dedupe rule
            # leaves alone only a turn whose metadata says it is one)
            dups = 1 if mode == "content-only" else 0
            assert await load(client, s, prefix, embedded=False) == Loaded(8, dups)
            results[mode] = await run_config(client, s, fulltext, prefix)
            batches = [(ns, body) for ns, path, body in client.sent if path == BATCH]
            recalls = [(ns, body) for ns, path, body in client.sent if path == RECALL]
            assert [ns for ns, _ in batches] == [f"{prefix}realtalk-{mode}-c01",
                                                 f"{prefix}realtalk-{mode}-c06"]  # fmt: skip
            first = batches[1][1]["memories"][0]
            if mode == "docs":
                assert first == {"key": "D1:1", "content": "Started learning the cello",
                                 "metadata": {"speaker": "Cy", "session": 1},
                                 "created_at": "2024-04-10T08:00:00Z"}  # fmt: skip
            else:
                assert first == {"key": "D1:1", "content": "Cy: Started learning the cello",
                                 "created_at": "2024-04-10T08:00:00Z"}  # fmt: skip
            assert len(batches[0][1]["memories"]) == 5
            # each question twice, at limit 10 then 20, in its own chat (the first alone)
            assert [body for _, body in recalls[:2]] == [
                {"strategy": "fulltext", "query": "What is Pixel?", "limit": n,
                 "load_into_working_memory": False}
                for n in (10, 20)
            ]  # fmt: skip
            assert len(recalls) == 10
            assert {ns for ns, _ in recalls} == {f"{prefix}realtalk-{mode}-c01",
                                                 f"{prefix}realtalk-{mode}-c06"}  # fmt: skip
            r = await app.get("/v1/robots/evals/memories/D2:2",
                              headers={"x-namespace": f"{prefix}realtalk-{mode}-c01"})  # fmt: skip
            assert r.json()["metadata"] == ({"speaker": "Ann", "session": 2}
                                            if mode == "docs" else {})  # fmt: skip

    for mode, r in results.items():
        assert r["status"] == "ok"
        # Pixel 1, kayak 1/2 (D1:4 says no kayak), Tahoe 1; the instrument 0, sourdough 1
        assert r["all"]["questions"] == 5
        for k in ("recall_at_5", "recall_at_10", "recall_at_20"):
            assert r["all"][k] == pytest.approx(3.5 / 5), (mode, k)
        assert r["split"]["dev"]["recall_at_10"] == pytest.approx(2.5 / 3)
        assert r["split"]["test"]["recall_at_10"] == 0.5
        assert {k: v["recall_at_10"] for k, v in r["kind"].items()} == {
            "multi_hop": 0.25, "open_domain": 1.0, "temporal": 1.0,
        }  # fmt: skip
        assert r["all"]["same_top_10"] == 1.0
    # sourdough: first in both modes (no turn carries the one before it: HTM_SEARCH_TEXT=dated)
    assert results["docs"]["split"]["test"]["mrr"] == 0.5
    assert results["content-only"]["split"]["test"]["mrr"] == 0.5
    assert results["docs"]["all"]["mrr"] == pytest.approx(4 / 5)
    assert results["content-only"]["all"]["mrr"] == pytest.approx(4 / 5)
