"""clients/mcp_agent_loop.py, the agent loop docs/mcp.md shows (issue 48: state and a pinned
note over MCP), run as a user runs it against a live server: every line it prints."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid

from app.config import PROJECT_ROOT

# The versions as they are named in order of appearance: a state version comes from one
# sequence for every key (docs/api.md), so a run's numbers depend on the writes before it.
EXPECTED = """\
pinned goal vA
remembered staging-db
remembered deploy-day
recall 'When do deploys happen?' -> deploy-day: Deploys happen on Fridays, after the nightly backup.
prompt: 2 messages, 73 tokens
system message:
  | You are a release agent.
  |
  | Pinned notes:
  |
  | goal: Ship release 2.0 on Friday; never deploy without a backup.
  |
  | Working memory:
  |
  | Deploys happen on Fridays, after the nightly backup.
  |
  | Staging runs PostgreSQL 18; every migration goes there first.
progress vB -> vC
a write at vB again: 412 Precondition failed
progress vC: {"done": 2, "step": "prompted"}
"""


def test_the_agent_loop_pins_a_note_prompts_with_it_and_sets_state_by_version(
    live_server_factory,
) -> None:
    base = live_server_factory()  # the default tool set, auth off
    ns = f"t-{uuid.uuid4().hex[:10]}"
    script = PROJECT_ROOT / "clients" / "mcp_agent_loop.py"
    out = subprocess.run([sys.executable, str(script), base, "release-bot", "--namespace", ns],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    versions = list(dict.fromkeys(int(v) for v in re.findall(r"\bv(\d+)\b", out.stdout)))
    assert len(versions) == 3 and versions == sorted(versions), versions
    named = re.sub(r"\bv(\d+)\b", lambda m: "v" + "ABC"[versions.index(int(m[1]))], out.stdout)
    assert named == EXPECTED
