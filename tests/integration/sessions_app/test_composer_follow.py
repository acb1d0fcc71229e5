"""The composer's "follow" choice over the session socket: a chat frame whose ``enabled``
or ``web_search`` is null clears the chat's override, so the agent and the profile decide
again, from that very turn (the fake Messages API records what the model was offered)."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async

from tests.integration.chat import open_socket, send, until

pytestmark = pytest.mark.django_db(transaction=True)


@database_sync_to_async
def _session_with_agent(user, *, agent_intent, intent):
    from profiles_app.models import Agent
    from sessions_app.services import session_create

    agent = Agent.objects.create(owner=user, name="quiet", tool_intent=agent_intent)
    return session_create(user=user, agent=agent.pk, intent=intent)


@database_sync_to_async
def _stored_intent(session):
    session.refresh_from_db()
    return session.tool_intent


async def _chat(socket, text, intent):
    await send(socket, {"type": "chat", "text": text, "intent": intent})
    await until(socket)


def _offered(request) -> list[str]:
    return [tool["name"] for tool in request.body.get("tools", [])]


async def test_tools_on_follow_after_a_stored_off_let_the_agents_off_hold(owner, model):
    session = await _session_with_agent(
        owner, agent_intent={"enabled": False}, intent={"enabled": False}
    )
    socket = await open_socket(session.pk, owner)

    await _chat(socket, "tools on", {"toolset": None, "enabled": True, "web_search": None})
    on_intent = await _stored_intent(session)
    await _chat(socket, "follow", {"toolset": None, "enabled": None, "web_search": None})

    assert on_intent["enabled"] is True
    assert (await _stored_intent(session))["enabled"] is None
    tools_on, followed = model.requests
    assert "current_time" in _offered(tools_on)
    assert _offered(followed) == []
    await socket.disconnect()


async def test_web_search_on_follow_under_research_offers_web_search(owner, model, monkeypatch):
    monkeypatch.setenv("BRAVE_API_KEY", "test-key")
    session = await _session_with_agent(
        owner, agent_intent={}, intent={"toolset": "research", "web_search": False}
    )
    socket = await open_socket(session.pk, owner)

    await _chat(socket, "off", {"toolset": "research", "enabled": None, "web_search": False})
    await _chat(socket, "follow", {"toolset": "research", "enabled": None, "web_search": None})

    stored = await _stored_intent(session)
    assert (stored["toolset"], stored["web_search"]) == ("research", None)
    off, followed = model.requests
    assert "web_search" not in _offered(off)
    assert "web_fetch" in _offered(off)
    assert "web_search" in _offered(followed)
    await socket.disconnect()
