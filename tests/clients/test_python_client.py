"""A Python client generated from the committed spec (openapi-python-client) runs
add → recall → context → stats → replace → versions → tags → restore → forget against a
live server."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

from app.http.openapi import SPEC_PATH


def test_generated_python_client_round_trip(client_server, tmp_path: Path) -> None:
    url, key = client_server
    config = tmp_path / "config.yml"
    config.write_text("post_hooks: []\npackage_name_override: htm_client\n")
    out = tmp_path / "htm_client"
    gen = subprocess.run(
        [
            sys.executable,
            "-m",
            "openapi_python_client",
            "generate",
            "--path",
            str(SPEC_PATH),
            "--config",
            str(config),
            "--meta",
            "none",
            "--output-path",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert gen.returncode == 0, gen.stdout + gen.stderr

    sys.path.insert(0, str(tmp_path))
    try:
        client_mod = importlib.import_module("htm_client")
        add = importlib.import_module("htm_client.api.memories.memories_add")
        forget = importlib.import_module("htm_client.api.memories.memories_forget")
        get = importlib.import_module("htm_client.api.memories.memories_get")
        recall = importlib.import_module("htm_client.api.recall.recall_search")
        context = importlib.import_module("htm_client.api.working_memory.context_get")
        stats = importlib.import_module("htm_client.api.stats.stats_robot")
        put = importlib.import_module("htm_client.api.memories.memories_put")
        versions = importlib.import_module("htm_client.api.memories.memories_versions")
        restore = importlib.import_module("htm_client.api.memories.memories_version_restore")
        tags = importlib.import_module("htm_client.api.tags.tags_tree")
        models = importlib.import_module("htm_client.models")
        strategy = importlib.import_module("htm_client.models.context_get_strategy")
        recall_strategy = importlib.import_module("htm_client.models.recall_request_strategy")
        dedupe = importlib.import_module("htm_client.models.memory_create_dedupe_type_0")

        client = client_mod.AuthenticatedClient(base_url=url, token=key)
        added = add.sync_detailed(
            "py-agent",
            client=client,
            body=models.MemoryCreate(
                content="The Python client talks to HTM.", key="py-fact", importance=7.0
            ),
        )
        assert added.status_code == 201
        assert added.parsed.key == "py-fact"
        assert added.parsed.working_memory.admitted is True
        again = add.sync_detailed(
            "py-agent",
            client=client,
            body=models.MemoryCreate(
                content="The Python client talks to HTM.",
                dedupe=dedupe.MemoryCreateDedupeType0.EXACT,
            ),
        )
        assert (again.status_code, again.parsed.duplicate_of) == (200, "py-fact")
        assert again.parsed.access_count == 1

        found = recall.sync(
            "py-agent",
            client=client,
            body=models.RecallRequest(
                query="Which client talks to HTM?",
                strategy=recall_strategy.RecallRequestStrategy.FULLTEXT,
            ),
        )
        assert [h.key for h in found.hits] == ["py-fact"]

        ctx = context.sync(
            "py-agent",
            client=client,
            strategy=strategy.ContextGetStrategy.IMPORTANT,
            max_tokens=100,
        )
        assert (ctx.text, ctx.tokens) == ("The Python client talks to HTM.", 8)

        st = stats.sync("py-agent", client=client)
        assert st.long_term.memories == 1
        assert st.working_memory.items == 1

        replaced = put.sync_detailed(
            "py-agent",
            "py-fact",
            client=client,
            body=models.MemoryUpsert(
                content="The Python client still talks to HTM.", tags=["clients:python"]
            ),
        )
        assert (replaced.status_code, replaced.parsed.version) == (200, 2)
        history = versions.sync("py-agent", "py-fact", client=client)
        assert [(v.version, v.current, v.changed_by) for v in history.versions] == [
            (2, True, "py-agent"),
            (1, False, "py-agent"),
        ]
        tree = tags.sync(client=client)
        assert [(t.path, t.total, [c.path for c in t.children]) for t in tree.tags] == [
            ("clients", 1, ["clients:python"])
        ]
        back = restore.sync("py-agent", "py-fact", 1, client=client)
        assert (back.version, back.content) == (3, "The Python client talks to HTM.")

        gone = forget.sync_detailed("py-agent", "py-fact", client=client)
        assert gone.status_code == 200
        missing = get.sync_detailed("py-agent", "py-fact", client=client)
        assert missing.status_code == 404
        assert missing.parsed.status == 404

        groups_put = importlib.import_module("htm_client.api.groups.groups_put")
        groups_get = importlib.import_module("htm_client.api.groups.groups_get")
        made = groups_put.sync(
            "py-desk",
            client=client,
            body=models.GroupUpdate(members=["py-standby", "py-active"], working_memory_budget=500),
        )
        assert (made.name, made.members, made.working_memory_budget) == (
            "py-desk",
            ["py-active", "py-standby"],
            500,
        )
        assert groups_get.sync("py-desk", client=client).members == ["py-active", "py-standby"]
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m.startswith("htm_client")]:
            del sys.modules[name]
