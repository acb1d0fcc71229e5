"""Whose call a server's request belongs to: ``Caller`` (a chat's call on a server, and
what is being asked of its person now), and ``CALLER``, the call a task is running, which
2026-07-28's questions read (they are asked inside the call's own task).

Invariants: a question asked for a call ends with it (``Caller.end``), through a token,
never by cancelling the person's side mid-way; a question for a call that has ended is
``CallEnded``.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
from collections.abc import Callable, Coroutine
from typing import Any

from toolhub.tools.context import CancelToken, ToolContext
from toolhub.tools.mcp.asks import AskRefused


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

    def end(self) -> None:
        """The call is over: whatever is still asked for it is withdrawn."""
        self.ended = True
        for withdrawn in list(self.asking):
            withdrawn.cancel()


CALLER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar(
    "toolhub_mcp_caller", default=None
)
