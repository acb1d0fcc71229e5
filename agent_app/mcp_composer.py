"""What the composer takes from MCP servers: the resources a person attaches to a
message ("@") and the prompts whose filled-in text becomes one.

Invariants:
- A resource is read, and a prompt filled, as the chat's own call would be: with the
  chat's context, so a server that takes each person's own credential gets theirs, never
  the server's on their behalf.
- An operator's disable of a server's resource reader hides its resources here too, and
  a message carries text only: a binary resource is refused, never half attached.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync

from agent_app.mcp import manager
from profiles_app.services import global_disables
from sessions_app.models import ChatSession
from sessions_app.services import session_context
from toolhub.lib.errors import Conflict, Invalid
from toolhub.tools.mcp import prompt_problem, tool_name
from toolhub.tools.mcp.resources import READ_RESOURCE


def mcp_resources() -> list[dict[str, Any]]:
    """The resources a person can attach to a message ("@" in the composer): those of
    every connected server whose reader no operator has disabled."""
    disabled = global_disables()
    return [
        resource.to_json()
        for resource in manager.resources()
        if tool_name(resource.server, READ_RESOURCE) not in disabled
    ]


def mcp_resource_attach(*, session: ChatSession, server: str, uri: str) -> str:
    """A listed resource's contents as the composer attaches them: a line naming it, then
    its text exactly as the server sent it. Raises ``Invalid`` for a URI the server does
    not list, ``Conflict`` when it cannot be read now (its reader disabled included) or
    is binary (an image or a file: the reader tool carries those, a message cannot)."""
    resource = next((r for r in manager.resources() if (r.server, r.uri) == (server, uri)), None)
    if resource is None:
        raise Invalid(f"MCP server {server[:24]} lists no resource {uri[:200]!r}")
    reader = tool_name(server, READ_RESOURCE)
    reason = global_disables().get(reader)
    if reason is not None:
        raise Conflict(f"{reader} is {reason}")
    # Read as the chat's own call would: a person's own credential where the server
    # takes one, never the server's on their behalf.
    result = async_to_sync(manager.read_resource)(server, uri, ctx=session_context(session=session))
    if result.is_error:
        raise Conflict(result.content)
    if result.files or result.images:
        # A message carries text: the bytes would be lost, and its line would promise a
        # download nobody is offered. The reader tool carries both, in a turn.
        raise Conflict(
            f"{resource.name[:80]} is a binary file, and a message carries only text: ask "
            f"the assistant to read it with {reader}, which shows you images and offers "
            "files for download."
        )
    return f"[Resource {resource.name} ({uri}) from MCP server {server}]\n{result.content}"


def mcp_prompts() -> list[dict[str, Any]]:
    """The prompts of every server connected in this process, as the composer lists them."""
    return [prompt.to_json() for prompt in manager.prompts()]


def mcp_prompt_fill(*, session: ChatSession, server: str, name: str, arguments: Any) -> str:
    """``server``'s prompt ``name`` filled in with ``arguments`` (text by name): the text
    the person's message will be. Raises ``Invalid`` for arguments the prompt does not
    take, ``Conflict`` when the server cannot answer now."""
    if not isinstance(arguments, dict) or not all(
        isinstance(value, str) for value in arguments.values()
    ):
        raise Invalid("a prompt's arguments are an object of texts")
    prompt = next((p for p in manager.prompts() if (p.server, p.name) == (server, name)), None)
    if prompt is None:
        raise Conflict(f"MCP server {server[:24]} offers no prompt {name[:128]!r} now")
    problem = prompt_problem(prompt, arguments)
    if problem:
        raise Invalid(problem)
    # Checked again there; what fails now is the server's state (gone, an error).
    ctx = session_context(session=session)
    result = async_to_sync(manager.get_prompt)(server, name, arguments, ctx=ctx)
    if result.is_error:
        raise Conflict(result.content)
    return result.content
