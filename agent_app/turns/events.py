"""A turn's events on their way out: emitted in order, stored in flushes (each one
transaction, with the session's turn state), then sent to the session's group after every
earlier send.

What stays true: flushes are serialized, so seqs follow the order events were emitted;
an event is sent only after it is stored; a flush that fails keeps its events for the
failure path; the terminal event is stored with the release of the session; and a failed
turn still gives every announced call its result, so the provider's history stays valid.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, TypedDict, Unpack
from uuid import UUID

from agent_app.delivery import notify_events
from agent_app.turns.claim import Waiting, persist
from agent_app.turns.loop import on_db_thread
from sessions_app.models import SessionEvent
from toolhub.lib.outage import REDIS_ERRORS
from toolhub.lib.storable import storable

logger = logging.getLogger(__name__)


class FlushWrites(TypedDict, total=False):
    """What a flush writes on the session row and beside its events (``persist``)."""

    # The provider call's record (a ``ProviderCall`` row).
    call: dict[str, Any] | None
    # The loaded deferred set, when it changed since the last checkpoint.
    loaded: list[str] | None
    # What the turn waits for now (``None``: nothing).
    waiting: Waiting | None
    release: bool


class TurnEvents:
    """One turn's outgoing events: what is pending, the flush lock and the last send."""

    def __init__(self, *, session_id: UUID, turn_id: str) -> None:
        self.session_id = session_id
        self.turn_id = turn_id
        self._pending: list[tuple[str, dict[str, Any]]] = []
        self._failed = False
        # Set once the session is released (or taken over): nothing is written after.
        self.released = False
        # Announced tool calls without a result yet (call id → name).
        self._unanswered: dict[str, str] = {}
        # Flushes come from the runner and from the delta timer: one at a time, so seqs
        # follow the order events were emitted.
        self._flush_lock = asyncio.Lock()
        # The last group send; each send waits for the one before it.
        self._sending: asyncio.Future[None] | None = None

    def emit(self, kind: str, data: dict[str, Any]) -> None:
        # Made storable here, before it is stored or sent: both see the same text.
        self._pending.append((kind, storable(data)))

    async def flush(self, *, text_only: bool = False, **writes: Unpack[FlushWrites]) -> None:
        """Store what is pending (with ``writes``), then send it. ``text_only`` (the delta
        timer) takes just the leading text deltas: whatever the runner emitted after them
        goes out with the runner's own writes (a release, a waiting state)."""
        async with self._flush_lock:
            if text_only:
                count = next(
                    (n for n, (kind, _) in enumerate(self._pending) if kind != "text_delta"),
                    len(self._pending),
                )
            else:
                count = len(self._pending)
            items, self._pending = self._pending[:count], self._pending[count:]
            if not items and not writes:
                return
            try:
                events = await on_db_thread(
                    persist, session_id=self.session_id, turn=self.turn_id, items=items, **writes
                )
            except BaseException:
                # Not stored: kept, so the failure path stores them with its own events.
                self._pending[:0] = items
                raise
            await self.send(events)

    def send(self, events: list[SessionEvent]) -> asyncio.Future[None]:
        """Send stored events to the session's group, after every earlier send. A send that
        fails is logged, not raised: the events are stored, and a socket that misses them
        reads them from the log."""
        previous = self._sending

        async def send() -> None:
            if previous is not None:
                await previous
            try:
                await notify_events(self.session_id, events)
            except REDIS_ERRORS as exc:
                # An outage, not a bug: one line per flush, no traceback (docs/outages.md).
                logger.warning(
                    "turn %s: events stored, not sent live (%s)", self.turn_id, type(exc).__name__
                )
            except Exception:
                logger.exception("turn %s: events not sent to the session group", self.turn_id)

        self._sending = asyncio.ensure_future(send())
        return self._sending

    def announced(self, call_id: str, name: str) -> None:
        """A ``tool_call`` was emitted: until its result, a failed turn answers it."""
        self._unanswered[call_id] = name

    def answered(self, call_id: str) -> None:
        self._unanswered.pop(call_id, None)

    async def drained(self) -> None:
        """Every send made so far has ended (the turn's last step)."""
        if self._sending is not None:
            await asyncio.shield(self._sending)

    async def finish(
        self, reason: str, *, call: dict[str, Any] | None = None, title_follows: bool = False
    ) -> None:
        if self._failed:
            return
        # ``title_follows``: the chat's model is asked for its title next (titles.py).
        self.emit(
            "turn_finished",
            {"reason": reason, **({"title_follows": True} if title_follows else {})},
        )
        await self.flush(release=True, call=call)
        self.released = True

    async def finish_failed(self, code: str, message: str) -> None:
        # Every announced call still gets its result, so the history stays valid.
        earlier = len(self._pending)
        for call_id, name in self._unanswered.items():
            self.emit(
                "tool_result",
                {
                    "call_id": call_id,
                    "name": name,
                    "status": "error",
                    "content": "The turn stopped before this tool finished.",
                    "reason": message,
                },
            )
        self._unanswered.clear()
        self.emit("turn_failed", {"code": code, "message": message})
        try:
            await self.flush(release=True)
        except Exception:
            # What failed to store before must not keep the terminal events out too: they
            # go alone (a failed flush puts its items back in front of the pending ones).
            logger.exception("turn %s: dropped %d unstorable events", self.turn_id, earlier)
            self._pending = self._pending[earlier:]
            await self.flush(release=True)
        self._failed = self.released = True
