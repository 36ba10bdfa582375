"""`htm dedupe`: clusters reported (dry run by default), then merged: the survivor reinforced
first, the others soft-deleted with their keys resolving to the survivor."""

from __future__ import annotations

import math

from sqlalchemy import text

DIM = 384


def vec(cos: float, axis: int = 1) -> list[float]:
    v = [0.0] * DIM
    v[0], v[axis] = cos, math.sqrt(max(0.0, 1 - cos * cos))
    return v


async def live(client, ns: str) -> list[tuple[str, float, list[str], int, bool]]:
    async with client.app.state.components.sessionmaker() as s:
        rows = await s.execute(
            text(
                "SELECT m.key, m.importance, m.tags, coalesce(a.access_count, 0),"
                " m.deleted_at IS NULL FROM memory m JOIN namespace n ON n.id = m.namespace_id"
                " LEFT JOIN memory_access a ON a.memory_id = m.id "
                "WHERE n.name = :ns ORDER BY m.key"
            ),
            {"ns": ns},
        )
        return [(r[0], r[1], list(r[2]), r[3], r[4]) for r in rows]


async def test_dedupe_reports_then_merges_and_merged_keys_resolve_to_the_survivor(
    app_factory, htm, ns
) -> None:
    async with app_factory(dedupe="off") as client:  # duplicates stored, for htm dedupe
        client.headers["X-Namespace"] = ns
        seed = [
            {
                "key": "a1",
                "content": "deploy friday",
                "importance": 2,
                "tags": ["x"],
                "embedding": vec(1.0),
            },
            {
                "key": "a2",
                "content": "deploys happen on fridays",
                "importance": 5,
                "tags": ["y"],
                "embedding": vec(0.95),
            },
            {"key": "a3", "content": "deploy friday", "embedding": vec(0.0, 3)},
            {"key": "b1", "content": "lunch at noon", "embedding": vec(0.5, 2)},
            {"key": "c1", "content": "deploy friday?", "type": "decision", "embedding": vec(0.99)},
        ]
        r = await client.post("/v1/robots/r/memories/batch", json={"memories": seed})
        assert r.status_code == 201
        async with client.app.state.components.sessionmaker() as s, s.begin():
            for key, n in (("a1", 3), ("a2", 1), ("a3", 2)):
                await s.execute(
                    text(
                        "INSERT INTO memory_access (memory_id, access_count) SELECT k.memory_id, :n"
                        " FROM memory_key k JOIN namespace n ON n.id = k.namespace_id"
                        " WHERE k.key = :k AND n.name = :ns"
                    ),
                    {"n": n, "k": key, "ns": ns},
                )
        before = await live(client, ns)

        dry = htm("dedupe", "--namespace", ns)
        assert dry.returncode == 0, dry.stderr
        assert dry.stdout == "a2 <- a1, a3 (fact)\n"
        assert dry.stderr.strip() == (
            f"1 clusters, 2 duplicates in namespace {ns} found "
            "(dry run: nothing changed; --apply merges them)"
        )
        exact = htm("dedupe", "--namespace", ns, "--mode", "exact")
        assert exact.stdout == "a1 <- a3 (fact)\n"
        loose = htm("dedupe", "--namespace", ns, "--threshold", "0.45")
        assert loose.stdout == "a2 <- a1, a3, b1 (fact)\n"  # a3: more accesses than b1
        assert await live(client, ns) == before

        done = htm("dedupe", "--namespace", ns, "--apply")
        assert done.returncode == 0, done.stderr
        assert done.stdout == "a2 <- a1, a3 (fact)\n"
        assert await live(client, ns) == [
            ("a1", 2, ["x"], 3, False),
            ("a2", 5, ["y", "x"], 6, True),
            ("a3", 1, [], 2, False),
            ("b1", 1, [], 0, True),
            ("c1", 1, [], 0, True),
        ]
        got = (await client.get("/v1/robots/r/memories/a1")).json()
        assert (got["key"], got["content"], got["version"]) == ("a2", seed[1]["content"], 2)
        assert (await client.get("/v1/robots/r/memories/a3")).json()["key"] == "a2"
        merged = await client.get("/v1/robots/r/memories/a1", params={"include_deleted": True})
        assert (merged.json()["key"], merged.json()["deleted_at"] is not None) == ("a1", True)
        versions = (await client.get("/v1/robots/r/memories/a2/versions")).json()["versions"]
        assert [(v["version"], v["changed_by"]) for v in versions] == [
            (2, "htm-dedupe"),
            (1, "r"),
        ]
        again = htm("dedupe", "--namespace", ns, "--apply")
        assert (again.stdout, again.returncode) == ("", 0)

        # a survivor merged in turn: the keys merged into it follow it
        r = await client.post(
            "/v1/robots/r/memories",
            json={
                "key": "a4",
                "content": "friday deploys",
                "importance": 9,
                "embedding": vec(0.96),
            },
        )
        assert r.status_code == 201
        assert htm("dedupe", "--namespace", ns, "--apply").stdout == "a4 <- a2 (fact)\n"
        for key in ("a1", "a2", "a3", "a4"):
            assert (await client.get(f"/v1/robots/r/memories/{key}")).json()["key"] == "a4"


def test_dedupe_refuses_a_threshold_out_of_range(htm) -> None:
    r = htm("dedupe", "--threshold", "1.5")
    assert (r.returncode, r.stderr.strip()) == (
        2,
        "htm dedupe: --threshold must be in (0, 1], not 1.5",
    )
