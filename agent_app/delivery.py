"""Delivery: everything that takes a stored event or a running tool's tail to a browser.

The event log (``sessions_app.eventlog``) stores and reads; this module delivers, from one
place (docs/architecture.md, "Delivery"):

- **Stored before sent.** ``notify_events`` is called with events already committed, so a
  socket that replays from the log never misses what a live socket was sent.
- **In order, once.** ``EventCursor`` is one socket's position in the log: it replays after
  ``resume``, drops live events it already sent, fills a gap from the log, and while a turn
  is open, or its chat's title is still to come, reads the log when the live stream goes
  quiet (the channel layer drops messages when a process falls behind, and a dropped last
  event has no later one to reveal the gap).
- **Rendered as the page renders.** ``LiveTranscript`` keeps one socket's fold of the
  transcript in step with what it sends, and adds to each event frame the html of every
  item that event changed, from the page's own partials.
- **Tails of the turn shown, never stale.** ``TailGate`` lets through only well-formed
  tail frames (``is_tail_frame``: what comes back from Redis or the channel layer is
  checked field by field) of the turn the socket shows, each call's once and never an
  older one, none after the call's result.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from channels.layers import get_channel_layer

from sessions_app.eventlog import EVENTS_PAGE_MAX, TERMINAL
from sessions_app.models import SessionEvent
from sessions_app.transcript import Transcript, item_html
from toolhub.lib.catalog_news import session_group
from toolhub.lib.event_frames import Frame, event_frames
from toolhub.tools import TailUpdate

logger = logging.getLogger(__name__)


# --- to every socket of a session ---------------------------------------------------------


async def notify_events(session_id: Any, events: list[SessionEvent]) -> None:
    if not events:
        return
    frames = event_frames(events)
    await get_channel_layer().group_send(
        session_group(session_id), {"type": "session.events", "frames": frames}
    )


async def notify_tail(session_id: Any, frame: dict[str, Any]) -> None:
    await get_channel_layer().group_send(
        session_group(session_id), {"type": "session.tail", "frame": frame}
    )


# --- one socket's position in the log ---------------------------------------------------

# While a turn is open, a cursor that heard nothing for this long reads the log: a live
# message the channel layer dropped (it drops when a process falls behind) is recovered.
CATCH_UP_SECONDS = 2.0
# After a turn whose end says a title follows (``title_follows``), how long from that end
# the cursor keeps reading the log when quiet, until the ``title`` event is sent: the title
# call's own limit (agent_app.turns.titles, 20 s) and its write. The title comes after the
# turn's end, so no later event reveals it when its live message is dropped.
TITLE_WATCH_SECONDS = 30.0


class EventCursor:
    """Which events one socket has sent, and what it sends next: every stored event after
    ``resume``, in seq order, none twice, none missed.

    ``read_after(seq, limit)`` returns up to ``limit`` stored event frames after ``seq``, in
    order (the cursor asks for ``page``); ``send(frame)`` delivers one. Live frames, replays and
    catch-ups interleave at awaits, so they take turns under one lock and ``last_sent``
    decides every send. Nothing is sent before ``resume`` or ``start_at``.
    """

    def __init__(
        self,
        *,
        read_after: Callable[[int, int], Awaitable[list[Frame]]],
        send: Callable[[Frame], Awaitable[None]],
        page: int = EVENTS_PAGE_MAX,
        quiet_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read_after = read_after
        self._send = send
        self._page = page
        self._quiet = CATCH_UP_SECONDS if quiet_seconds is None else quiet_seconds
        self._clock = clock
        self._lock = asyncio.Lock()
        self._watch: asyncio.Task[None] | None = None
        self.resumed = False
        self.last_sent = 0
        self.turn_open = False
        self.heard = clock()
        # Until when (by ``clock``) a title announced by a turn's end is watched for.
        self.title_due = -math.inf

    async def resume(self, *, after_seq: int, last_seq: int) -> None:
        """Replay everything stored after ``after_seq`` (``last_seq`` is the session's, as
        read now: past it replays nothing and hides nothing still to come)."""
        async with self._lock:
            self.resumed = True
            self.last_sent = min(after_seq, last_seq)
            await self._replay_until(None)

    def start_at(self, last_seq: int) -> None:
        """Subscribe from ``last_seq`` on, replaying nothing (a chat before any resume)."""
        self.resumed = True
        self.last_sent = last_seq

    async def live(self, frames: list[Frame]) -> None:
        """Live frames from the session's group: the ones already sent are dropped, and a
        frame that skips ahead is preceded by the missing range, read from the log."""
        if not self.resumed:
            return
        async with self._lock:
            for frame in frames:
                if frame["seq"] <= self.last_sent:
                    continue
                if frame["seq"] > self.last_sent + 1:
                    await self._replay_until(frame["seq"] - 1)
                await self._deliver(frame)

    def expect_turn(self) -> None:
        """A turn is open: until its end is delivered, a quiet stream means a read of the
        log (``catch_up``), on a watch started here."""
        self.turn_open = True
        self.heard = self._clock()
        self._watch_started()

    def _watch_started(self) -> None:
        if self._watch is None or self._watch.done():
            self._watch = asyncio.ensure_future(self._watch_quiet())

    @property
    def watching(self) -> bool:
        """Whether a quiet stream may be hiding a dropped event: a turn is open, or the
        title its end announced has not come yet."""
        return self.turn_open or self._clock() < self.title_due

    async def catch_up(self) -> None:
        """Read the log if ``watching`` and nothing was heard for ``quiet_seconds``."""
        if not (self.resumed and self.watching) or self._clock() - self.heard < self._quiet:
            return
        async with self._lock:
            self.heard = self._clock()
            await self._replay_until(None)

    def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()

    async def _watch_quiet(self) -> None:
        while self.watching:
            await asyncio.sleep(self._quiet)
            await self.catch_up()

    async def _replay_until(self, last: int | None) -> None:
        # The caller holds the lock.
        while last is None or self.last_sent < last:
            frames = await self._read_after(self.last_sent, self._page)
            frames = [frame for frame in frames if last is None or frame["seq"] <= last]
            for frame in frames:
                await self._deliver(frame)
            if len(frames) < self._page:
                return

    async def _deliver(self, frame: Frame) -> None:
        await self._send(frame)
        self.last_sent = frame["seq"]
        self.heard = self._clock()
        kind = frame["kind"]
        if kind == "turn_started":
            self.expect_turn()
        elif kind in TERMINAL:
            self.turn_open = False
            if frame["data"].get("title_follows"):
                self.title_due = self._clock() + _title_watch_left(frame)
                # A resume may begin at the turn's end, with no watch started yet.
                self._watch_started()
        elif kind == "title":
            self.title_due = -math.inf


def _title_watch_left(frame: Frame) -> float:
    """What is left of ``TITLE_WATCH_SECONDS`` from the turn's end as stored: a resume
    that replays an old turn's end watches for nothing."""
    created = frame.get("created")
    if not isinstance(created, str):
        return TITLE_WATCH_SECONDS
    try:
        ended = datetime.fromisoformat(created).timestamp()
    except ValueError:
        return TITLE_WATCH_SECONDS
    return ended + TITLE_WATCH_SECONDS - time.time()


# --- one socket's transcript ---------------------------------------------------------------


class LiveTranscript:
    """One socket's fold, kept in step with what it delivers: each event frame it sends
    carries ``items``, the ``[id, html]`` of every item that event added or changed."""

    def __init__(self, transcript: Transcript, *, session_id: Any) -> None:
        self.transcript = transcript
        self.session_id = session_id

    def frame(self, frame: dict[str, Any]) -> dict[str, Any]:
        if frame.get("type") != "event" or frame["seq"] <= self.transcript.last_seq:
            return frame
        created = frame.get("created")
        changed = self.transcript.apply(
            seq=frame["seq"],
            kind=frame["kind"],
            data=frame["data"],
            turn=frame.get("turn", ""),
            created=datetime.fromisoformat(created) if isinstance(created, str) else None,
        )
        if not changed:
            return frame
        items = self.transcript.items
        # An id no longer held was removed (a rewind): its html is empty.
        rendered = [
            [key, item_html(items[key], session_id=self.session_id) if key in items else ""]
            for key in changed
        ]
        if frame["kind"] in TERMINAL:
            # Items of an ended turn never change again: the socket keeps none of them.
            self.transcript.forget_ended()
        return {**frame, "items": rendered}


# --- tails ---------------------------------------------------------------------------------


def tail_frame(*, turn_id: str, call_id: str, update: TailUpdate) -> dict[str, Any]:
    return {
        "type": "tail",
        "turn": turn_id,
        "call_id": call_id,
        "tail": update.tail,
        "bytes_total": update.total_chars,
        "elapsed_ms": update.elapsed_ms,
    }


_TAIL_FIELDS = {
    "type": str,
    "turn": str,
    "call_id": str,
    "tail": str,
    "bytes_total": int,
    "elapsed_ms": int,
}


def is_tail_frame(frame: Any) -> bool:
    """Whether ``frame`` is a tail frame as this module makes them, field by field."""
    return (
        isinstance(frame, dict)
        and frame.keys() == _TAIL_FIELDS.keys()
        and all(type(frame[key]) is kind for key, kind in _TAIL_FIELDS.items())
        and frame["type"] == "tail"
    )


_DONE = (math.inf, math.inf)


class TailGate:
    """Which tail frames one socket sends: only well-formed ones of the turn it is
    showing, each call's once and never an older one, and none after the call's result.
    It follows the event frames the socket sends (``saw``): a ``tool_call`` starts its
    call afresh (providers reuse call ids), a ``tool_result`` closes it, a turn's start
    and end change the turn shown."""

    def __init__(self) -> None:
        self.turn = ""
        self._marks: dict[str, tuple[float, float]] = {}

    def showing(self, turn_id: str) -> None:
        """Show ``turn_id`` ("": none) from here on, with no tail of it sent yet."""
        self.turn = turn_id
        self._marks = {}

    def saw(self, frame: dict[str, Any]) -> None:
        kind = frame["kind"]
        if kind == "turn_started":
            self.showing(frame["turn"])
        elif kind in TERMINAL:
            self.showing("")
        elif kind in ("tool_call", "tool_result") and isinstance(frame["data"], dict):
            call_id = frame["data"].get("call_id")
            if not isinstance(call_id, str):
                return
            if kind == "tool_call":
                self._marks.pop(call_id, None)
            else:
                self._marks[call_id] = _DONE

    def admits(self, frame: Any) -> bool:
        """Whether to send ``frame``; a frame that is not a tail frame is logged."""
        if not is_tail_frame(frame):
            logger.warning("dropped a live tail that is not a tail frame")
            return False
        if not self.turn or frame["turn"] != self.turn:
            return False
        mark = (frame["bytes_total"], frame["elapsed_ms"])
        if mark <= self._marks.get(frame["call_id"], (-1, -1)):
            return False
        self._marks[frame["call_id"]] = mark
        return True
