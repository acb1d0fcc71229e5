"""Approval policies end to end: the socket, the turn runner and the real SDK against the
fake Messages API. Each test checks what a person notices: whether they are asked, whether
the tool really ran (a side-effect counter), and which policy the card and the log name.

Precedence is an operator's ask or deny > the person's profile > "allow for this chat" >
the tool author's default (toolhub.tools.approval); every decision is read at the call.
"""

from __future__ import annotations

import threading

import pytest
from channels.db import database_sync_to_async

from tests.fakes import Reply
from tests.integration.chat import events, open_socket, receive, send, until
from toolhub.tools import function

pytestmark = pytest.mark.django_db(transaction=True)

RAN: list[str] = []


def _guarded(target: str = "") -> str:
    """Change something; asks first.

    Args:
        target: What to change.
    """
    RAN.append(f"guarded:{target}")
    return "guarded ran"


def _plain(note: str = "") -> str:
    """Read something; never asks by itself.

    Args:
        note: Anything.
    """
    RAN.append(f"plain:{note}")
    return "plain ran"


@pytest.fixture
def ran(registry_state):
    RAN.clear()
    registry_state.register(
        function(_guarded, name="guarded", requires_approval=True, register_globally=False)
    )
    registry_state.register(function(_plain, name="plain", register_globally=False))
    yield RAN
    RAN.clear()


@database_sync_to_async
def new_session(user, **kwargs):
    from sessions_app.services import session_create

    return session_create(user=user, **kwargs)


@database_sync_to_async
def allowed_of(session):
    session.refresh_from_db()
    return list(session.allowed_tools)


@database_sync_to_async
def set_operator(staff, tool, policy):
    from profiles_app.services import tool_policy_set

    tool_policy_set(user=staff, tool=tool, policy=policy, reason="house rule")


@database_sync_to_async
def profile_with(user, name, approvals):
    from profiles_app.services import profile_create, profile_update

    profile = profile_create(user=user, name=name)
    return profile_update(user=user, profile=profile, version=profile.version, approvals=approvals)


def as_client(api, user, method):
    """``api(user).<method>`` for an async test (the token is made on a DB thread)."""

    @database_sync_to_async
    def request(*args, **kwargs):
        return getattr(api(user), method)(*args, **kwargs)

    return request


def call(tool, call_id, **arguments):
    return Reply(tool_calls=[(call_id, tool, arguments)])


async def test_allow_for_this_chat_is_stored_survives_a_reload_and_is_revoked_cleanly(
    owner, model, ran, client, password
):
    model.replies.extend([call("guarded", "toolu_1", target="a"), Reply(text="done")])
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)
    await send(socket, {"type": "chat", "text": "go"})
    request = events(await until(socket, ("approval_request",)), "approval_request")[0]
    assert request["data"]["chat_allowable"] is True
    assert request["data"]["policy"]["by"] == "author"

    await send(socket, {"type": "approve", "call_id": "toolu_1", "allow": True, "scope": "chat"})
    frames = await until(socket)
    assert events(frames, "approval_answered")[0]["data"]["scope"] == "chat"
    assert ran == ["guarded:a"]
    assert await allowed_of(session) == ["guarded"]

    # The next turn's call runs without asking, and says why.
    model.replies.extend([call("guarded", "toolu_2", target="b"), Reply(text="done again")])
    await send(socket, {"type": "chat", "text": "again"})
    frames = await until(socket)
    assert events(frames, "approval_request") == []
    result = events(frames, "tool_result")[0]["data"]
    assert result["policy"] == {
        "policy": "auto",
        "by": "chat",
        "why": "you allowed guarded for this chat",
    }
    assert ran == ["guarded:a", "guarded:b"]
    await socket.disconnect()

    # A reload: the page and the inspector show it, from what is stored.
    await database_sync_to_async(client.login)(username="owner", password=password)
    page = await database_sync_to_async(client.get)(f"/chat/{session.pk}/")
    assert "Allowed by you for this chat." in page.content.decode()
    assert "Policy: you allowed guarded for this chat." in page.content.decode()
    inspector = await database_sync_to_async(client.get)(f"/chat/{session.pk}/inspector/")
    assert "Revoke guarded" in inspector.content.decode()

    revoked = await database_sync_to_async(client.post)(
        f"/chat/{session.pk}/inspector/allowed/revoke/", {"tool": "guarded"}, HTTP_HX_REQUEST="true"
    )
    assert "guarded asks again from its next call." in revoked.content.decode()
    assert await allowed_of(session) == []

    model.replies.extend([call("guarded", "toolu_3", target="c"), Reply(text="asked")])
    socket = await open_socket(session.pk, owner)
    await send(socket, {"type": "chat", "text": "once more"})
    await until(socket, ("approval_request",))
    await send(socket, {"type": "approve", "call_id": "toolu_3", "allow": False})
    frames = await until(socket)
    assert events(frames, "tool_result")[0]["data"]["status"] == "denied"
    assert ran == ["guarded:a", "guarded:b"]
    await socket.disconnect()


async def test_an_operators_ask_asks_every_time_whatever_the_person_or_a_crafted_client_sends(
    owner, staff, model, ran, api
):
    await set_operator(staff, "plain", "ask")
    session = await new_session(owner)
    # A crafted PATCH lists the tool as allowed for the chat: the operator's ask still holds.
    patched = await as_client(api, owner, "patch")(
        f"/api/sessions/{session.pk}/",
        {"allowed_tools": ["plain"]},
        format="json",
        HTTP_IF_MATCH=f'"{session.version}"',
    )
    assert patched.status_code == 200, patched.content
    assert patched.json()["allowed_tools"] == ["plain"]
    await profile_with(owner, "mine", {"plain": "auto"})

    model.replies.extend([call("plain", "toolu_p", note="x"), Reply(text="ok")])
    socket = await open_socket(session.pk, owner)
    await send(socket, {"type": "chat", "text": "go", "intent": {"toolset": "mine"}})
    request = events(await until(socket, ("approval_request",)), "approval_request")[0]
    assert request["data"]["policy"] == {
        "policy": "ask",
        "by": "operator",
        "why": "an operator set plain to ask every time: house rule",
    }
    assert request["data"]["chat_allowable"] is False

    await send(socket, {"type": "approve", "call_id": "toolu_p", "allow": True, "scope": "chat"})
    refused = await receive(socket)
    assert (refused["type"], refused["code"]) == ("error", "ask_every_time")
    assert ran == []

    await send(socket, {"type": "approve", "call_id": "toolu_p", "allow": True})
    frames = await until(socket)
    assert events(frames, "tool_result")[0]["data"]["status"] == "ok"
    assert ran == ["plain:x"]
    await socket.disconnect()


async def test_a_persons_profile_lifts_an_authors_ask_and_its_deny_holds_at_the_call(
    owner, model, ran
):
    profile = await profile_with(owner, "trusted", {"guarded": "auto"})
    hold = threading.Event()
    model.replies.extend(
        [
            Reply(
                tool_calls=[("toolu_g", "guarded", {"target": "t"}), ("toolu_p", "plain", {})],
                hold=hold,
            ),
            Reply(text="ok"),
        ]
    )
    session = await new_session(owner, intent={"toolset": "trusted"})
    socket = await open_socket(session.pk, owner)

    # The profile says plain never runs, stored while the turn is on its way (after the
    # array froze): the call is refused all the same.
    @database_sync_to_async
    def deny_plain():
        from profiles_app.services import profile_tool_policy

        profile.refresh_from_db()
        profile_tool_policy(
            user=owner, profile=profile, version=profile.version, tool="plain", policy="deny"
        )

    await send(socket, {"type": "chat", "text": "go"})
    started = events(await until(socket, ("turn_started",)), "turn_started")[0]
    assert "plain" in started["data"]["resident"]
    await deny_plain()
    hold.set()
    frames = await until(socket)

    results = {event["data"]["name"]: event["data"] for event in events(frames, "tool_result")}
    assert events(frames, "approval_request") == []
    assert results["guarded"]["policy"]["by"] == "profile"
    assert results["plain"]["status"] == "vetoed"
    assert results["plain"]["reason"] == "the profile 'trusted' never runs plain"
    assert ran == ["guarded:t"]
    await socket.disconnect()


async def test_a_profiles_deny_leaves_the_array_and_the_inspector_says_why(owner, ran, api):
    await profile_with(owner, "careful", {"plain": "deny"})
    session = await new_session(owner, intent={"toolset": "careful"})
    toolset = await as_client(api, owner, "get")(f"/api/sessions/{session.pk}/toolset/")
    hidden = {row["name"]: row for row in toolset.json()["hidden"]}
    assert hidden["plain"]["layer"] == "L5"
    assert hidden["plain"]["reason"] == "the profile 'careful' never runs it"
    assert "plain" not in [row["name"] for row in toolset.json()["resident"]]


async def test_a_call_that_asks_in_an_unattended_turn_is_denied_at_once(owner, model, ran):
    from agent_app.turns import turn_start

    model.replies.extend([call("guarded", "toolu_u", target="api"), Reply(text="ok")])
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)
    await send(socket, {"type": "resume", "after_seq": 0})
    await turn_start(session=session, text="go", attended=False, channel="api")
    frames = await until(socket)

    assert events(frames, "approval_request") == []
    result = events(frames, "tool_result")[0]["data"]
    assert result["status"] == "denied"
    assert result["reason"] == "it asks a person first, and nobody is watching this turn"
    assert ran == []
    await socket.disconnect()


async def test_a_rest_client_answers_an_approval_as_the_card_does(
    owner, other_user, model, ran, api
):
    model.replies.extend([call("guarded", "toolu_r", target="rest"), Reply(text="ok")])
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)
    await send(socket, {"type": "chat", "text": "go"})
    await until(socket, ("approval_request",))

    path = f"/api/sessions/{session.pk}/approve/"
    stranger = await as_client(api, other_user, "post")(
        path, {"call_id": "toolu_r", "allow": True}, format="json"
    )
    assert stranger.status_code == 404
    bad = await as_client(api, owner, "post")(
        path, {"call_id": "toolu_r", "allow": True, "scope": "forever"}, format="json"
    )
    assert (bad.status_code, bad.json()["code"]) == (400, "invalid")
    answered = await as_client(api, owner, "post")(
        path, {"call_id": "toolu_r", "allow": True, "scope": "chat"}, format="json"
    )
    assert answered.status_code == 204, answered.content
    await until(socket)
    assert ran == ["guarded:rest"]
    assert await allowed_of(session) == ["guarded"]

    again = await as_client(api, owner, "post")(
        path, {"call_id": "toolu_r", "allow": True}, format="json"
    )
    assert (again.status_code, again.json()["code"]) == (409, "unknown_call")
    await socket.disconnect()


async def test_allow_for_this_chat_is_refused_over_rest_where_a_profile_asks_every_time(
    owner, model, ran, api
):
    await profile_with(owner, "strict", {"guarded": "ask"})
    model.replies.extend([call("guarded", "toolu_s", target="s"), Reply(text="ok")])
    session = await new_session(owner, intent={"toolset": "strict"})
    socket = await open_socket(session.pk, owner)
    await send(socket, {"type": "chat", "text": "go"})
    request = events(await until(socket, ("approval_request",)), "approval_request")[0]
    assert request["data"]["policy"]["by"] == "profile"
    assert request["data"]["chat_allowable"] is False

    path = f"/api/sessions/{session.pk}/approve/"
    refused = await as_client(api, owner, "post")(
        path, {"call_id": "toolu_s", "allow": True, "scope": "chat"}, format="json"
    )
    assert (refused.status_code, refused.json()["code"]) == (409, "ask_every_time")
    denied = await as_client(api, owner, "post")(
        path, {"call_id": "toolu_s", "allow": False}, format="json"
    )
    assert denied.status_code == 204
    frames = await until(socket)
    assert events(frames, "tool_result")[0]["data"]["status"] == "denied"
    assert ran == []
    assert await allowed_of(session) == []
    await socket.disconnect()


async def test_two_tabs_answering_at_once_leave_the_log_and_the_allowance_agreeing(
    owner, model, ran
):
    """Deny in one tab and "Allow for this chat" in another, at the same moment: both pass
    the check before either lands. Whichever the turn takes, the card, the tool and the
    chat's allowances agree; a losing "for this chat" stores nothing."""
    import asyncio

    from agent_app.turns import turn_approve

    model.replies.extend([call("guarded", "toolu_race", target="r"), Reply(text="ok")])
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)
    await send(socket, {"type": "chat", "text": "go"})
    await until(socket, ("approval_request",))

    await asyncio.gather(
        turn_approve(session=session, call_id="toolu_race", allow=False),
        turn_approve(session=session, call_id="toolu_race", allow=True, scope="chat"),
        return_exceptions=True,
    )
    frames = await until(socket)

    answered = events(frames, "approval_answered")[0]["data"]
    if answered["outcome"] == "denied":
        assert "scope" not in answered
        assert ran == []
        assert await allowed_of(session) == []
    else:
        assert answered["scope"] == "chat"
        assert ran == ["guarded:r"]
        assert await allowed_of(session) == ["guarded"]
    await socket.disconnect()
