"""`htm mcp`: the same tools over stdin/stdout, for a client that starts the server itself.
One caller for the process: the key given (auth on), else the namespace given."""

from __future__ import annotations

from mcp.server.stdio import stdio_server

from app.auth.caller import Caller
from app.components import Components
from app.mcp.server import build_server
from app.mcp.tools import enabled


async def serve_stdio(components: Components, caller: Caller, robot: str | None = None) -> None:
    enabled(components.settings.mcp_tools)  # an unknown tool name: the start fails, saying why
    server = build_server(lambda: components, lambda ctx: caller, lambda ctx: robot, lasting=True)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())
