"""The connections to MCP servers of this process: one event loop in one daemon thread,
and ``McpManager``, which reconciles the configured servers, routes each call to the
connection it goes through (the server's own, or a chat's or person's), and closes what
is no longer wanted. The invariants are in this package's docstring.

Which of a server's own connections a call goes through is ``pool``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import IO, Any

from toolhub.tools.context import ToolContext
from toolhub.tools.mcp.callers import Caller
from toolhub.tools.mcp.config import (
    CLOSE_SECONDS,
    McpLogLine,
    McpPrompt,
    McpResource,
    McpServerConfig,
    McpStatus,
    McpUnavailableError,
    tool_name,
    untrusted_text,
)
from toolhub.tools.mcp.connection import SHOWN, Connection
from toolhub.tools.mcp.oauth import (
    McpOAuthStore,
)
from toolhub.tools.mcp.pool import OwnConnections
from toolhub.tools.mcp.prompts import prompt_problem, prompt_text
from toolhub.tools.mcp.resources import LIST_RESOURCES, READ_RESOURCE, resource_listing
from toolhub.tools.mcp.results import resource_text, result_text
from toolhub.tools.mcp.transport import describe
from toolhub.tools.registry import ToolRegistry
from toolhub.tools.registry import registry as default_registry
from toolhub.tools.tool import ToolResult, ToolUnavailable

logger = logging.getLogger(__name__)

# How often a connected server is probed, and how long a probe may take, by transport
# (``McpManager.probe_timing``): a stdio server is a process on this machine, which answers
# a ping within milliseconds unless it is hung; an HTTP server is across a network.
STDIO_PROBE = (1.0, 1.5)
HTTP_PROBE = (3.0, 5.0)


def progress_line(progress: float, total: float | None, message: str | None) -> str:
    """A server's progress notification as a line of the call's live output."""
    counted = f"{progress:g}/{total:g}" if total else f"{progress:g}"
    text = untrusted_text(message, 500)
    return f"{text} ({counted})\n" if text else f"{counted}\n"


class McpManager:
    """Every configured server of this process, on one loop in one daemon thread."""

    def __init__(
        self,
        registry: ToolRegistry | None = None,
        *,
        health_interval: float = 10.0,
        probe_interval: float | None = None,
        probe_timeout: float | None = None,
        hold: float = 30.0,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        list_timeout: float = 30.0,
        max_pages: int = 100,
        chat_idle: float = 300.0,
        max_chats: int = 20,
        errlog: IO[str] | None = None,
        oauth_store: McpOAuthStore | None = None,
    ) -> None:
        self.registry = default_registry if registry is None else registry
        # Where OAuth servers' grants live; without one, such a server needs sign-in.
        self.oauth_store = oauth_store
        self.health_interval = health_interval
        self.probe_interval = probe_interval
        self.probe_timeout = probe_timeout
        self.hold = hold
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.list_timeout = list_timeout
        self.max_pages = max_pages
        self.errlog = errlog
        self._connections: dict[str, Connection] = {}
        # Chats' and people's own connections: at most ``max_chats`` per server, each
        # closed after ``chat_idle`` seconds without a call.
        self.own = OwnConnections(self, max_chats=max_chats, chat_idle=chat_idle)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._reconciling: asyncio.Lock  # made on the manager's loop, which it belongs to

    def start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            ready = threading.Event()

            def run() -> None:
                loop = asyncio.new_event_loop()
                asyncio.set_event_loop(loop)
                self._reconciling = asyncio.Lock()
                self._loop = loop
                ready.set()
                loop.run_forever()

            self._thread = threading.Thread(target=run, name="toolhub-mcp", daemon=True)
            self._thread.start()
            ready.wait()

    def reconcile(self, configs: Iterable[McpServerConfig], *, wait: float | None = None) -> None:
        """Connect what is new or changed, disconnect (and unregister) what is gone; an
        unchanged server is left alone. Returns at once unless ``wait`` is given."""
        self.start()
        assert self._loop is not None
        wanted = {config.name: config for config in configs}
        future = asyncio.run_coroutine_threadsafe(self._reconcile(wanted), self._loop)
        if wait is not None:
            future.result(wait)

    async def _reconcile(self, wanted: dict[str, McpServerConfig]) -> None:
        # One at a time: a reconcile read from an older table must not interleave with a
        # newer one while a server closes (which can take seconds).
        async with self._reconciling:
            gone = [
                name
                for name, connection in sorted(self._connections.items())
                if wanted.get(name) != connection.config
            ]
            closing: list[Connection] = [self._connections.pop(name) for name in gone]
            closing += self.own.pop_servers(gone)
            await asyncio.gather(*(connection.close() for connection in closing))
            for name in gone:
                if name not in wanted:
                    self.registry.sync_origin(f"mcp:{name}", [])
                    self.registry.set_note(f"mcp:{name}", "")
            for name in sorted(wanted):
                if name not in self._connections:
                    self._connections[name] = Connection(self, wanted[name])

    def connection(self, server: str) -> Connection | None:
        """``server``'s own connection as configured now (on the loop)."""
        return self._connections.get(server)

    def probe_timing(self, config: McpServerConfig) -> tuple[float, float]:
        """How often ``config``'s server is probed and how long a probe may take: the
        manager's own where it was given them, else by transport."""
        interval, timeout = STDIO_PROBE if config.transport == "stdio" else HTTP_PROBE
        return (
            interval if self.probe_interval is None else self.probe_interval,
            timeout if self.probe_timeout is None else self.probe_timeout,
        )

    def statuses(self) -> dict[str, McpStatus]:
        # dict() copies in one step: the manager's loop may change the dict meanwhile.
        connections = dict(self._connections)
        return {name: connections[name].status for name in sorted(connections)}

    def chats(self, server: str) -> int:
        """How many chats have a connection of their own to ``server`` now (any thread)."""
        return self.own.count(server)

    def logs(self, server: str) -> list[McpLogLine]:
        """The log messages ``server`` sent this process, oldest first (any thread)."""
        connection = self._connections.get(server)
        # copy() runs in C, whole, so the loop's appends never interleave with it.
        return list(connection.logs.copy()) if connection is not None else []

    def check(self, server: str) -> bool:
        """Layer 4 for every tool of ``server`` (any thread). It looks the connection up by
        name: a tool kept across a reconnect answers for the connection of now."""
        connection = self._connections.get(server)
        if connection is None:
            raise ToolUnavailable(f"MCP server {server} disconnected")
        if connection.status.state not in SHOWN:
            raise ToolUnavailable(connection.reason)
        return True

    async def call(
        self, server: str, remote: str, arguments: dict[str, Any], *, ctx: ToolContext
    ) -> ToolResult:
        """Call ``server``'s tool from any loop; progress streams to ``ctx.update``."""
        loop = asyncio.get_running_loop()

        async def progress(done: float, total: float | None, message: str | None) -> None:
            if ctx.cancel.cancelled:
                return
            # A late notification after the caller's loop closed is dropped.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(ctx.update, progress_line(done, total, message))

        label = tool_name(server, remote)
        caller = Caller(ctx=ctx, loop=loop)

        async def send(connection: Connection) -> Any:
            target = await self.own.connection_for(connection, caller)
            return await target.call(remote, arguments, progress, caller)

        answer = await self._on_loop(server, label, send)
        if isinstance(answer, ToolResult):
            return answer
        return result_text(answer, reader=tool_name(server, READ_RESOURCE))

    async def list_resources(
        self, server: str, cursor: str | None, *, ctx: ToolContext
    ) -> ToolResult:
        """One page of ``server``'s resources, as text for the model."""

        async def send(client: Any) -> Any:
            return await client.list_resources(cursor=cursor, cache_mode="refresh")

        answer = await self._scoped(server, tool_name(server, LIST_RESOURCES), ctx, send)
        if isinstance(answer, ToolResult):
            return answer
        return resource_listing(server, answer)

    async def read_resource(self, server: str, uri: str, *, ctx: ToolContext) -> ToolResult:
        """The contents of ``server``'s resource ``uri``, as text for the model."""

        async def send(client: Any) -> Any:
            return await client.read_resource(uri, cache_mode="refresh")

        answer = await self._scoped(server, tool_name(server, READ_RESOURCE), ctx, send)
        if isinstance(answer, ToolResult):
            return answer
        return resource_text(answer)

    async def _scoped(
        self, server: str, label: str, ctx: ToolContext, send: Callable[[Any], Awaitable[Any]]
    ) -> Any:
        """``send(client)`` on the connection ``ctx``'s call goes through (a person's or a
        chat's own where the server has them, as for its tools), from any loop."""
        caller = Caller(ctx=ctx, loop=asyncio.get_running_loop())

        async def on_loop(connection: Connection) -> Any:
            target = await self.own.connection_for(connection, caller)
            return await target.request(send, caller)

        return await self._on_loop(server, label, on_loop)

    def prompts(self) -> list[McpPrompt]:
        """Every connected server's prompts, by server then name (any thread)."""
        connections = dict(self._connections)
        return [
            prompt
            for name in sorted(connections)
            if connections[name].status.state == "connected"
            for prompt in connections[name].listing.prompts
        ]

    def resources(self) -> list[McpResource]:
        """Every connected server's listed resources (the first page of each), by server
        then as listed (any thread)."""
        connections = dict(self._connections)
        return [
            resource
            for name in sorted(connections)
            if connections[name].status.state == "connected"
            for resource in connections[name].listing.resources
        ]

    async def get_prompt(
        self, server: str, name: str, arguments: dict[str, str], *, ctx: ToolContext
    ) -> ToolResult:
        """``server``'s prompt ``name`` filled in, as the text of a person's message; an
        error result says why not (an unknown prompt, a missing argument, the server)."""
        prompt = next((p for p in self.prompts() if (p.server, p.name) == (server, name)), None)
        if prompt is None:
            return ToolResult.error(f"MCP server {server} offers no prompt {name[:128]!r} now")
        problem = prompt_problem(prompt, arguments)
        if problem:
            return ToolResult.error(problem)
        given = {key: value for key, value in arguments.items() if value}

        async def send(client: Any) -> Any:
            return await client.get_prompt(name, given)

        answer = await self._scoped(server, f"/{server}:{name}", ctx, send)
        if isinstance(answer, ToolResult):
            return answer
        text = prompt_text(answer)
        return (
            ToolResult(content=text)
            if text
            else ToolResult.error(f"/{server}:{name} came back empty")
        )

    async def _on_loop(
        self, server: str, label: str, make: Callable[[Connection], Coroutine[Any, Any, Any]]
    ) -> Any:
        """Run ``make(connection)`` on the manager's loop from any other; what fails
        comes back as an error ``ToolResult`` that says why."""
        from mcp.shared.exceptions import MCPError

        connection = self._connections.get(server)
        if connection is None or self._loop is None:
            return ToolResult.error(f"MCP server {server} is not connected in this process")
        future = asyncio.run_coroutine_threadsafe(make(connection), self._loop)
        try:
            return await asyncio.wrap_future(future)
        except McpUnavailableError as exc:
            return ToolResult.error(f"{label}: {exc}")
        except MCPError as exc:
            return ToolResult.error(
                f"{label}: the MCP server answered with an error: {describe(exc)}"
            )
        except TimeoutError:
            return ToolResult.error(f"{label}: the MCP server did not answer in time")

    async def _stop(self) -> None:
        await self._reconcile({})
        # Any opened by a call that crossed to the loop as its server was removed.
        await asyncio.gather(*(own.close() for own in self.own.pop_servers()))
        await self.own.closed()

    def stop(self, timeout: float = 5.0) -> None:
        """Close every connection (stdio servers are stopped) and end the thread."""
        with self._lock:
            loop, thread = self._loop, self._thread
            if loop is None or thread is None:
                return
            future = asyncio.run_coroutine_threadsafe(self._stop(), loop)
            with contextlib.suppress(Exception):
                future.result(timeout + CLOSE_SECONDS)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout)
            self._loop, self._thread = None, None
            self._connections = {}
