"""One tool call, as one REST request would run it: the caller's role checked, the input
validated by its model (in JSON mode, as a request body is), a unit of work that commits on
success and rolls back on error (app/unit.py, as a REST request's), and the answer as JSON.
A domain error or bad input is a tool error (`isError`) carrying the problem+json body."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import mcp_types as types
import orjson
from mcp.server import Server, ServerRequestContext
from pydantic import BaseModel, ValidationError

from app.auth.caller import Caller, require_role
from app.components import Components
from app.errors import PROBLEM_BASE, DomainError
from app.mcp.tools import TOOLS, Tool
from app.unit import unit_of_work

log = logging.getLogger(__name__)

# Who calls: the HTTP endpoint puts the caller it identified in the request's scope state
# (app/mcp/http.py); `htm mcp` (stdio) has one caller for the process.
CallerOf = Callable[[ServerRequestContext[Any]], Caller]


def tool_list() -> list[types.Tool]:
    return [
        types.Tool(name=t.name, description=t.description, input_schema=t.input.model_json_schema())
        for t in TOOLS.values()
    ]


def _result(body: Any) -> types.CallToolResult:
    data = body.model_dump(mode="json") if isinstance(body, BaseModel) else body
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=orjson.dumps(data).decode())],
        structured_content=data,
    )


def _error(problem: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(problem))],
        structured_content=problem,
        is_error=True,
    )


def _invalid(exc: ValidationError) -> types.CallToolResult:
    errors = [
        {"field": ".".join(str(p) for p in e["loc"]), "message": e["msg"], "type": e["type"]}
        for e in exc.errors()
    ]
    return _error(
        {
            "type": PROBLEM_BASE + "validation-error",
            "title": "Validation failed",
            "status": 422,
            "detail": "; ".join(f"{e['field']}: {e['message']}" for e in errors[:5]),
            "errors": errors,
        }
    )


def _domain(exc: DomainError) -> types.CallToolResult:
    return _error(
        {
            "type": PROBLEM_BASE + exc.type,
            "title": exc.title,
            "status": exc.status,
            "detail": exc.detail,
            **exc.extra,
        }
    )


async def call(c: Components, caller: Caller, tool: Tool, arguments: dict[str, Any]) -> Any:
    """Run `tool` for `caller` (DomainError and ValidationError propagate)."""
    require_role(caller, tool.role)
    given = tool.input.model_validate_json(json.dumps(arguments))
    async with unit_of_work(c, caller) as unit:
        return await tool.run(unit, given)


def build_server(components: Callable[[], Components], caller_of: CallerOf) -> Server[Any]:
    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tool_list())

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        tool = TOOLS.get(params.name)
        if tool is None:
            return _error(
                {
                    "type": PROBLEM_BASE + "not-found",
                    "title": "Not found",
                    "status": 404,
                    "detail": f"no tool {params.name!r}; tools: {', '.join(TOOLS)}",
                }
            )
        try:
            body = await call(components(), caller_of(ctx), tool, params.arguments or {})
        except ValidationError as exc:
            return _invalid(exc)
        except DomainError as exc:
            return _domain(exc)
        return _result(body)

    return Server(
        "htm",
        version="1.0.0",
        instructions="Memory for agents: remember, recall, assemble context, forget, stats.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
