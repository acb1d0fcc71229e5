"""Live tails of running tools: coalesced ``tail`` frames, and the current tail per call
kept in the cache so a socket that resumes gets it once.

Invariants:
- A tail is in the cache before any socket can receive it, so whoever saw it live can
  resume elsewhere and find it. A cache that fails the write (after its timeout) does
  not stop the frame going out live.
- A frame names its turn and call; a call's frames only grow (``bytes_total``, then
  ``elapsed_ms``). That is how a socket drops one it already sent, and any of a turn
  that is not the one it is showing (agent_app.delivery.TailGate).
- Tails are kept per turn and read only for the session's running turn: a turn that
  ended (or that the reaper ended as lost) shows none. A turn runs its calls one at a
  time, so its entry has one writer, a worker still running a call the turn gave up on
  aside (docs/architecture.md, "Live tails").
- What comes back from the cache is sent to browsers only if it is a well-formed tail
  frame (agent_app.delivery.is_tail_frame).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any
from uuid import UUID

from django.core.cache import cache

from agent_app.delivery import is_tail_frame, notify_tail, tail_frame
from agent_app.turns.loop import on_db_thread
from toolhub.lib.outage import REDIS_ERRORS
from toolhub.tools import TailUpdate

logger = logging.getLogger(__name__)

TAIL_INTERVAL = 0.1


class TailPump:
    """Coalesces a tool's streamed output into at most one ``tail`` frame per
    ``TAIL_INTERVAL`` per call, always sending the last one; the current tail is kept in
    the cache so a socket that resumes gets it once."""

    def __init__(self, *, session_id: UUID, turn_id: str, call_id: str) -> None:
        self._session_id = session_id
        self._turn_id = turn_id
        self._call_id = call_id
        self._loop = asyncio.get_running_loop()
        self._latest: TailUpdate | None = None
        self._sent: TailUpdate | None = None
        self._scheduled = False
        self._last = 0.0
        self._sending: asyncio.Task[None] | None = None
        # One send at a time, each taking the latest update when its turn comes: frames
        # leave in the order of the output.
        self._send_lock = asyncio.Lock()
        self._closed = False
        self._unsent = False

    def on_update(self, update: TailUpdate) -> None:
        # Called from the tool's thread or the loop; only the latest update matters, and
        # nothing after close (a late update would leave a stale tail for every resume).
        if self._closed:
            return
        self._latest = update
        self._loop.call_soon_threadsafe(self._schedule)

    def _schedule(self) -> None:
        if self._scheduled:
            return
        self._scheduled = True
        delay = max(0.0, TAIL_INTERVAL - (time.monotonic() - self._last))
        self._loop.call_later(delay, self._start_send)

    def _start_send(self) -> None:
        if not self._closed:
            self._sending = self._loop.create_task(self._send())

    async def _send(self) -> None:
        async with self._send_lock:
            # Reset under the lock: an update arriving while this send waits is in it,
            # and one arriving after schedules the next send a full interval later.
            self._scheduled = False
            update = self._latest
            if update is None or update is self._sent:
                return
            self._sent = update
            self._last = time.monotonic()
            frame = tail_frame(turn_id=self._turn_id, call_id=self._call_id, update=update)
            # Kept before it is sent: a socket that saw this tail live may open another
            # that resumes at once, and that resume must find it. A socket that gets it
            # both ways sends it once (SessionConsumer._send_tail).
            await self._keep(frame)
            try:
                await notify_tail(self._session_id, frame)
            except REDIS_ERRORS as exc:
                # Tails are live only: one the channel layer did not take (Redis is down)
                # is dropped, and the tool goes on; said once per outage of this call.
                if not self._unsent:
                    logger.warning(
                        "tail of %s not sent (%s); later ones are tried",
                        self._call_id,
                        type(exc).__name__,
                    )
                self._unsent = True
            else:
                self._unsent = False

    async def close(self) -> None:
        """Send the last tail (keeping the interval), then forget the call's tail."""
        self._closed = True
        if self._sending is not None:
            with contextlib.suppress(Exception):
                await self._sending
        if self._latest is not None and self._latest is not self._sent:
            await asyncio.sleep(max(0.0, TAIL_INTERVAL - (time.monotonic() - self._last)))
            await self._send()
        if self._sent is not None:
            await self._keep(None)

    async def _keep(self, frame: dict[str, Any] | None) -> None:
        """Keep ``frame`` as the call's current tail (``None``: forget it). A cache that
        refuses is not the tool's problem: the tail is still sent live."""
        with contextlib.suppress(Exception):
            await on_db_thread(
                _tails_put,
                session_id=self._session_id,
                turn_id=self._turn_id,
                call_id=self._call_id,
                frame=frame,
            )


def _tails_key(session_id: UUID, turn_id: str) -> str:
    return f"toolhub:tails:{session_id}:{turn_id}"


def _stored_tails(session_id: UUID, turn_id: str) -> dict[str, dict[str, Any]]:
    """The cached tails of a turn, keeping only well-formed tail frames: what comes back
    from Redis is sent to browsers, so a value of another shape is dropped and logged."""
    stored = cache.get(_tails_key(session_id, turn_id))
    if stored is None:
        return {}
    tails = {
        call_id: frame
        for call_id, frame in (stored.items() if isinstance(stored, dict) else ())
        if is_tail_frame(frame) and frame["call_id"] == call_id and frame["turn"] == turn_id
    }
    if not isinstance(stored, dict) or len(tails) != len(stored):
        logger.warning("session %s: ignored cached tails that are not tail frames", session_id)
    return tails


def _tails_put(
    *, session_id: UUID, turn_id: str, call_id: str, frame: dict[str, Any] | None
) -> None:
    tails = _stored_tails(session_id, turn_id)
    if frame is None:
        tails.pop(call_id, None)
    else:
        tails[call_id] = frame
    if tails:
        cache.set(_tails_key(session_id, turn_id), tails, timeout=3600)
    else:
        cache.delete(_tails_key(session_id, turn_id))


def running_tails(*, session_id: UUID, turn_id: str) -> list[dict[str, Any]]:
    """The current tail of each call still running in the session's running turn
    ``turn_id`` (none when no turn runs), for a socket that resumes."""
    return list(_stored_tails(session_id, turn_id).values()) if turn_id else []
