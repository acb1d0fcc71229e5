"""Connections of a scope's own (``ScopedConnection``): a chat's, whose only root is its
workspace, a person's, carrying their own credential (``with_personal_credential``), and a
chat's connection that carries one call at a time, so that whatever a handshake-era stdio
server asks on it belongs to that call by construction. The server-wide ``Connection``
lists; these only serve their scope's requests.

Invariants: a one-call connection is held (``holder``) by one call from the moment the
manager gives it out to the moment that call has its answer; a call given up on before its
answer (a Stop, a timeout, the server lost) retires the connection, which is closed and
never given to another call, since the server may still be working, and asking, for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolhub.tools.context import ToolContext
from toolhub.tools.mcp.callers import Caller
from toolhub.tools.mcp.config import (
    McpNotSent,
    McpServerConfig,
    McpStatus,
    McpUnavailableError,
)
from toolhub.tools.mcp.connection import Connection
from toolhub.tools.mcp.liveness import probe_forever
from toolhub.tools.mcp.transport import describe, modern_versions

if TYPE_CHECKING:
    from toolhub.tools.mcp.manager import McpManager

# How long a chat's new connection to a handshake-era server waits for the server to ask
# for its roots before the first call goes (a server that never asks costs this once per
# connection), and then for it to take them in.
ROOTS_GRACE_SECONDS = 1.0
ROOTS_SETTLE_SECONDS = 0.2
# How long a closing connection waits for the replies to what its server asked.
SETTLE_SECONDS = 1.0


class ScopedConnection(Connection):
    """A connection of one scope's own: a chat's, to a server with workspace roots (its
    only root is the chat's workspace, so a server that keeps what it is told, as
    filesystem keeps its allowed folders, never works in one chat's folder for another),
    a person's, to a server that takes each person's own credential (so nobody's call goes
    with another's), or both; and a chat's to a handshake-era stdio server, which carries
    one call at a time (``one_call``: what that server asks on it is its one call's, and
    a chat's state on the server, a browser say, stays the chat's). The scope's first call
    opens it, ``chat_idle`` seconds without a call close it. It registers nothing (the
    server-wide connection keeps the listing, and what that offers decides what may be
    called) and is not reconnected: a lost one ends, and the scope's next call opens
    another."""

    def __init__(
        self,
        manager: McpManager,
        primary: Connection,
        *,
        scope: str,
        config: McpServerConfig,
        workspace: Path | None,
        holder: Caller | None = None,
        slot: int = 0,
    ) -> None:
        self.primary = primary
        self.scope = scope
        self.slot = slot
        self.workspace = workspace
        # One call at a time (``holder``: the call it serves now) where the server's
        # questions name no call; shared by the scope's calls otherwise.
        self.one_call = holder is not None
        self.holder = holder
        # Calls it was given to that have not sent on it yet: it is not idle meanwhile.
        self.pending = 0
        # Its scope's configuration changed while a call used it: it closes once free.
        self.stale = False
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.idle: asyncio.TimerHandle | None = None
        self.used = time.monotonic()
        self.rooted = asyncio.Event()
        super().__init__(manager, config)
        if not config.user_credential:
            # What the server logs on a chat's connection shows with the server's own; on
            # a person's own it may be about them, and stays with it.
            self.logs = primary.logs

    async def _supervise(self) -> None:
        error = "the connection closed"
        try:
            async with contextlib.AsyncExitStack() as stack:
                client = await self._open(stack)
                if self.workspace is not None and client.protocol_version not in modern_versions():
                    await self._until_rooted()
                self.client = client
                self._set("connected")
                self.ready.set_result(None)
                # Open, it may be idle: a call waiting for room may take its place.
                self.manager.own.freed()
                # From now on it closes once nothing uses it (never while it opens).
                self._idle_later()
                probe = asyncio.get_running_loop().create_task(
                    probe_forever(self, client, self.lost)
                )
                try:
                    await self.lost.wait()
                finally:
                    probe.cancel()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # the SDK raises exception groups too
            error = self.config.redact(describe(exc))
        finally:
            self.client = None
            if not self.ready.done():
                self.ready.set_exception(
                    McpUnavailableError(
                        f"MCP server {self.config.name} could not open a connection for "
                        f"this call: {error}"
                    )
                )
            if self.status.state == "connected":
                self._set("disconnected", error=error)
            self.manager.own.forget(self)

    async def _until_rooted(self) -> None:
        """A handshake-era server asks for its roots on its own once connected (filesystem
        does), then takes them in as it likes; a call sent before it has would be refused.
        Nothing on the wire says when it has, so: until it asked, and a moment more."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.rooted.wait(), ROOTS_GRACE_SECONDS)
            await asyncio.sleep(ROOTS_SETTLE_SECONDS)

    async def _roots(self, context: Any) -> Any:
        from mcp_types import ListRootsResult, Root

        self.rooted.set()
        assert self.workspace is not None  # asked only where workspace roots are on
        root = Root.model_validate({"uri": self.workspace.as_uri(), "name": "workspace"})
        return ListRootsResult(roots=[root])

    @property
    def reason(self) -> str:
        error = self.status.error
        if self.status.state == "disconnected" and error:
            return f"MCP server {self.config.name} lost this call's connection ({error})"
        return super().reason

    def _lose(self, error: str) -> None:
        self._set("disconnected", error=error)
        # A call waiting for room looks again: room comes once this one has stopped (it
        # counts against its server's bound until then, ``OwnConnections._room``).
        self.manager.own.freed()

    def _set(self, state: str, *, error: str = "", **_: Any) -> None:
        # A chat's connection is no layer-4 gate: nothing to tell the registry.
        self.status = McpStatus(self.config.name, state, error=error)

    async def call(
        self, remote: str, arguments: dict[str, Any], progress: Any, caller: Caller
    ) -> Any:
        self.offered = self.primary.offered
        return await super().call(remote, arguments, progress, caller)

    async def request(
        self, send: Callable[[Any], Awaitable[Any]], caller: Caller | None = None
    ) -> Any:
        from mcp.shared.exceptions import MCPError
        from mcp_types import REQUEST_TIMEOUT

        # Every request keeps it open (a call, a resource read, a prompt), not only calls.
        self.used = time.monotonic()
        # Its call sends now (``calls`` holds it from here): no longer pending.
        self.pending = max(0, self.pending - 1)
        answered = False
        try:
            result = await super().request(send, caller)
            answered = True
            return result
        except MCPError as exc:
            # The server's own error is its answer; the SDK's own timeout is not.
            answered = exc.code != REQUEST_TIMEOUT
            raise
        except McpNotSent:
            answered = True  # nothing went to the server: nothing it could still ask for
            raise
        finally:
            self.used = time.monotonic()
            if self.one_call and not answered:
                self.retire()
            else:
                self.release()
                self._idle_later()

    def release(self) -> None:
        """Its call has its answer: free for the scope's next call (closed instead when
        its scope's configuration changed meanwhile)."""
        self.holder = None
        if self.stale and not self.calls and not self.pending:
            self.manager.own.close_soon(self)
            return
        self.manager.own.freed()

    def retire(self) -> None:
        """Its call was given up on before its answer: the server may still be working
        for it, and ask for it, so no other call goes through it; closed now."""
        self.manager.own.close_soon(self)

    def _idle_later(self) -> None:
        if self.idle is not None:
            self.idle.cancel()
        self.idle = asyncio.get_running_loop().call_later(self.manager.own.chat_idle, self._if_idle)

    def _if_idle(self) -> None:
        self.idle = None
        if self.closing:
            return
        if self.calls or self.holder is not None:
            self._idle_later()  # still in use: the clock starts again when it is not
            return
        self.manager.own.close_soon(self)

    async def close(self) -> None:
        if self.idle is not None:
            self.idle.cancel()
        # What it was asked for a call that ended is withdrawn by now: its reply (a form's
        # "cancel") goes out before the connection does.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.answering.settled(), SETTLE_SECONDS)
        await super().close()


async def with_personal_credential(config: McpServerConfig, ctx: ToolContext) -> McpServerConfig:
    """``config`` with the calling person's own credential in it; refused, saying what to
    do, when they have none (never the server's own in its place)."""
    store = ctx.services.mcp_credentials
    if ctx.user_id is None or store is None:
        raise McpUnavailableError(
            f"MCP server {config.name} takes each person's own credential, and this call is "
            "nobody's"
        )
    value = await store.get(server=config.name, user_id=ctx.user_id)
    if not value:
        raise McpUnavailableError(
            f"MCP server {config.name} takes your own credential, and you have not added "
            "one: add it in Settings, under MCP credentials"
        )
    try:
        return config.with_credential(value)
    except ValueError:
        raise McpUnavailableError(
            f"your credential for MCP server {config.name} cannot be sent as it is (spaces "
            "or control characters around it): set it again in Settings"
        ) from None
