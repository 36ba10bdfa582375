"""`python -m tests.connections.serving`: `htm serve` itself (its uvicorn protocol options
included, app/http/protocol.py), on databases the suite started; every setting from HTM_*
variables. The connection tests need a real server: socket behaviour, a separate process's
memory and log lines."""

from __future__ import annotations

import sys

from app.cli import main

if __name__ == "__main__":
    sys.exit(main(["serve", "--no-migrate"]))
