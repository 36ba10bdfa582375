"""A short agent loop over the service: `python agent_loop.py BASE_URL API_KEY ROBOT`.

Each message of a small conversation is remembered (a statement) or answered from what the
robot recalls (a question; no model here: the answer is the best hit), then the robot's
working memory is read back as prompt context. CI runs it with the built wheel installed in
a clean environment (tests/clients/test_packages.py); agent_loop.ts is the same in
TypeScript and prints the same lines.
"""

import sys

from htm_client import AuthenticatedClient
from htm_client.api.memories import memories_add
from htm_client.api.recall import recall_search
from htm_client.api.working_memory import context_get
from htm_client.models import ContextRead, MemoryAdded, MemoryCreate, RecallRequest, RecallResult
from htm_client.models.recall_request_strategy import RecallRequestStrategy

CONVERSATION = [
    "The staging database runs PostgreSQL 18.",
    "Deploys happen on Fridays after the backup.",
    "When do deploys happen?",
    "Which database runs staging?",
]

base_url, key, robot = sys.argv[1:4]
client = AuthenticatedClient(base_url=base_url, token=key)
for message in CONVERSATION:
    if not message.endswith("?"):
        added = memories_add.sync(robot, client=client, body=MemoryCreate(content=message))
        if not isinstance(added, MemoryAdded):
            raise SystemExit(f"remember: {added}")
        held = "and holding" if added.working_memory.admitted else "(not held)"
        print(f"remembered {held}: {message}")
        continue
    ask = RecallRequest(query=message, limit=1, strategy=RecallRequestStrategy.FULLTEXT)
    found = recall_search.sync(robot, client=client, body=ask)
    if not isinstance(found, RecallResult):
        raise SystemExit(f"recall: {found}")
    print(f"{message} → {found.hits[0].content if found.hits else 'I do not know.'}")
context = context_get.sync(robot, client=client)
if not isinstance(context, ContextRead):
    raise SystemExit(f"context: {context}")
print(f"context: {len(context.items)} items, {context.tokens} tokens")
