"""What one server lists, kept fresh (``ServerListing``): its tools built and registered
(and the resource readers when it lists resources), its prompts, the first page of its
resources for the composer's "@", and when to list again (a list_changed notification,
or the interval).

Invariants: a relisting that keeps a tool's wire form keeps the registered tool (and so
the array and its fingerprint), unless its plan-mode and approval rules changed; a bad
prompt or resource listing costs the prompts or the readers, never the tools; what the
server-wide listing names is for everybody to see, so a server that takes each person's
own credential, or whose allowlist leaves out the reader, shows nobody its resources.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from toolhub.tools.mcp.config import McpPrompt, McpResource, McpServerConfig, tool_name
from toolhub.tools.mcp.prompts import prompt_entries
from toolhub.tools.mcp.resources import READ_RESOURCE, resource_entries, resource_tools
from toolhub.tools.mcp.tools import build_tools, same_safety
from toolhub.tools.registry import Skipped
from toolhub.tools.tool import Tool

if TYPE_CHECKING:
    from toolhub.tools.mcp.manager import McpManager

logger = logging.getLogger(__name__)

# What a handshake-era server sends when the listings toolhub keeps change.
LIST_CHANGES = frozenset(
    {
        "notifications/tools/list_changed",
        "notifications/resources/list_changed",
        "notifications/prompts/list_changed",
    }
)


@dataclass(frozen=True, slots=True)
class Listed:
    """A relisting's outcome: how many tools are registered now, what was skipped and
    why, and the remote names a call may go to (``Connection.offered``)."""

    tools: int
    skipped: tuple[Skipped, ...]
    offered: frozenset[str]


class ServerListing:
    """One server's listings, as its connection last read them."""

    def __init__(self, manager: McpManager, config: McpServerConfig) -> None:
        self.manager = manager
        self.config = config
        # Remote name -> its annotations as the wire carried them (``transport.watched``).
        self.wire: dict[str, Any] = {}
        # Set by a list_changed notification: relist now, not at the next interval.
        self.changed = asyncio.Event()
        self.prompts: tuple[McpPrompt, ...] = ()
        self.resources: tuple[McpResource, ...] = ()
        self.warned: frozenset[str] = frozenset()

    async def refresh(self, client: Any) -> Listed:
        """List the server afresh and register what it offers now."""
        self.wire.clear()
        listing = await self._all_pages(client.list_tools, "tools")
        check = functools.partial(self.manager.check, self.config.name)
        tools, skipped = build_tools(
            self.config,
            listing,
            call=self.manager.call,
            check=check,
            wire=dict(self.wire),
        )
        if await self._has_resources(client):
            # The server's own tools keep their names; the readers take what is left.
            extra, passed = resource_tools(
                self.config, self.manager, check=check, taken={tool.name for tool in tools}
            )
            tools, skipped = sorted([*tools, *extra], key=lambda tool: tool.name), skipped + passed
        self.prompts = await self._listed_prompts(client)
        skipped += self._register(tools)
        registered = {tool.name for tool in tools} - {item.name for item in skipped}
        offered = frozenset(
            remote.name
            for remote in listing
            if tool_name(self.config.name, remote.name) in registered
        )
        # Said once, not at every relisting: the ops page keeps showing them.
        for item in skipped:
            if item.reason not in self.warned:
                logger.warning("MCP server %s: %s", self.config.name, item.reason)
        self.warned = frozenset(item.reason for item in skipped)
        return Listed(tools=len(tools) - len(skipped), skipped=tuple(skipped), offered=offered)

    def _register(self, tools: list[Tool]) -> list[Skipped]:
        """Put ``tools`` in the registry in place of the server's earlier ones; what it
        could not register, and why."""
        registry = self.manager.registry
        for tool in tools:
            existing = registry.get(tool.name)
            # sync_origin would keep a tool whose wire form is unchanged, but its plan-mode
            # and approval rules must not outlive the listing or config that set them.
            ours = existing is not None and existing.origin == tool.origin
            if existing is not None and ours and not same_safety(existing, tool):
                registry.unregister(tool.name)
        return registry.sync_origin(f"mcp:{self.config.name}", tools)

    async def _all_pages(self, fetch: Callable[..., Awaitable[Any]], field: str) -> list[Any]:
        """Every page of a listing, fresh, within the listing's time limit and page cap."""
        items: list[Any] = []
        cursor = None
        async with asyncio.timeout(self.manager.list_timeout):
            for _ in range(self.manager.max_pages):
                page = await fetch(cursor=cursor, cache_mode="refresh")
                items.extend(getattr(page, field))
                cursor = page.next_cursor
                if not cursor:
                    break
        return items

    async def _listed_prompts(self, client: Any) -> tuple[McpPrompt, ...]:
        """The server's prompts; none when it has none or lists them badly (its tools
        must not depend on its prompts)."""
        if client.server_capabilities.prompts is None:
            return ()
        try:
            listed = await self._all_pages(client.list_prompts, "prompts")
            return prompt_entries(self.config.name, listed)
        except Exception as exc:
            logger.info("MCP server %s: listing prompts failed: %s", self.config.name, exc)
            return ()

    async def _has_resources(self, client: Any) -> bool:
        """Whether the server lists any resource: many servers declare the capability
        with nothing behind it, and two tools that can only say "(none)" cost tokens.
        The first page is kept for the composer's "@", replacing the last listing's only
        once this one is in: a person attaching a resource while the server is relisted
        finds the earlier list, not an empty one."""
        if client.server_capabilities.resources is None:
            self.resources = ()
            return False
        try:
            async with asyncio.timeout(self.manager.list_timeout):
                page = await client.list_resources(cache_mode="refresh")
        except Exception as exc:
            # Like prompts: a bad resource listing costs the readers, never the tools.
            logger.info("MCP server %s: listing resources failed: %s", self.config.name, exc)
            self.resources = ()
            return False
        allowed = self.config.allowlist
        # An allowlist without the reader keeps the server's resources from people too, and
        # so does a server that takes each person's own credential: this listing is the
        # server's own, and what it names may not be everybody's to see.
        shown = (allowed is None or READ_RESOURCE in allowed) and not self.config.user_credential
        self.resources = resource_entries(self.config.name, page.resources or ()) if shown else ()
        return bool(page.resources)

    async def until_due(self, lost: asyncio.Event, every: float) -> None:
        """Wait for the next relisting: a list_changed notification, the interval, or the
        connection lost, whichever comes first."""
        waits = [asyncio.ensure_future(event.wait()) for event in (lost, self.changed)]
        try:
            await asyncio.wait(waits, timeout=every, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()

    async def listen(self, client: Any) -> None:
        """2026-07-28 delivers list_changed on a ``subscriptions/listen`` stream; a server
        without one is relisted on the interval only."""
        try:
            async with client.listen(
                tools_list_changed=True, resources_list_changed=True, prompts_list_changed=True
            ) as events:
                async for _event in events:
                    self.changed.set()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.info("MCP server %s: no change notifications (%s)", self.config.name, exc)

    async def notified(self, message: Any) -> None:
        # Handshake-era servers send list_changed as a plain notification.
        if getattr(message, "method", None) in LIST_CHANGES:
            self.changed.set()
