"""The curl lines of the docs, run line by line against a live server: each status must match.

docs/api.md's curl cookbook calls every route; the README's first requests are the first
lines a reader runs against `make run`. Both run here, the README's first, on one fresh
database."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess

import pytest

from app.config import PROJECT_ROOT

LINE = re.compile(r"^(curl .*?)\s+# → (\d{3})$")


def curls(page: str, section: str) -> list[tuple[str, int]]:
    """The `curl … # → status` lines of one section of a page."""
    text = (PROJECT_ROOT / page).read_text()
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return [(m[1], int(m[2])) for line in body.splitlines() if (m := LINE.match(line))]


def cookbook() -> list[tuple[str, int]]:
    return curls("docs/api.md", "curl cookbook")


def readme() -> list[tuple[str, int]]:
    return curls("README.md", "Three requests")


def test_the_readme_adds_a_memory_recalls_it_and_reads_context() -> None:
    routes = [re.findall(r"/v1/robots/alice/(\w+)", command) for command, _ in readme()]
    assert routes == [["memories"], ["recall"], ["context"]]


def test_the_cookbook_covers_every_route() -> None:
    import json

    from app.http.openapi import SPEC_PATH

    spec = json.loads(SPEC_PATH.read_text())
    commands = " ".join(c for c, _ in cookbook())
    for path, item in spec["paths"].items():
        pattern = re.sub(r"\{[^}]+\}", '[^/?" ]+', path) + r"(?=[?\"' ]|$)"
        for method in item:
            hits = [
                c
                for c, _ in cookbook()
                if re.search(r"\$HTM" + pattern, c)
                and (f"-X {method.upper()}" in c or (method == "get" and " -X " not in c))
            ]
            assert hits, f"docs/api.md's cookbook has no curl for {method.upper()} {path}"
    assert "$HTM" in commands


@pytest.fixture(scope="module")
async def walked(live_server_factory, database_factory) -> str:
    """A live server on a database of its own that the README's and the cookbook's curl
    lines have run against, each checked for its documented status: its base URL."""
    from app.db.migrate import upgrade

    if shutil.which("curl") is None:
        pytest.skip("needs curl")
    # A database of its own: the cookbook expects fresh ids (e.g. API key 1). The README's
    # lines come first, as a reader runs them; they take no key the cookbook takes.
    db = await database_factory()
    await asyncio.to_thread(upgrade, db)
    base = live_server_factory(database_url=db)
    for command, expected in readme() + cookbook():
        out = await asyncio.to_thread(
            subprocess.run,
            ["bash", "-c", f"{command} -o /dev/null -w '%{{http_code}}'"],
            env={"HTM": base, "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert out.stdout == str(expected), f"{command}\n→ {out.stdout} {out.stderr}"
    return str(base)


async def test_readme_curl_commands_return_the_documented_status(walked) -> None:
    assert walked.startswith("http://127.0.0.1:")


async def test_a_scrape_after_every_route_stays_small(walked) -> None:
    """/metrics after a walk through every route (and many of their error statuses). With a
    histogram per status and 14 buckets it was 1,667 samples (1,344 of them request
    buckets), 193 KB; now 988 samples, 100 KB. A new route adds 12 samples."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    async with httpx.AsyncClient(base_url=walked) as http:
        r = await http.get("/metrics")
    assert r.status_code == 200
    families = {f.name: f for f in text_string_to_metric_families(r.text)}
    samples = [s for f in families.values() for s in f.samples]
    assert len(samples) <= 1_050 and len(r.content) <= 106_000, (len(samples), len(r.content))

    def bounds(family: str, **labels: str) -> list[str]:
        return [
            s.labels["le"]
            for s in families[family].samples
            if s.name == family + "_bucket"
            and labels.items() <= {k: v for k, v in s.labels.items() if k != "le"}.items()
        ]

    route = {"method": "POST", "route": "/v1/robots/{robot}/recall"}
    assert bounds("htm_http_request_duration_seconds", **route) == [
        "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.5", "2.5", "+Inf"
    ]  # fmt: skip
    assert bounds("htm_dependency_seconds", dependency="postgresql") == [
        "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.1", "0.5", "2.5", "10.0",
        "+Inf",
    ]  # fmt: skip
    # The status is the counter's label, not the histogram's: one histogram per route.
    durations = families["htm_http_request_duration_seconds"].samples
    assert {k for s in durations for k in s.labels} == {"method", "route", "le"}
    statuses = {
        s.labels["status"]
        for s in families["htm_http_requests"].samples
        if s.labels.items() >= route.items()
    }
    assert statuses == {"200", "422"}
    # Every curl line one request, each counted and timed once (this scrape not yet).
    counted = sum(s.value for s in families["htm_http_requests"].samples)
    timed = sum(s.value for s in durations if s.name.endswith("_count"))
    assert counted == timed == len(readme() + cookbook())
