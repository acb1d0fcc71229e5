"""An MCP server asking mid-call, in a chat: its form drawn on the calling tool's card
and answered over the session socket, its sampling request approved by the person and
answered by the chat's model (the fake Messages API over real HTTP), its roots the chat's
own workspace. The server is real (tests/mcp/server.py --asking) over stdio."""

from __future__ import annotations

from pathlib import Path

import pytest
from channels.db import database_sync_to_async

from agent_app import mcp
from agent_app.models import McpServer
from sessions_app.models import ProviderCall
from tests.fakes import Reply
from tests.integration.agent_app.test_mcp_servers import chat, load_then_call, server_row
from tests.integration.chat import events, open_socket, send, until
from tests.integration.tools.test_mcp_client import RAW_SERVER
from tests.mcp import SERVER

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def asking(registry_state, staff, settings, tmp_path):
    """Connects ``ask``, a server whose tools ask mid-call, with the given switches."""
    settings.TOOLHUB_WORKSPACE_ROOT = tmp_path / "workspaces"

    def connect(**switches) -> McpServer:
        return server_row(name="ask", args=[str(SERVER), "--asking"], staff=staff, **switches)

    yield connect
    McpServer.objects.all().delete()
    mcp.mcp_sync(wait=10)


@database_sync_to_async
def new_session(user):
    from sessions_app.services import session_create

    return session_create(user=user)


@database_sync_to_async
def provider_calls(user) -> int:
    return ProviderCall.objects.filter(session__owner=user).count()


def ops_page(user) -> str:
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client.get("/ops/tools/").content.decode()


def result_of(frames) -> dict:
    return next(e for e in events(frames, "tool_result") if e["data"]["name"].startswith("ask"))


@pytest.mark.processes
async def test_a_servers_form_is_drawn_on_the_card_checked_and_the_answer_completes_the_call(
    owner, model, asking
):
    await database_sync_to_async(asking)()
    load_then_call(model, "ask__sign_in_visitor", {})
    socket, asked = await asked_in_a_new_chat(owner, "sign me in", "elicitation_request")
    call_id = asked["data"]["call_id"]
    await send(
        socket,
        {"type": "elicit", "call_id": call_id, "action": "accept", "content": {"age": "old"}},
    )
    refused = await until_error(socket)
    await send(
        socket,
        {
            "type": "elicit",
            "call_id": call_id,
            "action": "accept",
            # As the card posts it: numbers as typed, the checkbox as true or false.
            "content": {"name": "Ada", "age": "36", "colour": "green", "newsletter": True},
        },
    )
    frames = await until(socket, timeout=30)
    await socket.disconnect()

    assert asked["data"]["server"] == "ask"
    assert asked["data"]["message"] == "Who is visiting? (asked by toolhub-test)"
    assert [field["name"] for field in asked["data"]["fields"]] == [
        "name",
        "age",
        "colour",
        "newsletter",
    ]
    assert refused["code"] == "invalid"
    assert refused["ref"] == "elicit"
    assert "Age: must be a number" in refused["message"]
    assert "Name: required" in refused["message"]
    answered = events(frames, "elicitation_answered")[0]["data"]
    assert answered["outcome"] == "accept"
    assert answered["content"] == {"name": "Ada", "age": 36, "colour": "green", "newsletter": True}
    assert result_of(frames)["data"]["content"] == (
        "welcome Ada, 36, who likes green, with newsletter"
    )
    # The model got the result the person's answer made.
    sent = model.requests[2].body["messages"][-1]["content"][0]
    assert "welcome Ada" in str(sent["content"])


async def asked_in_a_new_chat(user, text: str, kind: str):
    """A new chat of ``user``'s, ``text`` sent, up to the first event of ``kind``: the
    open socket and that event."""
    session = await new_session(user)
    socket = await open_socket(session.pk, user)
    await send(socket, {"type": "chat", "text": text})
    return socket, events(await until(socket, (kind,)), kind)[0]


async def until_error(socket) -> dict:
    from tests.integration.chat import receive

    while True:
        frame = await receive(socket, 10)
        if frame["type"] == "error":
            return frame


@pytest.mark.processes
async def test_a_declined_form_tells_the_server_and_the_card_says_so(owner, model, asking):
    await database_sync_to_async(asking)()
    load_then_call(model, "ask__sign_in_visitor", {})
    socket, asked = await asked_in_a_new_chat(owner, "sign me in", "elicitation_request")
    await send(socket, {"type": "elicit", "call_id": asked["data"]["call_id"], "action": "decline"})
    frames = await until(socket, timeout=30)
    await socket.disconnect()

    assert events(frames, "elicitation_answered")[0]["data"]["outcome"] == "decline"
    assert result_of(frames)["data"]["content"] == "no visitor: the person chose decline"


def test_nobody_answers_another_persons_form_or_a_form_that_is_not_waiting(owner, other_user, api):
    from sessions_app.services import session_create

    session = session_create(user=owner)
    body = {"call_id": "t2", "action": "decline"}

    url = f"/api/sessions/{session.pk}/elicit/"

    theirs = api(other_user).post(url, body, format="json")
    stale = api(owner).post(url, body, format="json")

    assert theirs.status_code == 404
    assert stale.status_code == 409
    assert stale.json()["code"] == "unknown_call"


@pytest.mark.processes
async def test_sampling_asks_the_person_then_the_chats_model_and_is_counted(owner, model, asking):
    await database_sync_to_async(asking)(sampling=True)
    model.replies.extend(
        [
            Reply(tool_calls=[("t1", "tool_search", {"query": "select:ask__sum_up"})]),
            Reply(
                tool_calls=[
                    ("t2", "call_tool", {"name": "ask__sum_up", "arguments": {"text": "a saga"}})
                ]
            ),
            Reply(text="A tidy summary."),  # the server's sampling request
            Reply(text="Done."),
        ]
    )
    socket, asked = await asked_in_a_new_chat(owner, "sum it up", "sampling_request")
    seen_before = len(model.requests)
    approve = {"type": "approve", "call_id": asked["data"]["call_id"], "kind": "sampling"}
    await send(socket, {**approve, "allow": True})
    frames = await until(socket, timeout=30)
    await socket.disconnect()

    assert asked["data"]["messages"] == [{"role": "user", "text": "Sum up: a saga"}]
    assert asked["data"]["system"] == "Answer in one short sentence."
    assert seen_before == 2  # the model was not asked before the person said yes
    sampling = model.requests[2].body
    assert sampling["system"][0]["text"] == "Answer in one short sentence."
    assert "tools" not in sampling or sampling["tools"] == []
    assert sampling["max_tokens"] == 200
    assert events(frames, "sampling_result")[0]["data"]["text"] == "A tidy summary."
    assert result_of(frames)["data"]["content"].endswith("said: A tidy summary.")
    assert any(e["data"].get("sampling") for e in events(frames, "usage"))
    assert await provider_calls(owner) == 4


@pytest.mark.processes
async def test_a_denied_sampling_request_never_reaches_the_model(owner, model, asking):
    await database_sync_to_async(asking)(sampling=True)
    load_then_call(model, "ask__sum_up", {"text": "a saga"})
    socket, asked = await asked_in_a_new_chat(owner, "sum it up", "sampling_request")
    approve = {"type": "approve", "call_id": asked["data"]["call_id"], "kind": "sampling"}
    await send(socket, {**approve, "allow": False})
    frames = await until(socket, timeout=30)
    await socket.disconnect()

    result = result_of(frames)["data"]
    assert result["status"] == "error"
    assert "toolhub refused: the person denied it" in result["content"]
    assert len(model.requests) == 3  # two steps, then the answer: no sampling call
    assert events(frames, "sampling_answered")[0]["data"]["outcome"] == "denied"


@pytest.mark.processes
async def test_without_the_operators_switch_sampling_is_refused_without_asking(
    owner, model, asking
):
    await database_sync_to_async(asking)()
    load_then_call(model, "ask__sum_up", {"text": "a saga"})
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)

    frames = await chat(socket, "sum it up")
    await socket.disconnect()

    assert events(frames, "sampling_request") == []
    assert result_of(frames)["data"]["status"] == "error"
    assert len(model.requests) == 3


@pytest.mark.processes
async def test_a_workspace_server_is_told_the_chats_own_workspace(
    owner, staff, model, asking, settings, api
):
    await database_sync_to_async(asking)(workspace_roots=True)
    load_then_call(model, "ask__show_roots", {})
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)

    frames = await chat(socket, "where do you work?")
    await socket.disconnect()

    listed = await database_sync_to_async(lambda: api(staff).get("/api/mcp-servers/").json())()
    ops = await database_sync_to_async(ops_page)(staff)

    workspace = Path(settings.TOOLHUB_WORKSPACE_ROOT) / str(session.pk)
    assert result_of(frames)["data"]["content"] == workspace.as_uri()
    assert listed[0]["workspace_roots"] is True
    assert listed[0]["chats"] == 1
    assert "1 chat or personal connection open here" in ops


def _load_call_then_answer(name: str):
    """The fake model's answer in any chat, from what the chat holds: load ``name``, call
    it, then end. Several chats at once each get their own script."""

    def answer(body: dict) -> Reply:
        done = sum(
            1
            for message in body["messages"]
            if isinstance(message["content"], list)
            for block in message["content"]
            if isinstance(block, dict) and block.get("type") == "tool_result"
        )
        if done == 0:
            return Reply(tool_calls=[("t1", "tool_search", {"query": f"select:{name}"})])
        if done == 1:
            return Reply(tool_calls=[("t2", "call_tool", {"name": name, "arguments": {}})])
        return Reply(text="Done.")

    return answer


@pytest.mark.processes
async def test_two_people_asked_at_once_by_a_handshake_era_stdio_server_each_answer_their_own(
    owner, other_user, model, staff, registry_state, settings, tmp_path
):
    """The raw server's questions name no call, and it answers every call waiting in its
    process with whatever one client replied: over one shared connection both people's
    calls would end with the first answer. Each chat's call has a connection of its own,
    so both forms are open at once, each on its own person's card, and each call ends with
    its own person's answer."""
    settings.TOOLHUB_WORKSPACE_ROOT = tmp_path / "workspaces"
    await database_sync_to_async(server_row)(
        name="raw", args=[str(RAW_SERVER), "--asks"], staff=staff
    )
    model.responder = _load_call_then_answer("raw__ask")
    try:
        mine, asked_me = await asked_in_a_new_chat(owner, "ask me", "elicitation_request")
        theirs, asked_them = await asked_in_a_new_chat(other_user, "ask me", "elicitation_request")
        # Both forms are open now; each person answers their own.
        for socket, asked, name in ((theirs, asked_them, "Bea"), (mine, asked_me, "Ada")):
            answer = {"action": "accept", "content": {"name": name}}
            await send(socket, {"type": "elicit", "call_id": asked["data"]["call_id"], **answer})
        my_frames = await until(mine, timeout=30)
        their_frames = await until(theirs, timeout=30)
        await mine.disconnect()
        await theirs.disconnect()
    finally:
        await database_sync_to_async(McpServer.objects.all().delete)()
        await database_sync_to_async(mcp.mcp_sync)(wait=10)

    mine_result = next(
        e for e in events(my_frames, "tool_result") if e["data"]["name"] == "raw__ask"
    )
    their_result = next(
        e for e in events(their_frames, "tool_result") if e["data"]["name"] == "raw__ask"
    )
    assert mine_result["data"]["content"] == "the client said: accept (Ada)"
    assert their_result["data"]["content"] == "the client said: accept (Bea)"
    assert not events(my_frames, "elicitation_request")  # no second form, nobody else's
    assert not events(their_frames, "elicitation_request")
