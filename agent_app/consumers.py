"""The session socket, ``/ws/sessions/<uuid>/``: frames in, stored events out.

The consumer authenticates, checks ownership, joins the session's group, parses each
frame and hands it to a turn service. What it sends of the log, and when, is the
session's ``EventCursor`` (agent_app.delivery; docs/architecture.md, "Delivery"):
no ``event`` frames before ``resume {after_seq}`` (or a ``chat``, which subscribes from
the current last seq). The socket joins the group *before* it replays from the database,
so the cursor can drop what it already sent and nothing is missed.

A refused frame gets an ``error`` frame and the socket stays open. An anonymous socket
is closed with 4401; a missing session and another user's session both with 4404; one
over the person's or the chat's number of open sockets with 4429, after an ``error``
frame that says which (``agent_app.socket_slots``); a socket that cannot join its group
because Redis is out of reach with 4503 (try again later: WebSocket servers may only send
1000 or a code from 3000-4999, so not the protocol's 1013). A socket whose channel-layer
read breaks (Redis went away) is closed by Channels; the page reconnects and resumes. One
that lived through it joins its group again at most every ``REJOIN_SECONDS`` (a Redis
restart forgets groups), renews its socket slots, and fills what it missed from the log
(docs/outages.md).

``tail`` frames (a running tool's output) are not events: after a resume the socket
sends the running turn's current tails once the replay is done, then live ones, each
call's once, never an older one, and only of the turn it is showing (``TailGate``;
docs/architecture.md, "Live tails").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import Awaitable, Mapping
from typing import Any

from channels.consumer import get_handler_name
from channels.generic.websocket import AsyncWebsocketConsumer

from agent_app.delivery import EventCursor, LiveTranscript, TailGate
from agent_app.frames import (
    Frame,
    FrameError,
    ResumeFrame,
    parse_frame,
)
from agent_app.socket_slots import Slots, TooManySockets, socket_slots_take
from agent_app.turns import (
    running_tails,
    turn_answer,
    turn_approve,
    turn_cancel,
    turn_elicit,
    turn_start,
)
from agent_app.turns.loop import on_db_thread
from sessions_app.attachments import message_file_ids
from sessions_app.eventlog import event_frames_after
from sessions_app.models import ChatSession
from sessions_app.services import last_user_message, session_get_for_user
from sessions_app.transcript import transcript_seed
from toolhub.lib.catalog_news import CATALOG_GROUP, session_group
from toolhub.lib.errors import Invalid, NotFound, ServiceError
from toolhub.lib.outage import REDIS_ERRORS
from toolhub.lib.redis_codecs import DISCARDED

CLOSE_NOT_AUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
CLOSE_TOO_MANY = 4429
CLOSE_TRY_AGAIN = 4503
# How often an open socket joins its group again: a Redis restart (or a socket older than
# the layer's group expiry) leaves it out of the group, and live events with it.
REJOIN_SECONDS = 30.0
LIVE = ("session.events", "session.tail", "catalog.changed")
# Messages handled without channels' hop to the one sync thread to tidy its database
# connection: live frames, and the person's frames, whose database work runs on the turn
# threads (agent_app.turns.loop) or under database_sync_to_async, which tidies its own.
DIRECT = (*LIVE, "websocket.receive")


class SessionConsumer(AsyncWebsocketConsumer):
    async def connect(self) -> None:
        self.session: ChatSession | None = None
        self.cursor: EventCursor | None = None
        self.membership: asyncio.Task[None] | None = None
        self.slots: Slots | None = None
        self.tails = TailGate()
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
        try:
            self.slots = await on_db_thread(
                socket_slots_take,
                user_id=user.pk,
                session_id=self.session.pk,
                owner=self.channel_name,
            )
        except TooManySockets as exc:
            self.session = None
            await self._send({"type": "error", "code": "too_many_sockets", "message": exc.message})
            await self.close(code=CLOSE_TOO_MANY)
            return
        except REDIS_ERRORS:
            self.session = None
            await self.close(code=CLOSE_TRY_AGAIN)
            return
        session_id = self.session.pk
        self.cursor = EventCursor(
            read_after=lambda after, limit: on_db_thread(
                event_frames_after, session_id=session_id, after=after, limit=limit
            ),
            send=self._send_event,
        )
        # The page's fold of the log, once it asked for rendered items (``resume`` with
        # ``render``); API clients get the events alone.
        self.transcript: LiveTranscript | None = None
        self.group = session_group(session_id)
        try:
            await self._join()
        except REDIS_ERRORS:
            self.session = None
            await self.close(code=CLOSE_TRY_AGAIN)
            return
        self.membership = asyncio.ensure_future(self._stay_joined())

    async def disconnect(self, code: int) -> None:
        if self.slots is not None:
            with contextlib.suppress(*REDIS_ERRORS):
                await on_db_thread(self.slots.release)
        if self.cursor is not None:
            self.cursor.close()
        if self.membership is not None:
            self.membership.cancel()
        if self.session is not None:
            # Out of reach, Redis drops the membership itself (the group expires).
            with contextlib.suppress(*REDIS_ERRORS):
                await self.channel_layer.group_discard(self.group, self.channel_name)
                await self.channel_layer.group_discard(CATALOG_GROUP, self.channel_name)

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Live frames and the person's frames use no database connection on this thread
        # (a gap replay and a turn go through the database threads), so they skip
        # channels' per-message hop to the one sync thread to tidy connections, which
        # serializes every socket of the process: under load each chat frame queued there.
        if message["type"] in DIRECT:
            await getattr(self, get_handler_name(message))(message)
            return
        if message["type"] == DISCARDED:
            # Something in Redis that was not a message; toolhub.lib.redis_codecs logged it.
            return
        await super().dispatch(message)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.session is None or self.cursor is None:
            return
        try:
            await self._on(parse_frame(text_data, bytes_data), self.session, self.cursor)
        except FrameError as exc:
            await self._send(exc.frame())

    async def _on(self, frame: Frame, session: ChatSession, cursor: EventCursor) -> None:
        """Hand a checked frame to its turn service (frames are read only once connect
        accepted the socket: it has its chat and its cursor)."""
        if frame["type"] == "chat" and frame["answer"]:
            # Like an approval, an answer is heard by a socket that saw the question.
            await _served(turn_answer(session=session, text=frame["text"]), "chat")
        elif frame["type"] == "chat":
            await self._start(cursor, "chat", frame["text"], frame["intent"], files=frame["files"])
        elif frame["type"] == "edit":
            # An edited message keeps the files it carried.
            files = await on_db_thread(message_file_ids, session_id=session.pk, seq=frame["seq"])
            await self._start(
                cursor, "edit", frame["text"], frame["intent"], frame["seq"] - 1, files=files
            )
        elif frame["type"] == "regenerate":
            last = await on_db_thread(last_user_message, session_id=session.pk)
            if last is None:
                raise FrameError(
                    "nothing_to_regenerate", "There is no answer to regenerate yet.", "regenerate"
                )
            seq, text = last
            await self._start(cursor, "regenerate", text, frame["intent"], seq - 1, again=True)
        elif frame["type"] == "cancel":
            await _served(turn_cancel(session=session), "cancel")
        elif frame["type"] == "approve":
            approved = turn_approve(
                session=session,
                call_id=frame["call_id"],
                allow=frame["allow"],
                scope=frame["scope"],
                kind=frame["kind"],
            )
            await _served(approved, "approve")
        elif frame["type"] == "elicit":
            answered = turn_elicit(
                session=session,
                call_id=frame["call_id"],
                action=frame["action"],
                content=frame["content"],
            )
            await _served(answered, "elicit")
        else:
            await self._on_resume(frame, cursor)

    async def _start(
        self,
        cursor: EventCursor,
        kind: str,
        text: str,
        intent: Any,
        rewind_to: int | None = None,
        *,
        again: bool = False,
        files: list[str] | None = None,
    ) -> None:
        session = self._chat()
        if not cursor.resumed:
            self.session = session = await _session(self.scope["user"], session.pk)
            cursor.start_at(session.last_seq)
        try:
            await turn_start(
                session=session,
                text=text,
                intent=intent,
                channel="web",
                rewind_to=rewind_to,
                again=again,
                files=files or (),
            )
        except Invalid as exc:
            code = "invalid_files" if exc.fields and "files" in exc.fields else "invalid_intent"
            raise FrameError(code, exc.message, kind) from None
        except ServiceError as exc:
            raise FrameError(exc.code, exc.message, kind) from None
        cursor.expect_turn()

    def _chat(self) -> ChatSession:
        if self.session is None:
            raise RuntimeError("the socket has no chat before connect accepted it")
        return self.session

    async def _on_resume(self, frame: ResumeFrame, cursor: EventCursor) -> None:
        # Already in the group: live events queue behind this handler and are filtered
        # by seq once the replay is done.
        self.session = session = await _session(self.scope["user"], self._chat().pk)
        if frame["after_seq"] > session.last_seq:
            # Events are stored before anyone hears of them, so no client saw a seq past
            # the stored last one: this client's copy is of something else.
            raise FrameError(
                "bad_frame",
                f"after_seq {frame['after_seq']} is past this chat's last event "
                f"({session.last_seq}); reload the chat",
                "resume",
            )
        self.transcript = None
        if frame["render"]:
            upto = min(frame["after_seq"], session.last_seq)
            seed = await on_db_thread(transcript_seed, session_id=session.pk, upto=upto)
            self.transcript = LiveTranscript(seed, session_id=session.pk)
        # The running turn's tails are read before the replay and sent after it: a stored
        # tail's tool_call was stored before it, so the replay has drawn its card, and a
        # call that ended meanwhile (its result in the replay) gets none. A resume sends
        # the current tails again, even those this socket already had.
        tails = await on_db_thread(running_tails, session_id=session.pk, turn_id=session.turn_id)
        self.tails.showing(session.turn_id)
        await cursor.resume(after_seq=frame["after_seq"], last_seq=session.last_seq)
        for tail in tails:
            await self._send_tail(tail)

    async def session_events(self, message: dict[str, Any]) -> None:
        if self.cursor is not None:
            await self.cursor.live(message["frames"])

    async def catalog_changed(self, message: dict[str, Any]) -> None:
        # The page refreshes its inspector (toolhub.lib.catalog_news); API clients,
        # which did not ask for the page's items, are not told.
        if self.cursor is not None and self.cursor.resumed and self.transcript is not None:
            await self._send({"type": "catalog_changed"})

    async def options_changed(self, message: dict[str, Any]) -> None:
        # A page draws its options panel again (toolhub.lib.catalog_news); API clients
        # are not told.
        if self.cursor is not None and self.cursor.resumed and self.transcript is not None:
            await self._send({"type": "options_changed", "tab": str(message.get("tab", ""))})

    async def session_tail(self, message: dict[str, Any]) -> None:
        if self.cursor is not None and self.cursor.resumed:
            await self._send_tail(message["frame"])

    async def _stay_joined(self) -> None:
        # Joining again is idempotent; a live event that then skips ahead brings the
        # missing range from the log (EventCursor.live), so nothing is lost, only late.
        while True:
            # At a random point of the interval's second half: sockets opened together (a
            # step of new chats, a server's restart) would otherwise rejoin together, and
            # their hundreds of group adds and slot renewals at once held the turns'
            # database threads and the loop for a few hundred ms every interval.
            await asyncio.sleep(REJOIN_SECONDS * random.uniform(0.5, 1.0))  # noqa: S311
            with contextlib.suppress(*REDIS_ERRORS):
                await self._join()
                if self.slots is not None:
                    await on_db_thread(self.slots.renew)

    async def _join(self) -> None:
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.channel_layer.group_add(CATALOG_GROUP, self.channel_name)

    async def _send_event(self, frame: dict[str, Any]) -> None:
        self.tails.saw(frame)
        if self.transcript is not None:
            frame = self.transcript.frame(frame)
        await self._send(frame)

    async def _send_tail(self, frame: Any) -> None:
        # A tail is stored before it is sent live, so a socket that resumes while one is
        # on its way reads it and then gets it from the group too: the gate sends it once.
        if self.tails.admits(frame):
            await self._send(frame)

    async def _send(self, frame: Mapping[str, Any]) -> None:
        await self.send(text_data=json.dumps(frame))


async def _session(user: Any, session_id: Any) -> ChatSession:
    return await on_db_thread(session_get_for_user, user=user, session_id=session_id)


async def _served(service: Awaitable[Any], ref: str) -> None:
    """A turn service's refusal as the error frame of the frame that asked (``ref``)."""
    try:
        await service
    except ServiceError as exc:
        raise FrameError(exc.code, exc.message, ref) from None
