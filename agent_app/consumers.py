"""The session socket, ``/ws/sessions/<uuid>/``: frames in, stored events out.

The consumer holds no logic: it authenticates, checks ownership, joins the session's
group and hands each frame to a turn service. Delivery follows docs/architecture.md,
"The event log":

- no ``event`` frames before ``resume {after_seq}`` (or a ``chat``, which subscribes from
  the current last seq);
- the socket joins the group *before* it replays from the database, then drops live
  events whose seq it already sent, so nothing is missed and nothing is sent twice;
- a live event that skips ahead (another writer's event reached the log without a live
  message) is preceded by the missing range, read from the log;
- while a turn is open, a socket that heard nothing for ``CATCH_UP_SECONDS`` reads the
  log, so a live message the channel layer dropped (it drops when a process falls behind)
  cannot leave it waiting for an end that already happened.

A refused frame gets an ``error`` frame and the socket stays open. An anonymous socket
is closed with 4401; a missing session and another user's session both with 4404; a
socket that cannot join its group because Redis is out of reach with 1013 (try again
later). A socket whose channel-layer read breaks (Redis went away) is closed by Channels;
the page reconnects and resumes. One that lived through it joins its group again every
``REJOIN_SECONDS`` (a Redis restart forgets groups), and fills what it missed from the log
(docs/outages.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

from channels.consumer import get_handler_name
from channels.generic.websocket import AsyncWebsocketConsumer

from agent_app.frames import FrameError, parse_frame
from agent_app.turns import running_tails, turn_approve, turn_cancel, turn_start
from agent_app.turns.loop import db
from sessions_app.notify import event_frame, session_group
from sessions_app.services import EVENTS_PAGE_MAX, session_events, session_get_for_user
from toolhub.lib.errors import Invalid, NotFound, ServiceError
from toolhub.lib.outage import REDIS_ERRORS
from toolhub.lib.redis_codecs import DISCARDED

CLOSE_NOT_AUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
CLOSE_TRY_AGAIN = 1013
# How often an open socket joins its group again: a Redis restart (or a socket older than
# the layer's group expiry) leaves it out of the group, and live events with it.
REJOIN_SECONDS = 30.0
LIVE = ("session.events", "session.tail")
# While a turn is open, a socket that heard nothing for this long reads the log: a live
# message the channel layer dropped (it drops when a process falls behind) is recovered.
CATCH_UP_SECONDS = 2.0
TERMINAL = ("turn_finished", "turn_failed")


class SessionConsumer(AsyncWebsocketConsumer):
    async def connect(self) -> None:
        self.session = None
        self.resumed = False
        self.last_sent = 0
        self.turn_open = False
        self.heard = time.monotonic()
        self.watch: asyncio.Task[None] | None = None
        self.membership: asyncio.Task[None] | None = None
        # Live frames, replays and catch-ups interleave at awaits: one at a time, so
        # ``last_sent`` decides every send.
        self.sending = asyncio.Lock()
        user = self.scope.get("user")
        await self.accept()
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_NOT_AUTHENTICATED)
            return
        try:
            self.session = await _session(user, self.scope["url_route"]["kwargs"]["session_id"])
        except NotFound:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.group = session_group(self.session.pk)
        try:
            await self.channel_layer.group_add(self.group, self.channel_name)
        except REDIS_ERRORS:
            self.session = None
            await self.close(code=CLOSE_TRY_AGAIN)
            return
        self.membership = asyncio.ensure_future(self._stay_joined())

    async def disconnect(self, code: int) -> None:
        for task in (self.watch, self.membership):
            if task is not None:
                task.cancel()
        if self.session is not None:
            # Out of reach, Redis drops the membership itself (the group expires).
            with contextlib.suppress(*REDIS_ERRORS):
                await self.channel_layer.group_discard(self.group, self.channel_name)

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Live frames use no database connection on this thread (a gap replay goes through
        # the database threads), so they skip channels' per-message hop to the one sync
        # thread to tidy connections, which serializes every socket of the process.
        if message["type"] in LIVE:
            await getattr(self, get_handler_name(message))(message)
            return
        if message["type"] == DISCARDED:
            # Something in Redis that was not a message; toolhub.lib.redis_codecs logged it.
            return
        await super().dispatch(message)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.session is None:
            return
        try:
            frame = parse_frame(text_data, bytes_data)
            await getattr(self, f"_on_{frame['type']}")(frame)
        except FrameError as exc:
            await self._send(exc.frame())

    async def _on_chat(self, frame: dict[str, Any]) -> None:
        if not self.resumed:
            await self._subscribe_from_now()
        try:
            await turn_start(
                session=self.session, text=frame["text"], intent=frame["intent"], channel="web"
            )
        except Invalid as exc:
            raise FrameError("invalid_intent", exc.message, "chat") from None
        except ServiceError as exc:
            raise FrameError(exc.code, exc.message, "chat") from None
        self._expect_turn()

    async def _on_cancel(self, frame: dict[str, Any]) -> None:
        try:
            await turn_cancel(session=self.session)
        except ServiceError as exc:
            raise FrameError(exc.code, exc.message, "cancel") from None

    async def _on_approve(self, frame: dict[str, Any]) -> None:
        try:
            await turn_approve(session=self.session, call_id=frame["call_id"], allow=frame["allow"])
        except ServiceError as exc:
            raise FrameError(exc.code, exc.message, "approve") from None

    async def _on_resume(self, frame: dict[str, Any]) -> None:
        # Already in the group: live events queue behind this handler and are filtered
        # by seq once the replay is done.
        self.resumed = True
        self.session = await _session(self.scope["user"], self.session.pk)
        async with self.sending:
            # Past the end replays nothing, and must not hide the events still to come.
            self.last_sent = min(frame["after_seq"], self.session.last_seq)
            await self._replay_until(None)
        for tail in await db(running_tails, session_id=self.session.pk):
            await self._send(tail)

    async def session_events(self, message: dict[str, Any]) -> None:
        if not self.resumed:
            return
        async with self.sending:
            for frame in message["frames"]:
                if frame["seq"] <= self.last_sent:
                    continue
                if frame["seq"] > self.last_sent + 1:
                    await self._replay_until(frame["seq"] - 1)
                await self._deliver(frame)

    async def session_tail(self, message: dict[str, Any]) -> None:
        if self.resumed:
            await self._send(message["frame"])

    async def _subscribe_from_now(self) -> None:
        self.session = await _session(self.scope["user"], self.session.pk)
        self.last_sent = self.session.last_seq
        self.resumed = True

    async def _replay_until(self, last: int | None) -> None:
        """Send stored events after ``last_sent`` (up to ``last``); hold ``sending``."""
        while last is None or self.last_sent < last:
            events, _ = await db(
                session_events, session=self.session, after=self.last_sent, limit=EVENTS_PAGE_MAX
            )
            events = [event for event in events if last is None or event.seq <= last]
            for event in events:
                await self._deliver(event_frame(event))
            if len(events) < EVENTS_PAGE_MAX:
                return

    async def _deliver(self, frame: dict[str, Any]) -> None:
        await self._send(frame)
        self.last_sent = frame["seq"]
        self.heard = time.monotonic()
        if frame["kind"] == "turn_started":
            self._expect_turn()
        elif frame["kind"] in TERMINAL:
            self.turn_open = False

    def _expect_turn(self) -> None:
        self.turn_open = True
        self.heard = time.monotonic()
        if self.watch is None or self.watch.done():
            self.watch = asyncio.ensure_future(self._catch_up())

    async def _catch_up(self) -> None:
        while self.turn_open:
            await asyncio.sleep(CATCH_UP_SECONDS)
            if self.resumed and time.monotonic() - self.heard >= CATCH_UP_SECONDS:
                async with self.sending:
                    self.heard = time.monotonic()
                    await self._replay_until(None)

    async def _stay_joined(self) -> None:
        # Joining again is idempotent; a live event that then skips ahead brings the
        # missing range from the log (session_events), so nothing is lost, only late.
        while True:
            await asyncio.sleep(REJOIN_SECONDS)
            with contextlib.suppress(*REDIS_ERRORS):
                await self.channel_layer.group_add(self.group, self.channel_name)

    async def _send(self, frame: dict[str, Any]) -> None:
        await self.send(text_data=json.dumps(frame))


async def _session(user: Any, session_id: Any) -> Any:
    return await db(session_get_for_user, user=user, session_id=session_id)
