"""A server's own connections in this process (``OwnConnections``): which connection a
call goes through (``connection_for``: the server's own, or one of the call's chat or
person), how many a server may have, and how they close.

Invariants:
- A call gets a connection of its own scope only: its person's (their credential), its
  chat's (its workspace as the only root), or, for a handshake-era stdio server, its
  chat's that carries one call at a time (``one_call_each``; docs/mcp.md, "Who is asked").
- A one-call connection is held by its call (``ScopedConnection.holder``) from the moment
  it is given out, with no await between finding it free and holding it.
- A server has at most ``max_chats`` own connections, counting those still closing (over
  stdio each is a process until it has stopped). Past that an idle one is closed to make
  room; with every one busy a call waits for one to come free, saying so on its card,
  and is never refused because other chats are busy.
- Every connection closed in the background is waited for by ``closed``, so no server
  process outlives the manager.
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import TYPE_CHECKING

from toolhub.tools.mcp.callers import Caller
from toolhub.tools.mcp.config import CLOSE_SECONDS, McpServerConfig, McpUnavailableError
from toolhub.tools.mcp.connection import Connection
from toolhub.tools.mcp.scoped import ScopedConnection, with_personal_credential
from toolhub.tools.mcp.transport import modern_versions

if TYPE_CHECKING:
    from toolhub.tools.mcp.manager import McpManager


def one_call_each(primary: Connection) -> bool:
    """Whether a chat's calls to ``primary``'s server go through connections that carry
    one call at a time: a handshake-era server over stdio, whose questions name no call
    and arrive apart from any (over streamable HTTP they ride the call's own response
    stream, in its context; on 2026-07-28 they ride its answer). docs/mcp.md, "Who is
    asked"."""
    client = primary.client
    return (
        primary.config.transport == "stdio"
        and client is not None
        and client.protocol_version not in modern_versions()
    )


class OwnConnections:
    """Every own connection of one manager, by (server, scope, slot): a scope has several
    slots only where each carries one call at a time and its calls overlap. Used on the
    manager's loop, but ``count``, from any thread."""

    def __init__(self, manager: McpManager, *, max_chats: int, chat_idle: float) -> None:
        if max_chats < 1:
            raise ValueError("a server needs room for at least one own connection")
        self.manager = manager
        self.max_chats = max_chats
        self.chat_idle = chat_idle
        self.connections: dict[tuple[str, str, int], ScopedConnection] = {}
        self.slots = itertools.count(1)
        # Set (and replaced) whenever an own connection comes free or closes: calls
        # waiting for room look again (``_until_freed``).
        self.freed_now: asyncio.Event | None = None
        # Connections closing in the background (``close_soon``), with their server: they
        # count against its bound until they have closed.
        self.closing: dict[asyncio.Task[None], str] = {}

    def count(self, server: str) -> int:
        """How many own connections ``server`` has now (any thread)."""
        return sum(1 for name, _, _ in list(self.connections) if name == server)

    def pop_servers(self, servers: list[str] | None = None) -> list[ScopedConnection]:
        """Every own connection of ``servers`` (of every server: None), no longer given
        to any call."""
        keys = [key for key in sorted(self.connections) if servers is None or key[0] in servers]
        return [self.connections.pop(key) for key in keys]

    async def closed(self) -> None:
        """Until every connection closing in the background has closed."""
        if self.closing:
            await asyncio.wait(set(self.closing), timeout=CLOSE_SECONDS)

    async def connection_for(self, primary: Connection, caller: Caller) -> Connection:
        """The connection a call goes through: the server's own, or a connection of the
        call's own scope (opened now if need be): the person's, with their own credential,
        for a server that takes one; the chat's, whose only root is its workspace, for a
        server with workspace roots; the chat's, one call at a time, for a handshake-era
        stdio server (``one_call_each``); or several of these at once."""
        config, ctx = primary.config, caller.ctx
        self._still_current(primary)  # not removed as the call crossed to this loop
        one_call = one_call_each(primary) and ctx.session_id is not None
        if not config.workspace_roots and not config.user_credential and not one_call:
            return primary
        if primary.status.state != "connected":
            raise McpUnavailableError(primary.reason)
        scope, workspace = [], None
        if config.user_credential:
            config = await with_personal_credential(config, ctx)
            scope.append(f"person {ctx.user_id}")
            self._still_current(primary)
        if config.workspace_roots:
            if ctx.session_id is None or ctx.workspace is None:
                raise McpUnavailableError(
                    f"MCP server {config.name} works in a chat's workspace, and this call has none"
                )
            workspace = ctx.workspace
            # The folder a root names must be there for the server to accept it.
            workspace.mkdir(parents=True, exist_ok=True)
        if ctx.session_id is not None and (config.workspace_roots or one_call):
            scope.append(f"chat {ctx.session_id}")
        own = await self._own(
            primary,
            config,
            scope=" ".join(scope),
            workspace=workspace,
            caller=caller,
            one_call=one_call,
        )
        try:
            # Shielded: one caller giving up must not end the opening the others wait for.
            await asyncio.shield(own.ready)
            if self.manager.connection(config.name) is not primary or primary.closing:
                # Reconciled while it opened (the server changed or went): not for this call.
                self.forget(own)
                await own.close()
                self._still_current(primary)
        except BaseException:
            own.pending -= 1
            if own.holder is caller:
                own.release()  # it never carried the call: free for the scope's next one
            raise
        return own

    async def _own(
        self,
        primary: Connection,
        config: McpServerConfig,
        *,
        scope: str,
        workspace: Path | None,
        caller: Caller,
        one_call: bool,
    ) -> ScopedConnection:
        """The scope's own connection for ``caller``: one it has (held for the call where
        each carries ``one_call``), else a new one once the server has room for it. Waits,
        saying so on the call's card, while every connection the server may have is busy."""
        holder = caller if one_call else None
        told = False
        while True:
            own = self._free_in_scope(primary, config, scope, holder)
            if own is not None:
                own.pending += 1
                return own
            room = self._room(config.name)
            if room:
                own = ScopedConnection(
                    self.manager,
                    primary,
                    scope=scope,
                    config=config,
                    workspace=workspace,
                    holder=holder,
                    slot=next(self.slots),
                )
                self.connections[(config.name, scope, own.slot)] = own
                own.pending += 1
                return own
            if room is False and not told:
                told = True
                caller.tell(
                    f"Waiting for a free connection to MCP server {config.name}: it has as "
                    f"many open as it may ({self.max_chats}), each busy with another call.\n"
                )
            await self._until_freed()
            self._still_current(primary)

    def _free_in_scope(
        self, primary: Connection, config: McpServerConfig, scope: str, holder: Caller | None
    ) -> ScopedConnection | None:
        """A connection of the scope a call may go through now (held for ``holder``
        where each carries one call), the one used last first; None when it has none."""
        mine = [
            own
            for (name, own_scope, _), own in self.connections.items()
            if name == config.name and own_scope == scope
        ]
        for own in sorted(mine, key=lambda own: -own.used):
            if own.config != config or own.primary is not primary:
                # A changed credential, or a server reconnected since: the old connection
                # carries what no call may go with any more. One still in use finishes its
                # call, still counted, and closes then (``ScopedConnection.release``).
                if own.calls or own.holder is not None or own.pending:
                    own.stale = True
                else:
                    self.close_soon(own)
                continue
            if own.closing or own.lost.is_set() or own.stale:
                continue
            if holder is None:
                return own
            if own.holder is None:
                own.holder = holder
                return own
        return None

    def _still_current(self, primary: Connection) -> None:
        """After a wait: the server must still be configured as it was when the call
        began, or the call goes nowhere (a disabled or re-pointed server gets nothing)."""
        if self.manager.connection(primary.config.name) is not primary or primary.closing:
            raise McpUnavailableError(
                f"MCP server {primary.config.name} was changed or removed as this call "
                "began; try again"
            )

    def _room(self, server: str) -> bool | None:
        """Whether ``server`` may have one more own connection now: True below its
        maximum; None when room is being made (one is closing: the idle one used least
        lately is closed here if none is yet); False while every one is busy."""
        mine = [own for key, own in self.connections.items() if key[0] == server]
        closing = sum(1 for name in self.closing.values() if name == server)
        if len(mine) + closing < self.max_chats:
            return True
        if closing:
            return None
        # One still opening has a caller waiting on it: busy too; a lost one is closing.
        # Given to a call that has not sent on it yet (``pending``): busy too.
        idle = [
            own
            for own in mine
            if not own.calls
            and own.holder is None
            and not own.pending
            and own.ready.done()
            and not own.closing
        ]
        if any(own.lost.is_set() for own in mine):
            return None
        if not idle:
            return False
        self.close_soon(min(idle, key=lambda own: own.used))
        return None

    async def _until_freed(self) -> None:
        if self.freed_now is None:
            self.freed_now = asyncio.Event()
        await self.freed_now.wait()

    def freed(self) -> None:
        """An own connection came free or closed: calls waiting for room look again (on
        the loop)."""
        if self.freed_now is not None:
            self.freed_now.set()
            self.freed_now = None

    def close_soon(self, chat: ScopedConnection) -> None:
        """``chat`` serves no new request and closes in the background; ``stop`` waits for
        it, so no server process outlives the manager (on the loop)."""
        self.forget(chat)
        if chat.closing:
            return
        task = asyncio.get_running_loop().create_task(chat.close())
        self.closing[task] = chat.config.name
        task.add_done_callback(self._closed)

    def _closed(self, task: asyncio.Task[None]) -> None:
        self.closing.pop(task, None)
        self.freed()

    def forget(self, chat: ScopedConnection) -> None:
        """``chat`` serves no new request (it is closing, or replaced); on the loop."""
        key = (chat.config.name, chat.scope, chat.slot)
        if self.connections.get(key) is chat:
            del self.connections[key]
        self.freed()
