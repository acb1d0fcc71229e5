"""Attacks on MCP forms and sampling in a chat: a hostile hand-written server
(``hostile_mcp_server.py``) asks through real turns over the session socket and the REST
API, with the fake Messages API as the model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from channels.db import database_sync_to_async

from agent_app import mcp
from agent_app.models import McpServer
from tests.fakes import Reply
from tests.integration.agent_app.test_mcp_servers import load_then_call, server_row
from tests.integration.chat import events, open_socket, receive, send, until
from tests.mcp import SERVER, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

HOSTILE = Path(__file__).resolve().parent / "hostile_mcp_server.py"


@pytest.fixture
def hostile(registry_state, staff, settings, tmp_path):
    """Connects the hostile server as ``hostile``; returns the log of what it was sent."""
    settings.TOOLHUB_WORKSPACE_ROOT = tmp_path / "workspaces"
    log = tmp_path / "hostile.log"

    def connect(**switches) -> Path:
        server_row(name="hostile", args=[str(HOSTILE), "--log", str(log)], staff=staff, **switches)
        return log

    yield connect
    McpServer.objects.all().delete()
    mcp.mcp_sync(wait=10)


@pytest.fixture
def asking(registry_state, staff, settings, tmp_path):
    """The repository's well-behaved asking server (tests/mcp/server.py --asking)."""
    settings.TOOLHUB_WORKSPACE_ROOT = tmp_path / "workspaces"

    def connect(**switches) -> None:
        server_row(name="ask", args=[str(SERVER), "--asking"], staff=staff, **switches)

    yield connect
    McpServer.objects.all().delete()
    mcp.mcp_sync(wait=10)


@database_sync_to_async
def new_session(user):
    from sessions_app.services import session_create

    return session_create(user=user)


def sent_to_server(log: Path) -> list[dict]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def stop_turn(session) -> None:
    """Stop, as the person's Stop button does, from a sync test."""
    import asyncio

    from agent_app.turns import turn_cancel
    from agent_app.turns.loop import loop_for_sync_callers

    future = asyncio.run_coroutine_threadsafe(turn_cancel(session=session), loop_for_sync_callers())
    future.result(10)


def is_event(kind: str, **data):
    def match(frame: dict) -> bool:
        return (
            frame["type"] == "event"
            and frame["kind"] == kind
            and all(frame["data"].get(key) == value for key, value in data.items())
        )

    return match


def test_a_form_left_behind_by_a_finished_call_does_not_hold_up_the_next_calls_form(
    owner, model, hostile, settings
):
    """A server asks for a form during call t2 and answers t2 a second later without
    waiting for it (``ask_and_go``). The form ends with its call (withdrawn, the turn's
    one-at-a-time lock released), so the next call's form (t3) is shown at once rather
    than after ``TOOLHUB_APPROVAL_TIMEOUT``."""
    from agent_app.turns import on_turn_loop, turn_start
    from sessions_app.models import SessionEvent
    from sessions_app.services import session_create

    settings.TOOLHUB_APPROVAL_TIMEOUT = 40
    log = hostile()
    model.replies.extend(
        [
            Reply(
                tool_calls=[
                    ("t1", "tool_search", {"query": "select:hostile__ask_and_go,hostile__ask"})
                ]
            ),
            Reply(
                tool_calls=[
                    ("t2", "call_tool", {"name": "hostile__ask_and_go", "arguments": {}}),
                    ("t3", "call_tool", {"name": "hostile__ask", "arguments": {}}),
                ]
            ),
            Reply(text="Done."),
        ]
    )
    session = session_create(user=owner)
    on_turn_loop(turn_start, session=session, text="go", attended=True)

    def stored(kind: str, call_id: str):
        return SessionEvent.objects.filter(
            session=session, kind=kind, data__call_id=call_id
        ).first()

    wait_for(lambda: stored("tool_result", "t2"), timeout=20, what="t2 to end")
    asked_t2 = stored("elicitation_request", "t2")
    try:
        wait_for(lambda: stored("elicitation_request", "t3"), timeout=15, what="t3's form")
        shown_t3 = True
    except AssertionError:
        shown_t3 = False
    t2_told = [m for m in sent_to_server(log) if str(m.get("id", "")).startswith("go-")]
    import asyncio

    from agent_app.turns import turn_cancel
    from agent_app.turns.loop import loop_for_sync_callers

    asyncio.run_coroutine_threadsafe(turn_cancel(session=session), loop_for_sync_callers()).result(
        10
    )
    wait_for(
        lambda: (
            stored("turn_finished", "")
            or SessionEvent.objects.filter(session=session, kind="turn_finished").exists()
        ),
        timeout=60,
        what="the turn to end",
    )

    assert asked_t2 is not None
    assert shown_t3, (
        "t3's form was not shown within 15 s of t2 ending: t2's abandoned form still "
        "holds the turn's lock until the approval timeout"
    )
    assert t2_told, "t2's server was never answered although its call had ended"


async def test_a_choice_answered_with_a_list_is_refused_not_a_crash_of_the_socket(
    owner, model, asking
):
    """A list (or an object) for a one-choice field is an ``invalid`` error naming the
    field, like any other answer that does not fit the form; the socket stays open."""
    await database_sync_to_async(asking)()
    load_then_call(model, "ask__sign_in_visitor", {})
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)

    await send(socket, {"type": "chat", "text": "sign me in"})
    asked = events(await until(socket, ("elicitation_request",)), "elicitation_request")[0]
    content = {"name": "Ada", "age": "36", "colour": ["green"]}
    await send(
        socket,
        {
            "type": "elicit",
            "call_id": asked["data"]["call_id"],
            "action": "accept",
            "content": content,
        },
    )
    try:
        reply = await receive(socket, 10)
    except Exception as exc:  # the consumer's crash surfaces here
        reply = {"type": "crash", "error": f"{type(exc).__name__}: {exc}"}
    finally:
        if reply.get("type") != "crash":
            await send(socket, {"type": "cancel"})
            await until(socket, timeout=30)
            await socket.disconnect()

    assert reply["type"] == "error", reply
    assert reply["code"] == "invalid"
    assert "Colour" in reply["message"]


def test_a_choice_answered_with_an_object_over_rest_is_a_400_not_a_500(owner, model, asking, api):
    """The REST side: ``POST /api/sessions/<id>/elicit/`` with ``{"colour": {"a": 1}}``
    for a one-choice field is a 400 ``invalid``, never a 500."""
    from agent_app.turns import on_turn_loop, turn_start
    from sessions_app.services import session_create

    asking()
    load_then_call(model, "ask__sign_in_visitor", {})

    session = session_create(user=owner)
    on_turn_loop(turn_start, session=session, text="sign me in", attended=True)

    def waiting():
        session.refresh_from_db()
        return (session.turn_waiting or {}).get("kind") == "elicitation" and session.turn_waiting

    shown = wait_for(waiting, what="the form to wait")
    client = api(owner)
    client.raise_request_exception = False
    url = f"/api/sessions/{session.pk}/elicit/"
    body = {
        "call_id": shown["call_id"],
        "action": "accept",
        "content": {"name": "Ada", "age": 36, "colour": {"a": 1}},
    }

    response = client.post(url, body, format="json")
    client.post(url, {"call_id": shown["call_id"], "action": "cancel"}, format="json")
    wait_for(lambda: session.refresh_from_db() or not session.turn_id, what="the turn to end")

    assert response.status_code == 400, response.status_code


async def test_cancelling_the_turn_while_a_form_waits_ends_the_call_and_tells_the_server(
    owner, model, hostile
):
    """Resisted: Stop while a server's form waits ends the turn at once, the card says
    the turn stopped, and the server is told (its form's reply is ``cancel`` and its call
    is cancelled)."""
    log = await database_sync_to_async(hostile)()
    load_then_call(model, "hostile__ask", {})
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)

    await send(socket, {"type": "chat", "text": "ask me"})
    await until(socket, ("elicitation_request",), timeout=20)
    await send(socket, {"type": "cancel"})
    frames = await until(socket, timeout=20)
    await socket.disconnect()

    assert events(frames, "turn_finished")[0]["data"]["reason"] == "cancelled"
    assert events(frames, "elicitation_answered")[0]["data"]["outcome"] == "cancelled"

    def told() -> list[dict]:
        return [m for m in sent_to_server(log) if str(m.get("id", "")).startswith("ask-")]

    reply = wait_for(told, timeout=10, what="the server to hear back")[0]
    assert reply["result"]["action"] == "cancel"
    assert any(m.get("method") == "notifications/cancelled" for m in sent_to_server(log))


async def test_a_sampling_request_cannot_be_allowed_for_the_whole_chat_nor_answered_as_a_form(
    owner, model, hostile
):
    """Resisted: "Allow for this chat" is refused for a server's request for the model,
    and an ``elicit`` frame or the tool's own ``approve`` for a waiting sampling request
    is ``unknown_call``; none reaches the model."""
    await database_sync_to_async(hostile)(sampling=True)
    params = {
        "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
        "maxTokens": 10,
    }
    load_then_call(model, "hostile__sample", {"params": params})
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)

    await send(socket, {"type": "chat", "text": "sample"})
    asked = events(await until(socket, ("sampling_request",), timeout=20), "sampling_request")[0]
    call_id = asked["data"]["call_id"]
    sampling = {"type": "approve", "call_id": call_id, "kind": "sampling"}
    await send(socket, {**sampling, "allow": True, "scope": "chat"})
    chat_wide = await receive(socket)
    await send(socket, {"type": "elicit", "call_id": call_id, "action": "accept", "content": {}})
    as_form = await receive(socket)
    # A late "allow" for the tool itself (another tab, a retried request) allows nothing.
    await send(socket, {"type": "approve", "call_id": call_id, "allow": True})
    as_the_tools = await receive(socket)
    await send(socket, {**sampling, "allow": False})
    frames = await until(socket, timeout=20)
    await socket.disconnect()

    assert chat_wide["code"] == "ask_every_time"
    assert as_form["code"] == "unknown_call"
    assert as_the_tools["code"] == "unknown_call"
    assert events(frames, "sampling_answered")[0]["data"]["outcome"] == "denied"
    assert len(model.requests) == 3


def test_an_unattended_rest_turn_never_shows_a_form_and_the_server_is_refused(
    owner, model, hostile, api
):
    """Resisted: a REST message's turn (nobody watching) calling a tool that asks for a
    form gets a refusal with the reason; no form is stored on a card."""
    from sessions_app.models import SessionEvent
    from sessions_app.services import session_create

    log = hostile(sampling=True)
    load_then_call(model, "hostile__ask", {})
    session = session_create(user=owner)

    response = api(owner).post(
        f"/api/sessions/{session.pk}/messages/", {"text": "ask"}, format="json"
    )
    assert response.status_code in (201, 202), response.content

    def finished():
        return SessionEvent.objects.filter(session=session, kind="turn_finished").exists()

    wait_for(finished, timeout=30, what="the REST turn to finish")
    kinds = list(SessionEvent.objects.filter(session=session).values_list("kind", flat=True))
    result = SessionEvent.objects.get(session=session, kind="tool_result", data__call_id="t2")

    assert "elicitation_request" not in kinds
    assert "nobody is watching this chat" in result.data["content"]
    assert any(
        "nobody is watching" in str(m.get("error", {}).get("message", ""))
        for m in sent_to_server(log)
    )


def test_a_form_whose_default_holds_a_nul_is_still_put_to_the_person(owner, model, hostile):
    """A text field's default holding a NUL (which no database stores) is cleaned, and
    the form still reaches the person; nothing but toolhub's own words (never a
    database's error text) would go back to the server."""
    from agent_app.turns import on_turn_loop, turn_start
    from sessions_app.models import SessionEvent
    from sessions_app.services import session_create

    log = hostile()
    form = {
        "message": "Your code?",
        "requestedSchema": {
            "type": "object",
            "properties": {"code": {"type": "string", "default": "a<NUL>b"}},
        },
    }
    load_then_call(model, "hostile__ask", {"params": form})
    session = session_create(user=owner)
    on_turn_loop(turn_start, session=session, text="ask", attended=True)

    def waiting_or_done():
        session.refresh_from_db()
        if (session.turn_waiting or {}).get("kind") == "elicitation":
            return "waiting"
        if SessionEvent.objects.filter(
            session=session, kind="tool_result", data__call_id="t2"
        ).exists():
            return "done"
        return None

    state = wait_for(waiting_or_done, timeout=20, what="the form or the call's end")
    if state == "waiting":
        stop_turn(session)
    wait_for(
        lambda: (
            SessionEvent.objects.filter(session=session, kind="turn_finished").exists()
            or SessionEvent.objects.filter(session=session, kind="turn_failed").exists()
        ),
        timeout=30,
        what="the turn to end",
    )
    result = SessionEvent.objects.filter(
        session=session, kind="tool_result", data__call_id="t2"
    ).first()
    told = [m for m in sent_to_server(log) if str(m.get("id", "")).startswith("ask-")]

    assert not any("SET last_seq" in json.dumps(m) for m in told), (
        f"the database's error went to the MCP server: {told!r}"
    )
    assert state == "waiting", (
        f"the form never waited for the person; the call ended with "
        f"{result.data.get('content') if result else None!r}, the server was told {told!r}"
    )
