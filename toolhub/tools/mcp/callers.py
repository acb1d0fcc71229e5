"""Whose call a server's request belongs to: ``Caller`` (a chat's call on a server, and
what is being asked of its person now), ``CALLER``, the call a task is running, which
2026-07-28's questions read (they are asked inside the call's own task), and
``WaitingCalls``, the calls waiting on one connection, which a handshake-era server's
question (naming no call) is matched against: on a connection that carries one call at a
time (``ScopedConnection.one_call``) that is its one call by construction.

Invariants: a question asked for a call ends with it (``Caller.end``), through a token,
never by cancelling the person's side mid-way; a question for a call that has ended is
``CallEnded``; a question that could be another chat's is nobody's (``AskRefused``),
never guessed.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import time
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

from toolhub.tools.context import CancelToken, ToolContext
from toolhub.tools.mcp.asks import AskRefused
from toolhub.tools.mcp.config import McpServerConfig


def scope_of(caller: Caller) -> tuple[str | None, str | None]:
    """Whose a call is: the person and the chat."""
    return caller.ctx.user_id, caller.ctx.session_id


class CallEnded(AskRefused):
    """What was asked for a call that has ended (the person stopped the turn, or the
    server answered the call without waiting): a form is then dismissed."""


@dataclasses.dataclass(slots=True, eq=False)
class Caller:
    """A chat's call on a server: its context (who, which chat, who can answer) and the
    loop it runs on, where what the server asks of the person is asked."""

    ctx: ToolContext
    loop: asyncio.AbstractEventLoop
    # One token per question asked for this call now: cancelled when the call ends.
    asking: set[CancelToken] = dataclasses.field(default_factory=set)
    ended: bool = False

    async def run(self, asking: Callable[[CancelToken], Coroutine[Any, Any, Any]]) -> Any:
        """``asking(withdrawn)`` on the caller's loop; while it waits on a person the call
        is not idle. The call ending withdraws it: a handshake-era server may answer its
        call without waiting for its own question, which must not then wait on the person
        (and hold up the turn) with nothing to answer. Withdrawing never cancels the
        caller's task mid-way (it may be storing events): it tells it, and it ends."""
        withdrawn = CancelToken()
        if self.ended:
            raise CallEnded("the call it belongs to has ended")
        self.asking.add(withdrawn)
        try:
            with self.ctx.waiting_for_person():
                future = asyncio.run_coroutine_threadsafe(asking(withdrawn), self.loop)
                try:
                    answer = await asyncio.wrap_future(future)
                except asyncio.CancelledError:
                    # The server withdrew its request: told the same way.
                    withdrawn.cancel()
                    raise
        finally:
            self.asking.discard(withdrawn)
        if withdrawn.cancelled:
            raise CallEnded("the call it belongs to has ended")
        return answer

    def tell(self, line: str) -> None:
        """A line on the call's card (its live output), from the manager's loop."""
        # A caller whose loop closed meanwhile has nobody to tell.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.ctx.update, line)

    def end(self) -> None:
        """The call is over: whatever is still asked for it is withdrawn."""
        self.ended = True
        for withdrawn in list(self.asking):
            withdrawn.cancel()


CALLER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar(
    "toolhub_mcp_caller", default=None
)


class WaitingCalls:
    """The chats' calls waiting on one connection's server now, and those given up on
    lately: whose call a request the server sends belongs to (``owner``)."""

    def __init__(self, config: McpServerConfig) -> None:
        self._config = config
        # Which chat's call each waiting request is: a form or a sampling request the
        # server sends mid-call goes to that person, never to another (``owner``).
        self._callers: dict[asyncio.Task[Any], Caller] = {}
        # Calls given up on before the server answered (a timeout, a cancel), with when:
        # the server may still be working for them, and ask for them, for a while.
        self._abandoned: deque[tuple[float, Caller]] = deque(maxlen=64)

    def add(self, task: asyncio.Task[Any], caller: Caller) -> None:
        self._callers[task] = caller

    def done(self, task: asyncio.Task[Any], caller: Caller, *, answered: bool) -> None:
        """``task``'s request is over: what is still asked for its call is withdrawn."""
        self._callers.pop(task, None)
        if not answered:
            self._abandoned.append((time.monotonic(), caller))
        caller.end()

    def owner(self) -> Caller:
        """The call a server's request belongs to. On 2026-07-28 it is the task's own; a
        handshake-era server asks on its own, with nothing on the wire naming the call, so
        it is the one call waiting on this server, and with several it is nobody's:
        guessing could show one person's form to another (``AskRefused``)."""
        caller = CALLER.get()
        if caller is not None:
            return caller
        waiting = list(self._callers.values())
        if not waiting:
            raise AskRefused("no call of a chat is waiting on this server now")
        if len(waiting) > 1:
            raise AskRefused(
                "several calls are waiting on this server, and its request does not say "
                "which one it belongs to"
            )
        # A call given up on lately may be what the server is still working for: unless it
        # was the same chat's, the request could be its, and is nobody's to answer.
        horizon = time.monotonic() - max(self._config.timeout, self._config.timeout_ceiling)
        while self._abandoned and self._abandoned[0][0] < horizon:
            self._abandoned.popleft()
        if any(scope_of(gone) != scope_of(waiting[0]) for _, gone in self._abandoned):
            raise AskRefused(
                "another chat's call on this server ended lately without its answer, and the "
                "request does not say which call it belongs to"
            )
        return waiting[0]
