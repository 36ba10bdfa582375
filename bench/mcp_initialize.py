"""`python -m bench.mcp_initialize [PROJECT]`: start `htm mcp` (of PROJECT, default this
one) as an MCP client does, send `initialize`, and exit when it answers: what `farm-bench`
times to measure how long a client waits for the stdio server (bench/README.md, CLI start).
The environment's HTM_* settings reach the server."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


async def main(project: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "app.cli", "mcp", "--namespace", "bench-start"],
        env=dict(os.environ),
        cwd=str(project),
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
        await s.initialize()


if __name__ == "__main__":
    here = Path(__file__).resolve().parent.parent
    asyncio.run(main(Path(sys.argv[1]) if len(sys.argv) > 1 else here))
