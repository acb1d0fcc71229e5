"""A server's resources: the two reader tools a server that lists any gets
(``resource_tools``), a listing page as text for the model (``resource_listing``), and the
first page as the composer's "@" entries (``resource_entries``). What a read returns is
turned into a result in ``results``.

Invariants: the readers are read-only, deferred like the server's tools and subject to its
allowlist, and a name the server's own tools hold stays theirs; a URI holding control
characters, or too long, is never put in a prompt or an entry (it is left out, and the
listing says how many were).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from toolhub.tools.context import ToolContext
from toolhub.tools.mcp.config import (
    CONTROL_CHARS,
    MAX_LABEL_CHARS,
    McpResource,
    McpServerConfig,
    tool_name,
    untrusted_text,
)
from toolhub.tools.mcp.tools import READ_ONLY, McpTool
from toolhub.tools.registry import Skipped
from toolhub.tools.tool import Tool, ToolResult

LIST_RESOURCES = "list_resources"
READ_RESOURCE = "read_resource"
MAX_URI_CHARS = 2_048
MAX_RESOURCES = 500
_LIST_SCHEMA = {
    "type": "object",
    "properties": {
        "cursor": {
            "type": "string",
            "description": "The cursor an earlier page ended with, for the page after it.",
        }
    },
    "additionalProperties": False,
}
_READ_SCHEMA = {
    "type": "object",
    "properties": {
        "uri": {
            "type": "string",
            "description": "The resource's URI, exactly as listed.",
            "minLength": 1,
            "maxLength": MAX_URI_CHARS,
        }
    },
    "required": ["uri"],
    "additionalProperties": False,
}


@dataclass(frozen=True, slots=True)
class _Reader:
    """One reader tool before it is a ``Tool``: its remote name, what runs, and what the
    model is told."""

    remote: str
    fn: Callable[..., Any]
    schema: dict[str, Any]
    description: str


def resource_tools(
    config: McpServerConfig, manager: Any, *, check: Callable[[], bool], taken: set[str]
) -> tuple[list[Tool], list[Skipped]]:
    """The two readers of a server that offers resources: ``<server>__list_resources``
    and ``<server>__read_resource``, read-only, deferred like the server's tools, and
    subject to its allowlist. A name the server's own tools hold stays theirs."""
    origin = f"mcp:{config.name}"
    allowed = frozenset(config.allowlist) if config.allowlist is not None else None
    server = config.name
    tools: list[Tool] = []
    skipped: list[Skipped] = []
    for reader in _readers(server, manager):
        remote = reader.remote
        if allowed is not None and remote not in allowed:
            continue
        name = tool_name(server, remote)
        if name in taken:
            skipped.append(Skipped(name, f"the server's own tool {remote} holds the name", origin))
            continue
        reader.fn.__qualname__ = f"mcp:{server}:{remote}"
        tools.append(
            McpTool(
                name=name,
                description=reader.description,
                parameters=reader.schema,
                fn=reader.fn,
                label=remote.replace("_", " ").capitalize(),
                origin=origin,
                timeout=config.timeout,
                check_fn=check,
                defer=config.defer,
                source="mcp",
                persist_full=True,
                effect=READ_ONLY,
            )
        )
    return tools, skipped


def _readers(server: str, manager: Any) -> list[_Reader]:
    # The call's context picks the connection: a person's or a chat's own where the
    # server has them (McpManager._connection_for), as for the server's tools.
    async def list_resources(ctx: ToolContext, cursor: str | None = None) -> ToolResult:
        result: ToolResult = await manager.list_resources(server, cursor, ctx=ctx)
        return result

    async def read_resource(ctx: ToolContext, uri: str) -> ToolResult:
        result: ToolResult = await manager.read_resource(server, uri, ctx=ctx)
        return result

    return [
        _Reader(
            LIST_RESOURCES,
            list_resources,
            _LIST_SCHEMA,
            f"List the resources (documents, files, records) MCP server {server} offers, "
            f"a page at a time; read one with {tool_name(server, READ_RESOURCE)}.",
        ),
        _Reader(
            READ_RESOURCE,
            read_resource,
            _READ_SCHEMA,
            f"Read one of MCP server {server}'s resources by its URI.",
        ),
    ]


def resource_listing(server: str, result: Any) -> ToolResult:
    """A ``ListResourcesResult`` as lines the model can act on: each URI (exactly, or
    left out when it holds characters no prompt should carry), name, type and summary."""
    reader = tool_name(server, READ_RESOURCE)
    lines = [f"Resources of MCP server {server} (read one with {reader}):"]
    left_out = 0
    for resource in result.resources or ():
        uri = str(resource.uri)
        if CONTROL_CHARS.search(uri) or len(uri) > MAX_URI_CHARS:
            left_out += 1
            continue
        name = untrusted_text(resource.title or resource.name, MAX_LABEL_CHARS)
        mime = f" ({untrusted_text(resource.mime_type, 80)})" if resource.mime_type else ""
        about = untrusted_text(resource.description, 200)
        lines.append(f"- {uri} — {name}{mime}" + (f": {about}" if about else ""))
    if len(lines) == 1:
        lines.append("(none)")
    if left_out:
        lines.append(f"({left_out} left out: their URIs hold control characters or are too long)")
    if result.next_cursor:
        lines.append(f"More: call again with cursor {json.dumps(result.next_cursor)}.")
    return ToolResult(content="\n".join(lines))


def resource_entries(server: str, listed: Iterable[Any]) -> tuple[McpResource, ...]:
    """A server's listed resources as composer entries, in its order; a URI no prompt
    should carry is left out, as in ``resource_listing``."""
    entries: list[McpResource] = []
    seen: set[str] = set()
    for resource in listed:
        uri = str(resource.uri)
        if CONTROL_CHARS.search(uri) or len(uri) > MAX_URI_CHARS or uri in seen:
            continue
        seen.add(uri)
        entries.append(
            McpResource(
                server=server,
                uri=uri,
                name=untrusted_text(resource.title or resource.name, MAX_LABEL_CHARS),
                mime_type=untrusted_text(resource.mime_type, 80),
                description=untrusted_text(resource.description, 200),
            )
        )
        if len(entries) == MAX_RESOURCES:
            break
    return tuple(entries)
