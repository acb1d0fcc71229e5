"""The turn runner: one message in, a model loop with tools, every step stored and streamed.

Invariants (docs/architecture.md, "One chat turn, hop by hop", "The event log" and
"Hard lines"):

- **One turn per session**, across processes: ``turn_id`` is claimed with a conditional
  UPDATE and held by a lease that a heartbeat renews; a turn whose process died is
  closed within ``TOOLHUB_TURN_LOST_AFTER`` by the reaper of any server (or by the next
  claim): its unanswered calls get ``lost`` results, then ``turn_failed`` with code
  ``lost``, so no tool_use stays unpaired and no session stays locked.
- **The turn is owned by the server**, not the socket: it runs as a task on the ASGI
  server's event loop (or, outside a server, on this process's background loop), so a
  dropped socket changes nothing.
- **Frozen contract**: the toolset is resolved once, from the live registry and the
  session's intent, and frozen in ``TurnTools``; the array changes inside a turn only
  under ``promote``. Every call is checked against the contract, then against global
  disables and ``can_use`` *at execution time*; a refused call never runs.
- **Stored before sent**: events get contiguous seqs in the database first, then go to
  the session's group, so a socket that resumes from the log misses nothing. Text deltas
  are coalesced (at most one event per ``FLUSH_SECONDS``) before they get a seq.
- **Always paired**: every tool_use the model produced gets a ``tool_call`` event and a
  ``tool_result`` (cancelled, denied, vetoed or lost included) before the turn ends.

Control (cancel, approvals, answers) reaches the runner through its loop's control
channel (``control``), named on the session row, so any process's socket can control any
turn.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from agent_app.delivery import notify_events
from agent_app.providers.windows import window_discover
from agent_app.turns.begin import TurnBusy, begin_turn
from agent_app.turns.claim import RunningTurn, Waiting, running_turn
from agent_app.turns.control import control_channel, control_send
from agent_app.turns.loop import (
    close_db_connections,
    on_db_thread,
    on_turn_loop,
    remember_server_loop,
    spawn,
    wait_for_turns,
)
from agent_app.turns.reaper import reap_once, reaper_start
from agent_app.turns.runner import TurnRunner
from agent_app.turns.tails import running_tails
from profiles_app.models import Agent
from sessions_app.limits import MESSAGE_MAX_CHARS
from sessions_app.models import ChatSession
from toolhub.lib.errors import Conflict, Invalid, ServiceError
from toolhub.lib.storable import storable_text
from toolhub.tools import registry as tool_registry
from toolhub.tools.mcp.asks import ACTIONS, fields_from_json
from toolhub.tools.mcp.forms import FormError, form_answer
from toolhub.tools.wire import count_ahead_in_background

log = logging.getLogger(__name__)

TEXT_LIMIT = MESSAGE_MAX_CHARS


class TurnInProgress(Conflict):
    code = "turn_in_progress"


class NoTurn(ServiceError):
    code = "no_turn"
    status = 409


class UnknownCall(ServiceError):
    code = "unknown_call"
    status = 409


class NoQuestion(ServiceError):
    """An answer sent as one while the model's question no longer waits (it timed out,
    the turn was stopped or ended): refused, so it never becomes a message of its own."""

    code = "no_question"
    status = 409


class NotAllowable(ServiceError):
    """ "Allow for this chat" for a call whose ask an operator requires every time."""

    code = "ask_every_time"
    status = 409


class TextTooLong(Invalid):
    code = "too_large"


def clean_text(text: Any, *, files: bool = False) -> str:
    """The one rule for a person's message, whichever way it came (socket or REST):
    non-blank text of at most ``TEXT_LIMIT`` characters (blank when it carries ``files``),
    made storable (JSON's escapes can carry a NUL or a lone surrogate, which nothing can
    store)."""
    if files and (text is None or (isinstance(text, str) and not text.strip())):
        return ""
    if not isinstance(text, str) or not text.strip():
        raise Invalid("text must be non-empty text", fields={"text": ["required"]})
    if len(text) > TEXT_LIMIT:
        raise TextTooLong(
            f"That message is too long: {len(text):,} characters, the limit is {TEXT_LIMIT:,}.",
            fields={"text": ["too long"]},
        )
    return storable_text(text)


async def turn_start(
    *,
    session: ChatSession,
    text: str,
    intent: Any = None,
    attended: bool = True,
    channel: str = "web",
    rewind_to: int | None = None,
    again: bool = False,
    files: Sequence[str] = (),
) -> str:
    """Start a turn on ``session`` (or answer the question a running turn asked); the
    turn's id. With ``rewind_to`` the conversation goes on from that seq: the message
    after it is edited (``text``, a new version of it), or with ``again`` asked again (a
    new version of its answer); the earlier versions stay in the log as branches. It
    carries ``files``, ids of files attached to the chat. ``TurnInProgress`` while
    another turn runs, ``Invalid`` for a bad text, intent or file (nothing is stored)."""
    text = clean_text(text, files=bool(files) or again)  # again: answered as stored
    turn_id = str(uuid.uuid4())
    # Before the claim: asking a model's server is network time no transaction should hold.
    await _window_checked(session)
    control = await control_channel()
    # Before the claim, so the runner's first lease renewal is never late.
    claimed_at = time.monotonic()
    asked = {"text": text, "intent": intent, "attended": attended, "rewind_to": rewind_to}
    asked.update(again=again, files=list(files))
    try:
        begun = await on_db_thread(
            begin_turn, session=session, turn_id=turn_id, control=control, channel=channel, **asked
        )
    except TurnBusy:
        # Only a person in the chat answers a question (not a REST call).
        answering = intent is None and attended and rewind_to is None and not files
        return await _answer_or_refuse(session, text, answering=answering)
    if begun.prepared is None:
        await notify_events(session.pk, begun.events)
        return turn_id
    runner = TurnRunner(
        session_id=session.pk,
        turn_id=turn_id,
        text=text,
        attended=attended,
        control=control,
        prepared=begun.prepared,
        started=begun.events,
        said=begun.said,
        claimed_at=claimed_at,
    )
    spawn(runner)
    return turn_id


async def _answer_or_refuse(session: ChatSession, text: str, *, answering: bool) -> str:
    """The running turn's id when ``text`` answers the question it waits for (and may:
    ``answering``); ``TurnInProgress`` otherwise."""
    answered = await _answered_question(session, text) if answering else None
    if answered is None:
        raise TurnInProgress(
            "The assistant is still answering in this chat: wait for it, or press Stop."
        )
    return answered


def _agent_of(*, session: ChatSession) -> Agent:
    return session.agent


async def _window_checked(session: ChatSession) -> None:
    """Learn the model's context window if nobody asked its server lately; whatever goes
    wrong here (the database, the cache, the server) leaves it unknown, the turn goes on."""
    try:
        # The socket's and the API's reads of the chat carry its agent: no query then.
        cached = ChatSession.agent.is_cached(session)
        agent = session.agent if cached else await on_db_thread(_agent_of, session=session)
        await window_discover(agent=agent, session=session)
    except Exception:
        log.warning("checking the model's window failed", exc_info=True)


_counted_ahead = threading.Event()


def serve_turns_here() -> None:
    """Called by the server on its loop, and by the ASGI application on every request
    (so it must stay a few checks once done): turns of sync callers run here, this
    process's reaper ends the turns of servers that died, and, once per process, the
    registered tools' array costs are counted before the first turn needs them
    (``wire.count_ahead``; tools registered later are counted as they register)."""
    remember_server_loop()
    reaper_start()
    if not _counted_ahead.is_set():
        _counted_ahead.set()
        count_ahead_in_background(tool_registry.all_tools())


async def turn_cancel(*, session: ChatSession) -> str:
    running = await on_db_thread(running_turn, session_id=session.pk)
    if running is None:
        raise NoTurn("no turn is running in this session")
    await control_send(running.channel, running.turn_id, {"type": "turn.cancel"})
    return running.turn_id


async def turn_answer(*, session: ChatSession, text: str) -> str:
    """Answer the question the running turn waits on with ``text`` (the page's answer
    frame): that turn's id, or ``NoQuestion`` when no question waits."""
    answered = await _answered_question(session, clean_text(text))
    if answered is None:
        raise NoQuestion("The model's question is no longer waiting, so your answer was not sent.")
    return answered


async def _answered_question(session: ChatSession, text: str) -> str | None:
    """``text`` answers the question the running turn asked, if it waits for one: that
    turn's id."""
    running = await on_db_thread(running_turn, session_id=session.pk)
    if running is None or running.waiting is None or running.waiting.kind != "question":
        return None
    message = {"type": "turn.answer", "call_id": running.waiting.call_id, "text": text}
    await control_send(running.channel, running.turn_id, message)
    return running.turn_id


async def _waiting_for(
    session: ChatSession, kind: str, call_id: str, *, gone: str
) -> tuple[RunningTurn, Waiting]:
    """The running turn and its wait, when it waits for ``kind`` of ``call_id``; else
    ``UnknownCall`` in the words ``gone``."""
    running = await on_db_thread(running_turn, session_id=session.pk)
    if running is None or running.waiting is None or not running.waits_for(kind, call_id):
        raise UnknownCall(gone)
    return running, running.waiting


async def turn_approve(
    *, session: ChatSession, call_id: str, allow: bool, scope: str = "once", kind: str = "approval"
) -> None:
    """Answer the call waiting for approval. ``scope="chat"`` also allows its tool for the
    rest of the chat where the policies let a person lift the ask; the runner stores that
    when it takes this answer (an answer that lost to another tab or the timeout stores
    nothing). ``kind`` "sampling" answers an MCP server's request for the model made
    during the call: one is never answered by what was meant for the other."""
    running, waiting = await _waiting_for(
        session,
        kind,
        call_id,
        gone="That call is not waiting for approval any more: it was answered, or its turn ended.",
    )
    if allow and scope == "chat" and not waiting.chat_allowable:
        asker = waiting.name or f"MCP server {waiting.server}".strip()
        raise NotAllowable(
            f"{asker} asks every time (an operator's or your profile's policy, or a "
            "server's request for the model): allow it once or deny it."
        )
    message = {"type": "turn.approve", "call_id": call_id, "allow": allow, "scope": scope}
    await control_send(running.channel, running.turn_id, {**message, "kind": kind})


async def turn_elicit(
    *, session: ChatSession, call_id: str, action: str, content: Any = None
) -> None:
    """Answer the form an MCP server put to the person during ``call_id``: ``accept``
    with ``content`` (checked against the form here, so a refused answer changes nothing
    and can be corrected), ``decline`` or ``cancel``."""
    running, waiting = await _waiting_for(
        session,
        "elicitation",
        call_id,
        gone="That form is not waiting for an answer any more: it was answered, or its turn ended.",
    )
    if action not in ACTIONS:
        raise Invalid(f"action must be one of {', '.join(ACTIONS)}", fields={"action": [action]})
    answer = None
    if action == "accept" and waiting.mode == "form":
        answer = _form_checked(waiting, content)
    await control_send(
        running.channel,
        running.turn_id,
        {"type": "turn.elicit", "call_id": call_id, "action": action, "content": answer},
    )


def _form_checked(waiting: Waiting, content: Any) -> dict[str, Any]:
    """The person's answer to a form, checked against the form as the server sent it."""
    fields = fields_from_json(waiting.fields)
    try:
        return form_answer(fields, content or {})
    except FormError as exc:
        titles = {field.name: field.title for field in fields}
        said = "; ".join(f"{titles.get(name, name)}: {why}" for name, why in exc.errors.items())
        raise Invalid(
            f"Please check the form. {said}.",
            fields={name: [why] for name, why in exc.errors.items()},
        ) from None


__all__ = [
    "NoQuestion",
    "NoTurn",
    "NotAllowable",
    "TurnInProgress",
    "TurnRunner",
    "UnknownCall",
    "clean_text",
    "close_db_connections",
    "on_turn_loop",
    "reap_once",
    "remember_server_loop",
    "running_tails",
    "serve_turns_here",
    "turn_answer",
    "turn_approve",
    "turn_cancel",
    "turn_elicit",
    "turn_start",
    "wait_for_turns",
]
