"""The README's quickstart: `python quickstart.py BASE_URL API_KEY`."""

import sys

from htm_client import AuthenticatedClient
from htm_client.api.memories import memories_add
from htm_client.api.recall import recall_search
from htm_client.models import MemoryCreate, RecallRequest

base_url, key = sys.argv[1], sys.argv[2]
client = AuthenticatedClient(base_url=base_url, token=key)
added = memories_add.sync(
    "my-agent", client=client, body=MemoryCreate(content="Staging runs PostgreSQL 18.")
)
print(added.key, added.working_memory.admitted)  # a made-up key, True
found = recall_search.sync(
    "my-agent", client=client, body=RecallRequest(query="Which PostgreSQL runs on staging?")
)
for hit in found.hits:
    print(hit.key, round(hit.score, 2), hit.content)
