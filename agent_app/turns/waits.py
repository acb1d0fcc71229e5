"""What a running turn waits for from a person: an approval, the answer to a question,
an MCP server's form or sampling request.

What stays true:
- one wait is stored on the session at a time (``Waiting``, ``turn_waiting``), written
  in the same flush as the event that shows it, so whoever answers, in any process,
  checks against what the turn waits for now;
- an answer is taken only for the wait it was meant for (``take``): a late tab, a
  retried request or an answer of another kind changes nothing;
- every wait ends with an ``*_answered`` event stored with the end of the wait: every tab
  and every reload shows the card as answered (or timed out, cancelled, withdrawn);
- "Allow for this chat" is stored before the log says so, and only where the policy lets
  a person lift the ask; anywhere else it counts as allowing once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings

from agent_app.turns.claim import Waiting
from agent_app.turns.events import TurnEvents
from agent_app.turns.loop import on_db_thread
from sessions_app.services import session_allow_for_chat
from toolhub.tools import CancelToken


class PersonWaits:
    """The turn's open waits (call id → the future its answer sets) and the one stored."""

    def __init__(self, *, events: TurnEvents, cancel: CancelToken) -> None:
        self._events = events
        self._cancel = cancel
        self._answers: dict[str, asyncio.Future[Any]] = {}
        # The wait stored on the session now: cleared only by its own end.
        self._stored: Waiting | None = None

    def expect_question(self, call_id: str) -> Waiting:
        """A question the model asks can be answered from the moment it is announced: the
        wait is stored with the announcement (the caller's flush), not when its tool runs."""
        self._answers[call_id] = asyncio.get_running_loop().create_future()
        self._stored = Waiting(kind="question", call_id=call_id)
        return self._stored

    def forget(self, call_id: str) -> bool:
        """Drop a question announced but never asked (vetoed, cancelled); True when the
        stored wait was it and the caller's flush must clear it."""
        if self._answers.pop(call_id, None) is None:
            return False
        self._stored = None
        return True

    def take(self, waiting: Waiting, value: Any) -> None:
        """An answer from a control message, for the wait ``waiting`` names; dropped unless
        it is the wait stored now (one meant for a wait that is over)."""
        if not self._is_stored(waiting):
            return
        future = self._answers.get(waiting.call_id)
        if future is not None and not future.done():
            future.set_result(value)

    def _is_stored(self, waiting: Waiting) -> bool:
        """Whether ``waiting`` names the wait stored now (its kind and call)."""
        stored = self._stored
        return stored is not None and (stored.kind, stored.call_id) == (
            waiting.kind,
            waiting.call_id,
        )

    async def wait(self, waiting: Waiting, *, withdrawn: CancelToken | None = None) -> Any:
        """Store ``waiting`` and wait for its answer; ``None`` on timeout, cancel or (an MCP
        server's question) its call ending first (``withdrawn``)."""
        call_id = waiting.call_id
        future = self._answers.get(call_id) or asyncio.get_running_loop().create_future()
        self._answers[call_id] = future
        self._stored = waiting
        await self._events.flush(waiting=waiting)
        try:
            await _first_of(
                future,
                self._cancel.wait,
                withdrawn.wait if withdrawn is not None else None,
                timeout=settings.TOOLHUB_APPROVAL_TIMEOUT,
            )
        finally:
            self._answers.pop(call_id, None)
            answer = await self._ended(waiting, future, withdrawn)
        return answer

    async def _ended(
        self, waiting: Waiting, future: asyncio.Future[Any], withdrawn: CancelToken | None
    ) -> Any:
        answer = future.result() if future.done() else None
        if answer == (True, "chat"):
            if waiting.chat_allowable:
                # The answer that won: stored before the log says so.
                await on_db_thread(
                    session_allow_for_chat, session_id=self._events.session_id, tool=waiting.name
                )
            else:
                answer = (True, "once")
        gone = (
            withdrawn is not None
            and withdrawn.cancelled
            and not future.done()
            and not self._cancel.cancelled
        )
        self._events.emit(f"{waiting.kind}_answered", self._answered(waiting, answer, gone))
        # A withdrawn wait may end after the next one began: that one's stays stored.
        if self._is_stored(waiting):
            self._stored = None
            await self._events.flush(waiting=None)
        else:
            await self._events.flush()
        return answer

    def _answered(self, waiting: Waiting, answer: Any, withdrawn: bool) -> dict[str, Any]:
        """The person's answer (or its absence) as the ``*_answered`` event says it."""
        data: dict[str, Any] = {"call_id": waiting.call_id}
        if answer is None:
            data["outcome"] = (
                "withdrawn" if withdrawn else "cancelled" if self._cancel.cancelled else "timeout"
            )
        elif waiting.kind == "elicitation":
            data.update(outcome=answer["action"], content=answer.get("content"))
        elif waiting.kind in ("approval", "sampling"):
            allow, scope = answer if isinstance(answer, tuple) else (bool(answer), "once")
            data.update(outcome="allowed" if allow else "denied", allow=allow)
            if allow and scope == "chat":
                data["scope"] = "chat"
        else:
            data.update(outcome="answered", text=str(answer))
        return data


async def _first_of(
    future: asyncio.Future[Any],
    stop: Callable[[], Awaitable[Any]],
    gone: Callable[[], Awaitable[Any]] | None,
    *,
    timeout: float,
) -> None:
    """Wait until ``future`` is done, ``stop`` or ``gone`` returns, or ``timeout``."""
    others = [asyncio.ensure_future(wait()) for wait in (stop, gone) if wait is not None]
    try:
        await asyncio.wait({future, *others}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for other in others:
            other.cancel()
