"""The built-in tools against the database through the apps' adapters."""

from __future__ import annotations

import pytest

from agent_app.models import Note
from sessions_app import services
from sessions_app.models import ChatSession, SessionEvent
from toolhub.tools import get

pytestmark = pytest.mark.django_db


async def _run(tool, session, **args):
    from asgiref.sync import sync_to_async

    ctx = await sync_to_async(services.session_context)(session=session)
    return await get(tool).execute(args, ctx)


@pytest.fixture
def session(owner):
    return ChatSession.objects.select_related("agent").get(
        pk=services.session_create(user=owner).pk
    )


@pytest.mark.django_db(transaction=True)
async def test_remember_and_recall_keep_notes_per_person(session, other_user):
    from asgiref.sync import sync_to_async

    other = await sync_to_async(
        lambda: ChatSession.objects.select_related("agent").get(
            pk=services.session_create(user=other_user).pk
        )
    )()

    await _run("remember", session, text="The owner prefers tea")
    await _run("remember", other, text="The other prefers coffee")
    mine = await _run("recall", session, query="prefers")

    assert mine.content.startswith("- The owner prefers tea")
    assert "coffee" not in mine.content
    assert await Note.objects.acount() == 2


@pytest.mark.django_db(transaction=True)
async def test_send_message_posts_into_the_persons_other_session_only(session, owner, other_user):
    from asgiref.sync import sync_to_async

    mine = await sync_to_async(services.session_create)(user=owner)
    theirs = await sync_to_async(services.session_create)(user=other_user)

    sent = await _run("send_message", session, session_id=str(mine.pk), text="done")
    refused = await _run("send_message", session, session_id=str(theirs.pk), text="hi")
    nonsense = await _run("send_message", session, session_id="not-a-uuid", text="hi")

    assert sent.content == f"sent to session {mine.pk} (event 1)"
    event = await SessionEvent.objects.aget(session_id=mine.pk)
    assert (event.kind, event.data["text"]) == ("user_message", "done")
    assert refused.is_error
    assert nonsense.is_error
    assert not await SessionEvent.objects.filter(session_id=theirs.pk).aexists()


@pytest.mark.django_db(transaction=True)
async def test_list_agents_and_plan_mode_through_the_adapters(session):
    agents = await _run("list_agents", session)
    switched = await _run("enter_plan_mode", session)

    assert '"name":"default"' in agents.content
    assert "Plan mode is on" in switched.content
    assert (await ChatSession.objects.aget(pk=session.pk)).plan_mode is True


@pytest.mark.django_db(transaction=True)
async def test_plan_mode_switched_by_a_tool_tells_the_chats_open_pages(session, owner):
    from asgiref.sync import sync_to_async

    from sessions_app.eventlog import events_append
    from tests.integration.chat import open_socket, receive, send

    # A stored message, so the page's resume is seen done (its replay) before the switch:
    # news reaches a socket once it resumed.
    await sync_to_async(events_append)(
        session_id=session.pk, turn="t1", items=[("user_message", {"text": "plan first"})]
    )
    socket = await open_socket(session.pk, owner)
    await send(socket, {"type": "resume", "after_seq": 0, "render": True})
    assert (await receive(socket))["kind"] == "user_message"

    await _run("enter_plan_mode", session)

    # As when a person switches it: the page draws its options, and the chip, again.
    assert await receive(socket) == {"type": "options_changed", "tab": ""}
    await socket.disconnect()
