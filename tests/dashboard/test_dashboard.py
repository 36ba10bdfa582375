"""`/ui`: the page itself (no data, a strict Content Security Policy, the tag tree's slot),
and the dashboard in a real headless browser (Debian's chromium driven by Playwright) over a
live server with auth on: robots with their working memory, activity per day, a recall with
each hit's explanation, memory content shown as text. The screenshot lands in the test's tmp
dir and in docs/dashboard.png (the README shows it)."""

from __future__ import annotations

import asyncio
import re
import shutil
import uuid
import zlib
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import PROJECT_ROOT
from app.db.migrate import upgrade
from app.http.routes.dashboard import CSP
from tests.auth.test_auth import bearer, make_key
from tests.stubs import Recorded, StubServer

XSS = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2"> deploy notes'


async def test_the_page_holds_no_data_and_allows_only_its_own_scripts(app_factory) -> None:  # type: ignore[no-untyped-def]
    async with app_factory(auth_enabled=True) as client:
        page = await client.get("/ui")
        assert page.status_code == 200
        assert page.headers["content-type"] == "text/html; charset=utf-8"
        assert page.headers["content-security-policy"] == CSP
        assert "script-src 'self';" in CSP and "unsafe-inline" not in CSP
        assert '<body data-tags-route="/v1/tags">' in page.text  # the service has the tree
        assert (
            (await client.get("/ui/app.js")).headers["content-type"].startswith("text/javascript")
        )
        assert (
            (await client.get("/ui/favicon.svg"))
            .headers["content-type"]
            .startswith("image/svg+xml")
        )
        assert (await client.get("/ui/../app/config.py")).status_code == 404
        assert (await client.get("/ui/secrets.txt")).status_code == 404
        # The data is the API's, behind its auth.
        assert (await client.get("/v1/stats")).status_code == 401


async def test_favicon_ico_is_a_32_pixel_png_icon_served_without_a_key(app_factory) -> None:  # type: ignore[no-untyped-def]
    import struct

    async with app_factory(auth_enabled=True) as client:
        r = await client.get("/favicon.ico")
    assert (r.status_code, r.headers["content-type"]) == (200, "image/x-icon")
    icon = r.content
    # ICONDIR (reserved, type 1: icon, one image), its entry (32 x 32, 32 bits, the PNG's
    # size and offset), then the PNG: its signature and IHDR (32 x 32, 8-bit RGBA).
    assert struct.unpack("<HHH", icon[:6]) == (0, 1, 1)
    assert struct.unpack("<BBBBHHII", icon[6:22]) == (32, 32, 0, 0, 1, 32, len(icon) - 22, 22)
    png = icon[22:]
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">I4sIIBBBBB", png[8:29]) == (13, b"IHDR", 32, 32, 8, 6, 0, 0, 0)
    assert png[-12:] == b"\x00\x00\x00\x00IEND\xaeB`\x82"
    rows = zlib.decompress(png[png.index(b"IDAT") + 4 : -16])
    assert len(rows) == 32 * (1 + 32 * 4)


async def test_the_tag_tree_is_asked_for_only_where_the_route_exists() -> None:
    from fastapi import FastAPI

    from app.http.routes.dashboard import router

    bare = FastAPI()
    bare.include_router(router)
    transport = httpx.ASGITransport(app=bare)
    async with httpx.AsyncClient(transport=transport, base_url="http://htm") as client:
        assert '<body data-tags-route="">' in (await client.get("/ui")).text


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def words_embedding(req: Recorded) -> tuple[int, dict[str, Any]]:
    """An OpenAI-compatible provider whose vectors are bags of words: texts sharing words
    are near, so hybrid's vector list means something."""
    data = []
    for i, text in enumerate(req.body["input"]):
        v = [0.0] * 384
        for word in re.findall(r"[a-z]+", text.lower()):
            v[zlib.crc32(word.encode()) % 384] += 1.0
        data.append({"index": i, "embedding": v if any(v) else [1.0] * 384})
    return 200, {"data": data}


async def seed(live: str, key: str) -> None:
    memories = {
        "planner": [
            ("deploy-friday", "We deploy to staging every Friday after the backup.", ["ops"]),
            ("deploy-db", "The deploy waits for the database migration to finish.", ["ops", "db"]),
            ("lunch", "Lunch is at noon on weekdays.", []),
        ],
        "coder": [("xss", XSS, ["security"])],
    }
    async with httpx.AsyncClient(base_url=live, headers=bearer(key)) as api:
        r = await api.put("/v1/robots/planner", json={"working_memory_budget": 60})
        assert r.status_code in (200, 201), r.text
        for robot, items in memories.items():
            for k, content, tags in items:
                r = await api.post(
                    f"/v1/robots/{robot}/memories",
                    json={"key": k, "content": content, "tags": tags},
                )
                assert r.status_code == 201, r.text


async def test_the_dashboard_in_a_browser_shows_robots_activity_and_explained_recall(
    app_factory, live_server_factory, database_factory, stub: StubServer, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    path = chromium()
    if path is None:
        pytest.skip("no chromium here: `apt-get install -y chromium` (.ci/run installs it)")
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install -e '.[dev]')")

    # A database of its own: the live server's embedding worker serves every namespace.
    url = await database_factory()
    await asyncio.to_thread(upgrade, url)
    stub.reply = words_embedding
    ns = f"t-{uuid.uuid4().hex[:12]}"
    async with app_factory(database_url=url, auth_enabled=True) as admin:
        key = await make_key(admin, ns, "writer")
    live = live_server_factory(
        database_url=url,
        auth_enabled=True,
        embedding_provider="openai",
        embedding_model="words",
        embedding_url=stub.url,
    )
    await seed(live, key)
    async with httpx.AsyncClient(base_url=live, headers=bearer(key)) as api:
        asked = {"query": "deploy", "strategy": "hybrid", "limit": 10, "explain": True,
                 "load_into_working_memory": False}  # fmt: skip
        expected = (await api.post("/v1/robots/planner/recall", json=asked)).json()["hits"]
        usage = {
            r["robot"]: r["working_memory"] for r in (await api.get("/v1/stats")).json()["robots"]
        }
    # "Lunch is at noon on weekdays." shares no word with "deploy": below the floor
    # (HTM_RECALL_MIN_SCORE), it is left out, on the page as in the API.
    assert {h["key"] for h in expected} == {"xss", "deploy-db", "deploy-friday"}

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=path)
        page = await browser.new_page(viewport={"width": 1200, "height": 900})
        failed: list[str] = []
        page.on(
            "response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None
        )
        await page.goto(f"{live}/ui#key={key}")
        await page.wait_for_selector("body[data-loaded=true]")

        # The key left the address bar for this tab's sessionStorage.
        assert "#key" not in page.url and key not in page.url
        assert await page.evaluate("sessionStorage.getItem('htm-key')") == key
        assert await page.inner_text("#error") == ""
        assert await page.inner_text("#namespace") == f"· {ns}"
        rows = await page.eval_on_selector_all(
            "#robots tbody tr",
            "rows => rows.map(r => [...r.cells].map(c => c.innerText.trim()))",
        )
        assert [(r[0], r[3], r[4]) for r in rows] == [("coder", "1", "1"), ("planner", "3", "3")]
        assert [(r[1], r[2]) for r in rows] == [
            (f"{u['utilization']:.1f} %", f"{u['tokens']} / {u['max_tokens']}")
            for u in (usage["coder"], usage["planner"])
        ]
        assert (usage["planner"]["max_tokens"], usage["coder"]["max_tokens"]) == (60, 128000)
        assert usage["planner"]["utilization"] > 10
        # The tag tree: each tag with the memories tagged exactly with it.
        tree = await page.eval_on_selector_all("#tags li", "ls => ls.map(l => l.innerText)")
        assert tree == ["db (1)", "ops (2)", "security (1)"]
        bars = await page.eval_on_selector_all(
            "#activity rect.bar", "bs => bs.map(b => [b.dataset.series, +b.dataset.value])"
        )
        assert len(bars) == 14 * 3
        assert sum(v for s, v in bars if s == "adds") == 4
        # The recall above counts once per memory it returned.
        assert sum(v for s, v in bars if s == "recalls") == len(expected)

        await page.select_option("#recall-robot", "planner")
        await page.fill("#query", "deploy")
        await page.click("#recall-form button")
        await page.wait_for_selector("#hits li.hit")
        keys = await page.eval_on_selector_all("#hits li.hit", "hs => hs.map(h => h.dataset.key)")
        assert keys == [h["key"] for h in expected]
        first, hit = expected[0]["explain"], page.locator("#hits li.hit").first
        for name in ("vector", "fulltext"):
            cells = await hit.locator(f'tr[data-list="{name}"] td').all_inner_texts()
            assert cells == [
                str(first[name]["rank"]),
                f"{first[name]['score']:.3f}",
                f"{first[name]['share']:.4f}",
            ]
        # The relevance as a person reads it: how close in meaning, where the words matched.
        for h in expected:
            shown = await page.inner_text(f'#hits li[data-key="{h["key"]}"] .relevance')
            words = (
                f"words matched: #{h['fulltext_rank']} by full text"
                if h["fulltext_rank"]
                else "no word matched"
            )
            assert shown.strip() == f"{round(h['relevance'] * 100)} % close in meaning · {words}"
            meter = page.locator(f'#hits li[data-key="{h["key"]}"] .relevance meter')
            assert await meter.get_attribute("value") == str(round(h["relevance"] * 100))
        facts = await hit.locator(".facts li").all_inner_texts()
        assert facts[0] == f"fused {first['fused']:.4f}"
        assert facts[-1] == f"score {first['score']:.4f}"
        assert await hit.locator("[data-signal]").count() == len(first["signals"])
        # The <script> memory is text: shown verbatim, never run, no element made of it.
        shown = await page.inner_text('#hits li[data-key="xss"] .content')
        assert shown == XSS
        assert await page.evaluate("window.__xss") is None
        assert await page.locator("#hits script, #hits img").count() == 0

        # A memory's supersede chain, from its newest link.
        async with httpx.AsyncClient(base_url=live, headers=bearer(key)) as api:
            for body in (
                {"key": "standup", "content": "Standup is at 9:30.",
                 "valid_from": "2026-01-05T00:00:00Z"},
                {"key": "standup@2", "content": "Standup moved to 10:00.",
                 "valid_from": "2026-03-02T00:00:00Z", "supersedes": ["standup"]},
            ):  # fmt: skip
                r = await api.post("/v1/robots/planner/memories", json=body)
                assert r.status_code == 201, r.text
        await page.fill("#chain-key", "standup@2")
        await page.click("#chain-form button")
        await page.wait_for_selector("#chain li")
        links = await page.eval_on_selector_all(
            "#chain li", "ls => ls.map(l => [l.dataset.key, l.dataset.depth, l.innerText])"
        )
        assert [(k, d) for k, d, _ in links] == [("standup", "-1"), ("standup@2", "0")]
        lines = [x for x in links[0][2].splitlines() if x]  # a blank line between paragraphs
        assert lines == [
            "standup · valid 2026-01-05 → 2026-03-02 · superseded by standup@2",
            "Standup is at 9:30.",
        ]
        assert links[1][2].splitlines()[0] == "standup@2 · valid 2026-03-02 → open-ended"

        # Browse a robot's memories, filter by tag, open one, edit, forget, restore.
        async def rows() -> list[tuple[str, str]]:
            found = await page.eval_on_selector_all(
                "#memories tbody tr", "rs => rs.map(r => [r.dataset.key, r.className])"
            )
            return [(k, c) for k, c in found]

        await page.select_option("#mem-robot", "planner")
        await page.click("#mem-form button")
        await page.wait_for_selector("#memories tbody tr")
        assert [k for k, _ in await rows()] == ["standup@2", "lunch", "deploy-db", "deploy-friday"]
        await page.fill("#mem-tag", "ops")
        await page.click("#mem-form button")
        # (a string predicate is an eval, which the page's policy refuses: selectors only)
        await page.wait_for_selector('#memories tr[data-key="lunch"]', state="detached")
        assert await rows() == [("deploy-db", ""), ("deploy-friday", "")]
        await page.click('#memories tr[data-key="deploy-db"]')
        await page.wait_for_selector("#mem-versions li")
        await page.fill("#mem-importance", "6")
        await page.click("#mem-set")
        await page.wait_for_selector('#mem-versions li[data-version="2"]')
        assert await page.inner_text('#memories tr[data-key="deploy-db"] .importance') == "6"
        await page.click("#mem-forget")
        await page.wait_for_selector('#memories tr[data-key="deploy-db"]', state="detached")
        assert await rows() == [("deploy-friday", "")]
        await page.check("#mem-deleted")
        await page.click("#mem-form button")
        await page.wait_for_selector('#memories tr.deleted[data-key="deploy-db"]')
        await page.click('#memories tr[data-key="deploy-db"]')
        await page.wait_for_selector("#mem-restore:not([hidden])")
        await page.click("#mem-restore")
        await page.wait_for_selector('#memories tr[data-key="deploy-db"]:not(.deleted)')
        async with httpx.AsyncClient(base_url=live, headers=bearer(key)) as api:
            got = (await api.get("/v1/robots/planner/memories/deploy-db")).json()
            assert (got["importance"], got["deleted_at"]) == (6.0, None)

        # Working memory, live: a snapshot, then an add made elsewhere arrives.
        await page.select_option("#wm-robot", "planner")
        await page.click("#wm-form button")
        await page.wait_for_selector("body[data-watching=planner]")
        await page.wait_for_selector("#wm-note:not(:empty)")
        async with httpx.AsyncClient(base_url=live, headers=bearer(key)) as api:
            r = await api.post("/v1/robots/planner/memories",
                               json={"key": "live-one", "content": "Seen live."})  # fmt: skip
            assert r.status_code == 201, r.text
        await page.wait_for_selector('#wm-live li[data-key="live-one"]', timeout=10_000)
        assert (await page.inner_text("#wm-note")).startswith("added")

        # Add a memory from the page, for a robot that does not exist yet.
        await page.fill("#add-robot", "scribe")
        await page.fill("#add-key", "kettle")
        await page.fill("#add-importance", "4")
        await page.fill("#add-tags", "home, kitchen")
        await page.fill("#add-content", "The kettle is descaled every month.")
        await page.click("#add-form button")
        await page.wait_for_selector("body[data-added=kettle]")
        assert await page.inner_text("#add-note") == "added kettle to scribe · in working memory"
        assert await page.input_value("#add-content") == ""
        await page.wait_for_selector('#robots tr[data-robot="scribe"]')
        names = await page.eval_on_selector_all("#robot-names option", "os => os.map(o => o.value)")
        assert names == ["coder", "planner", "scribe"]
        async with httpx.AsyncClient(base_url=live, headers=bearer(key)) as api:
            got = (await api.get("/v1/robots/scribe/memories/kettle")).json()
        assert (got["content"], got["importance"], got["tags"], got["author"]) == (
            "The kettle is descaled every month.", 4.0, ["home", "kitchen"], "scribe"
        )  # fmt: skip
        shot = tmp_path / "dashboard.png"
        await page.screenshot(path=str(shot), full_page=True)

        # Refused input: the API's problem in the page's alert, nothing stored.
        await page.fill("#add-tags", "not a tag!")
        await page.fill("#add-content", "never stored")
        await page.click("#add-form button")
        await page.wait_for_selector("#error:not([hidden])")
        assert (await page.inner_text("#error")).startswith("add: ")
        await page.fill("#add-tags", "")
        async with httpx.AsyncClient(base_url=live, headers=bearer(key)) as api:
            listed = (await api.get("/v1/robots/scribe/memories?scope=self")).json()["items"]
        assert [m["key"] for m in listed] == ["kettle"]

        # A narrow screen (420 px, a phone): one column, and no element past the edge.
        await page.set_viewport_size({"width": 420, "height": 900})
        width = await page.evaluate("document.documentElement.clientWidth")
        assert width <= 420
        over = await page.evaluate(
            """w => [...document.querySelectorAll("body *")]
                .filter(e => e.getBoundingClientRect().right > w + 0.5)
                .map(e => e.tagName + (e.id ? "#" + e.id : ""))""",
            width,
        )
        assert over == []
        assert await page.evaluate("document.documentElement.scrollWidth") == width
        await page.screenshot(path=str(tmp_path / "dashboard-420.png"), full_page=True)
        assert failed == ["422 " + f"{live}/v1/robots/scribe/memories"]
        assert (await page.request.get(f"{live}/favicon.ico")).status == 200
        await browser.close()
    assert shot.stat().st_size > 10_000
    shutil.copyfile(shot, PROJECT_ROOT / "docs" / "dashboard.png")
