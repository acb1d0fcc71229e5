"""Odd bytes and deep JSON at every entry point end cleanly: a NUL or a lone surrogate
from a person, a model or a tool is stored and shown as a visible marker and the turn
ends; JSON nested too deep is a clear error on an open socket or a JSON 400."""

from __future__ import annotations

import json

import pytest
from channels.db import database_sync_to_async

from tests.fakes import Reply
from tests.integration.chat import events, open_socket, receive, until
from toolhub.lib.storable import NUL_MARK, SURROGATE_MARK
from toolhub.tools import function

pytestmark = pytest.mark.django_db(transaction=True)

RAN: list[str] = []


def _echo(text: str) -> str:
    """Echo the text back, with a NUL of its own.

    Args:
        text: Anything.
    """
    RAN.append(text)
    return f"echo\x00{text}"


@pytest.fixture
def echo(registry_state):
    RAN.clear()
    registry_state.register(function(_echo, name="echo_tool", register_globally=False))
    return RAN


@database_sync_to_async
def _session(user):
    from sessions_app.services import session_create

    return session_create(user=user)


def _title(session_id):
    from sessions_app.models import ChatSession

    return ChatSession.objects.get(pk=session_id).title


@database_sync_to_async
def _stored(session_id):
    from sessions_app.models import SessionEvent

    return [
        (row.kind, row.data)
        for row in SessionEvent.objects.filter(session_id=session_id).order_by("seq")
    ]


async def test_a_chat_frame_with_nul_and_a_lone_surrogate_is_stored_with_markers(owner, model):
    model.replies.append(Reply(text="fine"))
    session = await _session(owner)
    socket = await open_socket(session.pk, owner)

    # Written as JSON escapes, as a client can: no UTF-8 text frame can hold them raw.
    await socket.send_to(text_data='{"type": "chat", "text": "a\\u0000b\\ud800c"}')
    frames = await until(socket)

    sent = events(frames, "user_message")[0]["data"]["text"]
    assert sent == f"a{NUL_MARK}b{SURROGATE_MARK}c"
    assert events(frames, "turn_finished")
    assert (await _stored(session.pk))[0] == ("user_message", {"text": sent})
    assert model.requests[0].body["messages"][-1]["content"][0]["text"] == sent
    # The chat's title comes from its first message.
    assert (await database_sync_to_async(_title)(session.pk)) == sent
    await socket.disconnect()


async def test_model_text_and_tool_arguments_with_nul_end_the_turn_with_markers(owner, model, echo):
    model.replies.extend(
        [
            Reply(text="look\x00here", tool_calls=[("toolu_n", "echo_tool", {"text": "x\x00y"})]),
            Reply(text="done"),
        ]
    )
    session = await _session(owner)
    socket = await open_socket(session.pk, owner)

    await socket.send_to(text_data=json.dumps({"type": "chat", "text": "go"}))
    frames = await until(socket)

    assert echo == [f"x{NUL_MARK}y"]
    assert events(frames, "assistant_message")[0]["data"]["text"] == f"look{NUL_MARK}here"
    result = events(frames, "tool_result")[0]["data"]
    assert (result["status"], result["content"]) == ("ok", f"echo{NUL_MARK}x{NUL_MARK}y")
    assert events(frames, "turn_finished")[0]["data"]["reason"] == "end_turn"
    stored = await _stored(session.pk)
    assert [kind for kind, _ in stored][-1] == "turn_finished"
    assert ("tool_result", result) in stored
    await socket.disconnect()


def _odd(text: str) -> str:
    """Answer with a lone surrogate, as a tool decoding odd bytes can.

    Args:
        text: Anything.
    """
    return f"odd\ud800{text}"


async def test_a_tool_result_with_a_lone_surrogate_reaches_the_model_with_the_marker(
    owner, model, registry_state
):
    registry_state.register(function(_odd, name="odd_tool", register_globally=False))
    model.replies.extend(
        [Reply(tool_calls=[("toolu_o", "odd_tool", {"text": "x"})]), Reply(text="done")]
    )
    session = await _session(owner)
    socket = await open_socket(session.pk, owner)

    await socket.send_to(text_data=json.dumps({"type": "chat", "text": "go"}))
    frames = await until(socket)

    # Not UTF-8 encodable, so no request body could carry it raw: the turn went on.
    assert events(frames, "turn_finished")[0]["data"]["reason"] == "end_turn"
    result = model.requests[1].body["messages"][-1]["content"][0]
    assert result["content"] == f"odd{SURROGATE_MARK}x"
    assert events(frames, "tool_result")[0]["data"]["content"] == result["content"]
    await socket.disconnect()


@pytest.mark.parametrize(
    "frame",
    ["[" * 10_000, '{"type": "chat", "text": "hi", "intent": ' + "[" * 100 + "]" * 100 + "}"],
    ids=["bare", "inside-a-chat"],
)
async def test_a_deeply_nested_frame_gets_bad_json_and_the_socket_stays_open(owner, frame):
    session = await _session(owner)
    socket = await open_socket(session.pk, owner)

    await socket.send_to(text_data=frame)
    refused = await receive(socket)
    await socket.send_to(text_data=json.dumps({"type": "resume", "after_seq": 0}))
    await socket.send_to(text_data=json.dumps({"type": "cancel"}))
    after = await receive(socket)

    assert (refused["type"], refused["code"]) == ("error", "bad_json")
    assert "nested deeper than" in refused["message"]
    assert (after["type"], after["code"]) == ("error", "no_turn")
    await socket.disconnect()


def test_a_rest_body_nested_fifty_thousand_deep_is_a_json_400(api, owner):
    response = api(owner).generic(
        "POST", "/api/sessions/", "[" * 50_000, content_type="application/json"
    )

    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert "nested deeper than" in response.json()["message"]


@pytest.mark.parametrize("title", ["plan\\u0000trip", "plan\\udfff"], ids=["nul", "surrogate"])
def test_a_rest_title_with_nul_or_a_lone_surrogate_is_refused_saying_why(api, owner, title):
    from sessions_app.models import ChatSession

    response = api(owner).post(
        "/api/sessions/", f'{{"title": "{title}"}}', content_type="application/json"
    )

    assert response.status_code == 400
    assert response.json()["code"] == "invalid"
    assert "characters are not allowed" in json.dumps(response.json()["fields"]["title"])
    assert not ChatSession.objects.exists()


def test_a_title_given_to_the_service_keeps_the_marker(owner):
    from sessions_app.services import session_create

    session = session_create(user=owner, title="plan\x00trip\ud800")

    session.refresh_from_db()
    assert session.title == f"plan{NUL_MARK}trip{SURROGATE_MARK}"


async def test_events_that_cannot_be_stored_never_keep_the_turn_from_ending(
    owner, model, monkeypatch
):
    from django.db import DataError

    import agent_app.turns.events as events_module

    real = events_module.persist

    def refusing(**kwargs):
        # A database that refuses this one message, whatever else comes with it.
        if any(data.get("text") == "unstorable" for _, data in kwargs["items"]):
            raise DataError("refused by the database")
        return real(**kwargs)

    monkeypatch.setattr(events_module, "persist", refusing)
    model.replies.extend([Reply(text="unstorable"), Reply(text="next answer")])
    session = await _session(owner)
    socket = await open_socket(session.pk, owner)

    await socket.send_to(text_data=json.dumps({"type": "chat", "text": "first"}))
    failed = await until(socket)
    await socket.send_to(text_data=json.dumps({"type": "chat", "text": "second"}))
    answered = await until(socket)

    assert events(failed)[-1]["kind"] == "turn_failed"
    assert events(answered, "assistant_message")[0]["data"]["text"] == "next answer"
    kinds = [kind for kind, _ in await _stored(session.pk)]
    assert kinds.count("turn_failed") == 1
    assert kinds[-1] == "turn_finished"
    await socket.disconnect()
