"""Tools as an MCP server registers them, by the thousand, for tests of the catalog and of
tool_search at scale."""

from __future__ import annotations

import dataclasses

from toolhub.tools import Tool, function

VERBS = ("create", "list", "get", "update", "delete", "search", "archive", "export")
NOUNS = ("issue", "page", "record", "message", "file", "invoice", "ticket", "event")


def mcp_tool(server: str, name: str, *, about: str = "") -> Tool:
    """A deferred tool as an MCP server ``server`` would register it."""

    def body(**kwargs):
        return kwargs

    tool = function(
        body,
        name=f"{server}__{name}",
        description=about or f"{name.replace('_', ' ').capitalize()} in {server}.",
        parameters={"type": "object", "properties": {"id": {"type": "string"}}},
        register_globally=False,
        defer=True,
        source="mcp",
    )
    return dataclasses.replace(tool, origin=f"mcp:{server}")


def tool_name(number: int) -> str:
    """The ``number``th of a run of distinct tool names (a verb, a noun, the number)."""
    return f"{VERBS[number % len(VERBS)]}_{NOUNS[(number // len(VERBS)) % len(NOUNS)]}_{number}"


def server_tools(count: int, *, per_server: int = 8) -> list[Tool]:
    """``count`` deferred MCP tools, ``per_server`` to a server named ``srv<n>``."""
    return [mcp_tool(f"srv{n // per_server}", tool_name(n)) for n in range(count)]
