"""One tool call, as one REST request would run it: the caller's role checked, the input
validated by its model (in JSON mode, as a request body is), a unit of work that commits on
success and rolls back on error (app/unit.py, as a REST request's), and the answer as a
compact text with its structured copy (the tool's output schema). A domain error or bad
input is a tool error (`isError`) carrying the problem+json body, for the model to read and
correct (MCP's rule for a tool's own errors). The tools offered are HTM_MCP_TOOLS' (`offered`);
made-up keys travel as short aliases both ways (app/mcp/aliases.py). Resources: the
namespace's statistics, tag tree and groups, and a robot's working memory, recent memories and
state, which a client may subscribe to (app/mcp/subscriptions.py); prompts for the common
flows (app/mcp/prompts.py). A read or prompt refused, like an unknown tool or one not offered,
is a JSON-RPC error (`protocol_error`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
import orjson
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS
from pydantic import BaseModel, ValidationError

from app import VERSION
from app.auth.caller import Caller, acts_as, may_change_groups, require_role
from app.components import Components
from app.config import Settings
from app.errors import PROBLEM_BASE, DomainError, NotFound, Unprocessable
from app.mcp.aliases import resolve, shorten
from app.mcp.prompts import PROMPTS
from app.mcp.resources import RESOURCES, TEMPLATES, read
from app.mcp.schemas import Robot
from app.mcp.subscriptions import Listen, Subscribe
from app.mcp.tools import TOOLS, Tool, enabled
from app.unit import unit_of_work

log = logging.getLogger(__name__)

# Who calls, and the connection's default robot: the HTTP endpoint puts them in the request's
# scope state (app/mcp/http.py: the key, X-Robot); `htm mcp` (stdio) has them for the process.
CallerOf = Callable[[ServerRequestContext[Any]], Caller]
RobotOf = Callable[[ServerRequestContext[Any]], str | None]
# Whether the caller's key still holds, for a subscription that outlives its request.
AllowedOf = Callable[[ServerRequestContext[Any]], Callable[[], Awaitable[bool]]]

INSTRUCTIONS = (
    "Long-term memory with a working memory per robot. remember what matters, recall before "
    "answering (current facts), use supersedes when a fact changes."
)


# What a model needs of a schema: names, types, enums, bounds, the defaults that say
# something. The rest (generated titles, regular expressions, null branches of optional
# fields) costs tokens on every request and is checked by the server anyway.
_DROPPED = {"title", "pattern", "maxLength", "minLength", "additionalProperties"}


def compact(schema: dict[str, Any]) -> dict[str, Any]:
    """A JSON schema trimmed for a model's context (the input is still validated in full)."""

    def strip(node: Any) -> Any:
        if isinstance(node, list):
            return [strip(x) for x in node]
        if not isinstance(node, dict):
            return node
        branches = node.get("anyOf")
        if isinstance(branches, list):
            kept = [b for b in branches if b != {"type": "null"}]
            if len(kept) == 1:  # optional: the value's own schema
                node = {**{k: v for k, v in node.items() if k != "anyOf"}, **kept[0]}
        out = {}
        for k, v in node.items():
            if k in _DROPPED or (k == "default" and v in (None, [], {})):
                continue
            if k in ("properties", "$defs"):
                out[k] = {name: strip(s) for name, s in v.items()}
            else:
                out[k] = strip(v)
        return out

    trimmed: dict[str, Any] = strip(schema)
    return trimmed


def _hints(t: Tool) -> types.ToolAnnotations:
    """Only what differs from the spec's defaults (read-only false, destructive true,
    idempotent false, open world true); a read-only tool's other hints mean nothing."""
    if t.read_only:
        return types.ToolAnnotations(read_only_hint=True, open_world_hint=False)
    return types.ToolAnnotations(
        destructive_hint=t.destructive,
        idempotent_hint=t.idempotent or None,
        open_world_hint=False,
    )


def offered(tool: Tool, settings: Settings) -> bool:
    """Whether the deployment offers the tool: HTM_MCP_TOOLS names it or its group."""
    return tool.name in enabled(settings.mcp_tools)


def tool_list(*, llm: bool = True, settings: Settings | None = None) -> list[types.Tool]:
    """The tools, those that need an LLM only when one is configured (`llm`): a tool that
    could only answer 409 would cost the model its definition for nothing; only those
    HTM_MCP_TOOLS offers (`settings`; None: every tool)."""
    return [
        types.Tool(
            name=t.name,
            title=t.title,
            description=t.description,
            input_schema=compact(t.input.model_json_schema()),
            output_schema=compact(t.output.model_json_schema()),
            annotations=_hints(t),
        )
        for t in TOOLS.values()
        if (llm or not t.needs_llm) and (settings is None or offered(t, settings))
    ]


def _not_offered(name: str, settings: Settings) -> NotFound:
    """An unknown tool, or one this deployment does not offer: which, and what is."""
    here = ", ".join(t for t in TOOLS if t in enabled(settings.mcp_tools))
    tool = TOOLS.get(name)
    if tool is None:
        return NotFound(f"no tool {name!r}; tools here: {here}")
    return NotFound(
        f"tool {name!r} is not offered here (HTM_MCP_TOOLS={settings.mcp_tools}): add "
        f"{name} or its group {tool.group} to HTM_MCP_TOOLS; tools here: {here}"
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


def protocol_error(exc: DomainError, **context: Any) -> MCPError:
    """A refusal of a request that is not a tool call, as a JSON-RPC error: the caller's
    fault (a 4xx: no such resource, not allowed, bad input) is INVALID_PARAMS, as MCP's
    resource-not-found is (SEP-2164); a dependency down (503) INTERNAL_ERROR. `data` carries
    the problem+json body, so a client tells 403 from 404. Raised on purpose, so the SDK
    answers it without logging a traceback."""
    code = INVALID_PARAMS if exc.status < 500 else INTERNAL_ERROR
    problem = {
        "type": PROBLEM_BASE + exc.type,
        "title": exc.title,
        "status": exc.status,
        "detail": exc.detail,
        **exc.extra,
        **context,
    }
    return MCPError(code, exc.detail, problem)


class _Robot(BaseModel):
    """A prompt's `robot` argument, checked as a tool's is."""

    robot: Robot | None = None


def robot_for(given: BaseModel, default: str | None) -> str:
    robot = getattr(given, "robot", None) or default
    if robot is None:
        message = (
            "no robot: give `robot`, or set the connection's default "
            "(the X-Robot header, or htm mcp --robot)"
        )
        raise Unprocessable(message, errors=[{"field": "robot", "message": message}])
    return str(robot)


async def call(
    c: Components, caller: Caller, tool: Tool, *, arguments: dict[str, Any], default: str | None
) -> tuple[BaseModel, str]:
    """Run `tool` for `caller` (DomainError and ValidationError propagate)."""
    require_role(caller, tool.role)
    given = tool.input.model_validate_json(json.dumps(arguments))
    default = default or caller.robot  # a key bound to a robot: that robot by default
    robot = robot_for(given, default) if tool.needs_robot else (default or "")
    acts_as(caller, robot or None)
    if tool.name.startswith("group_") and not tool.read_only:
        may_change_groups(caller)
    async with unit_of_work(c, caller) as unit:
        given = await resolve(unit, robot, given)
        out, text = await tool.run(unit, given, robot)
        return out, await shorten(unit, text)


async def _always() -> bool:
    return True


def build_server(
    components: Callable[[], Components],
    caller_of: CallerOf,
    robot_of: RobotOf,
    allowed_of: AllowedOf = lambda ctx: _always,
    *,
    lasting: bool = False,
) -> Server[Any]:
    """`lasting`: the connection outlives a request (stdio), so the handshake-era
    `resources/subscribe` can push on it; `/mcp` is stateless."""
    h = _Handlers(components, caller_of, robot_of)
    listen = Listen(components, caller_of, allowed_of, protocol_error)
    legacy = Subscribe(listen) if lasting else None
    return Server(
        "htm",
        version=VERSION,
        instructions=INSTRUCTIONS,
        on_list_tools=h.list_tools,
        on_call_tool=h.call_tool,
        on_list_resources=h.list_resources,
        on_list_resource_templates=h.list_templates,
        on_read_resource=h.read_resource,
        on_subscriptions_listen=listen,
        on_subscribe_resource=legacy.subscribe if legacy else None,
        on_unsubscribe_resource=legacy.unsubscribe if legacy else None,
        on_list_prompts=h.list_prompts,
        on_get_prompt=h.get_prompt,
    )


class _Handlers:
    """The server's answers, for the components, caller and robot of each request's way in
    (HTTP or stdio)."""

    def __init__(
        self, components: Callable[[], Components], caller_of: CallerOf, robot_of: RobotOf
    ) -> None:
        self.components = components
        self.caller_of = caller_of
        self.robot_of = robot_of

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        c = self.components()
        return types.ListToolsResult(tools=tool_list(llm=c.llm is not None, settings=c.settings))

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        settings = self.components().settings
        tool = TOOLS.get(params.name)
        if tool is None or not offered(tool, settings):  # a protocol error, as MCP says
            raise protocol_error(_not_offered(params.name, settings), tool=params.name)
        try:
            out, text = await call(
                self.components(),
                self.caller_of(ctx),
                tool,
                arguments=params.arguments or {},
                default=self.robot_of(ctx),
            )
        except ValidationError as exc:
            return _invalid(exc)
        except DomainError as exc:
            return _domain(exc)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)],
            structured_content=out.model_dump(mode="json", exclude_none=True),
        )

    async def list_prompts(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        return types.ListPromptsResult(
            prompts=[
                types.Prompt(
                    name=p.name,
                    title=p.title,
                    description=p.description,
                    arguments=[
                        types.PromptArgument(
                            name=a.name, description=a.description, required=a.required
                        )
                        for a in p.arguments
                    ],
                )
                for p in PROMPTS.values()
            ]
        )

    async def get_prompt(
        self, ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        """A prompt's messages, run as its tool is (role, robot, unit of work); a refusal or
        bad argument is a JSON-RPC error carrying the problem, as a resource's is."""
        prompt = PROMPTS.get(params.name)
        args = dict(params.arguments or {})
        try:
            if prompt is None:
                raise NotFound(f"no prompt {params.name!r}; prompts: {', '.join(PROMPTS)}")
            known = {a.name for a in prompt.arguments}
            unknown = sorted(set(args) - known)
            if unknown:
                message = f"no argument {', '.join(unknown)}; arguments: {', '.join(sorted(known))}"
                raise Unprocessable(message, errors=[{"field": unknown[0], "message": message}])
            caller = self.caller_of(ctx)
            require_role(caller, prompt.role)
            robot = robot_for(
                _Robot.model_validate({"robot": args.get("robot")}),
                self.robot_of(ctx) or caller.robot,
            )
            acts_as(caller, robot)
            async with unit_of_work(self.components(), caller) as unit:
                text = await shorten(unit, await prompt.run(unit, args, robot))
        except ValidationError as exc:
            problem = _invalid(exc).structured_content or {}
            raise MCPError(INVALID_PARAMS, str(problem.get("detail")), problem) from None
        except DomainError as exc:
            raise protocol_error(exc, prompt=params.name) from None
        return types.GetPromptResult(
            description=prompt.description,
            messages=[
                types.PromptMessage(role="user", content=types.TextContent(type="text", text=text))
            ],
        )

    async def list_resources(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        robot = self.robot_of(ctx)
        listed = [
            types.Resource(uri=uri, name=name, description=about, mime_type="application/json")
            for uri, name, about in RESOURCES(robot)
        ]  # fmt: skip
        return types.ListResourcesResult(resources=listed)

    async def list_templates(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    uri_template=uri, name=name, description=about, mime_type="application/json"
                )
                for uri, name, about in TEMPLATES
            ]
        )

    async def read_resource(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        try:
            caller = self.caller_of(ctx)
            require_role(caller, "reader")
            async with unit_of_work(self.components(), caller) as unit:
                body = await read(unit, uri)
            if body is None:
                raise NotFound(f"no resource {uri}")
        except DomainError as exc:
            raise protocol_error(exc, uri=uri) from None
        return types.ReadResourceResult(
            contents=[
                types.TextResourceContents(
                    uri=params.uri, mime_type="application/json", text=orjson.dumps(body).decode()
                )
            ]
        )
